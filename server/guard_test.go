package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/redcon"
)

func newGuard(maxBulk int64) *guard {
	g := &guard{maxBulk: maxBulk, maxQuery: 1 << 20, maxArgs: 1000}
	copy(g.nonce[:], "0123456789abcdef")
	return g
}

// runGuard feeds input to g in chunks of the given sizes (the rest in one
// chunk) and returns what it passes on, as conn.Read would.
func runGuard(g *guard, input []byte, chunks []int) ([]byte, error) {
	var out []byte
	for len(input) > 0 {
		n := len(input)
		if len(chunks) > 0 {
			n = min(max(chunks[0], 1), n)
			chunks = chunks[1:]
		}
		buf := append([]byte(nil), input[:n]...)
		input = input[n:]
		var spill []byte
		w, err := g.feed(buf, &spill)
		out = append(out, buf[:w]...)
		out = append(out, spill...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// randomCommands is a stream of well-formed commands, multibulk and
// inline, with binary arguments of up to maxArg bytes.
func randomCommands(rng *rand.Rand, n, maxArg int) []byte {
	var b bytes.Buffer
	for range n {
		if rng.IntN(4) == 0 {
			// inline: words without spaces, quotes or newlines
			fmt.Fprintf(&b, "set k%d v%d\r\n", rng.IntN(100), rng.IntN(100))
			continue
		}
		args := 1 + rng.IntN(5)
		fmt.Fprintf(&b, "*%d\r\n", args)
		for range args {
			a := make([]byte, rng.IntN(maxArg+1))
			for i := range a {
				a[i] = byte(rng.Uint32())
			}
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	return b.Bytes()
}

func randomChunks(rng *rand.Rand, n int) []int {
	c := make([]int, n)
	for i := range c {
		c[i] = 1 + rng.IntN(40)
	}
	return c
}

func TestGuardPassesWellFormedInput(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range 200 {
		in := randomCommands(rng, 1+rng.IntN(20), 100)
		out, err := runGuard(newGuard(100), in, randomChunks(rng, len(in)))
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("case %d: guard changed well-formed input (err %v):\nin  %q\nout %q", i, err, in, out)
		}
	}
}

func TestGuardDropsOversizedBulks(t *testing.T) {
	big := strings.Repeat("x", 1000)
	in := string(encode("SET", "k", big)) + string(encode("GET", "k")) + "PING\r\n"
	for _, chunk := range []int{1, 3, 7, 64, 4096} {
		g := newGuard(100)
		chunks := make([]int, len(in))
		for i := range chunks {
			chunks[i] = chunk
		}
		out, err := runGuard(g, []byte(in), chunks)
		if err != nil {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
		rd := redcon.NewReader(bytes.NewReader(out))
		cmd, err := rd.ReadCommand()
		if err != nil || len(cmd.Args) != 3 || string(cmd.Args[0]) != "SET" {
			t.Fatalf("chunk %d: first command %q, %v", chunk, cmd.Args, err)
		}
		if n, ok := oversized(&g.nonce, cmd.Args[2]); !ok || n != 1000 {
			t.Errorf("chunk %d: the value was not replaced by a placeholder of its length: %q", chunk, cmd.Args[2])
		}
		if _, ok := oversized(&g.nonce, cmd.Args[1]); ok {
			t.Errorf("chunk %d: the key passed for a placeholder", chunk)
		}
		for _, want := range []string{"GET", "PING"} {
			cmd, err := rd.ReadCommand()
			if err != nil || string(cmd.Args[0]) != want {
				t.Fatalf("chunk %d: after the placeholder, %q, %v; want %s", chunk, cmd.Args, err, want)
			}
		}
		if len(out) > 200 {
			t.Errorf("chunk %d: %d bytes passed on for a dropped 1000-byte bulk", chunk, len(out))
		}
	}
}

func TestGuardProtocolErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"*2\r\n$3\r\nGET\r\n$-5\r\n", "invalid bulk length"},
		{"*99999999999\r\n", "invalid multibulk length"},
		{"*1001\r\n", "invalid multibulk length"},
		{"*x\r\n", "invalid multibulk length"},
		{"*1\r\nx", "expected '$', got 'x'"},
		{"*1\r\n\x00", `expected '$', got '"\x00"'`},
		{"*1\r\n$9223372036854775807\r\n", "invalid bulk length"},
		{"*1\r\n$1x\r\n", "invalid bulk length"},
		{"*1\r\n$+1\r\n", "invalid bulk length"},
		{"*1\r\n$1\n", "invalid bulk length"},
		{"*1\n", "invalid multibulk length"},
		{"*1\r\n$" + strings.Repeat("1", 40), "too big bulk count string"},
		{"*" + strings.Repeat("1", 40), "too big mbulk count string"},
		{strings.Repeat("a", maxInline+1), "too big inline request"},
		{"*1\r\n$200\r\n" + strings.Repeat("y", 200) + "xx", "invalid bulk length"},
	} {
		_, err := runGuard(newGuard(100), []byte(tc.in), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: error %v, want %q", tc.in, err, tc.want)
		}
	}
	// Not errors: empty multibulks are ignored, as Redis does.
	out, err := runGuard(newGuard(100), []byte("*0\r\n*-1\r\nPING\r\n"), nil)
	if err != nil || string(out) != "PING\r\n" {
		t.Errorf("empty multibulks: %q, %v", out, err)
	}
}

func TestGuardQueryLimit(t *testing.T) {
	g := newGuard(1000)
	g.maxQuery = 2500
	in := encode("MSET", "a", strings.Repeat("x", 1000), "b", strings.Repeat("y", 1000), "c", strings.Repeat("z", 1000))
	if _, err := runGuard(g, in, nil); err == nil || !strings.Contains(err.Error(), "query limit") {
		t.Errorf("a 3000-byte command with a 2500-byte limit: %v", err)
	}
}

// FuzzGuard: on any input the guard does not panic, passes on the same
// bytes and stops at the same error however the input is cut into reads,
// and what it passes on does not crash redcon's parser.
func FuzzGuard(f *testing.F) {
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), uint64(1))
	f.Add([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$300\r\n"+strings.Repeat("v", 300)+"\r\n"), uint64(2))
	f.Add([]byte("PING\r\n*0\r\n*1\r\n$4\r\nPING\r\n"), uint64(3))
	f.Add([]byte("*1\r\n$9223372036854775806\r\n"), uint64(4))
	f.Add([]byte("set \"a b\" 'c'\r\n"), uint64(5))
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		whole, werr := runGuard(newGuard(64), in, nil)
		rng := rand.New(rand.NewPCG(seed, seed))
		cut, cerr := runGuard(newGuard(64), in, randomChunks(rng, len(in)))
		if !bytes.Equal(whole, cut) || fmt.Sprint(werr) != fmt.Sprint(cerr) {
			t.Fatalf("chunking changed the result:\nwhole %q %v\ncut   %q %v", whole, werr, cut, cerr)
		}
		rd := redcon.NewReader(bytes.NewReader(whole))
		for range 10000 {
			if _, err := rd.ReadCommands(); err != nil {
				break
			}
		}
	})
}

