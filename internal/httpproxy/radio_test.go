package httpproxy

import (
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRadioOptions sets the radio socket options on a real loopback TCP
// connection and reads them back from the kernel.
func TestRadioOptions(t *testing.T) {
	allowed, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
	cc := "reno" // always built in, always allowed
	if !strings.Contains(string(allowed), cc) {
		t.Skipf("reno not in tcp_allowed_congestion_control (%q)", allowed)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			defer c.Close()
			c.Read(make([]byte, 1))
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := RadioOptions{Congestion: cc, NotsentLowat: 16384, MaxPacingRate: 125000}
	if err := o.apply(c); err != nil {
		t.Fatal(err)
	}
	rc, _ := c.(*net.TCPConn).SyscallConn()
	rc.Control(func(fd uintptr) {
		if got, err := unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION); err != nil || strings.TrimRight(got, "\x00") != cc {
			t.Errorf("TCP_CONGESTION %q, %v", got, err)
		}
		if got, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT); err != nil || got != 16384 {
			t.Errorf("TCP_NOTSENT_LOWAT %d, %v", got, err)
		}
		if got, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE); err != nil || got != 125000 {
			t.Errorf("SO_MAX_PACING_RATE %d, %v", got, err)
		}
	})
	if err := (RadioOptions{Congestion: "no-such-cc"}).apply(c); err == nil {
		t.Error("an unknown congestion control was accepted")
	}
}
