package optimize

import (
	"bytes"
	"crypto/sha256"
	"image/gif"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"pep/internal/testenv"
)

// thumbs returns the cnn page's five 140x79 JPEG thumbnails (the default
// corpus): distinct real bodies of one format, to teach the backlog.
func thumbs(t *testing.T) map[string][]byte {
	t.Helper()
	dir := "../../testbed/corpus/default/site/cnn/i.cnn.net/cnn/2004/TECH/space/05/17"
	out := map[string][]byte{}
	for _, n := range []string{"t1.deep.field.jpg", "t1.galaxies.jpg", "t1.helmet.jpg", "t1.liftoff.jpg", "t1.shuttle.jpg"} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out["/"+n] = b
	}
	return out
}

// waitResult waits until the optimizer keeps the result of transform t of
// body (a transform that went on behind its response, for the next miss).
func waitResult(t *testing.T, w *serverWorld, transform string, body []byte) {
	t.Helper()
	sum := sha256.Sum256(body)
	for end := time.Now().Add(testenv.Scale(20 * time.Second)); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := w.s.results.get(transform + string(sum[:])); ok {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the %s transform behind the response never kept its result", transform)
		}
	}
}

// TestSize: the units a transform's work is estimated in, from the
// header alone: pixels for JPEG, PNG and GIF, bytes for text; a header Go
// cannot read gives none.
func TestSize(t *testing.T) {
	for _, c := range []struct {
		kind, file, format string
		units              int64
	}{
		{"image", "photo.jpg", "jpeg", 451 * 300},
		{"image", "palette.png", "png", 0},
		{"image", "animated.gif", "gif", 0},
		{"image", "corrupt.jpg", "jpeg", 451 * 300}, // truncated after a whole header: sized
	} {
		body := readTestdata(t, c.file)
		format, units, ok := size(c.kind, body)
		if c.format == "" {
			if ok {
				t.Errorf("%s: %s %d, want no size", c.file, format, units)
			}
			continue
		}
		if !ok || format != c.format || units <= 0 || c.units > 0 && units != c.units {
			t.Errorf("%s: %q %d %v, want %q %d pixels", c.file, format, units, ok, c.format, c.units)
		}
	}
	if f, u, ok := size("image", []byte("GIF89a")); ok {
		t.Errorf("a GIF signature without a header: %q %d, want no size", f, u)
	}
	if f, u, ok := size("text", []byte("body { color: red }")); !ok || f != "text" || u != 19 {
		t.Errorf("text: %q %d %v, want text 19", f, u, ok)
	}
}

// TestCostLine: the backlog's cost line recovers a fixed cost plus a
// cost per pixel, so that a large image is not predicted from the cost
// per pixel of the many small ones (the first cut of the backlog, a cost
// per pixel, predicted 100 ms photographs at seconds), and it follows a
// machine that slows down.
func TestCostLine(t *testing.T) {
	var c formatCost
	// 10 ms + 1 µs per pixel: mostly icons, a few photographs.
	for i := range 40 {
		px := 1000.0
		if i%10 == 9 {
			px = 100_000
		}
		c.add(px, float64(10*time.Millisecond)+px*1000)
	}
	for _, x := range []float64{1000, 100_000, 1_000_000} {
		want := float64(10*time.Millisecond) + x*1000
		if got := c.predict(x); got < 0.9*want || got > 1.1*want {
			t.Errorf("predict(%v px) = %v, want %v", x, time.Duration(got), time.Duration(want))
		}
	}
	// The machine gets 3x slower: the line follows within 60 transforms.
	for i := range 60 {
		px := 1000.0 + float64(i%3)*50_000
		c.add(px, 3*(float64(10*time.Millisecond)+px*1000))
	}
	if got, want := c.predict(100_000), 3*float64(110*time.Millisecond); got < 0.8*want || got > 1.2*want {
		t.Errorf("after slowing down: predict(100000 px) = %v, want about %v", time.Duration(got), time.Duration(want))
	}
	// One size only: the mean time.
	var one formatCost
	for range 5 {
		one.add(500, float64(7*time.Millisecond))
	}
	if got := one.predict(50_000); time.Duration(got) != 7*time.Millisecond {
		t.Errorf("one size: predict = %v, want the mean 7ms", time.Duration(got))
	}
}

