package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"pep/internal/testenv"
)

// unit emulates what systemd 252 (src/core/service.c) does for a service
// with Type=notify, NotifyAccess=main, WatchdogSec=, Restart=on-failure,
// RestartSec=, WatchdogSignal=SIGABRT and TimeoutAbortSec=, which is how
// deploy/systemd/pepd.service runs pepd; this machine has no systemd as
// PID 1 to do it for real.
//
//   - Each start gets NOTIFY_SOCKET (a unixgram socket the unit owns, with
//     SO_PASSCRED so that it knows the sender), WATCHDOG_USEC and
//     WATCHDOG_PID (the main PID: a shell sets it to $$ and execs the
//     command, so the PID survives).
//   - Messages from other PIDs are ignored (NotifyAccess=main). READY=1 ends
//     start-up and arms the watchdog ("activated when the start-up is
//     completed", systemd.service(5)); WATCHDOG=1 re-arms it;
//     WATCHDOG=trigger fires it at once.
//   - Watchdog timeout: the watchdog signal, then SIGCONT (so that a stopped
//     process handles it, as unit_kill_context does), then SIGKILL after
//     TimeoutAbortSec.
//   - Exit: restart after RestartSec unless it was a clean exit (status 0,
//     or SIGHUP, SIGINT, SIGTERM, SIGPIPE) and the watchdog did not fire.
type unit struct {
	t        *testing.T
	argv     []string // the command; run as `sh -c 'WATCHDOG_PID=$$ exec "$@"'`
	env      []string
	watchdog time.Duration // WatchdogSec
	abort    time.Duration // TimeoutAbortSec
	restart  time.Duration // RestartSec

	sock *net.UnixConn
	path string

	mu      sync.Mutex
	pid     int
	events  []event
	readyC  chan int // gets the PID at each READY=1
	stopped bool
	done    chan struct{}
}

// event is one thing the unit saw, for the test's timeline.
type event struct {
	at   time.Time
	what string // "start", "ready", "watchdog", "exit", "kill"
	pid  int
	info string
	// armed is, for "watchdog", when the timer that fired was last armed
	// (READY=1 or the last WATCHDOG=1).
	armed time.Time
}

func newUnit(t *testing.T, watchdog, abort, restart time.Duration, env []string, argv ...string) *unit {
	t.Helper()
	dir, err := os.MkdirTemp("", "pep6notify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	u := &unit{t: t, argv: argv, env: env, watchdog: watchdog, abort: abort, restart: restart,
		path: filepath.Join(dir, "notify"), readyC: make(chan int, 16), done: make(chan struct{})}
	u.sock, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: u.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := u.sock.SyscallConn()
	rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1) })
	return u
}

func (u *unit) log(what string, pid int, info string) {
	u.logArmed(what, pid, info, time.Time{})
}

// logArmed is log for the watchdog event, which carries when the timer
// that fired was armed.
func (u *unit) logArmed(what string, pid int, info string, armed time.Time) {
	u.mu.Lock()
	u.events = append(u.events, event{time.Now(), what, pid, info, armed})
	u.mu.Unlock()
	u.t.Logf("unit: %s pid=%d %s", what, pid, info)
}

// mainPID returns the running main PID, 0 if none.
func (u *unit) mainPID() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.pid
}

// run starts the service and supervises it until stop.
func (u *unit) run() {
	msgs := make(chan ucredMsg, 64)
	go u.readNotify(msgs)
	go func() {
		defer close(u.done)
		for {
			exit := u.once(msgs)
			u.mu.Lock()
			stopped := u.stopped
			u.mu.Unlock()
			if stopped || !exit.restart {
				return
			}
			time.Sleep(u.restart) // RestartSec: systemd's own timer
		}
	}()
}

type ucredMsg struct {
	pid  int
	text string
}

func (u *unit) readNotify(out chan<- ucredMsg) {
	buf := make([]byte, 4096)
	oob := make([]byte, syscall.CmsgSpace(syscall.SizeofUcred))
	for {
		n, oobn, _, _, err := u.sock.ReadMsgUnix(buf, oob)
		if err != nil {
			close(out)
			return
		}
		pid := 0
		if cms, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, cm := range cms {
				if cred, err := syscall.ParseUnixCredentials(&cm); err == nil {
					pid = int(cred.Pid)
				}
			}
		}
		out <- ucredMsg{pid, string(buf[:n])}
	}
}

type exitInfo struct{ restart bool }

