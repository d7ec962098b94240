package corpus

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
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
	// Pages lists top-level page URLs in order. Empty means: the first HTML
	// response (status 200, Content-Type text/html) of each file is a page.
	// The records from a page's response up to the next page's belong to
	// that page; records before the first page belong to the first page.
	Pages []string
}

// hopByHop are the fields a replay must not repeat (RFC 9110 §7.6.1) and
// the framing fields the server recomputes.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length"}

// LoadWARC imports WARC files: "response" records with an http(s) target
// (block "application/http; msgtype=response") become objects with the
// recorded status and headers, the body de-chunked but left content-coded
// as recorded; "resource" records become objects with the record's
// Content-Type. Other record types are counted in Stats.Skipped. source
// names the corpus.
func LoadWARC(source string, files []string, opt WARCOptions) (*Corpus, error) {
	type rec struct {
		obj  *Object
		url  string
		html bool
		file int
	}
	var recs []rec
	var stats ImportStats
	for fi, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		r, err := NewWARCReader(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("corpus: %q: %w", name, err)
		}
		for {
			wr, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("corpus: %q: %w", name, err)
			}
			o, u, err := warcObject(wr)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("corpus: %q: record %s: %w", name, wr.Header.Get("WARC-Record-ID"), err)
			}
			if o == nil {
				stats.Skipped++
				continue
			}
			stats.Files++
			html := (o.Status == 0 || o.Status == http.StatusOK) && strings.HasPrefix(o.ContentType, "text/html")
			recs = append(recs, rec{o, u, html, fi})
		}
		f.Close()
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("corpus: %s: no response or resource records", source)
	}
	// Mark where pages start.
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
	// Page order follows opt.Pages when given.
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
	return New(source, pages, stats), nil
}

// warcObject turns a response or resource record into an object and its
// target URL; other records give nil.
func warcObject(r *WARCRecord) (*Object, string, error) {
	typ := r.Header.Get("WARC-Type")
	if typ != "response" && typ != "resource" {
		return nil, "", nil
	}
	target := strings.Trim(r.Header.Get("WARC-Target-URI"), "<>")
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", nil
	}
	o := &Object{Host: normHost(u.Host), Path: u.EscapedPath()}
	if o.Path == "" {
		o.Path = "/"
	}
	if u.RawQuery != "" || u.ForceQuery {
		o.Path += "?" + u.RawQuery
	}
	if typ == "resource" {
		o.Body = r.Block
		o.ContentType = r.Header.Get("Content-Type")
		if o.ContentType == "" {
			o.ContentType = ContentType(u.Path, o.Body)
		}
		return o, target, nil
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/http") {
		return nil, "", fmt.Errorf("response block Content-Type %q is not application/http", ct)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(r.Block)), &http.Request{Method: http.MethodGet})
	if err != nil {
		return nil, "", fmt.Errorf("HTTP response: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", fmt.Errorf("HTTP response body: %w", err)
	}
	o.Body, o.Status, o.Header = body, resp.StatusCode, resp.Header.Clone()
	for _, h := range hopByHop {
		o.Header.Del(h)
	}
	o.ContentType = o.Header.Get("Content-Type")
	if o.ContentType == "" {
		o.ContentType = ContentType(u.Path, body)
	}
	return o, target, nil
}
