package optimize

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"pep/internal/mode"
)

// Switch is the optimizer's run-time on/off switch, orthogonal to the
// mode (off, dns, url each run with it on or off): config
// optimize.enabled at start and on SIGHUP, PUT /optimize on the admin
// API, pepctl optimize on|off. A switch takes effect for the next
// request. Safe for concurrent use; a nil *Switch is off.
type Switch = mode.Toggle

// NewSwitch returns a Switch set to on.
func NewSwitch(on bool) *Switch { return mode.NewToggle(on) }

// Sites is an operator's exclusion list (optimize.exclude_file): sites
// whose responses the optimizer never transforms. A name excludes itself
// and every name under it ("example.com" excludes "img.example.com").
type Sites struct{ names map[string]bool }

// LoadSites reads an exclusion list: one host name per line, '#' starts a
// comment, blank lines ignored. An empty path is an empty list. Errors
// name the file and line ("sites.txt:3: ...").
func LoadSites(path string) (*Sites, error) {
	s := &Sites{names: map[string]bool{}}
	if path == "" {
		return s, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("optimize: exclusion list: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(line), "."))
		if line == "" {
			continue
		}
		if strings.ContainsAny(line, " \t/:*") {
			return nil, fmt.Errorf("%s:%d: %q is not a host name (one name per line; it covers its subdomains)", path, n, line)
		}
		s.names[line] = true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("optimize: exclusion list %s: %w", path, err)
	}
	return s, nil
}

// Len is the number of names listed.
func (s *Sites) Len() int {
	if s == nil {
		return 0
	}
	return len(s.names)
}

// Excluded reports whether host (no port, any case) or a parent domain of
// it is listed.
func (s *Sites) Excluded(host string) bool {
	if s == nil || len(s.names) == 0 {
		return false
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for {
		if s.names[host] {
			return true
		}
		i := strings.IndexByte(host, '.')
		if i < 0 {
			return false
		}
		host = host[i+1:]
	}
}

// Policy is pepd's side of the optimizer: which requests it marks for it
// (MarkHeader). Safe for concurrent use.
type Policy struct {
	// Switch is the on/off switch.
	Switch *Switch
	// Metrics counts requests left unmarked by reason; nil counts nothing.
	Metrics *Metrics
	sites   atomic.Pointer[Sites]
}

// SetSites replaces the exclusion list (SIGHUP).
func (p *Policy) SetSites(s *Sites) { p.sites.Store(s) }

// Mark reports whether pepd marks a request for the optimizer: the switch
// is on, the method is GET or HEAD, there is no Range header (a range of
// a transformed variant would be a range of other bytes; the request is
// served from the untransformed object), no Cache-Control: no-transform
// (RFC 9111 §5.2.1.6), and host is not excluded. A nil Policy marks
// nothing. Requests left unmarked while the switch is on are counted in
// pep_optimize_skipped_total by reason.
func (p *Policy) Mark(method, host string, rangeReq, noTransform bool) bool {
	if p == nil || !p.Switch.On() || method != "GET" && method != "HEAD" {
		return false
	}
	switch {
	case rangeReq:
		p.Metrics.skip(SkipRange)
	case noTransform:
		p.Metrics.skip(SkipNoTransform)
	case p.sites.Load().Excluded(host):
		p.Metrics.skip(SkipExcluded)
	default:
		return true
	}
	return false
}
