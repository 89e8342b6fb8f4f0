package pubsub

import (
	"fmt"
	"slices"
	"testing"
)

type rec struct{ got []string }

func (r *rec) Deliver(m *Message) {
	r.got = append(r.got, fmt.Sprintf("%d %s %s %s", m.Kind, m.Pattern, m.Channel, m.Payload))
}

// TestHub: a channel's subscribers and every matching pattern's get a
// message, once each; PUBLISH counts them; unsubscribed means no more;
// shard channels are apart from plain ones.
func TestHub(t *testing.T) {
	var h Hub
	a, b := &rec{}, &rec{}
	if !h.Subscribe(a, Channel, "news") || h.Subscribe(a, Channel, "news") {
		t.Fatal("Subscribe: want true, then false for the same subscription")
	}
	h.Subscribe(a, Pattern, "n*")
	h.Subscribe(b, Pattern, "n*")
	h.Subscribe(b, Shard, "news")
	if n := h.Publish(Channel, []byte("news"), []byte("hi")); n != 3 {
		t.Errorf("Publish = %d, want 3", n)
	}
	if want := []string{"0  news hi", "1 n* news hi"}; !slices.Equal(a.got, want) {
		t.Errorf("a got %q, want %q", a.got, want)
	}
	if n := h.Publish(Shard, []byte("news"), []byte("s")); n != 1 || b.got[len(b.got)-1] != "2  news s" {
		t.Errorf("shard Publish = %d, b got %q", n, b.got)
	}
	if !h.Unsubscribe(a, Channel, "news") || h.Unsubscribe(a, Channel, "news") {
		t.Error("Unsubscribe: want true, then false")
	}
	if n := h.Publish(Channel, []byte("news"), []byte("x")); n != 2 {
		t.Errorf("Publish after Unsubscribe = %d, want the 2 patterns", n)
	}
	if got := h.Names(Channel, nil); len(got) != 0 {
		t.Errorf("Names = %q, want none", got)
	}
	if h.Patterns() != 1 || h.Count(Pattern, "n*") != 2 {
		t.Errorf("Patterns %d, Count(n*) %d", h.Patterns(), h.Count(Pattern, "n*"))
	}
}

// TestEvents: notify-keyspace-events strings read and print as Redis
// 7.0's keyspaceEventsStringToFlags and FlagsToString do.
func TestEvents(t *testing.T) {
	for in, want := range map[string]string{"gKE": "gKE", "$lshzxeKE": "$lshzxeKE", "KA": "AK", "EA": "AE", "": "",
		"Kn": "nK", "An": "A", "Em": "Em", "EgA": "AE"} {
		e, ok := ParseEvents(in)
		if !ok || e.String() != want {
			t.Errorf("ParseEvents(%q) = %q, %v; want %q", in, e, ok, want)
		}
	}
	if _, ok := ParseEvents("KEq"); ok {
		t.Error("ParseEvents(KEq) accepted an unknown class")
	}
}

// TestNotify: nothing unless the class is configured; K and E publish on
// their channels.
func TestNotify(t *testing.T) {
	var h Hub
	r := &rec{}
	h.Subscribe(r, Pattern, "*")
	h.Notify(Keyspace|Keyevent|String, Generic, "del", 0, []byte("k"))
	if len(r.got) != 0 {
		t.Errorf("an unconfigured class published %q", r.got)
	}
	h.Notify(Keyspace|Keyevent|Generic, Generic, "del", 3, []byte("k"))
	want := []string{"1 * __keyspace@3__:k del", "1 * __keyevent@3__:del k"}
	if !slices.Equal(r.got, want) {
		t.Errorf("got %q, want %q", r.got, want)
	}
}
