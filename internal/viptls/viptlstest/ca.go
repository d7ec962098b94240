// Package viptlstest makes a certificate authority and VIP certificates
// for tests and the testbed: the stand-in for the operator's public CA
// (issue 25). Browsers and clients are made to trust the CA (an NSS store,
// tls.Config.RootCAs); certificate checks are never turned off.
package viptlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority made in memory (ECDSA P-256).
type CA struct {
	// Cert is the self-signed CA certificate; PEM is it in PEM form.
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name, valid from an hour ago for 30 days.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("viptlstest: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name, Organization: []string{"pep"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("viptlstest: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("viptlstest: %w", err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}, nil
}

// Pool returns a pool holding the CA, for tls.Config.RootCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue returns a leaf certificate (PEM) and its key (PEM) for names,
// each a DNS name or an IP address, valid from notBefore to notAfter, for
// TLS servers. The chain is the leaf alone, an ECDSA P-256 key signed by
// the CA directly: the CA is in the client's trust store and sending it
// would only add its bytes to every full handshake (RFC 8446 §4.4.2
// lets the server omit it), as a public CA's root is never sent.
func (ca *CA) Issue(names []string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("viptlstest: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if a, err := netip.ParseAddr(n); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("viptlstest: %w", err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("viptlstest: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), nil
}

// WriteFiles issues a certificate for names valid from an hour ago for a
// week and writes it to dir/vip.crt and its key to dir/vip.key; it returns
// both paths.
func (ca *CA) WriteFiles(dir string, names ...string) (certFile, keyFile string, err error) {
	now := time.Now()
	c, k, err := ca.Issue(names, now.Add(-time.Hour), now.Add(7*24*time.Hour))
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "vip.crt"), filepath.Join(dir, "vip.key")
	if err := os.WriteFile(certFile, c, 0o644); err != nil {
		return "", "", fmt.Errorf("viptlstest: %w", err)
	}
	if err := os.WriteFile(keyFile, k, 0o600); err != nil {
		return "", "", fmt.Errorf("viptlstest: %w", err)
	}
	return certFile, keyFile, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// ReadCounter is a connection that counts the bytes read from it (N), for
// tests that measure what a TLS server sends in a handshake. Not safe for
// concurrent reads.
type ReadCounter struct {
	net.Conn
	N int
}

// Read reads from the connection and adds what it read to N.
func (c *ReadCounter) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.N += n
	return n, err
}
