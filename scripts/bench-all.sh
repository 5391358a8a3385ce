#!/usr/bin/env bash
# scripts/bench-all.sh - one full benchmark run: every `lynxfs bench` suite on every
# target it applies to, one after the other, on this machine (scripts/bench-page.sh runs
# this, then writes docs/BENCHMARKS.md from the reports).
#
# Usage: scripts/bench-all.sh [OUT]        (default OUT: a new directory,
#                                          mktemp -d /tmp/lynxfs-bench-all.XXXXXX: root
#                                          writes there, so never a name in /tmp that
#                                          another user could have made first)
#   LYNXFS   the lynxfs binary, lynxfs-bench beside it [target/release/lynxfs, built if missing]
#   ROUNDS   rounds of every suite that takes them [3]
#   SUITES   the suites to run [all, in the order below]
#
# Writes OUT/<suite>-<time>.{json,png} (lynxfs bench --out; each report records its
# command, the commit of this tree, with "-dirty" if tracked files differ from it, and
# the machine with its load), OUT/tables.txt (every table as printed, each under the
# command that produced it), and OUT/skipped.txt (a line per suite that failed, with
# how long it ran) and OUT/times.txt (each suite's wall time). Needs root, /dev/fuse,
# mkfs.ext4 and, for apps, Debian's linux-source (else a generated tree is used).
# The FUSE issue's latency comparison runs client and daemon on one CPU (taskset -c 0):
# waking a process on the other CPU costs about 80 us in these VMs.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$(mktemp -d /tmp/lynxfs-bench-all.XXXXXX)}"
ROUNDS="${ROUNDS:-3}"
SUITES="${SUITES:-syscalls fuse data mdtest smallfiles recovery apps personalities ablation statall rename filetest hybrid hybrid-fsync start}"
LYNXFS="${LYNXFS:-$ROOT/target/release/lynxfs}"
# `lynxfs bench` runs the lynxfs-bench program beside it.
if [ ! -x "$LYNXFS" ] || [ ! -x "$(dirname "$LYNXFS")/lynxfs-bench" ]; then
    (cd "$ROOT" && cargo build --release --locked -q -p lynxfs-cli -p lynxfs-bench -p lynxfs-preload)
fi
# The commit the reports record (the binaries are assumed built from this tree).
if [ -z "${LYNXFS_BENCH_COMMIT:-}" ] && git -C "$ROOT" rev-parse -q HEAD >/dev/null 2>&1; then
    LYNXFS_BENCH_COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
    if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ]; then
        LYNXFS_BENCH_COMMIT="$LYNXFS_BENCH_COMMIT-dirty"
    fi
    export LYNXFS_BENCH_COMMIT
fi
mkdir -p "$OUT"
TABLES="$OUT/tables.txt"

run() {     # run [PREFIX...] -- lynxfs bench ARGS...   (the suite in $suite)
    local prefix=()
    while [ "$1" != "--" ]; do prefix+=("$1"); shift; done
    shift
    local cmd=("${prefix[@]}" "$LYNXFS" bench "$@" --out "$OUT")
    {
        echo
        echo "\$ ${cmd[*]}"
    } | tee -a "$TABLES"
    local start=$SECONDS
    # The report records the wrapper too (taskset), so its command can be rerun as is.
    if ! LYNXFS_BENCH_LAUNCHER="${prefix[*]}" "${cmd[@]}" 2>&1 | tee -a "$TABLES"; then
        echo "bench-all.sh: FAILED: ${cmd[*]}" | tee -a "$TABLES"
        echo "$suite: failed after $((SECONDS - start)) s (tables.txt in the run's directory has its output)" >>"$OUT/skipped.txt"
        FAILED=1
    fi
    echo "$suite $((SECONDS - start)) s" >>"$OUT/times.txt"
}
FAILED=0

KERNEL=(--target tmpfs --target ext4)
for suite in $SUITES; do
    case "$suite" in
        syscalls) run -- syscalls --target lib "${KERNEL[@]}" --target fuse --target fuse-nocache \
                      --target fuse-null --rounds "$ROUNDS" ;;
        fuse) run taskset -c 0 -- syscalls --files 2000 --target fuse --target fuse-null \
                  --target fuse-nocache --target tmpfs --rounds "$ROUNDS" ;;
        data) run -- data --target lib "${KERNEL[@]}" --target fuse --target fuse-null \
                  --rounds "$ROUNDS" ;;
        mdtest) run -- mdtest --target lib "${KERNEL[@]}" --target fuse --target fuse-null \
                    --max-threads 8 --rounds "$ROUNDS" ;;
        smallfiles) run -- smallfiles --target lib "${KERNEL[@]}" --target fuse \
                        --target fuse-null --rounds "$ROUNDS" ;;
        recovery) run -- recovery --files 1000000 ;;
        apps) run -- apps --target preload --target lib "${KERNEL[@]}" --target fuse --target fuse-null ;;
        personalities) run -- personalities --target preload --target lib "${KERNEL[@]}" --target fuse \
                           --target fuse-null --max-threads 4 --rounds "$ROUNDS" ;;
        ablation) run -- ablation --files 1000 --max-threads 2 ;;
        statall) run -- statall --target lib --target preload --target tmpfs --rounds "$ROUNDS" ;;
        rename) run -- rename --target lib-areas --target lib-noevolution --target lib-noareas \
                    --target tmpfs --rounds "$ROUNDS" ;;
        filetest) run -- filetest --target lib-areas --target lib-noareas --target tmpfs \
                      --rounds "$ROUNDS" ;;
        hybrid) run -- hybrid --target hybrid-preload --target hybrid --target ext4-disk \
                    --target hybrid-fuse --target lib-1g --rounds "$ROUNDS" ;;
        hybrid-fsync) run -- hybrid-fsync --target hybrid-preload --target hybrid --target ext4-disk --target hybrid-fuse --rounds "$ROUNDS" ;;
        start) run -- start --rounds "$ROUNDS" ;;
        *) echo "bench-all.sh: unknown suite $suite" >&2; exit 2 ;;
    esac
done
echo "bench-all.sh: tables in $TABLES, JSON and figures in $OUT"
exit "$FAILED"
