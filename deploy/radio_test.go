package deploy

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRadioInitCwnd checks docs/operations.md, "The radio leg's TCP",
// against the kernel behind the shipped ruleset: with the documented table
// (the subscriber route plus initcwnd 40) and rule (from the VIP, TCP
// source port 443), a connection TPROXY steers from VIP:443 to pepd's TLS
// listener starts with a window of 40 segments, while one steered from
// VIP:80 to the HTTP listener keeps the kernel's 10. It reads the window of
// the accepted connection with ss(8) in the gateway.
func TestRadioInitCwnd(t *testing.T) {
	needRoot(t)
	tp := newTopo(t)
	tp.loadRuleset(t, Ruleset)
	tp.gw.ip(t, "route", "add", "198.18.0.0/24", "dev", "sub0", "src", gwSubAddr, "initcwnd", "40", "table", "101")
	tp.gw.ip(t, "rule", "add", "from", testVIP, "ipproto", "tcp", "sport", "443", "lookup", "101", "priority", "100")
	for _, c := range []struct {
		vipPort, listenPort int
		want                string
	}{
		{443, tlsPort, "cwnd:40"},
		{80, tproxyPort, "cwnd:10"},
	} {
		t.Run(strconv.Itoa(c.vipPort), func(t *testing.T) {
			l := tp.gw.listen(t, ":"+strconv.Itoa(c.listenPort), true)
			defer l.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				if conn, err := l.Accept(); err == nil {
					accepted <- conn
				}
			}()
			var conn net.Conn
			if err := tp.client.do(func() (err error) {
				conn, err = net.DialTimeout("tcp4", testVIP+":"+strconv.Itoa(c.vipPort), 2*time.Second)
				return
			}); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			select {
			case sc := <-accepted:
				defer sc.Close()
				if got := sc.LocalAddr().String(); got != testVIP+":"+strconv.Itoa(c.vipPort) {
					t.Fatalf("accepted connection's local address %s, want the VIP's (TPROXY)", got)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("pepd's listener accepted nothing")
			}
			out := tp.gw.exec(t, "ss", "-tin", "state", "established", "src", testVIP+":"+strconv.Itoa(c.vipPort))
			if !strings.Contains(out, c.want+" ") {
				t.Errorf("connection to VIP:%d: want %s in\n%s", c.vipPort, c.want, out)
			}
		})
	}
}
