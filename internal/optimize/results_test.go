package optimize

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestResults: the finished-transform store keeps at most its byte bound,
// drops the least recently used first, keeps skips but not overload, and
// replaces an entry put twice.
func TestResults(t *testing.T) {
	c := newResults(3 * (1000 + entryOverhead))
	out := func(i int) transformResult {
		return transformResult{out: bytes.Repeat([]byte{byte(i)}, 1000), ctype: TypeWebP}
	}
	for i := range 3 {
		c.put(fmt.Sprint(i), out(i))
	}
	if _, ok := c.get("0"); !ok { // 0 is now the most recently used
		t.Fatal("0 missing before the bound was reached")
	}
	c.put("3", out(3))
	if _, ok := c.get("1"); ok {
		t.Error("1, the least recently used, was kept past the bound")
	}
	for _, k := range []string{"0", "2", "3"} {
		if r, ok := c.get(k); !ok || len(r.out) != 1000 || int(r.out[0]) != int(k[0]-'0') {
			t.Errorf("%s: %v %v", k, ok, len(r.out))
		}
	}
	if n, b := c.size(); n != 3 || b != 3*(1000+entryOverhead) {
		t.Errorf("size %d entries, %d bytes", n, b)
	}
	c.put("3", out(3))
	if n, b := c.size(); n != 3 || b != 3*(1000+entryOverhead) {
		t.Errorf("after a second put: %d entries, %d bytes", n, b)
	}
	c.put("skip", transformResult{skip: SkipNotSmaller})
	if r, ok := c.get("skip"); !ok || r.skip != SkipNotSmaller {
		t.Error("a skip was not kept")
	}
	c.put("busy", transformResult{skip: SkipOverload})
	if _, ok := c.get("busy"); ok {
		t.Error("overload was kept: it says nothing about the body")
	}
	c.put("huge", transformResult{out: make([]byte, 4000)})
	if _, ok := c.get("huge"); ok {
		t.Error("a result larger than the whole bound was kept")
	}
}

// TestKeptDir: the folder tier (real files) counts what it finds under
// the folder at start, other settings' subfolders included, and past its
// bound removes the files least recently stored or read first, another
// settings' stale file before any of its own, until at nine tenths of
// the bound; a file read counts as used.
func TestKeptDir(t *testing.T) {
	root := t.TempDir()
	stale := filepath.Join(root, "0123456789abcdef", "old")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, make([]byte, 500), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour)
	os.Chtimes(stale, t0, t0)
	out := func(i int) transformResult {
		return transformResult{out: bytes.Repeat([]byte{byte(i)}, 1000), ctype: TypeWebP}
	}
	probe, err := openKeptDir(t.TempDir(), Options{}, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	probe.store("x", out(0))
	file := probe.size() // one entry's file

	max := 500 + 3*file + file/2 // the stale file and three entries fit, a fourth does not
	d, err := openKeptDir(root, Options{}, max, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if d.size() != 500 {
		t.Fatalf("at start: %d bytes counted, want the stale file's 500", d.size())
	}
	for i := range 3 {
		d.store(fmt.Sprint(i), out(i))
		at := t0.Add(time.Duration(i+1) * time.Minute)
		os.Chtimes(d.file(fmt.Sprint(i)), at, at)
	}
	if r, ok := d.load("0"); !ok || len(r.out) != 1000 || r.out[0] != 0 || r.ctype != TypeWebP {
		t.Fatalf("load(0) = %v, %v", ok, len(r.out))
	}
	d.store("3", out(3)) // past the bound: the stale file, then 1 (0 was read), go
	if _, err := os.Stat(stale); err == nil {
		t.Error("the other settings' stale file was kept")
	}
	for k, kept := range map[string]bool{"0": true, "1": false, "2": true, "3": true} {
		if _, ok := d.load(k); ok != kept {
			t.Errorf("entry %s kept %v, want %v", k, ok, kept)
		}
	}
	if d.size() > max/10*9 || d.size() != 3*file {
		t.Errorf("after eviction %d bytes counted, want %d (at most %d)", d.size(), 3*file, max/10*9)
	}
	again, err := openKeptDir(root, Options{}, max, slog.New(slog.DiscardHandler))
	if err != nil || again.size() != 3*file {
		t.Errorf("reopened: %d bytes counted (%v), want %d", again.size(), err, 3*file)
	}
}
