package array

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

var ctx = context.Background()

// modes under test: each runs every size.
var modes = []struct {
	name string
	opts []Option
	call []CallOption
}{
	{"standalone-hashing", []Option{allMechanisms(), WithDefault("hashing")}, nil},
	{"standalone-replication", []Option{allMechanisms(), WithDefault("replication")}, nil},
	{"standalone-splitting", []Option{everyMechanism(), WithDefault("splitting")}, nil},
	{"standalone-packing", []Option{everyMechanism(), WithDefault("packing")}, nil},
	{"hybrid-all-four", hybridAll(), nil},
	{"hybrid", []Option{allMechanisms(), WithMode(Hybrid), WithRules(Rule{Max: 4 << 10, RM: "replication"}, Rule{RM: "hashing"})}, nil},
	{"custom-on-standalone", []Option{allMechanisms(), WithDefault("hashing")}, []CallOption{Using("replication")}},
	{"custom-on-hybrid", []Option{allMechanisms(), WithMode(Hybrid), WithRules(Rule{RM: "replication"})}, []CallOption{Using("hashing")}},
}

var sizes = []int{0, 1, 4 << 10, 2 << 20, 20 << 20}

func TestRoundTrip(t *testing.T) {
	for _, md := range modes {
		t.Run(md.name, func(t *testing.T) {
			r := newRig(t, 6, md.opts...)
			rng := newRand(t)
			for _, n := range sizes {
				if testing.Short() && n > 2<<20 {
					continue
				}
				key := fmt.Sprintf("key-%d", n)
				v := randBytes(rng, n)
				r.mustStore(key, v, md.call...)
				r.mustRead(key, v)
				// Overwrite with a different size, then delete.
				v2 := randBytes(rng, n/3+5)
				r.mustStore(key, v2, md.call...)
				r.mustRead(key, v2)
			}
			r.reopen()
			for _, n := range sizes {
				if testing.Short() && n > 2<<20 {
					continue
				}
				key := fmt.Sprintf("key-%d", n)
				if err := r.a.Delete(ctx, []byte(key)); err != nil {
					t.Fatalf("delete %q: %v", key, err)
				}
				if _, err := r.a.Retrieve(ctx, []byte(key)); !errors.Is(err, ErrNotFound) {
					t.Fatalf("retrieve after delete: %v", err)
				}
			}
			// Packing logs its deletes and folds the log when idle.
			if err := r.a.Settle(ctx); err != nil {
				t.Fatalf("settle: %v", err)
			}
			for i, m := range r.mems {
				info, _ := m.Info(ctx)
				if info.Keys != 1 { // the array header
					t.Errorf("device %d holds %d keys after every key was deleted", i, info.Keys)
				}
			}
		})
	}
}

