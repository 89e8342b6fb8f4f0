#!/usr/bin/env bash
# Issue 37's performance rows, kvarray serve against durable Redis in one
# run: the redis-benchmark rows for lists and PUBLISH to 10 subscribers at
# 16 connections and at 50 x pipeline 16, beside SET of the same size (the
# bar: each at least SET's ratio), through bench/serve.sh; then, on a
# fresh pair, bench/messaging on each server: the RPUSH -> blocked BLPOP
# latency and the resident memory with 1,000 subscribers at 10,000
# messages/s, one of them stalled.
#
# Usage: bash bench/messaging.sh       (from the repository root; ~12 min)
#        KVARRAY_BIN=/path/kvarray bash bench/messaging.sh
# Needs redis-server and redis-benchmark.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Pops after the pushes that fill mylist (fewer pops than pushes, so none
# finds it empty); LRANGE_100/600 fill their own list first.
LOADS="set 16 16 1 20000; set 16 50 16 50000; lpush 16 16 1 20000; lpush 16 50 16 50000; rpush 16 16 1 20000; rpush 16 50 16 50000; lpop 16 16 1 15000; lpop 16 50 16 40000; rpop 16 16 1 15000; rpop 16 50 16 40000; lrange_100 16 16 1 10000; lrange_100 16 50 16 20000; lrange_600 16 16 1 3000; lrange_600 16 50 16 5000; publish10 16 16 1 50000; publish10 16 50 16 100000" \
  bash "$root/bench/serve.sh"

work=$(mktemp -d)
kpid=""
rpid=""
trap 'kill $kpid $rpid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
source "$root/bench/lib.sh"
bin=$(kvarray_bin "$work")
(cd "$root" && go build -o "$work/messaging" ./bench/messaging)
start_pair "$work" "$bin"
echo
"$work/messaging" -addr 127.0.0.1:$kport -pid $kpid | sed 's/^127.0.0.1:[0-9]*/kvarray/'
"$work/messaging" -addr 127.0.0.1:$rport -pid $rpid | sed 's/^127.0.0.1:[0-9]*/redis/'
