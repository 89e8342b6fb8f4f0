package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device/mem"
)

// randomScript is a seeded generator of commands, the seed logged so a
// failure can be replayed.
func randomSource(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed>>1))
}

// TestBitmapsSameAsRedis compares BITOP, BITPOS and BITFIELD with a real
// redis-server: a fixed script of edge cases and errors, then random
// fields (every width, signedness, overflow mode, `#` offsets) and the
// values they leave, byte for byte.
func TestBitmapsSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"FLUSHALL"},
		{"SET", "a", "foobar"}, {"SET", "b", "abcdef"}, {"SET", "c", "\xff\x00\xf0"},
		{"BITOP", "AND", "d", "a", "b"}, {"GET", "d"}, {"BITOP", "or", "d", "a", "b", "c"}, {"GET", "d"},
		{"BITOP", "XOR", "d", "a", "c"}, {"GET", "d"}, {"BITOP", "NOT", "d", "c"}, {"GET", "d"}, {"BITOP", "NOT", "d", "a", "b"},
		{"BITOP", "NAND", "d", "a"}, {"BITOP", "AND", "d", "nokey"}, {"EXISTS", "d"}, {"BITOP", "OR", "d", "a", "nokey"}, {"GET", "d"},
		{"SET", "e", "v", "EX", "100"}, {"BITOP", "AND", "e", "a"}, {"TTL", "e"}, {"HSET", "h", "f", "v"}, {"BITOP", "AND", "d", "a", "h"},
		{"BITOP", "OR", "h", "a"}, {"TYPE", "h"}, {"BITOP", "AND", "d"},
		{"BITPOS", "a", "1"}, {"BITPOS", "a", "0"}, {"BITPOS", "c", "0"}, {"BITPOS", "c", "1", "1"}, {"BITPOS", "c", "0", "0", "0"},
		{"BITPOS", "c", "1", "1", "1"}, {"BITPOS", "c", "0", "-1"}, {"BITPOS", "c", "1", "8", "15", "BIT"}, {"BITPOS", "c", "0", "0", "7", "BIT"},
		{"BITPOS", "c", "0", "0", "-1", "BIT"}, {"BITPOS", "c", "1", "20", "-1", "BIT"}, {"BITPOS", "c", "0", "20", "BIT"},
		{"BITPOS", "nokey", "1"}, {"BITPOS", "nokey", "0"}, {"BITPOS", "a", "2"}, {"BITPOS", "a", "x"}, {"BITPOS", "a", "1", "x"},
		{"BITPOS", "a", "1", "0", "1", "FOO"}, {"BITPOS", "a", "1", "2", "1"}, {"BITPOS", "h", "1"}, {"SET", "empty", ""}, {"BITPOS", "empty", "0"},
		{"SET", "ones", "\xff\xff\xff"}, {"BITPOS", "ones", "0"}, {"BITPOS", "ones", "0", "0", "-1"}, {"BITPOS", "ones", "0", "3", "BIT"},
		{"BITFIELD", "bf", "SET", "u8", "0", "255", "GET", "u8", "0"}, {"BITFIELD", "bf", "INCRBY", "u8", "0", "1"},
		{"BITFIELD", "bf", "OVERFLOW", "SAT", "INCRBY", "u8", "0", "10", "INCRBY", "i8", "0", "-300"},
		{"BITFIELD", "bf", "OVERFLOW", "FAIL", "INCRBY", "u2", "100", "5", "GET", "u2", "100"}, {"STRLEN", "bf"},
		{"BITFIELD", "bf", "SET", "i64", "#1", "-9223372036854775808", "INCRBY", "i64", "#1", "-1", "GET", "u63", "#1"},
		{"BITFIELD", "bf", "GET", "u64", "0"}, {"BITFIELD", "bf", "GET", "i65", "0"}, {"BITFIELD", "bf", "GET", "i0", "0"},
		{"BITFIELD", "bf", "GET", "x8", "0"}, {"BITFIELD", "bf", "GET", "u8", "-1"}, {"BITFIELD", "bf", "GET", "u8", "#-1"},
		{"BITFIELD", "bf", "GET", "u8", "4294967296"}, {"BITFIELD", "bf", "OVERFLOW", "BAD", "GET", "u8", "0"},
		{"BITFIELD", "bf", "SET", "u8", "0"}, {"BITFIELD", "bf", "SET", "u8", "0", "x"}, {"BITFIELD", "bf", "FOO"},
		{"BITFIELD", "bf"}, {"BITFIELD_RO", "bf"}, {"BITFIELD_RO", "bf", "GET", "u8", "0", "GET", "i4", "#3"},
		{"BITFIELD_RO", "bf", "SET", "u8", "0", "1"}, {"BITFIELD", "h", "GET", "u8", "0"}, {"BITFIELD", "nokey", "GET", "u8", "0"},
		{"BITFIELD", "nf", "OVERFLOW", "FAIL", "SET", "u2", "0", "9"}, {"GET", "nf"}, {"BITFIELD", "e", "SET", "u8", "8", "1"}, {"TTL", "e"},
		{"MULTI"}, {"SETBIT", "tx", "100", "1"}, {"BITFIELD", "tx", "INCRBY", "u8", "0", "5", "GET", "u4", "96"}, {"GETBIT", "tx", "100"},
		{"BITFIELD_RO", "tx", "GET", "u8", "0"}, {"SETBIT", "tx", "100", "1"}, {"BITFIELD", "tx", "OVERFLOW", "FAIL", "SET", "u1", "300", "2"}, {"EXEC"},
		{"GET", "tx"}, {"SETBIT", "tx", "7", "1"}, {"SETBIT", "tx", "7", "1"}, {"GET", "tx"}, {"SETBIT", "e", "1000", "1"}, {"TTL", "e"},
		{"SET", "num", "12"}, {"BITFIELD", "num", "GET", "u8", "0"}, {"BITPOS", "num", "1"}, {"BITOP", "NOT", "num2", "num"}, {"GET", "num2"},
	}
	r := randomSource(t)
	types := func() string {
		if r.IntN(2) == 0 {
			return "i" + strconv.Itoa(1+r.IntN(64))
		}
		return "u" + strconv.Itoa(1+r.IntN(63))
	}
	num := func() string {
		switch r.IntN(4) {
		case 0:
			return strconv.FormatInt(r.Int64()-r.Int64(), 10)
		case 1:
			return strconv.Itoa(r.IntN(512) - 256)
		default:
			return strconv.Itoa(r.IntN(16) - 8)
		}
	}
	for range 300 {
		key := "r" + strconv.Itoa(r.IntN(4))
		cmd := []string{"BITFIELD", key}
		for range 1 + r.IntN(4) {
			if r.IntN(4) == 0 {
				cmd = append(cmd, "OVERFLOW", []string{"WRAP", "SAT", "FAIL"}[r.IntN(3)])
			}
			off := strconv.Itoa(r.IntN(200))
			if r.IntN(3) == 0 {
				off = "#" + strconv.Itoa(r.IntN(5))
			}
			switch r.IntN(3) {
			case 0:
				cmd = append(cmd, "GET", types(), off)
			case 1:
				cmd = append(cmd, "SET", types(), off, num())
			default:
				cmd = append(cmd, "INCRBY", types(), off, num())
			}
		}
		script = append(script, cmd)
		if r.IntN(8) == 0 {
			script = append(script, []string{"GET", key},
				[]string{"BITOP", []string{"AND", "OR", "XOR"}[r.IntN(3)], "r9", key, "r" + strconv.Itoa(r.IntN(4))}, []string{"GET", "r9"},
				[]string{"BITPOS", key, strconv.Itoa(r.IntN(2)), strconv.Itoa(r.IntN(60) - 30), strconv.Itoa(r.IntN(60) - 30), []string{"BIT", "BYTE"}[r.IntN(2)]})
		}
	}
	for i := range 4 {
		script = append(script, []string{"GET", "r" + strconv.Itoa(i)})
	}
	compareWithRedis(t, ts, redisAddr, script)
}

