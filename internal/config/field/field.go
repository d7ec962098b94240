// Package field carries configuration errors that name the offending field,
// so that the config loader can add the file and line (STYLE.md §7:
// `pepd: config.yaml:12: dns.vip: "10.0.0" is not an IPv4 address`).
//
// Components validate their own config sections and return *Error values
// with a dotted path relative to the section; the loader prefixes the
// section name with Prefix and resolves the path to a line.
package field

import (
	"errors"
	"fmt"
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
