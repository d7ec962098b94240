package corpus

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// Repair names a fix the WARC import made to a recorded HTTP response so
// that it could be replayed; repairs are counted in ImportStats.Repaired.
// The import is as lenient as the reference readers (warcio's
// ArchiveIterator and ChunkedDataReader, pywb's replay) on payloads, and
// strict on the WARC framing (ISO 28500:2017 §4-5, WARCReader).
type Repair string

const (
	// RepairChunkedRaw: the response says Transfer-Encoding: chunked but its
	// payload is not validly chunked (recorders often store the payload
	// already de-chunked); the payload is taken as it is, as warcio does.
	RepairChunkedRaw Repair = "chunked_payload_taken_raw"
	// RepairChunkedTruncated: the payload is validly chunked up to where the
	// record ends, without a last chunk; the chunks read are the body.
	RepairChunkedTruncated Repair = "chunked_payload_truncated"
	// RepairBadContentLength: Content-Length is not a decimal byte count
	// (e.g. "-1"); it is dropped and the payload is the body.
	RepairBadContentLength Repair = "bad_content_length_dropped"
	// RepairShortBody: the payload is shorter than Content-Length (a cut
	// recording); the bytes recorded are the body.
	RepairShortBody Repair = "body_shorter_than_content_length"
	// RepairTrailingBytes: the payload is longer than Content-Length; the
	// first Content-Length bytes are the body.
	RepairTrailingBytes Repair = "bytes_after_content_length_dropped"
	// RepairBadHeaderLine: a header line that is not "Name: value" was
	// dropped (warcio's StatusAndHeadersParser keeps going as well).
	RepairBadHeaderLine Repair = "bad_header_line_dropped"
	// RepairBareLF: the head's lines end in LF alone.
	RepairBareLF Repair = "head_bare_lf"
	// RepairRevisit: a revisit record was resolved to the payload of the
	// response it refers to (WARC-Payload-Digest or WARC-Refers-To-*).
	RepairRevisit Repair = "revisit_resolved"
)

// httpPayload is a recorded HTTP response taken apart.
type httpPayload struct {
	status  int
	header  http.Header
	body    []byte
	repairs []Repair
}

// errBadHead is the reason for a response block whose head cannot be read.
var errBadHead = errors.New("no HTTP status line and header block")

// parseHTTPResponse reads a WARC response block (application/http;
// msgtype=response, ISO 28500 §6.3.2): status line, header fields, payload.
// The head is parsed leniently (bare LF line ends, obs-fold continuation,
// lines without a colon dropped); the body is framed as the recorded
// headers say where that works and taken as recorded where it does not
// (dechunk). Content-Length and Transfer-Encoding are removed from the
// returned header: the replay origin frames the body itself. A block
// without a status line and an end of the head is errBadHead.
func parseHTTPResponse(block []byte) (*httpPayload, error) {
	end, sepLen := headEnd(block)
	if end < 0 {
		return nil, errBadHead
	}
	head, payload := block[:end], block[end+sepLen:]
	p := &httpPayload{header: http.Header{}}
	if bytes.Contains(head, []byte("\n")) && !bytes.Contains(head, []byte("\r\n")) {
		p.repairs = append(p.repairs, RepairBareLF)
	}
	lines := strings.Split(strings.ReplaceAll(string(head), "\r\n", "\n"), "\n")
	status, err := parseStatusLine(lines[0])
	if err != nil {
		return nil, err
	}
	p.status = status
	var last string
	for _, l := range lines[1:] {
		l = strings.TrimSuffix(l, "\r")
		if l == "" {
			continue
		}
		if (l[0] == ' ' || l[0] == '\t') && last != "" {
			vs := p.header[last]
			vs[len(vs)-1] += " " + strings.TrimSpace(l)
			continue
		}
		name, val, ok := strings.Cut(l, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t\r") {
			p.repairs = append(p.repairs, RepairBadHeaderLine)
			last = ""
			continue
		}
		last = textproto.CanonicalMIMEHeaderKey(name)
		p.header[last] = append(p.header[last], strings.TrimSpace(val))
	}
	te := strings.ToLower(strings.Join(p.header.Values("Transfer-Encoding"), ","))
	cls := p.header.Values("Content-Length")
	p.header.Del("Transfer-Encoding")
	p.header.Del("Content-Length")
	switch {
	case bodyless(status):
		p.body = nil
	case strings.Contains(te, "chunked"):
		body, complete, ok := dechunk(payload)
		switch {
		case ok && complete:
			p.body = body
		case ok:
			p.body = body
			p.repairs = append(p.repairs, RepairChunkedTruncated)
		default:
			p.body = payload
			p.repairs = append(p.repairs, RepairChunkedRaw)
		}
	case len(cls) > 0:
		n, err := strconv.ParseInt(strings.TrimSpace(cls[0]), 10, 64)
		switch {
		case err != nil || n < 0:
			p.body = payload
			p.repairs = append(p.repairs, RepairBadContentLength)
		case n < int64(len(payload)):
			p.body = payload[:n]
			p.repairs = append(p.repairs, RepairTrailingBytes)
		case n > int64(len(payload)):
			p.body = payload
			p.repairs = append(p.repairs, RepairShortBody)
		default:
			p.body = payload
		}
	default:
		p.body = payload
	}
	return p, nil
}

