package browser

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"

	"pep/testbed/har"
)

// harLog collects one tab's network events into HAR entries (package
// har). The caller serialises calls (netLog's mutex).
type harLog struct {
	reqs  map[network.RequestID]*harReq
	done  []*harReq
	wall0 float64 // wallTime - timestamp of the first request, s: the monotonic clock's epoch offset
	seen0 bool
}

// harReq is one request in flight: its entry so far and the monotonic
// times (s) the timings are computed from.
type harReq struct {
	e        har.Entry
	issue    float64 // requestWillBeSent's timestamp
	end      float64 // loadingFinished/Failed's timestamp, or the next hop's issue
	timing   *network.ResourceTiming
	finished bool
}

func newHARLog() *harLog { return &harLog{reqs: map[network.RequestID]*harReq{}} }

func (h *harLog) event(ev any) {
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		// http(s) only, as Page.Requests counts (no data: or blob: URLs).
		if e.Request == nil || !(strings.HasPrefix(e.Request.URL, "http:") || strings.HasPrefix(e.Request.URL, "https:")) {
			return
		}
		if !h.seen0 {
			h.wall0, h.seen0 = float64(e.WallTime)-float64(e.Timestamp), true
		}
		init := initiatorOf(e.Initiator)
		if prev := h.reqs[e.RequestID]; prev != nil && e.RedirectResponse != nil {
			// The previous hop ends where this one starts; the next hop's
			// parent is the previous hop (one more round trip in the chain).
			prev.response(e.RedirectResponse)
			prev.end, prev.finished = float64(e.Timestamp), true
			h.done = append(h.done, prev)
			init = har.Initiator{Type: "redirect", URL: prev.e.Request.URL, Line: -1}
		}
		r := &harReq{issue: float64(e.Timestamp), end: -1}
		r.e.RequestID = string(e.RequestID)
		r.e.ResourceType = string(e.Type)
		r.e.Priority = string(e.Request.InitialPriority)
		r.e.InitialPriority = string(e.Request.InitialPriority)
		r.e.Initiator = init
		r.e.Request = har.Request{Method: e.Request.Method, URL: e.Request.URL, HTTPVersion: "", Cookies: []har.Header{},
			Headers: []har.Header{}, QueryString: []har.Header{}, HeadersSize: -1, BodySize: 0}
		if e.Request.HasPostData {
			r.e.Request.BodySize = -1
		}
		r.e.Response = har.Response{Cookies: []har.Header{}, Headers: []har.Header{}, HeadersSize: -1, BodySize: -1}
		h.reqs[e.RequestID] = r
	case *network.EventResourceChangedPriority:
		if r := h.reqs[e.RequestID]; r != nil {
			r.e.Priority = string(e.NewPriority)
		}
	case *network.EventRequestServedFromCache:
		if r := h.reqs[e.RequestID]; r != nil && r.e.FromCache == "" {
			r.e.FromCache = "memory"
		}
	case *network.EventResponseReceived:
		if r := h.reqs[e.RequestID]; r != nil && e.Response != nil {
			r.response(e.Response)
		}
	case *network.EventLoadingFinished:
		if r := h.reqs[e.RequestID]; r != nil {
			r.e.Response.TransferSize = int64(e.EncodedDataLength)
			if e.EncodedBodyLength > 0 {
				r.e.Response.BodySize = int64(e.EncodedBodyLength)
			} else if r.e.Response.BodySize < 0 && r.e.Response.Status > 0 {
				r.e.Response.BodySize = 0
			}
			r.end, r.finished = float64(e.Timestamp), true
			h.done = append(h.done, r)
			delete(h.reqs, e.RequestID)
		}
	case *network.EventLoadingFailed:
		if r := h.reqs[e.RequestID]; r != nil {
			r.e.Error, r.e.Canceled = e.ErrorText, e.Canceled
			r.end, r.finished = float64(e.Timestamp), true
			h.done = append(h.done, r)
			delete(h.reqs, e.RequestID)
		}
	}
}

