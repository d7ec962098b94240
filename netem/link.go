// Package netem emulates the radio link between the mobile node and the
// gateway: per-direction delay, jitter, rate, loss (random or Gilbert-Elliott)
// and a drop-tail queue, from a Profile. It has two backends behind one Link:
// Linux netem driven by tc(8) where the kernel has sch_netem, and an emulator
// in Go that bridges the link's two interfaces with AF_PACKET sockets where it
// does not. Both count what crosses the link (Counters). See README.md.
package netem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Backend selects how a link is emulated.
type Backend int

// Backends. Auto picks TC when the kernel has sch_netem and tc(8) is
// installed, Userspace otherwise.
const (
	Auto Backend = iota
	TC
	Userspace
)

func (b Backend) String() string {
	switch b {
	case Auto:
		return "auto"
	case TC:
		return "tc"
	case Userspace:
		return "userspace"
	}
	return fmt.Sprintf("backend(%d)", int(b))
}

// ParseBackend parses "auto", "tc" or "userspace".
func ParseBackend(s string) (Backend, error) {
	for _, b := range []Backend{Auto, TC, Userspace} {
		if s == b.String() {
			return b, nil
		}
	}
	return Auto, fmt.Errorf("netem: backend %q: want auto, tc or userspace", s)
}

// Endpoint is an interface in a network namespace.
type Endpoint struct {
	Namespace string // name under /var/run/netns, a path, or "" for the caller's
	Interface string
}

// LinkSpec says where the link is: two interfaces in one namespace, each one
// end of a veth pair whose other end (the peer) is in the mobile node's
// namespace (IfA) or the gateway's (IfB). The link owns IfA and IfB: nothing
// else should use them (no addresses, no other bridge).
type LinkSpec struct {
	Namespace string // the link's namespace: name, path or "" for the caller's
	IfA       string // mobile side; Up traffic enters here
	IfB       string // network side; Down traffic enters here
	// PeerA and PeerB are the far ends of the veths, whose offloads the link
	// turns off too. Nil means: find them (named namespaces and PID 1's); if
	// IfA/IfB are not veths (e.g. a container's eth0/eth1), pass empty
	// Endpoints and turn the peers' offloads off yourself.
	PeerA, PeerB *Endpoint
}

// Options tune NewLink. The zero value is valid.
type Options struct {
	Backend Backend      // Auto by default
	Logger  *slog.Logger // nil: slog.Default()
	// Seed for the loss and jitter draws (userspace backend); 0 picks one at
	// random. The seed in use is logged, so a run can be repeated.
	Seed uint64
}

// Link is a running emulated link. Its methods are safe for concurrent use.
type Link struct {
	spec    LinkSpec
	prof    Profile
	backend Backend
	log     *slog.Logger

	mu   sync.Mutex
	base Counters // subtracted by Counters after ResetCounters
	emu  *emulator
	tc   *tcLink

	closeOnce sync.Once
	closeErr  error
}

