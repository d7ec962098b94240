package netem

import (
	"encoding/binary"
	"maps"
	"net/netip"
	"time"
)

// DirCounters counts what entered one direction of the link. Packets, Bytes,
// SYNs, DNSQueries and ConnsByDst count at the entrance, before loss and
// queue, so a retransmitted SYN counts again (it crossed the radio again).
type DirCounters struct {
	Packets    uint64 // IP packets (IPv4 and IPv6) that entered
	Bytes      uint64 // their IP bytes (IP header and payload, no Ethernet header)
	Drops      uint64 // LossDrops + QueueDrops (the tc backend reports only this total)
	LossDrops  uint64 // packets dropped by the loss model
	QueueDrops uint64 // packets refused by the full queue
	SYNs       uint64 // TCP segments with SYN set and ACK clear (connection attempts)
	DNSQueries uint64 // UDP datagrams to port 53, and TCP segments with payload to port 53
	// DNSRepeats counts the UDP DNS queries among DNSQueries whose question
	// (name, type, class; RFC 1035 §4.1.2) repeats one sent within the
	// previous DNSRepeatWindow in this direction: a resolver's
	// retransmission after its timeout (a new ID and port, the same
	// question), or the same name asked again within 5 s. DNSQueries -
	// DNSRepeats is the number of distinct questions.
	DNSRepeats uint64
	// ConnsByDst counts SYNs (as above) per destination address. Never nil in
	// a snapshot.
	ConnsByDst map[netip.Addr]uint64
	NonIP      uint64 // frames that are not IP (ARP): passed on at once, unimpaired, uncounted above
	// CaptureDrops counts frames the kernel dropped before the emulator read
	// them (socket buffer full, PACKET_STATISTICS): should stay 0.
	CaptureDrops uint64

	recent []dnsSent // the last questions sent (DNSRepeats); not in snapshots
}

// DNSRepeatWindow is how long a DNS question is remembered for DNSRepeats:
// longer than a stub resolver's retransmission timeouts (glibc 5 s by
// default; Chromium's built-in resolver starts at about 1 s).
const DNSRepeatWindow = 5 * time.Second

// dnsRecent bounds the questions remembered per direction.
const dnsRecent = 64

type dnsSent struct {
	q  string
	at time.Time
}

// Counters is a snapshot of both directions of a link: Up from LinkSpec.IfA
// (mobile side) to IfB (network side), Down the reverse.
type Counters struct {
	Up, Down DirCounters
}

// Sub returns c - prev field by field (ConnsByDst entries that become zero
// are omitted): the traffic between two snapshots, e.g. one page load.
func (c Counters) Sub(prev Counters) Counters {
	return Counters{Up: c.Up.sub(prev.Up), Down: c.Down.sub(prev.Down)}
}

func (d DirCounters) sub(p DirCounters) DirCounters {
	out := DirCounters{
		Packets: d.Packets - p.Packets, Bytes: d.Bytes - p.Bytes, Drops: d.Drops - p.Drops,
		LossDrops: d.LossDrops - p.LossDrops, QueueDrops: d.QueueDrops - p.QueueDrops,
		SYNs: d.SYNs - p.SYNs, DNSQueries: d.DNSQueries - p.DNSQueries, DNSRepeats: d.DNSRepeats - p.DNSRepeats,
		NonIP: d.NonIP - p.NonIP, CaptureDrops: d.CaptureDrops - p.CaptureDrops,
		ConnsByDst: make(map[netip.Addr]uint64),
	}
	for a, n := range d.ConnsByDst {
		if m := n - p.ConnsByDst[a]; m > 0 {
			out.ConnsByDst[a] = m
		}
	}
	return out
}

func (d DirCounters) clone() DirCounters {
	c := d
	c.recent = nil
	c.ConnsByDst = maps.Clone(d.ConnsByDst)
	if c.ConnsByDst == nil {
		c.ConnsByDst = make(map[netip.Addr]uint64)
	}
	return c
}

// count adds one classified frame to d.
func (d *DirCounters) count(p pktInfo) {
	if !p.ip {
		d.NonIP++
		return
	}
	d.Packets++
	d.Bytes += uint64(p.size)
	if p.syn {
		d.SYNs++
		if d.ConnsByDst == nil {
			d.ConnsByDst = make(map[netip.Addr]uint64)
		}
		d.ConnsByDst[p.dst]++
	}
	if p.dns {
		d.DNSQueries++
		if p.dnsQ != "" {
			d.countQuestion(p.dnsQ, time.Now())
		}
	}
}

// countQuestion remembers a UDP query's question and counts it in
// DNSRepeats if it was sent within DNSRepeatWindow before now.
func (d *DirCounters) countQuestion(q string, now time.Time) {
	for i := len(d.recent) - 1; i >= 0; i-- {
		if now.Sub(d.recent[i].at) >= DNSRepeatWindow {
			break
		}
		if d.recent[i].q == q {
			d.DNSRepeats++
			break
		}
	}
	if len(d.recent) == dnsRecent {
		d.recent = append(d.recent[:0], d.recent[1:]...)
	}
	d.recent = append(d.recent, dnsSent{q: q, at: now})
}

