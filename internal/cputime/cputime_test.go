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

// TestSplit: user and system time apart, each agreeing with getrusage(2)
// to within three clock ticks, over work that spins in user space and
// then writes to /dev/null (system time).
func TestSplit(t *testing.T) {
	rusage := func() (time.Duration, time.Duration) {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	u0, s0, err := Split(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ru0, rs0 := rusage()
	start := time.Now()
	for x := 0; time.Since(start) < 10*time.Second; {
		if ru, _ := rusage(); ru-ru0 >= 150*time.Millisecond {
			break
		}
		for range 100000 {
			x = x*x + 1
		}
	}
	buf := make([]byte, 1<<16)
	for time.Since(start) < 10*time.Second {
		if _, rs := rusage(); rs-rs0 >= 150*time.Millisecond {
			break
		}
		for range 100 {
			null.Write(buf)
		}
	}
	u1, s1, err := Split(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ru1, rs1 := rusage()
	if ru1-ru0 < 50*time.Millisecond || rs1-rs0 < 50*time.Millisecond {
		t.Skipf("the machine gave this process %v user and %v system time in 10 s: too loaded to compare", ru1-ru0, rs1-rs0)
	}
	if d := (u1 - u0) - (ru1 - ru0); d < -40*time.Millisecond || d > 40*time.Millisecond {
		t.Errorf("user time grew %v by Split, %v by getrusage", u1-u0, ru1-ru0)
	}
	if d := (s1 - s0) - (rs1 - rs0); d < -40*time.Millisecond || d > 40*time.Millisecond {
		t.Errorf("system time grew %v by Split, %v by getrusage", s1-s0, rs1-rs0)
	}
	if all, err := Of(os.Getpid()); err != nil || all < u1+s1 {
		t.Errorf("Of = %v, %v; want at least Split's %v", all, err, u1+s1)
	}
}
