// Package topo builds the testbed's network: the seed paper's Fig. 4 (§4.1)
// in network namespaces, as ../shared/DESIGN.md lays it out (mn, gw, core,
// the radio link between mn and gw through an emulator namespace), starts
// the testbed's processes inside them and removes everything it made, on
// success, failure and interrupt alike.
//
// Everything is named after a run-unique prefix ("peptb-<pid>-<n>"), so that
// parallel runs never collide and Sweep can remove what a killed run left.
package topo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

// NetnsRunDir is where `ip netns` keeps its named namespaces, and
// NetnsEtcDir where `ip netns exec` finds per-namespace files (resolv.conf)
// that it bind-mounts over /etc.
const (
	NetnsRunDir = "/run/netns"
	NetnsEtcDir = "/etc/netns"
)

// Topology is a built testbed. Close removes it; Close is safe to call more
// than once and from a signal handler's goroutine.
type Topology struct {
	Config Config
	log    *slog.Logger

	mu      sync.Mutex
	procs   []*Proc
	created map[string]bool // namespaces this topology added
	closed  bool
}

// Up builds the testbed c describes: it validates c, runs Plan (stopping at
// the first failing command) and writes mn's resolv.conf naming c.Resolver.
// With bridge, the radio (and wired) links are plain Linux bridges instead
// of waiting for an emulator. On error everything already built is removed.
// Needs root, iproute2 and ethtool.
func Up(ctx context.Context, c Config, bridge bool, log *slog.Logger) (*Topology, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	t := &Topology{Config: c, log: log.With("topo", c.Prefix), created: map[string]bool{}}
	var ccs []string
	for _, r := range c.CCs() {
		ccs = append(ccs, r.CC)
	}
	if err := AllowCC(ccs, t.log); err != nil {
		return nil, err
	}
	t.log.Info("topology up", "mn", c.MN, "gw_radio", c.GWRadio, "gw_wired", c.GWWired, "core", c.Core,
		"origins", c.Origins, "vip", c.VIP, "resolver", c.Resolver, "wired_emulated", c.WiredEmulated, "bridge", bridge)
	for _, cmd := range Plan(c, bridge) {
		if err := Run(ctx, []Cmd{cmd}); err != nil {
			t.Close()
			return nil, err
		}
		if len(cmd) == 4 && cmd[1] == "netns" && cmd[2] == "add" {
			t.created[cmd[3]] = true
		}
	}
	dir := filepath.Join(NetnsEtcDir, c.MNNS())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Close()
		return nil, fmt.Errorf("topo: %w", err)
	}
	conf := fmt.Sprintf("# written by the pep testbed for %s\nnameserver %s\noptions attempts:2 timeout:2\n", c.MNNS(), c.Resolver)
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(conf), 0o644); err != nil {
		t.Close()
		return nil, fmt.Errorf("topo: %w", err)
	}
	return t, nil
}

// Run executes a plan in order and stops at the first command that fails,
// returning an error that names the command and its output.
func Run(ctx context.Context, plan []Cmd) error {
	for _, c := range plan {
		out, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("topo: %q: %w: %s", c.String(), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// Namespaces returns the names of the testbed's namespaces.
func (t *Topology) Namespaces() []string {
	var ns []string
	for _, c := range TeardownPlan(t.Config) {
		ns = append(ns, c[len(c)-1])
	}
	return ns
}

// Proc is a process started in a namespace by Topology.Start.
type Proc struct {
	Name string // short role name for logs, e.g. "dnsmasq"
	NS   string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, valid after done
	tail *tailBuffer
}

// Start runs argv in namespace ns (`ip netns exec ns argv...`, so that the
// namespace's resolv.conf applies) in its own process group, with its
// output appended to logPath ("" discards it; the last 4 KB are kept for
// errors either way). The process is stopped by Stop or by Close.
func (t *Topology) Start(name, ns, logPath string, argv ...string) (*Proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("topo: start %s: topology closed", name)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Proc{Name: name, NS: ns, cmd: cmd, done: make(chan struct{}), tail: &tailBuffer{max: 4096}}
	var out io.Writer = p.tail
	var f *os.File
	if logPath != "" {
		var err error
		if f, err = os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, fmt.Errorf("topo: start %s: %w", name, err)
		}
		out = io.MultiWriter(f, p.tail)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Pdeathsig fires when the OS thread that forked the child exits, not
	// the process (golang/go#27505), and Go ends threads whose goroutine
	// exits locked (netns switching does that). So the child is started
	// from a goroutine locked to its thread until the child has exited.
	started := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		if f != nil {
			f.Close()
		}
		close(p.done)
	}()
	if err := <-started; err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("topo: start %s %q: %w", name, strings.Join(argv, " "), err)
	}
	t.procs = append(t.procs, p)
	t.log.Debug("process started", "name", name, "ns", ns, "pid", cmd.Process.Pid, "argv", argv)
	return p, nil
}

// Pid returns the process id (that of the program: `ip netns exec` execs it).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns the exit error and the tail of the output once Done is
// closed, nil before.
func (p *Proc) Err() error {
	select {
	case <-p.done:
	default:
		return nil
	}
	if p.err == nil {
		return nil
	}
	return fmt.Errorf("topo: %s exited: %w: %s", p.Name, p.err, bytes.TrimSpace([]byte(p.tail.String())))
}

// Output returns the last 4 KB of the process's output.
func (p *Proc) Output() string { return p.tail.String() }

// Stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL and waits for the exit. It is safe to call more than once.
func (p *Proc) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Children that left the group's leader behind still hold the group.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// Close stops every process started in the testbed (last started first,
// 3 s grace each), deletes the namespaces that Up created (never one that
// existed before) and mn's /etc/netns files. It
// returns the first error but always tries every step.
func (t *Topology) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	procs := t.procs
	t.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop(3 * time.Second)
	}
	var first error
	for _, c := range TeardownPlan(t.Config) {
		ns := c[len(c)-1]
		if !t.created[ns] {
			continue
		}
		// A namespace in use by a process that escaped its group is
		// still deleted by name; kill what is left in it first.
		killNS(ns)
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil && first == nil {
			first = fmt.Errorf("topo: %q: %w: %s", c.String(), err, bytes.TrimSpace(out))
		}
	}
	// Before Up made mn, the folder is not ours.
	if t.created[t.Config.MNNS()] {
		if err := os.RemoveAll(filepath.Join(NetnsEtcDir, t.Config.MNNS())); err != nil && first == nil {
			first = fmt.Errorf("topo: %w", err)
		}
	}
	t.log.Info("topology down", "err", first)
	return first
}

