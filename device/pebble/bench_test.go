package pebble

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kvarray/kvarray/device"
)

// writeBytes is this process's write_bytes from /proc/self/io: bytes it
// caused to be written to the block device.
func writeBytes(b *testing.B) int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		b.Skipf("no /proc/self/io: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Skip("no write_bytes in /proc/self/io")
	return 0
}

// cpuTime is the CPU time this process used, user and system, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkWriteAmp stores 4 KiB values under random keys of a 100k key
// space from 16 writers (as redis-benchmark -r 100000 -d 4096 -c 16 does
// to each device), every write synced, and reports the disk bytes written
// per store, until Close (which flushes): the WAL, flushes and
// compactions; and the CPU time per store, all goroutines included. Run with -benchtime=20000x; "default" is Pebble's own
// options, "tuned" this package's. The "+read" cases read the key before
// each store, as the array's hybrid mode does on the primary: mostly
// keys not stored yet, which bloom filters answer without reading tables.
func BenchmarkWriteAmp(b *testing.B) {
	for _, tc := range []struct {
		name                             string
		untuned, unseparated, unfiltered bool
		readFirst                        bool
	}{{"default", true, true, true, false}, {"tuned", false, true, true, false}, {"separated", false, false, true, false},
		{"separated+read", false, false, true, true}, {"filtered+read", false, false, false, true}} {
		b.Run(tc.name, func(b *testing.B) {
			untuned, unseparated, unfiltered = tc.untuned, tc.unseparated, tc.unfiltered
			defer func() { untuned, unseparated, unfiltered = false, false, false }()
			d, err := Open(b.TempDir(), WithCreate(true))
			if err != nil {
				b.Fatal(err)
			}
			v := random(4 << 10)
			const writers = 16
			before, cpu := writeBytes(b), cpuTime()
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for i := g; i < b.N; i += writers {
						k := fmt.Appendf(nil, "key:%012d", rng.IntN(100000))
						if tc.readFirst {
							if _, err := d.Retrieve(b.Context(), k); err != nil && !errors.Is(err, device.ErrNotFound) {
								b.Error(err)
								return
							}
						}
						if err := d.Store(b.Context(), k, v); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := d.Close(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(writeBytes(b)-before)/float64(b.N), "disk-B/op")
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
}
