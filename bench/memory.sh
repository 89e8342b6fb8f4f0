#!/usr/bin/env bash
# Memory bounded by what clients ask (issue 14): an 8 MiB value read 500
# times in one pipeline, then MGET of it 200 times, then 8 connections
# each sending half of a 400 MB value and stopping there, against
# `kvarray serve` on its default embedded array, while another client
# PINGs every 10 ms. Prints the server's peak RSS and the other client's
# slowest PING for each load. Targets: RSS under 1 GB, PING under 50 ms.
#
# The machine's own noise is printed beside it: the slowest PING of a
# client of an idle redis-server over the same time (when redis-server is
# installed), each pinger in its own process. Needs redis-py.
# Usage: bash bench/memory.sh   (from the repository root)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pid= rpid=
cleanup() {
	for p in $pid $rpid; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/kvarray" "$root/cmd/kvarray"
port=$((20000 + RANDOM % 20000))
(cd "$work" && exec ./kvarray serve --listen 127.0.0.1:$port >serve.log 2>&1) &
pid=$!
rport=0
if command -v redis-server >/dev/null; then
	rport=$((port + 1))
	redis-server --port $rport --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
	rpid=$!
fi
python3 - "$port" "$pid" "$rport" <<'PY'
import multiprocessing, os, socket, sys, time, redis
port, pid, rport = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def status_mb(field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
for _ in range(150):
    try:
        redis.Redis(port=port).ping(); break
    except Exception:
        time.sleep(0.2)
r = redis.Redis(port=port)
r.set("k8m", os.urandom(8 << 20))
def pinger(p, stop, worst):
    # Its own process: the reading client would hold this one's GIL.
    p = redis.Redis(port=p)
    while not stop.is_set():
        t = time.perf_counter(); p.ping(); worst.value = max(worst.value, time.perf_counter() - t)
        time.sleep(0.01)
def under_load(name, fn):
    stop = multiprocessing.Event()
    ports = [port] + ([rport] if rport else [])
    worst = [multiprocessing.Value("d", 0.0) for _ in ports]
    prs = [multiprocessing.Process(target=pinger, args=(p, stop, w)) for p, w in zip(ports, worst)]
    for pr in prs: pr.start()
    time.sleep(0.2)
    base = status_mb("VmRSS:"); t = time.perf_counter(); note = fn() or ""; took = time.perf_counter() - t
    stop.set()
    for pr in prs: pr.join()
    noise = f" (an idle redis-server meanwhile: {worst[1].value*1000:.1f} ms)" if rport else ""
    print(f"{name}: {took:.1f} s{note}; server RSS peak so far {status_mb('VmHWM:'):.0f} MB (was {base:.0f} MB before); slowest PING of another client {worst[0].value*1000:.1f} ms{noise}", flush=True)
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
def half_sent():
    # Each connection announces a 400 MB value and sends half of it; the
    # server holds what it accepts, and refuses connections past its
    # input limit (an error, then the connection is closed).
    chunk, socks, refused = b"v" * (1 << 20), [], 0
    for i in range(8):
        s = socket.create_connection(("127.0.0.1", port))
        try:
            s.sendall(b"*3\r\n$3\r\nSET\r\n$5\r\nhalf%d\r\n$400000000\r\n" % i)
            for _ in range(200):
                s.sendall(chunk)
            socks.append(s)
        except OSError:
            refused += 1
            s.close()
    time.sleep(1)
    held = status_mb("VmRSS:")
    for s in socks:
        s.close()
    time.sleep(2)
    return f" ({len(socks)} held, {refused} refused; RSS {held:.0f} MB held, {status_mb('VmRSS:'):.0f} MB 2 s after they closed)"
under_load("GET k8m x500 pipelined", pipelined_get)
under_load("MGET k8m x200", mget)
under_load("8 x half of a 400 MB SET", half_sent)
PY
