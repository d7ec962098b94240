// Package mode holds pepd's run-time mode (DESIGN.md "pepd"): off, dns or url.
//
// The mode is read on every request and DNS query and can be switched at run
// time (admin API, pepctl, SIGHUP) without a restart and without dropping open
// connections: a Switch is an atomic value, so a change applies to the next
// request or query, never to one in flight.
package mode

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// Mode is one of pepd's run-time modes.
type Mode int32

const (
	// Off is pass-through: intercepted HTTP is forwarded to Squid as it is and
	// DNS queries are answered unchanged.
	Off Mode = iota
	// DNS is DNS rewriting (seed paper §3.2): A answers for matching names
	// get the VIP first.
	DNS
	// URL is URL rewriting (seed paper §3.1): embedded http:// URLs in HTML
	// and CSS become http://VIP/host/path.
	URL
)

// All lists every mode in a stable order, for help texts and metrics labels.
var All = []Mode{Off, DNS, URL}

// String returns the mode's name as written in configs and on the command
// line: "off", "dns" or "url".
func (m Mode) String() string {
	switch m {
	case Off:
		return "off"
	case DNS:
		return "dns"
	case URL:
		return "url"
	}
	return fmt.Sprintf("mode(%d)", int32(m))
}

// Parse returns the Mode named s ("off", "dns" or "url", case-insensitive).
// It fails for any other string.
func Parse(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off":
		return Off, nil
	case "dns":
		return DNS, nil
	case "url":
		return URL, nil
	}
	return Off, fmt.Errorf("mode: %q is not one of off, dns, url", s)
}

// MarshalText implements encoding.TextMarshaler (used by JSON and YAML).
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; it accepts what Parse accepts.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Switch is the process-wide current mode, safe for concurrent use. The zero
// value holds Off.
type Switch struct {
	v       atomic.Int32
	changes atomic.Uint64
}

// NewSwitch returns a Switch holding m.
func NewSwitch(m Mode) *Switch {
	s := &Switch{}
	s.v.Store(int32(m))
	return s
}

// Get returns the current mode.
func (s *Switch) Get() Mode { return Mode(s.v.Load()) }

// Set changes the current mode and returns the previous one. Requests and
// queries already in flight finish under the mode they started with.
func (s *Switch) Set(m Mode) (previous Mode) {
	prev := Mode(s.v.Swap(int32(m)))
	if prev != m {
		s.changes.Add(1)
	}
	return prev
}

// Changes returns how many times Set changed the mode since start.
func (s *Switch) Changes() uint64 { return s.changes.Load() }