// TestServerBacklog: a response whose transform the backlog predicts to
// finish after the deadline is served at once, untransformed and marked
// Pep-Deferred, and its transform still runs for the next miss; with
// DeferLate the same response waits the whole deadline. The cost per
// pixel is learned from real transforms first (the estimate is known
// only after minSamples of them).
func TestServerBacklog(t *testing.T) {
	photo := readTestdata(t, "photo.jpg")
	bodies := thumbs(t)
	handlers := map[string]http.HandlerFunc{"/photo.jpg": serveBytes(TypeJPEG, photo)}
	for p, b := range bodies {
		handlers[p] = serveBytes(TypeJPEG, b)
	}

	t.Run("learned", func(t *testing.T) {
		w := startServerWorld(t, Options{Workers: 1, Deadline: testenv.Scale(time.Minute)}, handlers)
		n := 0
		for p := range bodies {
			if _, known := w.s.webp.backlog.estimate("jpeg", 451*300); known != (n >= minSamples) {
				t.Fatalf("after %d transforms: known %v", n, known)
			}
			if resp, _, err := w.get(t, p); err != nil || resp.Header.Get("Content-Type") != TypeWebP {
				t.Fatalf("%s: %v %v, want WebP", p, resp, err)
			}
			n++
		}
		work, known := w.s.webp.backlog.estimate("jpeg", 451*300)
		if !known || work <= 0 {
			t.Fatalf("after %d JPEG transforms: estimate %v known %v, want a positive estimate", n, work, known)
		}
		// Every transform has ended: nothing is predicted ahead.
		if q := testutil.ToFloat64(w.m.backlog.WithLabelValues("webp")); q > 1e-6 || q < -1e-6 {
			t.Errorf("backlog_seconds = %v after every transform ended, want 0", q)
		}
		if got := w.skipped(SkipBacklog); got != 0 {
			t.Errorf("skipped{backlog} = %v on an idle optimizer, want 0", got)
		}
		if r := testutil.ToFloat64(w.m.busy); r != 0 {
			t.Errorf("running = %v after every transform ended, want 0", r)
		}
	})

	// An animated GIF is learned at its pixels times its frames
	// (frameUnits): panGIF's 4 frames of 320x240, one sample on the GIF
	// cost line; a still GIF at its pixels.
	t.Run("animated", func(t *testing.T) {
		anim := panGIF(t)
		g, err := gif.DecodeAll(bytes.NewReader(anim))
		if err != nil {
			t.Fatal(err)
		}
		var still bytes.Buffer // the first frame alone
		if err := gif.Encode(&still, g.Image[0], nil); err != nil {
			t.Fatal(err)
		}
		w := startServerWorld(t, Options{Workers: 1, Deadline: testenv.Scale(time.Minute)},
			map[string]http.HandlerFunc{"/pan.gif": serveBytes(TypeGIF, anim), "/still.gif": serveBytes(TypeGIF, still.Bytes())})
		learned := func() float64 {
			w.s.webp.backlog.mu.Lock()
			defer w.s.webp.backlog.mu.Unlock()
			if c := w.s.webp.backlog.costs["gif"]; c != nil {
				return c.x
			}
			return 0
		}
		if resp, _, err := w.get(t, "/pan.gif"); err != nil || resp.Header.Get("Content-Type") != TypeWebP {
			t.Fatalf("pan.gif: %v %v, want an animated WebP", resp, err)
		}
		if got := learned(); got != 320*240*4 {
			t.Errorf("learned %v units from a 4-frame 320x240 GIF, want %d (pixels x frames)", got, 320*240*4)
		}
		before := learned()
		w.get(t, "/still.gif")
		if got := learned() - before*(1-costWeight); got < 320*240-1e-3 || got > 320*240+1e-3 {
			t.Errorf("learned %v units from a still 320x240 GIF, want %d", got, 320*240)
		}
	})

	// teach makes the backlog's JPEG cost line 1 s per pixel: every JPEG
	// is predicted far past any deadline, whatever this machine's speed.
	teach := func(w *serverWorld) {
		for i := range minSamples {
			w.s.webp.backlog.learn("jpeg", int64(1+i%2), time.Duration(1+i%2)*time.Second)
		}
	}

	t.Run("predicted late", func(t *testing.T) {
		deadline := testenv.Scale(10 * time.Second)
		w := startServerWorld(t, Options{Workers: 1, Deadline: deadline}, handlers)
		teach(w)
		free := w.s.webp.occupy(1, 0) // the one worker busy
		start := time.Now()
		resp, b, err := w.get(t, "/photo.jpg")
		took := time.Since(start)
		if err != nil || resp.Header.Get("Content-Type") != TypeJPEG || !bytes.Equal(b, photo) || resp.Header.Get(DeferredHeader) != "webp" {
			free()
			t.Fatalf("%v %v: %q %s=%q, want the origin's JPEG marked deferred", resp, err, resp.Header.Get("Content-Type"), DeferredHeader, resp.Header.Get(DeferredHeader))
		}
		if took >= deadline {
			t.Errorf("served after %v, want at once (deadline %v)", took, deadline)
		}
		if got, late := w.skipped(SkipBacklog), w.skipped(SkipDeferred); got != 1 || late != 0 {
			t.Errorf("skipped{backlog} = %v, {deferred} = %v; want 1, 0", got, late)
		}
		// The transform was queued all the same: once the worker is free
		// it runs, and the next miss gets its WebP without a transform.
		free()
		waitResult(t, w, "webp", photo)
		if resp, _, err := w.get(t, "/photo.jpg"); err != nil || resp.Header.Get("Content-Type") != TypeWebP {
			t.Errorf("next miss: %v %v, want the WebP", resp, err)
		}
	})

	// A transform predicted late waits for the next miss behind every
	// transform a response waits for: its work is not counted ahead of a
	// thumbnail's (which would then be predicted late too, and so on for
	// the rest of the page), and the thumbnail starts first.
	t.Run("next miss behind", func(t *testing.T) {
		deadline := testenv.Scale(10 * time.Second)
		w := startServerWorld(t, Options{Workers: 1, Deadline: deadline}, handlers)
		const thumb = "/t1.helmet.jpg"
		_, photoPx, _ := size("image", photo)
		_, thumbPx, _ := size("image", bodies[thumb])
		if photoPx < 4*thumbPx {
			t.Fatalf("photo %d px, thumbnail %d: want the photo 4 times larger (a cost line with no negative intercept)", photoPx, thumbPx)
		}
		for i := range minSamples { // the photo at twice the deadline, the thumbnail at half of it
			if i%2 == 0 {
				w.s.webp.backlog.learn("jpeg", photoPx, 2*deadline)
			} else {
				w.s.webp.backlog.learn("jpeg", thumbPx, deadline/2)
			}
		}
		free := w.s.webp.occupy(1, 0)
		resp, _, err := w.get(t, "/photo.jpg")
		if err != nil || resp.Header.Get(DeferredHeader) != "webp" || w.skipped(SkipBacklog) != 1 {
			free()
			t.Fatalf("photo: %v %v, skipped{backlog} %v: want the JPEG at once, marked deferred", resp, err, w.skipped(SkipBacklog))
		}
		type got struct {
			resp *http.Response
			err  error
		}
		done := make(chan got, 1)
		go func() {
			resp, _, err := w.get(t, thumb)
			done <- got{resp, err}
		}()
		for end := time.Now().Add(testenv.Scale(10 * time.Second)); ; time.Sleep(time.Millisecond) {
			w.s.webp.mu.Lock()
			n := len(w.s.webp.waiting)
			w.s.webp.mu.Unlock()
			if n == 2 {
				break
			}
			if time.Now().After(end) {
				free()
				t.Fatalf("%d transforms waiting, want the photo's and the thumbnail's (the thumbnail predicted late?)", n)
			}
		}
		free()
		g := <-done
		if g.err != nil || g.resp.Header.Get("Content-Type") != TypeWebP {
			t.Fatalf("thumbnail: %v %v, want its WebP within the deadline", g.resp, g.err)
		}
		if n := w.skipped(SkipBacklog); n != 1 {
			t.Errorf("skipped{backlog} = %v, want 1 (the photo alone)", n)
		}
		waitResult(t, w, "webp", photo)
	})

	// With QuickQuality, a response the backlog turns away gets one
	// encode in the quick pool, never behind the searches (here the one
	// WebP worker stays busy): the quick WebP, marked deferred (Squid does
	// not store it); the search goes on, and the next miss gets its
	// result, stored.
	t.Run("quick", func(t *testing.T) {
		deadline := testenv.Scale(10 * time.Second)
		w := startServerWorld(t, Options{Workers: 1, Deadline: deadline, QuickQuality: DefaultQuickQuality}, handlers)
		teach(w)
		free := w.s.webp.occupy(1, 0)
		resp, body, err := w.get(t, "/photo.jpg")
		free()
		if err != nil || resp.Header.Get("Content-Type") != TypeWebP || resp.Header.Get(DeferredHeader) != "webp" {
			t.Fatalf("%v %v: want the quick WebP marked deferred", resp, err)
		}
		if s := measured(t, photo, body); s < DefaultTarget {
			t.Errorf("quick WebP: SSIM %.4f, want >= %.2f", s, DefaultTarget)
		}
		if n, b := testutil.ToFloat64(w.m.quicks.WithLabelValues(QuickServed)), w.skipped(SkipBacklog); n != 1 || b != 0 {
			t.Errorf("quick_total{served} = %v, skipped{backlog} = %v; want 1, 0", n, b)
		}
		waitResult(t, w, "webp", photo)
		resp, b, err := w.get(t, "/photo.jpg")
		if err != nil || resp.Header.Get("Content-Type") != TypeWebP || resp.Header.Get(DeferredHeader) != "" || len(b) > len(body) {
			t.Errorf("next miss: %v %v, %d bytes (quick %d): want the search's WebP, stored, no larger", resp, err, len(b), len(body))
		}
	})

	// The quick encode's own cost predicted past the wait: the original
	// at once, as without it.
	t.Run("quick late", func(t *testing.T) {
		deadline := testenv.Scale(10 * time.Second)
		w := startServerWorld(t, Options{Workers: 1, Deadline: deadline, QuickQuality: DefaultQuickQuality}, handlers)
		teach(w)
		for i := range minSamples {
			w.s.quickPool.backlog.learn("jpeg", int64(1+i%2), time.Duration(1+i%2)*time.Second)
		}
		free := w.s.webp.occupy(1, 0)
		defer free()
		freeQuick := w.s.quickPool.occupy(1, 0)
		defer freeQuick()
		resp, b, err := w.get(t, "/photo.jpg")
		if err != nil || !bytes.Equal(b, photo) || resp.Header.Get(DeferredHeader) != "webp" {
			t.Fatalf("%v %v: want the origin's JPEG marked deferred", resp, err)
		}
		if n, b := testutil.ToFloat64(w.m.quicks.WithLabelValues(QuickLate)), w.skipped(SkipBacklog); n != 1 || b != 1 {
			t.Errorf("quick_total{late} = %v, skipped{backlog} = %v; want 1, 1", n, b)
		}
	})

	t.Run("defer late", func(t *testing.T) {
		deadline := testenv.Scale(time.Second)
		w := startServerWorld(t, Options{Workers: 1, Deadline: deadline, DeferLate: true}, handlers)
		teach(w)
		free := w.s.webp.occupy(1, 0)
		start := time.Now()
		resp, _, err := w.get(t, "/photo.jpg")
		took := time.Since(start)
		free()
		if err != nil || resp.Header.Get("Content-Type") != TypeJPEG || resp.Header.Get(DeferredHeader) != "webp" {
			t.Fatalf("%v %v, want the origin's JPEG marked deferred", resp, err)
		}
		if took < deadline {
			t.Errorf("served after %v, want the whole deadline %v", took, deadline)
		}
		if got, late := w.skipped(SkipBacklog), w.skipped(SkipDeferred); got != 0 || late != 1 {
			t.Errorf("skipped{backlog} = %v, {deferred} = %v; want 0, 1", got, late)
		}
	})
}

