package config

import (
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Serve is the part of a config that only `kvarray serve` reads. Every key
// is top-level in kvarray.yaml, named as Redis names it where Redis has
// it (requirepass, protected_mode, tls_port, tls_cert_file, ...).
//
// Paths (TLS files) are the operator's: relative ones are relative to the
// config file's directory, and no client command can name another.
type Serve struct {
	// Requirepass is the default user's password (Redis's requirepass):
	// when set, a client must AUTH before any other command. The default
	// user may run every command.
	Requirepass string `yaml:"requirepass,omitempty"`
	// Users are ACL users besides the default one, each with a password
	// and a role.
	Users []User `yaml:"users,omitempty"`
	// ACLFile is Redis's aclfile: the ACL users, one a line ("user NAME
	// RULES...", passwords as SHA-256 hashes), read at start if it exists,
	// written by ACL SAVE and read again by ACL LOAD. Relative to the
	// config file's directory. Not with Users (as Redis refuses users in
	// redis.conf together with an aclfile).
	ACLFile string `yaml:"aclfile,omitempty"`
	// ProtectedMode refuses to listen beyond loopback while the default
	// user has no password (Redis's protected-mode). Default: true.
	ProtectedMode *bool `yaml:"protected_mode,omitempty"`
	// TLSPort, when not 0, is a second port, on the --listen host, that
	// speaks RESP over TLS with TLSCertFile and TLSKeyFile. With
	// TLSCACertFile, clients must present a certificate it signed.
	TLSPort       int    `yaml:"tls_port,omitempty"`
	TLSCertFile   string `yaml:"tls_cert_file,omitempty"`
	TLSKeyFile    string `yaml:"tls_key_file,omitempty"`
	TLSCACertFile string `yaml:"tls_ca_cert_file,omitempty"`
	// MetricsListen is the address of the Prometheus /metrics listener
	// (the --metrics-listen flag overrides it); empty: none.
	MetricsListen string `yaml:"metrics_listen,omitempty"`
	// MetricsToken, when set, is the bearer token a scraper must send
	// (Authorization: Bearer TOKEN) to read /metrics. serve refuses a
	// metrics_listen reachable beyond loopback without one: the metrics
	// name devices, paths and clients.
	MetricsToken string `yaml:"metrics_token,omitempty"`
	// LogFormat is "text" (default) or "json": the format of serve's
	// event log on standard error.
	LogFormat string `yaml:"log_format,omitempty"`
	// Dir and DBFilename name the RDB file SAVE and BGSAVE write (Redis's
	// dir, dbfilename): by default dump.rdb in the config file's
	// directory. Relative to the config file's directory.
	Dir        string `yaml:"dir,omitempty"`
	DBFilename string `yaml:"dbfilename,omitempty"`
	// ReplicaOf, "HOST PORT", makes serve a replica of that Redis from
	// its start (REPLICAOF); MasterUser and MasterAuth are what it
	// authenticates with (Redis's masteruser, masterauth).
	ReplicaOf  string `yaml:"replicaof,omitempty"`
	MasterUser string `yaml:"masteruser,omitempty"`
	MasterAuth string `yaml:"masterauth,omitempty"`
}

// Replica parses ReplicaOf: its host and port; ok false when unset.
func (s *Serve) Replica() (host string, port int, ok bool) {
	f := strings.Fields(s.ReplicaOf)
	if len(f) != 2 {
		return "", 0, false
	}
	port, err := strconv.Atoi(f[1])
	if err != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return f[0], port, true
}

// User is an ACL user.
type User struct {
	Name     string `yaml:"name"`
	Password string `yaml:"password"`
	// Role is "data" (data commands only: no KVARRAY.*, FLUSHALL, SWAPDB,
	// FLUSHDB, CONFIG SET, SHUTDOWN, DEBUG) or "admin" (every command).
	Role string `yaml:"role"`
}

// Roles of ACL users.
const (
	RoleData  = "data"
	RoleAdmin = "admin"
)

var userName = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)

func (s *Serve) validate(p *problems) {
	if _, _, ok := s.Replica(); s.ReplicaOf != "" && !ok {
		p.add("replicaof %q: want \"HOST PORT\", PORT 1 to 65535", s.ReplicaOf)
	}
	if strings.ContainsRune(s.DBFilename, '/') {
		p.add("dbfilename %q: a file name, not a path (the directory is dir)", s.DBFilename)
	}
	seen := map[string]bool{"default": true}
	for i, u := range s.Users {
		switch {
		case !userName.MatchString(u.Name):
			p.add("users[%d]: name %q: want 1 to 64 letters, digits, '_', '.', '@' or '-'", i, u.Name)
		case seen[u.Name]:
			p.add("users[%d]: user %q listed twice (the default user's password is requirepass)", i, u.Name)
		}
		seen[u.Name] = true
		if u.Password == "" {
			p.add("users[%d] (%s): password is empty: every ACL user needs one", i, u.Name)
		}
		if u.Role != RoleData && u.Role != RoleAdmin {
			p.add("users[%d] (%s): role %q: want %q or %q", i, u.Name, u.Role, RoleData, RoleAdmin)
		}
	}
	if s.ACLFile != "" && len(s.Users) > 0 {
		p.add("aclfile and users: define the ACL users in one of them (ACL SAVE writes the users, presets included, to the aclfile)")
	}
	if s.TLSPort < 0 || s.TLSPort > 65535 {
		p.add("tls_port %d: want a port, 1 to 65535 (0: no TLS)", s.TLSPort)
	}
	if s.TLSPort > 0 && (s.TLSCertFile == "" || s.TLSKeyFile == "") {
		p.add("tls_port %d needs tls_cert_file and tls_key_file", s.TLSPort)
	}
	if s.TLSPort == 0 && (s.TLSCertFile != "" || s.TLSKeyFile != "" || s.TLSCACertFile != "") {
		p.add("tls_cert_file, tls_key_file and tls_ca_cert_file need tls_port")
	}
	if s.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(s.MetricsListen); err != nil {
			p.add("metrics_listen %q: want HOST:PORT, e.g. 127.0.0.1:9380", s.MetricsListen)
		}
	}
	if s.LogFormat != "" && s.LogFormat != "text" && s.LogFormat != "json" {
		p.add("log_format %q: want text or json", s.LogFormat)
	}
}

// Protected reports whether protected mode is on (the default).
func (s *Serve) Protected() bool { return s.ProtectedMode == nil || *s.ProtectedMode }

// Path resolves a file path of the config (TLS files, aclfile) against the config
// file's directory.
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) || c.dir == "" {
		return p
	}
	return filepath.Join(c.dir, p)
}
