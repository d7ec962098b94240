package cachepolicy

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"pep/internal/testenv"
)

// fakeClock is a settable clock for Admission.
type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.t.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.t.Add(int64(d)) }

func newTestAdmission(t *testing.T, window time.Duration, items int) (*Admission, *fakeClock) {
	t.Helper()
	clk := &fakeClock{}
	clk.t.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	a, err := NewAdmission(AdmissionOptions{Window: window, Items: items, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return a, clk
}

func TestAdmissionSecondHit(t *testing.T) {
	a, _ := newTestAdmission(t, time.Hour, 1000)
	if !a.FirstSeen("a.test/x.png") {
		t.Error("first request: not first-seen")
	}
	for i := 2; i <= 4; i++ {
		if a.FirstSeen("a.test/x.png") {
			t.Errorf("request %d: first-seen again", i)
		}
	}
	if !a.FirstSeen("a.test/y.png") {
		t.Error("another URL: not first-seen")
	}
}

// TestAdmissionWindow: a URL is remembered for at least one window and
// forgotten after two; one asked for at least once a window is never
// forgotten (carried into the current filter).
func TestAdmissionWindow(t *testing.T) {
	const w = time.Hour
	a, clk := newTestAdmission(t, w, 1000)
	a.FirstSeen("once")
	a.FirstSeen("steady")
	clk.advance(w - time.Second)
	if a.FirstSeen("once") {
		t.Error("forgotten within the window")
	}
	for range 5 {
		clk.advance(w)
		if a.FirstSeen("steady") {
			t.Fatalf("a URL asked for every window was forgotten after %d rotations", a.Rotations())
		}
	}
	if !a.FirstSeen("once") {
		t.Error("remembered after more than two windows")
	}
	if a.Rotations() != 5 {
		t.Errorf("%d rotations, want 5", a.Rotations())
	}
}

// TestAdmissionFullRotates: a filter that took Items URLs rotates before
// the window ends, and the false-positive rate of the full filter stays
// near its design: after the rotation the full filter is the previous
// one, and 5,000 never-seen URLs are asked for against it (the new
// current filter, at most half full, adds about 0.01 %).
func TestAdmissionFullRotates(t *testing.T) {
	const items = 10000
	a, _ := newTestAdmission(t, time.Hour, items)
	// A URL that is a false positive of the filter sets no new bit and is
	// not counted, so filling takes a few more than items URLs.
	filled := 0
	for ; a.Rotations() == 0 && filled < 2*items; filled++ {
		a.FirstSeen(fmt.Sprintf("seen/%d", filled))
	}
	if a.Rotations() != 1 || filled < items {
		t.Fatalf("%d rotations after %d URLs, want 1 after at least %d", a.Rotations(), filled, items)
	}
	fp := 0
	const probes = 5000
	for i := range probes {
		if !a.FirstSeen(fmt.Sprintf("new/%d", i)) {
			fp++
		}
	}
	if a.Rotations() != 1 {
		t.Fatalf("%d rotations during %d probes, want none", a.Rotations()-1, probes)
	}
	// At the designed 1 % the count is binomial(5000, 0.01): 50, standard
	// deviation 7; 2 % is 7 deviations above.
	rate := float64(fp) / probes
	t.Logf("false-positive rate %.4f (%d of %d), designed for %.2f", rate, fp, probes, DefaultFalsePositive)
	if rate > 2*DefaultFalsePositive {
		t.Errorf("false-positive rate %.4f (%d of %d never-seen URLs), designed for %.2f", rate, fp, probes, DefaultFalsePositive)
	}
	// The previous filter's URLs are still seen.
	if a.FirstSeen("seen/1") {
		t.Error("a URL of the previous filter was forgotten at the rotation")
	}
	if got, want := a.FilterBytes(), int64(2*12000); got < want*9/10 || got > want*11/10 {
		t.Errorf("FilterBytes = %d, want about %d (9.6 bits per item, two filters)", got, want)
	}
}

// TestAdmissionConcurrent: many goroutines on the same and distinct URLs
// (run with -race); every URL asked for twice is seen at least once.
func TestAdmissionConcurrent(t *testing.T) {
	a, clk := newTestAdmission(t, time.Hour, 100000)
	var wg sync.WaitGroup
	var first atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				if a.FirstSeen(fmt.Sprintf("u/%d", i)) {
					first.Add(1)
				}
				if g == 0 && i%500 == 0 {
					clk.advance(time.Minute)
				}
			}
		}()
	}
	wg.Wait()
	// 2000 distinct URLs, each asked for 8 times: at most a few racing
	// first requests per URL are first-seen, never all 8.
	if n := first.Load(); n < 1900 || n > 2000*3 {
		t.Errorf("%d first-seen answers for 2000 URLs asked for 8 times each", n)
	}
}

