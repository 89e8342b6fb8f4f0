#!/usr/bin/env bash
# Rebuild speed next to the disk's: the sequential write bandwidth of the
# directory's disk (dd, direct I/O) and a rebuild of one Pebble device of
# an array of N values of 4 KiB (array's TestMeasureRebuildPebble), in the
# same run, and their ratio. Usage (from the repository root):
#
#   bench/rebuild.sh [N] [MECHANISM] [DIR]
#
# N defaults to 50000, MECHANISM to replication, DIR to a temporary
# directory (removed afterwards). WORKERS sets the rebuild's workers.
set -euo pipefail
n=${1:-50000}
rm_=${2:-replication}
dir=${3:-$(mktemp -d)}
cleanup() { rm -rf "$dir/dd.bin" "$dir/devs"; }
trap cleanup EXIT
mkdir -p "$dir"

# Bytes per second from dd's summary line ("..., 1.1 s, 488 MB/s").
disk=$(dd if=/dev/zero of="$dir/dd.bin" bs=1M count=512 oflag=direct 2>&1 | tail -1 |
	awk -F', ' '{split($NF, a, " "); m = 1; if (a[2] ~ /^GB/) m = 1e9; else if (a[2] ~ /^MB/) m = 1e6; else if (a[2] ~ /^kB/) m = 1e3; print a[1] * m}')
rm -f "$dir/dd.bin"

line=$(KVARRAY_REBUILD_PEBBLE_N=$n KVARRAY_REBUILD_RM=$rm_ KVARRAY_REBUILD_DIR="$dir/devs" KVARRAY_REBUILD_WORKERS=${WORKERS:-32} \
	go test -count=1 -run 'TestMeasureRebuildPebble$' -v -timeout 30m ./array/ | grep ' on pebble' || true)
if [ -z "$line" ]; then
	echo "rebuild measurement failed" >&2
	exit 1
fi
echo "${line#*: }"
rate=$(echo "$line" | sed -E 's/.* ([0-9.]+) MB\/s;.*/\1/')
awk -v r="$rate" -v d="$disk" 'BEGIN { printf "disk sequential write %.0f MB/s; rebuild %.1f MB/s = %.1f%% of it\n", d / 1e6, r, 100 * r * 1e6 / d }'
