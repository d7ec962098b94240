package corpus

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// WARCRecord is one record of a WARC file (ISO 28500:2017, WARC/1.1 §4):
// a version line, named fields, a block of Content-Length bytes and two
// CRLFs.
type WARCRecord struct {
	// Version is the version line without "WARC/", e.g. "1.0".
	Version string
	// Header holds the named fields; look them up with Header.Get, which is
	// case-insensitive as §5.1 asks.
	Header textproto.MIMEHeader
	// Block is the record's content block, exactly Content-Length bytes.
	Block []byte
	// Offset is the record's offset in the uncompressed stream, in bytes.
	Offset int64
}

// WARCReader reads records from a WARC stream, plain or gzip-compressed
// (one gzip member per record, §D.2, or the whole file; members are read
// in sequence). It is strict: a record must start with "WARC/1.0",
// "WARC/1.1" or "WARC/0.18", lines must end in CRLF, WARC-Type,
// WARC-Record-ID, WARC-Date and a decimal Content-Length are mandatory
// (§5.2-5.5), and the block must be followed by CRLF CRLF. No maintained Go
// WARC module is reachable from this project's module proxy
// (github.com/nlnwa/gowarc, github.com/internetarchive/gowarc and others
// answer 403), hence this reader.
type WARCReader struct {
	r   *bufio.Reader
	off int64
	n   int
}

// NewWARCReader returns a reader for r, detecting gzip by its magic bytes.
func NewWARCReader(r io.Reader) (*WARCReader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("corpus: warc: %w", err)
		}
		br = bufio.NewReaderSize(gz, 1<<16)
	}
	return &WARCReader{r: br}, nil
}

// Next returns the next record, or io.EOF after the last one. A malformed
// record yields an error naming the record's number and offset.
func (w *WARCReader) Next() (*WARCRecord, error) {
	start := w.off
	w.n++
	fail := func(format string, a ...any) error {
		return fmt.Errorf("corpus: warc: record %d at offset %d: %s", w.n, start, fmt.Sprintf(format, a...))
	}
	line, err := w.line()
	if errors.Is(err, io.EOF) && line == "" {
		return nil, io.EOF
	}
	if err != nil {
		return nil, fail("version line: %v", err)
	}
	ver, ok := strings.CutPrefix(line, "WARC/")
	if !ok || (ver != "1.0" && ver != "1.1" && ver != "0.18") {
		return nil, fail("version line %q is not WARC/1.0, WARC/1.1 or WARC/0.18", line)
	}
	rec := &WARCRecord{Version: ver, Header: textproto.MIMEHeader{}, Offset: start}
	var last string
	for {
		l, err := w.line()
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, fail("header: %v", err)
		}
		if l == "" {
			break
		}
		if (l[0] == ' ' || l[0] == '\t') && last != "" {
			vs := rec.Header[last]
			vs[len(vs)-1] += " " + strings.TrimSpace(l)
			continue
		}
		name, val, ok := strings.Cut(l, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fail("header line %q is not \"Name: value\"", l)
		}
		last = textproto.CanonicalMIMEHeaderKey(name)
		rec.Header[last] = append(rec.Header[last], strings.TrimSpace(val))
	}
	for _, f := range []string{"WARC-Type", "WARC-Record-ID", "WARC-Date", "Content-Length"} {
		if rec.Header.Get(f) == "" {
			return nil, fail("mandatory field %s is missing", f)
		}
	}
	cl := rec.Header.Get("Content-Length")
	n, err := strconv.ParseInt(cl, 10, 64)
	if err != nil || n < 0 {
		return nil, fail("Content-Length %q is not a decimal byte count", cl)
	}
	rec.Block = make([]byte, n)
	if _, err := io.ReadFull(w.r, rec.Block); err != nil {
		return nil, fail("block of %d bytes: %v", n, err)
	}
	w.off += n
	var end [4]byte
	if _, err := io.ReadFull(w.r, end[:]); err != nil || string(end[:]) != "\r\n\r\n" {
		return nil, fail("block is not followed by CRLF CRLF")
	}
	w.off += 4
	return rec, nil
}

// line reads one CRLF-terminated line without its CRLF.
func (w *WARCReader) line() (string, error) {
	l, err := w.r.ReadString('\n')
	w.off += int64(len(l))
	if err != nil {
		if errors.Is(err, io.EOF) && l != "" {
			return l, io.ErrUnexpectedEOF
		}
		return l, err
	}
	if !strings.HasSuffix(l, "\r\n") {
		return "", fmt.Errorf("line %q does not end in CRLF", strings.TrimSuffix(l, "\n"))
	}
	return l[:len(l)-2], nil
}