// response takes what an entry needs of a response (a final one, or a
// redirect's).
func (r *harReq) response(resp *network.Response) {
	r.e.Response.Status = resp.Status
	r.e.Response.StatusText = resp.StatusText
	r.e.Response.HTTPVersion = httpVersion(resp.Protocol)
	r.e.Request.HTTPVersion = r.e.Response.HTTPVersion
	r.e.Response.Content = har.Content{Size: -1, MimeType: resp.MimeType}
	if resp.EncodedDataLength > 0 {
		r.e.Response.TransferSize = int64(resp.EncodedDataLength)
	}
	if v, ok := resp.Headers["Location"]; ok {
		r.e.Response.RedirectURL = fmt.Sprint(v)
	} else if v, ok := resp.Headers["location"]; ok {
		r.e.Response.RedirectURL = fmt.Sprint(v)
	}
	r.e.Protocol = resp.Protocol
	r.e.ServerIPAddress = resp.RemoteIPAddress
	r.e.ConnectionReused = resp.ConnectionReused
	switch {
	case resp.FromDiskCache:
		r.e.FromCache = "disk"
	case resp.FromPrefetchCache:
		r.e.FromCache = "prefetch"
	}
	if resp.ConnectionID != 0 && r.e.FromCache == "" {
		r.e.Connection = strconv.FormatFloat(resp.ConnectionID, 'f', -1, 64)
	}
	if resp.Timing != nil {
		t := *resp.Timing
		r.timing = &t
	}
}

// httpVersion is a HAR httpVersion for Chromium's protocol name.
func httpVersion(p string) string {
	switch p {
	case "http/1.1":
		return "HTTP/1.1"
	case "http/1.0":
		return "HTTP/1.0"
	case "h2":
		return "HTTP/2"
	case "h3", "http/2+quic/46", "quic":
		return "HTTP/3"
	}
	return p
}

// initiatorOf is the HAR initiator of a DevTools initiator: its type, and
// the parent URL: the initiator's URL (parser, preload) or the top frame
// with a URL of its JavaScript stack, through async parents (script).
func initiatorOf(in *network.Initiator) har.Initiator {
	if in == nil {
		return har.Initiator{Type: "other", Line: -1}
	}
	out := har.Initiator{Type: string(in.Type), URL: in.URL, Line: -1}
	if in.URL != "" {
		out.Line = int(in.LineNumber)
	}
	for st := in.Stack; st != nil && out.URL == ""; st = st.Parent {
		if f := topFrame(st); f != nil {
			out.URL, out.Line = f.URL, int(f.LineNumber)
		}
	}
	return out
}

func topFrame(st *runtime.StackTrace) *runtime.CallFrame {
	for _, f := range st.CallFrames {
		if f != nil && f.URL != "" {
			return f
		}
	}
	return nil
}

// pageInfo is what the HAR's page holds beside the entries.
type pageInfo struct {
	url, userAgent string
	timeOrigin     float64 // performance.timeOrigin, ms since the epoch; 0: unknown
	p              *Page
}

// build returns the HAR of the page: the entries of the requests that
// ended and of those still in flight (their timings up to now, with end
// -1 meaning "not ended": Time covers what is known), sorted by start.
func (h *harLog) build(pi pageInfo, now time.Time) *har.HAR {
	out := &har.HAR{Log: har.Log{Version: har.Version, Creator: har.Creator{Name: "pep testbed", Version: "1"},
		Pages: []har.Page{}, Entries: []har.Entry{}}}
	if pi.userAgent != "" {
		out.Log.Browser = &har.Creator{Name: "Chromium", Version: chromiumVersion(pi.userAgent)}
	}
	start := pi.timeOrigin / 1000 // s since the epoch
	if start == 0 && len(h.done)+len(h.reqs) > 0 {
		start = math.Inf(1)
		for _, r := range h.all() {
			start = math.Min(start, r.issue+h.wall0)
		}
	}
	if start == 0 || math.IsInf(start, 1) {
		start = float64(now.UnixMicro()) / 1e6
	}
	mark := func(d time.Duration, ok bool) float64 {
		if !ok || d <= 0 {
			return -1
		}
		return float64(d.Microseconds()) / 1000
	}
	loaded := pi.p != nil && pi.p.Loaded
	pg := har.Page{StartedDateTime: har.FormatTime(unixTime(start)), ID: "page_1", Title: pi.url}
	pg.PageTimings = har.PageTimings{OnContentLoad: -1, OnLoad: -1, TTFB: -1, FCP: -1, LCP: -1}
	if pi.p != nil {
		pg.PageTimings = har.PageTimings{OnContentLoad: mark(pi.p.DCL, loaded), OnLoad: mark(pi.p.PLT, loaded),
			TTFB: mark(pi.p.TTFB, loaded), FCP: mark(pi.p.FCP, loaded), LCP: mark(pi.p.LCP, loaded)}
		if loaded {
			pg.PageTimings.LCPURL = pi.p.LCPURL
		}
	}
	out.Log.Pages = append(out.Log.Pages, pg)
	nowMono := float64(now.UnixMicro())/1e6 - h.wall0
	for _, r := range h.all() {
		e := r.e
		e.PageRef = pg.ID
		e.Start = round3((r.issue + h.wall0 - start) * 1000)
		e.StartedDateTime = har.FormatTime(unixTime(r.issue + h.wall0))
		end := r.end
		if !r.finished {
			end = nowMono
			if e.Error == "" {
				e.Error = "not ended when the page was saved"
			}
		}
		e.Timings = timings(r.issue, end, r.timing, e.FromCache != "")
		e.Time = 0
		for _, v := range []float64{e.Timings.Blocked, e.Timings.DNS, e.Timings.Connect, e.Timings.Send, e.Timings.Wait, e.Timings.Receive} {
			if v > 0 {
				e.Time += v
			}
		}
		e.Time = round3(e.Time)
		out.Log.Entries = append(out.Log.Entries, e)
	}
	sort.SliceStable(out.Log.Entries, func(i, j int) bool { return out.Log.Entries[i].Start < out.Log.Entries[j].Start })
	return out
}

