package httpproxy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestHTTPSOrigins: the origins url mode writes VIP URLs under and the
// names the VIP's certificate must hold, from the https section (moved
// from cmd/pepd, issue 28).
func TestHTTPSOrigins(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.12")
	for _, c := range []struct {
		name    string
		h       HTTPS
		origins []string
		certs   []string
	}{
		{"no https urls", HTTPS{Shards: 1, Names: []string{"VIP.example.net"}}, nil, []string{"vip.example.net"}},
		{"no names: the address", HTTPS{Shards: 1}, nil, []string{"192.0.2.12"}},
		{"urls on the address", HTTPS{URLs: true, Shards: 1}, []string{"https://192.0.2.12"}, []string{"192.0.2.12"}},
		{"urls on the address, names too", HTTPS{URLs: true, Shards: 2, Names: []string{"vip.example.net"}},
			[]string{"https://192.0.2.12", "https://192.0.2.12:8443"}, []string{"vip.example.net", "192.0.2.12"}},
		{"urls on a name", HTTPS{URLs: true, Shards: 3, Host: "VIP.example.net", Names: []string{"VIP.example.net"}, ShardPorts: []uint16{443, 4443, 5443}},
			[]string{"https://vip.example.net", "https://vip.example.net:4443", "https://vip.example.net:5443"}, []string{"vip.example.net"}},
	} {
		if got := c.h.Origins(vip); !slices.Equal(got, c.origins) {
			t.Errorf("%s: Origins = %q, want %q", c.name, got, c.origins)
		}
		if got := c.h.CertNames(vip); !slices.Equal(got, c.certs) {
			t.Errorf("%s: CertNames = %q, want %q", c.name, got, c.certs)
		}
	}
	// render_blocking http moves render-blocking elements to the plain
	// http://VIP only when url mode writes https URLs at all.
	for _, c := range []struct {
		h    HTTPS
		want bool
	}{{HTTPS{URLs: true, RenderBlocking: "http"}, true}, {HTTPS{URLs: true, RenderBlocking: "https"}, false},
		{HTTPS{RenderBlocking: "http"}, false}} {
		if got := c.h.PlainBlocking(); got != c.want {
			t.Errorf("%+v: PlainBlocking = %v, want %v", c.h, got, c.want)
		}
	}
	for _, h := range []HTTPS{{OwnHostMax: -1}, {FirstImagesPlain: -1}} {
		d := DefaultHTTPS()
		d.OwnHostMax, d.FirstImagesPlain = h.OwnHostMax, h.FirstImagesPlain
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "must be at least 0") {
			t.Errorf("%+v: %v, want an error: must be at least 0", h, err)
		}
	}
	if err := (HTTPS{Shards: 1, MaxStreams: 1, MaxStreamsPerSubscriber: 1, Priority: H2RoundRobin, RenderBlocking: "tls"}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "render_blocking") {
		t.Errorf("render_blocking tls: %v, want an error naming render_blocking", err)
	}
}

// TestConfigLimits: the http, radio and https sections give the Server's
// Limits field for field.
func TestConfigLimits(t *testing.T) {
	c := Config{MaxHeaderBytes: 16 << 10, ReadHeaderTimeout: time.Second, IdleTimeout: 2 * time.Second, MaxConns: 7,
		WriteTimeout: 3 * time.Second, MaxConnsPerSubscriber: -1}
	radio := RadioOptions{Congestion: "bbr", NotsentLowat: 16384}
	got := c.Limits(radio, HTTPS{MaxStreams: 5, MaxStreamsPerSubscriber: 6})
	want := Limits{MaxHeaderBytes: 16 << 10, ReadHeaderTimeout: time.Second, IdleTimeout: 2 * time.Second, MaxConns: 7,
		WriteTimeout: 3 * time.Second, MaxConnsPerSubscriber: -1, Radio: radio, MaxStreams: 5, MaxStreamsPerSubscriber: 6}
	if got != want {
		t.Errorf("Limits = %+v, want %+v", got, want)
	}
}
