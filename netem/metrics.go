package netem

import (
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a Link's counters to Prometheus (namespace pep,
// subsystem netem), each with a "direction" label ("up" or "down"):
//
//	pep_netem_packets_total, pep_netem_bytes_total (IP bytes),
//	pep_netem_drops_total{cause="loss"|"queue"|"any"},
//	pep_netem_syns_total, pep_netem_dns_queries_total, pep_netem_capture_drops_total,
//	pep_netem_syns_by_dst_total{dst="ADDR"} (Counters.ConnsByDst).
//
// The "any" cause carries the total when the backend cannot tell causes
// apart (tc); otherwise it is 0 and loss+queue are the total. Values are
// read from Link.Counters at scrape time, so ResetCounters shows as a
// counter reset. SYNs by destination are exported for at most
// MaxDstSeries addresses per direction (a testbed has one address per
// origin hostname plus the VIP: tp5n needs about 500); the rest are summed
// under dst="other", so the label set stays bounded.
type Collector struct {
	link                        *Link
	packets, bytes, drops, syns *prometheus.Desc
	dnsQueries, captureDrops    *prometheus.Desc
	synsByDst                   *prometheus.Desc
}

// MaxDstSeries bounds the pep_netem_syns_by_dst_total series per direction.
const MaxDstSeries = 2048

// NewCollector returns a Collector for link; register it with
// prometheus.MustRegister or a registry of your own.
func NewCollector(link *Link) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("pep", "netem", name), help,
			append([]string{"direction"}, labels...), prometheus.Labels{"profile": link.Profile().Name})
	}
	return &Collector{
		link:         link,
		packets:      d("packets_total", "IP packets that entered the radio link."),
		bytes:        d("bytes_total", "IP bytes that entered the radio link."),
		drops:        d("drops_total", "Packets the radio link dropped, by cause.", "cause"),
		syns:         d("syns_total", "TCP SYNs (without ACK) that entered the radio link."),
		dnsQueries:   d("dns_queries_total", "DNS queries (UDP or TCP to port 53) that entered the radio link."),
		captureDrops: d("capture_drops_total", "Frames the kernel dropped before the emulator read them."),
		synsByDst:    d("syns_by_dst_total", "TCP SYNs (without ACK) that entered the radio link, by destination address (\"other\": beyond the series bound).", "dst"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.bytes, c.drops, c.syns, c.dnsQueries, c.captureDrops, c.synsByDst} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctr := c.link.Counters()
	for _, dc := range []struct {
		dir string
		d   DirCounters
	}{{"up", ctr.Up}, {"down", ctr.Down}} {
		m := func(desc *prometheus.Desc, v uint64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), append([]string{dc.dir}, labels...)...)
		}
		m(c.packets, dc.d.Packets)
		m(c.bytes, dc.d.Bytes)
		m(c.drops, dc.d.LossDrops, "loss")
		m(c.drops, dc.d.QueueDrops, "queue")
		m(c.drops, dc.d.Drops-dc.d.LossDrops-dc.d.QueueDrops, "any")
		m(c.syns, dc.d.SYNs)
		m(c.dnsQueries, dc.d.DNSQueries)
		m(c.captureDrops, dc.d.CaptureDrops)
		addrs := make([]netip.Addr, 0, len(dc.d.ConnsByDst))
		for a := range dc.d.ConnsByDst {
			addrs = append(addrs, a)
		}
		slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
		var other uint64
		for i, a := range addrs {
			if i >= MaxDstSeries {
				other += dc.d.ConnsByDst[a]
				continue
			}
			m(c.synsByDst, dc.d.ConnsByDst[a], a.String())
		}
		if other > 0 {
			m(c.synsByDst, other, "other")
		}
	}
}
