// Package cachepolicy holds pepd's part of the seeds' caching asks
// (../shared/seeds/README.md) that Squid alone cannot do, and the cache's
// status interface:
//
//   - the private opt-out of CacheKeeper (seed 000, §4), this file: an app
//     appends the token CK-Private to its User-Agent; such a transaction is
//     never stored by Squid nor served from its cache. pepd strips the token
//     (the origin sees the User-Agent it would have seen without the
//     opt-out; config http.keep_private_token keeps it) and marks the request
//     with PrivateHeader, which configs/squid.conf matches (`cache deny
//     pep_private`) and removes before forwarding;
//   - second-hit admission of CacheSifter (seed 001), admission.go: a
//     rotating pair of Bloom filters over request URLs; a URL's first
//     request is marked FirstHeader so that Squid does not write it to disk
//     (store_miss), the second is stored;
//   - the per-request decision both HTTP paths call, policy.go (Policy.Mark
//     and its Ticket: the marks, and the hold that keeps a burst of
//     requests for one first-seen URL behind the first, up to HoldMax);
//   - the status interface of CacheKeeper (seed 000), status.go: Squid's
//     cache manager pages (read by internal/squid's Manager) summarised
//     for pepctl cache, the admin API and the pep_cache_* metrics.
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
// (config http.keep_private_token).
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
