package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// certs is a CA and a certificate it signed, written as PEM files.
type certs struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
	pair                      tls.Certificate
}

// makeCerts writes a CA and, signed by it, a certificate for 127.0.0.1
// and localhost usable by servers and clients, into dir.
func makeCerts(t *testing.T, dir string) certs {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvarray test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := certs{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	for f, b := range map[string]*pem.Block{c.caFile: {Type: "CERTIFICATE", Bytes: caDER}, c.certFile: {Type: "CERTIFICATE", Bytes: der},
		c.keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.pool = x509.NewCertPool()
	c.pool.AddCert(ca)
	if c.pair, err = tls.LoadX509KeyPair(c.certFile, c.keyFile); err != nil {
		t.Fatal(err)
	}
	return c
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestServeSecurity: kvarray.yaml's requirepass, ACL users and TLS
// through `kvarray serve`: NOAUTH before AUTH, NOPERM for a data user's
// admin command, a TLS client with the configured CA, a plain-TCP client
// refused on the TLS port, redis-cli --tls; the CLI still reaches the
// server through the admin socket. Then client certificates: with
// tls_ca_cert_file a client without one is refused.
func TestServeSecurity(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	c := makeCerts(t, dir)
	tlsPort := freeTCPPort(t)
	cfg := fmt.Sprintf(`devices: [mem:a, mem:b, mem:c]
requirepass: s3cret
users:
  - {name: app, password: app-pw, role: data}
  - {name: ops, password: ops-pw, role: admin}
tls_port: %d
tls_cert_file: cert.pem
tls_key_file: key.pem
`, tlsPort)
	if err := os.WriteFile("kvarray.yaml", []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t)
	if !strings.Contains(s.out.String(), "-a PASSWORD") {
		t.Errorf("serve's connect hint does not mention the password:\n%s", s.out)
	}
	ctx := context.Background()
	anon := s.client(t)
	if err := anon.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Errorf("SET without AUTH: %v, want NOAUTH", err)
	}
	app := redis.NewClient(&redis.Options{Addr: s.addr, Username: "app", Password: "app-pw", MaxRetries: -1})
	defer app.Close()
	if err := app.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Errorf("SET as app: %v", err)
	}
	for _, cmd := range [][]any{{"kvarray.status"}, {"kvarray.scrub"}, {"config", "set", "maxmemory", "1"}} {
		if err := app.Do(ctx, cmd...).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%v as app: %v, want NOPERM", cmd, err)
		}
	}
	ops := redis.NewClient(&redis.Options{Addr: s.addr, Username: "ops", Password: "ops-pw", MaxRetries: -1})
	defer ops.Close()
	if err := ops.Do(ctx, "kvarray.status").Err(); err != nil {
		t.Errorf("KVARRAY.STATUS as ops: %v", err)
	}
	// The CLI goes through the admin socket: no password needed.
	statusOut(t, healthClean)

	tlsAddr := fmt.Sprintf("127.0.0.1:%d", tlsPort)
	sec := redis.NewClient(&redis.Options{Addr: tlsAddr, Password: "s3cret", MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: c.pool, ServerName: "127.0.0.1"}})
	defer sec.Close()
	if v, err := sec.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("GET over TLS: %q, %v", v, err)
	}
	// Plain RESP on the TLS port gets no reply: the handshake fails and
	// the connection is closed.
	nc, err := net.DialTimeout("tcp", tlsAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(nc, "*1\r\n$4\r\nPING\r\n")
	if line, err := bufio.NewReader(nc).ReadString('\n'); err == nil || strings.Contains(line, "PONG") {
		t.Errorf("plain TCP on the TLS port: %q, %v; want the connection closed", line, err)
	}
	nc.Close()
	if bin, err := exec.LookPath("redis-cli"); err == nil {
		out, err := exec.Command(bin, "--tls", "--cacert", c.caFile, "-h", "127.0.0.1", "-p", fmt.Sprint(tlsPort),
			"-a", "s3cret", "--no-auth-warning", "get", "k").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "v" {
			t.Errorf("redis-cli --tls get k: %q, %v", out, err)
		}
	} else if os.Getenv("CI") == "true" {
		t.Error("redis-cli not found (CI=true: .ci/run must install it)")
	}
	s.stop(t)

	// Client certificates.
	if err := os.WriteFile("kvarray.yaml", []byte(cfg+"tls_ca_cert_file: ca.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = serve(t)
	noCert := redis.NewClient(&redis.Options{Addr: tlsAddr, Password: "s3cret", MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: c.pool, ServerName: "127.0.0.1"}})
	defer noCert.Close()
	if err := noCert.Ping(ctx).Err(); err == nil {
		t.Error("a TLS client without a certificate was served, with tls_ca_cert_file set")
	}
	withCert := redis.NewClient(&redis.Options{Addr: tlsAddr, Password: "s3cret", MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: c.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{c.pair}}})
	defer withCert.Close()
	if err := withCert.Ping(ctx).Err(); err != nil {
		t.Errorf("TLS client with a certificate: %v", err)
	}
	s.stop(t)
}

// TestProtectedMode: serve refuses to listen beyond loopback without a
// password, saying how to fix it; with requirepass, or protected_mode:
// false, it starts.
func TestProtectedMode(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("kvarray.yaml", []byte("devices: [mem:a, mem:b, mem:c]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails(t, nil, []string{"serve", "--listen", "0.0.0.0:0"}, "protected mode", "set requirepass", "listen on 127.0.0.1", "protected_mode: false")
	for _, extra := range []string{"requirepass: pw\n", "protected_mode: false\n"} {
		if err := os.WriteFile("kvarray.yaml", []byte("devices: [mem:a, mem:b, mem:c]\n"+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		s := &serving{out: &syncBuffer{}, errOut: &syncBuffer{}, cancel: cancel, code: make(chan int, 1)}
		go func() { s.code <- run(ctx, []string{"serve", "--listen", "0.0.0.0:0"}, nil, s.out, s.errOut) }()
		for deadline := time.Now().Add(time.Minute); !listening.MatchString(s.out.String()); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("with %q: serve did not listen: %s%s", extra, s.out, s.errOut)
			}
		}
		s.stop(t)
	}
}
