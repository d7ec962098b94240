package dnsproxy

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Reasons a name is or is not rewritten; they are the "reason" label of
// pep_dns_rewrites_total and pep_dns_passthrough_total.
const (
	ReasonDomain     = "domain"      // the name is under a rewrite_domains suffix
	ReasonAll        = "all"         // rewrite_domains holds "*"
	ReasonWWW        = "www"         // rewrite_www and the name starts with "www."
	ReasonExcluded   = "excluded"    // under an exclude suffix
	ReasonNoMatch    = "no_match"    // outside the policy
	ReasonSpecialUse = "special_use" // RFC 6761/8880 special-use name
)

// Policy says which query names get the VIP (seed paper §3.2: "a
// pre-configured list of domains"). A Policy is immutable; Proxy swaps a
// new one in on Reload.
type Policy struct {
	all      bool
	www      bool
	suffixes map[string]struct{} // lower-case, no leading or trailing dot
	exclude  map[string]struct{}
}

// NewPolicy returns a Policy for the domain suffixes in domains ("*" means
// every name), the suffixes listed in the file at path (may be ""), every
// name starting with "www." if www, minus the suffixes in exclude.
// Suffixes match on label boundaries: "foo.com" matches "foo.com" and
// "a.foo.com", not "barfoo.com". Errors name the file and line of a bad
// suffix.
func NewPolicy(domains []string, path string, www bool, exclude []string) (*Policy, error) {
	p := &Policy{www: www, suffixes: map[string]struct{}{}, exclude: map[string]struct{}{}}
	for _, d := range domains {
		if d == "*" {
			p.all = true
			continue
		}
		s, err := cleanSuffix(d)
		if err != nil {
			return nil, err
		}
		p.suffixes[s] = struct{}{}
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("dnsproxy: rewrite domains: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for line := 1; sc.Scan(); line++ {
			t := sc.Text()
			if i := strings.IndexByte(t, '#'); i >= 0 {
				t = t[:i]
			}
			t = strings.TrimSpace(t)
			if t == "" {
				continue
			}
			if t == "*" {
				p.all = true
				continue
			}
			s, err := cleanSuffix(t)
			if err != nil {
				return nil, fmt.Errorf("dnsproxy: %s:%d: %w", path, line, err)
			}
			p.suffixes[s] = struct{}{}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("dnsproxy: %s: %w", path, err)
		}
	}
	for _, d := range exclude {
		s, err := cleanSuffix(d)
		if err != nil {
			return nil, err
		}
		p.exclude[s] = struct{}{}
	}
	return p, nil
}

var labelRE = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$`)

// cleanSuffix lower-cases s and strips one leading and trailing dot; it
// fails for anything that is not a domain name.
func cleanSuffix(s string) (string, error) {
	t := strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "."), ".")
	if t == "" || len(t) > 253 {
		return "", fmt.Errorf("dnsproxy: %q is not a domain suffix", s)
	}
	for _, l := range strings.Split(t, ".") {
		if !labelRE.MatchString(l) {
			return "", fmt.Errorf("dnsproxy: %q is not a domain suffix (label %q)", s, l)
		}
	}
	return t, nil
}

// Match reports whether the query name qname (presentation form, with or
// without the trailing dot, any case) is rewritten, and why (one of the
// Reason constants). Special-use names (SpecialUse) and excluded suffixes
// are never rewritten.
func (p *Policy) Match(qname string) (reason string, ok bool) {
	return p.matchName([]byte(strings.ToLower(strings.TrimSuffix(qname, "."))))
}

// matchName is Match for a name already lower-case and without the
// trailing dot; it does not allocate.
func (p *Policy) matchName(n []byte) (reason string, ok bool) {
	if specialUseName(n) {
		return ReasonSpecialUse, false
	}
	if under(n, p.exclude) {
		return ReasonExcluded, false
	}
	switch {
	case under(n, p.suffixes):
		return ReasonDomain, true
	case p.all:
		return ReasonAll, true
	case p.www && bytes.HasPrefix(n, []byte("www.")):
		return ReasonWWW, true
	}
	return ReasonNoMatch, false
}

// under reports whether n or one of its parent domains is in set.
func under(n []byte, set map[string]struct{}) bool {
	if len(set) == 0 {
		return false
	}
	for {
		if _, ok := set[string(n)]; ok {
			return true
		}
		i := bytes.IndexByte(n, '.')
		if i < 0 {
			return false
		}
		n = n[i+1:]
	}
}

// specialUse are the special-use domain names whose answers are never
// rewritten: RFC 6761 §6 (localhost, invalid, test, example and
// example.com/net/org), RFC 8880 (ipv4only.arpa, NAT64 discovery),
// RFC 6762 (local), RFC 7686 (onion), RFC 8375 (home.arpa), RFC 9462
// (resolver.arpa), RFC 9476 (alt), and the reverse trees in-addr.arpa and
// ip6.arpa (RFC 6761 §6.1 for the private ones; none of them is an A
// owner a browser connects to).
var specialUse = map[string]struct{}{
	"localhost": {}, "invalid": {}, "test": {}, "example": {},
	"example.com": {}, "example.net": {}, "example.org": {},
	"ipv4only.arpa": {}, "local": {}, "onion": {}, "home.arpa": {},
	"resolver.arpa": {}, "alt": {}, "in-addr.arpa": {}, "ip6.arpa": {},
}

// SpecialUse reports whether name (lower-case, no trailing dot) is a
// special-use domain name or under one (see specialUse).
func SpecialUse(name string) bool { return specialUseName([]byte(name)) }

func specialUseName(n []byte) bool { return under(n, specialUse) }