// TestHyperLogLogSameAsRedis compares PFADD, PFCOUNT, PFMERGE and PFDEBUG
// with a real redis-server over random elements, sparse HyperLogLogs
// growing past their promotion to dense, and the values themselves (GET)
// byte for byte.
func TestHyperLogLogSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"FLUSHALL"},
		{"PFADD", "h"}, {"GET", "h"}, {"PFCOUNT", "h"}, {"GET", "h"}, {"PFADD", "h", "a", "b", "c"}, {"PFADD", "h", "a"}, {"GET", "h"},
		{"PFCOUNT", "h"}, {"GET", "h"}, {"PFCOUNT", "nokey"}, {"PFCOUNT", "h", "nokey"}, {"PFMERGE", "m", "nokey"}, {"GET", "m"},
		{"SET", "s", "x"}, {"PFADD", "s", "a"}, {"PFCOUNT", "s"}, {"PFCOUNT", "h", "s"}, {"PFMERGE", "m", "s"}, {"PFMERGE", "s", "h"},
		{"HSET", "hh", "f", "v"}, {"PFADD", "hh", "a"}, {"PFCOUNT", "hh"}, {"PFMERGE", "m", "hh"},
		{"PFDEBUG", "ENCODING", "h"}, {"PFDEBUG", "DECODE", "h"}, {"PFDEBUG", "TODENSE", "nokey"}, {"PFDEBUG", "FOO", "h"},
		{"PFDEBUG", "ENCODING", "s"}, {"PFDEBUG", "GETREG", "h"}, {"PFDEBUG", "ENCODING", "h"}, {"PFDEBUG", "DECODE", "h"},
		{"PFDEBUG", "TODENSE", "h"}, {"GET", "h"}, {"PFADD", "h", "d"}, {"PFCOUNT", "h"}, {"GET", "h"},
		{"SET", "bad", "HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\xff"}, {"PFCOUNT", "bad"}, {"PFADD", "bad", "x"},
		{"SET", "bad2", "HYLL\x00\x00\x00\x00"}, {"PFCOUNT", "bad2"}, {"PFCOUNT", "h", "bad"},
		{"CONFIG", "SET", "hll-sparse-max-bytes", "300"}, {"CONFIG", "GET", "hll-sparse-max-bytes"},
	}
	r := randomSource(t)
	elem := func() string { return strconv.FormatUint(r.Uint64N(1<<uint(4+r.IntN(40))), 36) }
	for round := range 40 {
		if round == 20 {
			script = append(script, []string{"CONFIG", "SET", "hll-sparse-max-bytes", "3000"})
		}
		key := "p" + strconv.Itoa(r.IntN(5))
		cmd := []string{"PFADD", key}
		for range r.IntN([]int{5, 50, 500, 3000}[r.IntN(4)]) {
			cmd = append(cmd, elem())
		}
		script = append(script, cmd, []string{"PFCOUNT", key}, []string{"GET", key}, []string{"PFDEBUG", "ENCODING", key})
		switch r.IntN(4) {
		case 0:
			script = append(script, []string{"PFMERGE", "p" + strconv.Itoa(r.IntN(6)), key, "p" + strconv.Itoa(r.IntN(5))})
		case 1:
			script = append(script, []string{"PFCOUNT", key, "p" + strconv.Itoa(r.IntN(5)), "p" + strconv.Itoa(r.IntN(6))})
		}
	}
	for i := range 6 {
		script = append(script, []string{"GET", "p" + strconv.Itoa(i)}, []string{"PFCOUNT", "p" + strconv.Itoa(i)}, []string{"GET", "p" + strconv.Itoa(i)})
	}
	script = append(script, []string{"CONFIG", "SET", "hll-sparse-max-bytes", "3000"})
	compareWithRedis(t, ts, redisAddr, script)
}

