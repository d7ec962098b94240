// Package squidtest starts a real Squid for a test on this machine's
// loopback (no network namespace), with internal/squid's steps:
// configs/squid.conf rendered into a temporary folder, `squid -z`, then
// Squid in the foreground until the test ends. Tests of internal/squid
// and internal/httpproxy use it; the testbed and deploy's tests run their
// Squids in namespaces with the same steps (internal/squid).
package squidtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pep/internal/squid"
	"pep/internal/testenv"
)

// Squid is a running Squid.
type Squid struct {
	// Addr is its address for pepd, 127.A.B.C:port (Conf.Listen).
	Addr string
	// LogDir holds access.log and cache.log (and the rendered squid.conf).
	LogDir string
	// ProxyProtocol: its port wants a PROXY header (squid.Conf.ProxyProtocol).
	ProxyProtocol bool
	// Cmd is the Squid process (squid -N: one process, no master and kid).
	Cmd *exec.Cmd
}

// seq numbers the Squids a test process starts (service names).
var seq atomic.Int32

// Start renders configs/squid.conf with c and extra lines appended, and
// runs Squid until t ends. It fills in c's Listen (a free loopback address, testenv.FreeAddr),
// CacheDir, LogDir and PidFile (a temporary folder), CacheDirMB and
// CacheMemMB (dirMB, memMB: megabytes), ShutdownSeconds (0), and User
// ("proxy" when empty). It returns once Squid accepts on Addr (30 s at
// most, scaled by testenv), failing t with cache.log if Squid exits first
// or does not accept in time; at the end of t Squid gets SIGINT, then
// SIGKILL after 10 s. It skips t when squid is not installed.
func Start(t testing.TB, c squid.Conf, extra string, dirMB, memMB int) *Squid {
	t.Helper()
	bin, err := exec.LookPath("squid")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/squid"); err != nil {
			t.Skip("squid not installed (apt-get install -y squid; make deps)")
		}
	}
	dir, err := os.MkdirTemp("", "pep-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) // Squid's user must get through to its folders
	// An address of its own (testenv.FreeAddr), not a port of 127.0.0.1:
	// Squid binds it a second later, after squid -z, and a port of
	// 127.0.0.1 may be some loopback connection's local port by then.
	c.Listen = testenv.FreeAddr(t)
	c.CacheDir, c.LogDir, c.PidFile = filepath.Join(dir, "cache"), dir, filepath.Join(dir, "squid.pid")
	c.CacheDirMB, c.CacheMemMB, c.ShutdownSeconds = dirMB, memMB, 0
	if c.User == "" {
		c.User = "proxy"
	}
	tmpl, _, err := squid.ReadTemplate()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "squid.conf")
	if err := squid.WriteConf(conf, tmpl, c, extra); err != nil {
		t.Fatal(err)
	}
	if err := squid.MakeDirs(c, false); err != nil {
		t.Fatal(err)
	}
	// A service name of its own: Squid's shared memory segments are named
	// after it in /dev/shm, which other tests' Squids share.
	service := squid.Service(fmt.Sprintf("test%dx%d", os.Getpid(), seq.Add(1)))
	if out, err := exec.Command(bin, squid.InitArgs(service, conf)...).CombinedOutput(); err != nil {
		t.Fatalf("squid -z: %v\n%s", err, out)
	}
	// Stopped when t ends: SIGINT, SIGKILL 10 s later (os/exec's Cancel
	// and WaitDelay).
	ctx, stop := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, squid.RunArgs(service, conf)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		stop()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { stop(); <-exited })
	s := &Squid{Addr: c.Listen, LogDir: dir, ProxyProtocol: c.ProxyProtocol, Cmd: cmd}
	// Squid has no readiness signal: it accepts on its port once it has
	// finished starting.
	deadline := time.Now().Add(testenv.Scale(30 * time.Second))
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		if conn, err := net.Dial("tcp", s.Addr); err == nil {
			conn.Close()
			return s
		}
		select {
		case <-exited:
			t.Fatalf("squid exited: %v\n%s", cmd.ProcessState, s.log("cache.log"))
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			t.Fatalf("squid did not start listening on %s within 30s\n%s", s.Addr, s.log("cache.log"))
		}
	}
}

func (s *Squid) log(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.LogDir, name))
	return string(b)
}

// AccessLog returns the lines of Squid's access.log so far (one "" when
// there are none), failing t when it cannot be read.
func (s *Squid) AccessLog(t testing.TB) []string {
	b, err := os.ReadFile(filepath.Join(s.LogDir, "access.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}
