package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/miekg/dns"

	"pep/internal/viptls/viptlstest"
	"pep/netem"
	"pep/testbed/corpus"
	"pep/testbed/origin"
	"pep/testbed/topo"
)

// Bed is one built testbed: the namespaces, the emulated radio link (and
// wired link), the replay origin and the carrier resolver in core, and,
// when some mode needs them, Squid and pepd in gw. Close removes all of it.
type Bed struct {
	Topo    *topo.Topology
	Link    *netem.Link
	Wired   *netem.Link // nil without a wired profile
	Origin  *origin.Origin
	Plan    *corpus.Plan
	Profile netem.Profile

	work       string // temporary folder of config files, removed by Close
	logs       string // log folder, kept
	log        *slog.Logger
	stopOrigin context.CancelFunc
	originDone chan error
	squid      *squid
	pep        *pep
	mode       string
	compress   string // origin.Compress
	// vipCA and originCA are PEM files of the CA that issued the VIP's
	// certificate (made per bed) and of the replay origin's CA, which a
	// url-https-kN session's browser trusts (NSS); "" when the run has no
	// such mode.
	vipCA, originCA string
}

// BedOptions are what NewBed needs besides the run's Config.
type BedOptions struct {
	Profile netem.Profile
	Wired   *netem.Profile // nil: no wired emulation
	Corpus  *corpus.Corpus
	Plan    *corpus.Plan
	NeedPEP bool   // start Squid and pepd
	Logs    string // folder for the processes' logs
	// Modes are the modes the bed will measure; nil means the run's
	// (Config.Modes). Its pepd takes the settings of the first that runs
	// pepd (Config.PepdFor: the modes of one bed share them, checked by
	// Config.Validate).
	Modes []string
}

// NewBed builds a testbed and starts its parts, each ready before the next
// (the resolver answers, the origin listens, Squid and pepd accept). On
// error, everything built so far is removed.
func NewBed(ctx context.Context, rc Config, o BedOptions, log *slog.Logger) (b *Bed, err error) {
	tc := bedTopo(rc, o.Plan)
	if rc.GWInitCwnd == InitCwndBDP {
		tc.GWInitCwnd = BDPInitCwnd(o.Profile)
	}
	tc.WiredEmulated = o.Wired != nil
	b = &Bed{Plan: o.Plan, Profile: o.Profile, logs: o.Logs, log: log.With("profile", o.Profile.Name), mode: "direct", compress: rc.OriginCompress}
	defer func() {
		if err != nil {
			b.Close()
			b = nil
		}
	}()
	if b.work, err = os.MkdirTemp("", tc.Prefix+"-"); err != nil {
		return b, fmt.Errorf("run: %w", err)
	}
	if err := os.Chmod(b.work, 0o755); err != nil { // Squid and dnsmasq drop privileges
		return b, fmt.Errorf("run: %w", err)
	}
	if b.Topo, err = topo.Up(ctx, tc, false, b.log); err != nil {
		return b, err
	}
	backend, err := netem.ParseBackend(rc.Backend)
	if err != nil {
		return b, fmt.Errorf("run: %w", err)
	}
	b.Link, err = netem.NewLink(ctx, netem.LinkSpec{
		Namespace: tc.RadioNS(), IfA: topo.IfEmuA, IfB: topo.IfEmuB,
		PeerA: &netem.Endpoint{Namespace: tc.MNNS(), Interface: topo.IfMN},
		PeerB: &netem.Endpoint{Namespace: tc.GWNS(), Interface: topo.IfGWRadio},
	}, o.Profile, netem.Options{Backend: backend, Logger: b.log.With("link", "radio")})
	if err != nil {
		return b, err
	}
	if o.Wired != nil {
		b.Wired, err = netem.NewLink(ctx, netem.LinkSpec{
			Namespace: tc.WiredNS(), IfA: topo.IfEmuA, IfB: topo.IfEmuB,
			PeerA: &netem.Endpoint{Namespace: tc.GWNS(), Interface: topo.IfGWWired},
			PeerB: &netem.Endpoint{Namespace: tc.CoreNS(), Interface: topo.IfCore},
		}, *o.Wired, netem.Options{Backend: backend, Logger: b.log.With("link", "wired")})
		if err != nil {
			return b, err
		}
	}
	if err := b.startOrigin(o.Corpus); err != nil {
		return b, err
	}
	if err := b.startResolver(ctx); err != nil {
		return b, err
	}
	if o.NeedPEP {
		if b.squid, err = newSquid(b, squidOptions{}); err != nil {
			return b, err
		}
		if err := b.squid.start(ctx, true); err != nil {
			return b, err
		}
		modes := o.Modes
		if modes == nil {
			modes = rc.Modes
		}
		ps := PepdSettings{Overrides: rc.Pepd}
		if i := slices.IndexFunc(modes, NeedsPEP); i >= 0 {
			ps.Overrides = rc.PepdFor(modes[i])
		}
		if anyHTTPS(modes) {
			if ps.CertFile, ps.KeyFile, err = b.vipCertificate(); err != nil {
				return b, err
			}
		}
		if b.pep, err = startPEP(ctx, b, rc.Bin, ps); err != nil {
			return b, err
		}
	}
	return b, nil
}