// headEnd returns the offset of the blank line ending the head and the
// length of the separator (CRLF CRLF or LF LF), or -1.
func headEnd(b []byte) (int, int) {
	crlf := bytes.Index(b, []byte("\r\n\r\n"))
	lf := bytes.Index(b, []byte("\n\n"))
	switch {
	case crlf >= 0 && (lf < 0 || crlf < lf):
		return crlf, 4
	case lf >= 0:
		return lf, 2
	}
	// A head with no body and no final blank line (some recorders).
	if len(b) > 0 && bytes.HasPrefix(b, []byte("HTTP/")) && !bytes.Contains(b, []byte{0}) {
		return len(b), 0
	}
	return -1, 0
}

// parseStatusLine reads "HTTP/1.x NNN reason" (RFC 9112 §4), leniently:
// the reason may be missing.
func parseStatusLine(l string) (int, error) {
	l = strings.TrimSuffix(l, "\r")
	proto, rest, _ := strings.Cut(l, " ")
	if !strings.HasPrefix(proto, "HTTP/") {
		return 0, fmt.Errorf("status line %q does not start with HTTP/", trimQuote(l))
	}
	code, _, _ := strings.Cut(strings.TrimLeft(rest, " "), " ")
	n, err := strconv.Atoi(code)
	if err != nil || n < 100 || n > 999 || len(code) != 3 {
		return 0, fmt.Errorf("status line %q has no 3-digit status code", trimQuote(l))
	}
	return n, nil
}

func trimQuote(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// bodyless reports whether a response with this status has no body
// (RFC 9110 §6.4.1: 1xx, 204, 304).
func bodyless(status int) bool {
	return status < 200 || status == http.StatusNoContent || status == http.StatusNotModified
}

// dechunk decodes a chunked payload (RFC 9112 §7.1) as warcio's
// ChunkedDataReader does: chunk-size lines may end in CRLF or LF and may
// carry extensions; trailers after the last chunk are ignored. ok is false
// when the payload is not chunked at all (a size line that is not hex, a
// chunk not followed by its line end): the caller takes the payload raw.
// complete is false when the payload ends before the last chunk.
func dechunk(p []byte) (body []byte, complete, ok bool) {
	var out []byte
	chunks := 0
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			// The record ends inside a size line or right after a chunk.
			return out, false, chunks > 0
		}
		line := strings.TrimSuffix(string(p[:i]), "\r")
		p = p[i+1:]
		size, _, _ := strings.Cut(line, ";")
		size = strings.TrimSpace(size)
		if size == "" || len(size) > 16 {
			return nil, false, false
		}
		n, err := strconv.ParseUint(size, 16, 63)
		if err != nil {
			return nil, false, false
		}
		if n == 0 {
			return out, true, true
		}
		if uint64(len(p)) < n {
			// Cut short inside a chunk: a truncated recording when at
			// least the size line parsed.
			if chunks == 0 {
				return nil, false, false
			}
			return append(out, p...), false, true
		}
		out = append(out, p[:n]...)
		p = p[n:]
		chunks++
		switch {
		case bytes.HasPrefix(p, []byte("\r\n")):
			p = p[2:]
		case bytes.HasPrefix(p, []byte("\n")):
			p = p[1:]
		case len(p) == 0:
			return out, false, true
		default:
			return nil, false, false
		}
	}
}
