// Package coding reads HTTP content codings (RFC 9110 §8.4): which coding
// a response carries, and its body decoded within a size bound. The
// rewriter (which encodes a rewritten body again in the same coding) and
// the optimizer (which re-encodes text in a better one) share it.
package coding

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
)

// Of returns the content coding of a response's header h, lower case
// without white space: "" for none, "identity", "gzip", "x-gzip",
// "deflate", "br", or any other value as sent (also a list such as
// "gzip, br", which Decode refuses). several is true when the header has
// more than one Content-Encoding field.
func Of(h http.Header) (coding string, several bool) {
	v := h.Values("Content-Encoding")
	if len(v) == 0 {
		return "", false
	}
	return strings.ToLower(strings.TrimSpace(v[0])), len(v) > 1
}

// ErrTooLarge is Decode's error for a body that decodes to more than its
// bound.
var ErrTooLarge = errors.New("coding: decoded body too large")

// Decode undoes the content coding ("", "identity", "gzip", "x-gzip",
// "deflate", "br"; RFC 9110 §8.4.1, brotli RFC 7932) of b, refusing
// output over max bytes (ErrTooLarge). rawDeflate reports a "deflate" body
// without the zlib wrapper that RFC 9110 §8.4.1.2 requires, which some
// servers send (encode it back the same way). Another coding, or a body
// that does not decode, is an error.
func Decode(coding string, b []byte, max int64) (plain []byte, rawDeflate bool, err error) {
	var zr io.Reader
	switch coding {
	case "", "identity":
		return b, false, nil
	case "gzip", "x-gzip":
		g, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, false, fmt.Errorf("coding: gzip: %w", err)
		}
		zr = g
	case "deflate":
		z, err := zlib.NewReader(bytes.NewReader(b))
		if err != nil {
			zr, rawDeflate = flate.NewReader(bytes.NewReader(b)), true
		} else {
			zr = z
		}
	case "br":
		zr = brotli.NewReader(bytes.NewReader(b))
	default:
		return nil, false, fmt.Errorf("coding: content coding %q", coding)
	}
	plain, err = io.ReadAll(io.LimitReader(zr, max+1))
	if err != nil {
		return nil, false, fmt.Errorf("coding: %s: %w", coding, err)
	}
	if int64(len(plain)) > max {
		return nil, false, ErrTooLarge
	}
	return plain, rawDeflate, nil
}
