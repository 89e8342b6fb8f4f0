package acl

import (
	"errors"
	"strings"
	"testing"
)

// The cases of Redis 7.0's acl.tcl and acl-v2.tcl about commands kvarray
// does not serve (pub/sub channels, MIGRATE, SORT, EVAL, GEORADIUS, hash,
// set and sorted set commands), checked on the ACL itself with Redis's
// command table, as ACL DRYRUN checks them in Redis. The server's tests
// (server/acl_test.go) port the rest.

func newACL(t *testing.T) *ACL {
	t.Helper()
	return New(NewTable(Redis70()))
}

func setUser(t *testing.T, a *ACL, name string, rules ...string) *User {
	t.Helper()
	if err := a.SetUser(name, rules); err != nil {
		t.Fatalf("SETUSER %s %v: %v", name, rules, err)
	}
	return a.User(name)
}

// dryRun is ACL DRYRUN's answer.
func dryRun(a *ACL, u *User, args ...string) string {
	b := make([][]byte, len(args))
	for i, s := range args {
		b[i] = []byte(s)
	}
	c := a.Table().Resolve(b)
	if c == nil {
		return "no such command"
	}
	r, pos := a.Check(u, c, b)
	return DryRun(r, c, b, pos)
}

func TestDryRunKeySpecs(t *testing.T) {
	a := newACL(t)
	u := setUser(t, a, "command-test", "+@all", "%R~read*", "%W~write*", "%RW~rw*")
	noKey := func(k string) string { return "This user has no permissions to access the '" + k + "' key" }
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"OK", []string{"MIGRATE", "whatever", "whatever", "rw", "0", "500"}},
		{noKey("read"), []string{"MIGRATE", "whatever", "whatever", "read", "0", "500"}},
		{noKey("write"), []string{"MIGRATE", "whatever", "whatever", "write", "0", "500"}},
		{"OK", []string{"MIGRATE", "whatever", "whatever", "", "0", "5000", "KEYS", "rw"}},
		{noKey("read"), []string{"MIGRATE", "whatever", "whatever", "", "0", "5000", "KEYS", "read"}},
		{noKey("write"), []string{"MIGRATE", "whatever", "whatever", "", "0", "5000", "KEYS", "write"}},
		{"OK", []string{"MIGRATE", "whatever", "whatever", "", "0", "5000", "AUTH", "KEYS", "KEYS", "rw"}},
		{noKey("read"), []string{"MIGRATE", "whatever", "whatever", "", "0", "5000", "AUTH", "KEYS", "KEYS", "read"}},
		{"OK", []string{"MIGRATE", "whatever", "whatever", "", "0", "5000", "AUTH2", "KEYS", "123", "KEYS", "rw"}},
		{noKey("write"), []string{"MIGRATE", "whatever", "whatever", "", "0", "5000", "AUTH2", "USER", "KEYS", "KEYS", "write"}},
		{"OK", []string{"SORT", "read", "STORE", "write"}},
		{noKey("read"), []string{"SORT", "read", "STORE", "read"}},
		{noKey("write"), []string{"SORT", "write", "STORE", "write"}},
		{"OK", []string{"EVAL", "", "1", "rw1"}},
		{noKey("read"), []string{"EVAL", "", "1", "read"}},
		{"OK", []string{"EVAL_RO", "", "1", "rw1"}},
		{"OK", []string{"EVAL_RO", "", "1", "read"}},
		{"OK", []string{"EVAL", "", "0", "read"}},
		{"OK", []string{"EVAL", "", "-1", "read"}},
		{"OK", []string{"EVAL", "", "3", "rw", "rw"}},
		{"OK", []string{"EVAL", "", "3", "rw", "read"}},
		{"OK", []string{"GEORADIUS", "read", "longitude", "latitude", "radius", "M", "STOREDIST", "write"}},
		{"OK", []string{"GEORADIUS", "read", "longitude", "latitude", "radius", "M"}},
		{noKey("read2"), []string{"GEORADIUS", "read1", "longitude", "latitude", "radius", "M", "STOREDIST", "read2"}},
		{noKey("write1"), []string{"GEORADIUS", "write1", "longitude", "latitude", "radius", "M", "STOREDIST", "write2"}},
		{"OK", []string{"GEORADIUS", "read", "longitude", "latitude", "radius", "M", "STORE", "write"}},
		{noKey("read2"), []string{"GEORADIUS", "read1", "longitude", "latitude", "radius", "M", "STORE", "read2"}},
		// Existence tests are not access: either permission will do.
		{"OK", []string{"HEXISTS", "read", "foo"}},
		{"OK", []string{"HEXISTS", "write", "foo"}},
		{noKey("nothing"), []string{"HEXISTS", "nothing", "foo"}},
		{"OK", []string{"HSTRLEN", "write", "foo"}},
		{"OK", []string{"SISMEMBER", "write", "foo"}},
		// Intersection cardinalities are.
		{"OK", []string{"SINTERCARD", "2", "read", "read"}},
		{noKey("write"), []string{"SINTERCARD", "2", "write", "read"}},
		{noKey("nothing"), []string{"ZCOUNT", "nothing", "0", "1"}},
		{noKey("write"), []string{"PFCOUNT", "write", "read"}},
		{"OK", []string{"ZINTERCARD", "2", "read", "read"}},
		{noKey("write"), []string{"ZINTERCARD", "2", "write", "read"}},
		// BITFIELD: read only with GETs only.
		{"OK", []string{"BITFIELD", "read", "get", "u4", "0"}},
		{noKey("read"), []string{"BITFIELD", "read", "set", "u4", "0", "1"}},
		{noKey("read"), []string{"BITFIELD", "read", "get", "u4", "0", "set", "u4", "0", "1"}},
		{noKey("write"), []string{"BITFIELD", "write", "get", "u4", "0"}},
		{"OK", []string{"BITFIELD", "rw", "incrby", "u4", "0", "1"}},
	} {
		if got := dryRun(a, u, tc.args...); got != tc.want {
			t.Errorf("DRYRUN %q: %q, want %q", tc.args, got, tc.want)
		}
	}
	for _, c := range []string{"STRLEN", "HLEN", "LLEN", "SCARD", "ZCARD", "XLEN"} {
		for _, k := range []string{"read", "write", "rw"} {
			if got := dryRun(a, u, c, k); got != "OK" {
				t.Errorf("DRYRUN %s %s: %q", c, k, got)
			}
		}
		if got := dryRun(a, u, c, "nothing"); got != noKey("nothing") {
			t.Errorf("DRYRUN %s nothing: %q", c, got)
		}
	}
	s := setUser(t, a, "scripter", "on", "nopass", "+readonly")
	for _, c := range []string{"EVAL_RO", "EVALSHA_RO", "FCALL_RO"} {
		want := "This user has no permissions to run the '" + strings.ToLower(c) + "' command"
		if got := dryRun(a, s, c, "", "0"); got != want {
			t.Errorf("DRYRUN %s as +readonly: %q", c, got)
		}
	}
}

