#!/bin/sh
# Protection keys on and off, side by side (docs/DESIGN-NOTES.md, "Protection keys"):
# scripts/keyscost.c under `lynxfs run` with LYNXFS_PROTECT unset (keys on where the
# CPU has them) and LYNXFS_PROTECT=0 (keys and seal off), and the same program on a
# tmpfs directory without the preload (for the mmap loop), interleaved, pinned to CPU 0.
# Prints each operation's median ns per call over the rounds and the on/off ratio.
# Usage: scripts/keyscost.sh [-n N] [-r ROUNDS] LYNXFS
set -eu
n=20000 rounds=5
while getopts n:r: o; do
    case $o in
    n) n=$OPTARG ;;
    r) rounds=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: $0 [-n N] [-r ROUNDS] LYNXFS" >&2; exit 2; }
lynxfs=$1
work=$(mktemp -d)
trap 'rm -rf "$work" /dev/shm/keyscost-$$.pool /dev/shm/keyscost-$$' EXIT
cc -O2 -o "$work/keyscost" "$(dirname "$0")/keyscost.c"
pool=/dev/shm/keyscost-$$.pool
"$lynxfs" mkfs --size 1G "$pool" >/dev/null
mkdir "$work/at" /dev/shm/keyscost-$$
for r in $(seq "$rounds"); do
    for mode in on off plain; do
        case $mode in
        on) taskset -c 0 env -u LYNXFS_PROTECT "$lynxfs" run --pool "$pool" --at "$work/at" -- "$work/keyscost" "$work/at" "$n" ;;
        off) taskset -c 0 env LYNXFS_PROTECT=0 "$lynxfs" run --pool "$pool" --at "$work/at" -- "$work/keyscost" "$work/at" "$n" ;;
        plain) taskset -c 0 "$work/keyscost" /dev/shm/keyscost-$$ "$n"; rm -f /dev/shm/keyscost-$$/* ;;
        esac | sed "s/^/$mode /"
    done
done | awk '
    { v[$1" "$2] = v[$1" "$2] " " $3; if (!($2 in seen)) { seen[$2] = 1; ops[++k] = $2 } }
    function median(s,   a, m, i, j, t) {
        m = split(s, a, " ")
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    END {
        printf "%-12s %10s %10s %10s %8s %10s\n", "op (ns)", "keys on", "keys off", "tmpfs", "on/off", "on/tmpfs"
        for (i = 1; i <= k; i++) {
            o = ops[i]; a = median(v["on " o]); b = median(v["off " o]); c = median(v["plain " o])
            printf "%-12s %10.1f %10.1f %10.1f %8.3f %10.3f\n", o, a, b, c, a / b, a / c
        }
    }'
