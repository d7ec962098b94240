package topo

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func fixed() Config {
	c := Default()
	c.Prefix = "peptb-1-1"
	return c
}

func TestPlanGolden(t *testing.T) {
	wired := fixed()
	wired.WiredEmulated = true
	for _, tc := range []struct {
		name   string
		cfg    Config
		bridge bool
	}{
		{"default", fixed(), false},
		{"bridge", fixed(), true},
		{"wired", wired, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			for _, c := range Plan(tc.cfg, tc.bridge) {
				b.WriteString(c.String() + "\n")
			}
			b.WriteString("# teardown\n")
			for _, c := range TeardownPlan(tc.cfg) {
				b.WriteString(c.String() + "\n")
			}
			golden := filepath.Join("testdata", "plan-"+tc.name+".txt")
			if *update {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != string(want) {
				t.Errorf("plan differs from %s (go test -update to accept):\n%s", golden, b.String())
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"ok", func(*Config) {}, ""},
		{"empty prefix", func(c *Config) { c.Prefix = "" }, `topo: prefix "": want 1 to 40 characters`},
		{"mn not ipv4", func(c *Config) { c.MN = netip.MustParseAddr("2001:db8::2") }, `topo: mn: "2001:db8::2" is not an IPv4 address`},
		{"radio hosts apart", func(c *Config) { c.RadioBits = 30; c.GWRadio = c.Core }, "topo: radio link: 198.18.0.2 and 198.18.1.2 are not two hosts of one /30"},
		{"overlap", func(c *Config) { c.WiredBits = 16 }, "topo: radio 198.18.0.0/24, wired 198.18.0.0/16 and origins 198.19.0.0/16 must not overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fixed()
			tc.mod(&c)
			err := c.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Validate() = %q, want %q", got, tc.want)
			}
		})
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces (run: sudo go test ./testbed/topo)")
	}
	for _, b := range []string{"ip", "ethtool"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s: %v", b, err)
		}
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestUpReachCloseNothingLeft builds a bridged testbed, checks that mn
// reaches core's address, an origin address (AnyIP) and the VIP, that the
// resolver file is in place, then that Close leaves no namespace, no
// /etc/netns folder and no process behind.
func TestUpReachCloseNothingLeft(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	c := Default()
	top, err := Up(ctx, c, true, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()

	// Congestion control read back from each namespace where TCP ends:
	// CUBIC, not the host's default every new namespace inherits.
	for _, r := range c.CCs() {
		if got, err := ReadCC(r.NS); err != nil || got != "cubic" {
			t.Errorf("%s (%s): congestion control %q, %v; want cubic", r.Role, r.NS, got, err)
		}
	}

	// A listener in core on every origin address (AnyIP route) and one
	// in gw on the VIP.
	var coreLn, gwLn net.Listener
	if err := Do(c.CoreNS(), func() (err error) { coreLn, err = net.Listen("tcp4", "0.0.0.0:8080"); return }); err != nil {
		t.Fatal(err)
	}
	defer coreLn.Close()
	if err := Do(c.GWNS(), func() (err error) { gwLn, err = net.Listen("tcp4", c.VIP.String()+":8080"); return }); err != nil {
		t.Fatal(err)
	}
	defer gwLn.Close()
	for _, ln := range []net.Listener{coreLn, gwLn} {
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				conn.Write([]byte(conn.LocalAddr().String()))
				conn.Close()
			}
		}()
	}
	for _, tc := range []struct{ name, dst, want string }{
		{"core", "198.18.1.2:8080", "198.18.1.2:8080"},
		{"origin anyip", "198.19.7.9:8080", "198.19.7.9:8080"},
		{"vip", "192.0.2.12:8080", "192.0.2.12:8080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conn net.Conn
			if err := Do(c.MNNS(), func() (err error) { conn, err = net.DialTimeout("tcp4", tc.dst, 5*time.Second); return }); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 64)
			n, _ := conn.Read(buf)
			if got := string(buf[:n]); got != tc.want {
				t.Errorf("server saw local address %q, want %q", got, tc.want)
			}
		})
	}

	// resolv.conf as seen by a process in mn.
	p, err := top.Start("cat", c.MNNS(), "", "cat", "/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if !strings.Contains(p.Output(), "nameserver 198.18.1.2\n") {
		t.Errorf("mn resolv.conf = %q, want nameserver 198.18.1.2", p.Output())
	}

	sleeper, err := top.Start("sleep", c.GWNS(), "", "sleep", "600")
	if err != nil {
		t.Fatal(err)
	}
	if err := top.Close(); err != nil {
		t.Fatal(err)
	}
	if left := Leftovers(os.Getpid()); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if err := syscall.Kill(sleeper.Pid(), 0); err == nil {
		t.Errorf("process %d in gw still runs after Close", sleeper.Pid())
	}
	if left := Processes(os.Getpid()); len(left) > 0 {
		t.Errorf("processes naming the testbed still run: %v", left)
	}
}

