package report

import (
	"math"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"pep/testbed/har"
)

// Phase is a kind of time in a page load, as the report splits PLT along
// the critical path (Analyze).
type Phase int

// The phases, in the order a request goes through them. Browser is time
// the critical path spends with no request of its own in flight: the
// browser parsing, running scripts, laying out, or waiting for the load
// event; before the document's request and after the last response.
const (
	PhaseBrowser   Phase = iota // no request on the critical path in flight
	PhaseQueued                 // blocked: queued and stalled in the browser (HAR blocked), but for a wait on a handshake
	PhaseHandshake              // DNS, TCP connect and TLS (HAR dns + connect), and a request's wait for the handshake of the connection it then used, which another request opened (Handshakes)
	PhaseWait                   // request sent to the response's first byte: one round trip, the link's queue, the proxy and the server (HAR send + wait)
	PhaseTransfer               // the response's bytes (HAR receive)
	NumPhases
)

// PhaseNames are the phases as the report's tables and plots name them.
var PhaseNames = [NumPhases]string{"browser", "queued", "handshakes", "request+wait", "transfer"}

// Load is what one load's HAR says about where its time went. Times are
// ms; entries are the HAR's entries started before the load event (all of
// them when the page did not load).
type Load struct {
	Page, Mode, HAR string
	Run             int
	// HARBytes is the size of the HAR file.
	HARBytes int64
	// PLT is the page's onLoad (ms), else the end of its last request.
	PLT float64
	// Requests counts entries; Network those from the network (not a
	// cache, not failed before a connection); Conns the distinct
	// connections they used.
	Requests, Network, Conns int
	// Bytes is the sum of the entries' _transferSize: bytes as received.
	Bytes int64
	// RequestBound is Network / Conns x RTT (ms): the time the page's
	// requests take when each connection carries one request per round
	// trip (HTTP/1.1 without pipelining) and all are spread evenly.
	RequestBound float64
	// Queued is the sum over entries of HAR blocked (ms of request time
	// spent queued and stalled in the browser); QueuedRequests counts the
	// entries blocked for more than one RTT.
	Queued         float64
	QueuedRequests int
	// MaxInFlight is the most requests in flight at once; MeanInFlight the
	// mean over [0, PLT].
	MaxInFlight  int
	MeanInFlight float64
	// Depth is the longest initiator chain in levels (the document is
	// level 1; a stylesheet it names 2; an image the stylesheet names 3;
	// a redirect's hop one more); Chain its entries (indexes into the
	// HAR's entries, document first); ChainRTTs the round trips the chain
	// needs at least: one per request, plus one per DNS lookup, TCP
	// connect and TLS handshake on it.
	Depth, ChainRTTs int
	Chain            []int
	// Critical splits PLT along the critical path (WProf: Wang et al.,
	// "Demystifying Page Load Performance with WProf", NSDI 2013, §4):
	// from the request that ended last before the load event back
	// through its initiators to the document, each request's own phases,
	// and browser time between a parent's end and its child's start, and
	// before the document's request and after the last response. The
	// phases sum to PLT.
	Critical [NumPhases]float64
	// CriticalPath is the path's entries, document first.
	CriticalPath []int
	// LCP (ms) is set when the LCP element's resource (the HAR page's
	// LCPURL: an image) is among the entries: LCPCritical splits LCP along
	// its path as Critical splits PLT (browser time after the resource's
	// end is its decode and paint), LCPPath is that path, document
	// first. Zero and empty for a text LCP or an unknown URL.
	LCP         float64
	LCPCritical [NumPhases]float64
	LCPPath     []int
	// The navigation (Document entries from the first one through its
	// redirects, and a fallback after a failed hop): Upgraded, the
	// browser turned the http:// navigation into https:// (an internal
	// redirect to the same URL with https, Chromium's HttpsUpgrades);
	// DocHTTPS, the final document came over https; Fallback, the https
	// hop failed or did not answer in time and the browser loaded http://
	// instead (a failed hop, or an internal redirect back); DocDelay, ms from
	// the first document request's start to the final one's (what the
	// hops and a failed attempt cost); DocTLS, the final document's TLS
	// handshake in ms (0: none); HTTPSShare, the share of requests from
	// the network over https.
	Upgraded, DocHTTPS, Fallback bool
	DocDelay, DocTLS, HTTPSShare float64
	// VIPBytes is the part of Bytes that came from the VIP (its address
	// as the URL's host, any scheme and port): what pepd served from
	// Squid and its optimizer. SplicedBytes is the part that came over
	// https from any other host: TLS that pepd splices without decrypting
	// (issue 25: nothing encrypted is decrypted), which no mode of pep can
	// cache, rewrite or transform. Bytes - SplicedBytes is what pep can
	// reach; in direct's loads SplicedBytes / Bytes is the smallest share
	// of direct's bytes any mode can carry (writeReach).
	VIPBytes, SplicedBytes int64
}

