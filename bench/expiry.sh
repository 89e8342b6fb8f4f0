#!/usr/bin/env bash
# Mass expiry (issue 11): N keys (default 1,000,000) that all expire in the
# same second, among N/10 keys without a TTL, against `kvarray serve` on 6
# mem devices (hybrid, replication; DEVICES=pebble for serve's default
# array, 6 Pebble devices, in a temporary directory). The keys are loaded by 4 `redis-cli --pipe`
# processes (SET k v PXAT t, t spread over one second); then the script
# waits for that second and prints how fast the expiry cycle reclaims them
# (INFO stats expired_keys, polled every 100 ms), and the slowest and the
# 99th-percentile PING of another client (its own process, a PING every
# 10 ms) during reclaim next to before it, as ratios: nothing is asserted
# about time. It fails if a key with a TTL is left or a key without one
# is lost. Needs redis-cli and redis-py.
# Usage: bash bench/expiry.sh [N]   (from the repository root)
set -euo pipefail
n=${1:-1000000}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pid=
trap 'kill $pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/kvarray" "$root/cmd/kvarray"
port=$((20000 + RANDOM % 20000))
if [ "${DEVICES:-mem}" = pebble ]; then
	# No config: serve creates its default array, 6 Pebble devices.
	(cd "$work" && exec ./kvarray serve --listen 127.0.0.1:$port >serve.log 2>&1) &
else
	printf 'devices: [mem:d0, mem:d1, mem:d2, mem:d3, mem:d4, mem:d5]\nmode: hybrid\ndefault: replication\n' >"$work/kvarray.yaml"
	(cd "$work" && exec ./kvarray serve --config kvarray.yaml --listen 127.0.0.1:$port >serve.log 2>&1) &
fi
pid=$!
for _ in $(seq 1 150); do redis-cli -p $port ping 2>/dev/null | grep -q PONG && break; sleep 0.2; done
python3 - "$port" "$n" "$work" "${DEVICES:-mem}" <<'PY'
import multiprocessing, os, subprocess, sys, time, redis
port, n, work, devices = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
r = redis.Redis(port=port)
keep = n // 10
def resp(*args):
    out = [f"*{len(args)}\r\n"]
    for a in args:
        a = str(a)
        out.append(f"${len(a)}\r\n{a}\r\n")
    return "".join(out)
def load(name, lines):
    # 4 redis-cli --pipe processes, as many connections.
    t = time.time()
    for p in range(parts):
        with open(f"{work}/{name}{p}", "w") as f:
            f.writelines(lines(p))
    procs = [subprocess.Popen(["redis-cli", "-p", str(port), "--pipe", "--pipe-timeout", "0"], stdin=open(f"{work}/{name}{p}"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for p in range(parts)]
    for pr in procs:
        out = pr.communicate()[0].decode()
        if pr.returncode != 0 or "errors: 0" not in out:
            sys.exit(f"load failed: {out}")
    return time.time() - t
parts = 4
# The keys without a TTL first: their rate sets how far ahead the
# expiry second must be for the rest to load before it (with a margin:
# the rate drops as the array fills).
took = load("keep", lambda p: (resp("SET", f"keep:{i}", "v") for i in range(p, keep, parts)))
at = int((time.time() + 15 + 3 * n * took / keep)) * 1000
took += load("exp", lambda p: (resp("SET", f"exp:{i}", "v", "PXAT", at + i % 1000) for i in range(p, n, parts)))
print(f"loaded {n} keys with a TTL ending in the same second and {keep} without, in {took:.1f} s ({(n+keep)/took:.0f} SET/s), {devices} devices")
if time.time() * 1000 > at - 5000:
    sys.exit("the load took too long: the keys expire before the measurement starts")

def pinger(start, end, out):
    # Its own process, so that the polling client cannot hold it up.
    p = redis.Redis(port=port)
    lat = []
    while time.time() < start:
        time.sleep(0.005)
    while time.time() < end.value:
        t = time.perf_counter(); p.ping(); lat.append(time.perf_counter() - t)
        time.sleep(0.01)
    out.put(sorted(lat))
def pings(start, stop_at):
    q, end = multiprocessing.Queue(), multiprocessing.Value("d", stop_at)
    pr = multiprocessing.Process(target=pinger, args=(start, end, q)); pr.start()
    return pr, q, end
def summary(lat):
    return lat[-1] * 1000, lat[int(0.99 * (len(lat) - 1))] * 1000, len(lat)

# Before: 3 s of PINGs with nothing else running.
t0 = at / 1000 - 5
pr, q, _ = pings(t0, t0 + 3)
before = q.get(); pr.join()
# During: from the expiry second until every key is reclaimed.
pr, q, end = pings(at / 1000, 1e18)
time.sleep(max(0, at / 1000 - time.time()))
def expired():
    return r.info("stats")["expired_keys"]
first = last = None
deadline = time.time() + 1800
while time.time() < deadline:
    e = expired()
    now = time.time()
    if e > 0 and first is None:
        first = now
    if e >= n:
        last = now
        break
    time.sleep(0.1)
end.value = 0
during = q.get(); pr.join()
if last is None:
    sys.exit(f"not reclaimed after 30 minutes: {expired()} of {n}")
span = last - at / 1000
print(f"reclaimed {n} keys {span:.1f} s after they expired: {n/span:.0f} keys/s (first reclaimed {first - at/1000:.2f} s in)")
bmax, b99, bn = summary(before)
dmax, d99, dn = summary(during)
print(f"another client's PING: before max {bmax:.1f} ms p99 {b99:.2f} ms ({bn}); during reclaim max {dmax:.1f} ms p99 {d99:.2f} ms ({dn}); ratios max {dmax/bmax:.1f}x p99 {d99/b99:.1f}x")
left = [k for k in r.scan_iter("exp:*", count=1000)]
kept = sum(1 for _ in r.scan_iter("keep:*", count=1000))
if left or kept != keep:
    sys.exit(f"after reclaim: {len(left)} keys with a TTL left, {kept} of {keep} others")
print(f"check: no key with a TTL left, {kept} others kept; INFO keyspace: {r.info('keyspace')}")
PY