// TestChannels: acl.tcl's publish and subscribe permissions and
// acl-v2.tcl's sharded channels.
func TestChannels(t *testing.T) {
	a := newACL(t)
	def := a.Default()
	psuser := setUser(t, a, "psuser", "on", "nopass", "+@all", "-@dangerous", "resetchannels")
	noChan := func(c string) string { return "This user has no permissions to access the '" + c + "' channel" }
	for _, args := range [][]string{{"PUBLISH", "foo", "bar"}, {"SPUBLISH", "foo", "bar"}, {"SUBSCRIBE", "foo"}, {"SSUBSCRIBE", "foo"}, {"PSUBSCRIBE", "foo"}} {
		if got := dryRun(a, def, args...); got != "OK" {
			t.Errorf("default %v: %q", args, got)
		}
		if got := dryRun(a, psuser, args...); got != noChan("foo") {
			t.Errorf("psuser %v: %q", args, got)
		}
	}
	setUser(t, a, "psuser", "resetchannels", "&foo:1", "&bar:*")
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"OK", []string{"PUBLISH", "foo:1", "somemessage"}},
		{"OK", []string{"PUBLISH", "bar:2", "anothermessage"}},
		{noChan("zap:3"), []string{"PUBLISH", "zap:3", "nosuchmessage"}},
		{"OK", []string{"SUBSCRIBE", "foo:1", "bar:2"}},
		{noChan("zap:3"), []string{"SUBSCRIBE", "foo:1", "bar:2", "zap:3"}},
		// A PSUBSCRIBE pattern is matched literally.
		{"OK", []string{"PSUBSCRIBE", "bar:*"}},
		{noChan("bar:2"), []string{"PSUBSCRIBE", "bar:2"}},
		// UNSUBSCRIBE is not checked.
		{"OK", []string{"SUNSUBSCRIBE", "otherchannel"}},
	} {
		if got := dryRun(a, psuser, tc.args...); got != tc.want {
			t.Errorf("psuser %q: %q, want %q", tc.args, got, tc.want)
		}
	}
	// Channel rules in descriptions: resetchannels before the patterns.
	if l := a.Describe(psuser); !strings.Contains(l, "resetchannels &foo:1 &bar:*") {
		t.Errorf("describe: %q", l)
	}
	setUser(t, a, "hpuser", "on", "nopass", "resetchannels", "&foo", "+@all")
	if l := a.Describe(a.User("hpuser")); !strings.Contains(l, "resetchannels &foo") {
		t.Errorf("describe: %q", l)
	}
	if err := a.SetUser("x", []string{"&*", "&foo"}); !errors.Is(err, ErrAfterAllChans) {
		t.Errorf("&* &foo: %v", err)
	}
	if err := a.SetUser("x", []string{"~*", "~foo"}); !errors.Is(err, ErrAfterAllKeys) {
		t.Errorf("~* ~foo: %v", err)
	}
}

