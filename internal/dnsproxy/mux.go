package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Upstream UDP sockets shared by concurrent queries (RFC 5452 §9.1, §9.2).
// Each resolver has one current connected UDP socket with a source port
// chosen at random by the kernel. A socket takes at most socketUses
// queries in its life, each with a random ID unique among the socket's
// queries in flight; then the next query opens a new socket, and the old
// one is closed once its last query is answered or timed out. So the
// source port changes every socketUses queries, and a forged answer has to
// hit the port and one of at most socketUses IDs.
//
// A goroutine per socket reads the answers in batches (recvmmsg), gives
// each to the query it answers (same ID and question, Upstream.accept),
// and counts and skips the others while the wait goes on. The socket's
// read deadline is the oldest query's timeout; when it passes, the queries
// due are failed with os.ErrDeadlineExceeded.
const (
	socketUses  = 64
	answerSlot  = 65535 // bytes per answer in a read batch: the largest UDP payload
	answerBurst = 8     // answers per recvmmsg
)

// waiter gets the outcome of one upstream attempt of a pending query,
// exactly once: the answer (valid only during the call; the ID is the one
// sent upstream) or an error. r is the socket reader's current batch, for
// work the waiter leaves to the batch's end; nil means no batch.
type waiter interface {
	upstreamDone(p *pending, ans []byte, err error, r *round)
}

// round is one read batch of a socket's reader (recvmmsg). A waiter may
// leave work for the batch's end in its sink (the UDP server: its answers
// to clients, sent in one sendmmsg, udp.go); the reader ends the round
// after every batch. The mux knows of the sink only that it flushes, so
// the upstream layer does not depend on the servers above it.
type round struct {
	sink interface{ flush() }
}

// end flushes what the batch's waiters left in the sink.
func (r *round) end() {
	if r.sink != nil {
		r.sink.flush()
	}
}

// pending is one query waiting for its answer on a socket.
type pending struct {
	q        []byte // the query as sent; the socket writes the ID
	qend     int    // offset past its question
	server   string
	sent     time.Time
	deadline time.Time
	w        waiter
}

// udpMux holds the current socket of each resolver.
type udpMux struct {
	u   *Upstream
	mu  sync.Mutex
	cur map[string]*udpSocket
}

// reg identifies one registration of a pending query: its socket and
// slot. Slots are never reused, so a reg stays unique after the query is
// done and its memory reused.
type reg struct {
	sock *udpSocket
	slot int
}

// take registers p on server's current socket, opening a new one when the
// current one is used up, writes a fresh random ID into p.q, and appends
// the query as it is to be sent to buf. From the moment take returns, p
// may be answered or time out and be taken over by its waiter: the caller
// sends the copy, never p.q, and touches p again only through
// reg.sock.abort(p, reg.slot).
func (m *udpMux) take(server string, p *pending, buf []byte) (reg, []byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.cur[server]; s != nil {
		if slot, b, ok := s.add(p, buf); ok {
			return reg{s, slot}, b, nil
		}
	}
	c, err := m.u.dialer.Dial("udp", server)
	if err != nil {
		return reg{}, buf, err
	}
	uc := c.(*net.UDPConn)
	rc, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return reg{}, buf, err
	}
	s := &udpSocket{u: m.u, server: server, conn: uc, rc: rc}
	m.cur[server] = s
	slot, b, _ := s.add(p, buf)
	go s.run()
	return reg{s, slot}, b, nil
}

// udpSocket is one connected socket to one resolver.
type udpSocket struct {
	u      *Upstream
	server string
	conn   *net.UDPConn
	rc     syscall.RawConn

	mu    sync.Mutex
	slots [socketUses]*pending // by order of sending; nil once done
	ids   [socketUses]uint16
	used  int  // slots taken
	live  int  // queries waiting
	head  int  // no query waits in slots[:head]
	armed bool // a read deadline is set
	dead  bool // closed, or failed: takes no query
}

// add takes p if the socket has a slot left, and appends p.q with its
// new ID to buf.
func (s *udpSocket) add(p *pending, buf []byte) (int, []byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead || s.used == socketUses {
		return 0, buf, false
	}
	id := uint16(rand.Uint32())
	for s.idLive(id) {
		id = uint16(rand.Uint32())
	}
	i := s.used
	s.used++
	s.live++
	s.slots[i], s.ids[i] = p, id
	p.q[0], p.q[1] = byte(id>>8), byte(id)
	p.server = s.server
	p.sent = time.Now()
	p.deadline = p.sent.Add(s.u.timeout)
	if !s.armed {
		s.armed = true
		s.conn.SetReadDeadline(p.deadline)
	}
	return i, append(buf, p.q...), true
}

func (s *udpSocket) idLive(id uint16) bool {
	for i := s.head; i < s.used; i++ {
		if s.slots[i] != nil && s.ids[i] == id {
			return true
		}
	}
	return false
}

// remove takes slot i out; s.mu is held. It reports whether the socket is
// now used up and idle, to be closed by the caller after unlocking.
func (s *udpSocket) remove(i int) (closeNow bool) {
	s.slots[i] = nil
	s.live--
	for s.head < s.used && s.slots[s.head] == nil {
		s.head++
	}
	if s.live == 0 && s.used == socketUses && !s.dead {
		s.dead = true
		return true
	}
	return false
}

