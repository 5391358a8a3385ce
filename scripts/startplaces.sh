#!/bin/bash
# Process start in each placement, CPU time (issue 44; docs/DESIGN-NOTES.md, "Process
# start in every placement"):
#
#   scripts/startplaces.sh [-n N] [-r ROUNDS] LYNXFS LIB [LIB...]
#
# A bash loop of N (default 50) processes, per placement: `noattach` (/bin/true, the
# shell never touches the pool), `attached` (/bin/true after the shell read a pool
# file), `cwd` (/bin/true with the shell's working directory in the pool), `bigprog`
# (a 1 MiB program stored in the pool: /bin/true padded). Prints the CPU ms per
# process of the whole tree (perf stat's task-clock over N), plain (the same files on
# /dev/shm, no library) then each LIB, interleaved in each round: CPU time is what a
# loaded machine distorts least. The pool (1 GiB in /dev/shm) is held by a
# `LYNXFS run ... sleep`, as a script under `lynxfs run` finds it. Needs perf.
set -euo pipefail
N=50 R=3
while getopts n:r: o; do
    case $o in n) N=$OPTARG ;; r) R=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || { echo "usage: $0 [-n N] [-r ROUNDS] LYNXFS LIB [LIB...]" >&2; exit 2; }
L=$1; shift
libs=(); for l in "$@"; do libs+=("$(realpath "$l")"); done
pool=$(mktemp -u /dev/shm/startplaces-XXXXXX.pool)
at=$(mktemp -d) plain=$(mktemp -d /dev/shm/startplaces-XXXXXX)
hold=
trap '[ -n "$hold" ] && kill $hold 2>/dev/null; rm -rf "$pool" "$at" "$plain"' EXIT
"$L" mkfs --size 1G "$pool" >/dev/null
big() { { cat /bin/true; head -c 1048576 /dev/zero; } | head -c 1048576; }
mkdir "$plain/d" && echo x > "$plain/x" && big > "$plain/big" && chmod +x "$plain/big"
export LYNXFS_PRELOAD_LIB=${libs[0]}
"$L" run --pool "$pool" --at "$at" -- sh -c "echo x > $at/x; mkdir $at/d; cat $plain/big > $at/big; chmod +x $at/big"
"$L" run --pool "$pool" --at "$at" -- sleep 100000 &
hold=$!
sleep 1
cpu() { perf stat -x, -e task-clock "$@" 2>&1 >/dev/null | awk -F, -v n="$N" '/task-clock/ {printf "%.2f", $1/n}'; }
for r in $(seq "$R"); do
    for c in noattach attached cwd bigprog; do
        case $c in
        noattach) s=":" p=/bin/true ps=":" pp=/bin/true ;;
        attached) s=": < $at/x" p=/bin/true ps=": < $plain/x" pp=/bin/true ;;
        cwd) s="cd $at/d" p=/bin/true ps="cd $plain/d" pp=/bin/true ;;
        bigprog) s=": < $at/x" p=$at/big ps=": < $plain/x" pp=$plain/big ;;
        esac
        line="round $r $c: plain $(cpu bash -c "$ps; for ((i=0;i<$N;i++)); do $pp; done")"
        for i in "${!libs[@]}"; do
            line+="  lib$((i + 1)) $(cpu env LD_PRELOAD="${libs[$i]}" LYNXFS_POOL="$pool" LYNXFS_AT="$at" \
                bash -c "$s; for ((i=0;i<$N;i++)); do $p; done")"
        done
        echo "$line ms"
    done
done
