package dnsproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The UDP server. One goroutine reads client queries in batches
// (recvmmsg). A query the fast path understands (parseQuery) is decided
// from its header and question alone, copied, and forwarded as it is (a
// fresh random ID) over the shared upstream sockets (mux.go), in batches
// (sendmmsg); the goroutine reading the upstream socket writes the answer
// back, with the client's ID, in batches again. Only answers to names the
// policy matches are unpacked (Proxy.answer). Every other datagram goes
// to the slow path: miekg/dns unpacks it and ServeDNS answers it in a
// goroutine of its own, as miekg/dns's server does.
const (
	queryBurst = 32   // queries per recvmmsg
	querySlot  = 4096 // bytes per query; a longer one is cut and gets FORMERR (miekg/dns's server reads 512)
)

// udpServer serves one UDP socket.
type udpServer struct {
	p       *Proxy
	conn    *net.UDPConn
	rc      syscall.RawConn
	pktinfo bool // replies leave from each query's destination address
	wg      sync.WaitGroup
	closing atomic.Bool
	done    chan struct{} // closed when the read loop has returned
}

// newUDPServer prepares c for the fast path.
func newUDPServer(p *Proxy, c *net.UDPConn) (*udpServer, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &udpServer{p: p, conn: c, rc: rc, done: make(chan struct{})}
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok && a.IP.IsUnspecified() {
		if s.pktinfo, err = enablePktinfo(rc); err != nil {
			return nil, err
		}
	}
	_ = c.SetReadBuffer(4 << 20) // absorb bursts; the kernel caps it at rmem_max
	return s, nil
}

// serve reads queries until shutdown (nil) or a socket error.
func (s *udpServer) serve() error {
	defer close(s.done)
	in := newBatch(queryBurst, querySlot, s.pktinfo)
	f := &fwdBatch{out: newBatch(queryBurst, 0, false), wire: make([]byte, 0, queryBurst*512)}
	fwd := make([]*clientQuery, 0, queryBurst)
	name := make([]byte, 0, 256)
	for {
		n, err := in.recv(s.rc, true)
		if err != nil {
			if s.closing.Load() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var errno syscall.Errno
			if errors.As(err, &errno) && (errno == unix.ENOMEM || errno == unix.ENOBUFS || errno == unix.ECONNREFUSED) {
				continue
			}
			return err
		}
		for i := range n {
			if c := s.handle(in, i, name); c != nil {
				fwd = append(fwd, c)
			}
		}
		s.forward(fwd, f)
		clear(fwd)
		fwd = fwd[:0]
	}
}

// handle takes the query in slot i: it returns it ready to forward, or
// nil if the slow path has it.
func (s *udpServer) handle(in *batch, i int, name []byte) *clientQuery {
	p, u := s.p, s.p.up
	data, from, oob := in.data(i), &in.names[i], in.control(i)
	if in.truncated(i) {
		s.slow(data, from, oob)
		return nil
	}
	wq, name, ok := parseQuery(data, name[:0])
	if !ok || wq.qtype == dns.TypeANY || !p.guard.ClientAllowed(addrPort(from).Addr()) {
		s.slow(data, from, oob)
		return nil
	}
	select {
	case u.sem <- struct{}{}:
	default: // max_inflight: the slow path waits for a slot, as long as a timeout
		s.slow(data, from, oob)
		return nil
	}
	reason, candidate := p.decide(wq.qtype, wq.qclass, wq.do, name)
	c := clientQueries.Get().(*clientQuery)
	n := copy(c.buf[:], data)
	c.pending = pending{q: c.buf[:n], qend: wq.qend, w: c}
	c.question = question{wire: c.buf[:n], id: binary.BigEndian.Uint16(data), tl: typeLabel(wq.qtype),
		reason: reason, candidate: candidate, udpSize: wq.udpSize}
	c.srv, c.attempt, c.reply = s, 0, nil
	c.name, c.namelen = *from, in.hdrs[i].Hdr.Namelen
	c.oob = nil
	if s.pktinfo {
		c.oob = replyOOB(c.oobBuf[:], oob)
	}
	s.wg.Add(1)
	return c
}