// NewLink starts emulating profile p on spec; ctx bounds the setup only
// (the tc commands), Close ends the link. It first logs its exact
// configuration (profile, backend, interfaces, seed), turns off offloads on
// both interfaces and their peers, then starts the backend. Close stops it.
// Needs CAP_NET_ADMIN and CAP_NET_RAW (root).
func NewLink(ctx context.Context, spec LinkSpec, p Profile, opt Options) (*Link, error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "netem")
	if spec.IfA == "" || spec.IfB == "" || spec.IfA == spec.IfB {
		return nil, fmt.Errorf("netem: link needs two distinct interfaces, have %q and %q", spec.IfA, spec.IfB)
	}
	backend := opt.Backend
	reason := "forced"
	if backend == Auto {
		backend, reason = DetectBackend()
	}
	seed := opt.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	peers := [2]*Endpoint{spec.PeerA, spec.PeerB}
	for i, ifname := range []string{spec.IfA, spec.IfB} {
		if peers[i] == nil {
			ep, err := findPeer(spec.Namespace, ifname)
			if err != nil {
				log.Warn("veth peer not found: turn its offloads off yourself (ethtool -K IF tx off sg off tso off gso off gro off)", "if", ifname, "err", err)
			}
			peers[i] = &ep
		}
	}
	log.Info("link configuration",
		"profile", p, "backend", backend.String(), "backend_reason", reason,
		"namespace", spec.Namespace, "if_a", spec.IfA, "if_b", spec.IfB,
		"peer_a", peers[0].Namespace+":"+peers[0].Interface,
		"peer_b", peers[1].Namespace+":"+peers[1].Interface,
		"seed", seed)
	if err := DisableOffloads(spec.Namespace, spec.IfA); err != nil {
		return nil, err
	}
	if err := DisableOffloads(spec.Namespace, spec.IfB); err != nil {
		return nil, err
	}
	for _, ep := range peers {
		if ep.Interface == "" {
			continue
		}
		if err := DisableOffloads(ep.Namespace, ep.Interface); err != nil {
			return nil, err
		}
	}
	l := &Link{spec: spec, prof: p, backend: backend, log: log}
	var err error
	switch backend {
	case TC:
		l.tc, err = startTC(ctx, spec, p, log)
	case Userspace:
		l.emu, err = startEmulator(spec, p, seed, log)
	default:
		err = fmt.Errorf("netem: backend %v", backend)
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Backend is the backend in use (never Auto).
func (l *Link) Backend() Backend { return l.backend }

// Profile is the profile being emulated.
func (l *Link) Profile() Profile {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.prof
}

// ErrProfileFixed is SetProfile's error on the tc backend, whose qdiscs
// are planned once for the link's profile (PlanTC).
var ErrProfileFixed = errors.New("netem: the tc backend cannot change a running link's profile")

// SetProfile makes the link emulate p from now on, in both directions:
// packets already on the link keep their departure times, and a later
// packet never leaves before them (Scheduler.SetDirection). The counters
// carry on, and so do the metrics' profile label (NewCollector's). The
// userspace backend only; the tc backend returns ErrProfileFixed. A
// testbed uses it to load what it does not measure over a fast link
// (testbed/run: the warm-up passes).
func (l *Link) SetProfile(p Profile) error {
	if l.emu == nil {
		return ErrProfileFixed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.emu.setProfile(p)
	l.prof = p
	l.log.Info("link profile changed", "profile", p)
	return nil
}

// Counters returns a snapshot of what crossed the link since it started (or
// since ResetCounters). Take one before and one after a page load and Sub
// them for that load alone.
func (l *Link) Counters() Counters {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.raw().Sub(l.base)
}

func (l *Link) raw() Counters {
	if l.emu != nil {
		return l.emu.counters()
	}
	return l.tc.counters()
}

// ResetCounters makes the counters start again from zero.
func (l *Link) ResetCounters() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.base = l.raw()
}

// Close stops the emulation and undoes what NewLink set up (the tc
// backend's bridge and qdiscs); it logs the final counters. The interfaces
// themselves are left as they were given. Calling Close again returns the
// first call's error.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		c := l.Counters()
		l.log.Info("link closed", "profile", l.Profile().Name,
			"up_packets", c.Up.Packets, "up_bytes", c.Up.Bytes, "up_drops", c.Up.Drops,
			"down_packets", c.Down.Packets, "down_bytes", c.Down.Bytes, "down_drops", c.Down.Drops,
			"capture_drops", c.Up.CaptureDrops+c.Down.CaptureDrops)
		if l.emu != nil {
			l.closeErr = l.emu.close()
		} else {
			l.closeErr = l.tc.close()
		}
	})
	return l.closeErr
}

var (
	detectOnce   sync.Once
	detectResult Backend
	detectReason string
)

// DetectBackend reports TC if this kernel accepts a netem qdisc (tried on a
// veth in a throwaway namespace) and tc(8) is installed, Userspace
// otherwise, with the reason. The answer is computed once per process.
func DetectBackend() (Backend, string) {
	detectOnce.Do(func() {
		if _, err := exec.LookPath("tc"); err != nil {
			detectResult, detectReason = Userspace, "tc(8) not installed"
			return
		}
		if err := tryNetem(); err != nil {
			detectResult, detectReason = Userspace, "no sch_netem: "+err.Error()
			return
		}
		detectResult, detectReason = TC, "sch_netem available"
	})
	return detectResult, detectReason
}

func tryNetem() error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // discarded with the throwaway namespace
		h, err := netns.New()
		if err != nil {
			errc <- fmt.Errorf("new namespace: %w", err)
			return
		}
		defer h.Close()
		nl, err := netlink.NewHandleAt(h)
		if err != nil {
			errc <- err
			return
		}
		defer nl.Close()
		// A veth, not a dummy: this project's kernels have veth, not all have dummy.
		d := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}, PeerName: "probe1"}
		if err := nl.LinkAdd(d); err != nil {
			errc <- fmt.Errorf("probe interface: %w", err)
			return
		}
		q := netlink.NewNetem(netlink.QdiscAttrs{LinkIndex: d.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
			netlink.NetemQdiscAttrs{Latency: 1000})
		if err := nl.QdiscAdd(q); err != nil {
			errc <- fmt.Errorf("add netem qdisc: %w", err)
			return
		}
		errc <- nil
	}()
	return <-errc
}
