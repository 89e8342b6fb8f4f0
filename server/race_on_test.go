//go:build race

package server

// raceEnabled: the race detector slows the crash test's restarts several
// times over, so it runs a shorter workload under it (CI's go test -race;
// CI runs it again without).
const raceEnabled = true
