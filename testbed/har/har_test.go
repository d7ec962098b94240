package har

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteRead(t *testing.T) {
	h := &HAR{Log: Log{Version: Version, Creator: Creator{Name: "pep testbed", Version: "1"},
		Pages: []Page{{StartedDateTime: FormatTime(time.Unix(1, 5000)), ID: "page_1", Title: "http://a.test/", PageTimings: PageTimings{OnLoad: 850, OnContentLoad: 700, TTFB: -1, FCP: 640, LCP: 810}}},
		Entries: []Entry{{PageRef: "page_1", Start: 1.5, Time: 300, Request: Request{Method: "GET", URL: "http://a.test/"},
			Timings:   Timings{Blocked: 10, DNS: -1, Connect: -1, SSL: -1, Wait: 200, Receive: 90, Queued: 4, Stalled: 6},
			Initiator: Initiator{Type: "other", Line: -1}}}}}
	path := filepath.Join(t.TempDir(), "a.har")
	if err := h.Write(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, s := range []string{`"version":"1.2"`, `"startedDateTime":"1970-01-01T00:00:01.000005Z"`, `"_queued":4`, `"_firstContentfulPaint":640`, `"_initiator":{"type":"other","lineNumber":-1}`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("HAR lacks %s: %s", s, b)
		}
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if e := got.Log.Entries[0]; e.End() != 301.5 || e.Timings != h.Log.Entries[0].Timings {
		t.Errorf("read back %+v", e)
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.har")
	os.WriteFile(bad, []byte(`{"log": `), 0o644)
	if _, err := Read(bad); err == nil || !strings.Contains(err.Error(), "bad.har") {
		t.Errorf("truncated file: %v, want an error naming the file", err)
	}
	empty := filepath.Join(dir, "empty.har")
	os.WriteFile(empty, []byte(`{"log": {"version": "1.2", "entries": []}}`), 0o644)
	if _, err := Read(empty); err == nil || err.Error() != "har: "+empty+": log.pages is empty" {
		t.Errorf("no page: %v", err)
	}
}