// TestUpFailureCleansUp makes the plan fail part way (the core's namespace
// name is already taken) and checks that Up removes what it had built and
// leaves the name it did not create alone.
func TestUpFailureCleansUp(t *testing.T) {
	needRoot(t)
	c := Default()
	if err := Run(context.Background(), []Cmd{{"ip", "netns", "add", c.CoreNS()}}); err != nil {
		t.Fatal(err)
	}
	defer exec.Command("ip", "netns", "del", c.CoreNS()).Run()
	_, err := Up(context.Background(), c, true, testLogger(t))
	if err == nil {
		t.Fatal("Up succeeded with a namespace name already taken")
	}
	if !strings.Contains(err.Error(), `"ip netns add `+c.CoreNS()+`"`) {
		t.Errorf("error %q does not name the failing command", err)
	}
	left := Leftovers(os.Getpid())
	if len(left) != 1 || left[0] != filepath.Join(NetnsRunDir, c.CoreNS()) {
		t.Errorf("left behind after a failed Up: %v, want only the pre-existing %s", left, c.CoreNS())
	}
}

// TestSweep checks that Sweep removes a namespace whose run's pid is gone
// and keeps one whose pid lives.
func TestSweep(t *testing.T) {
	needRoot(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadNS := "peptb-" + itoa(dead.Process.Pid) + "-1-mn"
	liveNS := "peptb-" + itoa(os.Getpid()) + "-999-mn"
	if err := Run(context.Background(), []Cmd{{"ip", "netns", "add", deadNS}, {"ip", "netns", "add", liveNS}}); err != nil {
		t.Fatal(err)
	}
	defer exec.Command("ip", "netns", "del", liveNS).Run()
	defer exec.Command("ip", "netns", "del", deadNS).Run()
	removed, err := Sweep()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(NetnsRunDir, deadNS)
	found := false
	for _, r := range removed {
		if r == want {
			found = true
		}
		if strings.Contains(r, liveNS) {
			t.Errorf("Sweep removed %s of a live run", r)
		}
	}
	if !found {
		t.Errorf("Sweep removed %v, want it to include %s", removed, want)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestGatewayRadioTCP builds a testbed with the gateway's radio-side TCP
// set (initial window 40 segments, no slow-start restart after idle) and
// one with the kernel's defaults, and reads both back from a connection
// the gateway accepted from mn: ss(8)'s cwnd on gw's side, and gw's
// net.ipv4.tcp_slow_start_after_idle.
func TestGatewayRadioTCP(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skipf("needs ss: %v", err)
	}
	for _, tc := range []struct {
		name           string
		initcwnd, ssai int
		ports          []uint16
		wantCwnd       map[int]string // by the gateway's listening port
	}{
		{"set", 40, 0, nil, map[int]string{8081: "cwnd:40", 8082: "cwnd:40"}},
		{"one port", 40, 0, []uint16{8082}, map[int]string{8081: "cwnd:10", 8082: "cwnd:40"}},
		{"kernel defaults", 0, 1, nil, map[int]string{8081: "cwnd:10", 8082: "cwnd:10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.GWInitCwnd, c.GWSlowStartAfterIdle, c.GWInitCwndPorts = tc.initcwnd, tc.ssai, tc.ports
			top, err := Up(context.Background(), c, true, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer top.Close()
			for port, want := range tc.wantCwnd {
				addr := c.VIP.String() + ":" + strconv.Itoa(port)
				var ln net.Listener
				if err := Do(c.GWNS(), func() (err error) { ln, err = net.Listen("tcp4", addr); return }); err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				accepted := make(chan net.Conn, 1)
				go func() {
					if conn, err := ln.Accept(); err == nil {
						accepted <- conn
					}
				}()
				var conn net.Conn
				if err := Do(c.MNNS(), func() (err error) { conn, err = net.DialTimeout("tcp4", addr, 5*time.Second); return }); err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				select {
				case sc := <-accepted:
					defer sc.Close()
				case <-time.After(5 * time.Second):
					t.Fatal("gw accepted nothing")
				}
				out, err := exec.Command("ip", "netns", "exec", c.GWNS(), "ss", "-tin", "state", "established", "src", addr).CombinedOutput()
				if err != nil {
					t.Fatalf("ss: %v\n%s", err, out)
				}
				if !strings.Contains(string(out), want+" ") {
					t.Errorf("gw's connection accepted on port %d: want %s in\n%s", port, want, out)
				}
			}
			iw, ssai, err := ReadGWTCP(c)
			if err != nil || iw != tc.initcwnd || ssai != tc.ssai {
				t.Errorf("ReadGWTCP = initcwnd %d, tcp_slow_start_after_idle %d, %v; want %d, %d", iw, ssai, err, tc.initcwnd, tc.ssai)
			}
		})
	}
}
