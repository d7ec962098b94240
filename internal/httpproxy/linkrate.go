package httpproxy

import (
	"hash/maphash"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// LinkRateWindow is how long a subscriber's downlink rate estimate keeps
// its largest sample: a larger one replaces it at once, a smaller one only
// once the largest is this old. A radio link's rate moves with the cell's
// load and the phone's place, so the estimate follows it within a minute,
// and a page load (seconds) sees the rate of the subscriber's last loads.
const LinkRateWindow = time.Minute

// LinkRateMinBytes is how many bytes a connection must have delivered
// (acknowledged by the subscriber) before its delivery rate is a sample:
// a TLS handshake or a small response says how fast a few packets went,
// not how fast the link is.
const LinkRateMinBytes = 32 << 10

// linkRateMaxSubscribers bounds the subscribers whose estimates are kept;
// past it, estimates older than LinkRateWindow are dropped (a sweep at
// most every quarter window), and when none is, the new subscriber is not
// kept. An estimate is a few words: 65,536 of them are about 4 MB.
const linkRateMaxSubscribers = 1 << 16

// linkRates estimates each subscriber's downlink rate, in bytes per
// second, from the kernel's delivery-rate samples of its connections
// (TCP_INFO tcpi_delivery_rate, Linux 4.9+: the rate at which the data
// acknowledged last was delivered, the sample BBR's bandwidth filter
// takes, draft-cheng-iccrg-delivery-rate-estimation §3): the largest
// sample of the last LinkRateWindow (a windowed maximum: a sample taken
// while the sender had nothing to send is low, never high). The optimizer
// sizes its wait for a transform by it (optimize.Options.LinkDeadline).
// Safe for concurrent use.
type linkRates struct {
	seed     maphash.Seed // of the subscribers' tokens (header)
	mu       sync.Mutex
	m        map[netip.Addr]linkRate
	fullTill time.Time // a sweep of m freed nothing: no new subscriber is kept before this
	now      func() time.Time
}

type linkRate struct {
	rate uint64    // bytes/s
	at   time.Time // when rate was sampled
}

func newLinkRates() *linkRates {
	return &linkRates{seed: maphash.MakeSeed(), m: make(map[netip.Addr]linkRate), now: time.Now}
}

// add records a delivery-rate sample (bytes/s) of one of sub's
// connections.
func (l *linkRates) add(sub netip.Addr, rate uint64) {
	if rate == 0 {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.m[sub]
	if ok && rate < old.rate && now.Sub(old.at) < LinkRateWindow {
		return
	}
	if !ok && len(l.m) >= linkRateMaxSubscribers {
		if now.Before(l.fullTill) {
			return
		}
		for a, e := range l.m {
			if now.Sub(e.at) >= LinkRateWindow {
				delete(l.m, a)
			}
		}
		if len(l.m) >= linkRateMaxSubscribers {
			l.fullTill = now.Add(LinkRateWindow / 4) // one sweep per quarter window at most
			return
		}
	}
	l.m[sub] = linkRate{rate, now}
}

// get returns sub's downlink rate estimate in bytes/s; 0 when there is
// none, or none of the last 5 x LinkRateWindow (an idle subscriber's
// link may have changed).
func (l *linkRates) get(sub netip.Addr) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[sub]
	if !ok {
		return 0
	}
	if l.now().Sub(e.at) >= 5*LinkRateWindow {
		delete(l.m, sub)
		return 0
	}
	return e.rate
}

// sample reads c's TCP delivery rate (TCP_INFO) and adds it as a sample of
// sub's link when c has delivered at least LinkRateMinBytes. c is the
// subscriber's TCP connection (a *net.TCPConn, or a wrapper of one with
// SyscallConn); anything else is not sampled.
func (l *linkRates) sample(sub netip.Addr, c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	var info *unix.TCPInfo
	if rc.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}) != nil || err != nil {
		return
	}
	if info.Bytes_acked >= LinkRateMinBytes {
		l.add(sub, info.Delivery_rate)
	}
}

// appendHeader appends optimize.LinkRateHeader's value for sub, whose
// estimate is rate (bytes/s, not 0): the rate, a space and sub's token, a
// hash of its address with this process's seed (the optimizer tells one
// subscriber's responses from another's by it, and learns no address).
func (l *linkRates) appendHeader(dst []byte, sub netip.Addr, rate uint64) []byte {
	dst = strconv.AppendUint(dst, rate, 10)
	dst = append(dst, ' ')
	return strconv.AppendUint(dst, maphash.Comparable(l.seed, sub), 16)
}

// linkRateEvery is the least time between two samples of one connection
// at its requests (a system call each).
const linkRateEvery = 100 * time.Millisecond

// appendLinkRate samples c's delivery rate (at most every linkRateEvery)
// and appends optimize.LinkRateHeader's value for its subscriber to dst;
// dst as it was when there is no estimate yet (connInfo).
func (c *conn) appendLinkRate(dst []byte) []byte {
	links := c.s.p.links
	now := time.Now().UnixNano()
	if last := c.rateAt.Load(); now-last >= int64(linkRateEvery) && c.rateAt.CompareAndSwap(last, now) {
		links.sample(c.src, c.countConn.Conn)
	}
	if rate := links.get(c.src); rate > 0 {
		return links.appendHeader(dst, c.src, rate)
	}
	return dst
}
