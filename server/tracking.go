package server

// CLIENT TRACKINGINFO and GETREDIR. kvarray has no client-side caching
// yet (CLIENT TRACKING is refused as an unknown subcommand), so every
// connection's tracking is off, and these say so as Redis 7.0 does for a
// connection that has not turned it on.

// clientTracking serves the tracking subcommands of CLIENT; false for
// another.
func (c *call) clientTracking(sub string) bool {
	switch sub {
	case "trackinginfo":
		if len(c.args) != 2 {
			c.arityError("client|trackinginfo")
			return true
		}
		c.w.WriteMap(3)
		c.w.WriteBulkString("flags")
		c.w.WriteSet(1)
		c.w.WriteBulkString("off")
		c.w.WriteBulkString("redirect")
		c.w.WriteInt(-1)
		c.w.WriteBulkString("prefixes")
		c.w.WriteArray(0)
	case "getredir":
		if len(c.args) != 2 {
			c.arityError("client|getredir")
			return true
		}
		c.w.WriteInt(-1)
	default:
		return false
	}
	return true
}
