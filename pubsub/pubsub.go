// Package pubsub is the registry of Redis pub/sub subscriptions: which
// subscribers listen on which channels, patterns and shard channels, and
// the fan-out of a published message to them. It holds no connection and
// does no I/O: a Subscriber's Deliver queues the message for its own
// writer and returns at once.
//
// Invariants:
//   - Publish delivers a message to each subscriber of the channel once,
//     and once more for each of its patterns that matches (as Redis: a
//     client subscribed to "a" and to "a*" gets both a message and a
//     pmessage); it returns that count, PUBLISH's reply.
//   - Deliver is called with the registry's read lock held, so a
//     subscriber that has unsubscribed (Unsubscribe returned) gets nothing
//     more from that channel, and messages published by one goroutine
//     reach each subscriber in the order they were published.
//   - One Publish hands one Message to each of its subscribers in turn, on
//     the publisher's goroutine, so the subscribers may encode it once for
//     all of them (Message.Encoded): a message to a thousand subscribers
//     is encoded once, not a thousand times.
//   - Deliver must not block: a slow subscriber is the subscriber's own
//     problem (its output limit), never the publisher's.
package pubsub

import (
	"slices"
	"sync"

	"github.com/kvarray/kvarray/internal/glob"
)

// Kind is what a subscription is to.
type Kind int

// The kinds of subscription: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE.
const (
	Channel Kind = iota
	Pattern
	Shard
	NumKinds
)

// Subscriber receives messages. Deliver must not keep m, nor its slices,
// past its return.
type Subscriber interface {
	Deliver(m *Message)
}

// Message is one message published, as a subscriber receives it.
type Message struct {
	Kind    Kind   // Pattern when it came through a pattern subscription
	Pattern []byte // the pattern that matched (kind Pattern), else nil
	Channel []byte
	Payload []byte
	// Encoded is the subscribers' own: what one of them encoded of the
	// message (say, one entry per protocol), for the next ones of the
	// same Publish to copy. Publish leaves it empty.
	Encoded [2][]byte
}

// Hub is the registry. The zero value is ready to use.
type Hub struct {
	mu   sync.RWMutex
	subs [NumKinds]map[string]map[Subscriber]struct{}
}

// Subscribe adds s to name's subscribers of kind and reports whether it
// was not among them already.
func (h *Hub) Subscribe(s Subscriber, kind Kind, name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.subs[kind]
	if m == nil {
		m = map[string]map[Subscriber]struct{}{}
		h.subs[kind] = m
	}
	set := m[name]
	if set == nil {
		set = map[Subscriber]struct{}{}
		m[name] = set
	}
	if _, ok := set[s]; ok {
		return false
	}
	set[s] = struct{}{}
	return true
}

// Unsubscribe removes s from name's subscribers of kind and reports
// whether it was among them.
func (h *Hub) Unsubscribe(s Subscriber, kind Kind, name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[kind][name]
	if _, ok := set[s]; !ok {
		return false
	}
	delete(set, s)
	if len(set) == 0 {
		delete(h.subs[kind], name)
	}
	return true
}

// Publish delivers message on channel (kind Channel: to the channel's
// subscribers and the matching patterns'; kind Shard: to the shard
// channel's) and returns how many deliveries it made.
func (h *Hub) Publish(kind Kind, channel, message []byte) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	if set := h.subs[kind][string(channel)]; len(set) > 0 {
		m := &Message{Kind: kind, Channel: channel, Payload: message}
		for s := range set {
			s.Deliver(m)
			n++
		}
	}
	if kind != Channel {
		return n
	}
	for pat, set := range h.subs[Pattern] {
		p := []byte(pat)
		if !glob.Match(p, channel) {
			continue
		}
		m := &Message{Kind: Pattern, Pattern: p, Channel: channel, Payload: message}
		for s := range set {
			s.Deliver(m)
			n++
		}
	}
	return n
}

// Names returns the channels (or shard channels) of kind that have
// subscribers and match pattern (nil: all), sorted; for kind Pattern, the
// patterns subscribed to.
func (h *Hub) Names(kind Kind, pattern []byte) []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var out []string
	for name := range h.subs[kind] {
		if pattern == nil || glob.Match(pattern, []byte(name)) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Count returns how many subscribers name has, of kind.
func (h *Hub) Count(kind Kind, name string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.subs[kind][name])
}

// Patterns returns how many distinct patterns have subscribers (PUBSUB
// NUMPAT).
func (h *Hub) Patterns() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.subs[Pattern])
}
