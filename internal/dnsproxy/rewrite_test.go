package dnsproxy

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func testRewriter() *Rewriter {
	return &Rewriter{VIP: netip.MustParseAddr("192.0.2.12"), VIP6: netip.MustParseAddr("2001:db8::12"),
		VIPTTL: 24 * time.Hour, TTL: TTLRRset, AAAA: AAAAFilter, HTTPS: HTTPSFilter}
}

// answer builds the upstream answer to q holding rrs (presentation form).
func answer(t testing.TB, q *dns.Msg, rrs ...string) *dns.Msg {
	t.Helper()
	r := new(dns.Msg)
	r.SetReply(q)
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		r.Answer = append(r.Answer, rr)
	}
	return r
}

func TestRewrite(t *testing.T) {
	cases := []struct {
		name string
		rw   func(*Rewriter)
		q    *dns.Msg
		resp func(*dns.Msg) *dns.Msg
		want []string // answer section; nil with skip set: passed unchanged
		skip string
	}{
		{"A", nil, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg {
				return answer(t, q, "www.foo.com. 10 IN A 198.19.0.10", "www.foo.com. 30 IN A 198.19.0.11")
			},
			[]string{"www.foo.com. 86400 IN A 192.0.2.12", "www.foo.com. 86400 IN A 198.19.0.10", "www.foo.com. 86400 IN A 198.19.0.11"}, ""},
		{"A origins drop: the VIP alone", func(r *Rewriter) { r.Origins = OriginsDrop }, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg {
				return answer(t, q, "www.foo.com. 10 IN A 198.19.0.10", "www.foo.com. 30 IN A 198.19.0.11")
			},
			[]string{"www.foo.com. 86400 IN A 192.0.2.12"}, ""},
		{"CNAME chain, origins drop: chain kept, VIP alone at its end", func(r *Rewriter) { r.Origins = OriginsDrop }, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg {
				return answer(t, q, "www.foo.com. 60 IN CNAME edge.cdn.net.", "edge.cdn.net. 10 IN A 198.19.0.10")
			},
			[]string{"www.foo.com. 60 IN CNAME edge.cdn.net.", "edge.cdn.net. 86400 IN A 192.0.2.12"}, ""},
		{"A ttl_policy min: lowest origin TTL", func(r *Rewriter) { r.TTL = TTLMin }, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg {
				return answer(t, q, "www.foo.com. 30 IN A 198.19.0.10", "www.foo.com. 10 IN A 198.19.0.11")
			},
			[]string{"www.foo.com. 10 IN A 192.0.2.12", "www.foo.com. 10 IN A 198.19.0.10", "www.foo.com. 10 IN A 198.19.0.11"}, ""},
		{"A ttl_policy min: VIP TTL lower", func(r *Rewriter) { r.TTL, r.VIPTTL = TTLMin, 5*time.Second }, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg { return answer(t, q, "www.foo.com. 30 IN A 198.19.0.10") },
			[]string{"www.foo.com. 5 IN A 192.0.2.12", "www.foo.com. 5 IN A 198.19.0.10"}, ""},
		{"origin already the VIP: once, first", nil, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg {
				return answer(t, q, "www.foo.com. 10 IN A 198.19.0.10", "www.foo.com. 10 IN A 192.0.2.12")
			},
			[]string{"www.foo.com. 86400 IN A 192.0.2.12", "www.foo.com. 86400 IN A 198.19.0.10"}, ""},
		{"CNAME chain out of order", nil, query("www.chain.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg {
				return answer(t, q, "cdn.chain.net. 20 IN CNAME edge.cdn.net.", "www.chain.com. 30 IN CNAME cdn.chain.net.",
					"edge.cdn.net. 10 IN A 198.19.0.20")
			},
			[]string{"cdn.chain.net. 20 IN CNAME edge.cdn.net.", "www.chain.com. 30 IN CNAME cdn.chain.net.",
				"edge.cdn.net. 86400 IN A 192.0.2.12", "edge.cdn.net. 86400 IN A 198.19.0.20"}, ""},
		{"CNAME loop", nil, query("a.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg {
				return answer(t, q, "a.foo.com. 20 IN CNAME b.foo.com.", "b.foo.com. 20 IN CNAME a.foo.com.")
			}, nil, SkipNoData},
		{"CNAME to a name without A (stub follows)", nil, query("www.chain.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg { return answer(t, q, "www.chain.com. 30 IN CNAME elsewhere.net.") }, nil, SkipNoData},
		{"A records of another owner untouched", nil, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg { return answer(t, q, "other.foo.com. 10 IN A 198.19.0.10") }, nil, SkipNoData},
		{"NXDOMAIN", nil, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg { r := answer(t, q); r.Rcode = dns.RcodeNameError; return r }, nil, SkipRcode},
		{"SERVFAIL", nil, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg { r := answer(t, q); r.Rcode = dns.RcodeServerFailure; return r }, nil, SkipRcode},
		{"AD set", nil, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg {
				r := answer(t, q, "www.foo.com. 10 IN A 198.19.0.10")
				r.AuthenticatedData = true
				return r
			}, nil, SkipSigned},
		{"RRSIG present", nil, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg {
				return answer(t, q, "www.foo.com. 10 IN A 198.19.0.10",
					"www.foo.com. 10 IN RRSIG A 13 3 10 20300101000000 20200101000000 1234 foo.com. AAAA")
			}, nil, SkipSigned},
		{"DO bit", nil, query("www.foo.com.", dns.TypeA, true, true),
			func(q *dns.Msg) *dns.Msg { return answer(t, q, "www.foo.com. 10 IN A 198.19.0.10") }, nil, SkipDO},
		{"TC", nil, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg { r := answer(t, q); r.Truncated = true; return r }, nil, SkipTrunc},
		{"another question", nil, query("www.foo.com.", dns.TypeA, true, false),
			func(q *dns.Msg) *dns.Msg { return answer(t, query("www.bar.com.", dns.TypeA, true, false)) }, nil, SkipQuestion},
		{"MX", nil, query("www.foo.com.", dns.TypeMX, true, false),
			func(q *dns.Msg) *dns.Msg { return answer(t, q, "www.foo.com. 10 IN MX 10 mail.foo.com.") }, nil, SkipType},
		{"AAAA pass", func(r *Rewriter) { r.AAAA = AAAAPass }, query("www.foo.com.", dns.TypeAAAA, true, false),
			func(q *dns.Msg) *dns.Msg { return answer(t, q, "www.foo.com. 10 IN AAAA 2001:db8::10") }, nil, SkipAAAAPass},
		{"AAAA filter behind a CNAME", nil, query("www.chain.com.", dns.TypeAAAA, true, false),
			func(q *dns.Msg) *dns.Msg {
				return answer(t, q, "www.chain.com. 30 IN CNAME edge.cdn.net.", "edge.cdn.net. 10 IN AAAA 2001:db8::10")
			},
			[]string{"www.chain.com. 30 IN CNAME edge.cdn.net."}, ""},
		{"AAAA filter for the root name (fuzz crasher)", nil, query(".", dns.TypeAAAA, false, false),
			func(q *dns.Msg) *dns.Msg { return answer(t, q, ". 10 IN AAAA 2001:db8::10") },
			nil, ""},
		{"AAAA vip6", func(r *Rewriter) { r.AAAA = AAAAVIP6 }, query("www.foo.com.", dns.TypeAAAA, true, false),
			func(q *dns.Msg) *dns.Msg { return answer(t, q, "www.foo.com. 10 IN AAAA 2001:db8::10") },
			[]string{"www.foo.com. 86400 IN AAAA 2001:db8::12", "www.foo.com. 86400 IN AAAA 2001:db8::10"}, ""},
		{"HTTPS hints: no ipv6hint with aaaa filter, no-default-alpn dropped with alpn", func(r *Rewriter) { r.HTTPS = HTTPSHints },
			query("www.foo.com.", dns.TypeHTTPS, true, false),
			func(q *dns.Msg) *dns.Msg {
				return answer(t, q, `www.foo.com. 10 IN HTTPS 1 . alpn="h3" no-default-alpn ipv4hint="198.19.0.10" ipv6hint="2001:db8::10"`,
					`www.foo.com. 10 IN HTTPS 0 cdn.foo.net.`)
			},
			[]string{`www.foo.com. 10 IN HTTPS 1 . ipv4hint="192.0.2.12,198.19.0.10"`, `www.foo.com. 10 IN HTTPS 0 cdn.foo.net.`}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rw := testRewriter()
			if tc.rw != nil {
				tc.rw(rw)
			}
			resp := tc.resp(tc.q)
			before := resp.String()
			out, skip := rw.Rewrite(tc.q, resp)
			if resp.String() != before {
				t.Errorf("Rewrite modified its input")
			}
			if skip != tc.skip {
				t.Fatalf("skip %q, want %q", skip, tc.skip)
			}
			if tc.skip != "" {
				if out != nil {
					t.Errorf("skipped, yet returned a message")
				}
				return
			}
			if got := rrStrings(out.Answer); !slices.Equal(got, tc.want) {
				t.Errorf("answer\n got %q\nwant %q", got, tc.want)
			}
			if out.AuthenticatedData {
				t.Errorf("rewritten answer has AD")
			}
		})
	}
}

func TestPolicy(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "domains")
	os.WriteFile(file, []byte("# carrier list\ncdn.net\n  Static.Example.NET. # trailing comment\n\n"), 0o644)
	p, err := NewPolicy([]string{"foo.com", ".Chain.COM."}, file, true, []string{"private.foo.com"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		reason string
		ok     bool
	}{
		{"foo.com.", ReasonDomain, true},
		{"WWW.FOO.COM.", ReasonDomain, true},
		{"a.b.foo.com", ReasonDomain, true},
		{"barfoo.com.", ReasonNoMatch, false},
		{"www.chain.com.", ReasonDomain, true},
		{"edge.cdn.net.", ReasonDomain, true},
		{"private.foo.com.", ReasonExcluded, false},
		{"x.private.foo.com.", ReasonExcluded, false},
		{"www.bar.org.", ReasonWWW, true},
		{"wwww.bar.org.", ReasonNoMatch, false},
		{"ipv4only.arpa.", ReasonSpecialUse, false},
		{"www.example.com.", ReasonSpecialUse, false},
		{"static.example.net.", ReasonSpecialUse, false},
		{"www.localhost.", ReasonSpecialUse, false},
		{"printer.local.", ReasonSpecialUse, false},
		{"router.home.arpa.", ReasonSpecialUse, false},
		{"foo.onion.", ReasonSpecialUse, false},
		{".", ReasonNoMatch, false},
	}
	for _, tc := range cases {
		if reason, ok := p.Match(tc.name); reason != tc.reason || ok != tc.ok {
			t.Errorf("Match(%q) = %q, %v; want %q, %v", tc.name, reason, ok, tc.reason, tc.ok)
		}
	}
	all, _ := NewPolicy([]string{"*"}, "", false, nil)
	if reason, ok := all.Match("anything.net."); reason != ReasonAll || !ok {
		t.Errorf(`"*": Match = %q, %v; want all, true`, reason, ok)
	}

	os.WriteFile(file, []byte("ok.net\nnot a domain\n"), 0o644)
	_, err = NewPolicy(nil, file, false, nil)
	if want := file + ":2: dnsproxy: \"not a domain\" is not a domain suffix"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("bad file: error %v, want it to contain %q", err, want)
	}
}

