// Package replication is the Replication mechanism: each split is stored as
// identical copies on consecutive devices from its primary (KVMD's RAID 1
// counterpart). A read returns the primary's copy when its checksum
// verifies; otherwise it reads every copy, returns the newest good one and
// rewrites the bad and stale copies with it.
package replication

import (
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/internal/copies"
)

// Name is the mechanism's name in configs.
const Name = "replication"

// DefaultCopies is the number of copies when none is configured.
const DefaultCopies = 3

// New returns a Factory for Replication with the given number of copies
// (0 means DefaultCopies).
func New(n int) mechanism.Factory {
	if n == 0 {
		n = DefaultCopies
	}
	return func(env *mechanism.Env) (mechanism.Mechanism, error) {
		return copies.New(env, format.RMReplication, Name, n)
	}
}