// TestServerTextBesideImages: a stylesheet's gzip does not wait behind the
// image transcodes: with every WebP worker busy it is still gzipped within
// the deadline (sharing the images' pool, it would wait the whole minute
// and come back deferred).
func TestServerTextBesideImages(t *testing.T) {
	css := bytes.Repeat([]byte("body { margin: 0; padding: 0; color: #333 }\n"), 200)
	w := startServerWorld(t, Options{Workers: 1, Deadline: testenv.Scale(time.Minute)},
		map[string]http.HandlerFunc{"/site.css": serveBytes("text/css", css)})
	defer w.s.webp.occupy(1, 0)() // the one WebP worker busy
	resp, b, err := w.get(t, "/site.css")
	if err != nil || resp.Header.Get("Content-Encoding") != "gzip" || len(b) >= len(css) || resp.Header.Get(DeferredHeader) != "" {
		t.Fatalf("%v %v: Content-Encoding %q, %d of %d bytes, %s %q; want it gzipped at once",
			resp, err, resp.Header.Get("Content-Encoding"), len(b), len(css), DeferredHeader, resp.Header.Get(DeferredHeader))
	}
}

// TestServerWait: a response's wait is Deadline unless LinkDeadline is
// above it and the subscriber's rate is known; then the time its link
// needs for the subscriber's responses waiting and this one, within
// [Deadline, LinkDeadline]; another subscriber's do not count, and a
// response that left counts no more.
func TestServerWait(t *testing.T) {
	s := &Server{o: Options{Deadline: 100 * time.Millisecond, LinkDeadline: 2 * time.Second}, links: map[string]int64{}}
	for _, tc := range []struct {
		rate uint64
		n    int
		want time.Duration
	}{
		{0, 1 << 20, 100 * time.Millisecond},         // no rate: the deadline
		{200_000, 10_000, 100 * time.Millisecond},    // 50 ms on the link: the deadline
		{200_000, 100_000, 500 * time.Millisecond},   // 3G, 100 kB: its transfer time
		{200_000, 1_000_000, 2 * time.Second},        // 5 s on the link: LinkDeadline
		{1_500_000, 100_000, 100 * time.Millisecond}, // LTE: the deadline
		{10_000, 16_000, 1600 * time.Millisecond},    // a congested cell, a 16 kB image
	} {
		got, leave := s.wait(tc.rate, "a", tc.n)
		leave()
		if got != tc.want {
			t.Errorf("wait(%d B/s, %d B) = %v, want %v", tc.rate, tc.n, got, tc.want)
		}
	}
	// A page's images at once: each waits for the link to carry those
	// before it and itself.
	var leaves []func()
	for i, want := range []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond} {
		got, leave := s.wait(200_000, "a", 10_000)
		leaves = append(leaves, leave)
		if got != want {
			t.Errorf("image %d of subscriber a: wait %v, want %v", i+1, got, want)
		}
	}
	if got, leave := s.wait(200_000, "b", 10_000); got != 100*time.Millisecond {
		t.Errorf("subscriber b beside a's 4 images: wait %v, want the deadline", got)
	} else {
		leave()
	}
	for _, leave := range leaves {
		leave()
	}
	if len(s.links) != 0 {
		t.Errorf("after every response left: %v, want nothing waiting", s.links)
	}
	s.o.LinkDeadline = 0
	if got, _ := s.wait(10_000, "a", 1<<20); got != 100*time.Millisecond {
		t.Errorf("LinkDeadline 0: wait %v, want the deadline", got)
	}

	// LinkFloor: a fast link shortens the wait, down to the floor; a slow
	// one keeps the deadline (and LinkDeadline still lengthens it).
	for _, tc := range []struct {
		linkDeadline time.Duration
		rate         uint64
		n            int
		want         time.Duration
	}{
		{0, 0, 20_000, 100 * time.Millisecond},                      // no rate: the deadline
		{0, 1_500_000, 30_000, 20 * time.Millisecond},               // LTE, 30 kB: its transfer time
		{0, 1_500_000, 3_000, 10 * time.Millisecond},                // LTE, 3 kB: 2 ms on the link, the floor
		{0, 200_000, 10_000, 50 * time.Millisecond},                 // 3G, 10 kB
		{0, 200_000, 100_000, 100 * time.Millisecond},               // 3G, 100 kB: the deadline, no LinkDeadline
		{2 * time.Second, 200_000, 100_000, 500 * time.Millisecond}, // with LinkDeadline: its transfer time
	} {
		s := &Server{o: Options{Deadline: 100 * time.Millisecond, LinkDeadline: tc.linkDeadline, LinkFloor: 10 * time.Millisecond}, links: map[string]int64{}}
		got, leave := s.wait(tc.rate, "a", tc.n)
		leave()
		if got != tc.want {
			t.Errorf("LinkFloor 10ms, LinkDeadline %v: wait(%d B/s, %d B) = %v, want %v", tc.linkDeadline, tc.rate, tc.n, got, tc.want)
		}
	}
	// The floor at or above the deadline does nothing.
	s = &Server{o: Options{Deadline: 100 * time.Millisecond, LinkFloor: 100 * time.Millisecond}, links: map[string]int64{}}
	if got, _ := s.wait(1_500_000, "a", 3_000); got != 100*time.Millisecond {
		t.Errorf("LinkFloor = Deadline: wait %v, want the deadline", got)
	}
}

