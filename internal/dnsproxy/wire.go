package dnsproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire-format helpers (RFC 1035 §4.1). They check framing without
// allocating, so that pass-through answers are never unpacked.

const headerLen = 12

var errShort = errors.New("dnsproxy: message too short")

// questionEnd returns the offset just past the question section of the
// one-question message msg, or an error if the header or question is
// malformed. The first name of a message cannot be compressed.
func questionEnd(msg []byte) (int, error) {
	if len(msg) < headerLen {
		return 0, errShort
	}
	if qd := binary.BigEndian.Uint16(msg[4:]); qd != 1 {
		return 0, fmt.Errorf("dnsproxy: %d questions, want 1", qd)
	}
	off, err := skipName(msg, headerLen)
	if err != nil {
		return 0, err
	}
	if off+4 > len(msg) {
		return 0, errShort
	}
	return off + 4, nil
}

// skipName returns the offset after the (possibly compressed) name at off.
func skipName(msg []byte, off int) (int, error) {
	for labels := 0; ; labels++ {
		if off >= len(msg) {
			return 0, errShort
		}
		if labels > 127 {
			return 0, errors.New("dnsproxy: name too long")
		}
		c := int(msg[off])
		switch c & 0xC0 {
		case 0x00:
			if c == 0 {
				return off + 1, nil
			}
			off += 1 + c
		case 0xC0:
			if off+2 > len(msg) {
				return 0, errShort
			}
			return off + 2, nil // a pointer ends the name
		default:
			return 0, fmt.Errorf("dnsproxy: bad label type 0x%02x", c)
		}
	}
}

// checkFraming verifies that every record of every section of msg lies
// within msg: names end, fixed fields and RDATA fit. It does not look
// inside RDATA. It returns the offset just past the question section.
func checkFraming(msg []byte) (int, error) {
	qend, err := questionEnd(msg)
	if err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint16(msg[6:])) + int(binary.BigEndian.Uint16(msg[8:])) + int(binary.BigEndian.Uint16(msg[10:]))
	off := qend
	for i := 0; i < n; i++ {
		if off, err = skipName(msg, off); err != nil {
			return 0, err
		}
		if off+10 > len(msg) {
			return 0, errShort
		}
		rdlen := int(binary.BigEndian.Uint16(msg[off+8:]))
		off += 10 + rdlen
		if off > len(msg) {
			return 0, errShort
		}
	}
	if off != len(msg) {
		return 0, fmt.Errorf("dnsproxy: %d bytes after the last record", len(msg)-off)
	}
	return qend, nil
}

// sameQuestion compares two wire question sections (uncompressed name,
// type, class); letters of the name may differ in case (a resolver may
// echo the name with another case). Label lengths are below 64, so they
// are never taken for letters.
func sameQuestion(a, b []byte) bool {
	if len(a) != len(b) || len(a) < 5 {
		return false
	}
	n := len(a) - 4
	if string(a[n:]) != string(b[n:]) {
		return false
	}
	for i := range a[:n] {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
