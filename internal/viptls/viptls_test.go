package viptls

import (
	"crypto/tls"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pep/internal/viptls/viptlstest"
)

func newCA(t *testing.T) *viptlstest.CA {
	t.Helper()
	ca, err := viptlstest.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// writePair writes a certificate for names with the given validity to
// dir/name.crt and dir/name.key.
func writePair(t *testing.T, ca *viptlstest.CA, dir, name string, from, to time.Time, names ...string) (string, string) {
	t.Helper()
	c, k, err := ca.Issue(names, from, to)
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(cf, c, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, k, 0o600); err != nil {
		t.Fatal(err)
	}
	return cf, kf
}

// TestLoadErrors: a missing, expired, not yet valid, mismatched or
// misnamed pair is an error naming the file, at load.
func TestLoadErrors(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	now := time.Now()
	good, goodKey := writePair(t, ca, dir, "good", now.Add(-time.Hour), now.Add(time.Hour), "vip.example.net", "192.0.2.12")
	expired, expiredKey := writePair(t, ca, dir, "expired", now.Add(-48*time.Hour), now.Add(-24*time.Hour), "vip.example.net")
	future, futureKey := writePair(t, ca, dir, "future", now.Add(24*time.Hour), now.Add(48*time.Hour), "vip.example.net")
	_, otherKey := writePair(t, ca, dir, "other", now.Add(-time.Hour), now.Add(time.Hour), "vip.example.net")
	garbage := filepath.Join(dir, "garbage.crt")
	os.WriteFile(garbage, []byte("not a certificate\n"), 0o644)
	cases := []struct {
		name, cert, key string
		names           []string
		want            string
	}{
		{"missing cert", filepath.Join(dir, "none.crt"), goodKey, nil, "no such file or directory"},
		{"missing key", good, filepath.Join(dir, "none.key"), nil, "no such file or directory"},
		{"not PEM", garbage, goodKey, nil, "failed to find any PEM data in certificate input"},
		{"key of another certificate", good, otherKey, nil, "private key does not match public key"},
		{"expired", expired, expiredKey, nil, "certificate expired at"},
		{"not yet valid", future, futureKey, nil, "certificate not valid before"},
		{"name not in certificate", good, goodKey, []string{"other.example.net"}, "not other.example.net"},
		{"address not in certificate", good, goodKey, []string{"192.0.2.13"}, "not 192.0.2.13"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.cert, c.key, c.names)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Base(c.cert)) {
				t.Fatalf("Load: %v, want an error naming %s with %q", err, filepath.Base(c.cert), c.want)
			}
		})
	}
	if _, err := Load(good, goodKey, []string{"vip.example.net", "192.0.2.12"}); err != nil {
		t.Fatalf("good pair: %v", err)
	}
}

// TestReloadKeepsOldOnError: a reload with a bad file keeps serving the old
// certificate, a good one serves the new one to the next handshake while a
// connection made before keeps working.
func TestReloadKeepsOldOnError(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	now := time.Now()
	cf, kf := writePair(t, ca, dir, "vip", now.Add(-time.Hour), now.Add(time.Hour), "192.0.2.12")
	st, err := Load(cf, kf, []string{"192.0.2.12"})
	if err != nil {
		t.Fatal(err)
	}
	first := st.Leaf().SerialNumber

	ln, err := tls.Listen("tcp", "127.0.0.1:0", st.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // echo
				defer c.Close()
				b := make([]byte, 64)
				for {
					n, err := c.Read(b)
					if err != nil {
						return
					}
					c.Write(b[:n])
				}
			}()
		}
	}()
	dial := func() *tls.Conn {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "192.0.2.12", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old := dial()
	defer old.Close()
	if p := old.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("ALPN %q, want h2", p)
	}

	// A bad reload: the key of another certificate, then an expired one.
	_, otherKey := writePair(t, ca, dir, "other", now.Add(-time.Hour), now.Add(time.Hour), "192.0.2.12")
	b, _ := os.ReadFile(otherKey)
	os.WriteFile(kf, b, 0o600)
	if err := st.Reload(); err == nil || !strings.Contains(err.Error(), "private key does not match") {
		t.Fatalf("reload with a wrong key: %v", err)
	}
	ec, ek := writePair(t, ca, dir, "expired", now.Add(-48*time.Hour), now.Add(-time.Hour), "192.0.2.12")
	copyFile(t, ec, cf)
	copyFile(t, ek, kf)
	if err := st.Reload(); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("reload with an expired certificate: %v", err)
	}
	if got := dial().ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(first) != 0 {
		t.Fatalf("after failed reloads the server sends serial %v, want the old %v", got, first)
	}

	// A good reload.
	nc, nk := writePair(t, ca, dir, "new", now.Add(-time.Hour), now.Add(time.Hour), "192.0.2.12")
	copyFile(t, nc, cf)
	copyFile(t, nk, kf)
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := dial().ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(first) == 0 {
		t.Fatal("after a good reload the server still sends the old certificate")
	}
	// The connection made before the reloads still works.
	old.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := old.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := old.Read(got); err != nil || string(got) != "ping" {
		t.Fatalf("old connection after reload: %q, %v", got, err)
	}
}