// Analyze reads one load's HAR. rtt is the link's round trip (ms).
func Analyze(h *har.HAR, rtt float64) Load { return AnalyzeVIP(h, rtt, "") }

// AnalyzeVIP is Analyze that also splits the load's bytes by where they
// came from (Load.VIPBytes, Load.SplicedBytes); vip is the VIP's host as
// the rewritten URLs name it (Config.VIP, an address; "" for none).
func AnalyzeVIP(h *har.HAR, rtt float64, vip string) Load {
	var l Load
	pg := h.Log.Pages[0]
	l.PLT = pg.PageTimings.OnLoad
	loaded := l.PLT > 0
	var es []har.Entry
	for _, e := range h.Log.Entries {
		if !loaded || e.Start < l.PLT {
			es = append(es, e)
		}
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].Start < es[j].Start })
	if !loaded {
		for _, e := range es {
			l.PLT = max(l.PLT, e.End())
		}
	}
	l.Requests = len(es)
	conns := map[string]bool{}
	for _, e := range es {
		if e.FromCache == "" && e.Response.Status > 0 {
			l.Network++
		}
		if e.Connection != "" {
			conns[e.Connection] = true
		}
		l.Bytes += e.Response.TransferSize
		if u, err := url.Parse(e.Request.URL); err == nil {
			switch {
			case vip != "" && strings.Trim(u.Hostname(), "[]") == vip:
				l.VIPBytes += e.Response.TransferSize
			case u.Scheme == "https":
				l.SplicedBytes += e.Response.TransferSize
			}
		}
		if e.Timings.Blocked > 0 {
			l.Queued += e.Timings.Blocked
			if e.Timings.Blocked > rtt {
				l.QueuedRequests++
			}
		}
	}
	l.Conns = len(conns)
	if l.Conns > 0 {
		l.RequestBound = float64(l.Network) / float64(l.Conns) * rtt
	}
	l.MaxInFlight, l.MeanInFlight = inFlight(es, l.PLT)

	// Parents: the latest earlier entry whose URL is the initiator's;
	// else the document (the first Document entry).
	parent := make([]int, len(es))
	root := -1
	for i, e := range es {
		if e.ResourceType == "Document" {
			root = i
			break
		}
	}
	if root < 0 && len(es) > 0 {
		root = 0
	}
	for i, e := range es {
		parent[i] = -1
		if i == root {
			continue
		}
		if u := e.Initiator.URL; u != "" {
			for j := i - 1; j >= 0; j-- {
				if es[j].Request.URL == u {
					parent[i] = j
					break
				}
			}
		}
		if parent[i] < 0 && root >= 0 && root < i {
			parent[i] = root
		}
	}
	depth := make([]int, len(es))
	for i := range es {
		if parent[i] < 0 {
			depth[i] = 1
		} else {
			depth[i] = depth[parent[i]] + 1 // parent[i] < i
		}
	}
	deepest := -1
	for i := range es {
		if deepest < 0 || depth[i] > depth[deepest] || depth[i] == depth[deepest] && es[i].End() > es[deepest].End() {
			deepest = i
		}
	}
	if deepest >= 0 {
		l.Depth = depth[deepest]
		l.Chain = pathTo(parent, deepest)
		for _, i := range l.Chain {
			l.ChainRTTs += roundTrips(es[i])
		}
	}

	// The critical path: back from the entry that ended last before the
	// load event (else the one that ended first after it) through its
	// parents. A request started in an onload handler ends after it and
	// holds nothing up.
	last := -1
	for i, e := range es {
		if last < 0 {
			last = i
			continue
		}
		a, b := e.End(), es[last].End()
		if a <= l.PLT && (b > l.PLT || a > b) || a > l.PLT && b > l.PLT && a < b {
			last = i
		}
	}
	hs := Handshakes(es)
	if last >= 0 {
		l.Critical, l.CriticalPath = split(es, parent, hs, last, l.PLT)
	} else {
		l.Critical[PhaseBrowser] = max(l.PLT, 0)
	}
	// The LCP element's path: from its resource (the latest request for
	// its URL started before LCP) back to the document, up to LCP.
	if u, lcp := pg.PageTimings.LCPURL, pg.PageTimings.LCP; u != "" && lcp > 0 {
		for i := len(es) - 1; i >= 0; i-- {
			if es[i].Request.URL == u && es[i].Start <= lcp {
				l.LCP = lcp
				l.LCPCritical, l.LCPPath = split(es, parent, hs, i, lcp)
				break
			}
		}
	}
	l.navigation(es, root)
	// Indexes into the HAR's own entry order (es is a sorted subset).
	l.Chain, l.CriticalPath = indexesIn(h, es, l.Chain), indexesIn(h, es, l.CriticalPath)
	l.LCPPath = indexesIn(h, es, l.LCPPath)
	return l
}

