#!/usr/bin/env bash
# Range commands on a huge value through `kvarray serve` (its default
# embedded array) against `redis-server --appendonly yes --appendfsync
# always`, in the same run: APPEND of 1 MiB records to one key up to N MiB
# (the mean time of the first 10 and of the last 10: flat when an APPEND
# costs the same whatever the length), then SETRANGE and GETRANGE of 4 KiB
# at random 4 KiB-aligned offsets (median of 20 each), then STRLEN and a
# check of the whole value. Prints each server's figures and kvarray's
# time as a multiple of Redis's.
#
# Usage: bash bench/rangeserve.sh [N]   (from the repository root; N MiB, default 40)
#        KVARRAY_BIN=/path/kvarray bash bench/rangeserve.sh   (an older commit's binary)
# Needs redis-server and redis-py. Takes about a minute.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mib=${1:-40}
work=$(mktemp -d)
kpid=""
rpid=""
trap 'kill $kpid $rpid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
source "$root/bench/lib.sh"
bin=$(kvarray_bin "$work")
start_pair "$work" "$bin"
python3 - "$kport" "$rport" "$mib" <<'PY'
import hashlib, random, statistics, sys, time
import redis

kport, rport, mib = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

def ms(f):
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1000

def run(port):
    r = redis.Redis(port=port, socket_timeout=120)
    r.delete("big")
    model = bytearray()
    appends = []
    for i in range(mib):
        rec = bytes([i % 251]) * (1 << 20)
        appends.append(ms(lambda: r.append("big", rec)))
        model += rec
    rng = random.Random(1)
    sets, gets = [], []
    for _ in range(20):
        off = rng.randrange(0, len(model) - 4096) // 4096 * 4096
        data = rng.randbytes(4096)
        sets.append(ms(lambda: r.setrange("big", off, data)))
        model[off:off + 4096] = data
    for _ in range(20):
        off = rng.randrange(0, len(model) - 4096) // 4096 * 4096
        got = []
        gets.append(ms(lambda: got.append(r.getrange("big", off, off + 4095))))
        assert got[0] == model[off:off + 4096], f"GETRANGE at {off}: wrong bytes"
    assert r.strlen("big") == len(model)
    assert hashlib.sha256(r.get("big")).digest() == hashlib.sha256(model).digest(), "the value read whole is wrong"
    return {"APPEND 1 MiB, first 10": statistics.mean(appends[:10]),
            "APPEND 1 MiB, last 10": statistics.mean(appends[-10:]),
            "SETRANGE 4 KiB": statistics.median(sets),
            "GETRANGE 4 KiB": statistics.median(gets)}

k, rd = run(kport), run(rport)
print(f"one value grown to {mib} MiB by APPEND; ms per command (mean or median), kvarray / durable redis")
print(f"{'':24} {'kvarray':>10} {'redis':>10} {'ratio':>8}")
for name in k:
    print(f"{name:24} {k[name]:10.2f} {rd[name]:10.2f} {k[name] / rd[name]:8.1f}x")
print("whole value, STRLEN and every GETRANGE checked against a model: ok")
PY