// forward sends the first attempt of every query in fwd: all are
// registered first, then each run on one socket goes out in one sendmmsg.
// Once registered, a query may be answered or time out before it is sent
// (a stalled reader, a forged answer): from then on only the copies in
// f.wire and the registrations f.regs are used.
func (s *udpServer) forward(fwd []*clientQuery, f *fwdBatch) {
	u := s.p.up
	server, _ := u.attemptServer(0)
	f.wire, f.regs = f.wire[:0], f.regs[:0]
	for _, c := range fwd {
		start := len(f.wire)
		r, b, err := u.mux.take(server, &c.pending, f.wire)
		if err != nil {
			c.retry(server, err, nil)
			continue
		}
		f.wire = b
		f.regs = append(f.regs, fwdReg{reg: r, c: c, start: start, end: len(b)})
	}
	for i := 0; i < len(f.regs); {
		sock := f.regs[i].sock
		j := i
		for ; j < len(f.regs) && f.regs[j].sock == sock; j++ {
			f.out.add(f.wire[f.regs[j].start:f.regs[j].end], nil, 0, nil)
		}
		run := f.regs[i:j]
		f.out.send(sock.rc, func(k int, err error) {
			if r := run[k]; sock.abort(&r.c.pending, r.slot) {
				r.c.retry(server, err, nil)
			}
		})
		i = j
	}
	clear(f.regs)
}

// fwdBatch is the client reader's state for forwarding one batch.
type fwdBatch struct {
	out  *batch
	wire []byte // the queries as sent, back to back
	regs []fwdReg
}

type fwdReg struct {
	reg
	c          *clientQuery
	start, end int // of the query in wire
}

// slow answers a datagram the fast path does not take through miekg/dns
// and ServeDNS, in a goroutine, as miekg/dns's server does: responses and
// datagrams shorter than a header are dropped (any reply could be used to
// amplify), other opcodes than QUERY and NOTIFY get NOTIMP, malformed
// queries FORMERR.
func (s *udpServer) slow(data []byte, from *unix.RawSockaddrInet6, oob []byte) {
	if len(data) < headerLen || data[2]&0x80 != 0 {
		return
	}
	w := &udpWriter{s: s, to: addrPort(from)}
	if s.pktinfo {
		w.oob = replyOOB(make([]byte, oobSpace), oob)
	}
	pkt := append([]byte(nil), data...)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r := new(dns.Msg)
		opcode := int(pkt[2]>>3) & 0xF
		qd, an, ns, ar := binary.BigEndian.Uint16(pkt[4:]), binary.BigEndian.Uint16(pkt[6:]), binary.BigEndian.Uint16(pkt[8:]), binary.BigEndian.Uint16(pkt[10:])
		rcode := dns.RcodeSuccess
		switch {
		case opcode != dns.OpcodeQuery && opcode != dns.OpcodeNotify:
			rcode = dns.RcodeNotImplemented
		case qd != 1 || an > 1 || ns > 1 || ar > 2: // miekg/dns's defaultMsgAcceptFunc
			rcode = dns.RcodeFormatError
		default:
			if err := r.Unpack(pkt); err != nil {
				rcode = dns.RcodeFormatError
			}
		}
		if rcode != dns.RcodeSuccess {
			m := new(dns.Msg)
			m.Id, m.Opcode = binary.BigEndian.Uint16(pkt), opcode
			m.RecursionDesired, m.CheckingDisabled = pkt[2]&0x01 != 0, pkt[3]&0x10 != 0
			if len(r.Question) > 0 {
				m.Question = r.Question[:1]
			}
			m.SetRcode(m, rcode)
			m.Opcode = opcode
			s.p.m.queries.with("other", "formerr").Inc()
			w.WriteMsg(m)
			return
		}
		s.p.ServeDNS(w, r)
	}()
}

// shutdown stops reading, waits until ctx is done for the queries being
// answered, and closes the socket.
func (s *udpServer) shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.conn.SetReadDeadline(time.Now())
	<-s.done
	idle := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(idle)
	}()
	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.conn.Close()
	return err
}

// question is a client query being answered, shared by ServeDNS and the
// fast path (Proxy.answer).
type question struct {
	wire      []byte   // the client's query; its ID may differ
	msg       *dns.Msg // wire unpacked with the client's ID, nil until needed
	id        uint16   // the client's ID
	tl        string   // type label
	reason    string   // why not rewritten, or the rewrite's reason
	candidate bool     // the answer may be rewritten
	udpSize   int      // largest UDP answer the client takes
}

