package netem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// openNS opens a network namespace given by name (as "ip netns" names it,
// under /var/run/netns) or by path (anything with a '/'); "" is the
// namespace of the calling thread.
func openNS(ns string) (netns.NsHandle, error) {
	var h netns.NsHandle
	var err error
	switch {
	case ns == "":
		h, err = netns.Get()
	case strings.ContainsRune(ns, '/'):
		h, err = netns.GetFromPath(ns)
	default:
		h, err = netns.GetFromName(ns)
	}
	if err != nil {
		return h, fmt.Errorf("netem: namespace %q: %w", ns, err)
	}
	return h, nil
}

// InNamespace runs fn on an OS thread of its own switched to network
// namespace ns (a name under /var/run/netns, a path, or "" for the caller's
// namespace) and returns fn's error. Sockets fn creates stay in ns and may be
// used from any goroutine afterwards. The thread is discarded when fn
// returns, so no other goroutine ever runs in ns by accident (netns(7):
// namespaces belong to threads).
func InNamespace(ns string, fn func() error) error {
	if ns == "" {
		return fn()
	}
	h, err := openNS(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	errc := make(chan error, 1)
	go func() {
		// No UnlockOSThread: the runtime ends the thread with the goroutine.
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("netem: enter namespace %q: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// CreateNamespace creates the named network namespace (as "ip netns add"
// does) with its loopback up. It fails if the name exists.
func CreateNamespace(name string) error {
	if name == "" || strings.ContainsRune(name, '/') {
		return fmt.Errorf("netem: namespace name %q: want a plain name", name)
	}
	if _, err := os.Stat(filepath.Join("/var/run/netns", name)); err == nil {
		return fmt.Errorf("netem: namespace %q exists", name)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread is discarded: it ends in the new namespace
		h, err := netns.NewNamed(name)
		if err != nil {
			errc <- fmt.Errorf("netem: create namespace %q: %w", name, err)
			return
		}
		defer h.Close()
		nl, err := netlink.NewHandleAt(h)
		if err != nil {
			errc <- fmt.Errorf("netem: namespace %q: netlink: %w", name, err)
			return
		}
		defer nl.Close()
		lo, err := nl.LinkByName("lo")
		if err == nil {
			err = nl.LinkSetUp(lo)
		}
		if err != nil {
			errc <- fmt.Errorf("netem: namespace %q: loopback up: %w", name, err)
			return
		}
		errc <- nil
	}()
	return <-errc
}

// DeleteNamespace deletes a named network namespace created by
// CreateNamespace or "ip netns add"; interfaces in it go with it.
func DeleteNamespace(name string) error {
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("netem: delete namespace %q: %w", name, err)
	}
	return nil
}

// Legacy ethtool(8) commands (linux/ethtool.h), still honoured by every driver.
const (
	ethtoolSTXCSUM = 0x17 // tx checksumming
	ethtoolSSG     = 0x19 // scatter-gather
	ethtoolSTSO    = 0x1f // TCP segmentation offload
	ethtoolSGSO    = 0x24 // generic segmentation offload
	ethtoolSGRO    = 0x2c // generic receive offload
)

type ethtoolValue struct {
	cmd  uint32
	data uint32
}

type ifreqPtr struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

// DisableOffloads turns off TSO, GSO, GRO, scatter-gather and tx
// checksumming on interface ifname in namespace ns, as
// "ethtool -K IF tx off sg off tso off gso off gro off" does, so that every
// packet the link sees is one real packet with its checksum filled in.
// Offloads the driver does not have are skipped.
func DisableOffloads(ns, ifname string) error {
	if len(ifname) >= unix.IFNAMSIZ {
		return fmt.Errorf("netem: interface name %q too long", ifname)
	}
	return InNamespace(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("netem: ethtool socket: %w", err)
		}
		defer unix.Close(fd)
		// Order matters: TSO depends on SG, which depends on tx checksumming.
		for _, c := range []struct {
			cmd  uint32
			name string
		}{{ethtoolSGRO, "gro"}, {ethtoolSGSO, "gso"}, {ethtoolSTSO, "tso"}, {ethtoolSSG, "sg"}, {ethtoolSTXCSUM, "tx"}} {
			v := ethtoolValue{cmd: c.cmd}
			var ifr ifreqPtr
			copy(ifr.name[:], ifname)
			ifr.data = unsafe.Pointer(&v)
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
			runtime.KeepAlive(&v)
			if errno != 0 && !errors.Is(errno, unix.EOPNOTSUPP) {
				return fmt.Errorf("netem: ethtool -K %s %s off (namespace %q): %w", ifname, c.name, ns, errno)
			}
		}
		return nil
	})
}

// findPeer finds the other end of veth ifname in namespace ns, looking in
// the named namespaces under /var/run/netns and in the namespace of PID 1.
// It returns the peer's namespace (name or path) and interface name.
func findPeer(ns, ifname string) (Endpoint, error) {
	h, err := openNS(ns)
	if err != nil {
		return Endpoint{}, err
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return Endpoint{}, fmt.Errorf("netem: netlink in %q: %w", ns, err)
	}
	defer nl.Close()
	l, err := nl.LinkByName(ifname)
	if err != nil {
		return Endpoint{}, fmt.Errorf("netem: interface %q in namespace %q: %w", ifname, ns, err)
	}
	if l.Type() != "veth" {
		return Endpoint{}, fmt.Errorf("netem: interface %q in namespace %q is a %s, not a veth", ifname, ns, l.Type())
	}
	peerIdx, nsid := l.Attrs().ParentIndex, l.Attrs().NetNsID
	var candidates []string
	if ents, err := os.ReadDir("/var/run/netns"); err == nil {
		for _, e := range ents {
			candidates = append(candidates, e.Name())
		}
	}
	candidates = append(candidates, "/proc/1/ns/net")
	if nsid < 0 { // peer in the same namespace
		candidates = []string{ns}
	}
	for _, c := range candidates {
		ch, err := openNS(c)
		if err != nil {
			continue
		}
		id, err := nl.GetNetNsIdByFd(int(ch))
		match := nsid < 0 || err == nil && id == nsid
		if match {
			if pnl, err := netlink.NewHandleAt(ch); err == nil {
				pl, err := pnl.LinkByIndex(peerIdx)
				pnl.Close()
				if err == nil {
					ch.Close()
					return Endpoint{Namespace: c, Interface: pl.Attrs().Name}, nil
				}
			}
		}
		ch.Close()
	}
	return Endpoint{}, fmt.Errorf("netem: peer of veth %q (namespace %q) not found in /var/run/netns", ifname, ns)
}

// Renice sets the nice value of every thread of this process (Linux nice
// values are per thread; threads created later inherit it from their
// creator) to n, e.g. -10. An emulator that waits for the CPU delivers its
// packets late; on a busy machine a negative nice value keeps it on time.
// It costs others little: the emulator uses a small share of a core.
// Where the kernel groups tasks by session (sched_autogroup_enabled), thread
// nice values only order this session's tasks, so Renice also sets the
// session's autogroup nice value (sched(7)), which the whole session shares;
// the returned restore puts the autogroup's value back (call it on exit).
func Renice(n int) (restore func(), err error) {
	restore = func() {}
	if old, err := os.ReadFile("/proc/self/autogroup"); err == nil {
		var name string
		var prev int
		if _, err := fmt.Sscanf(string(old), "%s nice %d", &name, &prev); err == nil {
			if err := os.WriteFile("/proc/self/autogroup", []byte(strconv.Itoa(n)), 0); err != nil {
				return restore, fmt.Errorf("netem: renice autogroup to %d: %w", n, err)
			}
			restore = func() { _ = os.WriteFile("/proc/self/autogroup", []byte(strconv.Itoa(prev)), 0) }
		}
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return restore, fmt.Errorf("netem: renice: %w", err)
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, n); err != nil && !errors.Is(err, unix.ESRCH) {
			return restore, fmt.Errorf("netem: renice thread %d to %d: %w", tid, n, err)
		}
	}
	return restore, nil
}
