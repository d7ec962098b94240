// Package har holds the HTTP Archive (HAR 1.2) the testbed writes for every
// page load: one page (log.pages) and one entry per request (log.entries),
// without bodies, with the timings Chromium's network stack measured, and
// the custom fields (names starting with "_", as HAR 1.2 allows) that the
// report's analysis needs: priority, initiator with its parent URL,
// protocol, and the queueing before the network stack took the request.
//
// The format follows the HAR 1.2 specification (Jan Odvarko,
// http://www.softwareishard.com/blog/har-12-spec/; W3C Web Performance WG
// draft "HTTP Archive (HAR) format", 2012). The timings are derived from
// Chromium's ResourceTiming as Chrome DevTools' own HAR export does it
// (devtools-frontend, front_end/models/har/HARLog.ts, buildTimings), with
// `wait` ending at the first byte of the response headers
// (receiveHeadersStart) instead of the responseReceived event. The
// chromedp/cdproto har package has the standard fields only (no room for
// the custom ones), hence these plain types.
package har

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Version is the HAR version written.
const Version = "1.2"

// HAR is a HAR file's top-level object.
type HAR struct {
	Log Log `json:"log"`
}

// Log is the root of the archive.
type Log struct {
	Version string   `json:"version"`
	Creator Creator  `json:"creator"`
	Browser *Creator `json:"browser,omitempty"`
	Pages   []Page   `json:"pages"`
	Entries []Entry  `json:"entries"`
	Comment string   `json:"comment,omitempty"`
}

// Creator names the program that wrote the log, or the browser.
type Creator struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Page is one page load. StartedDateTime is navigation start
// (performance.timeOrigin). Times in PageTimings are ms after it, -1 when
// not measured.
type Page struct {
	StartedDateTime string      `json:"startedDateTime"`
	ID              string      `json:"id"`
	Title           string      `json:"title"`
	PageTimings     PageTimings `json:"pageTimings"`
}

// PageTimings are the page's marks in ms after Page.StartedDateTime, -1
// when not measured: DOMContentLoaded and load (Navigation Timing 2's
// domContentLoadedEventEnd, loadEventEnd), and the custom paint marks: the
// document's first response byte, first contentful paint (Paint Timing) and
// largest contentful paint (its last candidate), as the testbed's
// browser.Page measured them; LCPURL is that candidate's resource URL
// ("" for a text element or no LCP).
type PageTimings struct {
	OnContentLoad float64 `json:"onContentLoad"`
	OnLoad        float64 `json:"onLoad"`
	TTFB          float64 `json:"_ttfb"`
	FCP           float64 `json:"_firstContentfulPaint"`
	LCP           float64 `json:"_largestContentfulPaint"`
	LCPURL        string  `json:"_largestContentfulPaintURL,omitempty"`
}

// Entry is one request: a redirect's every hop is an entry of its own.
// Time is the sum of the non-negative timings (ms).
type Entry struct {
	PageRef         string   `json:"pageref"`
	StartedDateTime string   `json:"startedDateTime"`
	Time            float64  `json:"time"`
	Request         Request  `json:"request"`
	Response        Response `json:"response"`
	Cache           struct{} `json:"cache"`
	Timings         Timings  `json:"timings"`
	ServerIPAddress string   `json:"serverIPAddress,omitempty"`
	// Connection is Chromium's connection id (DevTools connectionId): the
	// same value is the same TCP (or QUIC) connection; "" for responses
	// from a cache.
	Connection string `json:"connection,omitempty"`

	// Start is the request's start in ms after the page's start (the same
	// instant as StartedDateTime, to the microsecond).
	Start float64 `json:"_start"`
	// RequestID is Chromium's request id (the hops of a redirect share it).
	RequestID string `json:"_requestId"`
	// ResourceType is Chromium's resource type: Document, Stylesheet,
	// Image, Script, Font, XHR, Fetch, ...
	ResourceType string `json:"_resourceType"`
	// Priority is the loading priority the request had when it ended
	// (VeryLow ... VeryHigh); InitialPriority the one it started with.
	Priority        string `json:"_priority"`
	InitialPriority string `json:"_initialPriority,omitempty"`
	// Protocol is the response's protocol as Chromium names it
	// (http/1.1, h2, h3, data, ...).
	Protocol  string    `json:"_protocol,omitempty"`
	Initiator Initiator `json:"_initiator"`
	// FromCache is "memory", "disk" or "" (from the network).
	FromCache string `json:"_fromCache,omitempty"`
	// ConnectionReused: the request went over a connection that had
	// carried a request before.
	ConnectionReused bool `json:"_connectionReused,omitempty"`
	// Error is why the request failed (net::ERR_...), "" when it did not.
	Error string `json:"_error,omitempty"`
	// Canceled: the request was aborted (by the page or the browser).
	Canceled bool `json:"_canceled,omitempty"`
}