// split divides the time from 0 to end (ms) along the path from es[last]
// back through its parents to the document: each request's own phases
// up to end, browser time between a parent's end and its child's start,
// before the first request and between the last one's end and end. The
// phases sum to end. path is the path's indexes into es, document first.
// hs is es's Handshakes.
func split(es []har.Entry, parent []int, hs map[string]Span, last int, end float64) (phases [NumPhases]float64, path []int) {
	path = pathTo(parent, last)
	c := end
	for k := len(path) - 1; k >= 0; k-- {
		e := es[path[k]]
		if t := e.End(); t < c {
			phases[PhaseBrowser] += c - t
			c = t
		}
		for _, s := range segments(e, hs) {
			lo, hi := s.from, math.Min(s.to, c)
			if hi > lo {
				phases[s.phase] += hi - lo
			}
		}
		c = math.Min(c, e.Start)
	}
	phases[PhaseBrowser] += max(c, 0)
	return phases, path
}

// navigation fills the navigation's fields of l (Load) from es, whose
// document is es[root].
func (l *Load) navigation(es []har.Entry, root int) {
	var https, network int
	for _, e := range es {
		if e.FromCache == "" && e.Response.Status > 0 {
			network++
			if strings.HasPrefix(e.Request.URL, "https:") {
				https++
			}
		}
	}
	if network > 0 {
		l.HTTPSShare = float64(https) / float64(network)
	}
	if root < 0 {
		return
	}
	final := root
	for i := root + 1; i < len(es); i++ {
		e := es[i]
		if e.ResourceType != "Document" {
			continue
		}
		prev := es[final]
		switch {
		case e.Initiator.Type == "redirect" && e.Initiator.URL == prev.Request.URL:
			if strings.HasPrefix(prev.Request.URL, "http:") && e.Request.URL == "https:"+strings.TrimPrefix(prev.Request.URL, "http:") {
				l.Upgraded = true
			}
			// Chromium falls back with an internal redirect back to
			// http:// when the https attempt has not answered in time (3 s
			// seen on the paper's congested cell).
			if l.Upgraded && strings.HasPrefix(prev.Request.URL, "https:") && e.Request.URL == "http:"+strings.TrimPrefix(prev.Request.URL, "https:") {
				l.Fallback = true
			}
			final = i
		case prev.Error != "" && strings.HasPrefix(prev.Request.URL, "https:") && strings.HasPrefix(e.Request.URL, "http:") &&
			strings.TrimPrefix(e.Request.URL, "http:") == strings.TrimPrefix(prev.Request.URL, "https:"):
			l.Fallback = true
			final = i
		}
	}
	f := es[final]
	l.DocHTTPS = strings.HasPrefix(f.Request.URL, "https:") && f.Error == ""
	l.DocDelay = f.Start - es[root].Start
	l.DocTLS = max(f.Timings.SSL, 0)
}

