package httpproxy

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// batchMax bounds the bytes a batchConn queues before a writer waits for
// them to be written: about one TLS record (16 KB, RFC 8446 §5.1). Bytes
// queued here are outside the HTTP/2 write scheduler's control, as bytes
// in the socket are (radio.notsent_lowat keeps those at 16 KiB), so a
// stylesheet asked for now waits behind at most this much more.
const batchMax = 16 << 10

// batchGrace bounds how long Close waits for the queued bytes to be
// written before it closes the connection (a subscriber that reads
// nothing would otherwise hold Close until the write deadline).
const batchGrace = time.Second

// batchBufs holds the buffers of bursts in progress: a connection between
// bursts (an idle HTTP/2 connection) holds none.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// batchConn hands the writes of one burst to its connection in one
// write(2) (issue 25, CPU per request over HTTP/2). Go's HTTP/2 server
// flushes its 4 KB buffer whenever its write queue is empty, so a cached
// response goes out as three writes: the HEADERS frame (the handler waits
// for it), the DATA frames, and the empty DATA frame with END_STREAM when
// the handler returns. Each is a TLS record and a system call that, on a
// short path, also runs the peer's TCP input. Under the TLS connection, a
// batchConn copies each write into its queue and returns; the burst's
// first write starts one goroutine that yields once (so that the
// goroutines the write made runnable add theirs), then writes everything
// queued, and again while more arrives. With one processor (procs: 1) a
// response's three writes become one, and the responses of streams that
// finish together share it, up to batchMax.
//
// Errors: the first error of a write is returned by every later Write;
// the bytes that were queued with it are lost with the connection, as
// those of a failed write(2) are. Deadlines are the connection's: they
// bound the batch's write, and a new write deadline waits for the queued
// bytes, as Close does: each lets them be written (a GOAWAY, TLS's
// close_notify) for at most batchGrace.
type batchConn struct {
	net.Conn
	mu      sync.Mutex
	done    sync.Cond     // broadcast when a batch's write ends
	buf     *[]byte       // queued, not yet written; nil between bursts
	writing bool          // a goroutine is writing the queue, or about to
	inWrite bool          // that goroutine is in the connection's Write
	idle    chan struct{} // closed when writing ends, if Close waits for it
	err     error         // the first write error, or net.ErrClosed
}

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c}
	b.done.L = &b.mu
	return b
}

// Write queues p and returns len(p), or the error of an earlier write. It
// waits while a batch is being written (a socket that takes no more, as
// on a slow radio link, holds the writer as it would without batching,
// so the HTTP/2 scheduler keeps choosing what goes next) and while
// batchMax bytes are queued.
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.err == nil && (b.inWrite || b.buf != nil && len(*b.buf) >= batchMax) {
		b.done.Wait()
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.buf == nil {
		b.buf = batchBufs.Get().(*[]byte)
	}
	*b.buf = append(*b.buf, p...)
	if !b.writing {
		b.writing = true
		go b.flush()
	}
	return len(p), nil
}

// flush writes what is queued until nothing is, then returns the buffers.
func (b *batchConn) flush() {
	runtime.Gosched()
	b.mu.Lock()
	for b.buf != nil && b.err == nil {
		p := b.buf
		b.buf = nil
		b.inWrite = true
		b.mu.Unlock()
		_, err := b.Conn.Write(*p)
		putBatchBuf(p)
		b.mu.Lock()
		b.inWrite = false
		if err != nil && b.err == nil {
			b.err = err
		}
		b.done.Broadcast()
	}
	if b.buf != nil { // an error: what is queued is lost
		putBatchBuf(b.buf)
		b.buf = nil
	}
	b.writing = false
	if b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
	b.done.Broadcast()
	b.mu.Unlock()
}

// putBatchBuf returns p to batchBufs, unless a large burst grew it.
func putBatchBuf(p *[]byte) {
	if cap(*p) <= 2*batchMax {
		*p = (*p)[:0]
		batchBufs.Put(p)
	}
}

// drain waits at most batchGrace for the queued bytes to be written.
func (b *batchConn) drain() {
	b.mu.Lock()
	var idle chan struct{}
	if b.writing {
		if b.idle == nil {
			b.idle = make(chan struct{})
		}
		idle = b.idle
	}
	b.mu.Unlock()
	if idle != nil {
		t := time.NewTimer(batchGrace)
		select {
		case <-idle:
		case <-t.C:
		}
		t.Stop()
	}
}

// SetWriteDeadline sets the connection's write deadline once the bytes
// already written are out (for at most batchGrace): a deadline applies to
// the writes after it, as on a connection that writes at once. TLS's
// close_notify is written and then followed by a deadline of now ("any
// subsequent writes will fail"); without the wait the deadline would fail
// the queued alert and count a write timeout.
func (b *batchConn) SetWriteDeadline(t time.Time) error {
	b.drain()
	return b.Conn.SetWriteDeadline(t)
}

// SetDeadline is SetWriteDeadline and SetReadDeadline.
func (b *batchConn) SetDeadline(t time.Time) error {
	b.drain()
	return b.Conn.SetDeadline(t)
}

// Close waits at most batchGrace for the queued bytes to be written, then
// closes the connection; later Writes return net.ErrClosed.
func (b *batchConn) Close() error {
	b.drain()
	b.mu.Lock()
	if b.err == nil {
		b.err = net.ErrClosed
	}
	b.done.Broadcast()
	b.mu.Unlock()
	return b.Conn.Close()
}
