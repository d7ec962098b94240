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
	before, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for x, start := 0, time.Now(); time.Since(start) < 200*time.Millisecond; x++ {
		_ = x * x
	}
	after, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 100*time.Millisecond {
		t.Errorf("200 ms of spinning counted as %v", after-before)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	r := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if d := r - after; d < -20*time.Millisecond || d > 70*time.Millisecond {
		t.Errorf("Of = %v, getrusage = %v", after, r)
	}
}

func TestOfGone(t *testing.T) {
	if _, err := Of(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