func TestNewAdmissionErrors(t *testing.T) {
	if _, err := NewAdmission(AdmissionOptions{Window: 0, Items: 1}); err == nil {
		t.Error("zero window accepted")
	}
	if _, err := NewAdmission(AdmissionOptions{Window: time.Second, Items: 0}); err == nil {
		t.Error("zero items accepted")
	}
}

func TestPolicyMark(t *testing.T) {
	var nilPolicy *Policy
	u, _ := url.Parse("http://img.test:8080/a.png?x=1")
	if nilPolicy.Mark("GET", u, true).First || nilPolicy.Counts() != (Counts{}) {
		t.Error("a nil Policy marks or counts")
	}
	a, _ := newTestAdmission(t, time.Hour, 1000)
	p := NewPolicy(a, true)
	first := p.Mark("GET", u, false)
	if !first.First {
		t.Error("first GET not marked")
	}
	first.Done()
	if p.Mark("GET", u, false).First {
		t.Error("second GET marked")
	}
	if p.Mark("HEAD", &url.URL{Host: "h.test", Path: "/new"}, false).First {
		t.Error("HEAD marked")
	}
	if p.Mark("GET", &url.URL{Host: "h.test", Path: "/private"}, true).First {
		t.Error("private request marked first-seen")
	}
	if got, want := p.Counts(), (Counts{FirstSeen: 1, Admitted: 1, Private: 1}); got != want {
		t.Errorf("Counts = %+v, want %+v", got, want)
	}
	p.SetAdmission(false)
	if p.Mark("GET", &url.URL{Host: "h.test", Path: "/off"}, false).First || p.AdmissionOn() {
		t.Error("marked with admission switched off")
	}
	if NewPolicy(nil, true).AdmissionOn() {
		t.Error("admission on without an Admission")
	}
	reg := prometheus.NewRegistry()
	if err := p.Register(reg); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "pep_cache_first_seen_total", "pep_cache_private_total", "pep_cache_admission_enabled",
		"pep_cache_held_total", "pep_cache_hold_timeouts_total"); err != nil || n != 5 {
		t.Errorf("registered series: %d, %v", n, err)
	}
}