// TestServerLinkDeadline: with the transform held up past Deadline, a
// request whose subscriber's link is slow (LinkRateHeader: the photo takes
// seconds on it) waits and gets the WebP (and counts as waiting no more
// once served), one on a fast link is served the
// original at Deadline (before it with LinkFloor), and without
// LinkDeadline the slow link's waits Deadline too.
func TestServerLinkDeadline(t *testing.T) {
	photo := readTestdata(t, "photo.jpg")
	handlers := map[string]http.HandlerFunc{"/photo.jpg": serveBytes(TypeJPEG, photo)}
	deadline, hold := testenv.Scale(200*time.Millisecond), testenv.Scale(600*time.Millisecond)
	slow := uint64(float64(len(photo)) / testenv.Scale(5*time.Second).Seconds()) // the photo takes 5 s
	fast := uint64(len(photo)) * 100                                             // 10 ms
	for _, tc := range []struct {
		name                    string
		linkDeadline, linkFloor time.Duration
		rate                    uint64
		wantWebP                bool
	}{
		{"slow link", testenv.Scale(20 * time.Second), 0, slow, true},
		{"fast link", testenv.Scale(20 * time.Second), 0, fast, false},
		{"fast link, link_floor", testenv.Scale(20 * time.Second), deadline / 10, fast, false},
		{"slow link, no link_deadline", 0, 0, slow, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := startServerWorld(t, Options{Workers: 1, Deadline: deadline, LinkDeadline: tc.linkDeadline, LinkFloor: tc.linkFloor, DeferLate: true}, handlers)
			free := w.s.webp.occupy(1, 0) // the one worker busy for hold
			released := make(chan struct{})
			go func() { time.Sleep(hold); free(); close(released) }()
			defer func() { <-released }()
			req, _ := http.NewRequest("GET", w.base+"/photo.jpg", nil)
			req.Header.Set(MarkHeader, "1")
			req.Header.Set(LinkRateHeader, strconv.FormatUint(tc.rate, 10)+" 9f86d081884c7d65")
			req.Header.Set("Accept", "image/avif,image/webp,image/apng,image/*,*/*;q=0.8")
			start := time.Now()
			resp, err := w.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			took := time.Since(start)
			gotWebP := resp.Header.Get("Content-Type") == TypeWebP
			if gotWebP != tc.wantWebP {
				t.Fatalf("%s after %v (%s %q), want WebP %v", resp.Header.Get("Content-Type"), took, DeferredHeader, resp.Header.Get(DeferredHeader), tc.wantWebP)
			}
			if tc.wantWebP && took < hold {
				t.Errorf("the WebP after %v, before the worker was free (%v)", took, hold)
			}
			switch {
			case tc.wantWebP:
			case tc.linkFloor > 0 && took >= deadline:
				t.Errorf("the original after %v, want before the deadline %v (link_floor %v)", took, deadline, tc.linkFloor)
			case tc.linkFloor == 0 && (took < deadline || took >= hold):
				t.Errorf("the original after %v, want at the deadline %v", took, deadline)
			}
			if got, want := testutil.ToFloat64(w.m.linkWaits), map[bool]float64{true: 1}[tc.wantWebP]; got != want {
				t.Errorf("link_waits_total = %v, want %v", got, want)
			}
			if got, want := testutil.ToFloat64(w.m.linkShortWaits), map[bool]float64{true: 1}[tc.linkFloor > 0]; got != want {
				t.Errorf("link_short_waits_total = %v, want %v", got, want)
			}
			w.s.linksMu.Lock()
			if len(w.s.links) != 0 {
				t.Errorf("served, yet waiting: %v", w.s.links)
			}
			w.s.linksMu.Unlock()
		})
	}
}
