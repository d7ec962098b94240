package netem

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// vnetHdrLen is the size of struct virtio_net_hdr, which the kernel puts in
// front of every frame on a PACKET_VNET_HDR socket (packet(7)).
const vnetHdrLen = 10

// maxFrame bounds one read: a GSO super-packet (offloads left on by a peer)
// can be 64 KiB.
const maxFrame = vnetHdrLen + 65536 + 64

// openPacket opens an AF_PACKET socket bound to ifname in namespace ns,
// seeing every frame that arrives on it (not those sent from it) with a
// virtio_net_hdr in front. The header carries the checksum state, so a frame
// whose checksum a peer left to offload is written out with the same state
// instead of a wrong checksum.
func openPacket(ns, ifname string) (*os.File, error) {
	var f *os.File
	err := InNamespace(ns, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return fmt.Errorf("netem: interface %q in namespace %q: %w", ifname, ns, err)
		}
		// Protocol 0: no frame is queued before bind picks the interface.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("netem: packet socket: %w", err)
		}
		for _, o := range []struct {
			level, opt, val int
			name            string
		}{
			{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, "PACKET_VNET_HDR"},
			{unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING"},
			{unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1, "SO_TIMESTAMPNS"},
			{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8 << 20, "SO_RCVBUFFORCE"},
			{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8 << 20, "SO_SNDBUFFORCE"},
		} {
			if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
				unix.Close(fd)
				return fmt.Errorf("netem: %s on %q: %w", o.name, ifname, err)
			}
		}
		sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
		if err := unix.Bind(fd, sa); err != nil {
			unix.Close(fd)
			return fmt.Errorf("netem: bind packet socket to %q: %w", ifname, err)
		}
		// Disable IPv6 on the link's own ends, best effort: the link
		// namespace must not talk on the link itself.
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+ifname+"/disable_ipv6", []byte("1"), 0)
		f = os.NewFile(uintptr(fd), "packet:"+ifname)
		return nil
	})
	return f, err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetDrops reads and resets the socket's kernel drop count (PACKET_STATISTICS).
func packetDrops(f *os.File) uint64 {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	var st unix.TpacketStats
	_ = rc.Control(func(fd uintptr) {
		l := uint32(unsafe.Sizeof(st))
		_, _, _ = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_PACKET, unix.PACKET_STATISTICS,
			uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0)
	})
	return uint64(st.Drops)
}

// setUp brings interfaces up in namespace ns.
func setUp(ns string, ifnames ...string) error {
	h, err := openNS(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return fmt.Errorf("netem: netlink in %q: %w", ns, err)
	}
	defer nl.Close()
	for _, name := range ifnames {
		l, err := nl.LinkByName(name)
		if err == nil {
			err = nl.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("netem: set %q up in namespace %q: %w", name, ns, err)
		}
	}
	return nil
}

// emulator is the userspace backend: one pump per direction, each reading
// frames from one interface, scheduling them, and writing them out of the other.
type emulator struct {
	fa, fb   *os.File
	up, down *pump
	done     chan struct{}
	wg       sync.WaitGroup
}

// pump is one direction of the userspace backend.
type pump struct {
	name    string
	in, out *os.File
	origin  time.Time
	log     *slog.Logger
	done    chan struct{}
	wake    chan struct{}

	mu       sync.Mutex
	sched    *Scheduler
	ctr      DirCounters
	fifo     []pending // delivery order is time order: Scheduler never reorders
	fifoHead int
	gsoSeen  bool
	writeErr uint64
}

type pending struct {
	at  time.Duration
	buf *[]byte
	n   int
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 2048); return &b }}

func startEmulator(spec LinkSpec, p Profile, seed uint64, log *slog.Logger) (*emulator, error) {
	if err := setUp(spec.Namespace, spec.IfA, spec.IfB); err != nil {
		return nil, err
	}
	fa, err := openPacket(spec.Namespace, spec.IfA)
	if err != nil {
		return nil, err
	}
	fb, err := openPacket(spec.Namespace, spec.IfB)
	if err != nil {
		fa.Close()
		return nil, err
	}
	e := &emulator{fa: fa, fb: fb, done: make(chan struct{})}
	origin := time.Now()
	mk := func(name string, in, out *os.File, d Direction, seed uint64) *pump {
		return &pump{name: name, in: in, out: out, origin: origin, log: log.With("dir", name),
			done: e.done, wake: make(chan struct{}, 1), sched: NewScheduler(d, seed),
			ctr: DirCounters{ConnsByDst: make(map[netip.Addr]uint64)}}
	}
	e.up = mk("up", fa, fb, p.Up, seed)
	e.down = mk("down", fb, fa, p.Down, seed+1)
	for _, pu := range []*pump{e.up, e.down} {
		e.wg.Add(2)
		go func() { defer e.wg.Done(); pu.readLoop() }()
		go func() { defer e.wg.Done(); pu.writeLoop() }()
	}
	return e, nil
}