// WARCOptions selects pages in WARC input.
type WARCOptions struct {
	// Pages lists top-level page URLs in order. Empty means: the archive's
	// page list (pages.jsonl beside the WARC files, or pages/pages.jsonl in
	// a WACZ) when there is one, else the first HTML response (status 200,
	// Content-Type text/html) of each file. The records from a page's
	// response up to the next page's belong to that page; records before
	// the first page belong to the first page.
	Pages []string
}

// hopByHop are the fields a replay must not repeat (RFC 9110 §7.6.1) and
// the framing fields the server recomputes.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length"}

// Reasons a WARC record is not used, counted in ImportStats.SkippedBy.
const (
	SkipWarcinfo          = "warcinfo"                   // ISO 28500 §6.2: about the file, not a capture
	SkipRequest           = "request"                    // §6.5: the request is not replayed (pywb matches on the response)
	SkipMetadata          = "metadata"                   // §6.6
	SkipOtherType         = "other_record_type"          // conversion, continuation, unknown types
	SkipNotHTTPTarget     = "non_http_target"            // dns:, urn:, ... (§6.3: any URI)
	SkipNotHTTPBlock      = "block_not_application_http" // a response whose block is not an HTTP message
	SkipBadHTTPHead       = "bad_http_head"              // no status line or no end of the head
	SkipInformational     = "status_1xx"                 // an interim response recorded alone
	SkipNotModified       = "status_304"                 // a browser's revalidation: no payload to replay
	SkipRevisitUnresolved = "revisit_unresolved"         // §6.7: the record it refers to is not in the archive
	SkipFraming           = "warc_framing"               // the file's framing broke: the rest of the file
	SkipEmptyFile         = "file_without_records"       // a file that holds no record
)

// LoadWARC imports WARC files (ISO 28500:2017): "response" records with an
// http(s) target (block "application/http; msgtype=response") become
// objects with the recorded status and headers, the body de-chunked but
// left content-coded as recorded; "resource" records become objects with
// the record's Content-Type; "revisit" records are resolved to the payload
// of the record they refer to. The WARC framing is read strictly
// (WARCReader); the HTTP payload leniently, as warcio and pywb read it
// (parseHTTPResponse: chunked framing that does not parse is taken raw,
// bad Content-Length repaired). A record that cannot be used is skipped
// and counted by reason in Stats.SkippedBy, never fatal; a framing error
// skips the rest of that file (counted). The import fails only when no
// file can be opened or no record at all is usable. source names the
// corpus.
func LoadWARC(source string, files []string, opt WARCOptions) (*Corpus, error) {
	var srcs []warcSource
	for _, name := range files {
		srcs = append(srcs, fileSource(name))
	}
	if len(opt.Pages) == 0 && len(files) > 0 {
		pages, err := readPagesJSONL(filepath.Join(filepath.Dir(files[0]), "pages.jsonl"))
		if err != nil {
			return nil, err
		}
		opt.Pages = pages
	}
	return loadWARCSources(source, srcs, opt)
}

// warcSource is one WARC stream of an import: a file, or a member of a
// WACZ.
type warcSource struct {
	name string
	open func() (io.ReadCloser, error)
}

func fileSource(name string) warcSource {
	return warcSource{name: name, open: func() (io.ReadCloser, error) { return os.Open(name) }}
}

// pending is one usable record of an import, in archive order.
type pending struct {
	obj     *Object
	url     string
	html    bool
	file    int
	revisit *WARCRecord // a revisit to resolve once every file is read
}

