package dnsproxy

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// TTL policies for the rewritten RRset (config dns.ttl_policy; README.md
// "TTL policy" says what each does to fallback and caching).
const (
	TTLRRset  = "rrset"  // every address record at VIPTTL
	TTLOrigin = "origin" // every address record at the origin RRset's TTL
	TTLMin    = "min"    // every address record at min(VIPTTL, origin TTL)
)

// AAAA policies for rewritten names (config dns.aaaa).
const (
	AAAAPass   = "pass"   // AAAA answers unchanged
	AAAAFilter = "filter" // AAAA records removed: the answer becomes NODATA
	AAAAVIP6   = "vip6"   // VIP6 put first, like the VIP in A answers
)

// Rewriter.Origins values (config dns.origins).
const (
	OriginsKeep = "keep" // origin addresses after the VIP: roaming fallback (paper §3.2)
	OriginsDrop = "drop" // the VIP alone: no address for a browser to race
)

// HTTPS (type 65) policies for rewritten names (config dns.https_records).
const (
	HTTPSFilter = "filter" // HTTPS records removed: the answer becomes NODATA
	HTTPSHints  = "hints"  // ipv4hint/ipv6hint made consistent, h3 taken out of alpn
)

// Reasons an answer to a matching name is passed unchanged; the "reason"
// label of pep_dns_passthrough_total (with those of Policy.Match).
const (
	SkipRcode    = "rcode"      // NXDOMAIN, SERVFAIL, REFUSED, ...
	SkipNoData   = "nodata"     // no record of the asked type at the end of the chain
	SkipSigned   = "signed"     // AD set or RRSIG present (RFC 4035)
	SkipDO       = "do_bit"     // the query asked for DNSSEC records
	SkipType     = "type"       // a type the rewriter leaves alone
	SkipTrunc    = "truncated"  // the upstream answer has TC
	SkipQuestion = "question"   // the answer's question is not the query's
	SkipAAAAPass = "aaaa_pass"  // AAAA with dns.aaaa: pass
	SkipMode     = "mode"       // pepd is not in dns mode
	SkipPack     = "unpackable" // the rewritten answer would not pack (a record miekg/dns reads but cannot write)
)

// Rewriter rewrites answers for names the Policy matched (seed paper §3.2,
// Fig. 3). Its fields are read-only after construction; it is safe for
// concurrent use.
type Rewriter struct {
	// VIP is put first in A answers. IPv4.
	VIP netip.Addr
	// VIP6 is put first in AAAA answers when AAAA is AAAAVIP6.
	VIP6 netip.Addr
	// VIPTTL is the long TTL of the VIP (paper: one day); whole seconds.
	VIPTTL time.Duration
	// TTL is one of TTLRRset, TTLOrigin, TTLMin.
	TTL string
	// Origins is OriginsKeep ("" means keep) or OriginsDrop.
	Origins string
	// AAAA is one of AAAAPass, AAAAFilter, AAAAVIP6.
	AAAA string
	// HTTPS is one of HTTPSFilter, HTTPSHints.
	HTTPS string
}

// Rewrite returns a rewritten copy of resp, the upstream answer to the
// query q, or (nil, reason) when resp is to be passed unchanged; resp and
// q are never modified (STYLE.md §5).
//
// For qtype A at the end of the CNAME chain starting at the question name
// (CNAMEs kept as they are), the VIP is put first, owned by the final
// name, followed by the origin addresses; all get one TTL chosen by
// r.TTL (RFC 2181 §5.2). AAAA and HTTPS follow r.AAAA and r.HTTPS. The
// answer never carries AD. Rcodes other than NOERROR, NODATA, DO-bit
// queries, signed answers and other types come back as (nil, reason).
// A returned message always packs.
func (r *Rewriter) Rewrite(q, resp *dns.Msg) (*dns.Msg, string) {
	out, _, skip := r.rewritePacked(q, resp, false)
	return out, skip
}

// rewritePacked is Rewrite returning the rewritten message packed too. If
// owned, resp belongs to the caller, who no longer needs it, and it may
// be changed and returned as out instead of copied (the proxy's path).
func (r *Rewriter) rewritePacked(q, resp *dns.Msg, owned bool) (*dns.Msg, []byte, string) {
	out, skip := r.rewrite(q, resp, owned)
	if out == nil {
		return nil, nil, skip
	}
	b, err := out.Pack()
	if err != nil {
		return nil, nil, SkipPack
	}
	return out, b, ""
}

