package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// ErrNXDomain is returned by Resolver.Lookup for a name that does not exist
// or has no A or AAAA record.
var ErrNXDomain = errors.New("httpproxy: no such host")

// Resolver looks names up through the carrier resolvers (never through
// pepd's own DNS rewriter, which would answer with the VIP) and caches the
// answers for their TTL. It is safe for concurrent use.
//
// A lookup asks A and AAAA in parallel over UDP (TCP when the answer is
// truncated), trying the resolvers in order, each attempt bounded by
// Timeout. Answers are cached for the lowest TTL of the RRsets used,
// clamped to [MinTTL, MaxTTL]; a name that does not exist is cached for
// NegativeTTL. Concurrent lookups of one name share one query.
type Resolver struct {
	// Servers are the carrier resolvers, host:port, asked in order.
	Servers []string
	// Timeout bounds one query to one server. Zero means 2s.
	Timeout time.Duration
	// MinTTL and MaxTTL clamp the cache lifetime of an answer. Zero means
	// 5s and 1h.
	MinTTL, MaxTTL time.Duration
	// NegativeTTL is how long NXDOMAIN/NODATA is cached. Zero means 10s.
	NegativeTTL time.Duration

	mu    sync.Mutex
	cache map[string]*lookup
	now   func() time.Time
}

// lookup is one cached or in-flight lookup.
type lookup struct {
	done    chan struct{} // closed when addrs/err are set
	addrs   []netip.Addr
	err     error
	expires time.Time
}

// ipLiteral parses s as an IP address literal (netip.ParseAddr: dotted
// IPv4, IPv6 with an optional zone). A host name, which has no ':' and
// ends in a letter (its top-level label), is rejected without parsing:
// ParseAddr's error for it costs an allocation and a message on every
// request that names a host.
func ipLiteral(s string) (netip.Addr, bool) {
	if s == "" || strings.IndexByte(s, ':') < 0 && (s[len(s)-1] < '0' || s[len(s)-1] > '9') {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

// maxCache bounds the number of cached names; at the bound, expired
// entries are dropped, and if none expired the whole cache is.
const maxCache = 100000

// Lookup returns the IPv4 and IPv6 addresses of name (a host name or an IP
// literal, which is returned as it is). Errors: ErrNXDomain, or a failure
// to reach every server (prefix "httpproxy:").
func (r *Resolver) Lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	addrs, _, err := r.LookupTTL(ctx, name)
	return addrs, err
}

// LookupTTL is Lookup that also returns how long the answer stays in the
// cache from now (at least 1s; MaxTTL for an IP literal), the TTL a DNS
// answer built from it may carry (internal/squiddns gives Squid the
// addresses pepd checked, for the rest of their life here).
func (r *Resolver) LookupTTL(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	if a, ok := ipLiteral(strings.Trim(name, "[]")); ok {
		_, maxTTL, _ := r.ttls()
		return []netip.Addr{a.Unmap()}, maxTTL, nil
	}
	// The cache's key is the name without its root label's dot:
	// dns.Fqdn would allocate on every request, for the query only.
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	now := r.clock()
	r.mu.Lock()
	if r.cache == nil {
		r.cache = make(map[string]*lookup)
	}
	l, ok := r.cache[name]
	if ok {
		select {
		case <-l.done:
			if now.After(l.expires) {
				ok = false
			}
		default: // in flight: wait for it below
		}
	}
	if !ok {
		if len(r.cache) >= maxCache {
			r.evict(now)
		}
		l = &lookup{done: make(chan struct{})}
		r.cache[name] = l
		r.mu.Unlock()
		l.addrs, l.expires, l.err = r.query(dns.Fqdn(name))
		if l.err != nil && !errors.Is(l.err, ErrNXDomain) {
			l.expires = now // do not cache failures to reach the resolvers
		}
		close(l.done)
		return l.addrs, r.life(l), l.err
	}
	r.mu.Unlock()
	select {
	case <-l.done:
		return l.addrs, r.life(l), l.err
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("httpproxy: resolving %q: %w", name, ctx.Err())
	}
}

// life is how long l stays cached from now, at least 1s.
func (r *Resolver) life(l *lookup) time.Duration {
	return max(l.expires.Sub(r.clock()), time.Second)
}

func (r *Resolver) evict(now time.Time) {
	for k, l := range r.cache {
		select {
		case <-l.done:
			if now.After(l.expires) {
				delete(r.cache, k)
			}
		default:
		}
	}
	if len(r.cache) >= maxCache {
		clear(r.cache)
	}
}

func (r *Resolver) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

func (r *Resolver) ttls() (minTTL, maxTTL, neg time.Duration) {
	minTTL, maxTTL, neg = r.MinTTL, r.MaxTTL, r.NegativeTTL
	if minTTL == 0 {
		minTTL = 5 * time.Second
	}
	if maxTTL == 0 {
		maxTTL = time.Hour
	}
	if neg == 0 {
		neg = 10 * time.Second
	}
	return
}

// query asks A and AAAA for name and returns the addresses and the time
// they expire.
func (r *Resolver) query(name string) ([]netip.Addr, time.Time, error) {
	type answer struct {
		addrs []netip.Addr
		ttl   uint32
		err   error
	}
	ch := make(chan answer, 2)
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		go func() {
			a, ttl, err := r.ask(name, qt)
			ch <- answer{a, ttl, err}
		}()
	}
	minTTL, maxTTL, neg := r.ttls()
	var addrs []netip.Addr
	var errs []error
	ttl := uint32(maxTTL / time.Second)
	for range 2 {
		a := <-ch
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		addrs = append(addrs, a.addrs...)
		if len(a.addrs) > 0 && a.ttl < ttl {
			ttl = a.ttl
		}
	}
	now := r.clock()
	if len(addrs) > 0 {
		life := min(max(time.Duration(ttl)*time.Second, minTTL), maxTTL)
		return addrs, now.Add(life), nil
	}
	if len(errs) > 0 {
		return nil, now, errs[0]
	}
	return nil, now.Add(neg), fmt.Errorf("%w: %q", ErrNXDomain, strings.TrimSuffix(name, "."))
}

