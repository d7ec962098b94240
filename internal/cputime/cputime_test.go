package cputime

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestOfSelf: the CPU time read for this process grows with work done and
// agrees with getrusage(2) to within two clock ticks.
func TestOfSelf(t *testing.T) {
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	r0 := rusage()
	// Spin until getrusage says 200 ms of CPU were used (on a loaded
	// machine that takes longer than 200 ms of wall time), at most 10 s.
	for x, start := 0, time.Now(); rusage()-r0 < 200*time.Millisecond && time.Since(start) < 10*time.Second; {
		for range 100000 {
			x = x*x + 1
		}
	}
	after, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	r1 := rusage()
	if r1-r0 < 50*time.Millisecond {
		t.Skipf("the machine gave this process %v of CPU in 10 s: too loaded to compare", r1-r0)
	}
	// /proc counts in clock ticks (10 ms): two ticks each way of slack,
	// more on the late side (getrusage is read after Of).
	if d := (after - before) - (r1 - r0); d < -30*time.Millisecond || d > 30*time.Millisecond {
		t.Errorf("Of grew %v while getrusage grew %v", after-before, r1-r0)
	}
	if d := r1 - after; d < -20*time.Millisecond || d > 70*time.Millisecond {
		t.Errorf("Of = %v, getrusage = %v", after, r1)
	}
}

func TestOfGone(t *testing.T) {
	if _, err := Of(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
