package corpus

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// warcRecord renders one record in the standard layout (ISO 28500 §4):
// version line, named fields, Content-Length, CRLF, block, CRLF CRLF.
func warcRecord(n int, typ, target, ctype string, block []byte) []byte {
	var b bytes.Buffer
	b.WriteString("WARC/1.1\r\n")
	fmt.Fprintf(&b, "WARC-Type: %s\r\n", typ)
	fmt.Fprintf(&b, "WARC-Record-ID: <urn:uuid:00000000-0000-4000-8000-%012d>\r\n", n)
	b.WriteString("WARC-Date: 2011-04-11T10:00:00Z\r\n")
	if target != "" {
		fmt.Fprintf(&b, "WARC-Target-URI: %s\r\n", target)
	}
	if ctype != "" {
		fmt.Fprintf(&b, "Content-Type: %s\r\n", ctype)
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(block))
	b.Write(block)
	b.WriteString("\r\n\r\n")
	return b.Bytes()
}

func gzipMember(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

const httpResp = "application/http; msgtype=response"

const testPage = `<html><link rel="stylesheet" href="http://static.b.net/s.css"><img src="http://img.c.org/a.gif?v=1"></html>`

func testWARC(t *testing.T, dir string, gz bool) string {
	t.Helper()
	var gzBody bytes.Buffer
	zw := gzip.NewWriter(&gzBody)
	zw.Write([]byte("body{color:red}")) //nolint:errcheck // bytes.Buffer
	zw.Close()
	chunked := "HTTP/1.1 200 OK\r\nContent-Type: text/css\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n" +
		fmt.Sprintf("%x\r\n", gzBody.Len()) + gzBody.String() + "\r\n0\r\n\r\n"
	page := testPage
	recs := [][]byte{
		warcRecord(1, "warcinfo", "", "application/warc-fields", []byte("software: pep test\r\nformat: WARC File Format 1.1\r\n")),
		warcRecord(2, "request", "http://www.a.com/", "application/http; msgtype=request", []byte("GET / HTTP/1.1\r\nHost: www.a.com\r\n\r\n")),
		warcRecord(3, "response", "http://www.a.com/", httpResp, []byte(
			"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nDate: Mon, 11 Apr 2011 10:00:00 GMT\r\nContent-Length: "+fmt.Sprint(len(page))+"\r\n\r\n"+page)),
		warcRecord(4, "response", "<http://static.b.net/s.css>", httpResp, []byte(chunked)),
		warcRecord(5, "metadata", "http://static.b.net/s.css", "application/warc-fields", []byte("via: http://www.a.com/\r\n")),
		warcRecord(6, "response", "http://img.c.org/a.gif?v=1", httpResp, []byte("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nGIF89a")),
		warcRecord(7, "revisit", "http://img.c.org/a.gif?v=1", httpResp, []byte("HTTP/1.1 200 OK\r\n\r\n")),
		warcRecord(8, "response", "http://www.a.com/gone", httpResp, []byte("HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\ngone")),
		warcRecord(9, "resource", "http://img.c.org/logo.png", "image/png", []byte("\x89PNG\r\n\x1a\n")),
		warcRecord(10, "response", "dns:www.a.com", "text/dns", []byte("20110411100000\r\nwww.a.com. 300 IN A 192.0.2.1\r\n")),
	}
	var out []byte
	name := "a.warc"
	for _, r := range recs {
		if gz {
			r = gzipMember(t, r)
		}
		out = append(out, r...)
	}
	if gz {
		name += ".gz"
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWARCRoundTrip(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			p := testWARC(t, t.TempDir(), gz)
			c, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			// The revisit (no digest) resolves to the response of its own
			// target, as pywb does; the dns: response is skipped.
			if c.Stats.Files != 6 || c.Stats.Skipped != 4 || c.Stats.SkippedBy[SkipNotHTTPTarget] != 1 || c.Stats.Repaired[string(RepairRevisit)] != 1 {
				t.Errorf("stats = %+v, want 6 files, 4 skipped, 1 revisit resolved", c.Stats)
			}
			if len(c.Pages) != 1 {
				t.Fatalf("pages = %d, want 1", len(c.Pages))
			}
			pg := c.Pages[0]
			if got := pg.Summary(); got != (Summary{Name: "www.a.com", URL: "http://www.a.com/", Objects: 6, Hosts: 3, Bytes: int64(len(testPage) + gzBodyLen(t) + 6 + 6 + 4 + 8)}) {
				t.Errorf("summary = %+v", got)
			}
			for _, tc := range []struct {
				host, target string
				status       int
				ctype, body  string
				header       map[string]string
			}{
				{"www.a.com", "/", 200, "text/html", "", map[string]string{"Date": "Mon, 11 Apr 2011 10:00:00 GMT"}},
				{"static.b.net", "/s.css", 200, "text/css", "", map[string]string{"Content-Encoding": "gzip", "Transfer-Encoding": "", "Connection": ""}},
				{"img.c.org", "/a.gif?v=1", 200, "image/gif", "GIF89a", nil},
				{"www.a.com", "/gone", 404, "text/plain", "gone", nil},
				{"img.c.org", "/logo.png", 0, "image/png", "\x89PNG\r\n\x1a\n", nil},
			} {
				o, ok := c.Lookup(tc.host, tc.target)
				if !ok {
					t.Errorf("%s%s missing", tc.host, tc.target)
					continue
				}
				if o.Status != tc.status || o.ContentType != tc.ctype || (tc.body != "" && string(o.Body) != tc.body) {
					t.Errorf("%s%s = %d %q %q, want %d %q %q", tc.host, tc.target, o.Status, o.ContentType, o.Body, tc.status, tc.ctype, tc.body)
				}
				for k, v := range tc.header {
					if got := o.Header.Get(k); got != v {
						t.Errorf("%s%s header %s = %q, want %q", tc.host, tc.target, k, got, v)
					}
				}
			}
			css, _ := c.Lookup("static.b.net", "/s.css")
			zr, err := gzip.NewReader(bytes.NewReader(css.Body))
			if err != nil {
				t.Fatal(err)
			}
			if plain, _ := io.ReadAll(zr); string(plain) != "body{color:red}" {
				t.Errorf("de-chunked gzip body = %q", plain)
			}
		})
	}
}