// pathTo is the chain of parents ending at i, root first.
func pathTo(parent []int, i int) []int {
	var p []int
	for ; i >= 0; i = parent[i] {
		p = append(p, i)
	}
	for a, b := 0, len(p)-1; a < b; a, b = a+1, b-1 {
		p[a], p[b] = p[b], p[a]
	}
	return p
}

func indexesIn(h *har.HAR, es []har.Entry, idx []int) []int {
	pos := map[[2]string]int{}
	for i, e := range h.Log.Entries {
		pos[[2]string{e.RequestID, e.StartedDateTime}] = i
	}
	out := make([]int, len(idx))
	for k, i := range idx {
		out[k] = pos[[2]string{es[i].RequestID, es[i].StartedDateTime}]
	}
	return out
}

// roundTrips is the least number of round trips a request needs: one for
// the request, one per DNS lookup, TCP handshake and TLS handshake it made
// (TLS 1.3: one).
func roundTrips(e har.Entry) int {
	if e.FromCache != "" {
		return 0
	}
	n := 1
	t := e.Timings
	if t.DNS > 0 {
		n++
	}
	if t.Connect > 0 {
		n++
	}
	if t.SSL > 0 {
		n++
	}
	return n
}

type segment struct {
	phase    Phase
	from, to float64
}

// Span is an interval on a page's time axis, From to To in ms after the
// page's start.
type Span struct{ From, To float64 }

// Handshakes returns, per connection (Entry.Connection), the span of its
// DNS lookup, TCP connect and TLS handshake: those of the first entry, in
// start order, that opened it (HAR dns + connect). A request that waits
// for a connection another request is opening (HTTP/2: every request of a
// page to one origin but the first; HTTP/1.1: Chromium gives a request
// whichever connection comes up first) has only blocked time in its own
// HAR timings; segments counts the part of it within its connection's
// span as handshake, so that a handshake on the critical path is called
// one whichever request made it.
func Handshakes(es []har.Entry) map[string]Span {
	hs := map[string]Span{}
	for _, e := range es {
		if _, ok := hs[e.Connection]; ok || e.Connection == "" {
			continue
		}
		if t := e.Timings; t.Connect > 0 {
			from := e.Start + max(t.Blocked, 0)
			hs[e.Connection] = Span{from, from + max(t.DNS, 0) + t.Connect}
		}
	}
	return hs
}

// segments are an entry's phases on the page's time axis (ms). Its
// blocked time within the handshake of its connection (hs, Handshakes),
// when another entry made that handshake, is PhaseHandshake.
func segments(e har.Entry, hs map[string]Span) []segment {
	t := e.Timings
	pos := e.Start
	var out []segment
	add := func(p Phase, d float64) {
		if d > 0 {
			out = append(out, segment{p, pos, pos + d})
			pos += d
		}
	}
	blocked := max(t.Blocked, 0)
	if h, ok := hs[e.Connection]; ok && t.Connect <= 0 && blocked > 0 {
		lo, hi := max(h.From, pos), min(h.To, pos+blocked)
		if hi > lo {
			add(PhaseQueued, lo-pos)
			add(PhaseHandshake, hi-lo)
			blocked = e.Start + blocked - pos
		}
	}
	add(PhaseQueued, blocked)
	add(PhaseHandshake, max(t.DNS, 0)+max(t.Connect, 0))
	add(PhaseWait, max(t.Send, 0)+max(t.Wait, 0))
	add(PhaseTransfer, max(t.Receive, 0))
	return out
}

// inFlight returns the most entries in flight at once and the mean number
// in flight over [0, plt].
func inFlight(es []har.Entry, plt float64) (int, float64) {
	pts := InFlight(es)
	most, area := 0, 0.0
	for i, p := range pts {
		most = max(most, p.N)
		if i+1 < len(pts) && p.T < plt {
			area += float64(p.N) * (math.Min(pts[i+1].T, plt) - p.T)
		}
	}
	if plt <= 0 {
		return most, 0
	}
	return most, area / plt
}

