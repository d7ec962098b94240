// Package field is what a component needs to own its section of pepd's
// configuration (issue 28): errors that name the offending field, so that
// the config loader can add the file and line (STYLE.md §7:
// `pepd: config.yaml:12: dns.vip: "10.0.0" is not an IPv4 address`), the
// value types sections share (ByteSize), and the checks several sections
// make (HostPort, DomainSuffix, OneOf).
//
// A component declares its section as a struct with yaml tags, its
// defaults as a function returning that struct, and a Validate method
// that returns *Error values with a dotted path relative to the section;
// the loader (internal/config) prefixes the section name with Prefix and
// resolves the path to a line. The package imports nothing of pep, so
// every component may import it.
package field

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Error is a validation error of one field. Path is dotted and uses the
// YAML key names ("dns.rewrite_domains", "subscribers.1").
type Error struct {
	Path string
	Err  error
}

// Error implements error: "<path>: <reason>".
func (e *Error) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns the reason.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error for path with a formatted reason.
func Errorf(path, format string, args ...any) error {
	return &Error{Path: path, Err: fmt.Errorf(format, args...)}
}

// Prefix returns err with section prepended to its path if err is an
// *Error (a.b -> section.a.b); other errors are returned unchanged. A nil
// err gives nil.
func Prefix(section string, err error) error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		p := section
		if fe.Path != "" {
			p += "." + fe.Path
		}
		return &Error{Path: p, Err: fe.Err}
	}
	return err
}

// ByteSize is a size in bytes; YAML accepts 65536, "64KiB", "64KB" (1000),
// "8MiB", "1GB".
type ByteSize int64

var sizeRE = regexp.MustCompile(`^\s*([0-9]+)\s*([KMG]i?B|B)?\s*$`)

// UnmarshalText implements encoding.TextUnmarshaler: a whole number of
// bytes with an optional unit (B, KB, MB, GB in powers of 1000; KiB, MiB,
// GiB in powers of 1024). Anything else is an error naming the text.
func (b *ByteSize) UnmarshalText(t []byte) error {
	m := sizeRE.FindStringSubmatch(string(t))
	if m == nil {
		return fmt.Errorf("%q is not a size (e.g. 65536, 64KiB, 8MB)", t)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return fmt.Errorf("%q: %w", t, err)
	}
	mult := map[string]int64{"": 1, "B": 1, "KB": 1000, "MB": 1000 * 1000, "GB": 1000 * 1000 * 1000,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[2]]
	*b = ByteSize(n * mult)
	return nil
}

// OneOf reports whether s is one of set.
func OneOf(s string, set ...string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

// HostPort checks "host:port" (a port 0..65535); needHost requires a
// non-empty host and a port other than 0 (an address to connect to, not
// one to listen on). The error quotes s.
func HostPort(s string, needHost bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	if needHost && host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (needHost && n == 0) {
		return fmt.Errorf("%q has no valid port", s)
	}
	return nil
}

var labelRE = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$`)

// DomainSuffix checks a domain suffix such as "cnn.com" or ".cnn.com"
// (labels of letters, digits, '_' and '-', at most 253 characters); star
// allows "*". The error quotes s and, where one is at fault, the label.
func DomainSuffix(s string, star bool) error {
	if star && s == "*" {
		return nil
	}
	t := strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(s), "."), ".")
	if t == "" || len(t) > 253 {
		return fmt.Errorf("%q is not a domain suffix", s)
	}
	for _, l := range strings.Split(t, ".") {
		if !labelRE.MatchString(l) {
			return fmt.Errorf("%q is not a domain suffix (label %q)", s, l)
		}
	}
	return nil
}

// First returns the first non-nil error of errs: a section's Validate
// lists its checks in order and reports the first that fails.
func First(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// AtLeast returns an *Error for key when v is below min ("0 must be at
// least 1"), else nil.
func AtLeast[T cmp.Ordered](key string, v, min T) error {
	if v < min {
		return Errorf(key, "%v must be at least %v", v, min)
	}
	return nil
}

// Positive returns an *Error for key when d is not positive ("0s must be
// positive"), else nil.
func Positive(key string, d time.Duration) error {
	if d <= 0 {
		return Errorf(key, "%v must be positive", d)
	}
	return nil
}

// Check returns an *Error for key with the formatted reason when bad is
// true, else nil: the general check, for First's lists.
func Check(bad bool, key, format string, args ...any) error {
	if bad {
		return Errorf(key, format, args...)
	}
	return nil
}