// TestTLSVersions: TLS 1.1 is refused, 1.2 and 1.3 are served, a session
// is resumed.
func TestTLSVersions(t *testing.T) {
	ca := newCA(t)
	cf, kf := writePair(t, ca, t.TempDir(), "vip", time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "192.0.2.12")
	st, err := Load(cf, kf, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", st.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.(*tls.Conn).Handshake()
				c.Write([]byte("x")) // a TLS 1.3 ticket comes after the handshake
				c.Read(make([]byte, 1))
			}()
		}
	}()
	cache := tls.NewLRUClientSessionCache(4)
	for _, v := range []uint16{tls.VersionTLS11, tls.VersionTLS12, tls.VersionTLS13} {
		for round := 0; round < 2; round++ {
			c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "192.0.2.12",
				MinVersion: v, MaxVersion: v, ClientSessionCache: cache})
			if v == tls.VersionTLS11 {
				if err == nil {
					t.Fatal("TLS 1.1 accepted")
				}
				break
			}
			if err != nil {
				t.Fatalf("TLS %x: %v", v, err)
			}
			c.Read(make([]byte, 1))
			if round == 1 && !c.ConnectionState().DidResume {
				t.Errorf("TLS %x: second connection not resumed", v)
			}
			c.Close()
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWants: the VIP's names by SNI; no SNI only to the VIP address and
// only when the certificate names it.
func TestWants(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	now := time.Now()
	ipCert, ipKey := writePair(t, ca, dir, "ip", now.Add(-time.Hour), now.Add(time.Hour), "vip.example.net", "192.0.2.12")
	nameCert, nameKey := writePair(t, ca, dir, "name", now.Add(-time.Hour), now.Add(time.Hour), "vip.example.net")
	vip := netip.MustParseAddr("192.0.2.12")
	serve := func(net.Conn, []byte, *tls.Config) {}
	for _, c := range []struct {
		cert, key string
		sni       string
		dst       string
		want      bool
	}{
		{ipCert, ipKey, "vip.example.net", "192.0.2.12:443", true},
		{ipCert, ipKey, "vip.example.net", "203.0.113.7:443", true}, // a name of the VIP wherever it was sent
		{ipCert, ipKey, "www.example.com", "192.0.2.12:443", false},
		{ipCert, ipKey, "", "192.0.2.12:443", true},
		{ipCert, ipKey, "", "192.0.2.12:8443", true},
		{ipCert, ipKey, "", "203.0.113.7:443", false},
		{nameCert, nameKey, "", "192.0.2.12:443", false}, // the certificate does not name the address
		{nameCert, nameKey, "vip.example.net", "192.0.2.12:443", true},
	} {
		st, err := Load(c.cert, c.key, nil)
		if err != nil {
			t.Fatal(err)
		}
		term, err := NewTerminator(st, vip, []string{"VIP.example.net"}, serve)
		if err != nil {
			t.Fatal(err)
		}
		if got := term.Wants(c.sni, netip.MustParseAddrPort(c.dst)); got != c.want {
			t.Errorf("%s: Wants(%q, %s) = %v, want %v", filepath.Base(c.cert), c.sni, c.dst, got, c.want)
		}
	}
}

// TestKeyExchange: with KeyExchangeHybrid a client that offers
// X25519MLKEM768 (Go's, as Chromium's) gets it; with KeyExchangeClassical
// the same client gets X25519 and the server's first flight is about
// 1.1 KB smaller (its key share: 1,120 bytes against 32); another value is
// an error.
func TestKeyExchange(t *testing.T) {
	ca := newCA(t)
	cf, kf := writePair(t, ca, t.TempDir(), "vip", time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "192.0.2.12")
	st, err := Load(cf, kf, nil)
	if err != nil {
		t.Fatal(err)
	}
	handshake := func(kx string) (tls.CurveID, int) {
		t.Helper()
		served := make(chan *tls.Config, 1)
		term, err := NewTerminator(st, netip.MustParseAddr("192.0.2.12"), nil, func(_ net.Conn, _ []byte, cfg *tls.Config) { served <- cfg })
		if err != nil {
			t.Fatal(err)
		}
		if err := term.SetKeyExchange(kx); err != nil {
			t.Fatal(err)
		}
		term.Terminate(nil, nil)
		cfg := <-served
		cli, srv := net.Pipe()
		defer cli.Close()
		go func() {
			defer srv.Close()
			tc := tls.Server(srv, cfg)
			if tc.Handshake() == nil {
				tc.Read(make([]byte, 1))
			}
		}()
		counted := &viptlstest.ReadCounter{Conn: cli}
		tc := tls.Client(counted, &tls.Config{RootCAs: ca.Pool(), ServerName: "192.0.2.12"})
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("%s: %v", kx, err)
		}
		return tc.ConnectionState().CurveID, counted.N
	}
	hybrid, hybridBytes := handshake(KeyExchangeHybrid)
	classical, classicalBytes := handshake(KeyExchangeClassical)
	if hybrid != tls.X25519MLKEM768 || classical != tls.X25519 {
		t.Errorf("key exchange: hybrid %v, classical %v; want X25519MLKEM768, X25519", hybrid, classical)
	}
	if d := hybridBytes - classicalBytes; d < 1000 || d > 1200 {
		t.Errorf("server's first flight: hybrid %d bytes, classical %d: want about 1.1 KB less", hybridBytes, classicalBytes)
	}
	t.Logf("server's first flight: hybrid %d bytes, classical %d", hybridBytes, classicalBytes)
	term, _ := NewTerminator(st, netip.MustParseAddr("192.0.2.12"), nil, func(net.Conn, []byte, *tls.Config) {})
	if err := term.SetKeyExchange("X25519"); err == nil || !strings.Contains(err.Error(), `"X25519" is not one of hybrid, classical`) {
		t.Errorf("SetKeyExchange(X25519): %v", err)
	}
}
