// Package viptls serves the VIP as the operator's own HTTPS origin (issue
// 25; DESIGN.md "pepd", url mode "Next"): the VIP's certificate and key,
// read from files and replaced on SIGHUP without dropping a connection, the
// crypto/tls configuration (TLS 1.2 and later, ALPN h2 and http/1.1,
// session tickets), and the choice, made once per connection from its
// ClientHello, between terminating it (a ClientHello for the VIP itself)
// and leaving it to the SNI splice (every other name).
//
// Nothing is decrypted that was meant for anybody else: only a ClientHello
// whose SNI is one of the VIP's names, or that has no SNI and goes to the
// VIP address when the certificate names that address (RFC 6066 §3: an
// address is never sent as SNI), is terminated, with a certificate the
// operator holds for the VIP.
package viptls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Store holds the VIP's certificate, read from a PEM certificate chain and
// a PEM key file. It is safe for concurrent use: GetCertificate reads an
// atomic pointer, Reload replaces it only when the new files are good.
type Store struct {
	certFile, keyFile string
	names             []string // the certificate must name each of them
	cur               atomic.Pointer[tls.Certificate]
	now               func() time.Time // tests
}

// Load reads certFile and keyFile (see Reload for what is checked) and
// returns a Store serving them. names are the DNS names and IP addresses
// (text form) the certificate must be valid for, at start and after every
// reload: a certificate a browser would refuse for the VIP is an error at
// once, not a failed page later.
func Load(certFile, keyFile string, names []string) (*Store, error) {
	s := &Store{certFile: certFile, keyFile: keyFile, names: names, now: time.Now}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again and, if they hold a valid pair, serves them
// to new handshakes from now on; connections already open keep theirs. On
// any error the certificate served stays the old one. Errors name the file:
// unreadable, no PEM certificate, a key that does not match the
// certificate (tls.X509KeyPair), a leaf outside its validity period
// (expired or not yet valid), or a leaf that does not name one of the
// names given to Load.
func (s *Store) Reload() error {
	c, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return fmt.Errorf("viptls: cert_file %q, key_file %q: %w", s.certFile, s.keyFile, err)
	}
	leaf := c.Leaf // set by LoadX509KeyPair since Go 1.23
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return fmt.Errorf("viptls: cert_file %q: %w", s.certFile, err)
		}
		c.Leaf = leaf
	}
	now := s.now()
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("viptls: cert_file %q: certificate expired at %s", s.certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("viptls: cert_file %q: certificate not valid before %s", s.certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	for _, n := range s.names {
		if err := leaf.VerifyHostname(n); err != nil {
			return fmt.Errorf("viptls: cert_file %q: %w", s.certFile, err)
		}
	}
	s.cur.Store(&c)
	return nil
}

// Leaf returns the certificate served now.
func (s *Store) Leaf() *x509.Certificate { return s.cur.Load().Leaf }

// GetCertificate is tls.Config.GetCertificate: the certificate served now,
// whatever the ClientHello asks for (the Terminator only hands over
// ClientHellos for the VIP).
func (s *Store) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cur.Load(), nil
}

// Covers reports whether the certificate served now is valid for name (a
// DNS name, or an IP address in text form), as a browser checks it
// (x509.Certificate.VerifyHostname: SAN DNS names with one-label wildcards,
// SAN IP addresses).
func (s *Store) Covers(name string) bool {
	return s.Leaf().VerifyHostname(name) == nil
}

// Config returns the server configuration for the VIP: TLS 1.2 at least
// (RFC 9113 §9.2 asks TLS 1.2 of HTTP/2), ALPN h2 then http/1.1 (RFC 7301),
// the certificate from s (a reload applies to the next handshake), and
// session resumption on (tickets with keys crypto/tls rotates itself).
func (s *Store) Config() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: s.GetCertificate,
	}
}

// Key exchanges of the VIP's TLS server (https.key_exchange), the groups
// of a TLS 1.3 key share (RFC 8446 §4.2.8) or a TLS 1.2 ECDHE.
const (
	// KeyExchangeHybrid is crypto/tls's default: X25519MLKEM768, the
	// post-quantum hybrid (draft-ietf-tls-ecdhe-mlkem), when the client
	// offers it, as Chromium does, else X25519, P-256 and the rest. Its
	// key share costs the server's first flight 1,120 bytes where
	// X25519's costs 32.
	KeyExchangeHybrid = "hybrid"
	// KeyExchangeClassical is X25519, else P-256: no post-quantum key
	// exchange on the VIP's leg, about 1.1 KB less from the server per
	// handshake, full or resumed (the client's ClientHello is the same:
	// Chromium sends both key shares in it either way).
	KeyExchangeClassical = "classical"
)

// KeyExchanges are the values of https.key_exchange, the default first.
var KeyExchanges = []string{KeyExchangeHybrid, KeyExchangeClassical}

// SetKeyExchange sets the key exchanges of the connections t terminates
// from now on (KeyExchangeHybrid or KeyExchangeClassical); call it before
// t serves. Errors: any other value.
func (t *Terminator) SetKeyExchange(kx string) error {
	switch kx {
	case KeyExchangeHybrid:
		t.cfg.CurvePreferences = nil // crypto/tls's default order
	case KeyExchangeClassical:
		t.cfg.CurvePreferences = []tls.CurveID{tls.X25519, tls.CurveP256}
	default:
		return fmt.Errorf("viptls: key exchange %q is not one of %s", kx, strings.Join(KeyExchanges, ", "))
	}
	return nil
}

// Terminator decides, per ClientHello, whether a TLS connection to pepd's
// TLS listener is for the VIP's own origin (Terminate) or for the splice.
// It implements splice.Terminator.
type Terminator struct {
	// Store is the VIP's certificate. Required.
	Store *Store
	// VIP is the VIP address; a ClientHello without SNI is the VIP's when
	// it was sent to this address and the certificate names it.
	VIP netip.Addr
	// Names are the VIP's DNS names (lowercase), compared with the SNI.
	Names []string
	// Serve takes over a terminated connection: c is the TCP connection,
	// hello the bytes of the ClientHello already read from it (to be read
	// again first), cfg the TLS configuration. Required
	// (httpproxy.Server.ServeTLS).
	Serve func(c net.Conn, hello []byte, cfg *tls.Config)

	cfg *tls.Config
}

// NewTerminator returns a Terminator for the VIP, its names (each one
// must be among the names given to Load) and its certificate store; serve
// is Terminator.Serve.
func NewTerminator(st *Store, vip netip.Addr, names []string, serve func(net.Conn, []byte, *tls.Config)) (*Terminator, error) {
	if st == nil || serve == nil {
		return nil, errors.New("viptls: no certificate store or no server")
	}
	t := &Terminator{Store: st, VIP: vip.Unmap(), Serve: serve, cfg: st.Config()}
	for _, n := range names {
		t.Names = append(t.Names, strings.ToLower(n))
	}
	return t, nil
}

// Wants reports whether a ClientHello with server name sni ("" when it
// has none) sent to dst is for the VIP: sni is one of Names, or sni is
// empty, dst is the VIP and the certificate served now names the VIP
// address.
func (t *Terminator) Wants(sni string, dst netip.AddrPort) bool {
	if sni != "" {
		return slices.Contains(t.Names, sni)
	}
	return dst.Addr().Unmap() == t.VIP && t.Store.Covers(t.VIP.String())
}

// Terminate hands c (whose ClientHello, hello, was read) to Serve.
func (t *Terminator) Terminate(c net.Conn, hello []byte) {
	t.Serve(c, hello, t.cfg)
}