// Initiator is what started a request (DevTools Network.Initiator): Type is
// parser, script, preload, redirect, other, ...; URL is the parent: the
// document or stylesheet whose parser asked for it, the script on top of
// the JavaScript stack (the first frame with a URL, through async parents),
// the previous hop of a redirect; Line is that parent's 0-based line
// (-1: unknown).
type Initiator struct {
	Type string `json:"type"`
	URL  string `json:"url,omitempty"`
	Line int    `json:"lineNumber"`
}

// Request is the request line's parts. Headers and cookies are not kept
// (the testbed's HARs keep no bodies and no headers: they stay small);
// the arrays are empty, as HAR 1.2 requires them.
type Request struct {
	Method      string   `json:"method"`
	URL         string   `json:"url"`
	HTTPVersion string   `json:"httpVersion"`
	Cookies     []Header `json:"cookies"`
	Headers     []Header `json:"headers"`
	QueryString []Header `json:"queryString"`
	HeadersSize int64    `json:"headersSize"`
	BodySize    int64    `json:"bodySize"`
}

// Header is a name and value pair.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Response is the status, the sizes and the content type; no body.
// Status 0 means no response. TransferSize is the bytes received for it
// (DevTools encodedDataLength: headers and body as they crossed the
// network, 0 from a cache).
type Response struct {
	Status       int64    `json:"status"`
	StatusText   string   `json:"statusText"`
	HTTPVersion  string   `json:"httpVersion"`
	Cookies      []Header `json:"cookies"`
	Headers      []Header `json:"headers"`
	Content      Content  `json:"content"`
	RedirectURL  string   `json:"redirectURL"`
	HeadersSize  int64    `json:"headersSize"`
	BodySize     int64    `json:"bodySize"`
	TransferSize int64    `json:"_transferSize"`
}

// Content describes the body without holding it: its decoded size and
// MIME type.
type Content struct {
	Size     int64  `json:"size"`
	MimeType string `json:"mimeType"`
}

// Timings are the phases of a request in ms, -1 when a phase did not
// happen (HAR 1.2). Blocked is Queued + Stalled: the time from the
// request's issue by the page to its first network step (DNS, connect or
// send): in the renderer and the network service's scheduler (Queued, up to
// Chromium's requestTime) and waiting there for a socket under the
// per-host and per-profile connection limits (Stalled). Connect includes
// SSL, as HAR 1.2 says. Wait runs from the request's last byte sent to the
// response's first header byte; Receive from there to the body's end.
type Timings struct {
	Blocked float64 `json:"blocked"`
	DNS     float64 `json:"dns"`
	Connect float64 `json:"connect"`
	Send    float64 `json:"send"`
	Wait    float64 `json:"wait"`
	Receive float64 `json:"receive"`
	SSL     float64 `json:"ssl"`
	Queued  float64 `json:"_queued"`
	Stalled float64 `json:"_stalled"`
}

// End is the request's end in ms after the page's start.
func (e Entry) End() float64 { return e.Start + e.Time }

// Write writes h to path as JSON (compact: a HAR of a hundred requests is
// about 100 kB).
func (h *HAR) Write(path string) error {
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("har: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("har: %w", err)
	}
	return nil
}

// Read reads a HAR file. Errors name the file; a log without a page is an
// error.
func Read(path string) (*HAR, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("har: %w", err)
	}
	var h HAR
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("har: %s: %w", path, err)
	}
	if len(h.Log.Pages) == 0 {
		return nil, fmt.Errorf("har: %s: log.pages is empty", path)
	}
	return &h, nil
}

// TimeFormat is the layout of startedDateTime: ISO 8601 with microseconds.
const TimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// FormatTime formats t as TimeFormat in UTC.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }
