// Command ceiling measures the engine's ceiling for small SETs (issue 36):
// what Pebble, configured as a kvarray device (pebble.EngineOptions),
// ingests of the piece stream that redis-benchmark's SET -d 100 -c 50 -P 16
// -r 100000 produces against the default array (3 copies of every value),
// with no kvarray code around it: each of -devices databases receives one
// copy of every SET, -inflight pieces per round in one batch, one synced
// commit per device per round. Nothing a server, an array or a network
// does is counted, so kvarray serve can at best approach these figures.
//
//	go run ./bench/ceiling -dir /var/tmp/ceiling
//
// It prints SET/s, CPU per SET (user+system of the process), write(2)
// calls per SET and disk bytes written per user byte (write_bytes of
// /proc/self/io over key+value bytes), during the load and including the
// Close that flushes the memtables.
package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvarray/kvarray/device/pebble"
)

func main() {
	dir := flag.String("dir", "", "directory for the databases (a fresh temporary one under /var/tmp if empty)")
	devices := flag.Int("devices", 3, "databases, each receiving one copy of every SET")
	n := flag.Int("n", 1_000_000, "SETs")
	keys := flag.Int("keys", 100_000, "distinct keys (redis-benchmark -r)")
	value := flag.Int("value", 100, "user value bytes (redis-benchmark -d)")
	inflight := flag.Int("inflight", 50*16, "SETs per round (clients × pipeline)")
	flag.Parse()
	if *dir == "" {
		d, err := os.MkdirTemp("/var/tmp", "ceiling")
		if err != nil {
			log.Fatal(err)
		}
		*dir = d
	}
	defer os.RemoveAll(*dir)

	var created atomic.Int64 // tables, blob files and WALs
	dbs := make([]*pdb.DB, *devices)
	for i := range dbs {
		o := pebble.EngineOptions(vfs.Default)
		o.Logger = quiet{}
		o.EventListener = &pdb.EventListener{
			TableCreated:    func(pdb.TableCreateInfo) { created.Add(1) },
			BlobFileCreated: func(pdb.BlobFileCreateInfo) { created.Add(1) },
			WALCreated:      func(pdb.WALCreateInfo) { created.Add(1) },
		}
		db, err := pdb.Open(filepath.Join(*dir, fmt.Sprint("dev", i)), o)
		if err != nil {
			log.Fatal(err)
		}
		dbs[i] = db
	}

	// A piece as the array writes it: the header (36 bytes, with a
	// checksum: incompressible), the keyspace's 16-byte tag and the user
	// value (redis-benchmark's "xxx…"), under the user key plus the
	// piece key's suffix.
	const userKey = len("key:000000012345")
	piece := func(r *rand.Rand, dst []byte) []byte {
		dst = dst[:0]
		for range 36 / 8 {
			dst = binary.LittleEndian.AppendUint64(dst, r.Uint64())
		}
		dst = binary.LittleEndian.AppendUint32(dst, r.Uint32())
		dst = append(dst, make([]byte, 16)...)
		return append(dst, bytes.Repeat([]byte{'x'}, *value)...)
	}

	rounds := (*n + *inflight - 1) / *inflight
	io0, cpu0, t0 := procIO(), cpuTime(), time.Now()
	var wg sync.WaitGroup
	for d, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(d), 1))
			var k, v []byte
			for range rounds {
				b := db.NewBatch()
				for range *inflight {
					k = fmt.Appendf(k[:0], "\x00key:%012d\x00\x00", r.IntN(*keys))
					v = piece(r, v)
					if err := b.Set(k, v, nil); err != nil {
						log.Fatal(err)
					}
				}
				if err := b.Commit(pdb.Sync); err != nil {
					log.Fatal(err)
				}
				b.Close()
			}
		}()
	}
	wg.Wait()
	elapsed, io1, cpu1 := time.Since(t0), procIO(), cpuTime()
	var wal, flushed, compacted uint64
	for _, db := range dbs {
		m := db.Metrics()
		wal += m.WAL.BytesWritten
		for _, l := range m.Levels {
			flushed += l.TableBytesFlushed + l.BlobBytesFlushed
			compacted += l.TableBytesCompacted + l.BlobBytesCompacted
		}
	}
	for _, db := range dbs {
		if err := db.Close(); err != nil {
			log.Fatal(err)
		}
	}
	io2 := procIO()

	sets := float64(rounds * *inflight)
	user := sets * float64(userKey+*value)
	pieceBytes := sets * float64(*devices) * float64(len("\x00key:000000012345\x00\x00")+36+16+*value)
	fmt.Printf("%d devices, %.0f SETs of %d B over %d keys, %d per round, one synced commit per device per round\n",
		*devices, sets, *value, *keys, *inflight)
	fmt.Printf("SET/s %.0f  CPU/SET %.1f µs  write(2)/SET %.3f  disk bytes/user byte %.2f (%.2f with the flush at Close)\n",
		sets/elapsed.Seconds(), (cpu1-cpu0).Seconds()*1e6/sets,
		float64(io1["syscw"]-io0["syscw"])/sets,
		float64(io1["write_bytes"]-io0["write_bytes"])/user,
		float64(io2["write_bytes"]-io0["write_bytes"])/user)
	fmt.Printf("Pebble's bytes per user byte before Close: WAL %.2f, flushes %.2f, compactions %.2f; "+
		"the pieces' keys and values are %.2f (the floor: a WAL of them)\n",
		float64(wal)/user, float64(flushed)/user, float64(compacted)/user, pieceBytes/user)
	fmt.Printf("files created (tables, blob files, WALs): %.1f per 100k SETs\n", float64(created.Load())*1e5/sets)
}

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		log.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// procIO reads /proc/self/io: write_bytes (what reached the block layer),
// syscw (write system calls) and the rest.
func procIO() map[string]int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		log.Fatal(err)
	}
	m := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, v, ok := strings.Cut(line, ": "); ok {
			m[name], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return m
}

// quiet is a Pebble logger that prints nothing but fatal errors.
type quiet struct{}

func (quiet) Infof(string, ...any)           {}
func (quiet) Errorf(string, ...any)          {}
func (quiet) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }
