package httpproxy

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawConn is a TCP connection whose Read and Write are read(2) and
// write(2) made with syscall.RawSyscall on the non-blocking socket,
// waiting for readiness in the runtime's netpoller (syscall.RawConn) only
// when the socket has nothing to read or no room to write; deadlines,
// Close and everything else are the *net.TCPConn's.
//
// Why: net.Conn's Read and Write enter the scheduler's syscall state.
// When a relay goroutine's write of a response to loopback TCP (which
// runs the receiver's TCP input in the caller) outlasts the scheduler's
// 20 µs monitor tick while other goroutines are runnable, the runtime
// hands the processor to another OS thread (futex wake, context switch)
// and takes it back afterwards. On the 2-core test machine that churn
// was about a third of a byte forwarder's CPU per cached request
// (BenchmarkCachedRequestCPU). A raw system call keeps the processor;
// reads and writes on a non-blocking socket never block, so no other
// goroutine waits longer than one such call.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

// newRawConn wraps c, or returns c unchanged if it is not a *net.TCPConn
// or has no raw access (then the caller uses c's own Read and Write).
func newRawConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &rawConn{TCPConn: tc, rc: rc}
}

// Read reads at most len(b) bytes; io.EOF at the end of the stream. It
// waits for data in the netpoller, honouring the read deadline.
func (c *rawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			switch e {
			case 0:
				n = int(r)
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", errno)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of b, waiting for room in the netpoller as needed and
// honouring the write deadline; it returns the bytes written and the
// first error.
func (c *rawConn) Write(b []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	if err == nil && errno != 0 {
		err = &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("write", errno)}
	}
	return n, err
}

// setRcvLowat sets SO_RCVLOWAT (socket(7)): the netpoller is told the
// socket is readable only once n bytes are queued (or at the end of the
// stream), so a response body Squid writes in several pieces wakes the
// relay once instead of once per piece. A read still returns what is
// there. n is at least 1 (the default).
func (c *rawConn) setRcvLowat(n int) error {
	var errno syscall.Errno
	v := int32(max(n, 1))
	err := c.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, uintptr(unsafe.Pointer(&v)), 4, 0)
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("setsockopt SO_RCVLOWAT", errno)
	}
	return err
}