func TestHugeValueSplitsAcrossDevices(t *testing.T) {
	r := newRig(t, 6, allMechanisms(), WithMode(Hybrid), WithRules(Rule{RM: "replication"}))
	v := randBytes(newRand(t), 20<<20) // 10× the device limit
	r.mustStore("huge", v)
	r.mustRead("huge", v)
	p, err := r.piece(r.a.primary([]byte("huge"), 0), "huge", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Splits < 10 || p.ObjectLen != uint64(len(v)) {
		t.Fatalf("split 0 header: %d splits, %d bytes", p.Splits, p.ObjectLen)
	}
	// Shrink it: the excess splits must go.
	r.mustStore("huge", []byte("small"))
	for s := 1; s < int(p.Splits); s++ {
		if h := r.holders("huge", s); len(h) > 0 {
			t.Fatalf("split %d left on devices %v after shrinking", s, h)
		}
	}
	r.mustRead("huge", []byte("small"))
}

func TestHugeValueShrinkInStandaloneHashingIsCleanedByDelete(t *testing.T) {
	r := newRig(t, 4, allMechanisms(), WithDefault("hashing"))
	r.mustStore("k", randBytes(newRand(t), 5<<20))
	r.mustStore("k", []byte("x")) // standalone, one split: no read before write
	r.mustRead("k", []byte("x"))
	if err := r.a.Delete(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	for s := 0; s < 4; s++ {
		if h := r.holders("k", s); len(h) > 0 {
			t.Fatalf("split %d left on devices %v after delete", s, h)
		}
	}
}

func TestLimits(t *testing.T) {
	r := newRig(t, 3, allMechanisms(), WithMaxValue(1<<20))
	long := []byte(strings.Repeat("a", 253))
	err := r.a.Store(ctx, long, []byte("v"))
	if !errors.Is(err, ErrKeyTooLong) || !strings.Contains(err.Error(), "maximum 252") {
		t.Fatalf("253-byte key: %v", err)
	}
	if err := r.a.Store(ctx, long[:252], []byte("v")); err != nil {
		t.Fatalf("252-byte key: %v", err)
	}
	if err := r.a.Store(ctx, nil, []byte("v")); !errors.Is(err, ErrKeyTooShort) {
		t.Fatalf("empty key: %v", err)
	}
	if err := r.a.Store(ctx, []byte("k"), make([]byte, 1<<20+1)); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("oversized value: %v", err)
	}
	if ok, _ := r.a.Exist(ctx, []byte("k")); ok {
		t.Fatal("a refused store left a key behind")
	}
	if err := r.a.Store(ctx, []byte("k"), []byte("v"), Using("nope")); !errors.Is(err, ErrUnknownMechanism) {
		t.Fatalf("unknown mechanism: %v", err)
	}
}

func TestReplicationSurvivesFailuresAndRepairs(t *testing.T) {
	r := newRig(t, 5, allMechanisms(), WithDefault("replication"))
	v := randBytes(newRand(t), 4096)
	r.mustStore("k", v)
	p := r.a.primary([]byte("k"), 0)
	copies := []int{p, (p + 1) % 5, (p + 2) % 5}

	// A corrupted primary copy: right bytes, and the copy is rewritten.
	if err := r.mems[p].Corrupt(format.Key([]byte("k"), 0, format.KindData)); err != nil {
		t.Fatal(err)
	}
	r.mustRead("k", v)
	if _, err := r.piece(p, "k", 0); err != nil {
		t.Fatalf("corrupt copy not repaired: %v", err)
	}

	// Two of three copies failed: still reads.
	r.mems[copies[0]].Fail()
	r.mems[copies[1]].Fail()
	r.mustRead("k", v)
	if st := r.a.DeviceState(copies[0]); st != mechanism.Failed {
		t.Fatalf("failed primary is %v", st)
	}

	// All three failed: a clear error naming the key, never bytes.
	r.mems[copies[2]].Fail()
	_, err := r.a.Retrieve(ctx, []byte("k"))
	if err == nil || !strings.Contains(err.Error(), `"k"`) || !(errors.Is(err, ErrUnavailable) || errors.Is(err, ErrDataLoss)) {
		t.Fatalf("all copies failed: %v", err)
	}
	for _, c := range copies {
		r.mems[c].Recover()
	}
	if _, err := r.a.Retrieve(ctx, []byte("k")); err == nil {
		t.Fatal("devices that came back were used before being resynced")
	}
	r.repairAll(nil)

	// A replaced device (empty) is refilled by the read that misses it.
	r.replace(copies[0])
	r.mustRead("k", v)
	if _, err := r.piece(copies[0], "k", 0); err != nil {
		t.Fatalf("replaced primary not repaired by the read: %v", err)
	}
	// Repair fixes a replaced non-primary copy that reads never touch.
	r.replace(copies[2])
	if n, err := r.a.Repair(ctx, []byte("k")); err != nil || n != 1 {
		t.Fatalf("repair: %d rewritten, %v", n, err)
	}
	for _, c := range copies {
		if _, err := r.piece(c, "k", 0); err != nil {
			t.Fatalf("copy on device %d after repair: %v", c, err)
		}
	}
}

func TestHashingLossIsAnErrorNeverBytes(t *testing.T) {
	r := newRig(t, 3, allMechanisms(), WithDefault("hashing"))
	r.mustStore("k", []byte("value"))
	p := r.a.primary([]byte("k"), 0)
	if err := r.mems[p].Corrupt(format.Key([]byte("k"), 0, format.KindData)); err != nil {
		t.Fatal(err)
	}
	if v, err := r.a.Retrieve(ctx, []byte("k")); !errors.Is(err, ErrDataLoss) {
		t.Fatalf("corrupt hashing value: %q, %v", v, err)
	}
	r.mustStore("j", []byte("value"))
	r.mems[r.a.primary([]byte("j"), 0)].Fail()
	if v, err := r.a.Retrieve(ctx, []byte("j")); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "device failed") {
		t.Fatalf("failed hashing device: %q, %v", v, err)
	}
}

func TestMechanismChangeCleansUp(t *testing.T) {
	r := newRig(t, 6, allMechanisms(), WithMode(Hybrid), WithRules(Rule{Max: 100, RM: "hashing"}, Rule{RM: "replication"}))
	big := randBytes(newRand(t), 1000)
	r.mustStore("k", big) // replication: 3 copies
	if h := r.holders("k", 0); len(h) != 3 {
		t.Fatalf("replication holders %v", h)
	}
	r.mustStore("k", []byte("small")) // hashing: 1 copy, the others go
	if h := r.holders("k", 0); len(h) != 1 || h[0] != r.a.primary([]byte("k"), 0) {
		t.Fatalf("after the move to hashing, holders %v", h)
	}
	r.mustRead("k", []byte("small"))
	r.mustStore("k", big)
	if h := r.holders("k", 0); len(h) != 3 {
		t.Fatalf("back to replication, holders %v", h)
	}
}

func TestCustomOnStandaloneStaysConsistent(t *testing.T) {
	r := newRig(t, 5, allMechanisms(), WithDefault("hashing"))
	r.mustStore("k", []byte("v1"), Using("replication"))
	// A later default store (hashing) must clean up the replication copies,
	// even after a restart: the array header remembers custom mode was used.
	r.reopen()
	r.mustStore("k", []byte("v2"))
	if h := r.holders("k", 0); len(h) != 1 {
		t.Fatalf("holders after default store %v", h)
	}
	r.mustRead("k", []byte("v2"))
}

