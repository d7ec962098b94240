package httpproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pires/go-proxyproto"
)

// The upstream: pepd's connections to Squid, one pool for both HTTP paths
// (the relay's roundTrip and the standard library path's
// squidPool.roundTrip). With PROXY protocol a connection's header names
// one subscriber for the connection's whole life, so idle connections are
// kept per subscriber address and a request only ever takes one of its
// own subscriber's; without it there is one pool (key: the zero address)
// and each request names its subscriber in X-Forwarded-For.

// Read deadlines of a connection. Setting one costs a runtime timer
// update, so an armed deadline of the same kind is kept while it is
// younger than its timeout/64: the idle and upstream timeouts then act
// within 1/64 of their value (about 1.9 s of the default 120 s idle
// timeout). The read header timeout is armed afresh each time.
const (
	dlNone = iota
	dlIdle
	dlHeader
	dlUpstream
)

// upstreamBufSize is the size of a reader of Squid's responses: response
// heads and the relay's body copies; pooled per request (upstreamReaders).
const upstreamBufSize = 64 << 10

var upstreamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, upstreamBufSize) }}

// stdlibReaders are the readers of Squid's responses on the standard
// library path (squidPool.roundTrip): httputil.ReverseProxy copies the body
// through a buffer of its own, so 16 KB is enough (a longer head line is
// read in pieces); one is held per request in flight, which over HTTP/2 is
// many per subscriber connection (the soak's 200 HTTP/2 clients of 6
// streams: up to 1,200 in flight, 77 MB of 64 KB readers).
const stdlibBufSize = 16 << 10

var stdlibReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, stdlibBufSize) }}

// upConn is one connection to Squid.
type upConn struct {
	*countConn
	sp    *squidPool  // holds one of sp's slots until Close
	freed atomic.Bool // the slot was given back
	key   netip.Addr  // the pool it belongs to (the subscriber its PROXY header names)
	used  bool        // has carried a response: a failure before any byte of the next one may be a stale keep-alive
	lowat int         // SO_RCVLOWAT (relayConn.setLowat); 1 when new
	dl    int         // kind of read deadline armed (dlNone, dlUpstream)
	dlAt  time.Time   // when it was armed
	since time.Time   // idle since (while in the pool)
}

// Close closes the connection and gives its slot back to the pool.
func (c *upConn) Close() error {
	if c.sp != nil && c.freed.CompareAndSwap(false, true) {
		c.sp.release()
	}
	return c.countConn.Close()
}

// armRead arms (kind dlUpstream, for timeout) or clears (dlNone) c's read
// deadline. An armed deadline of the same kind younger than timeout/64 is
// kept (a timer update per read costs; the timeout then acts within 1/64
// of its value).
func (c *upConn) armRead(kind int, timeout time.Duration) {
	if kind == dlNone {
		if c.dl != dlNone {
			c.SetReadDeadline(time.Time{})
			c.dl = dlNone
		}
		return
	}
	now := time.Now()
	if c.dl == kind && now.Sub(c.dlAt) < timeout/64 {
		return
	}
	c.SetReadDeadline(now.Add(timeout))
	c.dl, c.dlAt = kind, now
}

// replaceable reports whether a round trip that failed with err on c, at
// try attempt (0 first), before buffered bytes of the response were read,
// may go again on a new connection: c carried a response before (a
// kept-alive connection Squid may have closed while it was idle), it is
// the first try, no byte of the response came and it was not Squid's
// timeout. The callers add theirs: an idempotent request, a subscriber
// still there.
func (c *upConn) replaceable(attempt, buffered int, err error) bool {
	return c.used && attempt == 0 && buffered == 0 && !errors.Is(err, os.ErrDeadlineExceeded)
}

// squidPool dials Squid and keeps idle connections per subscriber. It
// grows with the requests in flight (a request that finds no idle
// connection of its subscriber dials one), within a bound: at most
// maxOpen connections are open at once, idle and in use together (a
// slot each). A request that finds every slot taken closes an idle
// connection of another subscriber, if there is one, and waits for a
// slot, at most Proxy.upTimeout (then it fails as a timeout); while any
// request waits, connections given back are closed instead of kept idle,
// so that their slots go to the waiting requests.
type squidPool struct {
	p       *Proxy
	maxIdle int           // idle connections kept per key
	idleFor time.Duration // an idle connection older than this is closed (Options.UpstreamIdle)
	slots   chan struct{} // one per open connection; capacity Options.MaxUpstreamConns

	mu       sync.Mutex
	idle     map[netip.Addr][]*upConn // most recently used last
	n        int                      // idle connections in all
	waiters  int                      // requests waiting for a slot
	peak     int                      // most connections open at once (tests)
	sweeping bool                     // a sweep is scheduled
	closed   bool
}

