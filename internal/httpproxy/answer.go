package httpproxy

// The answers pepd writes itself (refusals, bad requests, upstream
// failures): one body and one set of header fields, written through
// net/http (httpError) or as raw bytes by the relay (appendErrorAnswer).

import (
	"io"
	"net/http"
	"strconv"
	"time"
)

// answer counts, logs and writes an answer decision.
func (p *Proxy) answer(w http.ResponseWriter, r *http.Request, d decision) {
	p.account(r, &d)
	httpError(w, d.code, d.reason)
}

// errorFields are the header fields of every answer pepd writes itself,
// on both paths: not stored by any cache, plain text, not sniffed.
var errorFields = [...][2]string{
	{"Cache-Control", "no-store"},
	{"Content-Type", "text/plain; charset=utf-8"},
	{"X-Content-Type-Options", "nosniff"},
}

// errorBody is the body of such an answer: "502 Bad Gateway: upstream
// failed" and a newline.
func errorBody(code int, reason string) string {
	return strconv.Itoa(code) + " " + http.StatusText(code) + ": " + reason + "\n"
}

// httpError writes a short text answer (errorFields, errorBody) through
// net/http, which closes the connection after it when the request body
// was not read.
func httpError(w http.ResponseWriter, code int, reason string) {
	h := w.Header()
	for _, f := range errorFields {
		h.Set(f[0], f[1])
	}
	w.WriteHeader(code)
	io.WriteString(w, errorBody(code, reason))
}

// appendErrorAnswer appends the same answer as raw bytes, with Date and
// Content-Length, and Connection: close if closeConn (the relay's).
func appendErrorAnswer(out []byte, code int, reason string, closeConn bool) []byte {
	body := errorBody(code, reason)
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(code), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(code)...)
	out = append(out, "\r\n"...)
	for _, f := range errorFields {
		out = append(out, f[0]...)
		out = append(out, ": "...)
		out = append(out, f[1]...)
		out = append(out, "\r\n"...)
	}
	out = append(out, "Date: "...)
	out = time.Now().UTC().AppendFormat(out, http.TimeFormat)
	out = append(out, "\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, "\r\n"...)
	if closeConn {
		out = append(out, "Connection: close\r\n"...)
	}
	out = append(out, "\r\n"...)
	return append(out, body...)
}