// setProfile makes each direction meet p's from its next packet on
// (Scheduler.SetDirection).
func (e *emulator) setProfile(p Profile) {
	for _, x := range []struct {
		pu *pump
		d  Direction
	}{{e.up, p.Up}, {e.down, p.Down}} {
		x.pu.mu.Lock()
		x.pu.sched.SetDirection(x.d)
		x.pu.mu.Unlock()
	}
}

func (e *emulator) counters() Counters {
	return Counters{Up: e.up.snapshot(), Down: e.down.snapshot()}
}

func (e *emulator) close() error {
	close(e.done)
	err1 := e.fa.Close()
	err2 := e.fb.Close()
	e.wg.Wait()
	if err1 != nil {
		return fmt.Errorf("netem: close: %w", err1)
	}
	if err2 != nil {
		return fmt.Errorf("netem: close: %w", err2)
	}
	return nil
}

func (pu *pump) snapshot() DirCounters {
	drops := packetDrops(pu.in)
	pu.mu.Lock()
	defer pu.mu.Unlock()
	pu.ctr.CaptureDrops += drops
	return pu.ctr.clone()
}

func (pu *pump) readLoop() {
	buf := make([]byte, maxFrame)
	oob := make([]byte, 64)
	rc, err := pu.in.SyscallConn()
	if err != nil {
		pu.log.Error("read stopped", "err", err)
		return
	}
	originWall := pu.origin.UnixNano()
	var last time.Duration
	// recvmsg(2) by hand: no source address to decode, nothing allocated
	// per packet.
	var iov unix.Iovec
	iov.Base = &buf[0]
	iov.SetLen(len(buf))
	var msg unix.Msghdr
	msg.Iov = &iov
	msg.SetIovlen(1)
	msg.Control = &oob[0]
	var n, oobn int
	var rerr error
	recv := func(fd uintptr) bool {
		msg.SetControllen(len(oob))
		r, _, e := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&msg)), 0)
		if e == unix.EAGAIN {
			return false
		}
		n, oobn, rerr = int(r), int(msg.Controllen), nil
		if e != 0 {
			rerr = e
		}
		return true
	}
	for {
		err := rc.Read(recv)
		if err == nil {
			err = rerr
		}
		if err != nil {
			select {
			case <-pu.done:
			default:
				pu.log.Error("read stopped", "err", err)
			}
			return
		}
		if n <= vnetHdrLen {
			continue
		}
		now := arrival(oob[:oobn], originWall, time.Since(pu.origin))
		now = max(now, last)
		last = now
		info := classify(buf[vnetHdrLen:n])
		info.gso = buf[1] != 0 // virtio_net_hdr.gso_type
		if !info.ip {
			pu.mu.Lock()
			pu.ctr.NonIP++
			pu.mu.Unlock()
			pu.write(buf[:n])
			continue
		}
		pu.mu.Lock()
		pu.ctr.count(info)
		if info.gso && !pu.gsoSeen {
			pu.gsoSeen = true
			pu.log.Warn("GSO super-packet seen: a peer has offloads on, rate and loss apply to it whole",
				"gso_size", binary.LittleEndian.Uint16(buf[4:6]))
		}
		at, v := pu.sched.Admit(now, info.size)
		switch v {
		case DropLoss:
			pu.ctr.LossDrops++
			pu.ctr.Drops++
			pu.mu.Unlock()
			continue
		case DropQueue:
			pu.ctr.QueueDrops++
			pu.ctr.Drops++
			pu.mu.Unlock()
			continue
		}
		var pb *[]byte
		if n <= 2048 {
			pb = bufPool.Get().(*[]byte)
		} else {
			b := make([]byte, n)
			pb = &b
		}
		copy(*pb, buf[:n])
		wasEmpty := pu.fifoHead == len(pu.fifo)
		pu.fifo = append(pu.fifo, pending{at: at, buf: pb, n: n})
		pu.mu.Unlock()
		if wasEmpty {
			select {
			case pu.wake <- struct{}{}:
			default:
			}
		}
	}
}