// Step is a point of a step function: N from T (ms) on.
type Step struct {
	T float64
	N int
}

// InFlight is the number of entries in flight over time (a request is in
// flight from its start to its end), as steps in time order.
func InFlight(es []har.Entry) []Step {
	return steps(es, func(e har.Entry) (float64, float64) { return e.Start, e.End() })
}

// Blocked is the number of entries queued or stalled in the browser
// (HAR blocked) over time, as steps in time order.
func Blocked(es []har.Entry) []Step {
	return steps(es, func(e har.Entry) (float64, float64) { return e.Start, e.Start + max(e.Timings.Blocked, 0) })
}

func steps(es []har.Entry, span func(har.Entry) (float64, float64)) []Step {
	type ev struct {
		t float64
		d int
	}
	var evs []ev
	for _, e := range es {
		a, b := span(e)
		if b > a {
			evs = append(evs, ev{a, 1}, ev{b, -1})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t != evs[j].t {
			return evs[i].t < evs[j].t
		}
		return evs[i].d < evs[j].d
	})
	out := []Step{{0, 0}}
	n := 0
	for _, e := range evs {
		n += e.d
		if out[len(out)-1].T == e.t {
			out[len(out)-1].N = n
		} else {
			out = append(out, Step{e.t, n})
		}
	}
	return out
}

// TimeView is the HAR analysis of one profile's loads: every load that
// loaded and has a HAR, and the errors of HARs that could not be read.
type TimeView struct {
	Dir    string // the folder the HAR paths are relative to
	Loads  []Load
	Errors []string
}

// ReadTimes analyses the HAR of every loaded record of v's profile in r
// (files relative to dir). Unreadable HARs are listed in Errors, not
// fatal. Only the analyses are kept: a campaign's HARs are read one at a
// time.
func ReadTimes(r *Results, dir string, v View) TimeView {
	tv := TimeView{Dir: dir}
	for _, rec := range r.Records {
		if rec.Profile != v.Profile.Name || rec.HAR == "" || !rec.Loaded {
			continue
		}
		h, err := har.Read(filepath.Join(dir, filepath.FromSlash(rec.HAR)))
		if err != nil {
			tv.Errors = append(tv.Errors, err.Error())
			continue
		}
		l := AnalyzeVIP(h, v.Profile.RTTms, r.Config.VIP)
		l.Page, l.Mode, l.Run, l.HAR = rec.Page, rec.Mode, rec.Run, rec.HAR
		if st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rec.HAR))); err == nil {
			l.HARBytes = st.Size()
		}
		tv.Loads = append(tv.Loads, l)
	}
	return tv
}

// ReadHAR reads the HAR of load i again.
func (tv TimeView) ReadHAR(i int) (*har.HAR, error) {
	return har.Read(filepath.Join(tv.Dir, filepath.FromSlash(tv.Loads[i].HAR)))
}

// MedianPage is the page whose median PLT over runs is the median over
// pages in the reference mode (direct, else the first mode), so that every
// mode is shown on the same page; "" when there is none.
func MedianPage(v View) string {
	ref := "direct"
	if _, ok := v.Totals[ref]; !ok && len(v.Modes) > 0 {
		ref = v.Modes[0]
	}
	type pp struct {
		page string
		plt  float64
	}
	var ps []pp
	for _, pg := range v.Pages {
		if s := v.Stats[[2]string{pg, ref}]; s.PLT.N > 0 {
			ps = append(ps, pp{pg, s.PLT.Median})
		}
	}
	if len(ps) == 0 {
		return ""
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].plt < ps[j].plt })
	return ps[(len(ps)-1)/2].page
}

// MedianLoad is the load of page in mode whose PLT is the median over its
// runs (the lower middle for an even count); -1 when there is none.
func (tv TimeView) MedianLoad(page, mode string) int {
	var idx []int
	for i, l := range tv.Loads {
		if l.Page == page && l.Mode == mode {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return -1
	}
	sort.SliceStable(idx, func(a, b int) bool { return tv.Loads[idx[a]].PLT < tv.Loads[idx[b]].PLT })
	return idx[(len(idx)-1)/2]
}
