#!/usr/bin/env bash
# Runs Redis 7's own Tcl tests for strings, counters, bitmaps, HyperLogLog,
# geo, SORT, hashes, sets, lists, sorted sets, streams, the keyspace,
# expiry, transactions, SCAN, the protocol, INFO, pub/sub (sharded too),
# scripting, functions, client-side caching (tracking), introspection
# (CLIENT, CONFIG, MONITOR, COMMAND) and the latency monitor against
# `kvarray serve` (a fresh array per
# unit), with no shim. tcl/skip.txt lists the tests that
# need another data type or a config kvarray does not have (they would
# raise an exception and stop their unit); tcl/alone.txt the tests that
# need a fresh server because a skipped test would have cleaned up before
# them (they run on their own); tcl/expected-failures.txt lists
# the failures docs/compatibility.md explains. Any other failure fails this
# script. Usage, from the repository root:
#   server/clienttest/redis-tcl.sh REDIS_SOURCE_DIR
# where REDIS_SOURCE_DIR is Redis's source tree (apt-get source redis);
# UNITS="unit/x ..." runs only those, TCL_JOBS=n n at a time (2).
set -uo pipefail
src=${1:?usage: $0 REDIS_SOURCE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
# On any exit, the unit runs and every server this script started (their
# binary is under $work) go.
trap 'kill $(jobs -p) 2>/dev/null; pkill -f "^$work/kvarray " 2>/dev/null; wait; rm -rf "$work"' EXIT
go build -C "$root" -o "$work/kvarray" ./cmd/kvarray || exit 1
# runtest looks for the binaries under src/ even against an external server.
mkdir -p "$src/src"
for b in redis-server redis-cli redis-benchmark; do
	[ -e "$src/src/$b" ] || ln -s "$(command -v $b)" "$src/src/$b"
done
# run UNIT [RUNTEST ARGS...]: a fresh `kvarray serve`, then the unit. It
# prints its report and appends each unexpected failure, one a line, to
# $failures. Units run $TCL_JOBS at once (2 by default: a unit mostly
# waits on its server's syncs and its own round trips, and Redis's suite
# runs its units side by side too); each report prints whole.
failures=$work/failures
: >"$failures"
run() {
	local unit=$1
	shift
	local d port base out passed pid failed=()
	# A random port can be taken: a server that does not answer is shown
	# and replaced by one on another port.
	local up=
	for _ in 1 2 3; do
		d=$(mktemp -d -p "$work")
		port=$((21000 + RANDOM % 20000))
		[ -z "${onmem[$unit]:-}" ] || printf '%s\n' 'devices: [mem:d0, mem:d1, mem:d2, mem:d3, mem:d4, mem:d5]' \
			'mode: hybrid' 'default: replication' 'replication: {copies: 3}' 'splitting: {k: 4, r: 2}' 'packing: {k: 4, r: 2}' \
			'thresholds: [{max: 8KiB, rm: replication}, {max: 32KiB, rm: packing}, {rm: splitting}]' >"$d/kvarray.yaml"
		(cd "$d" && exec "$work/kvarray" serve --listen 127.0.0.1:$port >serve.log 2>&1) &
		pid=$!
		for _ in $(seq 1 150); do
			redis-cli -p $port ping 2>/dev/null | grep -q PONG && { up=1; break; }
			kill -0 $pid 2>/dev/null || break
			sleep 0.2
		done
		[ -n "$up" ] && break
		echo "kvarray serve on port $port did not answer PING; its log:"
		tail -n 20 "$d/serve.log"
		kill $pid 2>/dev/null; wait $pid 2>/dev/null
	done
	local file=$unit
	if [ -n "${external[$unit]:-}" ]; then
		sed '0,/external:skip/s/ external:skip//' "$src/tests/$unit.tcl" >"$d/unit.tcl"
		file=$(realpath -m --relative-to="$src/tests" "$d/unit")
	fi
	# The test server's own ports, away from the server's and from another
	# run's (runtest's default base is fixed); it also needs each port
	# plus 10000 free, so below 55535. They lie in the ephemeral range, so
	# one may be some connection's local port: the unit then stops before
	# its first test, and runs again on another base.
	for _ in 1 2 3; do
		base=$((42000 + RANDOM % 10000))
		out=$(cd "$src" && ./runtest --host 127.0.0.1 --port $port --baseport $base --single "$file" \
			--tags -needs:repl --tags -needs:debug --tags -needs:config-maxmemory "$@" 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
		grep -q "^couldn't open socket: address already in use" <<<"$out" || break
	done
	kill $pid; wait $pid 2>/dev/null
	passed=$(grep -c '^\[ok\]' <<<"$out")
	echo "$unit${label:+ ($label)}: $passed passed, $(grep -c '^\[err\]' <<<"$out") failed, $(grep -c '^\[skip\]' <<<"$out") skipped"
	if [ "$passed" = 0 ]; then
		echo "$out" | tail -n 15
		failed+=("$unit: no test ran")
	fi
	if grep -q '^\[exception\]' <<<"$out"; then
		echo "$out" | grep -A20 '^\[exception\]'
		failed+=("$unit: exception")
	fi
	while IFS= read -r name; do
		grep -qxF "$name" "$here/tcl/expected-failures.txt" || { echo "$out" | grep -A3 -F "[err]: $name in"; failed+=("$unit: $name"); }
	done < <(grep '^\[err\]' <<<"$out" | sed 's/^\[err\]: //; s/ in tests\/.*//')
	[ ${#failed[@]} -eq 0 ] || printf '%s\n' "${failed[@]}" >>"$failures"
}
jobs=${TCL_JOBS:-2}
n=0
# start UNIT [RUNTEST ARGS...]: run in the background, its report to a
# file printed when it ends, once fewer than $jobs runs are going.
start() {
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
	n=$((n + 1))
	local report=$work/report.$n
	{ run "$@" >"$report.tmp" 2>&1; mv "$report.tmp" "$report"; cat "$report"; } &
}
# tcl/slow.txt: tests that pass but take over 20 s each on a shared
# machine (10^4 round trips); TCL_SLOW=1 runs them too.
slow=()
if [ -z "${TCL_SLOW:-}" ]; then
	while IFS= read -r name; do
		[ -n "$name" ] && slow+=(--skiptest "$name")
	done <"$here/tcl/slow.txt"
fi
# Per-unit runtest options. latency-monitor: --no-latency leaves out the
# checks of how long its (skipped) DEBUG SLEEPs took, which a command
# slowed past the unit's 200 ms threshold on a loaded machine would fail.
declare -A extra=([unit/latency-monitor]=--no-latency)
# Units served by mem devices instead of Pebble, whose syncs their stress
# and fuzz tests (10^4 to 10^5 round trips of writes) do not test: on
# Pebble list-2 takes over 2 minutes, list-3's stress tests minutes more,
# zset's two ZDIFF fuzz tests about 2 minutes each; on mem the three
# units take about 25, 60 and 55 s, every test run.
declare -A onmem=([unit/type/list-2]=1 [unit/type/list-3]=1 [unit/type/zset]=1)
# Units whose first server block is tagged external:skip though its tests
# need no server of their own: they run from a copy without that tag (the
# later blocks, replication, stay skipped).
declare -A external=([unit/pubsubshard]=1)
# UNITS, if set, runs only those units. The longest (a minute or more
# each) start first, so that the two lines end together.
for unit in ${UNITS:-unit/scan unit/sort unit/type/set unit/type/list-3 unit/type/zset unit/type/string unit/type/incr unit/type/hash unit/type/list unit/type/list-2 unit/type/stream unit/type/stream-cgroups unit/keyspace unit/expire unit/multi unit/protocol unit/info-command unit/pubsub unit/pubsubshard unit/scripting unit/functions unit/bitops unit/bitfield unit/hyperloglog unit/slowlog unit/dump unit/geo unit/tracking unit/introspection unit/introspection-2 unit/latency-monitor}; do
	label=${extra[$unit]:-} start $unit --skipfile "$here/tcl/skip.txt" "${slow[@]}" ${extra[$unit]:-}
done
# tcl/alone.txt: "unit|test|test..." for tests that pass only on the
# state a skipped test would have left (skip.txt lists them too): they run
# together, in order, on a fresh server.
while IFS='|' read -r -a line; do
	unit=${line[0]}
	[ -z "${UNITS:-}" ] || [[ " $UNITS " == *" $unit "* ]] || continue
	only=()
	for name in "${line[@]:1}"; do only+=(--only "$name"); done
	label="alone: ${line[*]:1}" start "$unit" "${only[@]}"
done <"$here/tcl/alone.txt"
wait
if [ -s "$failures" ]; then
	sed 's/^/unexpected failure: /' "$failures"
	exit 1
fi
echo "redis-tcl: ok"