// abort takes p out of slot if it still waits there (its send failed,
// or its caller gave up), so that no answer reaches its waiter; it
// reports whether it did. Otherwise the waiter has been or is being told,
// and p may already serve another query.
func (s *udpSocket) abort(p *pending, slot int) bool {
	s.mu.Lock()
	if s.slots[slot] != p {
		s.mu.Unlock()
		return false
	}
	closeNow := s.remove(slot)
	s.mu.Unlock()
	if closeNow {
		s.conn.Close()
	}
	return true
}

var recvBatches = sync.Pool{New: func() any { return newBatch(answerBurst, answerSlot, false) }}

// run reads answers until the socket is closed.
func (s *udpSocket) run() {
	b := recvBatches.Get().(*batch)
	defer recvBatches.Put(b)
	var out round
	for {
		n, err := b.recv(s.rc, false)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			closeNow := s.expire(&out)
			out.end()
			if closeNow {
				s.conn.Close()
				return
			}
			continue
		case errors.Is(err, net.ErrClosed):
			return
		default:
			// ICMP port unreachable (ECONNREFUSED) and the like: the
			// resolver is not there; every query on the socket fails.
			s.fail(err, &out)
			out.end()
			return
		}
		closeNow := false
		for i := range n {
			if s.deliver(b.data(i), &out) {
				closeNow = true
			}
		}
		out.end()
		if closeNow {
			s.conn.Close()
			return
		}
	}
}

// deliver hands ans to the query it answers; it reports whether the
// socket is now used up and idle.
func (s *udpSocket) deliver(ans []byte, out *round) bool {
	u := s.u
	if len(ans) < headerLen {
		u.skip(s.server, errShort, false)
		return false
	}
	id := uint16(ans[0])<<8 | uint16(ans[1])
	s.mu.Lock()
	slot := -1
	for i := s.head; i < s.used; i++ {
		if s.slots[i] != nil && s.ids[i] == id {
			slot = i
			break
		}
	}
	if slot < 0 {
		s.mu.Unlock()
		u.skip(s.server, errors.New("dnsproxy: answer to another query"), false)
		return false
	}
	p := s.slots[slot]
	if err, bad := u.accept(p.q, ans, p.qend); err != nil {
		s.mu.Unlock()
		u.skip(s.server, err, bad)
		return false
	}
	closeNow := s.remove(slot)
	s.mu.Unlock()
	u.udpLatency.Observe(time.Since(p.sent).Seconds())
	p.w.upstreamDone(p, ans, nil, out)
	return closeNow
}

// expire fails the queries whose timeout has passed and sets the read
// deadline to the next one's. It reports whether the socket is now used
// up and idle.
func (s *udpSocket) expire(out *round) bool {
	var due [socketUses]*pending
	n := 0
	now := time.Now()
	s.mu.Lock()
	closeNow := false
	for i := s.head; i < s.used; i++ {
		p := s.slots[i]
		if p == nil {
			continue
		}
		if p.deadline.After(now) {
			break // later queries have later deadlines
		}
		due[n] = p
		n++
		if s.remove(i) {
			closeNow = true
		}
	}
	if s.live > 0 {
		s.conn.SetReadDeadline(s.slots[s.head].deadline)
	} else {
		s.armed = false
		s.conn.SetReadDeadline(time.Time{})
	}
	s.mu.Unlock()
	err := fmt.Errorf("dnsproxy: resolver %s: %w", s.server, os.ErrDeadlineExceeded)
	for _, p := range due[:n] {
		p.w.upstreamDone(p, nil, err, out)
	}
	return closeNow
}

// fail fails every waiting query with err and closes the socket.
func (s *udpSocket) fail(err error, out *round) {
	var due [socketUses]*pending
	n := 0
	s.mu.Lock()
	s.dead = true
	for i := s.head; i < s.used; i++ {
		if p := s.slots[i]; p != nil {
			due[n] = p
			n++
			s.slots[i] = nil
			s.live--
		}
	}
	s.mu.Unlock()
	s.conn.Close()
	err = fmt.Errorf("dnsproxy: resolver %s: %w", s.server, err)
	for _, p := range due[:n] {
		p.w.upstreamDone(p, nil, err, out)
	}
}

// syncWaiter turns an attempt into a blocking call (Upstream.Exchange).
type syncWaiter struct{ ch chan syncResult }

type syncResult struct {
	ans []byte
	err error
}

func (w *syncWaiter) upstreamDone(_ *pending, ans []byte, err error, _ *round) {
	if err == nil {
		ans = append([]byte(nil), ans...)
	}
	w.ch <- syncResult{ans, err}
}

// exchange sends q (one question ending at qend; its ID is replaced) to
// server over a shared socket and waits for the answer, the attempt's
// timeout or ctx.
func (m *udpMux) exchange(ctx context.Context, server string, q []byte, qend int) ([]byte, error) {
	w := &syncWaiter{ch: make(chan syncResult, 1)}
	p := &pending{q: q, qend: qend, w: w}
	r, b, err := m.take(server, p, nil)
	if err != nil {
		return nil, err
	}
	if _, err := r.sock.conn.Write(b); err != nil && r.sock.abort(p, r.slot) {
		return nil, err
	}
	select {
	case r := <-w.ch:
		return r.ans, r.err
	case <-ctx.Done():
		if r.sock.abort(p, r.slot) {
			return nil, ctx.Err()
		}
		r := <-w.ch
		return r.ans, r.err
	}
}
