package corpus

import (
	"archive/zip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// quirkWARC writes records (rendered by warcRecord) to a .warc file.
func quirkWARC(t *testing.T, dir, name string, recs ...[]byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.Join(func() []string {
		var s []string
		for _, r := range recs {
			s = append(s, string(r))
		}
		return s
	}(), "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func pageRec(n int) []byte {
	return warcRecord(n, "response", "http://www.q.com/", httpResp, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 6\r\n\r\n<html>"))
}

// TestWARCSkipReasons: every skip reason has a case; a skipped record
// never ends the import, and the page record beside it is still used.
func TestWARCSkipReasons(t *testing.T) {
	for _, tc := range []struct {
		reason string
		recs   [][]byte
	}{
		{SkipWarcinfo, [][]byte{warcRecord(2, "warcinfo", "", "application/warc-fields", []byte("software: x\r\n"))}},
		{SkipRequest, [][]byte{warcRecord(2, "request", "http://www.q.com/", "application/http; msgtype=request", []byte("GET / HTTP/1.1\r\n\r\n"))}},
		{SkipMetadata, [][]byte{warcRecord(2, "metadata", "http://www.q.com/", "application/warc-fields", []byte("via: x\r\n"))}},
		{SkipOtherType, [][]byte{warcRecord(2, "conversion", "http://www.q.com/x", "text/plain", []byte("x"))}},
		{SkipNotHTTPTarget, [][]byte{warcRecord(2, "response", "dns:www.q.com", "text/dns", []byte("x"))}},
		{SkipNotHTTPBlock, [][]byte{warcRecord(2, "response", "http://www.q.com/x", "text/plain", []byte("x"))}},
		{SkipBadHTTPHead, [][]byte{warcRecord(2, "response", "http://www.q.com/x", httpResp, []byte("garbage without a head"))}},
		{SkipBadHTTPHead, [][]byte{warcRecord(2, "response", "http://www.q.com/x", httpResp, []byte("HTTP/1.1 abc OK\r\n\r\n"))}},
		{SkipInformational, [][]byte{warcRecord(2, "response", "http://www.q.com/x", httpResp, []byte("HTTP/1.1 100 Continue\r\n\r\n"))}},
		{SkipNotModified, [][]byte{warcRecord(2, "response", "http://www.q.com/x", httpResp, []byte("HTTP/1.1 304 Not Modified\r\nETag: \"a\"\r\n\r\n"))}},
		{SkipRevisitUnresolved, [][]byte{warcRecord(2, "revisit", "http://www.q.com/nowhere", httpResp, []byte("HTTP/1.1 200 OK\r\n\r\n"))}},
		{SkipFraming, [][]byte{[]byte("WARC/1.1\r\nWARC-Type: response\r\n\r\n")}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			p := quirkWARC(t, t.TempDir(), "q.warc", append([][]byte{pageRec(1)}, tc.recs...)...)
			c, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			if c.Stats.SkippedBy[tc.reason] != 1 || c.Stats.Skipped != 1 || len(c.Pages) != 1 || len(c.Pages[0].Objects) != 1 {
				t.Errorf("stats %+v, %d pages; want one skip for %s and the page kept", c.Stats, len(c.Pages), tc.reason)
			}
		})
	}
	t.Run(SkipEmptyFile, func(t *testing.T) {
		dir := t.TempDir()
		quirkWARC(t, dir, "a.warc", pageRec(1))
		quirkWARC(t, dir, "b.warc")
		c, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if c.Stats.SkippedBy[SkipEmptyFile] != 1 {
			t.Errorf("stats %+v, want one empty file", c.Stats)
		}
	})
	t.Run("nothing usable", func(t *testing.T) {
		p := quirkWARC(t, t.TempDir(), "n.warc", warcRecord(1, "request", "http://www.q.com/", "application/http; msgtype=request", []byte("GET / HTTP/1.1\r\n\r\n")))
		_, err := Open(p)
		if err == nil || !strings.Contains(err.Error(), "no usable response or resource record (request 1)") {
			t.Errorf("err = %v", err)
		}
	})
}

// TestWARCRepairs: payload quirks of real archives, each with the body the
// import must store and the repair it counts.
func TestWARCRepairs(t *testing.T) {
	for _, tc := range []struct {
		name, block, body string
		repair            Repair
		header            map[string]string
	}{
		{"chunked CRLF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: x\r\n\r\n", "abcde", "", nil},
		{"chunked bare LF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n", "abc", "", nil},
		{"chunked header, payload already de-chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n<html>hi</html>", "<html>hi</html>", RepairChunkedRaw, nil},
		{"chunked, bad size after good chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\nzz\r\n", "3\r\nabc\r\nzz\r\n", RepairChunkedRaw, nil},
		{"chunked, cut in a chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n10\r\nde", "abcde", RepairChunkedTruncated, nil},
		{"Content-Length -1", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nabc", "abc", RepairBadContentLength, nil},
		{"body shorter than Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "abc", RepairShortBody, nil},
		{"bytes after Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabc", "ab", RepairTrailingBytes, nil},
		{"bad header line", "HTTP/1.1 200 OK\r\nno colon here\r\nX-A: 1\r\n\r\nabc", "abc", RepairBadHeaderLine, map[string]string{"X-A": "1"}},
		{"bare LF head, obs-fold", "HTTP/1.1 200 OK\nX-A: 1\n 2\nContent-Type: text/plain\n\nabc", "abc", RepairBareLF, map[string]string{"X-A": "1 2", "Content-Type": "text/plain"}},
		{"no reason phrase", "HTTP/1.1 200\r\n\r\nabc", "abc", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := quirkWARC(t, t.TempDir(), "r.warc", pageRec(1), warcRecord(2, "response", "http://www.q.com/x", httpResp, []byte(tc.block)))
			c, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			o, ok := c.Lookup("www.q.com", "/x")
			if !ok {
				t.Fatalf("object missing; stats %+v", c.Stats)
			}
			if string(o.Body) != tc.body {
				t.Errorf("body = %q, want %q", o.Body, tc.body)
			}
			if o.Header.Get("Transfer-Encoding") != "" || o.Header.Get("Content-Length") != "" {
				t.Errorf("framing headers kept: %v", o.Header)
			}
			for k, v := range tc.header {
				if o.Header.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, o.Header.Get(k), v)
				}
			}
			var want map[string]int
			if tc.repair != "" {
				want = map[string]int{string(tc.repair): 1}
			}
			if fmt.Sprint(c.Stats.Repaired) != fmt.Sprint(want) && !(len(want) == 0 && len(c.Stats.Repaired) == 0) {
				t.Errorf("repaired = %v, want %v", c.Stats.Repaired, want)
			}
		})
	}
}

// TestWARCRevisitByDigest: a revisit (identical-payload-digest, ISO 28500
// §6.7.2) takes the payload of the response with the same digest, in
// another file, and its own status and headers.
func TestWARCRevisitByDigest(t *testing.T) {
	dir := t.TempDir()
	orig := strings.Replace(string(warcRecord(2, "response", "http://img.q.com/a.png", httpResp, []byte("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 4\r\n\r\nPNG!"))),
		"Content-Type: "+httpResp, "Content-Type: "+httpResp+"\r\nWARC-Payload-Digest: sha1:AAAA", 1)
	rev := strings.Replace(string(warcRecord(3, "revisit", "http://img.q.com/b.png", httpResp, []byte("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nX-Rev: 1\r\n\r\n"))),
		"Content-Type: "+httpResp, "Content-Type: "+httpResp+"\r\nWARC-Payload-Digest: sha1:AAAA\r\nWARC-Profile: http://netpreserve.org/warc/1.1/revisit/identical-payload-digest", 1)
	quirkWARC(t, dir, "1.warc", pageRec(1), []byte(rev))
	quirkWARC(t, dir, "2.warc", []byte(orig))
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := c.Lookup("img.q.com", "/b.png")
	if !ok || string(o.Body) != "PNG!" || o.Header.Get("X-Rev") != "1" {
		t.Fatalf("revisit object = %+v, %v", o, ok)
	}
}

// TestWARCPagesJSONL: a pages.jsonl beside the WARC files (the WACZ/pywb
// page list) names the pages and their order.
func TestWARCPagesJSONL(t *testing.T) {
	dir := t.TempDir()
	quirkWARC(t, dir, "a.warc", pageRec(1), warcRecord(2, "response", "http://www.r.com/", httpResp, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html>r")))
	os.WriteFile(filepath.Join(dir, "pages.jsonl"), []byte(`{"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
{"id": "2", "url": "http://www.r.com/", "title": "R"}
{"id": "1", "url": "http://www.q.com/", "title": "Q"}
`), 0o644)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pages) != 2 || c.Pages[0].URL != "http://www.r.com/" || c.Pages[1].URL != "http://www.q.com/" {
		t.Fatalf("pages = %v", c.Pages)
	}
	os.WriteFile(filepath.Join(dir, "pages.jsonl"), []byte("{\"url\": \n"), 0o644)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "pages.jsonl:1:") {
		t.Errorf("bad pages.jsonl: %v", err)
	}
}

// TestWACZ: a WACZ package's WARC files and its pages/pages.jsonl.
func TestWACZ(t *testing.T) {
	dir := t.TempDir()
	w := testWARC(t, dir, true)
	warc, err := os.ReadFile(w)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "x.wacz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, body := range map[string]string{
		"archive/data.warc.gz": string(warc),
		"pages/pages.jsonl":    "{\"format\": \"json-pages-1.0\"}\n{\"url\": \"http://img.c.org/logo.png\"}\n{\"url\": \"http://www.a.com/\"}\n",
		"datapackage.json":     "{}",
	} {
		fw, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte(body))
	}
	zw.Close()
	f.Close()
	c, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pages) != 2 || c.Pages[0].URL != "http://img.c.org/logo.png" || c.Pages[1].URL != "http://www.a.com/" {
		t.Fatalf("pages = %v", c.Pages)
	}
}

// TestImportReport: the summary `testbed import` prints and every run
// logs, on the servo recordings kept in testdata.
func TestImportReport(t *testing.T) {
	c, err := Open("testdata/servo-warc-tests")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(c.ImportReport(), "\n")
	for _, want := range []string{
		"source testdata/servo-warc-tests: 6 pages, 189 objects",
		"WARC records read 378; response and revisit records 189, used 189 (100.0 %)",
		"records skipped by reason: request 189",
		"payloads repaired: chunked_payload_taken_raw 34",
		"objects without a response (request records never answered): 0",
		// Records before qq's page stay with qq, not with the file before.
		"page www.wikipedia.org: 6 objects (http 0, https 6), 1 hosts",
		"page www.qq.com: 52 objects (http 19, https 33), 16 hosts",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("import report lacks %q:\n%s", want, got)
		}
	}
}
