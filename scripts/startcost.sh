#!/bin/bash
# Process start under the preload library, against the same program without it
# (docs/DESIGN-NOTES.md, "First touch and process start"):
#
#   scripts/startcost.sh [-n N] [-r ROUNDS] LIB [LIB...]
#
# For each round and each LIB (interleaved, so every library sees the same load), runs
# scripts/spawncost.c (N runs plain and N preloaded, alternating; medians) on
#   true        /bin/true (never touches the pool)
#   stat        stat of a pool file, another process attached (a preloaded sleep
#               holding a pool fd)
#   stat-alone  the same with nobody else attached (N/5 runs: the first attacher
#               builds the runtime state and the last removes it)
# and prints each difference of medians, then the median of the rounds. Each LIB gets
# a pool of its own (1 GiB in /dev/shm: libraries of two runtime versions cannot share
# one) and a runtime directory of its own. Needs cc and a built lynxfs next to LIB.
set -euo pipefail
N=1000 ROUNDS=3
while getopts n:r: o; do
    case $o in n) N=$OPTARG ;; r) ROUNDS=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-n N] [-r ROUNDS] LIB [LIB...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/startcost-XXXXXX)
holders=()
cleanup() {
    for p in "${holders[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.2
    rm -rf "$work" /dev/shm/startcost-"$$"-*
}
trap cleanup EXIT
cc -O2 -o "$work/spawncost" "$here/spawncost.c"
mkdir -p "$work/plain" && echo x > "$work/plain/x"
libs=("$@")
for i in "${!libs[@]}"; do
    lib=$(realpath "${libs[$i]}")
    libs[$i]=$lib
    pool=/dev/shm/startcost-$$-$i.pool rt=/dev/shm/startcost-$$-$i.rt at=$work/at$i
    mkdir -p "$at" "$rt"
    LYNXFS_RUNTIME_DIR=$rt "$(dirname "$lib")/lynxfs" mkfs "$pool" >/dev/null
    LYNXFS_RUNTIME_DIR=$rt LD_PRELOAD=$lib LYNXFS_POOL=$pool LYNXFS_AT=$at \
        sh -c "echo x > $at/x"
done
# One measurement: prints the difference of medians in us.
measure() { # LIBINDEX N PROGRAM ARGS...
    local i=$1 n=$2; shift 2
    LYNXFS_RUNTIME_DIR=/dev/shm/startcost-$$-$i.rt "$work/spawncost" "$n" "${libs[$i]}" \
        /dev/shm/startcost-$$-$i.pool "$work/at$i" "$work/plain" -- "$@" |
        awk '/^plain/ {p=$3} /^preload/ {q=$3} END {printf "%d %d %d\n", p, q, q-p}'
}
hold() { # LIBINDEX: a preloaded sleep holding a pool fd
    local i=$1
    LYNXFS_RUNTIME_DIR=/dev/shm/startcost-$$-$i.rt LD_PRELOAD=${libs[$i]} \
        LYNXFS_POOL=/dev/shm/startcost-$$-$i.pool LYNXFS_AT=$work/at$i \
        setsid sh -c "exec sleep 100000 < $work/at$i/x" &
    holders+=($!)
    sleep 0.5
}
declare -A res
for r in $(seq "$ROUNDS"); do
    for i in "${!libs[@]}"; do
        res[true,$i,$r]=$(measure "$i" "$N" /bin/true)
        res[alone,$i,$r]=$(measure "$i" $((N / 5)) /usr/bin/stat @/x)
    done
done
for i in "${!libs[@]}"; do hold "$i"; done
for r in $(seq "$ROUNDS"); do
    for i in "${!libs[@]}"; do
        res[stat,$i,$r]=$(measure "$i" "$N" /usr/bin/stat @/x)
    done
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for i in "${!libs[@]}"; do
    echo "${libs[$i]}"
    for t in true stat alone; do
        line="  $t:"
        for r in $(seq "$ROUNDS"); do line+="  [${res[$t,$i,$r]}]"; done
        m=$(for r in $(seq "$ROUNDS"); do echo "${res[$t,$i,$r]}" | cut -d' ' -f3; done | median)
        echo "$line  median difference +$m us"
    done
done
