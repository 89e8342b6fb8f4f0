#!/usr/bin/env bash
# Memory bounded by what clients ask (issue 14): an 8 MiB value read 500
# times in one pipeline, then MGET of it 200 times, against `kvarray serve`
# on its default embedded array, while another client PINGs every 10 ms.
# Prints the server's peak RSS and the other client's slowest PING for
# each load. Targets: RSS under 1 GB, PING under 50 ms. Needs redis-py.
# Usage: bash bench/memory.sh   (from the repository root)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/kvarray" "$root/cmd/kvarray"
port=$((20000 + RANDOM % 20000))
(cd "$work" && exec ./kvarray serve --listen 127.0.0.1:$port >serve.log 2>&1) &
pid=$!
python3 - "$port" "$pid" <<'PY'
import multiprocessing, os, sys, time, redis
port, pid = int(sys.argv[1]), int(sys.argv[2])
def rss_peak_mb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
def rss_mb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
for _ in range(150):
    try:
        redis.Redis(port=port).ping(); break
    except Exception:
        time.sleep(0.2)
r = redis.Redis(port=port)
r.set("k8m", os.urandom(8 << 20))
def pinger(stop, worst):
    # Its own process: the reading client would hold this one's GIL.
    p = redis.Redis(port=port)
    while not stop.is_set():
        t = time.perf_counter(); p.ping(); worst.value = max(worst.value, time.perf_counter() - t)
        time.sleep(0.01)
def under_load(name, fn):
    stop, worst = multiprocessing.Event(), multiprocessing.Value("d", 0.0)
    pr = multiprocessing.Process(target=pinger, args=(stop, worst)); pr.start()
    time.sleep(0.2)
    base = rss_mb(); t = time.perf_counter(); fn(); took = time.perf_counter() - t
    stop.set(); pr.join()
    print(f"{name}: {took:.1f} s; server RSS peak so far {rss_peak_mb():.0f} MB (was {base:.0f} MB before); slowest PING of another client {worst.value*1000:.1f} ms")
def pipelined_get():
    c = redis.Redis(port=port)
    p = c.pipeline(transaction=False)
    for _ in range(500):
        p.get("k8m")
    n = 0
    for v in p.execute():
        n += len(v)
    assert n == 500 * (8 << 20)
def mget():
    c = redis.Redis(port=port)
    vals = c.mget(["k8m"] * 200)
    assert sum(len(v) for v in vals) == 200 * (8 << 20)
under_load("GET k8m x500 pipelined", pipelined_get)
under_load("MGET k8m x200", mget)
PY
