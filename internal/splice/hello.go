package splice

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Errors of ReadClientHello; errors.Is tells them apart for the resets
// metric.
var (
	// ErrNoSNI: a well-formed ClientHello without a server_name extension
	// (or without a host_name entry in it).
	ErrNoSNI = errors.New("splice: ClientHello has no SNI")
	// ErrBadHello: the bytes are not a TLS ClientHello, or it is malformed
	// or too large.
	ErrBadHello = errors.New("splice: not a well-formed ClientHello")
	// ErrBadSNI: the SNI is not a DNS host name (RFC 6066 §3: ASCII, no
	// trailing dot, no address literal).
	ErrBadSNI = errors.New("splice: SNI is not a host name")
)

const (
	recordHeaderLen = 5
	recordHandshake = 22
	maxRecordLen    = 1<<14 + 256 // TLSPlaintext.length ≤ 2^14 (RFC 8446 §5.1), some slack
	// MaxHelloLen bounds the ClientHello (handshake message body) read;
	// post-quantum key shares make it a few KiB, never this much.
	MaxHelloLen = 1 << 16
)

// ReadClientHello reads from r exactly the TLS records that carry the
// first handshake message, which must be a ClientHello (RFC 8446 §4.1.2,
// RFC 5246 §7.4.1.2; it may span several records), and returns every byte
// read (to be replayed to the origin) and the lower-cased server name of
// its server_name extension (RFC 6066 §3). Nothing after the ClientHello's
// last record is read. Errors wrap ErrBadHello, ErrNoSNI or ErrBadSNI, or
// are r's read error.
func ReadClientHello(r io.Reader) (raw []byte, sni string, err error) {
	var hs []byte
	for {
		var h [recordHeaderLen]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return raw, "", err
		}
		raw = append(raw, h[:]...)
		n := int(binary.BigEndian.Uint16(h[3:]))
		if h[0] != recordHandshake || h[1] != 3 || n == 0 || n > maxRecordLen {
			return raw, "", fmt.Errorf("%w: record type %d, version %d.%d, length %d", ErrBadHello, h[0], h[1], h[2], n)
		}
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw[:start], "", err
		}
		hs = append(hs, raw[start:]...)
		if len(hs) < 4 {
			continue
		}
		if hs[0] != 1 {
			return raw, "", fmt.Errorf("%w: handshake type %d", ErrBadHello, hs[0])
		}
		l := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if l > MaxHelloLen {
			return raw, "", fmt.Errorf("%w: %d bytes", ErrBadHello, l)
		}
		if len(hs) < 4+l {
			continue
		}
		if len(hs) > 4+l {
			// Another handshake message follows the ClientHello in the
			// same record: no client does this before the ServerHello.
			return raw, "", fmt.Errorf("%w: %d bytes after the ClientHello", ErrBadHello, len(hs)-4-l)
		}
		sni, err := ParseClientHello(hs[4:])
		return raw, sni, err
	}
}

// reader is a bounds-checked cursor over a byte slice.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n > len(r.b) {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() int {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (r *reader) u16() int {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}

// vec reads a vector with an n-byte (1 or 2) length prefix.
func (r *reader) vec(n int) *reader {
	var l int
	if n == 1 {
		l = r.u8()
	} else {
		l = r.u16()
	}
	b := r.bytes(l)
	return &reader{b: b, bad: r.bad}
}

// ParseClientHello returns the server name in the body of a ClientHello
// handshake message (after its 4-byte header). Errors wrap ErrBadHello,
// ErrNoSNI or ErrBadSNI.
func ParseClientHello(body []byte) (string, error) {
	r := &reader{b: body}
	if v := r.u16(); v < 0x0301 && !r.bad { // legacy_version: TLS 1.0 or later
		return "", fmt.Errorf("%w: version %#04x", ErrBadHello, v)
	}
	r.bytes(32)     // random
	sid := r.vec(1) // legacy_session_id
	if len(sid.b) > 32 {
		return "", fmt.Errorf("%w: session id of %d bytes", ErrBadHello, len(sid.b))
	}
	cs := r.vec(2) // cipher_suites
	if len(cs.b) == 0 || len(cs.b)%2 != 0 {
		r.bad = true
	}
	if cm := r.vec(1); len(cm.b) == 0 { // legacy_compression_methods
		r.bad = true
	}
	if r.bad {
		return "", fmt.Errorf("%w: truncated", ErrBadHello)
	}
	if len(r.b) == 0 {
		return "", ErrNoSNI // no extensions at all (TLS 1.0 style)
	}
	exts := r.vec(2)
	if r.bad || len(r.b) != 0 {
		return "", fmt.Errorf("%w: extensions do not end the message", ErrBadHello)
	}
	sni, found := "", false
	seen := map[int]bool{}
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.vec(2)
		if exts.bad || data.bad {
			return "", fmt.Errorf("%w: truncated extension", ErrBadHello)
		}
		if seen[typ] {
			return "", fmt.Errorf("%w: extension %d twice", ErrBadHello, typ)
		}
		seen[typ] = true
		if typ != 0 { // server_name
			continue
		}
		list := data.vec(2)
		if data.bad || len(data.b) != 0 || len(list.b) == 0 {
			return "", fmt.Errorf("%w: bad server_name extension", ErrBadHello)
		}
		for len(list.b) > 0 {
			nameType := list.u8()
			name := list.vec(2)
			if list.bad || name.bad {
				return "", fmt.Errorf("%w: bad server_name list", ErrBadHello)
			}
			if nameType == 0 && !found { // host_name
				sni, found = string(name.b), true
			}
		}
	}
	if !found {
		return "", ErrNoSNI
	}
	if !hostName(sni) {
		return "", fmt.Errorf("%w: %q", ErrBadSNI, sni)
	}
	return strings.ToLower(sni), nil
}

// hostName reports whether s is a DNS host name with at least two labels
// (letters, digits, hyphen and underscore; 1-63 bytes a label; at most 253
// bytes; no trailing dot). An IPv4 literal has an all-digit last label and
// is refused, as RFC 6066 §3 forbids address literals.
func hostName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return strings.Trim(last, "0123456789") != ""
}
