package main

import (
	"runtime/debug"
	"strings"
)

// version is what `kvarray --version` prints after "kvarray ": the module
// version the Go toolchain recorded ("(devel)" for a build from a
// checkout), then the VCS revision, its time and "dirty" when the tree had
// uncommitted changes, and the Go version. Nothing is stamped by hand, so
// it is never stale.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown: built without module information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	parts := []string{v}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		c := "commit " + rev
		if at != "" {
			c += " " + at
		}
		if dirty {
			c += " dirty"
		}
		parts = append(parts, c)
	}
	parts = append(parts, bi.GoVersion)
	return strings.Join(parts, ", ")
}
