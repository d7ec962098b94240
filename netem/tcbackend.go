package netem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/vishvananda/netlink"
)

// tcLink is the tc backend: the kernel emulates (netem qdiscs on a bridge,
// planned by PlanTC) and read-only AF_PACKET taps on IfA and IfB count what
// enters the link. Drops come from the qdiscs' statistics.
type tcLink struct {
	spec LinkSpec
	prof Profile
	log  *slog.Logger
	taps [2]*os.File // IfA (Up), IfB (Down)
	mu   sync.Mutex
	ctr  [2]DirCounters
	wg   sync.WaitGroup
	nl   *netlink.Handle
}

func startTC(ctx context.Context, spec LinkSpec, p Profile, log *slog.Logger) (*tcLink, error) {
	t := &tcLink{spec: spec, prof: p, log: log}
	if err := ApplyPlan(ctx, log, PlanTC(spec, p)); err != nil {
		// Undo what part of the plan ran; its own errors are expected.
		_ = UndoPlan(context.WithoutCancel(ctx), slog.New(slog.DiscardHandler), PlanTCTeardown(spec, p))
		return nil, err
	}
	h, err := openNS(spec.Namespace)
	if err == nil {
		t.nl, err = netlink.NewHandleAt(h)
		h.Close()
	}
	if err != nil {
		return nil, errors.Join(err, t.teardown(ctx))
	}
	for i, ifname := range []string{spec.IfA, spec.IfB} {
		f, err := openPacket(spec.Namespace, ifname)
		if err != nil {
			return nil, errors.Join(err, t.close())
		}
		t.taps[i] = f
		t.wg.Add(1)
		go func() { defer t.wg.Done(); t.tap(i) }()
	}
	return t, nil
}

func (t *tcLink) tap(i int) {
	buf := make([]byte, maxFrame)
	for {
		n, err := t.taps[i].Read(buf)
		if err != nil {
			return
		}
		if n <= vnetHdrLen {
			continue
		}
		info := classify(buf[vnetHdrLen:n])
		t.mu.Lock()
		t.ctr[i].count(info)
		t.mu.Unlock()
	}
}

// drops reads the netem qdisc's drop count on the interface a direction
// leaves by.
func (t *tcLink) drops(ifname string) uint64 {
	l, err := t.nl.LinkByName(ifname)
	if err != nil {
		return 0
	}
	qs, err := t.nl.QdiscList(l)
	if err != nil {
		return 0
	}
	var n uint64
	for _, q := range qs {
		if q.Type() == "netem" && q.Attrs().Statistics != nil && q.Attrs().Statistics.Queue != nil {
			n += uint64(q.Attrs().Statistics.Queue.Drops)
		}
	}
	return n
}

func (t *tcLink) counters() Counters {
	var c Counters
	d0, d1 := packetDrops(t.taps[0]), packetDrops(t.taps[1])
	t.mu.Lock()
	t.ctr[0].CaptureDrops += d0
	t.ctr[1].CaptureDrops += d1
	c.Up, c.Down = t.ctr[0].clone(), t.ctr[1].clone()
	t.mu.Unlock()
	c.Up.Drops, c.Down.Drops = t.drops(t.spec.IfB), t.drops(t.spec.IfA)
	return c
}

func (t *tcLink) teardown(ctx context.Context) error {
	if t.nl != nil {
		t.nl.Close()
	}
	return UndoPlan(ctx, t.log, PlanTCTeardown(t.spec, t.prof))
}

func (t *tcLink) close() error {
	var errs []error
	for _, f := range t.taps {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	t.wg.Wait()
	errs = append(errs, t.teardown(context.Background()))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netem: close tc link: %w", err)
	}
	return nil
}