func (h *harLog) all() []*harReq {
	out := append([]*harReq(nil), h.done...)
	var open []*harReq
	for _, r := range h.reqs {
		open = append(open, r)
	}
	sort.Slice(open, func(i, j int) bool { return open[i].issue < open[j].issue })
	return append(out, open...)
}

// timings derives HAR timings (ms) from the request's issue and end
// (monotonic s) and Chromium's ResourceTiming (ms after its requestTime,
// -1 for a phase that did not happen), as Chrome DevTools' HAR export does
// (package har). Without a ResourceTiming the whole time is Receive for a
// response from a cache (cached), else Blocked and Queued (a request that
// failed or was cancelled before the network stack started it).
func timings(issue, end float64, t *network.ResourceTiming, cached bool) har.Timings {
	out := har.Timings{Blocked: -1, DNS: -1, Connect: -1, SSL: -1, Send: 0, Wait: 0, Receive: 0}
	total := math.Max(0, (end-issue)*1000)
	if t == nil || t.RequestTime == 0 {
		if cached {
			out.Receive = round3(total)
		} else {
			out.Blocked, out.Queued = round3(total), round3(total)
		}
		return out
	}
	queued := math.Max(0, (t.RequestTime-issue)*1000)
	first := leastNonNegative(t.DNSStart, t.ConnectStart, t.SendStart)
	stalled := 0.0
	if first >= 0 {
		stalled = first
	} else {
		first = 0
	}
	out.Queued, out.Stalled = round3(queued), round3(stalled)
	out.Blocked = round3(queued + stalled)
	mark := first // ms after requestTime: the end of the phases so far
	if t.DNSStart >= 0 && t.DNSEnd >= 0 {
		out.DNS = round3(t.DNSEnd - t.DNSStart)
		mark = math.Max(mark, t.DNSEnd)
	}
	if t.ConnectStart >= 0 && t.ConnectEnd >= 0 {
		out.Connect = round3(t.ConnectEnd - math.Max(t.ConnectStart, mark))
		mark = math.Max(mark, t.ConnectEnd)
	}
	if t.SslStart >= 0 && t.SslEnd >= 0 {
		out.SSL = round3(t.SslEnd - t.SslStart)
	}
	if t.SendStart >= 0 && t.SendEnd >= 0 {
		out.Send = round3(math.Max(0, t.SendEnd-math.Max(t.SendStart, mark)))
		mark = math.Max(mark, t.SendEnd)
	}
	headers := t.ReceiveHeadersStart
	if headers <= 0 {
		headers = t.ReceiveHeadersEnd
	}
	endRel := (end - t.RequestTime) * 1000
	if headers > 0 {
		out.Wait = round3(math.Max(0, headers-mark))
		mark = math.Max(mark, headers)
		out.Receive = round3(math.Max(0, endRel-mark))
	} else {
		out.Wait = round3(math.Max(0, endRel-mark))
	}
	return out
}

func leastNonNegative(vs ...float64) float64 {
	best := -1.0
	for _, v := range vs {
		if v >= 0 && (best < 0 || v < best) {
			best = v
		}
	}
	return best
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func unixTime(s float64) time.Time {
	return time.UnixMicro(int64(math.Round(s * 1e6)))
}

// chromiumVersion is the version in a Chrome user agent
// ("... HeadlessChrome/156.0.1.2 Safari/537.36" -> "156.0.1.2").
func chromiumVersion(ua string) string {
	for _, f := range strings.Fields(ua) {
		if v, ok := strings.CutPrefix(f, "HeadlessChrome/"); ok {
			return v
		}
		if v, ok := strings.CutPrefix(f, "Chrome/"); ok {
			return v
		}
	}
	return ua
}
