#!/bin/sh
# Process start under `lynxfs run`: a shell loop of N `stat` processes on a pool file,
# run by each `lynxfs` binary given (old and new builds side by side, interleaved), and
# the same loop on /tmp without the preload; prints ms per process for each round.
# Usage: scripts/runcost.sh [-n N] [-r ROUNDS] LYNXFS... (LYNXFS_PRELOAD_LIB names the
# preload library; a 1 GiB pool is made in /dev/shm and removed at the end)
set -eu
n=100 rounds=3
while getopts n:r: o; do
    case $o in
    n) n=$OPTARG ;;
    r) rounds=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-n N] [-r ROUNDS] LYNXFS..." >&2; exit 2; }
pool=$(mktemp -u /dev/shm/runcost-XXXXXX.pool)
at=$(mktemp -d)
trap 'rm -rf "$pool" "$at"' EXIT
"$1" mkfs --size 1G "$pool" >/dev/null
"$1" run --pool "$pool" --at "$at" -- sh -c "echo x > '$at/x'"
ms() { echo "($2 - $1) * 1000 / $n" | bc -l | cut -c1-6; }
for r in $(seq "$rounds"); do
    for b in "$@"; do
        s=$(date +%s.%N)
        "$b" run --pool "$pool" --at "$at" -- sh -c "for i in \$(seq $n); do stat '$at/x' >/dev/null; done"
        echo "round $r $b: $(ms "$s" "$(date +%s.%N)") ms per process"
    done
    s=$(date +%s.%N)
    sh -c "for i in \$(seq $n); do stat /tmp >/dev/null; done"
    echo "round $r plain: $(ms "$s" "$(date +%s.%N)") ms per process"
done
