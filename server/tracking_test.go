package server

import "testing"

// TestTrackingInfoSameAsRedis: CLIENT TRACKING's checks and errors,
// CACHING, TRACKINGINFO and GETREDIR in each mode, as redis-server
// replies, RESP2 and RESP3. (Invalidations are checked by Redis's own
// unit/tracking, redis-tcl.sh, and redis-py's cache, clients_test.go.)
func TestTrackingInfoSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	info, redir := []string{"CLIENT", "TRACKINGINFO"}, []string{"CLIENT", "GETREDIR"}
	compareWithRedis(t, ts, redisAddr, [][]string{
		info, redir, {"CLIENT", "TRACKINGINFO", "x"}, {"CLIENT", "GETREDIR", "x"},
		{"CLIENT", "CACHING", "yes"}, {"CLIENT", "TRACKING", "maybe"}, {"CLIENT", "TRACKING", "on", "FOO"},
		{"CLIENT", "TRACKING", "on", "PREFIX", "a"}, {"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "ab", "PREFIX", "a"},
		{"CLIENT", "TRACKING", "on", "BCAST", "OPTIN"}, {"CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT"},
		{"CLIENT", "TRACKING", "on", "REDIRECT", "99999999"}, {"CLIENT", "TRACKING", "on", "REDIRECT", "x"}, info,
		{"CLIENT", "TRACKING", "on", "OPTIN"}, info, redir, {"CLIENT", "CACHING", "no"}, {"CLIENT", "CACHING", "yes"}, info,
		{"CLIENT", "CACHING", "maybe"}, {"CLIENT", "TRACKING", "on", "OPTOUT"}, {"CLIENT", "TRACKING", "on", "BCAST"},
		{"CLIENT", "TRACKING", "off"}, info, {"CLIENT", "TRACKING", "on", "OPTOUT", "NOLOOP"}, {"CLIENT", "CACHING", "no"}, info,
		{"CLIENT", "TRACKING", "off"}, {"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "b", "PREFIX", "a", "NOLOOP"}, info,
		{"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "bc"}, {"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "c"}, info,
		{"CLIENT", "TRACKING", "on"}, {"CLIENT", "TRACKING", "off"}, info, redir,
	})
}
