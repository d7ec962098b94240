// Package squid is everything pep knows about Squid 5 (Debian bookworm's
// 5.7), its HTTP cache behind pepd: the squid.conf it runs, the cache
// manager pepd reads, and how tests and the testbed start one. pepd,
// pepctl, internal/httpproxy, internal/cachepolicy, the deploy tests and
// testbed/run import it; nothing here knows pepd's config file (the
// callers map their settings onto Conf).
//
// # squid.conf
//
// configs/squid.conf (Template) is a Go text/template; Conf holds its
// variables and Render executes it (DefaultConf: the gateway's values).
// The file says why each directive is there; in short:
//
//   - Ports: http_port Conf.Listen is pepd's side only, with
//     require-proxy-header and proxy_protocol_access allowing pepd's
//     addresses (Conf.Pepd), so that Squid's ACLs and access.log see the
//     subscriber's address; without PROXY protocol follow_x_forwarded_for
//     trusts pepd's X-Forwarded-For instead. icp_port, htcp_port 0 and
//     pinger_enable off: no peer queries, CARP needs none.
//   - Access (not an open proxy, behind pepd's guard): the cache manager
//     for localhost only (pepd's status collector and the operator: the
//     Manager below); PURGE and CONNECT refused; destination ports
//     (Conf.AllowedPorts) and refused destination ranges (Conf.Forbidden:
//     ForbiddenRanges and the VIP, less Conf.AllowDst) checked again on
//     the addresses Squid itself resolves (DNS rebinding); subscribers
//     (Conf.Subscribers) allowed, everything else denied.
//   - Names: dns_nameservers are pepd's answers for Squid (listen.squid_dns,
//     internal/squiddns) when set, then the carrier resolvers
//     (Conf.Resolvers); never pepd's DNS rewriter, which would answer with
//     the VIP and loop.
//   - Cache: cache_mem first (small hot page objects), objects above
//     maximum_object_size_in_memory (Conf.MemoryMaxObjectKB) skip it,
//     cache_dir aufs for the long tail (none for the memory tier,
//     Conf.MemoryOnly); never stored: private transactions (the
//     Pep-Private mark of CacheKeeper's opt-out, internal/cachepolicy),
//     manager pages, requests with Cache-Control: no-store; second-hit
//     admission (Conf.Admission: store_miss deny on the Pep-First mark,
//     kept out of collapsed forwarding); collapsed_forwarding on (many
//     subscribers, one object); refresh_pattern caps per kind of object;
//     quick_abort_* finish a nearly complete object a phone gave up on.
//   - Parents: pepd's optimizer (Conf.Optimizer, internal/optimize), so
//     that a transformed variant is what Squid stores (Pep-Deferred
//     answers are served, not stored); the memory tier (Conf.MemoryTier),
//     which keeps a first-seen miss in memory for its second request; a
//     CARP array (Conf.Peers, Conf.PeerListen), in which only a URL's
//     owner stores it. prefer_direct off and its kin keep requests on the
//     parents.
//   - Headers: pepd's marks (Pep-Private, Pep-First) removed before the
//     origin, forwarded_for delete, no version string, no Via in an array
//     (the front member is often the owner: Squid's loop check would
//     refuse its own name).
//   - Connections and files: Squid keeps idle connections longer than
//     pepd (pepd closes, no race on reuse); shutdown_lifetime
//     (Conf.ShutdownSeconds), cache_effective_user (Conf.User), the pid
//     file and the logs (Conf.PidFile, Conf.LogDir).
//
// Squid's directives: https://www.squid-cache.org/Doc/config/.
//
// # Cache manager
//
// Manager reads Squid's cache manager pages on Squid's port for pepd
// (GET /squid-internal-mgr/NAME: Page; mgr:counters and mgr:info summed up
// as Stats: Fetch) for pepd's GET /cache, `pepctl cache` and the
// pep_cache_* metrics (internal/cachepolicy), and for tests that watch
// Squid (mgr:server_list, mgr:active_requests). Squid's manager pages:
// https://wiki.squid-cache.org/Features/CacheManager/.
//
// # Starting Squid
//
// The same steps start every Squid that is not the gateway's systemd
// unit (the tests of internal/httpproxy and deploy, the testbed), each
// wrapping the commands its own way (in a network namespace or not):
// ReadTemplate finds and reads configs/squid.conf, WriteConf renders it to a file,
// MakeDirs makes the cache and log folders Squid's user can write,
// `squid` with InitArgs builds the cache and with RunArgs runs Squid in
// the foreground, under a Service name of its own. Squid is ready when
// Conf.Listen accepts.
package squid
