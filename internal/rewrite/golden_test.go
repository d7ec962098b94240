package rewrite

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.* from the current output")

// TestGoldenPage rewrites testdata/page.html, a page with the seed paper's
// Fig. 2 images and every rewritten and never-rewritten form, and compares
// with testdata/page.golden.html (reviewed by hand; -update rewrites it).
func TestGoldenPage(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "page.html"))
	if err != nil {
		t.Fatal(err)
	}
	r := newTestRewriter(t, Config{})
	var out bytes.Buffer
	st, err := r.HTML(&out, bytes.NewReader(in), mustURL(t, "http://www.foo.com/news/index.html"))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "page.golden.html")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("output differs from %s %s", golden, firstDiff(out.Bytes(), want))
	}
	if st.URLs != 25 || st.Skipped != 0 {
		t.Errorf("stats %+v, want 25 URLs and none skipped", st)
	}
}
