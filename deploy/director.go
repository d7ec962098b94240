package deploy

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// DirectorRuleset is deploy/nftables/pep-director.nft as shipped: the
// director in front of a gateway array, which keeps each subscriber on one
// gateway by hashing its source address (nftables jhash) into a bucket, and
// each bucket onto a gateway's routing mark (the map @buckets, which the
// director's health checker rewrites).
//
//go:embed nftables/pep-director.nft
var DirectorRuleset []byte

// DirectorBuckets is the number of hash buckets of pep-director.nft
// (jhash ip saddr mod 64; nft takes no variable there).
const DirectorBuckets = 64

// ArrayGateway is one gateway of an array as the director sees it.
type ArrayGateway struct {
	// Name labels the gateway in logs and metrics, e.g. "gw1".
	Name string
	// NextHop is the gateway's address on the director's side: the route
	// of its table points there.
	NextHop netip.Addr
	// Health is the URL the director probes: pepd's admin /healthz (200:
	// healthy), reachable from the director.
	Health string
}

// Director is the front of a gateway array (docs/operations.md §6). The
// kernel forwards; the director only decides which gateway each hash
// bucket of subscriber addresses goes to: bucket b belongs to gateway
// b mod N while that gateway is healthy, and to the healthy gateways in
// turn while it is not (BucketMap), so that a failure moves only the failed
// gateway's subscribers and a recovery moves them back. Gateway i's
// packets carry fwmark MarkBase+i and take routing table TableBase+i
// (default via its NextHop).
type Director struct {
	Gateways []ArrayGateway
	// SubscriberIfs and SubscriberNets select the packets the director
	// steers (as in Gateway).
	SubscriberIfs  []string
	SubscriberNets []netip.Prefix
	// MarkBase, TableBase, RulePriority: gateway i uses fwmark MarkBase+i,
	// table TableBase+i, ip rule priority RulePriority+i. Zero means 0x10,
	// 110 and 110.
	MarkBase     uint32
	TableBase    int
	RulePriority int
	// Interval between probes of each gateway, Timeout of one probe, and
	// the consecutive failures (Fall) and successes (Rise) that change a
	// gateway's state (HAProxy's fall/rise). Zero means 200 ms, 300 ms,
	// 2 and 2: a dead gateway is withdrawn within about
	// Fall*(Interval+Timeout), 1 s.
	Interval, Timeout time.Duration
	Fall, Rise        int
	// Nft runs an nft script (nft -f -); nil runs nft(8).
	Nft func(script string) error
	// Log records state changes; nil discards.
	Log *slog.Logger
}

