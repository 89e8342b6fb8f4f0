package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
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

// TestAdminSocketNeverOpen: a connection on the admin socket is the
// default user, fully authenticated, so no other user may ever connect to
// it, not even for the moment between its creation and a chmod. Under
// umask 000, this test binary run as nobody dials the socket's path in a
// loop while serve's listenAdmin makes and closes the socket hundreds of
// times: it never connects.
func TestAdminSocketNeverOpen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("probing as another uid needs root")
	}
	dir, err := os.MkdirTemp("", "kvarray-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // nobody may enter it, not write it
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(dir, "probe")
	if err := os.WriteFile(probe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, ".kvarray.yaml.sock")
	cmd := exec.Command(probe, "-test.run=^TestAdminSocketProbe$", "-test.v")
	cmd.Env = append(os.Environ(), "KVARRAY_PROBE_SOCK="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0)
	made := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); made++ {
		l, err := listenAdmin(sock)
		if err != nil {
			syscall.Umask(old)
			t.Fatalf("listenAdmin: %v", err)
		}
		if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("the socket: %v, %v; want mode 0600", fi.Mode(), err)
		}
		l.Close()
	}
	syscall.Umask(old)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("probe: %v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`probe: (\d+) dials, (\d+) connected`).FindStringSubmatch(out.String())
	if m == nil || m[1] == "0" {
		t.Fatalf("the probe did not run:\n%s", out.String())
	}
	if m[2] != "0" {
		t.Errorf("another uid connected to the admin socket %s times in %s dials, over %d sockets made", m[2], m[1], made)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is left after Close: %v", err)
	}
}

// TestAdminSocketProbe is TestAdminSocketNeverOpen's other user: it runs
// only as that test's child.
func TestAdminSocketProbe(t *testing.T) {
	sock := os.Getenv("KVARRAY_PROBE_SOCK")
	if sock == "" {
		t.Skip("run by TestAdminSocketNeverOpen")
	}
	dials, connected := 0, 0
	for end := time.Now().Add(3500 * time.Millisecond); time.Now().Before(end); dials++ {
		if c, err := net.Dial("unix", sock); err == nil {
			connected++
			c.Close()
		}
	}
	fmt.Printf("probe: %d dials, %d connected\n", dials, connected)
}

// TestAdminSocketUnsafeDir: serve refuses to make its admin socket in a
// directory others may write (they could put their own socket where the
// CLI looks), saying how to fix it.
func TestAdminSocketUnsafeDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if err := os.WriteFile("kvarray.yaml", []byte("devices: [mem:a, mem:b, mem:c]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails(t, nil, []string{"serve", "--listen", "127.0.0.1:0"}, "admin socket", "writable by group or others", "chmod go-w")
	if _, err := listenAdmin(filepath.Join(dir, "s")); !errors.Is(err, ErrUnsafeSocketDir) {
		t.Errorf("listenAdmin in a 0777 directory: %v", err)
	}
}

// TestMetricsBeyondLoopback: /metrics on an address beyond loopback is
// refused without metrics_token, saying how; with one, a scrape without
// the token gets 401 and one with it the metrics.
func TestMetricsBeyondLoopback(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("kvarray.yaml", []byte("devices: [mem:a, mem:b, mem:c]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails(t, nil, []string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0"}, "metrics_token", "Authorization: Bearer", "127.0.0.1")
	if err := os.WriteFile("kvarray.yaml", []byte("devices: [mem:a, mem:b, mem:c]\nmetrics_token: t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t, "--metrics-listen", "0.0.0.0:0")
	defer s.stop(t)
	m := metricsAt.FindStringSubmatch(s.out.String())
	if m == nil {
		t.Fatalf("no metrics address in %s", s.out)
	}
	url := strings.Replace(m[1], "0.0.0.0", "127.0.0.1", 1)
	url = strings.Replace(url, "[::]", "127.0.0.1", 1)
	get := func(auth string) int {
		req, _ := http.NewRequest("GET", url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(""); code != http.StatusUnauthorized {
		t.Errorf("scrape without the token: %d, want 401", code)
	}
	if code := get("Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("scrape with a wrong token: %d, want 401", code)
	}
	if code := get("Bearer t0ken"); code != http.StatusOK {
		t.Errorf("scrape with the token: %d, want 200", code)
	}
}

// TestServeACLFile: the aclfile of kvarray.yaml (relative to it) is read
// when serve starts, and ACL SAVE writes it with passwords hashed.
func TestServeACLFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	sum := sha256.Sum256([]byte("app-pw"))
	if err := os.WriteFile("users.acl", []byte("user app on #"+hex.EncodeToString(sum[:])+" ~app:* -@all +get +set\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("kvarray.yaml", []byte("devices: [mem:a, mem:b, mem:c]\naclfile: users.acl\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t)
	ctx := context.Background()
	app := redis.NewClient(&redis.Options{Addr: s.addr, Username: "app", Password: "app-pw", MaxRetries: -1})
	defer app.Close()
	if err := app.Set(ctx, "app:1", "v", 0).Err(); err != nil {
		t.Errorf("SET app:1 as app: %v", err)
	}
	if err := app.Set(ctx, "other", "v", 0).Err(); err == nil || err.Error() != "NOPERM this user has no permissions to access one of the keys used as arguments" {
		t.Errorf("SET other as app: %v", err)
	}
	def := s.client(t)
	if err := def.Do(ctx, "acl", "setuser", "bob", "on", ">bob-pw", "~*", "+@read").Err(); err != nil {
		t.Fatal(err)
	}
	if err := def.Do(ctx, "acl", "save").Err(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("users.acl")
	if err != nil {
		t.Fatal(err)
	}
	bob := sha256.Sum256([]byte("bob-pw"))
	if !strings.Contains(string(b), "user bob on #"+hex.EncodeToString(bob[:])+" ~* resetchannels -@all +@read") || strings.Contains(string(b), "bob-pw") {
		t.Errorf("aclfile after ACL SAVE:\n%s", b)
	}
}
