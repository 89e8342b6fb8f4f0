package server

import "testing"

// TestTrackingInfoSameAsRedis: CLIENT TRACKINGINFO and GETREDIR of a
// connection with tracking off, as redis-server replies, RESP2 and RESP3.
func TestTrackingInfoSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	compareWithRedis(t, ts, redisAddr, [][]string{
		{"CLIENT", "TRACKINGINFO"}, {"CLIENT", "GETREDIR"}, {"CLIENT", "TRACKINGINFO", "x"}, {"CLIENT", "GETREDIR", "x"},
	})
}
