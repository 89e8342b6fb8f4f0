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