func newSquidPool(p *Proxy, maxIdle, maxOpen int, idleFor time.Duration) *squidPool {
	return &squidPool{p: p, maxIdle: maxIdle, idleFor: idleFor, idle: map[netip.Addr][]*upConn{}, slots: make(chan struct{}, maxOpen)}
}

// errPoolWait is a request that waited Proxy.upTimeout for a connection
// to Squid while the pool was at its bound (a timeout: 504).
var errPoolWait = fmt.Errorf("httpproxy: no connection to squid free within the upstream timeout (pool bound reached): %w", os.ErrDeadlineExceeded)

// acquire takes a slot for a new connection, waiting (see squidPool) at
// most Proxy.upTimeout or until ctx ends.
func (sp *squidPool) acquire(ctx context.Context) error {
	select {
	case sp.slots <- struct{}{}:
		sp.opened()
		return nil
	default:
	}
	sp.p.m.upstreamWaits.Inc()
	var victim *upConn
	sp.mu.Lock()
	sp.waiters++
	for k, l := range sp.idle {
		victim = l[0] // the least recently used of some subscriber
		if len(l) == 1 {
			delete(sp.idle, k)
		} else {
			sp.idle[k] = append(l[:0:0], l[1:]...)
		}
		sp.n--
		break
	}
	sp.mu.Unlock()
	defer func() {
		sp.mu.Lock()
		sp.waiters--
		sp.mu.Unlock()
	}()
	if victim != nil {
		victim.Close()
	}
	t := time.NewTimer(sp.p.upTimeout)
	defer t.Stop()
	select {
	case sp.slots <- struct{}{}:
		sp.opened()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errPoolWait
	}
}

// opened counts a connection that took a slot.
func (sp *squidPool) opened() {
	sp.p.m.upstreamOpen.Inc()
	sp.mu.Lock()
	sp.peak = max(sp.peak, len(sp.slots))
	sp.mu.Unlock()
}

// release gives a closed connection's slot back.
func (sp *squidPool) release() {
	sp.p.m.upstreamOpen.Dec()
	<-sp.slots
}

// peakOpen returns the most connections that were open at once.
func (sp *squidPool) peakOpen() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.peak
}

// key is the pool key of subscriber sub.
func (sp *squidPool) key(sub netip.AddrPort) netip.Addr {
	if !sp.p.pp {
		return netip.Addr{}
	}
	return sub.Addr()
}

// get returns an idle connection of sub's pool (the most recently used
// one), or a new one: Proxy.dialSquidFor, whose PROXY header names sub.
// With fresh it dials a new one and closes the pool's idle ones first: a
// kept-alive connection that failed before any byte of a response means
// Squid closed it, and when Squid restarted it closed them all.
func (sp *squidPool) get(ctx context.Context, sub netip.AddrPort, fresh bool) (*upConn, error) {
	key := sp.key(sub)
	now := time.Now()
	var stale []*upConn
	var c *upConn
	sp.mu.Lock()
	if fresh {
		stale = sp.idle[key]
		sp.n -= len(stale)
		delete(sp.idle, key)
	}
	for l := sp.idle[key]; len(l) > 0 && c == nil; l = sp.idle[key] {
		last := l[len(l)-1]
		l[len(l)-1] = nil
		if len(l) == 1 {
			delete(sp.idle, key)
		} else {
			sp.idle[key] = l[:len(l)-1]
		}
		sp.n--
		if now.Sub(last.since) < sp.idleFor {
			c = last
		} else {
			stale = append(stale, last)
		}
	}
	sp.mu.Unlock()
	for _, s := range stale {
		s.Close()
	}
	if c != nil {
		return c, nil
	}
	if err := sp.acquire(ctx); err != nil {
		return nil, err
	}
	cc, err := sp.p.dialSquidFor(ctx, sub)
	if err != nil {
		sp.release()
		return nil, err
	}
	return &upConn{countConn: cc, sp: sp, key: key, lowat: 1}, nil
}

