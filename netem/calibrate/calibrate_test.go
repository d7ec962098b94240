package calibrate

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"pep/netem"
)

func TestBinomialBound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		q      float64
		lo, hi float64
	}{
		{"no loss allows none", 100, 0, 0, 0},
		// 2000*0.0396 = 79.2, sd = sqrt(79.2*0.9604) = 8.72, 2.576 sd = 22.47:
		// [floor(79.2-22.47-0.5), ceil(79.2+22.47+0.5)] = [56, 103].
		{"2% each way over 2000", 2000, 0.0396, 56, 103},
		{"lower bound clipped at 0", 10, 0.01, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := binomialBound(tc.n, tc.q)
			if lo != tc.lo || hi != tc.hi {
				t.Fatalf("binomialBound(%d, %v) = [%v, %v], want [%v, %v]", tc.n, tc.q, lo, hi, tc.lo, tc.hi)
			}
		})
	}
}

func TestSlope(t *testing.T) {
	// 1000 bytes per second with a burst of 500 held back at the start.
	x := []float64{0, 1, 2, 3, 4, 5}
	y := []float64{0, 1000, 2000, 3000, 4000, 5000}
	if got := slope(x, y); got != 1000 {
		t.Fatalf("slope = %v, want 1000", got)
	}
}

// TestCalibrateQuick is the calibration subset of "make test": the paper's
// average cell (RTT, loss, rate both ways) and a lossy HTTP/2-Advance grid
// point, end to end through the emulator in namespaces. Needs root.
func TestCalibrateQuick(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces); run: sudo go test ./netem/calibrate")
	}
	if testing.Short() {
		t.Skip("calibration takes about 15 s; skipped with -short")
	}
	restore, err := netem.Renice(-10)
	defer restore()
	if err != nil {
		t.Logf("renice: %v", err)
	}
	log := slog.New(slog.NewTextHandler(tWriter{t}, nil))
	rs, err := Run(context.Background(), Config{Profiles: Quick, Quick: true, Logger: log, Seed: 42})
	var b bytes.Buffer
	if werr := WriteTable(&b, rs); werr != nil {
		t.Fatal(werr)
	}
	t.Logf("calibration:\n%s", b.String())
	if err != nil {
		t.Fatal(err)
	}
	metrics := map[string]bool{}
	for _, r := range rs {
		metrics[r.Profile+" "+r.Metric] = true
	}
	for _, want := range []string{"paper-average rtt", "paper-average loss", "paper-average payload rate down",
		"paper-average payload rate up", "h2a-rtt100-loss2 rtt", "h2a-rtt100-loss2 loss"} {
		if !metrics[want] {
			t.Errorf("no %q check in the results", want)
		}
	}
	if !Passed(rs) {
		t.Fatalf("calibration outside tolerance:\n%s", b.String())
	}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