// killNS kills every process whose network namespace is ns
// (`ip netns pids`).
func killNS(ns string) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Do runs fn on a locked OS thread switched into namespace ns; sockets fn
// opens stay in ns after Do returns (Linux keeps a socket in the namespace
// it was created in). Namespaces are per thread, so fn must not start
// goroutines that expect to be in ns.
func Do(ns string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("topo: current namespace: %w", err)
	}
	defer orig.Close()
	h, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("topo: namespace %q: %w", ns, err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return fmt.Errorf("topo: enter %q: %w", ns, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread is in the wrong namespace: keep it locked so that
		// it dies with the goroutine instead of serving others.
		runtime.LockOSThread()
		return errors.Join(ferr, fmt.Errorf("topo: leave %q: %w", ns, err))
	}
	return ferr
}

// Leftovers returns the testbed namespaces and /etc/netns folders whose
// prefix names process pid ("peptb-<pid>-"); pid 0 matches every testbed
// namespace. The cleanup test and Sweep use it.
func Leftovers(pid int) []string {
	pre := "peptb-"
	if pid > 0 {
		pre += strconv.Itoa(pid) + "-"
	}
	var found []string
	for _, dir := range []string{NetnsRunDir, NetnsEtcDir} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), pre) {
				found = append(found, filepath.Join(dir, e.Name()))
			}
		}
	}
	return found
}

// Processes returns the pids of the processes whose command line names a
// testbed of process pid ("peptb-<pid>-" in an argument: config files,
// profile folders and namespace names all carry the prefix); pid 0 matches
// every testbed. The cleanup tests use it.
func Processes(pid int) []int {
	pre := []byte("peptb-")
	if pid > 0 {
		pre = append(pre, strconv.Itoa(pid)+"-"...)
	}
	var found []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmd, pre) {
			found = append(found, p)
		}
	}
	return found
}

// Sweep removes the namespaces and /etc/netns folders of testbed runs whose
// process is gone (a run killed with SIGKILL cannot clean up after itself),
// killing what still runs in them. It returns the names it removed.
func Sweep() ([]string, error) {
	var removed []string
	var first error
	for _, path := range Leftovers(0) {
		name := filepath.Base(path)
		parts := strings.SplitN(strings.TrimPrefix(name, "peptb-"), "-", 2)
		pid, err := strconv.Atoi(parts[0])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		if filepath.Dir(path) == NetnsRunDir {
			killNS(name)
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				if first == nil {
					first = fmt.Errorf("topo: ip netns del %s: %w: %s", name, err, bytes.TrimSpace(out))
				}
				continue
			}
		} else if err := os.RemoveAll(path); err != nil {
			if first == nil {
				first = fmt.Errorf("topo: %w", err)
			}
			continue
		}
		removed = append(removed, path)
	}
	return removed, first
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// allowedCCFile lists the congestion control algorithms a network
// namespace other than the host's may make its default.
const allowedCCFile = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"

// AllowCC makes sure every named congestion control algorithm may be a
// namespace's default: Linux lets a namespace other than the host's choose
// only algorithms in the host's net.ipv4.tcp_allowed_congestion_control
// (tcp_set_default_congestion_control: EPERM otherwise), which holds reno
// and the host's own default (bbr here). Missing ones are appended to the
// host's list (logged); nothing is removed. Empty names are ignored.
func AllowCC(names []string, log *slog.Logger) error {
	b, err := os.ReadFile(allowedCCFile)
	if err != nil {
		return fmt.Errorf("topo: %w", err)
	}
	allowed := strings.Fields(string(b))
	var add []string
	for _, n := range names {
		if n != "" && !slices.Contains(allowed, n) && !slices.Contains(add, n) {
			add = append(add, n)
		}
	}
	if len(add) == 0 {
		return nil
	}
	v := strings.Join(append(allowed, add...), " ")
	if err := os.WriteFile(allowedCCFile, []byte(v), 0o644); err != nil {
		return fmt.Errorf("topo: allow congestion control %s in namespaces (%s): %w", strings.Join(add, ", "), allowedCCFile, err)
	}
	log.Info("congestion control allowed in namespaces", "added", strings.Join(add, ","), "allowed", v)
	return nil
}