func (r *Rewriter) rewrite(q, resp *dns.Msg, owned bool) (*dns.Msg, string) {
	copyOf := func(m *dns.Msg) *dns.Msg {
		if owned {
			return m
		}
		return m.Copy()
	}
	if len(q.Question) != 1 || len(resp.Question) != 1 {
		return nil, SkipQuestion
	}
	qq := q.Question[0]
	if rq := resp.Question[0]; rq.Qtype != qq.Qtype || rq.Qclass != qq.Qclass || !strings.EqualFold(rq.Name, qq.Name) {
		return nil, SkipQuestion
	}
	if o := q.IsEdns0(); o != nil && o.Do() {
		return nil, SkipDO
	}
	if resp.Rcode != dns.RcodeSuccess {
		return nil, SkipRcode
	}
	if resp.Truncated {
		return nil, SkipTrunc
	}
	if resp.AuthenticatedData || hasType(resp.Answer, dns.TypeRRSIG) || hasType(resp.Ns, dns.TypeRRSIG) {
		return nil, SkipSigned
	}
	if qq.Qclass != dns.ClassINET {
		return nil, SkipType
	}
	final := chainEnd(qq.Name, resp.Answer)
	switch qq.Qtype {
	case dns.TypeA:
		return r.addresses(resp, copyOf, final, dns.TypeA, r.VIP)
	case dns.TypeAAAA:
		switch r.AAAA {
		case AAAAVIP6:
			return r.addresses(resp, copyOf, final, dns.TypeAAAA, r.VIP6)
		case AAAAFilter:
			return r.filter(resp, copyOf, final, dns.TypeAAAA)
		}
		return nil, SkipAAAAPass
	case dns.TypeHTTPS:
		if r.HTTPS == HTTPSHints {
			return r.hints(resp, copyOf, final)
		}
		return r.filter(resp, copyOf, final, dns.TypeHTTPS)
	}
	return nil, SkipType
}

func hasType(rrs []dns.RR, t uint16) bool {
	for _, rr := range rrs {
		if rr.Header().Rrtype == t {
			return true
		}
	}
	return false
}

// maxChain bounds the CNAME chain followed (a loop in a malformed answer
// must not spin).
const maxChain = 16

// chainEnd follows the CNAME chain from name through answer and returns
// the final name (name itself if there is no CNAME).
func chainEnd(name string, answer []dns.RR) string {
	for range maxChain {
		next := ""
		for _, rr := range answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, name) {
				next = c.Target
				break
			}
		}
		if next == "" {
			return name
		}
		name = next
	}
	return name
}

// owned reports whether rr is of type t and owned by name.
func owned(rr dns.RR, name string, t uint16) bool {
	h := rr.Header()
	return h.Rrtype == t && h.Class == dns.ClassINET && strings.EqualFold(h.Name, name)
}

// ttlFor returns the TTL of the rewritten RRset given the origin RRset's
// TTL (the lowest of its records, as a stub would use).
func (r *Rewriter) ttlFor(origin uint32) uint32 {
	vip := uint32(r.VIPTTL / time.Second)
	switch r.TTL {
	case TTLOrigin:
		return origin
	case TTLMin:
		return min(vip, origin)
	}
	return vip
}

