package coding

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/andybalholm/brotli"
)

// TestDecode: each coding pepd reads, encoded by its library, decodes to
// the text; raw deflate is reported; a body over the bound, a truncated
// one and an unknown coding are errors.
func TestDecode(t *testing.T) {
	text := bytes.Repeat([]byte("body { margin: 0 }\n"), 100)
	enc := func(w func(io.Writer) io.WriteCloser) []byte {
		var b bytes.Buffer
		zw := w(&b)
		zw.Write(text)
		zw.Close()
		return b.Bytes()
	}
	gz := enc(func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) })
	for _, tc := range []struct {
		coding string
		body   []byte
		raw    bool
	}{
		{"", text, false},
		{"identity", text, false},
		{"gzip", gz, false},
		{"x-gzip", gz, false},
		{"deflate", enc(func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }), false},
		{"deflate", enc(func(w io.Writer) io.WriteCloser { z, _ := flate.NewWriter(w, 6); return z }), true},
		{"br", enc(func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) }), false},
	} {
		plain, raw, err := Decode(tc.coding, tc.body, int64(len(text)))
		if err != nil || !bytes.Equal(plain, text) || raw != tc.raw {
			t.Errorf("%q: %d bytes, raw deflate %v, %v; want the text, raw %v", tc.coding, len(plain), raw, err, tc.raw)
		}
	}
	if _, _, err := Decode("gzip", gz, int64(len(text))-1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the bound: %v, want ErrTooLarge", err)
	}
	if _, _, err := Decode("gzip", gz[:len(gz)/2], 1<<20); err == nil {
		t.Error("truncated gzip decoded")
	}
	if _, _, err := Decode("zstd", gz, 1<<20); err == nil {
		t.Error("an unknown coding decoded")
	}
}

func TestOf(t *testing.T) {
	h := http.Header{}
	if c, several := Of(h); c != "" || several {
		t.Errorf("none: %q %v", c, several)
	}
	h.Set("Content-Encoding", " GZip ")
	if c, several := Of(h); c != "gzip" || several {
		t.Errorf("one: %q %v", c, several)
	}
	h.Add("Content-Encoding", "br")
	if c, several := Of(h); c != "gzip" || !several {
		t.Errorf("two fields: %q %v, want several", c, several)
	}
}
