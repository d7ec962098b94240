package httpproxy

import (
	"net/url"
	"testing"
)

// TestSameOrigin: a request's Origin against a VIP-path target, by RFC
// 6454 §6.2's serialization (the default port omitted, case ignored).
func TestSameOrigin(t *testing.T) {
	cases := []struct {
		origin, target string
		want           bool
	}{
		{"http://a.test", "http://a.test/x.woff", true},
		{"http://A.Test", "http://a.test/x.woff", true},
		{"http://a.test", "http://a.test:80/x.woff", true},
		{"http://a.test:8080", "http://a.test:8080/x", true},
		{"http://a.test", "http://a.test:8080/x", false},
		{"http://a.test:8080", "http://a.test/x", false},
		{"http://www.a.test", "http://a.test/x", false},
		{"https://a.test", "http://a.test/x", false},
		{"http://a.test/", "http://a.test/x", false},
		{"null", "http://a.test/x", false},
		{"http://a.test http://b.test", "http://a.test/x", false},
		{"http://[::1]:81", "http://[::1]:81/x", true},
	}
	for _, c := range cases {
		u, err := url.Parse(c.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := sameOrigin(c.origin, u); got != c.want {
			t.Errorf("sameOrigin(%q, %s) = %v, want %v", c.origin, c.target, got, c.want)
		}
	}
}