// TestPolicyHold: requests for a URL whose first-seen request is in
// flight wait for its Done (Policy.Mark says why); 50 requests at once
// for a new URL give exactly one first-seen mark; a request after Done,
// and requests for other URLs, are not held; Done twice is harmless.
func TestPolicyHold(t *testing.T) {
	a, _ := newTestAdmission(t, time.Hour, 1000)
	p := NewPolicy(a, true)
	u := &url.URL{Scheme: "http", Host: "img.test", Path: "/burst.png"}
	tickets := make([]Ticket, 50)
	var wg sync.WaitGroup
	for i := range tickets {
		wg.Add(1)
		go func() { defer wg.Done(); tickets[i] = p.Mark("GET", u, false) }()
	}
	wg.Wait()
	var first Ticket
	n := 0
	for _, tk := range tickets {
		if tk.First {
			first, n = tk, n+1
		}
	}
	if n != 1 {
		t.Fatalf("%d of 50 concurrent requests marked first-seen, want 1", n)
	}
	if first.Wait(context.Background()) {
		t.Error("the first-seen request held itself")
	}
	other := p.Mark("GET", &url.URL{Scheme: "http", Host: "img.test", Path: "/other.png"}, false)
	if !other.First || other.Wait(context.Background()) {
		t.Error("a request for another URL held, or not first-seen")
	}
	released := make(chan time.Time, len(tickets))
	for _, tk := range tickets {
		if !tk.First {
			go func() { tk.Wait(context.Background()); released <- time.Now() }()
		}
	}
	time.Sleep(100 * time.Millisecond)
	if len(released) != 0 {
		t.Fatalf("%d held requests went before the first-seen one's Done", len(released))
	}
	done := time.Now()
	first.Done()
	first.Done()
	for range 49 {
		select {
		case at := <-released:
			if at.Before(done) {
				t.Error("released before Done")
			}
		case <-time.After(testenv.Scale(time.Second)):
			t.Fatal("a held request was not released by Done")
		}
	}
	if p.Mark("GET", u, false).Wait(context.Background()) {
		t.Error("a request after Done was held")
	}
	// A held request whose subscriber goes away stops waiting.
	u2 := &url.URL{Scheme: "http", Host: "img.test", Path: "/slow.png"}
	slow := p.Mark("GET", u2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if !p.Mark("GET", u2, false).Wait(ctx) || time.Since(start) > HoldMax/2 {
		t.Error("a held request did not end with its context")
	}
	slow.Done()
	if c := p.Counts(); c.Held != 50 || c.HoldTimeouts != 0 || c.FirstSeen != 3 {
		t.Errorf("Counts = %+v, want 50 held (49 and the cancelled one), no timeouts, 3 first-seen", c)
	}
}

// TestPolicyHoldMax: a request held behind a first-seen request whose
// response head never comes (no Done) is released by HoldMax, not
// before, and counted as a hold timeout; the first-seen request's late
// Done is harmless and a later request for the URL is not held.
func TestPolicyHoldMax(t *testing.T) {
	testenv.Log(t)
	a, _ := newTestAdmission(t, time.Hour, 1000)
	p := NewPolicy(a, true)
	u := &url.URL{Scheme: "http", Host: "img.test", Path: "/stuck.png"}
	first := p.Mark("GET", u, false)
	if !first.First {
		t.Fatal("first request not first-seen")
	}
	held := p.Mark("GET", u, false)
	start := time.Now()
	done := make(chan bool, 1)
	go func() { done <- held.Wait(context.Background()) }()
	select {
	case wasHeld := <-done:
		waited := time.Since(start)
		if !wasHeld {
			t.Fatal("the second request was not held")
		}
		if waited < HoldMax {
			t.Errorf("released after %s without Done, want HoldMax (%s)", waited, HoldMax)
		}
		t.Logf("released by HoldMax after %s", waited.Round(time.Millisecond))
	case <-time.After(HoldMax + testenv.Scale(2*time.Second)):
		t.Fatalf("still held %s after its first-seen request stalled (HoldMax %s)", time.Since(start).Round(time.Millisecond), HoldMax)
	}
	if c := p.Counts(); c.Held != 1 || c.HoldTimeouts != 1 {
		t.Errorf("Counts = %+v, want 1 held, 1 hold timeout", c)
	}
	first.Done()
	if p.Mark("GET", u, false).Wait(context.Background()) {
		t.Error("a request after the late Done was held")
	}
	if c := p.Counts(); c.HoldTimeouts != 1 {
		t.Errorf("hold timeouts %d after the late Done, want 1", c.HoldTimeouts)
	}
}

func TestKey(t *testing.T) {
	u, _ := url.Parse("http://img.test:8080/a%20b.png?x=1")
	if got, want := Key(u), "img.test:8080/a%20b.png?x=1"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
}

func BenchmarkFirstSeen(b *testing.B) {
	a, err := NewAdmission(AdmissionOptions{Window: time.Hour, Items: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("img%d.cdn.test/images/%d/photo.jpg", i%50, i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a.FirstSeen(keys[i%len(keys)])
	}
}
