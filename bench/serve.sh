#!/usr/bin/env bash
# The serve write path against durable Redis (issue 10): the issue's
# redis-benchmark loads, run against `kvarray serve` on its default
# embedded array (6 Pebble devices, hybrid) and against `redis-server
# --appendonly yes --appendfsync always` (as durable per write), in the
# same run, alternating (kvarray, redis, kvarray, redis). For each load it
# prints both rates, the ratio (median of the two rounds), the CPU time
# each server used per operation (utime+stime from /proc) and, for SETs,
# the bytes each server had written to disk per SET (write_bytes from
# /proc/PID/io: what reached the block layer, so WAL, tables and
# compactions for kvarray, the AOF for Redis; compactions still running
# when a load ends are counted in the next one).
#
# Usage: bash bench/serve.sh            (from the repository root)
#        KVARRAY_BIN=/path/kvarray bash bench/serve.sh   (a prebuilt binary,
#        e.g. an older commit's, to compare before and after)
#        LOADS="set 4096 16 1 20000" bash bench/serve.sh (selected loads:
#        test size clients pipeline requests, ';'-separated; tests are
#        redis-benchmark's -t names, and zscore, zrange100 (ZRANGE 0 99
#        WITHSCORES) and zrangebyscore on the set zadd fills; xadd,
#        xaddtrim (MAXLEN ~ 10000) and xrange100 (XRANGE - + COUNT 100 on
#        the stream xadd fills), e.g. LOADS="xadd 16 16 1 20000; xaddtrim
#        16 50 16 50000; xrange100 16 16 1 5000"); evalsha_getset, EVALSHA
#        of a script doing one GET and one SET, and evalsha_release, EVALSHA
#        of redis-py's Lock release script, on random keys)
#        hget, hgetall100 (HGETALL of a 100-field hash) and sismember
#        read what hset and sadd fill; publish10, PUBLISH to a channel
#        10 redis-cli subscribers listen on. The list rows (issue 37) are
#        LOADS=... with redis-benchmark's lpush, rpush, lpop, rpop,
#        lrange_100 and lrange_600 (which read the list lpush fills).
# Needs redis-server and redis-benchmark. Takes about 8 minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
kpid=""
rpid=""
subpids=""
trap 'kill $kpid $rpid $subpids 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
source "$root/bench/lib.sh"
bin=$(kvarray_bin "$work")
start_pair "$work" "$bin"

# cpu PID: utime+stime in clock ticks; wbytes PID: bytes written to disk.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
wbytes() { awk '/^write_bytes/ {print $2}' "/proc/$1/io"; }
ticks=$(getconf CLK_TCK)

# run PORT PID test size clients pipeline n: prints "rps cpu_ms_per_op disk_bytes_per_op"
run() {
  local port=$1 pid=$2 t=$3 d=$4 c=$5 p=$6 n=$7
  sync
  local c0 w0 rps c1 w1
  c0=$(cpu "$pid")
  w0=$(wbytes "$pid")
  # Loads redis-benchmark has no -t test for: a command of their own,
  # on the sorted set its zadd test fills (myzset, element:N members).
  local what=(-t "$t")
  case $t in
  hget) what=(HGET myhash element:__rand_int__) ;;
  hgetall100) what=(HGETALL hash100) ;;
  sismember) what=(SISMEMBER myset element:__rand_int__) ;;
  zscore) what=(ZSCORE myzset element:__rand_int__) ;;
  zrange100) what=(ZRANGE myzset 0 99 WITHSCORES) ;;
  zrangebyscore) what=(ZRANGEBYSCORE myzset 0 50000 LIMIT 0 10) ;;
  evalsha_getset) what=(EVALSHA "$sha_getset" 1 key:__rand_int__ v) ;;
  evalsha_release) what=(EVALSHA "$sha_release" 1 key:__rand_int__ v) ;;
  xadd) what=(XADD mystream '*' f __rand_int__) ;;
  xaddtrim) what=(XADD mystream MAXLEN '~' 10000 '*' f __rand_int__) ;;
  xrange100) what=(XRANGE mystream - + COUNT 100) ;;
  publish10) what=(PUBLISH publish10 __rand_int__) ;;
  esac
  rps=$(redis-benchmark -p "$port" -d "$d" -c "$c" -P "$p" -n "$n" -r 100000 --csv "${what[@]}" 2>/dev/null |
    grep -v '^"test"' | tail -n 1 | cut -d, -f2 | tr -d '"')
  c1=$(cpu "$pid")
  w1=$(wbytes "$pid")
  python3 -c "print($rps, ($c1-$c0)*1000/$ticks/$n, ($w1-$w0)/$n)"
}

