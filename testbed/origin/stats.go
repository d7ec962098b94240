package origin

import (
	"sort"
	"sync"
)

// Counts are request counters of one host or page.
type Counts struct {
	// Requests is the number of requests answered.
	Requests int64 `json:"requests"`
	// Misses is the number answered 404 because the corpus has no object.
	Misses int64 `json:"misses"`
	// Bytes is the body bytes sent.
	Bytes int64 `json:"bytes"`
}

// Miss is one distinct request the corpus could not answer.
type Miss struct {
	Host string `json:"host"`
	// Target is the request target (path and query) as received.
	Target string `json:"target"`
	// Page is the page the request was attributed to ("" when unknown).
	Page  string `json:"page"`
	Count int64  `json:"count"`
}

// Stats is a snapshot of the origin's counters since start or the last
// reset.
type Stats struct {
	Counts
	// Hosts are the counters per requested hostname.
	Hosts map[string]Counts `json:"hosts"`
	// Pages are the counters per page, attributed by the Referer's host (a
	// page's top-level host, else the one page using that host), else by
	// the requested host (a page's top-level host, else the one page using
	// it); "" collects the rest.
	Pages map[string]Counts `json:"pages"`
	// MissList lists the distinct misses, most frequent first (at most
	// MaxMisses; MissesDropped counts those left out).
	MissList      []Miss `json:"miss_list"`
	MissesDropped int64  `json:"misses_dropped"`
}

// MaxMisses bounds the distinct misses kept between resets.
const MaxMisses = 10000

type stats struct {
	mu      sync.Mutex
	total   Counts
	hosts   map[string]*Counts
	pages   map[string]*Counts
	misses  map[[2]string]*Miss
	dropped int64
}

func newStats() *stats {
	s := &stats{}
	s.reset()
	return s
}

func (s *stats) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total = Counts{}
	s.hosts = map[string]*Counts{}
	s.pages = map[string]*Counts{}
	s.misses = map[[2]string]*Miss{}
	s.dropped = 0
}

func (s *stats) add(host, page, target string, miss bool, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, p := s.hosts[host], s.pages[page]
	if h == nil {
		h = &Counts{}
		s.hosts[host] = h
	}
	if p == nil {
		p = &Counts{}
		s.pages[page] = p
	}
	for _, c := range []*Counts{&s.total, h, p} {
		c.Requests++
		c.Bytes += bytes
		if miss {
			c.Misses++
		}
	}
	if !miss {
		return
	}
	k := [2]string{host, target}
	if m, ok := s.misses[k]; ok {
		m.Count++
		return
	}
	if len(s.misses) >= MaxMisses {
		s.dropped++
		return
	}
	s.misses[k] = &Miss{Host: host, Target: target, Page: page, Count: 1}
}

func (s *stats) snapshot() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{Counts: s.total, Hosts: map[string]Counts{}, Pages: map[string]Counts{}, MissesDropped: s.dropped}
	for k, v := range s.hosts {
		out.Hosts[k] = *v
	}
	for k, v := range s.pages {
		out.Pages[k] = *v
	}
	out.MissList = []Miss{}
	for _, m := range s.misses {
		out.MissList = append(out.MissList, *m)
	}
	sort.Slice(out.MissList, func(i, j int) bool {
		a, b := out.MissList[i], out.MissList[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		return a.Target < b.Target
	})
	return out
}
