package httpproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// writeCounter counts the writes that reach a connection.
type writeCounter struct {
	net.Conn
	writes atomic.Int64
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes.Add(1)
	return w.Conn.Write(p)
}

// pipePeer returns a batchConn over one end of a net.Pipe, the counter of
// the writes that reach that end, and what the other end reads until the
// batchConn is closed.
func pipePeer(t *testing.T) (*batchConn, *writeCounter, <-chan []byte) {
	a, z := net.Pipe()
	t.Cleanup(func() { z.Close() })
	wc := &writeCounter{Conn: a}
	got := make(chan []byte, 1)
	go func() { p, _ := io.ReadAll(z); got <- p }()
	return newBatchConn(wc), wc, got
}

// TestBatchConn: the writes of one burst reach the connection as one
// write, whole and in order; Close and a new write deadline let what is
// queued out first; an error of the connection comes back from the next
// Write; a reader that takes nothing holds the writer at batchMax and
// fails it at the write deadline.
func TestBatchConn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	t.Run("burst", func(t *testing.T) {
		b, wc, got := pipePeer(t)
		// Three writes before the writer yields, as Go's HTTP/2 server
		// writes HEADERS, DATA and END_STREAM of a response.
		var want bytes.Buffer
		for i := range 3 {
			p := bytes.Repeat([]byte{byte('a' + i)}, 1000*(i+1))
			want.Write(p)
			if _, err := b.Write(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if p := <-got; !bytes.Equal(p, want.Bytes()) {
			t.Fatalf("the peer read %d bytes, not the %d written in order", len(p), want.Len())
		}
		if n := wc.writes.Load(); n != 1 {
			t.Errorf("%d writes reached the connection, want 1", n)
		}
	})
	t.Run("close writes the queue", func(t *testing.T) {
		b, _, got := pipePeer(t)
		b.Write([]byte("GOAWAY"))
		b.Close() // before the flush goroutine has run
		if p := <-got; string(p) != "GOAWAY" {
			t.Fatalf("the peer read %q before the close, want GOAWAY", p)
		}
	})
	t.Run("a deadline after a write", func(t *testing.T) {
		// TLS's close_notify: the alert, then a write deadline of now.
		b, _, got := pipePeer(t)
		b.Write([]byte("close_notify"))
		b.SetWriteDeadline(time.Now())
		if _, err := b.Write([]byte("late")); err != nil {
			t.Fatalf("a write after the deadline is queued: %v", err)
		}
		b.Close()
		if p := <-got; string(p) != "close_notify" {
			t.Fatalf("the peer read %q, want the bytes written before the deadline, close_notify", p)
		}
	})
	t.Run("close, a reader that takes nothing", func(t *testing.T) {
		a, z := net.Pipe()
		defer z.Close()
		b := newBatchConn(a)
		b.Write(make([]byte, 4<<10))
		start := time.Now()
		b.Close()
		if d := time.Since(start); d < batchGrace/2 || d > batchGrace+2*time.Second {
			t.Errorf("Close took %v with a write blocked, want about batchGrace (%v)", d, batchGrace)
		}
		if _, err := b.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Errorf("a write after Close: %v, want net.ErrClosed", err)
		}
	})
	t.Run("error comes back", func(t *testing.T) {
		a, z := net.Pipe()
		z.Close()
		b := newBatchConn(a)
		defer b.Close()
		if _, err := b.Write([]byte("x")); err != nil {
			t.Fatalf("first write: %v (queued, want nil)", err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := b.Write([]byte("y"))
			if errors.Is(err, io.ErrClosedPipe) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("writes to a closed peer still succeed after 5 s (last: %v)", err)
			}
			time.Sleep(time.Millisecond)
		}
	})
	t.Run("slow reader", func(t *testing.T) {
		a, z := net.Pipe() // unbuffered: nothing is taken until z reads
		defer z.Close()
		b := newBatchConn(a)
		defer b.Close()
		a.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		start := time.Now()
		var err error
		var queued int
		for queued < 4*batchMax && err == nil {
			var n int
			n, err = b.Write(make([]byte, 4<<10))
			queued += n
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("after %d bytes to a reader that takes none: %v, want the deadline's error", queued, err)
		}
		// One batch in the write that fails; nothing queued behind it.
		if queued > batchMax+4<<10 {
			t.Errorf("%d bytes were taken for a reader that reads none, want at most one batch of batchMax (%d)", queued, batchMax)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the writer was failed after %v, want about the 200 ms deadline", d)
		}
	})
}

// TestIPLiteral: ipLiteral agrees with netip.ParseAddr on IP literals and
// host names, including names that end in a digit.
func TestIPLiteral(t *testing.T) {
	for _, s := range []string{"", "1.2.3.4", "10.0.0.12", "256.1.1.1", "1.2.3", "::1", "fe80::1%eth0",
		"::ffff:1.2.3.4", "2001:db8::a", "example.com", "host1", "a", "img.cdn.test", "1e100.net", "a.b.c.4"} {
		want, werr := netip.ParseAddr(s)
		got, ok := ipLiteral(s)
		if ok != (werr == nil) || got != want {
			t.Errorf("ipLiteral(%q) = %v, %v; netip.ParseAddr: %v, %v", s, got, ok, want, werr)
		}
	}
}
