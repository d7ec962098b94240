package rewrite

import (
	"net/url"
	"strings"
)

// Cookies on the VIP. Every rewritten object of every site comes from one
// origin, http://VIP, so the browser keeps one cookie jar for all of them.
// Two measures keep cookies per site:
//
//  1. Path: SetCookie scopes a cookie to the site's VIP prefix, Path=/host
//     [:port]<path>, and removes Domain (it could never match the VIP). The
//     browser's path matching (RFC 6265 section 5.1.4) then sends it only
//     with requests under that prefix.
//  2. Name: SetCookie prefixes the name with the site, "host|name"
//     ("host~port|name" for a port other than 80), and CookieHeader forwards
//     to a site only the cookies bearing its prefix, with the prefix removed.
//     This catches what path matching cannot: a cookie a script in a
//     VIP-origin document sets with Path=/ or another site's prefix.
//
// The site's own scripts never see these cookies (their pages keep their own
// origin), so the renaming costs nothing to them.

// cookieKey is the name prefix of a site's cookies: the lowercase host with
// IPv6 brackets dropped and ':' as '.', then "~port" when not 80.
func cookieKey(origin *url.URL) (string, bool) {
	if origin == nil {
		return "", false
	}
	auth := strings.ToLower(origin.Host)
	host, port, ok := splitAuthority(auth)
	if !ok || !validHost(host) || len(port) > 0 && !validPort(port) {
		return "", false
	}
	host = strings.Trim(host, "[]")
	host = strings.ReplaceAll(host, ":", ".")
	if port != "" && port != "80" {
		host += "~" + strings.TrimLeft(port, "0")
	}
	return host + "|", true
}

// SetCookie rewrites one Set-Cookie field value (RFC 6265 section 4.1) of a
// response to a VIP-path request for origin: the name gets the site prefix,
// Domain attributes are removed, and Path becomes the VIP prefix plus the
// cookie's path (its Path attribute, or the default path of origin's path,
// section 5.1.4). Other attributes are kept as they are. It returns "" and
// false for a value without "name=" (a browser ignores it, section 5.2
// step 2) or an origin that has no VIP form; the caller drops the field.
func SetCookie(value string, origin *url.URL) (string, bool) {
	key, ok := cookieKey(origin)
	if !ok {
		return "", false
	}
	pair, attrs, _ := strings.Cut(value, ";")
	name, val, ok := strings.Cut(pair, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return "", false
	}
	path := ""
	var b strings.Builder
	b.WriteString(key)
	b.WriteString(name)
	b.WriteByte('=')
	b.WriteString(strings.TrimSpace(val))
	for attrs != "" {
		var a string
		a, attrs, _ = strings.Cut(attrs, ";")
		a = strings.TrimSpace(a)
		k, v, _ := strings.Cut(a, "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "":
			continue
		case "domain":
			continue
		case "path":
			// The last Path attribute wins (section 5.3 step 7); one not
			// starting with '/' means the default path (section 5.2.4).
			v = strings.TrimSpace(v)
			if strings.HasPrefix(v, "/") {
				path = v
			} else {
				path = ""
			}
			continue
		}
		b.WriteString("; ")
		b.WriteString(a)
	}
	if path == "" {
		path = defaultPath(origin.EscapedPath())
	}
	b.WriteString("; Path=/")
	b.WriteString(strings.ToLower(origin.Host))
	if path != "/" {
		b.WriteString(path)
	} else {
		b.WriteByte('/')
	}
	return b.String(), true
}

// defaultPath is RFC 6265 section 5.1.4's default-path of a request path.
func defaultPath(p string) string {
	if p == "" || p[0] != '/' {
		return "/"
	}
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return "/"
	}
	return p[:i]
}

// CookieHeader filters the Cookie field value (RFC 6265 section 4.2) of a
// VIP-path request for origin: only the cookies named with origin's prefix
// (see SetCookie) are kept, with the prefix removed. It returns "" when none
// is left; the caller then removes the field.
func CookieHeader(value string, origin *url.URL) string {
	key, ok := cookieKey(origin)
	if !ok {
		return ""
	}
	var b strings.Builder
	for value != "" {
		var c string
		c, value, _ = strings.Cut(value, ";")
		c = strings.TrimSpace(c)
		if !strings.HasPrefix(c, key) || len(c) == len(key) || c[len(key)] == '=' {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c[len(key):])
	}
	return b.String()
}
