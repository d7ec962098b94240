package cachepolicy

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// FirstHeader is the request header pepd adds to a request whose URL it
// has not seen within the admission window (Admission.FirstSeen);
// configs/squid.conf matches it (`store_miss deny pep_first`: the miss is
// served but not stored) and removes it before the origin.
const FirstHeader = "Pep-First"

// AdmissionOff and AdmissionSecondHit are the values of config
// cache.admission.
const (
	// AdmissionOff stores every cacheable miss, as Squid decides alone.
	AdmissionOff = "off"
	// AdmissionSecondHit stores a miss only when its URL was asked for
	// before within the window (CacheSifter, seed 001: most cached objects
	// are never read again; do not write them).
	AdmissionSecondHit = "second-hit"
)

// DefaultFalsePositive is the false-positive rate each Bloom filter of an
// Admission is sized for at AdmissionOptions.Items URLs: the share of
// first-seen URLs taken for seen (stored at once, as without admission).
const DefaultFalsePositive = 0.01

// AdmissionOptions configure NewAdmission.
type AdmissionOptions struct {
	// Window is how long a URL is remembered: a second request within
	// Window of the first is always admitted, one more than 2*Window
	// later never (two rotating filters; between the two it depends on
	// when the filters rotated). Config cache.window. Must be positive.
	Window time.Duration
	// Items is the number of distinct URLs one filter holds at
	// DefaultFalsePositive (config cache.filter_items). A filter that has
	// taken Items new URLs rotates before Window is over, so the false
	// positive rate stays bounded under load and the window shrinks
	// instead. Memory: about 1.2 bytes per item per filter, two filters.
	// Must be at least 1.
	Items int
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Admission is the second-hit filter of config cache.admission
// second-hit: two Bloom filters (Bloom 1970, "Space/time trade-offs in
// hash coding with allowable errors"; k positions by double hashing,
// Kirsch and Mitzenmacher 2006) over request URLs, the current one and
// the one before it, rotated every Window. A URL found in neither is
// first-seen. Lookups and inserts are lock-free (atomic bit sets); a
// rotation takes a mutex. It is safe for concurrent use.
type Admission struct {
	window time.Duration
	items  int64
	m, k   uint64
	now    func() time.Time
	seed1  maphash.Seed
	seed2  maphash.Seed

	gen atomic.Pointer[generation]
	mu  sync.Mutex // rotations

	rotations atomic.Int64
}

// generation is a pair of filters and when the current one started.
type generation struct {
	cur, prev *bloom
	born      time.Time
}

// bloom is one Bloom filter of m bits; added counts the URLs that set at
// least one new bit (distinct URLs, up to false positives).
type bloom struct {
	bits  []atomic.Uint64
	added atomic.Int64
}

// NewAdmission builds the filter pair. Errors: a non-positive window or
// item count.
func NewAdmission(o AdmissionOptions) (*Admission, error) {
	if o.Window <= 0 {
		return nil, fmt.Errorf("cachepolicy: admission window %v must be positive", o.Window)
	}
	if o.Items < 1 {
		return nil, errors.New("cachepolicy: admission filter items must be at least 1")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	// Optimal size for n items at false-positive rate p: m = -n ln p /
	// (ln 2)^2 bits, k = (m/n) ln 2 hash functions.
	n := float64(o.Items)
	m := uint64(math.Ceil(-n * math.Log(DefaultFalsePositive) / (math.Ln2 * math.Ln2)))
	m = (m + 63) &^ 63
	k := uint64(math.Max(1, math.Round(float64(m)/n*math.Ln2)))
	a := &Admission{window: o.Window, items: int64(o.Items), m: m, k: k, now: o.Now,
		seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed()}
	a.gen.Store(&generation{cur: a.newBloom(), prev: a.newBloom(), born: o.Now()})
	return a, nil
}

func (a *Admission) newBloom() *bloom { return &bloom{bits: make([]atomic.Uint64, a.m/64)} }

// FilterBytes is the memory of the two filters, in bytes.
func (a *Admission) FilterBytes() int64 { return int64(2 * a.m / 8) }

// Rotations counts the filter rotations since NewAdmission.
func (a *Admission) Rotations() int64 { return a.rotations.Load() }

// FirstSeen records key (a request URL) and reports whether it was not
// seen within the window before: true means the request is marked with
// FirstHeader and its miss is not stored. A URL seen in the previous
// filter is carried into the current one, so a URL asked for at least
// once a Window is never forgotten.
func (a *Admission) FirstSeen(key string) bool {
	g := a.generation()
	h1 := maphash.String(a.seed1, key)
	h2 := maphash.String(a.seed2, key) | 1 // odd: every position differs
	inPrev := g.prev.test(h1, h2, a.m, a.k)
	newBits := g.cur.add(h1, h2, a.m, a.k)
	if newBits {
		g.cur.added.Add(1)
	}
	return newBits && !inPrev
}

// generation returns the current filter pair, rotating it first when the
// window is over or the current filter is full.
func (a *Admission) generation() *generation {
	g := a.gen.Load()
	now := a.now()
	if now.Sub(g.born) < a.window && g.cur.added.Load() < a.items {
		return g
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	g = a.gen.Load()
	if now.Sub(g.born) < a.window && g.cur.added.Load() < a.items {
		return g // another request rotated
	}
	g = &generation{cur: a.newBloom(), prev: g.cur, born: now}
	a.gen.Store(g)
	a.rotations.Add(1)
	return g
}

// test reports whether all k positions of (h1, h2) are set.
func (b *bloom) test(h1, h2, m, k uint64) bool {
	for i := uint64(0); i < k; i++ {
		pos := (h1 + i*h2) % m
		if b.bits[pos/64].Load()&(1<<(pos%64)) == 0 {
			return false
		}
	}
	return true
}

// add sets the k positions of (h1, h2) and reports whether any was unset.
func (b *bloom) add(h1, h2, m, k uint64) bool {
	set := false
	for i := uint64(0); i < k; i++ {
		pos := (h1 + i*h2) % m
		bit := uint64(1) << (pos % 64)
		if b.bits[pos/64].Or(bit)&bit == 0 {
			set = true
		}
	}
	return set
}

// Key is the admission key of a request for target: its host[:port] and
// request-URI, as Squid's store key names the object (scheme and method
// aside: only GET is marked).
func Key(target *url.URL) string {
	return target.Host + target.RequestURI()
}