// TestBitsInPlace: SETBIT, GETBIT and BITFIELD on a huge value (10 MiB, a
// Splitting value of two splits) go through the range path: an edit at
// its end reads and rewrites the split it falls in (as SETRANGE does), not
// the value; they keep its TTL and agree with a model.
func TestBitsInPlace(t *testing.T) {
	ts := startServer(t, "")
	c := ts.client()
	ctx := context.Background()
	model := bytes.Repeat([]byte("kvarray!"), 10<<20/8)
	if err := c.Set(ctx, "huge", model, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	deviceBytes := func() (read, written int64) {
		for _, d := range ts.devs {
			m := d.(*mem.Device)
			st := m.Stats()
			read, written = read+st.BytesRead, written+st.BytesWritten
			m.ResetStats()
		}
		return read, written
	}
	_, whole := deviceBytes()
	// The first edit of a value stored whole lays it out for range writes
	// (the array's, as for SETRANGE): measured from the second.
	if err := c.SetRange(ctx, "huge", 0, "k").Err(); err != nil {
		t.Fatal(err)
	}
	deviceBytes()
	check := func(what string) {
		t.Helper()
		read, written := deviceBytes()
		if read > int64(len(model))/2 || written > whole/2 {
			t.Errorf("%s at the end of a %d-byte value read %d and wrote %d bytes on the devices (SET wrote %d)", what, len(model), read, written, whole)
		}
	}
	off := int64(len(model))*8 - 1000
	if old, err := c.SetBit(ctx, "huge", off, 1).Result(); err != nil || old != int64(model[off/8]>>(7-off%8)&1) {
		t.Fatalf("SETBIT: %d, %v", old, err)
	}
	model[off/8] |= 0x80 >> (off % 8)
	check("SETBIT")
	got, err := c.BitField(ctx, "huge", "INCRBY", "u16", off+3, 1000, "GET", "i8", 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := binary.BigEndian.Uint32(model[(off+3)/8:]) >> (16 - (off+3)%8) & 0xffff
	want = (want + 1000) & 0xffff
	if got[0] != int64(want) || got[1] != int64(int8(model[0])) {
		t.Fatalf("BITFIELD: %v, want [%d %d]", got, want, int8(model[0]))
	}
	check("BITFIELD")
	if bit, err := c.GetBit(ctx, "huge", off).Result(); err != nil || bit != 1 {
		t.Fatalf("GETBIT: %d, %v", bit, err)
	}
	if ttl, err := c.TTL(ctx, "huge").Result(); err != nil || ttl <= 0 {
		t.Fatalf("TTL after in-place bit writes: %v, %v", ttl, err)
	}
	// Past the end: the value grows, zero filled.
	if _, err := c.BitField(ctx, "huge", "SET", "u8", int64(len(model))*8+8, 7).Result(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.StrLen(ctx, "huge").Result(); err != nil || n != int64(len(model))+2 {
		t.Fatalf("STRLEN after growing: %d, %v", n, err)
	}
	v, err := c.GetRange(ctx, "huge", off/8-1, -1).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v[:2], model[off/8-1:off/8+1]) || !bytes.Equal(v[len(v)-2:], []byte{0, 7}) {
		t.Fatalf("bytes around the writes: %x", v)
	}
}

// TestHyperLogLogMovesBetweenServers: a HyperLogLog read from
// redis-server with GET and stored in kvarray with SET (and the reverse)
// counts the same and takes further elements the same, sparse and dense.
func TestHyperLogLogMovesBetweenServers(t *testing.T) {
	ts := startServer(t, "")
	k, r := ts.dial(), (&testServer{t: t, addr: startRedis(t)}).dial()
	for i, n := range []int{10, 5000} {
		key := "m" + strconv.Itoa(i)
		add := []string{"PFADD", key}
		for j := range n {
			add = append(add, "e"+strconv.Itoa(j))
		}
		r.do(add...)
		v := r.do("GET", key)
		if got := k.do("SET", key, v.str).String(); got != `+"OK"` {
			t.Fatalf("SET: %s", got)
		}
		more := []string{"PFADD", key, "x", "y", "z"}
		for _, c := range []*rawConn{k, r} {
			c.do(more...)
			c.do("PFCOUNT", key)
		}
		if kv, rv := k.do("GET", key).str, r.do("GET", key).str; kv != rv {
			t.Fatalf("%d elements: kvarray's value after PFADD differs from redis-server's", n)
		}
		// And back: kvarray's value in redis-server.
		r.do("SET", key+"b", k.do("GET", key).str)
		if kc, rc := k.do("PFCOUNT", key).String(), r.do("PFCOUNT", key+"b").String(); kc != rc {
			t.Fatalf("%d elements: PFCOUNT %s in kvarray, %s in redis-server", n, kc, rc)
		}
	}
}