// once runs one instance of the service to its end.
func (u *unit) once(msgs <-chan ucredMsg) exitInfo {
	cmd := exec.Command("sh", append([]string{"-c", `WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$@"`, "sh"}, u.argv...)...)
	cmd.Env = append(os.Environ(), u.env...)
	cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+u.path,
		"WATCHDOG_USEC="+strconv.FormatInt(u.watchdog.Microseconds(), 10))
	cmd.Stdout, cmd.Stderr = tlogWriter{u.t, "service"}, tlogWriter{u.t, "service"}
	if err := cmd.Start(); err != nil {
		u.t.Errorf("unit: start: %v", err)
		return exitInfo{}
	}
	pid := cmd.Process.Pid
	u.mu.Lock()
	u.pid = pid
	u.mu.Unlock()
	u.log("start", pid, strings.Join(u.argv, " "))
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var wd <-chan time.Time // nil until READY=1
	var wdTimer *time.Timer
	var armed time.Time // when wdTimer was last (re)armed: READY=1 or WATCHDOG=1
	fired := false
	var killAt <-chan time.Time
	handle := func(m ucredMsg) {
		if m.pid != pid { // NotifyAccess=main
			return
		}
		for _, line := range strings.Split(m.text, "\n") {
			switch line {
			case "READY=1":
				u.log("ready", pid, "")
				select {
				case u.readyC <- pid:
				default:
				}
				armed = time.Now()
				wdTimer = time.NewTimer(u.watchdog)
				wd = wdTimer.C
			case "WATCHDOG=1":
				if wdTimer != nil && !fired {
					armed = time.Now()
					wdTimer.Reset(u.watchdog)
				}
			case "WATCHDOG=trigger":
				if wdTimer != nil && !fired {
					wdTimer.Reset(0)
				}
			}
		}
	}
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			handle(m)
		case <-wd:
			fired, wd = true, nil
			u.logArmed("watchdog", pid, fmt.Sprintf("timeout (limit %s), SIGABRT then SIGCONT", u.watchdog), armed)
			syscall.Kill(pid, syscall.SIGABRT)
			syscall.Kill(pid, syscall.SIGCONT)
			killAt = time.After(u.abort)
		case <-killAt:
			u.log("kill", pid, "TimeoutAbortSec passed: SIGKILL")
			syscall.Kill(pid, syscall.SIGKILL)
		case err := <-exited:
			// What the service sent before it exited is handled first
			// (systemd reads the notify socket before SIGCHLD): a READY=1
			// followed at once by exit(0) must not be lost to this select.
			u.drain(msgs, handle)
			if wdTimer != nil {
				wdTimer.Stop()
			}
			u.mu.Lock()
			u.pid = 0
			u.mu.Unlock()
			u.log("exit", pid, fmt.Sprint(err))
			return exitInfo{restart: fired || !cleanExit(err)}
		}
	}
}

// cleanExit says whether systemd counts the exit as success for
// Restart=on-failure: status 0 or one of the clean signals.
// drain hands to handle every notify message the socket holds, up to a
// barrier datagram the harness sends itself now: unix datagrams are
// delivered in order, so every message the exited service sent comes
// before it (the idea of sd_notify_barrier(3)). Gives up after 5s.
func (u *unit) drain(msgs <-chan ucredMsg, handle func(ucredMsg)) {
	if msgs == nil {
		return
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: u.path, Net: "unixgram"})
	if err != nil {
		u.t.Errorf("unit: barrier: %v", err)
		return
	}
	defer c.Close()
	barrier := fmt.Sprintf("BARRIER=%d", time.Now().UnixNano())
	if _, err := c.Write([]byte(barrier)); err != nil {
		u.t.Errorf("unit: barrier: %v", err)
		return
	}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m, ok := <-msgs:
			if !ok || m.text == barrier {
				return
			}
			handle(m)
		case <-timeout:
			u.t.Errorf("unit: barrier %s not read back in 5s", barrier)
			return
		}
	}
}

func cleanExit(err error) bool {
	if err == nil {
		return true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		switch ws.Signal() {
		case syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE:
			return true
		}
	}
	return false
}

// waitReady returns the PID of the next instance that sends READY=1.
func (u *unit) waitReady(timeout time.Duration) (int, error) {
	select {
	case pid := <-u.readyC:
		return pid, nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("unit: no READY=1 in %s", timeout)
	}
}

// stop ends supervision: SIGTERM to the main process, no restart.
func (u *unit) stop() {
	u.mu.Lock()
	u.stopped = true
	pid := u.pid
	u.mu.Unlock()
	if pid != 0 {
		syscall.Kill(pid, syscall.SIGTERM)
		syscall.Kill(pid, syscall.SIGCONT)
	}
	select {
	case <-u.done:
	case <-time.After(10 * time.Second):
		if pid := u.mainPID(); pid != 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		<-u.done
	}
	u.sock.Close()
}

// eventsSince returns the events at or after t0.
func (u *unit) eventsSince(t0 time.Time) []event {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []event
	for _, e := range u.events {
		if !e.at.Before(t0) {
			out = append(out, e)
		}
	}
	return out
}

type tlogWriter struct {
	t    *testing.T
	name string
}

func (w tlogWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if len(l) > 300 {
			l = l[:300] + "..."
		}
		w.t.Logf("%s: %s", w.name, l)
	}
	return len(p), nil
}