func loadWARCSources(source string, srcs []warcSource, opt WARCOptions) (*Corpus, error) {
	var recs []pending
	stats := ImportStats{SkippedBy: map[string]int{}, Repaired: map[string]int{}}
	skip := func(reason string) { stats.Skipped++; stats.SkippedBy[reason]++ }
	byDigest := map[string]*Object{}
	byTarget := map[string]*Object{}
	requested := map[string]bool{}
	for fi, src := range srcs {
		f, err := src.open()
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		r, err := NewWARCReader(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("corpus: %q: %w", src.name, err)
		}
		n := 0
		for {
			wr, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				skip(SkipFraming)
				stats.Errors = append(stats.Errors, fmt.Sprintf("%s: %v", filepath.Base(src.name), err))
				break
			}
			n++
			stats.Records++
			typ := wr.Header.Get("WARC-Type")
			target := strings.Trim(wr.Header.Get("WARC-Target-URI"), "<>")
			switch typ {
			case "response", "revisit":
				stats.Responses++
			case "request":
				requested[target] = true
			}
			if typ == "revisit" {
				if !isHTTPURL(target) {
					skip(SkipNotHTTPTarget)
					continue
				}
				recs = append(recs, pending{url: target, file: fi, revisit: wr})
				continue
			}
			o, reason, repairs := warcObject(wr)
			if !stats.take(o, reason, repairs) {
				continue
			}
			if typ == "response" {
				stats.ResponsesUsed++
			}
			if d := wr.Header.Get("WARC-Payload-Digest"); d != "" && byDigest[d] == nil {
				byDigest[d] = o
			}
			if byTarget[target] == nil {
				byTarget[target] = o
			}
			html := (o.Status == 0 || o.Status == http.StatusOK) && strings.HasPrefix(o.ContentType, "text/html")
			recs = append(recs, pending{obj: o, url: target, html: html, file: fi})
		}
		f.Close()
		if n == 0 {
			skip(SkipEmptyFile)
		}
	}
	// Resolve revisits (ISO 28500 §6.7.2 identical-payload-digest, §6.7.3
	// server-not-modified) against every file's responses, as pywb does.
	kept := recs[:0]
	for _, p := range recs {
		if p.revisit != nil {
			o := resolveRevisit(p.revisit, byDigest, byTarget)
			if o == nil {
				skip(SkipRevisitUnresolved)
				continue
			}
			stats.Files++
			stats.ResponsesUsed++
			stats.Repaired[string(RepairRevisit)]++
			p.obj = o
			p.html = (o.Status == 0 || o.Status == http.StatusOK) && strings.HasPrefix(o.ContentType, "text/html")
		}
		kept = append(kept, p)
	}
	recs = kept
	for u := range requested {
		if byTarget[u] == nil {
			stats.Unanswered++
		}
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("corpus: %s: no usable response or resource record (%s)", source, stats.skipSummary())
	}
	pages, err := splitPages(source, recs, opt)
	if err != nil {
		return nil, err
	}
	return New(source, pages, stats), nil
}

// take counts one record's import: its repairs, and either the object
// (Files) or the skip reason when o is nil. It reports whether o is used.
func (s *ImportStats) take(o *Object, reason string, repairs []Repair) bool {
	for _, rp := range repairs {
		s.Repaired[string(rp)]++
	}
	if o == nil {
		s.Skipped++
		s.SkippedBy[reason]++
		return false
	}
	s.Files++
	return true
}

// splitPages cuts the records into pages (see WARCOptions.Pages).
func splitPages(source string, recs []pending, opt WARCOptions) ([]*Page, error) {
	starts := map[int]string{}
	if len(opt.Pages) > 0 {
		for _, p := range opt.Pages {
			found := false
			for i, r := range recs {
				if r.url == p {
					if _, dup := starts[i]; !dup {
						starts[i], found = p, true
						break
					}
				}
			}
			if !found {
				return nil, fmt.Errorf("corpus: %s: page %q has no response record", source, p)
			}
		}
	} else {
		seen := map[int]bool{}
		for i, r := range recs {
			if r.html && !seen[r.file] {
				seen[r.file] = true
				starts[i] = r.url
			}
		}
		if len(starts) == 0 {
			return nil, fmt.Errorf("corpus: %s: no HTML response to use as a page; name pages explicitly", source)
		}
	}
	if len(opt.Pages) == 0 {
		recs = pageFirst(recs, starts)
	}
	var pages []*Page
	names := map[string]bool{}
	var cur *Page
	var early []*Object
	for i, r := range recs {
		if u, ok := starts[i]; ok {
			pu, _ := url.Parse(u)
			name := normHost(pu.Host)
			if names[name] {
				name = u
			}
			names[name] = true
			cur = &Page{Name: name, URL: u, Host: normHost(pu.Host), Objects: []*Object{r.obj}}
			if len(pages) == 0 {
				cur.Objects = append(cur.Objects, early...)
			}
			pages = append(pages, cur)
			continue
		}
		if cur == nil {
			early = append(early, r.obj)
			continue
		}
		cur.Objects = append(cur.Objects, r.obj)
	}
	if len(opt.Pages) > 0 {
		byURL := map[string]*Page{}
		for _, p := range pages {
			byURL[p.URL] = p
		}
		pages = pages[:0]
		for _, u := range opt.Pages {
			pages = append(pages, byURL[u])
		}
	}
	return pages, nil
}

