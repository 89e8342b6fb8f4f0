package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// The server's hot path (issue 36): SET and GET of 100-byte values over
// one connection pipelining 16 commands, on a mem array (no speed model),
// so that what is measured is the server and the array, not a disk.
// allocs/op counts every allocation of the process per command (the
// client's here are none: its pipelines are encoded once).
//
//	go test -run '^$' -bench 'BenchmarkServe' -benchmem ./server/

func BenchmarkServeSet(b *testing.B) { benchServe(b, "SET") }
func BenchmarkServeGet(b *testing.B) { benchServe(b, "GET") }

// BenchmarkServeGetMissing: GETs of keys never set, as a cache's misses
// and a lock's first GET are.
func BenchmarkServeGetMissing(b *testing.B) { benchServe(b, "GETMISS") }

func benchServe(b *testing.B, cmd string) {
	const pipeline, keys = 16, 1024
	a, devs := openArray(b, memHybrid)
	srv := New(a, WithDevices(devs))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(l)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		a.Close()
	})
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	value := string(bytes.Repeat([]byte{'x'}, 100))
	// Pipelines over all keys, SETs first so that GETs find values.
	pipes := make([][]byte, keys/pipeline)
	sets := make([][]byte, keys/pipeline)
	for p := range pipes {
		for i := range pipeline {
			k := fmt.Sprintf("key:%012d", p*pipeline+i)
			sets[p] = append(sets[p], encode("SET", k, value)...)
			switch cmd {
			case "GET":
				pipes[p] = append(pipes[p], encode("GET", k)...)
			case "GETMISS":
				pipes[p] = append(pipes[p], encode("GET", "missing:"+k)...)
			}
		}
	}
	if cmd == "SET" {
		pipes = sets
	}
	// The replies are known, so they are read whole and compared,
	// allocating nothing.
	okReplies := bytes.Repeat([]byte("+OK\r\n"), pipeline)
	getReplies := bytes.Repeat([]byte("$100\r\n"+value+"\r\n"), pipeline)
	buf := make([]byte, len(getReplies))
	round := func(p, want []byte) {
		if _, err := nc.Write(p); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, buf[:len(want)]); err != nil {
			b.Fatal(err)
		}
		if !bytes.Equal(buf[:len(want)], want) {
			b.Fatalf("replies %q, want %q", buf[:len(want)], want)
		}
	}
	for _, p := range sets {
		round(p, okReplies)
	}
	want := okReplies
	switch cmd {
	case "GET":
		want = getReplies
	case "GETMISS":
		want = bytes.Repeat([]byte("$-1\r\n"), pipeline)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += pipeline {
		round(pipes[(i/pipeline)%len(pipes)], want)
	}
}
