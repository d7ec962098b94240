package corpus

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"pep/internal/dnsproxy/dnsmasqtest"
)

func TestPlan(t *testing.T) {
	p, err := NewPlan([]string{"www.b.com", "A.com", "c.net.", "www.b.com"}, DefaultPrefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ host, addr string }{
		{"a.com", "198.19.0.1"}, {"c.net", "198.19.0.2"}, {"www.b.com", "198.19.0.3"},
	} {
		if a, ok := p.Addr(tc.host); !ok || a.String() != tc.addr {
			t.Errorf("Addr(%q) = %v, want %s", tc.host, a, tc.addr)
		}
		if h, ok := p.Host(netip.MustParseAddr(tc.addr)); !ok || h != tc.host {
			t.Errorf("Host(%s) = %q, want %q", tc.addr, h, tc.host)
		}
	}
	wantHosts := "# pep testbed origins: 3 hostnames from 198.19.0.0/16\n198.19.0.1 a.com\n198.19.0.2 c.net\n198.19.0.3 www.b.com\n"
	if got := string(p.HostsFile()); got != wantHosts {
		t.Errorf("hosts file =\n%s\nwant\n%s", got, wantHosts)
	}
	wantConf := "# pep testbed carrier resolver: 3 hostnames from 198.19.0.0/16, NXDOMAIN for the rest\n" +
		"no-resolv\nno-hosts\naddn-hosts=/x/hosts\nlocal=/#/\nlocal-ttl=3600\n"
	if got := string(p.DnsmasqConf("/x/hosts", DnsmasqOptions{})); got != wantConf {
		t.Errorf("conf =\n%s\nwant\n%s", got, wantConf)
	}

	p2, err := NewPlan([]string{"x.org", "y.org"}, netip.MustParsePrefix("10.1.2.0/29"), 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := p2.Addrs["y.org"]; len(got) != 3 || got[0].String() != "10.1.2.4" || got[2].String() != "10.1.2.6" {
		t.Errorf("y.org = %v, want 10.1.2.4-6", got)
	}
	for _, tc := range []struct {
		hosts  []string
		prefix string
		per    int
		err    string
	}{
		{[]string{"a", "b", "c"}, "10.0.0.0/30", 1, "corpus: plan: 3 hostnames x 1 addresses do not fit 10.0.0.0/30 (2 usable)"},
		{[]string{"a"}, "2001:db8::/64", 1, `corpus: plan: prefix "2001:db8::/64" is not IPv4`},
		{[]string{"a"}, "10.0.0.0/8", 0, "corpus: plan: 0 addresses per host, want at least 1"},
	} {
		if _, err := NewPlan(tc.hosts, netip.MustParsePrefix(tc.prefix), tc.per); err == nil || err.Error() != tc.err {
			t.Errorf("NewPlan(%v, %s, %d) err = %v, want %s", tc.hosts, tc.prefix, tc.per, err, tc.err)
		}
	}
}

func TestPlanTP5N(t *testing.T) {
	c := loadTP5N(t)
	p, err := PlanFor(c, DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	// 723 hostnames: the last one sorted gets 198.19.2.211 (723 = 2*256+211).
	last := p.Hosts[len(p.Hosts)-1]
	if a, _ := p.Addr(last); len(p.Hosts) != 723 || a.String() != "198.19.2.211" {
		t.Errorf("%d hosts, %s at %v", len(p.Hosts), last, a)
	}
}

// startDnsmasq runs the real dnsmasq with conf on a loopback port and
// returns its address once it has read its hosts file. The port is free
// for UDP and TCP when chosen (dnsmasqtest.FreePort), but another test
// process may take it before dnsmasq binds it: then dnsmasq exits with
// "Address already in use" and a new port is tried, as dnsmasqtest does.
func startDnsmasq(t *testing.T, conf string) string {
	t.Helper()
	bin, err := exec.LookPath("dnsmasq")
	if err != nil {
		t.Skip("dnsmasq not installed (apt-get install -y dnsmasq)")
	}
	for attempt := 1; ; attempt++ {
		addr, msg := runDnsmasq(t, bin, conf)
		if msg == "" {
			return addr
		}
		if attempt == 5 || !strings.Contains(msg, "Address already in use") {
			t.Fatalf("dnsmasq exited:\n%s", msg)
		}
	}
}

// runDnsmasq is one attempt of startDnsmasq: the address, or dnsmasq's
// output when it exited before reading its hosts file.
func runDnsmasq(t *testing.T, bin, conf string) (addr, exited string) {
	port := dnsmasqtest.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"--keep-in-foreground", "--conf-file=" + conf, "--listen-address=127.0.0.1", "--bind-interfaces",
		"--port=" + strconv.Itoa(port), "--pid-file=", "--log-facility=-"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() }) //nolint:errcheck // killed on purpose
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var log []string
		for sc.Scan() {
			log = append(log, sc.Text())
			if strings.Contains(sc.Text(), ".hosts - ") { // "read FILE - N names"
				ready <- ""
			}
		}
		ready <- strings.Join(log, "\n")
	}()
	select {
	case msg := <-ready:
		if msg != "" {
			return "", msg
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dnsmasq did not read its hosts file in 10 s")
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), ""
}