// unpacked returns the query unpacked.
func (q *question) unpacked() (*dns.Msg, error) {
	if q.msg == nil {
		m := new(dns.Msg)
		if err := m.Unpack(q.wire); err != nil {
			return nil, err
		}
		m.Id = q.id
		q.msg = m
	}
	return q.msg, nil
}

// clientQuery is a fast-path query from the time it is read until its
// answer is sent. It is pooled: nothing may hold it after release.
type clientQuery struct {
	pending
	question
	srv     *udpServer
	attempt int
	name    unix.RawSockaddrInet6 // the client
	namelen uint32
	oobBuf  [64]byte
	oob     []byte // control message for the reply, or nil
	reply   []byte // the answer while it waits in a reply batch
	buf     [querySlot]byte
}

var clientQueries = sync.Pool{New: func() any { return new(clientQuery) }}

// upstreamDone implements waiter: the answers of one read batch of the
// upstream socket go to clients in one sendmmsg (the round's replies).
func (c *clientQuery) upstreamDone(p *pending, ans []byte, err error, r *round) {
	out := roundReplies(r)
	switch {
	case err != nil:
		c.retry(p.server, err, out)
	case truncated(ans):
		go c.overTCP(p.server)
	default:
		c.send(c.srv.p.answer(&c.question, ans, false), out)
	}
}

// roundReplies returns the replies that round r collects, made on first
// use; nil r: none (answers go out at once).
func roundReplies(r *round) *replies {
	if r == nil {
		return nil
	}
	out, ok := r.sink.(*replies)
	if !ok {
		out = new(replies)
		r.sink = out
	}
	return out
}

// retry counts the failed attempt at server and goes on with the next
// (Upstream's retry policy, upstream.go).
func (c *clientQuery) retry(server string, err error, out *replies) {
	c.srv.p.up.attemptFailed(server, c.attempt, err)
	c.attempt++
	c.forward(out)
}

// forward sends the query's next attempt over UDP, or answers SERVFAIL
// when none is left (Upstream's retry policy).
func (c *clientQuery) forward(out *replies) {
	u := c.srv.p.up
	var buf [querySlot]byte
	for ; ; c.attempt++ {
		server, ok := u.attemptServer(c.attempt)
		if !ok {
			break
		}
		r, b, err := u.mux.take(server, &c.pending, buf[:0])
		if err == nil {
			if _, err = r.sock.conn.Write(b); err == nil || !r.sock.abort(&c.pending, r.slot) {
				return // c belongs to the socket now (see udpMux.take)
			}
		}
		u.attemptFailed(server, c.attempt, err)
	}
	c.send(c.srv.p.servfail(&c.question), out)
}

// overTCP asks again over TCP after a truncated UDP answer, in the same
// attempt (Upstream's retry policy).
func (c *clientQuery) overTCP(server string) {
	ans, err := c.srv.p.up.tcpAttempt(context.Background(), server, c.q, c.qend)
	if err != nil {
		c.retry(server, err, nil)
		return
	}
	c.send(c.srv.p.answer(&c.question, ans, false), nil)
}

// send queues the answer b in out, or sends it at once if out is nil,
// and then releases c.
func (c *clientQuery) send(b []byte, out *replies) {
	if out != nil {
		out.add(c, b)
		return
	}
	one := newBatch(1, 0, false)
	one.add(b, &c.name, c.namelen, c.oob)
	one.send(c.srv.rc, func(_ int, err error) { c.srv.p.log.Debug("writing answer", "client", addrPort(&c.name), "err", err) })
	c.release()
}

func (c *clientQuery) release() {
	<-c.srv.p.up.sem
	c.srv.wg.Done()
	c.msg, c.reply, c.srv, c.pending.w = nil, nil, nil, nil
	clientQueries.Put(c)
}

// replies collects answers to clients and sends them in one sendmmsg per
// listening socket.
type replies struct {
	srv *udpServer
	b   *batch
	cs  []*clientQuery
}