// pktInfo is what the link needs to know about a frame.
type pktInfo struct {
	ip   bool       // IPv4 or IPv6
	size int        // IP bytes (from the IP header's length fields)
	dst  netip.Addr // IP destination
	syn  bool       // TCP SYN without ACK
	dns  bool       // a DNS query: UDP to port 53, or TCP with payload to port 53
	dnsQ string     // a UDP query's question (name lower-cased, type, class); "" if unreadable
	gso  bool       // a GSO super-packet (offloads were left on by a peer)
}

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100
	protoTCP      = 6
	protoUDP      = 17
)

// classify parses an Ethernet frame (RFC 894 / IEEE 802.3, one optional
// 802.1Q tag) carrying IPv4 (RFC 791) or IPv6 (RFC 8200, skipping hop-by-hop,
// routing, fragment and destination-options headers), then TCP (RFC 9293)
// or UDP. A frame it cannot parse is reported as what it could read: never
// an error, since every frame is forwarded whatever it holds.
func classify(frame []byte) pktInfo {
	var p pktInfo
	if len(frame) < 14 {
		return p
	}
	et := binary.BigEndian.Uint16(frame[12:14])
	b := frame[14:]
	if et == etherTypeVLAN && len(b) >= 4 {
		et = binary.BigEndian.Uint16(b[2:4])
		b = b[4:]
	}
	var proto byte
	var l4 []byte
	switch et {
	case etherTypeIPv4:
		if len(b) < 20 || b[0]>>4 != 4 {
			return p
		}
		ihl := int(b[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(b[2:4]))
		p.ip, p.size, p.dst = true, total, netip.AddrFrom4([4]byte(b[16:20]))
		if total == 0 { // TSO super-packets may carry 0
			p.size = len(b)
		}
		fragOff := binary.BigEndian.Uint16(b[6:8]) & 0x1fff
		if ihl < 20 || fragOff != 0 || len(b) < ihl {
			return p
		}
		proto, l4 = b[9], b[ihl:min(len(b), max(total, ihl))]
	case etherTypeIPv6:
		if len(b) < 40 || b[0]>>4 != 6 {
			return p
		}
		plen := int(binary.BigEndian.Uint16(b[4:6]))
		p.ip, p.size, p.dst = true, 40+plen, netip.AddrFrom16([16]byte(b[24:40]))
		proto, l4 = b[6], b[40:min(len(b), 40+plen)]
		for range 8 {
			switch proto {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				if len(l4) < 8 {
					return p
				}
				n := (int(l4[1]) + 1) * 8
				if len(l4) < n {
					return p
				}
				proto, l4 = l4[0], l4[n:]
				continue
			case 44: // fragment: only the first fragment has the L4 header
				if len(l4) < 8 || binary.BigEndian.Uint16(l4[2:4])&0xfff8 != 0 {
					return p
				}
				proto, l4 = l4[0], l4[8:]
				continue
			}
			break
		}
	default:
		return p
	}
	switch proto {
	case protoTCP:
		if len(l4) < 20 {
			return p
		}
		flags := l4[13]
		p.syn = flags&0x02 != 0 && flags&0x10 == 0
		hlen := int(l4[12]>>4) * 4
		if binary.BigEndian.Uint16(l4[2:4]) == 53 && hlen >= 20 && len(l4) > hlen {
			p.dns = true
		}
	case protoUDP:
		if len(l4) >= 8 && binary.BigEndian.Uint16(l4[2:4]) == 53 {
			p.dns = true
			p.dnsQ = question(l4[8:])
		}
	}
	return p
}

// question returns the first question of a DNS query message (RFC 1035
// §4.1.1-4.1.2: a 12-byte header, QDCOUNT >= 1, then QNAME as labels
// without compression, QTYPE, QCLASS) with the name lower-cased (label
// lengths are at most 63, below 'A'), or "" when the message is not such
// a query.
func question(m []byte) string {
	if len(m) < 12 || m[2]&0x80 != 0 || binary.BigEndian.Uint16(m[4:6]) == 0 {
		return ""
	}
	i := 12
	for {
		if i >= len(m) {
			return ""
		}
		n := int(m[i])
		if n == 0 {
			break
		}
		if n&0xc0 != 0 { // a pointer: not in a query's first name
			return ""
		}
		i += 1 + n
	}
	end := i + 1 + 4
	if end > len(m) {
		return ""
	}
	q := []byte(string(m[12:end]))
	for j := range q[:len(q)-4] {
		if 'A' <= q[j] && q[j] <= 'Z' {
			q[j] += 'a' - 'A'
		}
	}
	return string(q)
}
