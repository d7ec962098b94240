package rewrite

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// ErrVIPPath is the error every invalid VIP path wraps; errors.As with
// *PathError gives the reason for a 400 answer.
var ErrVIPPath = errors.New("rewrite: invalid VIP path")

// PathError is an invalid VIP path: Target is the request-target as given,
// Reason a short phrase fit for a 400 response body.
type PathError struct {
	Target string
	Reason string
}

// Error gives the reason with the target quoted.
func (e *PathError) Error() string {
	return fmt.Sprintf("rewrite: invalid VIP path %q: %s", e.Target, e.Reason)
}

// Unwrap makes errors.Is(err, ErrVIPPath) true.
func (e *PathError) Unwrap() error { return ErrVIPPath }

// ParseVIPPath maps the request-target of a request to the VIP, in origin
// form "/host[:port]/path?query" (RFC 9112 section 3.2.1; pass
// http.Request.RequestURI), to the origin URL "http://host[:port]/path?query".
// The host is lowercased, a port is kept (leading zeros dropped), the path
// and query keep their escaping, and "/host" alone means "http://host/".
// Errors are *PathError (wrapping ErrVIPPath) for: a target not starting with
// '/', no host ("/", "//x"), invalid percent-encoding ("/%zz/"), a
// percent-encoded host, userinfo ("/user@host/"), an empty or out-of-range
// port ("/host:/", "/host:99999/"), a host with other bytes than
// [A-Za-z0-9._-] or a bracketed IPv6 literal, and a fragment.
// Whether the host is an allowed target is the caller's check.
func ParseVIPPath(target string) (*url.URL, error) {
	fail := func(reason string) (*url.URL, error) {
		return nil, &PathError{Target: target, Reason: reason}
	}
	if !strings.HasPrefix(target, "/") {
		return fail("not an origin-form path")
	}
	if strings.IndexByte(target, '#') >= 0 {
		return fail("fragment in request-target")
	}
	p, q, hasQuery := strings.Cut(target, "?")
	if _, err := url.PathUnescape(p); err != nil {
		return fail("invalid percent-encoding")
	}
	if !validEscapes(q) {
		return fail("invalid percent-encoding in query")
	}
	auth, rest := p[1:], ""
	if i := strings.IndexByte(auth, '/'); i >= 0 {
		auth, rest = auth[:i], auth[i:]
	}
	if auth == "" {
		return fail("no host")
	}
	if strings.IndexByte(auth, '%') >= 0 {
		return fail("percent-encoded host")
	}
	if strings.IndexByte(auth, '@') >= 0 {
		return fail("userinfo in host")
	}
	auth = strings.ToLower(auth)
	host, port, ok := splitAuthority(auth)
	switch {
	case !ok && strings.HasSuffix(auth, ":"):
		return fail("empty port")
	case !ok:
		return fail(fmt.Sprintf("invalid host %q", auth))
	case !validHost(host):
		return fail(fmt.Sprintf("invalid host %q", host))
	}
	if port != "" {
		if strings.Trim(port, "0123456789") != "" {
			return fail(fmt.Sprintf("invalid port %q", port))
		}
		t := strings.TrimLeft(port, "0")
		n, _ := strconv.Atoi(t)
		if t == "" || len(t) > 5 || n > 65535 {
			return fail(fmt.Sprintf("port %q out of range", port))
		}
		auth = host + ":" + strconv.Itoa(n)
	}
	if rest == "" {
		rest = "/"
	}
	u := &url.URL{Scheme: "http", Host: auth, RawQuery: q, ForceQuery: hasQuery && q == ""}
	u.Path, _ = url.PathUnescape(rest)
	u.RawPath = rest // EscapedPath keeps it when it is a valid encoding of Path
	return u, nil
}

// VIPURL returns the VIP form of an origin URL, "http://VIP/host[:port]/
// path?query#fragment" (or under the origin Config.Origins gives its
// host), and true; or "" and false when u is not one the
// rewriter would put under the VIP: not http:, no host, userinfo, a host
// that is not [a-z0-9._-] or an IPv6 literal, or the VIP itself.
func (r *Rewriter) VIPURL(u *url.URL) (string, bool) {
	if u == nil || !strings.EqualFold(u.Scheme, "http") || u.User != nil || u.Opaque != "" {
		return "", false
	}
	auth := strings.ToLower(u.Host)
	host, _, ok := splitAuthority(auth)
	if !ok || !validAuthority(auth) || r.origins.isVIP([]byte(host)) {
		return "", false
	}
	var b strings.Builder
	b.WriteString(r.origins.pick(auth))
	b.WriteByte('/')
	b.WriteString(auth)
	p := u.EscapedPath()
	if p != "" && p[0] != '/' {
		b.WriteByte('/')
	}
	b.WriteString(p)
	if u.ForceQuery || u.RawQuery != "" {
		b.WriteByte('?')
		b.WriteString(u.RawQuery)
	}
	if u.Fragment != "" {
		b.WriteByte('#')
		b.WriteString(u.EscapedFragment())
	}
	return b.String(), true
}

// FromVIPURL maps an absolute URL in VIP form (under the plain
// http://VIP origin or one of Config.Origins) back to its origin URL: the
// Referer of a request for a VIP-form object. isVIP is false when s is not
// under a VIP origin (s is then no concern of the VIP); err is a
// *PathError when it is, but its path is not a valid VIP path.
func (r *Rewriter) FromVIPURL(s string) (u *url.URL, isVIP bool, err error) {
	for _, o := range append([]string{r.origins.plain}, r.origins.origins...) {
		if len(s) > len(o) && s[len(o)] == '/' && strings.EqualFold(s[:len(o)], o) {
			u, err := ParseVIPPath(s[len(o):])
			return u, true, err
		}
	}
	return nil, false, nil
}

// Location maps the Location header of a response to a VIP-path request
// (RFC 9110 section 10.2.2): loc is resolved against origin, the request's
// origin URL, and an http: target becomes its VIP form. It returns loc
// unchanged and false for https: and other schemes, a value that does not
// parse, or a target VIPURL refuses, so the browser follows it directly.
// Call it only for VIP-path responses: a redirect of an intercepted page is
// a navigation and stays as it is.
func (r *Rewriter) Location(loc string, origin *url.URL) (string, bool) {
	ref, err := url.Parse(strings.TrimSpace(loc))
	if err != nil {
		return loc, false
	}
	if origin != nil {
		ref = origin.ResolveReference(ref)
	}
	v, ok := r.VIPURL(ref)
	if !ok {
		return loc, false
	}
	return v, true
}

// validEscapes reports whether every '%' in s starts a "%XX" hex escape.
func validEscapes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f'
}
