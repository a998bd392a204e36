package redislease

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
)

type pki struct {
	dir                 string
	cert                *x509.Certificate
	key                 *ecdsa.PrivateKey
	CA, CAKey           string
	Server, ServerKey   string
	Client, ClientKey   string
	OtherCA, OtherCAKey string
}

// newPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate signed by it, and an unrelated CA.
func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.cert, p.key, p.CA, p.CAKey = p.issue(t, "ca", nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid = true, true
		c.KeyUsage = x509.KeyUsageCertSign
	})
	_, _, p.Server, p.ServerKey = p.issue(t, "server", p.cert, p.key, func(c *x509.Certificate) {
		c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	_, _, p.Client, p.ClientKey = p.issue(t, "client", p.cert, p.key, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
	_, _, p.OtherCA, p.OtherCAKey = p.issue(t, "other-ca", nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid = true, true
		c.KeyUsage = x509.KeyUsageCertSign
	})
	return p
}

func (p *pki) issue(t *testing.T, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, shape func(*x509.Certificate)) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "unitlease test " + name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	shape(tmpl)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return cert, key, certFile, keyFile
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTLS(t *testing.T) {
	p := newPKI(t)
	srv := redistest.Start(t, redistest.Options{TLS: &redistest.TLSFiles{
		Cert: p.Server, Key: p.ServerKey, CA: p.CA, RequireClientCert: true,
		ClientCert: p.Client, ClientKey: p.ClientKey,
	}})
	withTLS := func(ca, cert, key string) func(*Config) {
		return func(c *Config) { c.CAFile, c.CertFile, c.KeyFile = ca, cert, key }
	}
	a := newStore(t, srv, "node-a", withTLS(p.CA, p.Client, p.ClientKey))
	l := mustAcquire(t, a, "vpn")
	if _, err := a.Renew(bg, "vpn", l); err != nil {
		t.Fatalf("renew over TLS: %v", err)
	}
	if err := newStore(t, srv, "node-b", withTLS(p.CA, "", "")).Ping(bg); err == nil {
		t.Error("a client without a certificate got in")
	}
	if err := newStore(t, srv, "node-c", withTLS(p.OtherCA, p.Client, p.ClientKey)).Ping(bg); err == nil {
		t.Error("a server signed by an unknown CA was trusted")
	}
	plain := newStore(t, srv, "node-d", func(c *Config) { c.URL = "redis://" + srv.Addr() + "/0" })
	if err := plain.Ping(bg); err == nil {
		t.Error("plain text reached a TLS-only server")
	}
}