func (d *Director) defaults() {
	if d.MarkBase == 0 {
		d.MarkBase = 0x10
	}
	if d.TableBase == 0 {
		d.TableBase = 110
	}
	if d.RulePriority == 0 {
		d.RulePriority = 110
	}
	if d.Interval == 0 {
		d.Interval = 200 * time.Millisecond
	}
	if d.Timeout == 0 {
		d.Timeout = 300 * time.Millisecond
	}
	if d.Fall == 0 {
		d.Fall = 2
	}
	if d.Rise == 0 {
		d.Rise = 2
	}
	if d.Nft == nil {
		d.Nft = func(script string) error {
			cmd := exec.Command("nft", "-f", "-")
			cmd.Stdin = strings.NewReader(script)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("deploy: nft: %v: %s", err, bytes.TrimSpace(out))
			}
			return nil
		}
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first value that cannot go into the ruleset or
// the routes, naming the field.
func (d *Director) Validate() error {
	if len(d.Gateways) == 0 {
		return errors.New("deploy: director: gateways: empty")
	}
	for i, g := range d.Gateways {
		if !g.NextHop.Is4() {
			return fmt.Errorf("deploy: director: gateways[%d] (%s): next hop %q is not an IPv4 address", i, g.Name, g.NextHop)
		}
		if !strings.HasPrefix(g.Health, "http://") {
			return fmt.Errorf("deploy: director: gateways[%d] (%s): health %q is not an http:// URL", i, g.Name, g.Health)
		}
	}
	gw := Gateway{SubscriberIfs: d.SubscriberIfs, SubscriberNets: d.SubscriberNets, VIP: netip.MustParseAddr("192.0.2.1"),
		HTTPPort: 1, TLSPort: 1, DNSPort: 1, Mark: 1, Table: 1, RulePriority: 1}
	if err := gw.Validate(); err != nil {
		return fmt.Errorf("deploy: director: %w", err)
	}
	if len(d.Gateways) > DirectorBuckets {
		return fmt.Errorf("deploy: director: %d gateways, at most %d (the ruleset's hash buckets)", len(d.Gateways), DirectorBuckets)
	}
	return nil
}

// BucketMap returns the gateway index of every bucket for the given
// health: bucket b goes to gateway b mod N when that one is healthy, else
// to the healthy gateways in turn (b mod the number of healthy ones). With
// no healthy gateway every bucket keeps its own (nothing better to do).
func BucketMap(buckets int, healthy []bool) []int {
	n := len(healthy)
	var up []int
	for i, h := range healthy {
		if h {
			up = append(up, i)
		}
	}
	out := make([]int, buckets)
	for b := range out {
		own := b % n
		switch {
		case healthy[own] || len(up) == 0:
			out[b] = own
		default:
			out[b] = up[b%len(up)]
		}
	}
	return out
}

// Ruleset returns the director's nftables ruleset: DirectorRuleset with
// its define lines set, and the bucket map filled for all gateways
// healthy.
func (d *Director) Ruleset() ([]byte, error) {
	d.defaults()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	out, err := setDefines(DirectorRuleset, map[string]string{
		"SUB_IFS":  ifSet(d.SubscriberIfs),
		"SUB_NETS": netSet(d.SubscriberNets),
	}, "pep-director.nft")
	if err != nil {
		return nil, err
	}
	all := make([]bool, len(d.Gateways))
	for i := range all {
		all[i] = true
	}
	return append(out, d.mapScript(all)...), nil
}

// mapScript is the nft script that sets the bucket map for health.
func (d *Director) mapScript(healthy []bool) string {
	var b strings.Builder
	b.WriteString("flush map ip pep_director buckets\nadd element ip pep_director buckets { ")
	for i, g := range BucketMap(DirectorBuckets, healthy) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d : 0x%x", i, d.MarkBase+uint32(g))
	}
	b.WriteString(" }\n")
	return b.String()
}

// Routes returns the ip(8) argument lists of the director's policy
// routing, one command each: per gateway an ip rule for its mark and the
// default route of its table.
func (d *Director) Routes() [][]string {
	d.defaults()
	var out [][]string
	for i, g := range d.Gateways {
		mark := fmt.Sprintf("0x%x", d.MarkBase+uint32(i))
		table := strconv.Itoa(d.TableBase + i)
		out = append(out,
			[]string{"ip", "rule", "add", "fwmark", mark, "lookup", table, "priority", strconv.Itoa(d.RulePriority + i)},
			[]string{"ip", "route", "replace", "default", "via", g.NextHop.String(), "table", table})
	}
	return out
}

// Run probes every gateway's Health URL each Interval and rewrites the
// bucket map whenever a gateway changes state (Fall failures in a row:
// down; Rise successes: up). All gateways start up, as Ruleset sets them.
// It returns when ctx ends, or with the first nft error.
func (d *Director) Run(ctx context.Context) error {
	d.defaults()
	if err := d.Validate(); err != nil {
		return err
	}
	healthy := make([]bool, len(d.Gateways))
	streak := make([]int, len(d.Gateways)) // >0 successes, <0 failures in a row
	for i := range healthy {
		healthy[i] = true
	}
	client := &http.Client{Timeout: d.Timeout}
	tick := time.NewTicker(d.Interval)
	defer tick.Stop()
	type probe struct {
		i  int
		ok bool
	}
	results := make(chan probe, len(d.Gateways))
	for {
		for i, g := range d.Gateways {
			go func() {
				resp, err := client.Get(g.Health)
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					resp.Body.Close()
				}
				results <- probe{i, ok}
			}()
		}
		changed := false
		for range d.Gateways {
			p := <-results
			switch {
			case p.ok && streak[p.i] < 0, !p.ok && streak[p.i] > 0:
				streak[p.i] = 0
			}
			if p.ok {
				streak[p.i]++
			} else {
				streak[p.i]--
			}
			if healthy[p.i] && streak[p.i] <= -d.Fall {
				healthy[p.i], changed = false, true
				d.Log.Warn("gateway down: its buckets go to the others", "gateway", d.Gateways[p.i].Name, "health", d.Gateways[p.i].Health)
			}
			if !healthy[p.i] && streak[p.i] >= d.Rise {
				healthy[p.i], changed = true, true
				d.Log.Info("gateway up: its buckets come back", "gateway", d.Gateways[p.i].Name)
			}
		}
		if changed {
			if err := d.Nft(d.mapScript(healthy)); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