// TestDescribe: ACL LIST's strings, as Redis 7.0 formats them.
func TestDescribe(t *testing.T) {
	a := newACL(t)
	if l := a.List(); len(l) != 1 || l[0] != "user default on nopass ~* &* +@all" {
		t.Errorf("ACL LIST: %q", l)
	}
	setUser(t, a, "r", "reset")
	if d := a.Describe(a.User("r")); d != "off sanitize-payload resetchannels -@all" {
		t.Errorf("reset user: %q", d)
	}
	setUser(t, a, "p", "on", ">pw", "~a*", "%R~b*", "%W~c*", "&ch", "+get", "(~x +set)")
	want := "on #" + HashPassword("pw") + " ~a* %R~b* %W~c* resetchannels &ch -@all +get (~x resetchannels -@all +set)"
	if d := a.Describe(a.User("p")); d != want {
		t.Errorf("describe:\n%q\nwant\n%q", d, want)
	}
	// Describing, then applying the description, gives the same user.
	for _, rules := range [][]string{
		{"+@all", "-@dangerous", "+info", "+config|get", "-debug", "+debug|digest"},
		{"-@all", "+@read", "-get", "+select|0", "+client|id"},
		{"+@all", "-@admin", "-@dangerous", "+keys", "+lastsave", "+client|kill"},
	} {
		setUser(t, a, "rt", append([]string{"reset"}, rules...)...)
		d := a.Describe(a.User("rt"))
		setUser(t, a, "rt2", append([]string{"reset"}, strings.Fields(d)...)...)
		if d2 := a.Describe(a.User("rt2")); d2 != d {
			t.Errorf("round trip of %v: %q, then %q", rules, d, d2)
		}
	}
	// Errors change nothing.
	before := a.Describe(a.User("p"))
	err := a.SetUser("p", []string{"+get", "+nosuch"})
	if err == nil || err.Error() != "Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL" {
		t.Errorf("+nosuch: %v", err)
	}
	if after := a.Describe(a.User("p")); after != before {
		t.Errorf("a failed SETUSER changed the user: %q", after)
	}
	if err := a.SetUser("p", []string{"<nosuch"}); !errors.Is(err, ErrNoSuchPassword) {
		t.Errorf("<nosuch: %v", err)
	}
}

// TestAuthenticate: passwords, nopass, off.
func TestAuthenticate(t *testing.T) {
	a := newACL(t)
	setUser(t, a, "u", ">p1", "#"+HashPassword("p2"))
	if a.Authenticate("u", []byte("p1")) != nil {
		t.Errorf("an off user authenticated")
	}
	setUser(t, a, "u", "on")
	if a.Authenticate("u", []byte("p1")) == nil || a.Authenticate("u", []byte("p2")) == nil || a.Authenticate("u", []byte("p3")) != nil {
		t.Errorf("passwords p1, p2 (not p3) should work")
	}
	setUser(t, a, "u", "nopass")
	if a.Authenticate("u", []byte("anything")) == nil {
		t.Errorf("nopass")
	}
	setUser(t, a, "u", "resetpass")
	if a.Authenticate("u", []byte("anything")) != nil {
		t.Errorf("resetpass")
	}
	if a.Authenticate("nobody", nil) != nil {
		t.Errorf("unknown user")
	}
}

func TestLoad(t *testing.T) {
	a := newACL(t)
	_, err := a.Load("f.acl", "user x on\nuser x off\n")
	if err == nil || LoadErrorText(err) != "WARNING: Duplicate user 'x' found on line 2. WARNING: ACL errors detected, no change to the previously active ACL rules was performed" {
		t.Errorf("duplicate users: %v", err)
	}
	_, err = a.Load("f.acl", "user default on nopass ~* +@all\nuser default on\n")
	if err == nil || !strings.Contains(err.Error(), "Duplicate user 'default' found on line 2") {
		t.Errorf("duplicate default user: %v", err)
	}
	def := a.Default()
	if _, err := a.Load("f.acl", "user default on #"+HashPassword("pw")+" ~* &* +@all\nuser bob on nopass ~* -@all +get\n"); err != nil {
		t.Fatal(err)
	}
	if a.Default() != def || a.Authenticate("default", []byte("pw")) == nil || a.User("bob") == nil {
		t.Errorf("after LOAD: %q", a.List())
	}
	if got := a.Save(); got != "user bob on nopass ~* resetchannels -@all +get\nuser default on #"+HashPassword("pw")+" ~* &* +@all\n" {
		t.Errorf("Save: %q", got)
	}
}

// TestConcurrent: connections check and read their user's name while
// ACL SETUSER and ACL LOAD change it (run with -race).
func TestConcurrent(t *testing.T) {
	a := newACL(t)
	u := setUser(t, a, "u", "on", "nopass", "~*", "+get")
	get := a.Table().Lookup("get")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			a.Check(u, get, [][]byte{[]byte("get"), []byte("k")})
			_ = u.Name()
			_ = a.Default().Name()
		}
	}()
	for i := range 200 {
		if i%2 == 0 {
			setUser(t, a, "u", "-get")
		} else {
			setUser(t, a, "u", "+get")
		}
		if _, err := a.Load("f", "user default on nopass ~* &* +@all\n"); err != nil {
			t.Fatal(err)
		}
	}
	<-done
}
