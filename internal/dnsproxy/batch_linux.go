package dnsproxy

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Datagram batches for recvmmsg(2) and sendmmsg(2): one system call moves
// up to len(hdrs) datagrams, so that under load the proxy spends a
// fraction of a system call per datagram (README.md "Performance"). The
// headers point into the batch's own buffers, which are allocated once;
// nothing is allocated per datagram.

// oobSpace holds one IP_PKTINFO or IPV6_PKTINFO control message.
var oobSpace = unix.CmsgSpace(unix.SizeofInet6Pktinfo)

// batch is a set of datagram slots. For receiving, every slot points to
// its own buffer, address and control space; for sending, the caller
// points the slots at the data to send (set).
type batch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for sockaddr_in too
	oob   []byte                  // oobSpace per slot
	bufs  [][]byte
	n     int // slots filled for sending
}

// newBatch returns a batch of n slots with a receive buffer of size bytes
// each (0: none, a send batch) and control space if oob.
func newBatch(n, size int, oob bool) *batch {
	b := &batch{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n), bufs: make([][]byte, n)}
	if oob {
		b.oob = make([]byte, n*oobSpace)
	}
	if size > 0 {
		mem := make([]byte, n*size)
		for i := range b.bufs {
			b.bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
		}
	}
	return b
}

// prepareRecv points every slot at its buffer, address and control space.
func (b *batch) prepareRecv(named bool) {
	for i := range b.hdrs {
		h := &b.hdrs[i].Hdr
		b.iovs[i].Base = &b.bufs[i][0]
		b.iovs[i].SetLen(len(b.bufs[i]))
		h.Iov = &b.iovs[i]
		h.SetIovlen(1)
		h.Name, h.Namelen = nil, 0
		if named {
			h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
			h.Namelen = unix.SizeofSockaddrInet6
		}
		h.Control = nil
		h.SetControllen(0)
		if b.oob != nil {
			h.Control = &b.oob[i*oobSpace]
			h.SetControllen(oobSpace)
		}
		h.Flags = 0
		b.hdrs[i].Len = 0
	}
}

// The sockets are non-blocking (Go's netpoller waits for them), so
// recvmmsg and sendmmsg never block and are made with RawSyscall6: the
// runtime's entersyscall would wake its sysmon thread whenever the process
// had gone idle, which at 10 000 queries/s cost a sixth of the proxy's CPU
// (README.md "Performance").

// recv reads up to len(b.hdrs) datagrams from rc, waiting for the first;
// it returns how many. Slot i then holds b.bufs[i][:b.hdrs[i].Len], the
// sender in b.names[i] if named, and its control messages.
func (b *batch) recv(rc syscall.RawConn, named bool) (int, error) {
	b.prepareRecv(named)
	var n int
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(len(b.hdrs)), 0, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		n, errno = int(r), e
		return true
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	return n, nil
}

// truncated reports whether the datagram in slot i did not fit its
// buffer.
func (b *batch) truncated(i int) bool { return b.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 }

// data returns the datagram received in slot i.
func (b *batch) data(i int) []byte { return b.bufs[i][:b.hdrs[i].Len] }

// control returns the control messages received in slot i.
func (b *batch) control(i int) []byte {
	if b.oob == nil {
		return nil
	}
	return b.oob[i*oobSpace : i*oobSpace+int(b.hdrs[i].Hdr.Controllen)]
}

// add queues data for sending to name (nil: the connected peer) with the
// control messages oob (may be nil). data, name and oob must stay
// unchanged until send returns. It reports false if the batch is full.
func (b *batch) add(data []byte, name *unix.RawSockaddrInet6, namelen uint32, oob []byte) bool {
	if b.n == len(b.hdrs) {
		return false
	}
	i := b.n
	h := &b.hdrs[i].Hdr
	*h = unix.Msghdr{}
	b.iovs[i].Base = nil
	if len(data) > 0 {
		b.iovs[i].Base = &data[0]
	}
	b.iovs[i].SetLen(len(data))
	h.Iov = &b.iovs[i]
	h.SetIovlen(1)
	if name != nil {
		h.Name, h.Namelen = (*byte)(unsafe.Pointer(name)), namelen
	}
	if len(oob) > 0 {
		h.Control = &oob[0]
		h.SetControllen(len(oob))
	}
	b.n++
	return true
}

// send writes the queued datagrams to rc and empties the batch. A
// datagram the kernel refuses is skipped; failed(i, err) is called for it
// (i is its index in the order added) and the rest are still sent. It
// returns an error only if rc itself failed (closed).
func (b *batch) send(rc syscall.RawConn, failed func(i int, err error)) error {
	defer func() { b.n = 0 }()
	for off := 0; off < b.n; {
		var sent int
		var errno syscall.Errno
		err := rc.Write(func(fd uintptr) bool {
			r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[off])), uintptr(b.n-off), 0, 0, 0)
			if e == unix.EAGAIN || e == unix.EINTR {
				return false
			}
			sent, errno = int(r), e
			return true
		})
		if err != nil {
			for i := off; i < b.n; i++ {
				failed(i, err)
			}
			return err
		}
		if errno != 0 {
			// The datagram at off was refused (sendmmsg reports the
			// error of the first datagram it could not send).
			failed(off, errno)
			off++
			continue
		}
		off += sent
	}
	return nil
}

// addrPort returns the address in a sockaddr_in or sockaddr_in6,
// unmapped.
func addrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	if sa.Family == unix.AF_INET {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
}

// replyOOB writes into dst the control message that makes a reply leave
// from the address a query arrived at (IP_PKTINFO or IPV6_PKTINFO, RFC
// 3542 §6), given the control messages oob received with the query, and
// returns it; nil if oob holds no packet information. Like miekg/dns, it
// sets only the source address, not the interface.
func replyOOB(dst, oob []byte) []byte {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return nil
		}
		data := oob[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			out := dst[:unix.CmsgSpace(unix.SizeofInet4Pktinfo)]
			clear(out)
			oh := (*unix.Cmsghdr)(unsafe.Pointer(&out[0]))
			oh.Level, oh.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
			oh.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
			in := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&out[unix.CmsgLen(0)]))
			pi.Spec_dst = in.Addr // the query's destination becomes the source
			return out
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			out := dst[:unix.CmsgSpace(unix.SizeofInet6Pktinfo)]
			clear(out)
			oh := (*unix.Cmsghdr)(unsafe.Pointer(&out[0]))
			oh.Level, oh.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
			oh.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
			in := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&out[unix.CmsgLen(0)]))
			pi.Addr = in.Addr // v4-mapped on a dual-stack socket: the kernel takes it (ip_cmsg_send)
			return out
		}
		oob = oob[min(len(oob), unix.CmsgSpace(l-unix.CmsgLen(0))):]
	}
	return nil
}

// enablePktinfo asks the kernel for each datagram's destination address
// on a socket bound to the unspecified address, so that replies leave
// from it (a host with several addresses, or nftables REDIRECT). It
// reports whether it did.
func enablePktinfo(rc syscall.RawConn) (bool, error) {
	var on bool
	var serr error
	err := rc.Control(func(fd uintptr) {
		var dom int
		dom, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		if serr != nil {
			return
		}
		switch dom {
		case unix.AF_INET:
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		case unix.AF_INET6:
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		default:
			serr = errors.New("dnsproxy: not an IP socket")
		}
		on = serr == nil
	})
	if err != nil {
		return false, err
	}
	return on, serr
}
