package origin

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// CA is the test certificate authority the replay origin generates at
// start. Every leaf certificate it issues carries the same key, so one
// SPKI hash covers every name.
type CA struct {
	// Cert is the self-signed CA certificate.
	Cert *x509.Certificate
	// PEM is Cert in PEM form ("CERTIFICATE" block).
	PEM []byte

	key     *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey
	mu      sync.Mutex
	leaves  map[string]*tls.Certificate
}

// NewCA generates an ECDSA P-256 CA valid from an hour ago for a year and
// the shared ECDSA P-256 leaf key.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("origin: CA key: %w", err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("origin: leaf key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "pep testbed replay CA", Organization: []string{"pep testbed"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("origin: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("origin: CA certificate: %w", err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key: key, leafKey: leafKey, leaves: map[string]*tls.Certificate{}}, nil
}

// WriteFile writes the CA certificate in PEM form to path (mode 0644).
func (ca *CA) WriteFile(path string) error {
	if err := os.WriteFile(path, ca.PEM, 0o644); err != nil {
		return fmt.Errorf("origin: write CA: %w", err)
	}
	return nil
}

// SPKIHash returns the base64 SHA-256 of the leaf certificates' Subject
// Public Key Info, the value Chromium's
// --ignore-certificate-errors-spki-list flag takes.
func (ca *CA) SPKIHash() string {
	der, err := x509.MarshalPKIXPublicKey(&ca.leafKey.PublicKey)
	if err != nil {
		panic(fmt.Sprintf("origin: marshal P-256 key: %v", err)) // cannot happen for P-256
	}
	sum := sha256.Sum256(der)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// Leaf returns (and caches) a certificate for name, a DNS name or an IP
// address, signed by the CA, valid from an hour ago for 90 days, for
// server authentication.
func (ca *CA) Leaf(name string) (*tls.Certificate, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[name]; ok {
		return c, nil
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(90 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("origin: certificate for %q: %w", name, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: ca.leafKey}
	ca.leaves[name] = c
	return c, nil
}

// GetCertificate serves tls.Config.GetCertificate: a leaf for the SNI name,
// or for the connection's local address when the client sent none.
func (ca *CA) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := hello.ServerName
	if name == "" && hello.Conn != nil {
		if a, ok := hello.Conn.LocalAddr().(*net.TCPAddr); ok {
			name = a.IP.String()
		}
	}
	if name == "" {
		return nil, fmt.Errorf("origin: no server name and no local address")
	}
	return ca.Leaf(name)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("origin: serial: %v", err))
	}
	return n
}
