package longdouble

import "testing"

// TestAdd: sums and their text as Redis 7.0 (x86-64, x87 long double)
// answers INCRBYFLOAT key INCR for a key holding X; "" is Redis's refusal
// (not a valid float, or a NaN or infinite result). The server's
// TestSameAsRedis compares more against a live redis-server.
func TestAdd(t *testing.T) {
	for _, c := range []struct{ x, incr, want string }{
		{"0.1", "0.2", "0.3"},
		{"3.14", "1", "4.14"},
		{"9223372036854775807", "0", "9223372036854775807"},
		{"10", "0x10", "26"},
		{"1", "1e-20", "1"},
		{"-0.5", "0.5", "0"},
		{"1e300", "1e300", "200000000000000000001799464815911838774104788854658149587652"},
		{"5.0e3", "2.0e2", "5200"},
		{"0", "123456789.123456789", "123456789.12345678899873747"},
		{"0", "1e-4940", "0"},
		{"1.5", "-INF", ""},
		{"1", "1_0", ""},
		{"1", "0b1", ""},
		{"1", " 1", ""},
		{"1", "nan", ""},
		{"1", "1e5000", ""},
		{"1", "1e-5000", ""},
		{"1", "++1", ""},
		{"1e4932", "1e4932", ""},
		{"1e4931", "1e4931", "2000000000000000000012037898775927782647675548509066229547570"},
	} {
		x, ok1 := Parse([]byte(c.x))
		y, ok2 := Parse([]byte(c.incr))
		got := ""
		if ok1 && ok2 {
			if z, ok := Add(x, y); ok {
				got = Format(z)
			}
		}
		if len(got) > len(c.want) && c.want != "" {
			got = got[:len(c.want)]
		}
		if got != c.want {
			t.Errorf("%s + %s = %q, want %q", c.x, c.incr, got, c.want)
		}
	}
}

// TestFormat: "-0" is "0", infinities are named, integers have no point.
func TestFormat(t *testing.T) {
	for in, want := range map[string]string{"-0": "0", "inf": "inf", "-Infinity": "-inf", "2.50": "2.5", "100": "100", "-1.25e2": "-125"} {
		f, ok := Parse([]byte(in))
		if !ok {
			t.Fatalf("Parse(%q) failed", in)
		}
		if got := Format(f); got != want {
			t.Errorf("Format(Parse(%q)) = %q, want %q", in, got, want)
		}
	}
}
