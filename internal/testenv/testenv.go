// Package testenv holds what every test of pep shares about the machine it
// runs on: one slowness factor that scales every time bound in tests.
//
// A CI machine with 2 cores running the namespace, Squid and Chromium
// tests beside each other (and beside other jobs) is slower than a
// developer's idle one. A test states its time bounds for an idle
// machine and passes each one through Scale; PEP_TEST_SLOWNESS (a
// decimal factor at least 1, default 1) stretches them all at once, e.g.
// PEP_TEST_SLOWNESS=3 make test on a machine with busy loops beside it.
// Bounds that state a behaviour of pepd (a write timeout of 1 s must
// close within about 1 s) scale their slack, never the behaviour's own
// value.
package testenv

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Env is the environment variable holding the slowness factor.
const Env = "PEP_TEST_SLOWNESS"

var (
	once   sync.Once
	factor float64
	bad    error
)

func load() {
	factor = 1
	v := os.Getenv(Env)
	if v == "" {
		return
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 1 || f > 100 {
		bad = fmt.Errorf("testenv: %s=%q: want a decimal factor from 1 to 100", Env, v)
		return
	}
	factor = f
}

// Slowness returns the factor from PEP_TEST_SLOWNESS: 1 when unset.
// Errors: a value that is not a number from 1 to 100 panics with its
// reason (a mistyped factor must not silently run with 1).
func Slowness() float64 {
	once.Do(load)
	if bad != nil {
		panic(bad)
	}
	return factor
}

// Scale returns d multiplied by the slowness factor (d itself at the
// default factor 1). Use it for every time bound a test waits on or
// asserts: deadlines of polls, "within" limits, client timeouts.
func Scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Slowness())
}

// Log records the slowness factor in t's log once per test, so that a
// failure's log says which bounds it ran with. Tests that use Scale call
// it at their start.
func Log(t testing.TB) {
	t.Helper()
	t.Logf("time bounds scaled by %s=%g", Env, Slowness())
}
