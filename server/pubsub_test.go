package server

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPubSubRESP2: confirmations, messages and pmessages as Redis 7 sends
// them in RESP2, the commands refused in subscribed mode, PING's reply
// there, and PUBLISH's count (a channel subscriber plus a matching
// pattern's).
func TestPubSubRESP2(t *testing.T) {
	ts := startServer(t, "")
	sub, pub := ts.dial(), ts.dial()
	if r := sub.do("SUBSCRIBE", "news", "sport"); r.String() != `[$"subscribe" $"news" :"1"]` {
		t.Fatalf("SUBSCRIBE news sport: %s", r)
	}
	if r := sub.read(); r.String() != `[$"subscribe" $"sport" :"2"]` {
		t.Fatalf("second confirmation: %s", r)
	}
	if r := sub.do("PSUBSCRIBE", "n*"); r.String() != `[$"psubscribe" $"n*" :"3"]` {
		t.Fatalf("PSUBSCRIBE n*: %s", r)
	}
	if r := sub.do("GET", "x"); r.line() != "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context" {
		t.Errorf("GET while subscribed: %s", r)
	}
	if r := sub.do("PING"); r.String() != `[$"pong" $""]` {
		t.Errorf("PING while subscribed: %s", r)
	}
	if r := pub.do("PUBLISH", "news", "hello"); r.line() != ":2" {
		t.Errorf("PUBLISH news: %s, want 2 (channel and pattern)", r)
	}
	if r := sub.read(); r.String() != `[$"message" $"news" $"hello"]` {
		t.Errorf("message: %s", r)
	}
	if r := sub.read(); r.String() != `[$"pmessage" $"n*" $"news" $"hello"]` {
		t.Errorf("pmessage: %s", r)
	}
	if r := pub.do("PUBSUB", "NUMSUB", "news", "none"); r.String() != `[$"news" :"1" $"none" :"0"]` {
		t.Errorf("PUBSUB NUMSUB: %s", r)
	}
	if r := pub.do("PUBSUB", "CHANNELS"); r.String() != `[$"news" $"sport"]` {
		t.Errorf("PUBSUB CHANNELS: %s", r)
	}
	if r := pub.do("PUBSUB", "NUMPAT"); r.line() != ":1" {
		t.Errorf("PUBSUB NUMPAT: %s", r)
	}
	if r := sub.do("UNSUBSCRIBE", "news"); r.String() != `[$"unsubscribe" $"news" :"2"]` {
		t.Errorf("UNSUBSCRIBE news: %s", r)
	}
	if r := pub.do("PUBLISH", "news", "again"); r.line() != ":1" {
		t.Errorf("PUBLISH after UNSUBSCRIBE: %s, want the pattern only", r)
	}
	if r := sub.read(); r.String() != `[$"pmessage" $"n*" $"news" $"again"]` {
		t.Errorf("pmessage after UNSUBSCRIBE: %s", r)
	}
	sub.do("PUNSUBSCRIBE")
	if r := sub.do("UNSUBSCRIBE"); r.String() != `[$"unsubscribe" $"sport" :"0"]` {
		t.Errorf("UNSUBSCRIBE (all): %s", r)
	}
	if r := sub.do("UNSUBSCRIBE"); r.String() != `[$"unsubscribe" (nil) :"0"]` {
		t.Errorf("UNSUBSCRIBE with none: %s", r)
	}
	if r := sub.do("SET", "x", "1"); r.line() != "+OK" {
		t.Errorf("SET once unsubscribed: %s", r)
	}
	if r := sub.do("SSUBSCRIBE", "sh"); r.String() != `[$"ssubscribe" $"sh" :"1"]` {
		t.Errorf("SSUBSCRIBE: %s", r)
	}
	if r := pub.do("SPUBLISH", "sh", "m"); r.line() != ":1" {
		t.Errorf("SPUBLISH: %s", r)
	}
	if r := sub.read(); r.String() != `[$"smessage" $"sh" $"m"]` {
		t.Errorf("smessage: %s", r)
	}
	if r := sub.do("RESET"); r.line() != "+RESET" {
		t.Errorf("RESET: %s", r)
	}
	if r := pub.do("SPUBLISH", "sh", "m"); r.line() != ":0" {
		t.Errorf("SPUBLISH after RESET: %s", r)
	}
}

// TestPubSubRESP3: under RESP3 confirmations and messages are pushes, and
// a subscribed connection runs any command.
func TestPubSubRESP3(t *testing.T) {
	ts := startServer(t, "")
	sub, pub := ts.dial(), ts.dial()
	sub.do("HELLO", "3")
	if r := sub.do("SUBSCRIBE", "c"); r.kind != '>' || r.String() != `>[$"subscribe" $"c" :"1"]` {
		t.Fatalf("SUBSCRIBE under RESP3: %c %s", r.kind, r)
	}
	if r := sub.do("SET", "k", "v"); r.line() != "+OK" {
		t.Errorf("SET while subscribed, RESP3: %s", r)
	}
	pub.do("PUBLISH", "c", "m")
	if r := sub.read(); r.kind != '>' || r.String() != `>[$"message" $"c" $"m"]` {
		t.Errorf("message under RESP3: %c %s", r.kind, r)
	}
}