// put gives back a connection whose last response was read to its end;
// it is closed instead when its pool is full or the pool is closed.
func (sp *squidPool) put(c *upConn) {
	c.since = time.Now()
	sp.mu.Lock()
	if sp.closed || len(sp.idle[c.key]) >= sp.maxIdle || sp.waiters > 0 {
		sp.mu.Unlock()
		c.Close()
		return
	}
	sp.idle[c.key] = append(sp.idle[c.key], c)
	sp.n++
	if !sp.sweeping {
		sp.sweeping = true
		time.AfterFunc(sp.idleFor/2, sp.sweep)
	}
	sp.mu.Unlock()
}

// sweep closes the connections idle for longer than idleFor, and
// schedules itself again while any are idle.
func (sp *squidPool) sweep() {
	now := time.Now()
	var old []*upConn
	sp.mu.Lock()
	for k, l := range sp.idle {
		i := 0
		for i < len(l) && now.Sub(l[i].since) >= sp.idleFor {
			i++
		}
		if i == 0 {
			continue
		}
		old = append(old, l[:i]...)
		sp.n -= i
		if i == len(l) {
			delete(sp.idle, k)
		} else {
			sp.idle[k] = append(l[:0:0], l[i:]...)
		}
	}
	sp.sweeping = sp.n > 0 && !sp.closed
	if sp.sweeping {
		time.AfterFunc(sp.idleFor/2, sp.sweep)
	}
	sp.mu.Unlock()
	for _, c := range old {
		c.Close()
	}
}

// closeIdle closes every idle connection; with final, connections given
// back later are closed too (Proxy.Close).
func (sp *squidPool) closeIdle(final bool) {
	sp.mu.Lock()
	idle := sp.idle
	sp.idle, sp.n = map[netip.Addr][]*upConn{}, 0
	sp.closed = sp.closed || final
	sp.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			c.Close()
		}
	}
}

// idleCount returns the idle connections in all.
func (sp *squidPool) idleCount() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.n
}

// max1xx bounds the informational responses read before a final one (as
// net/http's Transport).
const max1xx = 5

// aLongTimeAgo is a deadline in the past: it ends a blocked read or write.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip sends r, in forward-proxy form (absolute URI), to Squid on a
// connection of sub's pool and reads the final response head, waiting at
// most Proxy.upTimeout for it; 1xx responses go to the request's
// httptrace Got1xxResponse (httputil.ReverseProxy passes them on). A
// kept-alive connection that fails before any byte of the response (Squid
// closed it while idle, or restarted) is replaced once, by a new
// connection, for a GET or HEAD without a body. The response body gives
// the connection back to the pool when it is read to its end, and closes
// it when it is closed before; the end of r's context ends the exchange.
// This is what the standard library path sends through; the relay does
// the same on its buffers (relayConn.roundTrip).
func (sp *squidPool) roundTrip(r *http.Request, sub netip.AddrPort) (*http.Response, error) {
	ctx := r.Context()
	retriable := (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.Body == nil || r.Body == http.NoBody)
	for attempt := 0; ; attempt++ {
		c, err := sp.get(ctx, sub, attempt > 0)
		if err != nil {
			return nil, err
		}
		stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
		br := stdlibReaders.Get().(*bufio.Reader)
		br.Reset(c)
		resp, err := sp.exchange(c, br, r)
		if err == nil {
			b := &upstreamBody{sp: sp, c: c, br: br, body: resp.Body, ctx: ctx, stop: stop, reuse: !resp.Close && !r.Close}
			if resp.Body == http.NoBody {
				b.finish(nil)
			} else {
				resp.Body = b
			}
			return resp, nil
		}
		stop()
		if ctx.Err() != nil {
			// The subscriber went away (or the server shuts down): the
			// deadline the AfterFunc set is not Squid's timeout.
			err = ctx.Err()
		}
		stale := retriable && ctx.Err() == nil && c.replaceable(attempt, br.Buffered(), err)
		c.Close()
		br.Reset(nil)
		stdlibReaders.Put(br)
		if !stale {
			return nil, err
		}
	}
}

