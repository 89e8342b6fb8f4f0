package server

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// MEMORY STATS, DOCTOR, MALLOC-STATS and PURGE (MEMORY USAGE is in
// generic.go). kvarray's memory is the Go runtime's heap, not the data
// (which is on the devices): STATS reports the heap in Redis's fields,
// its dataset counts and overheads being the heap's, and the keys'
// count the keyspace's.

// memoryMore serves the MEMORY subcommands other than USAGE and HELP;
// false for an unknown one.
func (c *call) memoryMore(sub string) bool {
	switch sub {
	case "stats":
		c.memoryStats()
	case "doctor":
		c.w.WriteVerbatim("Hi Sam, I can't find any memory issue in your instance. " +
			"I can only account for what occurs on this base: kvarray keeps its data on the array's devices, " +
			"and its memory is the Go runtime's heap (MEMORY STATS, INFO memory).\n")
	case "malloc-stats":
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		c.w.WriteVerbatim(fmt.Sprintf("Go runtime allocator: heap_alloc=%d heap_sys=%d heap_idle=%d heap_released=%d "+
			"heap_objects=%d stack_sys=%d sys=%d mallocs=%d frees=%d num_gc=%d\n",
			m.HeapAlloc, m.HeapSys, m.HeapIdle, m.HeapReleased, m.HeapObjects, m.StackSys, m.Sys, m.Mallocs, m.Frees, m.NumGC))
	case "purge":
		debug.FreeOSMemory()
		c.w.WriteString("OK")
	default:
		return false
	}
	return true
}

// memoryHelp is the help lines of memoryMore's subcommands.
var memoryHelp = []string{
	"DOCTOR", "    Return memory problems reports.",
	"MALLOC-STATS", "    Return internal statistics report from the memory allocator.",
	"PURGE", "    Attempt to purge dirty pages for reclamation by the allocator.",
	"STATS", "    Return information about the memory usage of the server.",
}

func (c *call) memoryStats() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	var keys int64
	dbs := c.s.ks.DBs()
	perDB := make([]int64, dbs)
	for db := range dbs {
		perDB[db], _, _ = c.s.ks.Count(db)
		keys += perDB[db]
	}
	c.s.mu.Lock()
	clients := len(c.s.conns)
	c.s.mu.Unlock()
	alloc, rss := m.HeapAlloc, m.Sys
	overhead := m.StackSys + m.MSpanSys + m.MCacheSys + m.BuckHashSys + m.GCSys + m.OtherSys
	dataset := int64(alloc) - int64(min(overhead, alloc))
	ratio := func(a, b uint64) float64 { return float64(a) / float64(max(b, 1)) }
	type field struct {
		name string
		v    any
	}
	fields := []field{
		{"peak.allocated", m.HeapSys}, {"total.allocated", alloc}, {"startup.allocated", 0}, {"replication.backlog", 0},
		{"clients.slaves", 0}, {"clients.normal", clients}, {"cluster.links", 0}, {"aof.buffer", 0},
		{"lua.caches", 0}, {"functions.caches", 0}, {"overhead.total", overhead}, {"keys.count", keys},
		{"keys.bytes-per-key", int64(alloc) / max(keys, 1)}, {"dataset.bytes", dataset},
		{"dataset.percentage", 100 * float64(dataset) / float64(max(alloc, 1))}, {"peak.percentage", 100 * ratio(alloc, m.HeapSys)},
		{"allocator.allocated", alloc}, {"allocator.active", m.HeapInuse}, {"allocator.resident", m.HeapSys - m.HeapReleased},
		{"allocator-fragmentation.ratio", ratio(m.HeapInuse, alloc)}, {"allocator-fragmentation.bytes", int64(m.HeapInuse) - int64(alloc)},
		{"allocator.rss-ratio", ratio(m.HeapSys-m.HeapReleased, m.HeapInuse)}, {"allocator.rss-bytes", int64(m.HeapSys-m.HeapReleased) - int64(m.HeapInuse)},
		{"rss-overhead.ratio", ratio(rss, m.HeapSys-m.HeapReleased)}, {"rss-overhead.bytes", int64(rss) - int64(m.HeapSys-m.HeapReleased)},
		{"fragmentation", ratio(rss, alloc)}, {"fragmentation.bytes", int64(rss) - int64(alloc)},
	}
	withKeys := 0
	for _, n := range perDB {
		withKeys += b2i(n > 0)
	}
	c.w.WriteMap(len(fields) + withKeys)
	for _, f := range fields {
		c.w.WriteBulkString(f.name)
		switch v := f.v.(type) {
		case float64:
			c.w.WriteDouble(v)
		case int:
			c.w.WriteInt(v)
		case int64:
			c.w.WriteInt64(v)
		case uint64:
			c.w.WriteInt64(int64(v))
		}
	}
	for db, n := range perDB {
		if n == 0 {
			continue
		}
		// Redis's main and expires dictionaries: the keyspace's counts
		// (kvarray keeps no per-database hash table in memory).
		c.w.WriteBulkString(fmt.Sprintf("db.%d", db))
		c.w.WriteMap(2)
		c.w.WriteBulkString("overhead.hashtable.main")
		c.w.WriteInt64(0)
		c.w.WriteBulkString("overhead.hashtable.expires")
		c.w.WriteInt64(0)
	}
}
