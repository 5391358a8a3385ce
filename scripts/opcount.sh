#!/bin/sh
# Instructions per operation through the library, counted by callgrind inside the
# measured loop only (crates/lynxfs/examples/opcount.rs). Repeatable where timings
# are noisy; used to check that a refactor does not slow the hot paths.
# Usage: scripts/opcount.sh [N]   (default 2000 operations of each kind)
# OPCOUNT_DEPTH=16 puts the files 16 directories deep; LYNXFS_AREAS=1 turns the
# full-path areas on.
set -eu
n=${1:-2000}
cd "$(dirname "$0")/.."
cargo build --release --locked -p lynxfs --example opcount >&2
bin=target/release/examples/opcount
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for op in create mkdir stat unlink rename pread; do
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*opcount*measured*' \
        --callgrind-out-file="$out/$op" "$bin" "$op" "$n" 2>"$out/$op.log"
    ir=$(sed -n 's/^summary: //p;s/^totals: //p' "$out/$op" | head -1)
    echo "$op $(( ir / n )) instructions per operation ($n operations)"
done