// pageFirst reorders the records of each file so that records before the
// file's first page (a browser's early requests) follow that page's
// record, and so belong to the page of their own file rather than to the
// previous file's page. starts is rewritten for the new order.
func pageFirst(recs []pending, starts map[int]string) []pending {
	out := make([]pending, 0, len(recs))
	newStarts := map[int]string{}
	for i := 0; i < len(recs); {
		j := i
		for j < len(recs) && recs[j].file == recs[i].file {
			j++
		}
		first := -1
		for k := i; k < j; k++ {
			if _, ok := starts[k]; ok {
				first = k
				break
			}
		}
		if first < 0 {
			out = append(out, recs[i:j]...)
			i = j
			continue
		}
		newStarts[len(out)] = starts[first]
		out = append(out, recs[first])
		out = append(out, recs[i:first]...)
		for k := first + 1; k < j; k++ {
			if u, ok := starts[k]; ok {
				newStarts[len(out)] = u
			}
			out = append(out, recs[k])
		}
		i = j
	}
	for k := range starts {
		delete(starts, k)
	}
	for k, v := range newStarts {
		starts[k] = v
	}
	return out
}

// resolveRevisit builds the object a revisit record stands for: the
// payload of the response with the same WARC-Payload-Digest (or, failing
// that, of WARC-Refers-To-Target-URI, or of its own target), with the
// revisit's own status and headers when its block records a full response
// head other than 304. nil when nothing matches.
func resolveRevisit(r *WARCRecord, byDigest, byTarget map[string]*Object) *Object {
	orig := byDigest[r.Header.Get("WARC-Payload-Digest")]
	if orig == nil {
		orig = byTarget[strings.Trim(r.Header.Get("WARC-Refers-To-Target-URI"), "<>")]
	}
	target := strings.Trim(r.Header.Get("WARC-Target-URI"), "<>")
	if orig == nil {
		orig = byTarget[target]
	}
	if orig == nil {
		return nil
	}
	u, _ := url.Parse(target)
	o := &Object{Host: normHost(u.Host), Path: targetPath(u), Scheme: u.Scheme, Body: orig.Body, Status: orig.Status, Header: orig.Header, ContentType: orig.ContentType}
	if p, err := parseHTTPResponse(r.Block); err == nil && p.status != http.StatusNotModified && !bodyless(p.status) && len(p.header) > 0 {
		o.Status, o.Header = p.status, p.header
		for _, h := range hopByHop {
			o.Header.Del(h)
		}
		if ct := o.Header.Get("Content-Type"); ct != "" {
			o.ContentType = ct
		}
	}
	return o
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func targetPath(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	if u.RawQuery != "" || u.ForceQuery {
		p += "?" + u.RawQuery
	}
	return p
}

// warcObject turns a response or resource record into an object. A record
// it cannot use gives nil and the skip reason; repairs lists what was
// fixed in a usable one.
func warcObject(r *WARCRecord) (*Object, string, []Repair) {
	typ := r.Header.Get("WARC-Type")
	switch typ {
	case "response", "resource":
	case "warcinfo":
		return nil, SkipWarcinfo, nil
	case "request":
		return nil, SkipRequest, nil
	case "metadata":
		return nil, SkipMetadata, nil
	default:
		return nil, SkipOtherType, nil
	}
	target := strings.Trim(r.Header.Get("WARC-Target-URI"), "<>")
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, SkipNotHTTPTarget, nil
	}
	o := &Object{Host: normHost(u.Host), Path: targetPath(u), Scheme: u.Scheme}
	if typ == "resource" {
		o.Body = r.Block
		o.ContentType = r.Header.Get("Content-Type")
		if o.ContentType == "" {
			o.ContentType = ContentType(u.Path, o.Body)
		}
		return o, "", nil
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(ct), "application/http") {
		return nil, SkipNotHTTPBlock, nil
	}
	p, err := parseHTTPResponse(r.Block)
	if err != nil {
		return nil, SkipBadHTTPHead, nil
	}
	switch {
	case p.status < 200:
		return nil, SkipInformational, p.repairs
	case p.status == http.StatusNotModified:
		return nil, SkipNotModified, p.repairs
	}
	o.Body, o.Status, o.Header = p.body, p.status, p.header
	for _, h := range hopByHop {
		o.Header.Del(h)
	}
	o.ContentType = o.Header.Get("Content-Type")
	if o.ContentType == "" {
		o.ContentType = ContentType(u.Path, p.body)
	}
	return o, "", p.repairs
}

// readPagesJSONL reads a page list in the WACZ/pywb pages.jsonl form: one
// JSON object per line with a "url" field; a first line with "format"
// (the header) and lines without "url" are skipped. A missing file gives
// no pages and no error.
func readPagesJSONL(name string) ([]string, error) {
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	defer f.Close()
	return parsePagesJSONL(name, f)
}

func parsePagesJSONL(name string, r io.Reader) ([]string, error) {
	var pages []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var p struct {
			URL    string `json:"url"`
			Format string `json:"format"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, fmt.Errorf("corpus: %s:%d: %v", name, line, err)
		}
		if p.URL != "" {
			pages = append(pages, p.URL)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("corpus: %s: %w", name, err)
	}
	return pages, nil
}