// exchange writes r on c and reads the final response head from br.
func (sp *squidPool) exchange(c *upConn, br *bufio.Reader, r *http.Request) (*http.Response, error) {
	bw := upstreamWriters.Get().(*bufio.Writer)
	bw.Reset(c)
	err := r.WriteProxy(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	upstreamWriters.Put(bw)
	if err != nil {
		return nil, err
	}
	c.armRead(dlUpstream, sp.p.upTimeout)
	for n := 0; ; n++ {
		resp, err := http.ReadResponse(br, r)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// Squid relays no upgrades (http_upgrade_request_protocols is
			// not set): a 101 is not a response pepd can pass on.
			return nil, errors.New("httpproxy: squid switched protocols")
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 {
			c.used = true
			return resp, nil
		}
		if n == max1xx {
			return nil, fmt.Errorf("httpproxy: more than %d informational responses from squid", max1xx)
		}
		if t := httptrace.ContextClientTrace(r.Context()); t != nil && t.Got1xxResponse != nil {
			if err := t.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, err
			}
		}
	}
}

var upstreamWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}

// upstreamBody is a response body from Squid on the standard library
// path: each read waits at most Proxy.upTimeout; at its end the
// connection goes back to the pool if the response allows (no
// Connection: close either way, nothing after the body), and closing it
// before its end closes the connection.
type upstreamBody struct {
	sp    *squidPool
	c     *upConn // nil once finished
	br    *bufio.Reader
	body  io.ReadCloser // http.ReadResponse's, reading br
	ctx   context.Context
	stop  func() bool // stops the context's AfterFunc
	reuse bool
	err   error // the error reads return once finished
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.c == nil {
		return 0, b.err
	}
	b.c.armRead(dlUpstream, b.sp.p.upTimeout)
	n, err := b.body.Read(p)
	if err != nil {
		if err != io.EOF && b.ctx.Err() != nil {
			err = b.ctx.Err() // the subscriber went away, not Squid
		}
		b.finish(err)
	}
	return n, err
}

// Close ends the body; before its end the connection is closed (what is
// left of the response is unknown).
func (b *upstreamBody) Close() error {
	if b.c != nil {
		b.finish(errors.New("httpproxy: body closed"))
	}
	return nil
}

// finish ends the exchange after the body ended with err (io.EOF or nil:
// its end).
func (b *upstreamBody) finish(err error) {
	c := b.c
	b.c = nil
	end := err == nil || err == io.EOF
	if end {
		b.err = io.EOF
	} else {
		b.err = err
	}
	notFired := b.stop()
	reuse := end && b.reuse && notFired && b.br.Buffered() == 0
	b.br.Reset(nil)
	stdlibReaders.Put(b.br)
	if reuse {
		c.armRead(dlNone, 0)
		b.sp.put(c)
	} else {
		c.Close()
	}
}

// dialSquidFor connects to Squid and, with PROXY protocol, sends the
// header naming subscriber sub (its port may be 0). The connection counts
// its bytes in pep_http_upstream_bytes_total.
func (p *Proxy) dialSquidFor(ctx context.Context, sub netip.AddrPort) (*countConn, error) {
	c, err := dialer.DialContext(ctx, "tcp", p.squidAddr)
	if err != nil {
		return nil, fmt.Errorf("httpproxy: connecting to squid: %w", err)
	}
	p.m.upstreamConns.WithLabelValues("squid").Inc()
	if p.pp {
		srcAddr := net.TCPAddrFromAddrPort(sub)
		dstAddr := net.TCPAddrFromAddrPort(netip.AddrPortFrom(p.vip, 80))
		if sub.Addr().Is6() {
			dstAddr = &net.TCPAddr{IP: net.IPv6loopback, Port: 80}
		}
		h := proxyproto.HeaderProxyFromAddrs(1, srcAddr, dstAddr)
		if _, err := h.WriteTo(c); err != nil {
			c.Close()
			return nil, fmt.Errorf("httpproxy: writing PROXY header to squid: %w", err)
		}
	}
	return &countConn{Conn: newRawConn(c), in: p.m.upstreamIn, out: p.m.upstreamOut}, nil
}

var dialer = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