// TestPubSubGoRedis: go-redis's PubSub receives what is published, in
// order, with many messages in flight.
func TestPubSubGoRedis(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	c := ts.client()
	ps := c.Subscribe(ctx, "jobs")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	go func() {
		p := ts.client()
		for i := range n {
			p.Publish(ctx, "jobs", strings.Repeat("x", i%50))
		}
	}()
	ch := ps.Channel()
	for i := range n {
		select {
		case m := <-ch:
			if m.Channel != "jobs" || m.Payload != strings.Repeat("x", i%50) {
				t.Fatalf("message %d: %q on %q", i, m.Payload, m.Channel)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d did not arrive", i)
		}
	}
}

// TestPubSubSlowSubscriber: a subscriber that never reads does not block
// publishers, and once its messages pass the pubsub output limit its
// connection is closed; another subscriber gets every message.
func TestPubSubSlowSubscriber(t *testing.T) {
	ts := startServer(t, "")
	stalled, good, pub := ts.dial(), ts.dial(), ts.dial()
	stalled.do("SUBSCRIBE", "c")
	good.do("SUBSCRIBE", "c")
	msg := strings.Repeat("m", 64<<10)
	done := make(chan struct{})
	got := 0
	go func() {
		defer close(done)
		for got < 800 {
			if r := good.read(); r.String() != `[$"message" $"c" $"`+msg+`"]` {
				t.Errorf("good subscriber: %.60s", r.String())
				return
			}
			got++
		}
	}()
	start := time.Now()
	for i := range 800 { // 50 MiB, over the 32 MiB hard limit
		if r := pub.do("PUBLISH", "c", msg); r.kind != ':' {
			t.Fatalf("PUBLISH %d: %s", i, r)
		}
	}
	t.Logf("800 PUBLISHes of 64 KiB with a stalled subscriber: %v", time.Since(start))
	<-done
	if got != 800 {
		t.Errorf("the reading subscriber got %d of 800 messages", got)
	}
	if r := pub.do("PUBSUB", "NUMSUB", "c"); r.String() != `[$"c" :"1"]` {
		t.Errorf("NUMSUB after the stalled subscriber passed the limit: %s, want 1 (it was closed)", r)
	}
}

// TestKeyspaceNotifications: with notify-keyspace-events set, writes
// publish Redis's keyspace and keyevent messages, in order, for strings
// and generic commands, new keys and expiry; a transaction's are
// published only once it has committed; the flags read back in Redis's
// canonical form.
func TestKeyspaceNotifications(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	sub := ts.dial()
	if r := c.do("CONFIG", "SET", "notify-keyspace-events", "KEA"); r.line() != "+OK" {
		t.Fatalf("CONFIG SET: %s", r)
	}
	if r := c.do("CONFIG", "GET", "notify-keyspace-events"); len(r.elems) != 2 || r.elems[1].str != "AKE" {
		t.Errorf("CONFIG GET notify-keyspace-events: %s, want AKE", r)
	}
	if r := c.do("CONFIG", "SET", "notify-keyspace-events", "KEAq"); !strings.Contains(r.line(), "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.") {
		t.Errorf("CONFIG SET with a bad class: %s", r)
	}
	sub.do("PSUBSCRIBE", "__keyevent@0__:*")
	for _, cmd := range [][]string{{"SET", "a", "1", "EX", "100"}, {"INCRBY", "a", "2"}, {"APPEND", "a", "x"}, {"RENAME", "a", "b"},
		{"PERSIST", "b"}, {"EXPIRE", "b", "100"}, {"DEL", "b", "nokey"}, {"MSET", "m", "1"}, {"GETDEL", "m"}} {
		if r := c.do(cmd...); r.isError() {
			t.Fatalf("%v: %s", cmd, r)
		}
	}
	c.do("MULTI")
	c.do("SET", "t", "1")
	c.do("DEL", "t")
	c.do("EXEC")
	c.do("PSETEX", "gone", "50", "v")
	want := []string{"set a", "expire a", "incrby a", "append a", "rename_from a", "rename_to b", "persist b", "expire b",
		"del b", "set m", "del m", "set t", "del t", "set gone", "expire gone", "expired gone"}
	for _, w := range want {
		sub.SetReadDeadline(time.Now().Add(10 * time.Second))
		r := sub.read()
		if len(r.elems) != 4 {
			t.Fatalf("want event %q, got %s", w, r)
		}
		ev, key, _ := strings.Cut(w, " ")
		if r.elems[2].str != "__keyevent@0__:"+ev || r.elems[3].str != key {
			t.Errorf("event %s, want %q", r, w)
		}
	}
	// "new" only when asked for, and only for a key that did not exist.
	c.do("CONFIG", "SET", "notify-keyspace-events", "En")
	c.do("SET", "fresh", "1")
	c.do("SET", "fresh", "2")
	c.do("SET", "other", "1")
	for _, key := range []string{"fresh", "other"} {
		if r := sub.read(); len(r.elems) != 4 || r.elems[2].str != "__keyevent@0__:new" || r.elems[3].str != key {
			t.Errorf("new event for %s: %s", key, r)
		}
	}
}

// TestSubscribersKilledOnRevoke: acl.tcl's "Subscribers are killed when
// revoked of channel/pattern permission" for SUBSCRIBE, SSUBSCRIBE and
// PSUBSCRIBE: once ACL SETUSER takes the channel away, the subscriber's
// connection is gone from CLIENT LIST; one whose channel is still allowed
// stays.
func TestSubscribersKilledOnRevoke(t *testing.T) {
	ts := startServer(t, "")
	r := ts.dial()
	for _, tc := range []struct{ grant, sub, name string }{
		{"&foo:1", "SUBSCRIBE", "foo:1"}, {"&foo:1", "SSUBSCRIBE", "foo:1"}, {"&bar:*", "PSUBSCRIBE", "bar:*"},
	} {
		if rep := r.do("ACL", "SETUSER", "psuser", "on", ">pspass", "+@all", "resetchannels", tc.grant); rep.line() != "+OK" {
			t.Fatalf("ACL SETUSER: %s", rep)
		}
		rd, keep := ts.dial(), ts.dial()
		for _, c := range []*rawConn{rd, keep} {
			c.do("AUTH", "psuser", "pspass")
		}
		rd.do("CLIENT", "SETNAME", "deathrow")
		keep.do("CLIENT", "SETNAME", "survivor")
		if rep := rd.do(tc.sub, tc.name); rep.isError() {
			t.Fatalf("%s %s: %s", tc.sub, tc.name, rep)
		}
		r.do("ACL", "SETUSER", "psuser", "resetchannels", "&other")
		list := r.do("CLIENT", "LIST").str
		if strings.Contains(list, "deathrow") {
			t.Errorf("%s: the subscriber survived the revoke:\n%s", tc.sub, list)
		}
		if !strings.Contains(list, "survivor") {
			t.Errorf("%s: a connection of the user without subscriptions was closed too", tc.sub)
		}
		rd.expectEOF()
	}
}

// TestCollectionNotificationsAsRedis: the hash and set commands publish
// the keyevent messages a real redis-server publishes for the same
// commands, in the same order: the command's event, "new" for a key
// created, "del" for a collection emptied, SMOVE's two keys, and the
// STORE forms' destination.
func TestCollectionNotificationsAsRedis(t *testing.T) {
	redisAddr := startRedis(t)
	ts := startServer(t, "")
	script := [][]string{
		{"HSET", "h", "a", "1", "b", "2"}, {"HSETNX", "h", "a", "x"}, {"HSETNX", "h", "c", "3"}, {"HMSET", "h", "d", "4"},
		{"HINCRBY", "h", "a", "5"}, {"HINCRBYFLOAT", "h", "b", "0.5"}, {"HDEL", "h", "nofield"}, {"HDEL", "h", "a", "b", "c"},
		{"HDEL", "h", "d"}, {"SADD", "s", "1", "2", "x"}, {"SADD", "s", "1"}, {"SREM", "s", "nomember"}, {"SREM", "s", "1"},
		{"SMOVE", "s", "t", "2"}, {"SMOVE", "s", "t", "x"}, {"SMOVE", "t", "t", "x"}, {"SADD", "u", "x", "y"},
		{"SINTERSTORE", "d", "t", "u"}, {"SUNIONSTORE", "d", "t", "u"}, {"SDIFFSTORE", "d", "t", "u"}, {"SDIFFSTORE", "d", "t", "t"},
		{"SDIFFSTORE", "none", "t", "t"}, {"SPOP", "u", "5"}, {"SPOP", "nokey"}, {"SET", "end", "1"},
	}
	events := func(addr string) []string {
		c, sub := (&testServer{t: t, addr: addr}).dial(), (&testServer{t: t, addr: addr}).dial()
		c.do("CONFIG", "SET", "notify-keyspace-events", "EAn")
		sub.do("PSUBSCRIBE", "__keyevent@0__:*")
		for _, cmd := range script {
			c.do(cmd...)
		}
		var got []string
		for {
			sub.SetReadDeadline(time.Now().Add(10 * time.Second))
			r := sub.read()
			if len(r.elems) != 4 {
				t.Fatalf("%s: not an event: %s", addr, r)
			}
			ev := strings.TrimPrefix(r.elems[2].str, "__keyevent@0__:") + " " + r.elems[3].str
			if ev == "set end" {
				return got
			}
			got = append(got, ev)
		}
	}
	want, got := events(redisAddr), events(ts.addr)
	if len(want) < 20 {
		t.Fatalf("redis-server published only %q", want)
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\nkvarray %q\nredis   %q", got, want)
	}
}