// vipCertificate makes the bed's own CA, issues the VIP an IP-address
// certificate from it (the stand-in for a public CA's, issue 25), writes
// both CAs' PEM files for the browser's NSS store, and returns the
// certificate and key files for pepd.
func (b *Bed) vipCertificate() (certFile, keyFile string, err error) {
	ca, err := viptlstest.NewCA("pep testbed VIP CA " + b.Topo.Config.Prefix)
	if err != nil {
		return "", "", err
	}
	if certFile, keyFile, err = ca.WriteFiles(b.work, b.Topo.Config.VIP.String()); err != nil {
		return "", "", err
	}
	b.vipCA, b.originCA = filepath.Join(b.work, "vip-ca.pem"), filepath.Join(b.work, "origin-ca.pem")
	if err := os.WriteFile(b.vipCA, ca.PEM, 0o644); err != nil {
		return "", "", fmt.Errorf("run: %w", err)
	}
	if err := b.Origin.CA().WriteFile(b.originCA); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// startOrigin serves the corpus from core on every origin address (the
// AnyIP route makes the whole prefix local there), ports 80 and 443.
func (b *Bed) startOrigin(c *corpus.Corpus) error {
	o, err := origin.New(origin.Config{Corpus: c, Plan: b.Plan, Logger: b.log.With("component", "origin"), Compress: origin.Compress(b.compress)})
	if err != nil {
		return err
	}
	b.Origin = o
	var plain, secure net.Listener
	err = topo.Do(b.Topo.Config.CoreNS(), func() (err error) {
		if plain, err = net.Listen("tcp4", "0.0.0.0:80"); err != nil {
			return err
		}
		secure, err = net.Listen("tcp4", "0.0.0.0:443")
		return err
	})
	if err != nil {
		if plain != nil {
			plain.Close()
		}
		return fmt.Errorf("run: origin listeners in core: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.stopOrigin = cancel
	b.originDone = make(chan error, 1)
	go func() { b.originDone <- o.Serve(ctx, plain, secure) }()
	return nil
}

// startResolver runs dnsmasq in core as the carrier resolver, answering
// the corpus's names with their planned addresses and NXDOMAIN otherwise,
// and waits until it answers.
func (b *Bed) startResolver(ctx context.Context) error {
	conf := filepath.Join(b.work, "dnsmasq.conf")
	if err := b.Plan.WriteDnsmasq(conf, corpus.DnsmasqOptions{TTL: time.Hour, LogQueries: true}); err != nil {
		return err
	}
	core := b.Topo.Config.Core.String()
	p, err := b.Topo.Start("dnsmasq", b.Topo.Config.CoreNS(), filepath.Join(b.logs, "dnsmasq.log"),
		"dnsmasq", "--keep-in-foreground", "--conf-file="+conf, "--listen-address="+core,
		"--bind-interfaces", "--user=root", "--pid-file", "--log-facility=-")
	if err != nil {
		return err
	}
	if len(b.Plan.Hosts) == 0 {
		return errors.New("run: the corpus has no hostnames")
	}
	name := b.Plan.Hosts[0]
	want, _ := b.Plan.Addr(name)
	return waitReady(ctx, p, "dnsmasq", func() error {
		return topo.Do(b.Topo.Config.CoreNS(), func() error {
			got, err := lookupA(core+":53", name)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s is %s, want %s", name, got, want)
			}
			return nil
		})
	})
}

// lookupA asks server for name's first A record.
func lookupA(server, name string) (netip.Addr, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Timeout: 500 * time.Millisecond}
	r, _, err := c.Exchange(m, server)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			addr, _ := netip.AddrFromSlice(a.A.To4())
			return addr, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no A record for %s (rcode %s)", name, dns.RcodeToString[r.Rcode])
}

// waitReady polls ready every 50 ms until it succeeds, the process exits
// (its output is in the error), ctx ends or 30 s pass.
func waitReady(ctx context.Context, p *topo.Proc, name string, ready func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run: %s not ready after 30s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.Done():
			return fmt.Errorf("run: %s exited before it was ready: %w", name, p.Err())
		case <-t.C:
		}
	}
}

// Close stops everything the bed started and removes the testbed; it
// returns the first error and is safe to call more than once.
func (b *Bed) Close() error {
	var errs []error
	if b.Link != nil {
		errs = append(errs, b.Link.Close())
		b.Link = nil
	}
	if b.Wired != nil {
		errs = append(errs, b.Wired.Close())
		b.Wired = nil
	}
	if b.Topo != nil {
		errs = append(errs, b.Topo.Close())
		b.Topo = nil
	}
	if b.stopOrigin != nil {
		b.stopOrigin()
		errs = append(errs, <-b.originDone)
		b.stopOrigin = nil
	}
	if b.work != "" {
		errs = append(errs, os.RemoveAll(b.work))
		b.work = ""
	}
	return errors.Join(errs...)
}
