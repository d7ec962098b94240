package splice

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// clientHello returns the first flight of a crypto/tls client for
// serverName ("" sends no SNI).
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Handshake() // fails when b closes
		a.Close()
	}()
	b.SetDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	h := make([]byte, 5)
	if _, err := io.ReadFull(b, h); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(h[3])<<8|int(h[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	out = append(append(out, h...), body...)
	return out
}

// split re-frames a one-record ClientHello into records of at most n
// bytes of payload.
func split(rec []byte, n int) []byte {
	body := rec[5:]
	var out []byte
	for len(body) > 0 {
		k := min(n, len(body))
		out = append(out, 22, 3, 1, byte(k>>8), byte(k))
		out = append(out, body[:k]...)
		body = body[k:]
	}
	return out
}

// withSNI returns a minimal hand-made ClientHello record whose server_name
// extension holds name.
func withSNI(name string) []byte {
	ext := []byte{0, 0} // server_name
	list := append([]byte{0, byte(len(name) >> 8), byte(len(name))}, name...)
	data := append([]byte{byte(len(list) >> 8), byte(len(list))}, list...)
	ext = append(ext, byte(len(data)>>8), byte(len(data)))
	ext = append(ext, data...)
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...)
	body = append(body, 0)                // session id
	body = append(body, 0, 2, 0x13, 0x01) // one cipher suite
	body = append(body, 1, 0)             // null compression
	body = append(body, byte(len(ext)>>8), byte(len(ext)))
	body = append(body, ext...)
	hs := append([]byte{1, 0, byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{22, 3, 1, byte(len(hs) >> 8), byte(len(hs))}, hs...)
}

func TestReadClientHello(t *testing.T) {
	real := clientHello(t, "www.foo.com")
	cases := []struct {
		name   string
		in     []byte
		sni    string
		err    error
		rawLen int // bytes consumed; -1: all of in
	}{
		{"crypto/tls hello", real, "www.foo.com", nil, -1},
		{"upper case SNI", clientHello(t, "WWW.Foo.COM"), "www.foo.com", nil, -1},
		{"hello in 100-byte records", split(real, 100), "www.foo.com", nil, -1},
		{"hello in 1-byte records", split(real, 1), "www.foo.com", nil, -1},
		{"bytes after the hello are not read", append(append([]byte{}, real...), 23, 3, 3, 0, 1, 0), "www.foo.com", nil, len(real)},
		{"no SNI", clientHello(t, ""), "", ErrNoSNI, -1},
		{"hand-made hello", withSNI("a.b"), "a.b", nil, -1},
		{"IPv4 literal SNI", withSNI("198.19.0.10"), "", ErrBadSNI, -1},
		{"one-label SNI", withSNI("localhost"), "", ErrBadSNI, -1},
		{"SNI with trailing dot", withSNI("www.foo.com."), "", ErrBadSNI, -1},
		{"SNI with a NUL", withSNI("www.foo.com\x00.evil.net"), "", ErrBadSNI, -1},
		{"plain HTTP", []byte("GET / HTTP/1.1\r\nHost: www.foo.com\r\n\r\n"), "", ErrBadHello, 5},
		{"SSLv2-style first byte", []byte{0x80, 0x2e, 0x01, 0x03, 0x01}, "", ErrBadHello, 5},
		{"alert record", []byte{21, 3, 3, 0, 2, 2, 40}, "", ErrBadHello, 5},
		{"ServerHello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, "", ErrBadHello, -1},
		{"truncated", real[:len(real)-10], "", io.ErrUnexpectedEOF, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, sni, err := ReadClientHello(bytes.NewReader(tc.in))
			if !errors.Is(err, tc.err) || sni != tc.sni {
				t.Fatalf("got sni %q err %v, want sni %q err %v", sni, err, tc.sni, tc.err)
			}
			want := tc.rawLen
			if want < 0 {
				want = len(tc.in)
			}
			if len(raw) != want || !bytes.Equal(raw, tc.in[:len(raw)]) {
				t.Errorf("raw is %d bytes (prefix of input: %v), want the first %d", len(raw), bytes.Equal(raw, tc.in[:min(len(raw), len(tc.in))]), want)
			}
		})
	}
}

// FuzzReadClientHello: never panics; what it returns read is a prefix of
// the input; an SNI it returns is a host name.
func FuzzReadClientHello(f *testing.F) {
	f.Add(clientHello(f, "www.foo.com"))
	f.Add(split(clientHello(f, "x.example.net"), 7))
	f.Add(clientHello(f, ""))
	f.Add(withSNI("198.19.0.10"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		raw, sni, err := ReadClientHello(bytes.NewReader(in))
		if len(raw) > len(in) || !bytes.Equal(raw, in[:len(raw)]) {
			t.Fatalf("raw is not a prefix of the input")
		}
		if err == nil && !hostName(sni) {
			t.Fatalf("SNI %q is not a host name", sni)
		}
		if err != nil && sni != "" {
			t.Fatalf("SNI %q with error %v", sni, err)
		}
	})
}