// notifyHelper is the service the supervisor's own test runs: the test
// binary re-executed with PEP6_HELPER=notify. It announces READY=1 and pings
// the watchdog at half its interval, as go-systemd's users do, until
// killed; with PEP6_HELPER_EXIT=N it exits with status N after READY.
func notifyHelper() {
	iv, err := daemon.SdWatchdogEnabled(false)
	if err != nil || iv == 0 {
		fmt.Fprintln(os.Stderr, "helper: watchdog not enabled:", err)
		os.Exit(3)
	}
	daemon.SdNotify(false, daemon.SdNotifyReady)
	if s := os.Getenv("PEP6_HELPER_EXIT"); s != "" {
		n, _ := strconv.Atoi(s)
		os.Exit(n)
	}
	for range time.Tick(iv / 2) {
		daemon.SdNotify(false, daemon.SdNotifyWatchdog)
	}
}

// standinHelper is a minimal transparent HTTP proxy standing in for pepd
// (PEP_FAILOPEN_STANDIN=1) so that the fail-open harness can be checked on
// its own: a TPROXY listener on :3130 that forwards each request to its
// original destination, with READY=1 and watchdog pings like pepd's.
func standinHelper() {
	lc := net.ListenConfig{Control: setTransparent}
	l, err := lc.Listen(context.Background(), "tcp4", ":"+strconv.Itoa(tproxyPort))
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orig := r.Context().Value(http.LocalAddrContextKey).(net.Addr).String()
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, "http://"+orig+r.URL.RequestURI(), nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})
	if iv, _ := daemon.SdWatchdogEnabled(false); iv > 0 {
		go func() {
			for range time.Tick(iv / 2) {
				daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}()
	}
	daemon.SdNotify(false, daemon.SdNotifyReady)
	http.Serve(l, h)
}

func TestMain(m *testing.M) {
	switch os.Getenv("PEP6_HELPER") {
	case "notify":
		notifyHelper()
		return
	case "standin":
		standinHelper()
		return
	}
	os.Exit(m.Run())
}

// TestUnitEmulation checks the harness against real processes: a service
// that pings survives several watchdog intervals; SIGSTOP gets it killed by
// the watchdog and restarted; kill -9 gets it restarted; a clean exit does
// not.
func TestUnitEmulation(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The helper pings every wd/2: a loaded machine must not hold a ping
	// back for a whole wd (a spurious restart), so wd scales.
	testenv.Log(t)
	wd := testenv.Scale(time.Second)
	u := newUnit(t, wd, time.Second, 100*time.Millisecond, []string{"PEP6_HELPER=notify"}, self)
	u.run()
	defer u.stop()
	pid, err := u.waitReady(testenv.Scale(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Alive past several intervals: the pings work (WATCHDOG_PID matched).
	if _, err := u.waitReady(4 * wd); err == nil {
		t.Fatal("a pinging service was restarted")
	}

	t0 := time.Now()
	syscall.Kill(pid, syscall.SIGSTOP)
	pid2, err := u.waitReady(testenv.Scale(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ev := u.eventsSince(t0)
	if pid2 == pid || len(ev) < 3 || ev[0].what != "watchdog" || ev[1].what != "exit" {
		t.Fatalf("after SIGSTOP: pid %d -> %d, events %+v; want watchdog, exit, start", pid, pid2, ev)
	}
	// The watchdog runs from the last ping the unit took before the stop:
	// it fires no earlier than wd after that ping (WatchdogSec honoured),
	// and within wd of it plus the harness's own delay. The ping's time is
	// the unit's, not the helper's schedule: on a loaded machine a ping due
	// at wd/2 can come late, so the stop-to-fire time alone may be < wd/2.
	armed := ev[0].armed
	if d := ev[0].at.Sub(armed); d < wd || d > wd+testenv.Scale(100*time.Millisecond) {
		t.Errorf("watchdog fired %s after the last ping (%s before SIGSTOP), want between %s and %s",
			d, t0.Sub(armed), wd, wd+testenv.Scale(100*time.Millisecond))
	}
	if !ev[0].at.After(t0) {
		t.Errorf("watchdog fired %s before SIGSTOP", t0.Sub(ev[0].at))
	}

	syscall.Kill(pid2, syscall.SIGKILL)
	pid3, err := u.waitReady(testenv.Scale(10 * time.Second))
	if err != nil || pid3 == pid2 {
		t.Fatalf("after kill -9: pid %d -> %d, %v; want a restart", pid2, pid3, err)
	}
}

func TestUnitCleanExitNotRestarted(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	u := newUnit(t, time.Second, time.Second, 50*time.Millisecond,
		[]string{"PEP6_HELPER=notify", "PEP6_HELPER_EXIT=0"}, self)
	u.run()
	if _, err := u.waitReady(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-u.done:
	case <-time.After(10 * time.Second):
		t.Fatal("unit still running after a clean exit")
	}
	var starts int
	for _, e := range u.eventsSince(time.Time{}) {
		if e.what == "start" {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("%d starts, want 1 (Restart=on-failure, exit status 0)", starts)
	}
	u.stop()
}