func TestOpenRefusesShuffledAndForeignDevices(t *testing.T) {
	r := newRig(t, 4, allMechanisms())
	r.mustStore("k", []byte("v"))
	shuffled := slices.Clone(r.devs)
	shuffled[0], shuffled[1] = shuffled[1], shuffled[0]
	_, err := Open(ctx, shuffled, allMechanisms())
	if err == nil || !strings.Contains(err.Error(), "mem:dev1") || !strings.Contains(err.Error(), "out of order") {
		t.Fatalf("shuffled open: %v", err)
	}
	other := newRig(t, 4, allMechanisms())
	foreign := slices.Clone(r.devs)
	foreign[2] = other.devs[2]
	_, err = Open(ctx, foreign, allMechanisms())
	if err == nil || !strings.Contains(err.Error(), "device 2") || !strings.Contains(err.Error(), "another array") {
		t.Fatalf("foreign open: %v", err)
	}
	if _, err := Create(ctx, r.devs, allMechanisms()); err == nil {
		t.Fatal("create over an existing array succeeded")
	}
}

func TestOpenWithMissingAndEmptyDevices(t *testing.T) {
	r := newRig(t, 4, allMechanisms(), WithDefault("replication"))
	r.mustStore("k", []byte("v"))
	devs := slices.Clone(r.devs)
	devs[1] = device.Unavailable("pebble:/gone/dev1", errors.New("directory does not exist"))
	r.mems[3].Replace() // an empty device in slot 3: not silently a member
	a, err := Open(ctx, devs, allMechanisms(), WithDefault("replication"))
	if err != nil {
		t.Fatalf("open with a missing device: %v", err)
	}
	defer a.Close()
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Devices[1].State != "failed" || !strings.Contains(st.Devices[1].Reason, "does not exist") {
		t.Fatalf("missing device status %+v", st.Devices[1])
	}
	if st.Devices[3].State != "failed" || !strings.Contains(st.Devices[3].Reason, "no array header") {
		t.Fatalf("empty device status %+v", st.Devices[3])
	}
	got, err := a.Retrieve(ctx, []byte("k"))
	if err != nil || string(got) != "v" {
		t.Fatalf("read with two devices down: %q %v", got, err)
	}
}

func TestAsyncKeepsSubmissionOrderPerKey(t *testing.T) {
	r := newRig(t, 4, allMechanisms(), WithDefault("replication"))
	var fs []*Future
	for i := 0; i < 200; i++ {
		fs = append(fs, r.a.StoreAsync(ctx, []byte("k"), []byte(fmt.Sprint(i))))
		fs = append(fs, r.a.StoreAsync(ctx, []byte(fmt.Sprint("other", i)), []byte("x")))
	}
	read := r.a.RetrieveAsync(ctx, []byte("k"))
	v, err := read.Wait()
	if err != nil || string(v) != "199" {
		t.Fatalf("async read after 200 async stores: %q %v", v, err)
	}
	for _, f := range fs {
		if err := f.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestKeysInOrderOnceEach(t *testing.T) {
	r := newRig(t, 5, allMechanisms(), WithDefault("replication"))
	want := []string{}
	for i := 0; i < 100; i++ {
		k := fmt.Sprintf("key%03d", i)
		want = append(want, k)
		r.mustStore(k, []byte("v"))
	}
	r.mustStore("other", []byte("v"))
	check := func() {
		t.Helper()
		keys, err := r.a.Keys(ctx, []byte("key"))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range keys {
			got = append(got, string(k))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("keys: %d listed, want %d: %v", len(got), len(want), got)
		}
	}
	check()
	r.mems[2].Fail()
	r.a.SetDeviceState(2, mechanism.Failed)
	check() // keys whose primary is down are listed from their copies
}

func TestConcurrentClientsOnSharedKeys(t *testing.T) {
	r := newRig(t, 6, allMechanisms(), WithMode(Hybrid), WithRules(Rule{Max: 64, RM: "hashing"}, Rule{RM: "replication"}))
	done := make(chan error)
	for w := 0; w < 8; w++ {
		go func() {
			var err error
			for i := 0; i < 200 && err == nil; i++ {
				key := []byte(fmt.Sprint("k", i%10))
				val := []byte(strings.Repeat(fmt.Sprint(w), 1+(i*37)%200))
				switch i % 3 {
				case 0, 1:
					err = r.a.Store(ctx, key, val)
				case 2:
					var got []byte
					got, err = r.a.Retrieve(ctx, key)
					if errors.Is(err, ErrNotFound) {
						err = nil
					} else if err == nil && strings.Trim(string(got), string(got[:1])) != "" {
						err = fmt.Errorf("torn value %q", got)
					}
				}
			}
			done <- err
		}()
	}
	for w := 0; w < 8; w++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
