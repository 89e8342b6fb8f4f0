package bench

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device/mem"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestScratchCPU(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	for _, size := range []int{4 << 10, 64 << 10} {
		for _, w := range []string{Store, Retrieve} {
			for _, m := range []string{None, "hashing", "replication", "splitting", "packing"} {
				for _, mode := range []string{ModeStandalone, ModeHybrid} {
					if m == None && mode == ModeHybrid {
						continue
					}
					o := Quick()
					o.Backend = Mem(mem.Perf{})
					o.Sizes = []int{size}
					o.Ops = 5000
					o.Workloads = []string{w}
					o.Modes = []string{mode}
					o.Mechanisms = []string{m}
					if m == None {
						o.Mechanisms = nil
					}
					r := &runner{o: o, values: map[int][]byte{}}
					o.Validate()
					in, err := r.open(context.Background(), target{m, mode})
					if err != nil {
						t.Fatal(err)
					}
					if m == None {
						in.t.mode = ModeRaw
					}
					c0 := cpuTime()
					res, err := r.sequence(context.Background(), in.t, size)
					c1 := cpuTime()
					in.close()
					if err != nil {
						t.Fatal(err)
					}
					// store phase always runs; retrieve additionally
					nops := int64(5000)
					if w == Retrieve {
						nops = 10000
					}
					fmt.Printf("%-8s %6d %-12s %-10s cpu/op %6.1fµs  %v ops/s\n", w, size, m, mode, float64(c1-c0)/float64(nops)/1000, int(res[len(res)-1].OpsPerSec))
				}
			}
		}
	}
}
