#!/usr/bin/env bash
# One slow device (issue 40, item 4): `kvarray serve` on six redis://
# devices (redis-server processes, in memory), the last behind
# bench/delayproxy, measured with redis-benchmark healthy, then with that
# device's answers held DELAY (default 200 ms) longer. The target: with
# the slow device, throughput at least 80% of the healthy array's and a
# p99 under 50 ms. For each load it prints both rates, the ratio, both
# p99 latencies and the CPU time the server used per operation; after a
# warm-up in which the server judges the device slow (INFO kvarray:
# devices_slow), which it prints too.
#
# Usage: bash bench/slowdevice.sh            (from the repository root)
#        DELAY=500ms LOADS="set 4096 16 1 20000" bash bench/slowdevice.sh
#        KVARRAY_BIN=/path/kvarray bash bench/slowdevice.sh
#        JSON=1 bash bench/slowdevice.sh     (one JSON object per load)
# Needs redis-server and redis-benchmark. Takes about a minute.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] && cp -r "$work" /tmp/sdwork; rm -rf "$work"' EXIT
source "$root/bench/lib.sh"
bin=$(kvarray_bin "$work")
(cd "$root" && go build -o "$work/delayproxy" ./bench/delayproxy)
delay=${DELAY:-200ms}

base=$((20000 + RANDOM % 20000))
specs=()
for i in 0 1 2 3 4 5; do
  port=$((base + i))
  redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis$i.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 50); do redis-cli -p $port ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
  specs+=("redis://127.0.0.1:$port/0")
done
proxy=$((base + 6))
"$work/delayproxy" -listen 127.0.0.1:$proxy -to 127.0.0.1:$((base + 5)) -delay "$delay" 2>"$work/proxy.log" &
ppid=$!
pids+=($ppid)
sleep 0.3
specs[5]="redis://127.0.0.1:$proxy/0"
kport=$((base + 7))
"$bin" init --config "$work/kvarray.yaml" --devices "$(IFS=,; echo "${specs[*]}")" >/dev/null
"$bin" serve --config "$work/kvarray.yaml" --listen 127.0.0.1:$kport >"$work/serve.log" 2>&1 &
kpid=$!
pids+=($kpid)
for _ in $(seq 1 150); do redis-cli -p $kport ping 2>/dev/null | grep -q PONG && break; sleep 0.2; done

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)
# run test size clients pipeline n: prints "rps p99_ms cpu_ms_per_op"
run() {
  local t=$1 d=$2 c=$3 p=$4 n=$5 c0 c1 line
  c0=$(cpu $kpid)
  line=$(redis-benchmark -p $kport -t "$t" -d "$d" -c "$c" -P "$p" -n "$n" -r 100000 --csv 2>/dev/null | grep -v '^"test"' | head -n 1)
  c1=$(cpu $kpid)
  python3 -c "import sys; f=sys.argv[1].replace('\"','').split(','); print(f[1], f[6], ($c1-$c0)*1000/$ticks/$n)" "$line"
}
slow() { redis-cli -p $kport info kvarray | tr -d '\r' | awk -F: '/^devices_slow:/ {print $2}'; }

loads=${LOADS:-"set 4096 16 1 20000; get 4096 16 1 50000"}
IFS=';' read -ra list <<<"$loads"
declare -A healthy
for load in "${list[@]}"; do
  set -- $load
  healthy[$load]=$(run "$@")
done
kill -USR1 $ppid # the delay on
# Warm up until the server judges the device slow (it takes three
# judgements, 100 ms apart, once its latency shows).
for _ in $(seq 1 30); do
  redis-benchmark -p $kport -t set -d 4096 -c 16 -n 2000 -r 100000 -q >/dev/null 2>&1
  [ "$(slow)" = 1 ] && break
done
echo "devices_slow after the warm-up: $(slow) (device 5 behind +$delay)"
[ -z "${JSON:-}" ] && printf '%-22s %10s %10s %6s %10s %10s %10s %10s\n' LOAD HEALTHY/S SLOW/S RATIO HEALTHY_P99 SLOW_P99 CPU/OP SLOW_CPU/OP
for load in "${list[@]}"; do
  set -- $load
  s=$(run "$@")
  python3 - "$1 $2B c$3 P$4" "${healthy[$load]}" "$s" "${JSON:-}" <<'PY'
import json, sys
name, h, s, js = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()], sys.argv[4]
if js:
    print(json.dumps({"load": name, "healthy_rps": h[0], "slow_rps": s[0], "ratio": s[0] / h[0],
                      "healthy_p99_ms": h[1], "slow_p99_ms": s[1], "cpu_ms_per_op": h[2], "slow_cpu_ms_per_op": s[2]}))
else:
    print(f"{name:<22} {h[0]:10.0f} {s[0]:10.0f} {s[0]/h[0]:5.2f}x {h[1]:8.2f}ms {s[1]:8.2f}ms {h[2]:8.3f}ms {s[2]:8.3f}ms")
PY
done