func gzBodyLen(t *testing.T) int {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte("body{color:red}")) //nolint:errcheck // bytes.Buffer
	zw.Close()
	return b.Len()
}

func TestWARCPagesOption(t *testing.T) {
	dir := t.TempDir()
	p := testWARC(t, dir, true)
	c, err := LoadWARC("x", []string{p}, WARCOptions{Pages: []string{"http://img.c.org/logo.png", "http://www.a.com/"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pages) != 2 || c.Pages[0].Name != "img.c.org" || c.Pages[1].Name != "www.a.com" {
		t.Fatalf("pages = %+v", c.Pages)
	}
	if n0, n1 := len(c.Pages[0].Objects), len(c.Pages[1].Objects); n0 != 1 || n1 != 5 {
		t.Errorf("objects per page = %d, %d, want 1, 5", n0, n1)
	}
	_, err = LoadWARC("x", []string{p}, WARCOptions{Pages: []string{"http://nosuch.example/"}})
	if err == nil || err.Error() != `corpus: x: page "http://nosuch.example/" has no response record` {
		t.Errorf("err = %v", err)
	}
	// A directory of WARC files opens as one corpus.
	testWARC(t, dir, false)
	c, err = Open(dir)
	if err != nil || len(c.Pages) != 2 {
		t.Fatalf("directory: %v, %d pages, want 2", err, len(c.Pages))
	}
}

// TestWARCIOFixture reads testdata/warcio.warc.gz, written by Python's
// warcio 1.8.1 (an independent implementation), one gzip member per record.
func TestWARCIOFixture(t *testing.T) {
	c, err := Open("testdata/warcio.warc.gz")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pages) != 1 || c.Pages[0].URL != "http://www.example.com/" {
		t.Fatalf("pages = %+v", c.Pages)
	}
	if got := c.Pages[0].Summary(); got.Objects != 5 || got.Hosts != 3 {
		t.Errorf("summary = %+v, want 5 objects on 3 hosts", got)
	}
	o, ok := c.Lookup("www.example.com", "/old")
	if !ok || o.Status != http.StatusMovedPermanently || o.Header.Get("Location") != "http://www.example.com/" {
		t.Errorf("redirect = %+v", o)
	}
	o, ok = c.Lookup("img.example.org", "/a.gif?v=1")
	if !ok || string(o.Body) != "GIF89a\x01\x00\x01\x00" || o.ContentType != "image/gif" {
		t.Errorf("gif = %+v", o)
	}
}

func TestWARCReaderStrict(t *testing.T) {
	good := string(warcRecord(1, "resource", "http://a/", "text/plain", []byte("hi")))
	for _, tc := range []struct{ name, in, err string }{
		{"bad version", strings.Replace(good, "WARC/1.1", "WARC/2.0", 1),
			`corpus: warc: record 1 at offset 0: version line "WARC/2.0" is not WARC/1.0, WARC/1.1 or WARC/0.18`},
		{"LF line ends", strings.ReplaceAll(good, "\r\n", "\n"),
			`corpus: warc: record 1 at offset 0: version line: line "WARC/1.1" does not end in CRLF`},
		{"no Content-Length", strings.Replace(good, "Content-Length: 2\r\n", "", 1),
			`corpus: warc: record 1 at offset 0: mandatory field Content-Length is missing`},
		{"no WARC-Date", strings.Replace(good, "WARC-Date: 2011-04-11T10:00:00Z\r\n", "", 1),
			`corpus: warc: record 1 at offset 0: mandatory field WARC-Date is missing`},
		{"bad Content-Length", strings.Replace(good, "Content-Length: 2", "Content-Length: -2", 1),
			`corpus: warc: record 1 at offset 0: Content-Length "-2" is not a decimal byte count`},
		{"bad field", strings.Replace(good, "Content-Type: text/plain", "Content Type text/plain", 1),
			`corpus: warc: record 1 at offset 0: header line "Content Type text/plain" is not "Name: value"`},
		{"short block", good[:len(good)-5],
			`corpus: warc: record 1 at offset 0: block of 2 bytes: unexpected EOF`},
		{"no trailing CRLFs", strings.TrimSuffix(good, "\r\n\r\n") + "XXXX",
			`corpus: warc: record 1 at offset 0: block is not followed by CRLF CRLF`},
		{"second record bad", good + "WARC/1.1\r\n",
			fmt.Sprintf(`corpus: warc: record 2 at offset %d: header: unexpected EOF`, len(good))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewWARCReader(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			for {
				_, err = r.Next()
				if err != nil {
					break
				}
			}
			if err == nil || err.Error() != tc.err {
				t.Errorf("err = %v\nwant %s", err, tc.err)
			}
		})
	}
	r, _ := NewWARCReader(strings.NewReader(good + good))
	for i := 0; i < 2; i++ {
		rec, err := r.Next()
		if err != nil || string(rec.Block) != "hi" || rec.Header.Get("warc-target-uri") != "http://a/" || rec.Offset != int64(i*len(good)) {
			t.Fatalf("record %d = %+v, %v", i, rec, err)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last record: %v, want EOF", err)
	}
}

func FuzzWARCReader(f *testing.F) {
	f.Add(warcRecord(1, "response", "http://a/x?y", httpResp, []byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx")))
	f.Add(warcRecord(2, "resource", "http://a/", "text/plain", []byte("hi")))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := NewWARCReader(bytes.NewReader(in))
		if err != nil {
			return
		}
		for i := 0; i < 100; i++ {
			rec, err := r.Next()
			if err != nil {
				return
			}
			if int64(len(rec.Block)) > int64(len(in)) {
				t.Fatalf("block of %d bytes from %d bytes of input", len(rec.Block), len(in))
			}
			warcObject(rec) //nolint:errcheck // must not panic
		}
	})
}