// arrival is when the kernel received the frame (SCM_TIMESTAMPNS, socket(7)),
// as an offset from the pump's origin, so that a reader the scheduler ran
// late still feeds the Scheduler true arrival times and does not turn a
// delay of its own into a burst. Without a usable timestamp (absent, from
// the future, or over a second old, e.g. the wall clock was stepped) it is now.
func arrival(oob []byte, originWall int64, now time.Duration) time.Duration {
	const hdr = 16 // struct cmsghdr on 64-bit: len uint64, level int32, type int32
	for len(oob) >= hdr {
		l := int(binary.NativeEndian.Uint64(oob[0:8]))
		level := int32(binary.NativeEndian.Uint32(oob[8:12]))
		typ := int32(binary.NativeEndian.Uint32(oob[12:16]))
		if l < hdr || l > len(oob) {
			break
		}
		if level == unix.SOL_SOCKET && typ == unix.SO_TIMESTAMPNS && l >= hdr+16 {
			sec := int64(binary.NativeEndian.Uint64(oob[hdr : hdr+8]))
			nsec := int64(binary.NativeEndian.Uint64(oob[hdr+8 : hdr+16]))
			at := time.Duration(sec*1e9 + nsec - originWall)
			if at <= now && at > now-time.Second {
				return at
			}
			return now
		}
		oob = oob[(l+7)&^7:]
	}
	return now
}

func (pu *pump) write(frame []byte) {
	if _, err := pu.out.Write(frame); err != nil {
		select {
		case <-pu.done:
			return // closing
		default:
		}
		pu.mu.Lock()
		pu.writeErr++
		first := pu.writeErr == 1
		pu.mu.Unlock()
		if first {
			pu.log.Warn("write failed (counted, further failures not logged)", "err", err)
		}
	}
}

// writeLoop sends each packet when its time comes. Packets are never sent
// early, and a late wake-up never lowers the rate: departure times come from
// the Scheduler, not from when the loop woke.
//
// Two ways to wait: with few packets in flight (handshakes, DNS, probes:
// where lateness shows as RTT) or the next one preciseWait or more away, it
// sleeps with nanosleep(2), whose high-resolution timer wakes it within tens
// of microseconds; with more than preciseMax in flight due less than
// preciseWait apart (a fast bulk transfer), it uses a Go timer, which wakes
// up to a millisecond late but sends everything due at once, for a fraction
// of the CPU. A new packet never needs an earlier wake-up than the one ahead of
// it (departures are in order); sleeps are cut into slices of at most
// maxSleep to notice Close.
func (pu *pump) writeLoop() {
	const (
		maxSleep    = 20 * time.Millisecond
		preciseMax  = 4
		preciseWait = 5 * time.Millisecond
	)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var batch []pending
	for {
		pu.mu.Lock()
		if pu.fifoHead == len(pu.fifo) {
			pu.fifo, pu.fifoHead = pu.fifo[:0], 0
			pu.mu.Unlock()
			select {
			case <-pu.wake:
				continue
			case <-pu.done:
				return
			}
		}
		now := time.Since(pu.origin)
		if wait := pu.fifo[pu.fifoHead].at - now; wait > 0 {
			inFlight := len(pu.fifo) - pu.fifoHead
			pu.mu.Unlock()
			if inFlight > preciseMax && wait < preciseWait {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-pu.done:
					return
				}
				continue
			}
			select {
			case <-pu.done:
				return
			default:
			}
			ts := unix.NsecToTimespec(int64(min(wait, maxSleep)))
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
			continue
		}
		batch = batch[:0]
		for pu.fifoHead < len(pu.fifo) && pu.fifo[pu.fifoHead].at <= now {
			batch = append(batch, pu.fifo[pu.fifoHead])
			pu.fifo[pu.fifoHead] = pending{}
			pu.fifoHead++
		}
		if pu.fifoHead > 1024 && 2*pu.fifoHead > len(pu.fifo) {
			n := copy(pu.fifo, pu.fifo[pu.fifoHead:])
			clear(pu.fifo[n:])
			pu.fifo, pu.fifoHead = pu.fifo[:n], 0
		}
		pu.mu.Unlock()
		for _, p := range batch {
			pu.write((*p.buf)[:p.n])
			if cap(*p.buf) == 2048 {
				bufPool.Put(p.buf)
			}
		}
	}
}