// TestGuardSharedLimitRefusalHoldsNothing: a command refused by the limit
// shared across connections adds nothing to what they hold, so that other
// clients' commands (a PING) go on passing while the refused connection
// is still being closed.
func TestGuardSharedLimitRefusalHoldsNothing(t *testing.T) {
	var held atomic.Int64
	shared := func() *guard {
		g := newGuard(1 << 20)
		g.held, g.maxHeld = &held, 1000
		return g
	}
	big, over, ping := shared(), shared(), shared()
	if _, err := runGuard(big, []byte("*3\r\n$3\r\nSET\r\n$1\r\na\r\n$600\r\n"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := runGuard(over, []byte("*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$600\r\n"), nil); err == nil || !strings.Contains(err.Error(), "retry later") {
		t.Fatalf("a second 600-byte value under a 1000-byte limit: %v", err)
	}
	if n := held.Load(); n > 1000 {
		t.Errorf("the refused value is counted: %d bytes held, over the limit of 1000", n)
	}
	if out, err := runGuard(ping, []byte("*1\r\n$4\r\nPING\r\n"), nil); err != nil || string(out) != "*1\r\n$4\r\nPING\r\n" {
		t.Errorf("PING while the refused connection is not yet closed: %q, %v", out, err)
	}
	over.release()
	big.release()
	if n := held.Load(); n != 0 {
		t.Errorf("%d bytes counted once every command is released", n)
	}
}

// TestGuardHoldsLargeBulksAside: a bulk of asideFrom bytes or more reaches
// redcon as a placeholder, once it is whole, and the command takes the
// bulk's bytes from the guard, whatever the chunks the input came in.
func TestGuardHoldsLargeBulksAside(t *testing.T) {
	value := bytes.Repeat([]byte("0123456789abcdef"), (3<<20+5)/16)
	value = append(value, "tail"...)
	small := bytes.Repeat([]byte("s"), 1<<20-1)
	input := fmt.Appendf(nil, "*3\r\n$4\r\nMSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n*1\r\n$4\r\nPING\r\n", len(value), value, len(small), small)
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 8 {
		var held atomic.Int64
		g := newGuard(64 << 20)
		g.maxQuery, g.held, g.maxHeld, g.asideFrom = 1<<30, &held, 1<<30, 1<<20
		var chunks []int
		for range 40 {
			chunks = append(chunks, 1+rng.IntN(1<<(4+round*2)))
		}
		out, err := runGuard(g, input, chunks)
		if err != nil {
			t.Fatal(err)
		}
		rd := redcon.NewReader(bytes.NewReader(out))
		cmd, err := rd.ReadCommand()
		if err != nil {
			t.Fatalf("round %d: %v in %q", round, err, out[:min(len(out), 200)])
		}
		if len(cmd.Args) != 3 || string(cmd.Args[0]) != "MSET" || !bytes.Equal(cmd.Args[2], small) {
			t.Fatalf("round %d: MSET passed on as %d arguments", round, len(cmd.Args))
		}
		got, ok := g.takeAside(cmd.Args[1])
		if !ok || !bytes.Equal(got, value) {
			t.Fatalf("round %d: the bulk held aside: %v, %d bytes of %d", round, ok, len(got), len(value))
		}
		if _, ok := oversized(&g.nonce, cmd.Args[1]); ok {
			t.Errorf("round %d: the placeholder of a bulk held aside passes for an oversized bulk", round)
		}
		if cmd, err := rd.ReadCommand(); err != nil || string(cmd.Args[0]) != "PING" {
			t.Errorf("round %d: after MSET: %v, %v", round, cmd.Args, err)
		}
		if n := held.Load(); n != 0 {
			t.Errorf("round %d: %d bytes counted after the commands", round, n)
		}
	}
}
