#!/usr/bin/env bash
# Large collections on `kvarray serve` (issue 34's performance section),
# on its default embedded array (6 Pebble devices, hybrid):
#   - device bytes per stored field: a hash of N fields, 10-byte fields
#     and 10-byte values, loaded with HSET through redis-cli --pipe; the
#     growth of the devices' directories (du, after the load has synced)
#     per field, beside the user's 20 bytes (the MemEC regime: how close to
#     2x of them);
#   - serve's peak RSS while HGETALL of that hash, and ZRANGE 0 -1
#     WITHSCORES of a sorted set of N members, stream every element to a
#     client (bounded: it must not grow with N);
#   - DEL of each: the reply's time (O(1) for the caller) and the time
#     until the background reclaim finished (INFO keyspace's
#     garbage_records_pending back to 0).
#
# Usage: bash bench/collections.sh [--json]   (from the repository root)
#        N=100000 bash bench/collections.sh   (N defaults to 1,000,000:
#        about 5 minutes on 2 cores)
# Needs redis-cli and python3.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
json=
[ "${1:-}" = --json ] && json=1
n=${N:-1000000}
work=$(mktemp -d)
pid=
trap 'kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
source "$root/bench/lib.sh"
bin=$(kvarray_bin "$work")
port=$((20000 + RANDOM % 20000))
(cd "$work" && exec "$bin" serve --listen 127.0.0.1:$port >serve.log 2>&1) &
pid=$!
for _ in $(seq 1 150); do
	redis-cli -p $port ping 2>/dev/null | grep -q PONG && break
	sleep 0.2
done
say() { [ -n "$json" ] || echo "$@" >&2; }

rss() { awk '/^VmRSS/ {print $2 * 1024}' "/proc/$pid/status"; }
devbytes() { du -sb "$work/data" | cut -f1; }
# pipe CMD KEY: N elements (field value, or score member) into KEY, 1,000
# to a command, through redis-cli --pipe (one key's commands run one after
# another: elements one to a command would measure its per-key order).
pipe() {
	python3 - "$1" "$2" "$n" <<'PY' | redis-cli -p $port --pipe >/dev/null
import sys
cmd, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = sys.stdout.buffer
for lo in range(0, n, 1000):
    a = [cmd, key]
    for i in range(lo, min(n, lo + 1000)):
        a += ["%d" % i, "m%09d" % i] if cmd == "ZADD" else ["f%09d" % i, "v%09d" % i]
    out.write(b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x.encode()) for x in a))
PY
}
# peak CMD...: serve's peak RSS while redis-cli runs CMD (its output
# discarded), sampled every 50 ms.
peak() {
	redis-cli -p $port "$@" >/dev/null &
	local cli=$! top
	top=$(rss)
	while kill -0 $cli 2>/dev/null; do
		top=$(( $(rss) > top ? $(rss) : top ))
		sleep 0.05
	done
	wait $cli
	echo "$top"
}
# del KEY: "reply_ms reclaim_s"
del() {
	python3 - "$port" "$1" <<'PY'
import socket, sys, time
port, key = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
def do(*args):
    s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args))
    line = f.readline()
    if line[:1] == b"$":
        body = f.read(int(line[1:]) + 2)
        return body[:-2].decode()
    return line.decode().strip()
t0 = time.monotonic()
do("DEL", key)
reply = time.monotonic() - t0
while True:
    info = do("INFO", "kvarray")
    pending = [l for l in info.split("\r\n") if l.startswith("garbage_records_pending:")]
    if not pending or pending[0].split(":")[1] == "0":
        break
    time.sleep(0.05)
print("%.3f %.1f" % (reply * 1e3, time.monotonic() - t0))
PY
}

base_bytes=$(devbytes)
base_rss=$(rss)
say "loading a hash of $n fields (10-byte fields and values)..."
t0=$(date +%s.%N)
pipe HSET big
load_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
[ "$(redis-cli -p $port hlen big)" = "$n" ] || { echo "collections.sh: HLEN big is not $n" >&2; exit 1; }
sleep 2
hash_bytes=$(( $(devbytes) - base_bytes ))
say "loading a sorted set of $n members..."
pipe ZADD bigz
[ "$(redis-cli -p $port zcard bigz)" = "$n" ] || { echo "collections.sh: ZCARD bigz is not $n" >&2; exit 1; }
say "streaming HGETALL and ZRANGE 0 -1 WITHSCORES..."
loaded_rss=$(rss)
hgetall_rss=$(peak hgetall big)
zrange_rss=$(peak zrange bigz 0 -1 withscores)
say "deleting them..."
read -r hdel_ms hdel_reclaim <<<"$(del big)"
read -r zdel_ms zdel_reclaim <<<"$(del bigz)"

python3 - "$json" "$n" "$load_s" "$hash_bytes" "$base_rss" "$loaded_rss" "$hgetall_rss" "$zrange_rss" \
	"$hdel_ms" "$hdel_reclaim" "$zdel_ms" "$zdel_reclaim" <<'PY'
import json, sys
j, n, load_s, hb, base, loaded, hg, zr, hd, hr, zd, zrc = sys.argv[1:]
n, hb = int(n), int(hb)
r = {
    "elements": n,
    "hash_load_seconds": float(load_s),
    "device_bytes_per_field": round(hb / n, 1),
    "device_bytes_per_user_byte": round(hb / n / 20, 2),
    "rss_idle_bytes": int(base),
    "rss_loaded_bytes": int(loaded),
    "rss_peak_hgetall_bytes": int(hg),
    "rss_peak_zrange_bytes": int(zr),
    "del_hash_reply_ms": float(hd), "del_hash_reclaimed_seconds": float(hr),
    "del_zset_reply_ms": float(zd), "del_zset_reclaimed_seconds": float(zrc),
}
if j:
    print(json.dumps(r, indent=2))
    sys.exit()
mb = lambda b: "%.0f MB" % (b / 1e6)
print(f"hash of {n} fields loaded in {r['hash_load_seconds']} s; device bytes per field "
      f"{r['device_bytes_per_field']} ({r['device_bytes_per_user_byte']}x the user's 20; MemEC's goal 2x)")
print(f"serve RSS: idle {mb(int(base))}, loaded {mb(int(loaded))}, peak during HGETALL {mb(int(hg))}, during ZRANGE 0 -1 {mb(int(zr))}")
print(f"DEL of the hash: reply {hd} ms, reclaimed after {hr} s")
print(f"DEL of the sorted set: reply {zd} ms, reclaimed after {zrc} s")
PY
