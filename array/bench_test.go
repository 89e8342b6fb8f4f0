package array

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
)

// The benchmarks compare each mechanism with raw device operations on the
// same kind of devices in the same run: "raw" stores each value once, on
// the device its key hashes to, with no header, as KVMD's "None" baseline.
// Two device models: "cpu" (no speed limit: measures kvarray's own cost)
// and "ssd" (each device limited to 20k ops/s with 10µs latency: the
// ratio to raw shows the device operations each mechanism spends).
//
//	go test -run XXX -bench . ./array/

var benchModels = []struct {
	name string
	perf mem.Perf
}{
	{"cpu", mem.Perf{}},
	{"ssd", mem.Perf{Latency: 10 * time.Microsecond, OpsPerSec: 20000}},
}

var benchSetups = []struct {
	name string
	opts []Option
}{
	{"hashing", []Option{allMechanisms(), WithDefault("hashing")}},
	{"replication", []Option{allMechanisms(), WithDefault("replication")}},
	// Weighted placement (one device of twice the weight): its cost
	// against "replication".
	{"replication-weighted", []Option{allMechanisms(), WithDefault("replication"), WithWeights(2, 1, 1, 1, 1, 1)}},
	{"hybrid-replication", []Option{allMechanisms(), WithMode(Hybrid), WithRules(Rule{RM: "replication"})}},
}

const benchDevices = 6

func benchDevs(p mem.Perf) []device.Device {
	devs := make([]device.Device, benchDevices)
	for i := range devs {
		devs[i] = mem.New(mem.WithName(fmt.Sprintf("mem:dev%d", i)), mem.WithPerf(p))
	}
	return devs
}

// benchKeys is the number of distinct keys a benchmark cycles through.
const benchKeys = 4096

func benchKey(i int64) []byte { return fmt.Appendf(nil, "bench-key-%06d", i%benchKeys) }

// runParallel runs op from 16 goroutines per CPU (a queue depth, as the
// paper's 6 threads over asynchronous I/O) and reports bytes per op.
func runParallel(b *testing.B, size int, op func(key []byte) error) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.SetParallelism(16)
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(benchKey(next.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchmarkOp(b *testing.B, retrieve bool) {
	for _, size := range []int{4 << 10, 64 << 10} {
		value := make([]byte, size)
		for _, model := range benchModels {
			name := fmt.Sprintf("%s/%dKiB", model.name, size>>10)
			b.Run("raw/"+name, func(b *testing.B) {
				devs := benchDevs(model.perf)
				raw := func(key []byte) device.Device { return devs[hash(key)%benchDevices] }
				for i := int64(0); retrieve && i < benchKeys; i++ {
					_ = raw(benchKey(i)).Store(context.Background(), benchKey(i), value)
				}
				runParallel(b, size, func(key []byte) error {
					if retrieve {
						_, err := raw(key).Retrieve(context.Background(), key)
						return err
					}
					return raw(key).Store(context.Background(), key, value)
				})
			})
			for _, setup := range benchSetups {
				b.Run(setup.name+"/"+name, func(b *testing.B) {
					a, err := Create(context.Background(), benchDevs(model.perf), setup.opts...)
					if err != nil {
						b.Fatal(err)
					}
					defer a.Close()
					for i := int64(0); retrieve && i < benchKeys; i++ {
						if err := a.Store(context.Background(), benchKey(i), value); err != nil {
							b.Fatal(err)
						}
					}
					runParallel(b, size, func(key []byte) error {
						if retrieve {
							_, err := a.Retrieve(context.Background(), key)
							return err
						}
						return a.Store(context.Background(), key, value)
					})
				})
			}
		}
	}
}

func BenchmarkStore(b *testing.B)    { benchmarkOp(b, false) }
func BenchmarkRetrieve(b *testing.B) { benchmarkOp(b, true) }