// ask sends one question to the servers in order until one answers.
func (r *Resolver) ask(name string, qt uint16) ([]netip.Addr, uint32, error) {
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	m := new(dns.Msg)
	m.SetQuestion(name, qt)
	m.RecursionDesired = true
	var lastErr error
	for _, srv := range r.Servers {
		c := &dns.Client{Net: "udp", Timeout: timeout}
		in, _, err := c.Exchange(m, srv)
		if err == nil && in.Truncated {
			c.Net = "tcp"
			in, _, err = c.Exchange(m, srv)
		}
		if err != nil {
			lastErr = err
			continue
		}
		switch in.Rcode {
		case dns.RcodeSuccess, dns.RcodeNameError:
		default:
			lastErr = fmt.Errorf("rcode %s", dns.RcodeToString[in.Rcode])
			continue
		}
		var addrs []netip.Addr
		ttl := uint32(1<<31 - 1)
		for _, rr := range in.Answer {
			switch v := rr.(type) {
			case *dns.A:
				if qt == dns.TypeA {
					if a, ok := netip.AddrFromSlice(v.A.To4()); ok {
						addrs = append(addrs, a)
						ttl = min(ttl, v.Hdr.Ttl)
					}
				}
			case *dns.AAAA:
				if qt == dns.TypeAAAA {
					if a, ok := netip.AddrFromSlice(v.AAAA); ok {
						addrs = append(addrs, a.Unmap())
						ttl = min(ttl, v.Hdr.Ttl)
					}
				}
			case *dns.CNAME:
				ttl = min(ttl, v.Hdr.Ttl)
			}
		}
		return addrs, ttl, nil
	}
	if lastErr == nil {
		lastErr = errors.New("no resolver configured")
	}
	return nil, 0, fmt.Errorf("httpproxy: resolving %q %s: %w", strings.TrimSuffix(name, "."), dns.TypeToString[qt], lastErr)
}