# The scripts the evalsha loads call, loaded into both servers (the same
# SHA1 on both): one GET and one SET, and redis-py's Lock release.
getset="redis.call('get', KEYS[1]); return redis.call('set', KEYS[1], ARGV[1])"
release="local token = redis.call('get', KEYS[1]) if not token or token ~= ARGV[1] then return 0 end redis.call('del', KEYS[1]) return 1"
# hgetall100 reads hash100, of 100 fields, made here on both.
fields=()
for i in $(seq 1 100); do fields+=("field:$i" "value:$i"); done
for port in $kport $rport; do
  sha_getset=$(redis-cli -p "$port" SCRIPT LOAD "$getset")
  sha_release=$(redis-cli -p "$port" SCRIPT LOAD "$release")
  redis-cli -p "$port" HSET hash100 "${fields[@]}" >/dev/null
  # publish10 publishes to the 10 subscribers of channel publish10.
  for _ in $(seq 1 10); do
    redis-cli -p "$port" SUBSCRIBE publish10 >/dev/null 2>&1 &
    subpids="$subpids $!"
  done
done

# The collection rows (issue 34) each at 16 connections and at 50 x
# pipeline 16; the reads after the writes that fill what they read
# (hset: myhash, sadd: myset, zadd: myzset).
loads=${LOADS:-"set 4096 16 1 20000; set 4096 50 16 50000; get 4096 16 1 50000; set 65536 16 1 3000; hset 16 16 1 5000; hset 16 50 16 5000; hget 16 16 1 50000; hget 16 50 16 100000; hgetall100 16 16 1 10000; hgetall100 16 50 16 20000; sadd 16 16 1 5000; sadd 16 50 16 5000; sismember 16 16 1 50000; sismember 16 50 16 100000; zadd 16 16 1 5000; zadd 16 50 16 5000; zscore 16 16 1 50000; zscore 16 50 16 100000; zrange100 16 16 1 5000; zrange100 16 50 16 10000; zrangebyscore 16 16 1 20000; zrangebyscore 16 50 16 50000; set 1 16 1 20000; set 1 50 16 50000; evalsha_getset 1 16 1 20000; evalsha_release 1 16 1 20000"}
printf '%-22s %10s %10s %6s %10s %10s %11s %11s\n' LOAD KVARRAY/S REDIS/S RATIO KV_CPU/OP RD_CPU/OP KV_DISK/OP RD_DISK/OP
IFS=';' read -ra list <<<"$loads"
for load in "${list[@]}"; do
  set -- $load
  k1=$(run $kport $kpid "$@")
  r1=$(run $rport $rpid "$@")
  k2=$(run $kport $kpid "$@")
  r2=$(run $rport $rpid "$@")
  python3 - "$1 $2B c$3 P$4" "$k1" "$r1" "$k2" "$r2" <<'PY'
import sys, statistics as st
name = sys.argv[1]
k1, r1, k2, r2 = ([float(x) for x in a.split()] for a in sys.argv[2:6])
ratio = st.median([k1[0] / r1[0], k2[0] / r2[0]])
mean = lambda i, a, b: (a[i] + b[i]) / 2
print(f"{name:<22} {mean(0,k1,k2):10.0f} {mean(0,r1,r2):10.0f} {ratio:5.2f}x "
      f"{mean(1,k1,k2):8.3f}ms {mean(1,r1,r2):8.3f}ms {mean(2,k1,k2)/1e3:9.1f}KB {mean(2,r1,r2)/1e3:9.1f}KB")
PY
done
