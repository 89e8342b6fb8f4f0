#!/usr/bin/env bash
# Rebuild of the default embedded array (issue 10): `kvarray serve` (6
# Pebble devices, hybrid) filled with N distinct keys of 4 KiB (SETs
# piped through redis-cli), stopped; device 2's directory removed,
# `kvarray replace 2`, `kvarray rebuild 2 --json` under /usr/bin/time;
# then dd of 1000 MiB with oflag=direct in the same directory, and the
# ratio of the rebuild's rate (report bytes / elapsed) to dd's.
#
# Usage: bash bench/rebuildserve.sh [N]     (from the repository root;
#        N defaults to 200000, about 800 MB of values)
#        KVARRAY_BIN=/path/kvarray bash bench/rebuildserve.sh
#        (a prebuilt binary, e.g. an older commit's)
#        KVARRAY_CPUPROFILE=/tmp/rebuild.prof ... profiles the rebuild.
# Needs redis-cli and python3; takes about a minute per 100k keys.
set -euo pipefail
n=${1:-200000}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
spid=""
trap 'kill $spid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source "$root/bench/lib.sh"
bin=$(kvarray_bin "$work")
port=$((20000 + RANDOM % 20000))
cd "$work"
"$bin" serve --listen 127.0.0.1:$port >serve.log 2>&1 &
spid=$!
for _ in $(seq 1 150); do redis-cli -p $port ping 2>/dev/null | grep -q PONG && break; sleep 0.2; done
python3 - "$n" <<'PY' | redis-cli -p $port --pipe >pipe.log
import sys
out, pad = sys.stdout.buffer, b"x" * 4084
for i in range(int(sys.argv[1])):
    k, v = b"key:%012d" % i, b"%012d" % i + pad
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
PY
keys=$(redis-cli -p $port dbsize)
kill $spid; wait $spid 2>/dev/null || true; spid=""
rm -rf data/dev2
"$bin" replace 2 >/dev/null
/usr/bin/time -v "$bin" rebuild 2 --json >rebuild.json 2>time.log
dd if=/dev/zero of=dd.tmp bs=1M count=1000 oflag=direct 2>dd.log; rm -f dd.tmp
python3 - "$keys" <<'PY'
import json, re, sys
r = json.load(open("rebuild.json"))
t = open("time.log").read()
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) / 1024
cpu = sum(float(re.search(p + r" \(seconds\): ([\d.]+)", t).group(1)) for p in ("User time", "System time"))
m = re.search(r"([\d.]+) ([MG])B/s", open("dd.log").read())
dd = float(m.group(1)) * (1000 if m.group(2) == "G" else 1)
s = r["elapsed_ns"] / 1e9
mb = r["bytes"] / 1e6 / s
print(f"{sys.argv[1]} keys; rebuild of device 2: {r['pieces_repaired']} pieces, {r['bytes']/1e6:.0f} MB in {s:.2f} s "
      f"= {mb:.1f} MB/s, {r['keys_failed']} failed; CPU {cpu:.1f} s; peak RSS {rss:.0f} MiB")
print(f"dd oflag=direct {dd:.0f} MB/s; rebuild = {100*mb/dd:.1f}% of it")
PY
