package httpproxy

import (
	"net/http"
	"strings"

	"pep/internal/optimize"
)

// markLower is optimize.MarkHeader in lower case, as Vary lines are
// searched for it.
var markLower = []byte(strings.ToLower(optimize.MarkHeader))

// radioVary returns a Vary value without optimize.MarkHeader (Squid keys
// the optimizer's variants on it; the phone never sends it), "" when
// nothing is left.
func radioVary(v string) string {
	parts := strings.Split(v, ",")
	out := parts[:0]
	for _, p := range parts {
		if t := strings.TrimSpace(p); t != "" && !strings.EqualFold(t, optimize.MarkHeader) {
			out = append(out, t)
		}
	}
	return strings.Join(out, ", ")
}

// dietHeader applies the radio-side header diet (radioDiet, radioVary)
// to a parsed response's header, as the relay's parser does to raw
// heads, and returns the bytes removed, the optimizer's transform and
// whether Squid's X-Cache said HIT.
func dietHeader(h http.Header) (saved int, transform string, hit bool) {
	for k, vs := range h {
		lk := strings.ToLower(k)
		if !radioDiet[lk] {
			continue
		}
		for _, v := range vs {
			saved += len(k) + 2 + len(v) + 2
		}
		switch lk {
		case "x-cache":
			hit = strings.HasPrefix(vs[0], "HIT")
		case "pep-transform":
			transform = vs[0]
		}
		delete(h, k)
	}
	if vs := h.Values("Vary"); len(vs) > 0 && strings.Contains(strings.ToLower(strings.Join(vs, ",")), string(markLower)) {
		if v := radioVary(strings.Join(vs, ", ")); v != "" {
			h["Vary"] = []string{v}
		} else {
			delete(h, "Vary")
		}
	}
	return saved, transform, hit
}
