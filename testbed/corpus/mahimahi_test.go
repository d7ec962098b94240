package corpus

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// mmEncode writes a MahimahiProtobufs.RequestResponse as mm-webrecord
// does (protobufs/http_record.proto), field by field.
func mmEncode(scheme uint64, reqLine string, reqHdr [][2]string, respLine string, respHdr [][2]string, body string) []byte {
	msg := func(first string, hdr [][2]string, body string) []byte {
		var m []byte
		m = protowire.AppendTag(m, 1, protowire.BytesType)
		m = protowire.AppendString(m, first)
		for _, kv := range hdr {
			var h []byte
			h = protowire.AppendTag(h, 1, protowire.BytesType)
			h = protowire.AppendString(h, kv[0])
			h = protowire.AppendTag(h, 2, protowire.BytesType)
			h = protowire.AppendString(h, kv[1])
			m = protowire.AppendTag(m, 2, protowire.BytesType)
			m = protowire.AppendBytes(m, h)
		}
		if body != "" {
			m = protowire.AppendTag(m, 3, protowire.BytesType)
			m = protowire.AppendString(m, body)
		}
		return m
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "192.0.2.80")
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 80)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, scheme)
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendBytes(b, msg(reqLine, reqHdr, ""))
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendBytes(b, msg(respLine, respHdr, body))
	return b
}

// TestMahimahi: a folder of two recorded pages in Mahimahi's format: the
// navigation (no Referer) is the page, a chunked body is de-chunked as
// mm-webreplay would send it, https is kept, a stray file is counted.
func TestMahimahi(t *testing.T) {
	root := t.TempDir()
	write := func(folder, name string, b []byte) {
		os.MkdirAll(filepath.Join(root, folder), 0o755)
		if err := os.WriteFile(filepath.Join(root, folder, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("site1", "save.1", mmEncode(1, "GET /img/a.png HTTP/1.1", [][2]string{{"Host", "img.s1.com"}, {"Referer", "http://www.s1.com/"}},
		"HTTP/1.1 200 OK", [][2]string{{"Content-Type", "image/png"}, {"Transfer-Encoding", "chunked"}}, "4\r\nPNG!\r\n0\r\n\r\n"))
	write("site1", "save.2", mmEncode(1, "GET / HTTP/1.1", [][2]string{{"Host", "www.s1.com"}},
		"HTTP/1.1 200 OK", [][2]string{{"Content-Type", "text/html"}, {"Content-Length", "6"}}, "<html>"))
	write("site1", "junk", []byte("not a protobuf \xff\xff"))
	write("site2", "save.1", mmEncode(2, "GET /x?y=1 HTTP/1.1", [][2]string{{"Host", "www.s2.org"}},
		"HTTP/1.1 200 OK", [][2]string{{"Content-Type", "text/html; charset=utf-8"}}, "<p>s2"))
	c, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pages) != 2 || c.Pages[0].URL != "http://www.s1.com/" || c.Pages[1].URL != "https://www.s2.org/x?y=1" {
		t.Fatalf("pages = %v", c.Pages)
	}
	o, ok := c.Lookup("img.s1.com", "/img/a.png")
	if !ok || string(o.Body) != "PNG!" || o.ContentType != "image/png" || o.Header.Get("Transfer-Encoding") != "" {
		t.Errorf("chunked object = %+v", o)
	}
	if h, hs := c.Pages[1].Schemes(); h != 0 || hs != 1 {
		t.Errorf("site2 schemes = %d http, %d https", h, hs)
	}
	if c.Stats.SkippedBy["not_mahimahi_record"] != 1 || c.Stats.ResponsesUsed != 3 {
		t.Errorf("stats = %+v", c.Stats)
	}
	// One recording folder opens on its own too.
	c, err = Open(filepath.Join(root, "site1"))
	if err != nil || len(c.Pages) != 1 {
		t.Fatalf("one folder: %v, %v", err, c)
	}
}
