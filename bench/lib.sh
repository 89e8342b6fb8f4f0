# Shared by the bench scripts (source it): kvarray_bin WORK prints the
# kvarray binary to run: $KVARRAY_BIN when set (a prebuilt binary, an older
# commit's), else one built from this tree into WORK.
kvarray_bin() {
  if [ -n "${KVARRAY_BIN:-}" ]; then
    echo "$KVARRAY_BIN"
    return
  fi
  (cd "$(dirname "${BASH_SOURCE[0]}")/.." && go build -o "$1/kvarray" ./cmd/kvarray) >&2
  echo "$1/kvarray"
}

# start_pair WORK BIN starts `kvarray serve` on its default embedded array
# (in WORK/kv) and a redis-server as durable per write (--appendfsync
# always, in WORK/redis) on free ports, sets kport, rport, kpid and rpid,
# and waits until both answer PING.
start_pair() {
  local work=$1 bin=$2
  kport=$((20000 + RANDOM % 20000))
  rport=$((kport + 1))
  mkdir -p "$work/kv" "$work/redis"
  (cd "$work/kv" && exec "$bin" serve --listen 127.0.0.1:$kport >serve.log 2>&1) &
  kpid=$!
  redis-server --port $rport --bind 127.0.0.1 --dir "$work/redis" --appendonly yes --appendfsync always \
    --save '' >"$work/redis/log" 2>&1 &
  rpid=$!
  for p in $kport $rport; do
    for _ in $(seq 1 150); do
      redis-cli -p $p ping 2>/dev/null | grep -q PONG && break
      sleep 0.2
    done
  done
}
