package mode

import "sync/atomic"

// Toggle is an on/off run-time switch orthogonal to the mode (off, dns and
// url each run with it on or off): the optimizer's (optimize.Switch) and
// the dependency hints' (hints.Switch). It is set from the config at start
// and on SIGHUP, from the admin API and pepctl; a change takes effect for
// the next request. Safe for concurrent use; a nil *Toggle is off.
type Toggle struct {
	on      atomic.Bool
	changes atomic.Uint64
}

// NewToggle returns a Toggle set to on.
func NewToggle(on bool) *Toggle {
	t := &Toggle{}
	t.on.Store(on)
	return t
}

// On reports whether the toggle is on.
func (t *Toggle) On() bool { return t != nil && t.on.Load() }

// Set switches the toggle and returns the previous state.
func (t *Toggle) Set(on bool) (prev bool) {
	prev = t.on.Swap(on)
	if prev != on {
		t.changes.Add(1)
	}
	return prev
}

// Changes counts the changes of state since start.
func (t *Toggle) Changes() uint64 { return t.changes.Load() }
