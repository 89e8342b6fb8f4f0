// Package hashing is the Hashing mechanism (KVMD's RAID 0 counterpart): one
// copy of each split on its primary device, no redundancy. A failed or
// corrupt piece is data loss, reported as such, never wrong bytes.
package hashing

import (
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/internal/copies"
)

// Name is the mechanism's name in configs.
const Name = "hashing"

// New returns a Factory for Hashing.
func New() mechanism.Factory {
	return func(env *mechanism.Env) (mechanism.Mechanism, error) {
		return copies.New(env, format.RMHashing, Name, 1)
	}
}