// TestReload checks that Reload swaps the file's suffixes in and keeps the
// old policy when the new file is bad.
func TestReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "domains")
	os.WriteFile(file, []byte("foo.com\n"), 0o644)
	o := defaultOptions("127.0.0.1:53")
	o.RewriteDomains, o.RewriteDomainsFile = nil, file
	p, _, _ := startProxy(t, o)
	match := func(n string) bool { _, ok := p.policy.Load().Match(n); return ok }
	if !match("www.foo.com.") || match("www.bar.com.") {
		t.Fatalf("before reload: foo.com %v bar.com %v, want true false", match("www.foo.com."), match("www.bar.com."))
	}
	os.WriteFile(file, []byte("bar.com\n"), 0o644)
	if err := p.Reload(); err != nil {
		t.Fatal(err)
	}
	if match("www.foo.com.") || !match("www.bar.com.") {
		t.Errorf("after reload: foo.com %v bar.com %v, want false true", match("www.foo.com."), match("www.bar.com."))
	}
	os.WriteFile(file, []byte("bad domain\n"), 0o644)
	if err := p.Reload(); err == nil {
		t.Errorf("reload of a bad file: no error")
	}
	if !match("www.bar.com.") {
		t.Errorf("a failed reload lost the old policy")
	}

	c := DefaultConfig()
	c.RewriteDomains = []string{"baz.org"}
	if err := p.ReloadConfig(c); err != nil {
		t.Fatal(err)
	}
	if match("www.bar.com.") || !match("www.baz.org.") {
		t.Errorf("after ReloadConfig: bar.com %v baz.org %v, want false true", match("www.bar.com."), match("www.baz.org."))
	}
}
