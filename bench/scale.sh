#!/usr/bin/env bash
# Serving a large array (issue 10): `kvarray load N` fills the default
# embedded array (6 Pebble devices, hybrid) with N values of 16 bytes as
# SET would, then `kvarray serve` is started and timed to its first PONG,
# a full `redis-cli --scan` is timed and counted (it must list N keys),
# the server's resident memory is sampled every 0.1 s throughout (peak
# VmRSS), and, the server stopped, device 2 is removed, replaced and
# rebuilt by `kvarray rebuild` under /usr/bin/time (its peak RSS). Each
# figure is printed beside issue 10's target: PING within 1 s of start,
# the scan under 2 minutes, RSS under 300 MB.
#
# Usage: bash bench/scale.sh [N]      (from the repository root; N defaults
#        to 10,000,000: the load takes about 15 minutes on 2 cores)
# Needs redis-cli and /usr/bin/time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-10000000}
work=$(mktemp -d)
spid=""
trap 'kill $spid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
source "$root/bench/lib.sh"
bin=$(kvarray_bin "$work")
cd "$work"
"$bin" init >/dev/null
"$bin" load "$n" --json >load.json 2>load.log

port=$((20000 + RANDOM % 20000))
t0=$(date +%s.%N)
"$bin" serve --listen 127.0.0.1:$port >serve.log 2>&1 &
spid=$!
until redis-cli -p $port ping 2>/dev/null | grep -q PONG; do sleep 0.01; done
t1=$(date +%s.%N)
# Peak resident memory of the server, sampled until it exits.
(peak=0; while r=$(awk '/^VmRSS/ {print $2}' /proc/$spid/status 2>/dev/null); do
  [ -n "$r" ] && [ "$r" -gt "$peak" ] && peak=$r && echo "$peak" >rss.max
  sleep 0.1
done) &
t2=$(date +%s.%N)
listed=$(redis-cli -p $port --scan | wc -l)
t3=$(date +%s.%N)
dbsize=$(redis-cli -p $port dbsize)
sleep 0.3
kill $spid
wait $spid 2>/dev/null || true
spid=""

rm -rf data/dev2
"$bin" replace 2 >/dev/null
/usr/bin/time -v "$bin" rebuild 2 --json >rebuild.json 2>time.log

python3 - "$n" "$t0" "$t1" "$t2" "$t3" "$listed" "$dbsize" "$(cat rss.max)" <<'PY'
import json, re, sys
n, t0, t1, t2, t3 = int(sys.argv[1]), *map(float, sys.argv[2:6])
listed, dbsize, rss_kb = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
load = json.load(open("load.json"))
r = json.load(open("rebuild.json"))
tl = open("time.log").read()
rb_rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", tl).group(1))
rb_s = r["elapsed_ns"] / 1e9
def row(what, got, target, ok):
    print(f"{what:<34} {got:>16}   target {target:<10} {'ok' if ok else 'MISSED'}")
print(f"{n} keys of 16 bytes loaded in {load['elapsed_ns']/1e9:.0f} s ({load['keys_per_second']:.0f} keys/s)")
row("serve: start to first PONG", f"{t1-t0:.2f} s", "< 1 s", t1 - t0 < 1)
row("redis-cli --scan, keys listed", f"{listed}", f"= {n}", listed == n)
row("DBSIZE", f"{dbsize}", f"= {n}", dbsize == n)
row("redis-cli --scan, time", f"{t3-t2:.1f} s", "< 120 s", t3 - t2 < 120)
row("serve: peak RSS (start and scan)", f"{rss_kb/1024:.0f} MB", "< 300 MB", rss_kb < 300 * 1024)
row("rebuild of device 2: peak RSS", f"{rb_rss/1024:.0f} MB", "< 300 MB", rb_rss < 300 * 1024)
print(f"rebuild of device 2: {r['pieces_repaired']} pieces in {rb_s:.1f} s")
PY
