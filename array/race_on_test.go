//go:build race

package array

// raceEnabled: the race detector slows the long property runs several
// times over, so they run fewer seeds under it (CI's go test -race).
const raceEnabled = true
