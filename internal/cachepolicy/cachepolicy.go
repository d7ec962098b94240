// Package cachepolicy holds pepd's part of the caching asks of the seeds
// (../shared/seeds/README.md) that Squid alone cannot do: the
// per-transaction private opt-out of CacheKeeper (seed 000, §4). An app
// appends the token CK-Private to its User-Agent; such a transaction is
// never stored by Squid nor served from its cache. pepd strips the token
// (the origin sees the User-Agent it would have seen without the opt-out)
// and marks the request with PrivateHeader, which configs/squid.conf
// matches (`cache deny pep_private`) and removes before forwarding.
package cachepolicy

import "strings"

// PrivateToken is CacheKeeper's opt-out token in the User-Agent (§4).
const PrivateToken = "CK-Private"

// PrivateHeader is the request header pepd adds to a private transaction
// for Squid's ACL; Squid removes it before the origin (configs/squid.conf).
const PrivateHeader = "Pep-Private"

// PrivateUA reports whether the User-Agent value ua carries PrivateToken
// as a product token (a whitespace-separated word, RFC 9110 §10.1.5,
// compared case-sensitively as CacheKeeper defines it, optionally with a
// "/version"), and returns ua without it (internal whitespace collapsed to
// single spaces only where the token was). keep returns ua unchanged
// (config cache.keep_private_token).
func PrivateUA(ua string, keep bool) (out string, private bool) {
	if !strings.Contains(ua, PrivateToken) {
		return ua, false
	}
	words := strings.Fields(ua)
	kept := words[:0]
	for _, w := range words {
		name, _, _ := strings.Cut(w, "/")
		if name == PrivateToken {
			private = true
			continue
		}
		kept = append(kept, w)
	}
	if !private || keep {
		return ua, private
	}
	return strings.Join(kept, " "), true
}