// addresses puts vip first in the RRset of type t (A or AAAA) owned by
// final, keeping the origin records after it unless r.Origins is
// OriginsDrop.
func (r *Rewriter) addresses(resp *dns.Msg, copyOf func(*dns.Msg) *dns.Msg, final string, t uint16, vip netip.Addr) (*dns.Msg, string) {
	first := slices.IndexFunc(resp.Answer, func(rr dns.RR) bool { return owned(rr, final, t) })
	if first < 0 {
		return nil, SkipNoData
	}
	out := copyOf(resp)
	var origins []dns.RR
	originTTL := uint32(1<<31 - 1)
	kept := out.Answer[:0:0]
	for _, rr := range out.Answer {
		if !owned(rr, final, t) {
			kept = append(kept, rr)
			continue
		}
		originTTL = min(originTTL, rr.Header().Ttl)
		if addrOf(rr) == vip {
			continue // the VIP goes first, once
		}
		origins = append(origins, rr)
	}
	ttl := r.ttlFor(originTTL)
	hdr := dns.RR_Header{Name: resp.Answer[first].Header().Name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	var vrr dns.RR
	if t == dns.TypeA {
		vrr = &dns.A{Hdr: hdr, A: net.IP(vip.AsSlice())}
	} else {
		vrr = &dns.AAAA{Hdr: hdr, AAAA: net.IP(vip.AsSlice())}
	}
	for _, rr := range origins {
		rr.Header().Ttl = ttl
	}
	set := []dns.RR{vrr}
	if r.Origins != OriginsDrop {
		set = append(set, origins...)
	}
	// The rewritten RRset takes the place of the first origin record, so
	// that everything before it (the CNAME chain) keeps its order.
	pos := 0
	for _, rr := range resp.Answer[:first] {
		if !owned(rr, final, t) {
			pos++
		}
	}
	out.Answer = slices.Concat(kept[:pos], set, kept[pos:])
	out.AuthenticatedData = false
	return out, ""
}

func addrOf(rr dns.RR) netip.Addr {
	var ip net.IP
	switch v := rr.(type) {
	case *dns.A:
		ip = v.A
	case *dns.AAAA:
		ip = v.AAAA
	}
	a, _ := netip.AddrFromSlice(ip)
	if rr.Header().Rrtype == dns.TypeA {
		return a.Unmap()
	}
	return a
}

// filter removes the records of type t along the chain ending at final,
// turning the answer into NODATA. A SOA owned by final is put in the
// authority section so that stubs cache the negative answer (RFC 2308 §5)
// for as long as the A RRset of the name, rather than asking again on
// every lookup over the radio link.
func (r *Rewriter) filter(resp *dns.Msg, copyOf func(*dns.Msg) *dns.Msg, final string, t uint16) (*dns.Msg, string) {
	if !hasType(resp.Answer, t) {
		return nil, SkipNoData
	}
	out := copyOf(resp)
	origin := uint32(1<<31 - 1)
	kept := out.Answer[:0:0]
	for _, rr := range out.Answer {
		if rr.Header().Rrtype == t {
			origin = min(origin, rr.Header().Ttl)
			continue
		}
		kept = append(kept, rr)
	}
	out.Answer = kept
	ttl := r.ttlFor(origin)
	out.Ns = []dns.RR{&dns.SOA{
		Hdr: dns.RR_Header{Name: final, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:  final, Mbox: mbox(final), Serial: 1,
		Refresh: 3600, Retry: 600, Expire: 86400, Minttl: ttl,
	}}
	// Additional records described the removed records' targets.
	out.Extra = slices.DeleteFunc(out.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype != dns.TypeOPT })
	out.AuthenticatedData = false
	return out, ""
}

// mbox returns the SOA RNAME for a synthesized SOA owned by name:
// hostmaster.<name>, or name itself where that would not be a valid name
// (the root, a name near the 255-byte limit).
func mbox(name string) string {
	m := "hostmaster." + name
	if name == "." || len(m) > 254 {
		return name
	}
	if _, ok := dns.IsDomainName(m); !ok {
		return name
	}
	return m
}

// hints makes the HTTPS records of a rewritten name consistent with its
// rewritten addresses (RFC 9460 §7.3): the VIP goes first in ipv4hint,
// ipv6hint follows r.AAAA, and h3 leaves alpn because the VIP serves TCP
// only. ech is kept (README.md "HTTPS records and ECH").
func (r *Rewriter) hints(resp *dns.Msg, copyOf func(*dns.Msg) *dns.Msg, final string) (*dns.Msg, string) {
	if !hasType(resp.Answer, dns.TypeHTTPS) {
		return nil, SkipNoData
	}
	out := copyOf(resp)
	for _, rr := range out.Answer {
		h, ok := rr.(*dns.HTTPS)
		if !ok || h.Priority == 0 { // AliasMode carries no parameters
			continue
		}
		var vals []dns.SVCBKeyValue
		for _, kv := range h.Value {
			switch v := kv.(type) {
			case *dns.SVCBIPv4Hint:
				v.Hint = withFirst(v.Hint, r.VIP)
			case *dns.SVCBIPv6Hint:
				switch r.AAAA {
				case AAAAFilter:
					continue
				case AAAAVIP6:
					v.Hint = withFirst(v.Hint, r.VIP6)
				}
			case *dns.SVCBAlpn:
				v.Alpn = slices.DeleteFunc(v.Alpn, func(s string) bool { return strings.HasPrefix(s, "h3") })
				if len(v.Alpn) == 0 {
					continue
				}
			}
			vals = append(vals, kv)
		}
		if !slices.ContainsFunc(vals, func(kv dns.SVCBKeyValue) bool { return kv.Key() == dns.SVCB_ALPN }) {
			// no-default-alpn without alpn is invalid (RFC 9460 §7.1.1).
			vals = slices.DeleteFunc(vals, func(kv dns.SVCBKeyValue) bool { return kv.Key() == dns.SVCB_NO_DEFAULT_ALPN })
		}
		h.Value = vals
	}
	out.AuthenticatedData = false
	return out, ""
}

// withFirst returns hints with a first and without any other copy of it.
func withFirst(hints []net.IP, a netip.Addr) []net.IP {
	out := []net.IP{net.IP(a.AsSlice())}
	for _, ip := range hints {
		if b, ok := netip.AddrFromSlice(ip); ok && b.Unmap() == a {
			continue
		}
		out = append(out, ip)
	}
	return out
}