// TestDnsmasqResolver runs the generated configuration in the real dnsmasq:
// corpus names resolve to their planned addresses with the TTL, a name
// with several addresses gets several A records, everything else is
// NXDOMAIN.
func TestDnsmasqResolver(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hosts := Default().Hosts()
	p, err := NewPlan(hosts, DefaultPrefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	// One name with three A records, as a page with a round-robin origin
	// would need.
	p.Addrs["i.cdn.turner.com"] = append(p.Addrs["i.cdn.turner.com"], netip.MustParseAddr("198.19.9.1"), netip.MustParseAddr("198.19.9.2"))
	conf := filepath.Join(dir, "dnsmasq.conf")
	if err := p.WriteDnsmasq(conf, DnsmasqOptions{TTL: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	server := startDnsmasq(t, conf)
	cl := &dns.Client{Timeout: 5 * time.Second}
	query := func(name string, qtype uint16) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), qtype)
		r, _, err := cl.Exchange(m, server)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		addrs string
	}{
		{"www.yahoo.com", dns.TypeA, dns.RcodeSuccess, "198.19.0.23"},
		{"ads.cnn.com", dns.TypeA, dns.RcodeSuccess, "198.19.0.2"},
		{"i.cdn.turner.com", dns.TypeA, dns.RcodeSuccess, "198.19.0.5 198.19.9.1 198.19.9.2"},
		{"www.yahoo.com", dns.TypeAAAA, dns.RcodeSuccess, ""},
		{"clients2.google.com", dns.TypeA, dns.RcodeNameError, ""},
		{"sub.www.yahoo.com", dns.TypeA, dns.RcodeNameError, ""},
		// An empty non-terminal above a corpus name exists (RFC 8020 §2).
		{"yahoo.com", dns.TypeA, dns.RcodeSuccess, ""},
	} {
		t.Run(tc.name+"/"+dns.TypeToString[tc.qtype], func(t *testing.T) {
			r := query(tc.name, tc.qtype)
			if r.Rcode != tc.rcode {
				t.Fatalf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
			}
			var got []string
			for _, rr := range r.Answer {
				a, ok := rr.(*dns.A)
				if !ok {
					t.Fatalf("unexpected answer %v", rr)
				}
				if a.Hdr.Ttl != 600 {
					t.Errorf("TTL = %d, want 600", a.Hdr.Ttl)
				}
				got = append(got, a.A.String())
			}
			sort.Strings(got)
			if strings.Join(got, " ") != tc.addrs {
				t.Errorf("answers = %v, want %s", got, tc.addrs)
			}
		})
	}
}