func (r *replies) add(c *clientQuery, data []byte) {
	if r.b == nil {
		r.b = newBatch(queryBurst, 0, false)
	}
	if (r.srv != nil && r.srv != c.srv) || r.b.n == len(r.b.hdrs) {
		r.flush()
	}
	r.srv = c.srv
	c.reply = data
	r.b.add(data, &c.name, c.namelen, c.oob)
	r.cs = append(r.cs, c)
}

func (r *replies) flush() {
	if r.b == nil || r.b.n == 0 {
		return
	}
	r.b.send(r.srv.rc, func(i int, err error) {
		r.srv.p.log.Debug("writing answer", "client", addrPort(&r.cs[i].name), "err", err)
	})
	for _, c := range r.cs {
		c.release()
	}
	clear(r.cs)
	r.cs, r.srv = r.cs[:0], nil
}

// wireQuery is what the fast path reads from a query.
type wireQuery struct {
	qend    int // offset past the question
	qtype   uint16
	qclass  uint16
	do      bool // EDNS0 DO bit (RFC 3225)
	udpSize int  // largest UDP answer the client takes: EDNS0 size, at least 512 (RFC 6891 §6.2.5), else 512
}

// parseQuery reads a query the fast path forwards as it is: QR clear,
// opcode QUERY, one question whose name is uncompressed with labels of
// letters, digits, '-' and '_' only, no answer or authority records, at
// most one record in the additional section and that an OPT owned by the
// root (RFC 6891 §6.1.2), nothing after it. It appends the question name,
// lower-case, labels joined by dots, no trailing dot, to name. ok is false
// for any other datagram; the slow path takes those.
func parseQuery(msg, name []byte) (q wireQuery, _ []byte, ok bool) {
	if len(msg) < headerLen || msg[2]&0xF8 != 0 || // QR, opcode
		binary.BigEndian.Uint16(msg[4:]) != 1 || binary.BigEndian.Uint16(msg[6:]) != 0 ||
		binary.BigEndian.Uint16(msg[8:]) != 0 || binary.BigEndian.Uint16(msg[10:]) > 1 {
		return q, name, false
	}
	off := headerLen
	for {
		if off >= len(msg) || off-headerLen > 254 {
			return q, name, false
		}
		l := int(msg[off])
		if l == 0 {
			off++
			break
		}
		if l > 63 || off+1+l > len(msg) {
			return q, name, false
		}
		if len(name) > 0 {
			name = append(name, '.')
		}
		for _, c := range msg[off+1 : off+1+l] {
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			default:
				return q, name, false
			}
			name = append(name, c)
		}
		off += 1 + l
	}
	if off+4 > len(msg) {
		return q, name, false
	}
	q.qtype, q.qclass = binary.BigEndian.Uint16(msg[off:]), binary.BigEndian.Uint16(msg[off+2:])
	off += 4
	q.qend = off
	q.udpSize = dns.MinMsgSize
	if binary.BigEndian.Uint16(msg[10:]) == 0 {
		return q, name, off == len(msg)
	}
	// OPT: root name, type 41, class = UDP size, TTL = extended rcode,
	// version, DO and Z, RDLENGTH, options.
	if off+11 > len(msg) || msg[off] != 0 || binary.BigEndian.Uint16(msg[off+1:]) != dns.TypeOPT {
		return q, name, false
	}
	q.udpSize = max(dns.MinMsgSize, int(binary.BigEndian.Uint16(msg[off+3:])))
	q.do = msg[off+7]&0x80 != 0
	end := off + 11 + int(binary.BigEndian.Uint16(msg[off+9:]))
	return q, name, end == len(msg)
}

// udpWriter is the dns.ResponseWriter of the slow path.
type udpWriter struct {
	s   *udpServer
	to  netip.AddrPort
	oob []byte
}

func (w *udpWriter) LocalAddr() net.Addr  { return w.s.conn.LocalAddr() }
func (w *udpWriter) RemoteAddr() net.Addr { return net.UDPAddrFromAddrPort(w.to) }
func (w *udpWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
func (w *udpWriter) Write(b []byte) (int, error) {
	n, _, err := w.s.conn.WriteMsgUDPAddrPort(b, w.oob, w.to)
	return n, err
}
func (w *udpWriter) Close() error        { return nil }
func (w *udpWriter) TsigStatus() error   { return nil }
func (w *udpWriter) TsigTimersOnly(bool) {}
func (w *udpWriter) Hijack()             {}
