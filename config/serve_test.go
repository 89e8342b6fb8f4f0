package config

import (
	"strings"
	"testing"
)

// TestServeKeys: the serve keys parse (requirepass, ACL users, TLS,
// metrics, logs, protected mode), strictly, and every mistake is named.
func TestServeKeys(t *testing.T) {
	const devs = "devices: [mem:a, mem:b, mem:c]\n"
	c, err := Parse([]byte(devs+`requirepass: s3cret
users:
  - {name: app, password: pw1, role: data}
  - {name: ops, password: pw2, role: admin}
protected_mode: false
tls_port: 6390
tls_cert_file: cert.pem
tls_key_file: /etc/kvarray/key.pem
tls_ca_cert_file: ca.pem
metrics_listen: 127.0.0.1:9380
log_format: json
dir: snaps
dbfilename: kv.rdb
replicaof: "redis.example 6380"
masterauth: pw3
`), "/srv/kv")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Serve
	if s.Requirepass != "s3cret" || len(s.Users) != 2 || s.Users[1].Role != RoleAdmin || s.Protected() || s.TLSPort != 6390 ||
		s.MetricsListen != "127.0.0.1:9380" || s.LogFormat != "json" {
		t.Errorf("parsed %+v", s)
	}
	if h, p, ok := s.Replica(); !ok || h != "redis.example" || p != 6380 || s.MasterAuth != "pw3" || c.Path(s.Dir) != "/srv/kv/snaps" || s.DBFilename != "kv.rdb" {
		t.Errorf("replicaof %q parsed as %s %d %v; dir %s, dbfilename %s", s.ReplicaOf, h, p, ok, c.Path(s.Dir), s.DBFilename)
	}
	if got := c.Path(s.TLSCertFile); got != "/srv/kv/cert.pem" {
		t.Errorf("relative tls_cert_file resolves to %s", got)
	}
	if got := c.Path(s.TLSKeyFile); got != "/etc/kvarray/key.pem" {
		t.Errorf("absolute tls_key_file resolves to %s", got)
	}
	if d, _ := Parse([]byte(devs), ""); !d.Serve.Protected() {
		t.Error("protected mode is not on by default")
	}
	for _, c := range []struct{ yaml, want string }{
		{"requirepas: x\n", `unknown field "requirepas"`},
		{"users: [{name: app, password: p, role: data, extra: 1}]\n", `unknown field "extra"`},
		{"users: [{name: app, password: '', role: data}]\n", "password is empty"},
		{"users: [{name: app, password: p, role: root}]\n", `role "root": want "data" or "admin"`},
		{"users: [{name: default, password: p, role: data}]\n", `user "default" listed twice`},
		{"users: [{name: a b, password: p, role: data}]\n", `name "a b"`},
		{"aclfile: users.acl\nusers: [{name: app, password: p, role: data}]\n", "aclfile and users: define the ACL users in one of them"},
		{"tls_port: 6390\n", "tls_port 6390 needs tls_cert_file and tls_key_file"},
		{"tls_port: 70000\ntls_cert_file: a\ntls_key_file: b\n", "tls_port 70000"},
		{"tls_cert_file: a\n", "need tls_port"},
		{"metrics_listen: 9380\n", `metrics_listen "9380": want HOST:PORT`},
		{"log_format: xml\n", `log_format "xml"`},
		{"replicaof: redis.example\n", `replicaof "redis.example": want "HOST PORT"`},
		{"replicaof: h 0\n", `replicaof "h 0"`},
		{"dbfilename: a/b.rdb\n", `dbfilename "a/b.rdb": a file name`},
	} {
		_, err := Parse([]byte(devs+c.yaml), "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.yaml, err, c.want)
		}
	}
}
