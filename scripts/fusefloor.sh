#!/usr/bin/env bash
# fusefloor.sh: a workload on a fresh `lynxfs mount`, against the FUSE protocol's
# floor (issue 44). Prints, per request type, how many the kernel sent (in all and
# per workload operation), the client's latency (the kernel's fuse_request_send to
# fuse_request_end tracepoints, median and p99) and the daemon's own time (read to
# reply, LYNXFS_FUSE_TIMES), then the floor: the synchronous requests times the round
# trip measured in the same run (an fgetxattr loop, one GETXATTR per call), plus the
# workload's time on tmpfs (the work that is not the file system's requests).
#
# usage: scripts/fusefloor.sh [--name NAME] [--ops N] [--setup CMD] [--pin CPU]
#                             [--removable OP,OP] [--no-tmpfs] [--size SIZE] -- COMMAND
#   COMMAND and CMD run under bash in the directory $M (the mount, or a tmpfs
#   directory for the tmpfs run); --setup runs on a first mount of the same pool (and
#   on tmpfs before the tmpfs run), so the measured mount starts with cold kernel
#   caches. --pin runs the calibration and COMMAND under `taskset -c CPU`.
#   --removable names request types judged not forced: left out of the floor.
#   Markers written to $FUSEFLOOR_MARK (the tracing instance's trace_marker) as
#   "fusefloor start NAME" / "fusefloor end NAME ops=N" split the workload into
#   phases of their own (lynxfs-bench --mark writes them for each row); a phase
#   "ROW on T" is measured against the floor with the phase "ROW on tmpfs" as its
#   tmpfs time (the bench's own tmpfs column), so --no-tmpfs skips the script's own
#   tmpfs run of COMMAND. --size: the pool's (default 2G; mkfs reserves it in /dev/shm).
# Needs root (mount, tracefs). LYNXFS: the lynxfs binary (default: the ci build).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
LYNXFS=${LYNXFS:-${CARGO_TARGET_DIR:-$here/target}/ci/lynxfs}
name=workload ops=1 setup="" pin="" removable="" tmpfs_run=1 size=2G
while [ $# -gt 0 ]; do
    case $1 in
    --name) name=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --setup) setup=$2; shift 2 ;;
    --pin) pin=$2; shift 2 ;;
    --removable) removable=$2; shift 2 ;;
    --no-tmpfs) tmpfs_run=0; shift ;;
    --size) size=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "fusefloor: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "fusefloor: no COMMAND (after --)" >&2; exit 2; }
cmd=$*
[ -x "$LYNXFS" ] || { echo "fusefloor: no lynxfs binary at $LYNXFS (set LYNXFS)" >&2; exit 2; }

work=$(mktemp -d /dev/shm/fusefloor.XXXXXX)
mnt=$(mktemp -d /tmp/fusefloor-mnt.XXXXXX)
trace=/sys/kernel/tracing/instances/fusefloor-$$
cleanup() {
    mountpoint -q "$mnt" && umount "$mnt" 2>/dev/null || true
    [ -d "$trace" ] && { echo 0 >"$trace/tracing_on"; rmdir "$trace"; } 2>/dev/null || true
    mountpoint -q "$work/tmpfs" && umount "$work/tmpfs" 2>/dev/null || true
    rm -rf "$work"
    rmdir "$mnt" 2>/dev/null || true
}
trap cleanup EXIT

client() { if [ -n "$pin" ]; then taskset -c "$pin" "$@"; else "$@"; fi; }
run_in() { (cd "$1" && M=$1 client bash -c "$2"); }
now_ns() { date +%s%N; }

# The round trip: fgetxattr of a name the file lacks, one GETXATTR each (ENODATA).
cat >"$work/rtt.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <time.h>
#include <sys/xattr.h>
static long long ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDONLY); char v[64]; double per[9];
    if (fd < 0) { perror(argv[1]); return 1; }
    for (int r = 0; r < 9; r++) {
        long long t = ns();
        for (int i = 0; i < 1000; i++) fgetxattr(fd, "user.fusefloor", v, sizeof v);
        per[r] = (ns() - t) / 1000.0 / 1000.0;
    }
    qsort(per, 9, sizeof per[0], cmp);
    printf("%.2f %.2f %.2f\n", per[0], per[4], per[8]);
    return 0;
}
EOF
cc -O2 -o "$work/rtt" "$work/rtt.c"

pool=$work/pool
"$LYNXFS" mkfs --size "$size" "$pool" >/dev/null
mount_pool() { env ${1:+LYNXFS_FUSE_TIMES=$1} "$LYNXFS" mount "$pool" "$mnt"; }
# A mount right after an unmount attaches beside the daemon that is detaching.
unmount_pool() { umount "$mnt"; }
calibrate() { touch "$mnt/.fusefloor-rtt"; client "$work/rtt" "$mnt/.fusefloor-rtt"; rm -f "$mnt/.fusefloor-rtt"; }

# Mount 1: setup, then the round trip before.
mount_pool ""
[ -z "$setup" ] || run_in "$mnt" "$setup" >/dev/null
rtt_before=$(calibrate)
unmount_pool

# Mount 2, timed and traced: the workload.
times=$work/times
mount_pool "$times"
# The tracepoints' dev_t is the kernel's: major << 20 | minor.
read -r major minor < <(stat -c '%Hd %Ld' "$mnt")
connection=$(( major << 20 | minor ))
mkdir "$trace"
echo x86-tsc >"$trace/trace_clock"
echo 131072 >"$trace/buffer_size_kb"
for e in fuse_request_send fuse_request_end; do
    echo "connection == $connection" >"$trace/events/fuse/$e/filter"
    echo 1 >"$trace/events/fuse/$e/enable"
done
mark() { echo "fusefloor $*" >"$trace/trace_marker"; }
clock_mark() { echo "fusefloor clock $(now_ns)" >"$trace/trace_marker"; }
clock_mark
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
mark start "$name"
t0=$(now_ns)
FUSEFLOOR_MARK=$trace/trace_marker run_in "$mnt" "$cmd" >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
t1=$(now_ns)
mark end "$name" "ops=$ops"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
clock_mark
echo 0 >"$trace/tracing_on"
cp "$trace/trace" "$work/trace.txt"
overrun=$(grep -h overrun "$trace"/per_cpu/cpu*/stats | awk '{s += $2} END {print s + 0}')
unmount_pool
for _ in $(seq 300); do grep -q '^# end' "$times" 2>/dev/null && break; sleep 0.1; done
grep -q '^# end' "$times" || { echo "fusefloor: the daemon wrote no times in 30 s" >&2; exit 1; }

# Mount 3: the round trip after.
mount_pool ""
rtt_after=$(calibrate)
unmount_pool

# The same on tmpfs.
t2=0 t3=0
if [ "$tmpfs_run" = 1 ]; then
    mkdir "$work/tmpfs" && mount -t tmpfs -o size=8G tmpfs "$work/tmpfs"
    [ -z "$setup" ] || run_in "$work/tmpfs" "$setup" >/dev/null
    t2=$(now_ns)
    run_in "$work/tmpfs" "$cmd" >/dev/null 2>&1
    t3=$(now_ns)
fi

cat "$work/out" | tail -n 40 >&2
python3 - "$work/trace.txt" "$times" <<EOF
import re, sys
name, ops, removable = "$name", $ops, set(filter(None, "$removable".split(",")))
fuse_ms, tmpfs_ms = ($t1 - $t0) / 1e6, ($t3 - $t2) / 1e6
rtt = [float(x) for x in "$rtt_before $rtt_after".split()]
pinned = "$pin"
# Requests the caller does not wait for: not part of a floor.
ASYNC = {"FUSE_RELEASE", "FUSE_RELEASEDIR", "FUSE_FORGET", "FUSE_BATCH_FORGET", "FUSE_INTERRUPT"}

def pct(sorted_vals, p):
    return sorted_vals[min(len(sorted_vals) - 1, int(p * len(sorted_vals)))] if sorted_vals else float("nan")

# The trace: x86-tsc timestamps, converted with the two clock marks.
line_re = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\].*?\s(\d+):\s+(\S+):\s+(.*)$")
events, clocks = [], []
for line in open(sys.argv[1]):
    m = line_re.match(line)
    if not m:
        continue
    ts, ev, rest = int(m.group(4)), m.group(5), m.group(6)
    if ev.startswith("tracing_mark"):
        words = rest.split()
        if words[:2] == ["fusefloor", "clock"]:
            clocks.append((ts, int(words[2])))
        elif words[:1] == ["fusefloor"]:
            events.append((ts, "mark", words[1:]))
    elif ev == "fuse_request_send":
        r = re.search(r"req (\d+) opcode \d+ \((\w+)\)", rest)
        events.append((ts, "send", (int(r.group(1)), r.group(2))))
    elif ev == "fuse_request_end":
        r = re.search(r"req (\d+) len \d+ error (-?\d+)", rest)
        events.append((ts, "end", (int(r.group(1)), int(r.group(2)))))
(c0, n0), (c1, n1) = clocks[0], clocks[-1]
per_ns = (c1 - c0) / (n1 - n0)  # counter ticks per nanosecond

# Phases: the markers' start/end pairs; a request belongs to the phase it was sent in.
phases, open_phases, sent = {}, {}, {}
order = []
for ts, kind, what in sorted(events, key=lambda e: e[0]):
    if kind == "mark":
        if what[0] == "start":
            label = " ".join(what[1:])
            open_phases[label] = ts
            phases.setdefault(label, {"ops": 0, "ns": 0, "lat": {}, "n": {}})
            order.append(label)
        elif what[0] == "end":
            ops_word = [w for w in what[1:] if w.startswith("ops=")]
            label = " ".join(w for w in what[1:] if not w.startswith("ops="))
            p = phases.get(label)
            if p is not None and label in open_phases:
                p["ops"] += int(ops_word[0][4:]) if ops_word else 0
                p["ns"] += (ts - open_phases.pop(label)) / per_ns
    elif kind == "send":
        unique, op = what
        inner = [l for l in open_phases if l != name] or list(open_phases)
        sent[unique] = (ts, op, inner[-1] if inner else None)
    elif kind == "end":
        s = sent.pop(what[0], None)
        if s and s[2] is not None:
            p = phases[s[2]]
            p["n"][s[1]] = p["n"].get(s[1], 0) + 1
            p["lat"].setdefault(s[1], []).append((ts - s[0]) / per_ns / 1000)
for ts, op, label in sent.values():  # sent, never answered in the trace (FORGET)
    if label is not None:
        p = phases[label]
        p["n"][op] = p["n"].get(op, 0) + 1

# The daemon's times: merged histograms of every section.
daemon = {}
for line in open(sys.argv[2]):
    if line.startswith("#"):
        continue
    w = line.split()
    h = daemon.setdefault(w[0], {})
    for b in w[3:]:
        f, n = b.split(":")
        h[int(f)] = h.get(int(f), 0) + int(n)
def hpct(h, p):
    total, acc = sum(h.values()), 0
    for f in sorted(h):
        acc += h[f]
        if acc > p * total:
            return f / 1000
    return float("nan")

rt = sum(rtt[1:2] + rtt[4:5]) / 2  # the medians before and after
print(f"== {name}: {'client pinned to CPU ' + pinned if pinned else 'client not pinned'}; "
      f"load {'$load_before'} -> {'$load_after'}; trace overrun {$overrun}")
print(f"round trip (fgetxattr, us per call, min/median/max of 9x1000): before {rtt[0]:.2f}/{rtt[1]:.2f}/{rtt[2]:.2f}, "
      f"after {rtt[3]:.2f}/{rtt[4]:.2f}/{rtt[5]:.2f}; used {rt:.2f}")
print(f"fuse {fuse_ms:.1f} ms, tmpfs {tmpfs_ms:.1f} ms ({fuse_ms / tmpfs_ms if tmpfs_ms else float('nan'):.2f}x)")
for label in order:
    p = phases[label]
    pops = p["ops"] or ops
    print(f"\n-- phase {label}: {pops} ops, {p['ns'] / 1e6:.1f} ms traced")
    print(f"{'request':<20}{'count':>9} {'per op':>10}  {'client us p50/p99':>18}  {'daemon us p50/p99':>18}  {'daemon/client':>13}  kind")
    sync = 0
    for op, n in sorted(p["n"].items(), key=lambda kv: -kv[1]):
        lat = sorted(p["lat"].get(op, []))
        c50, c99 = pct(lat, 0.5), pct(lat, 0.99)
        h = daemon.get(op, {})
        d50, d99 = hpct(h, 0.5), hpct(h, 0.99)
        kind = "async" if op in ASYNC else ("removable" if op in removable else "forced")
        if kind == "forced":
            sync += n
        ratio = d50 / c50 if h and lat else float("nan")
        print(f"{op:<20}{n:>9} {n / pops:>10.3f}  {c50:>8.1f}/{c99:<9.1f}  {d50:>8.1f}/{d99:<9.1f}  {ratio:>13.2f}  {kind}")
    floor_req = sync * rt / 1000
    print(f"forced synchronous requests {sync} ({sync / pops:.3f} per op) x {rt:.2f} us = {floor_req:.1f} ms")
    row, _, target = label.partition(" on ")
    if label == name and tmpfs_ms:
        measured, base = fuse_ms, tmpfs_ms
    elif target and target != "tmpfs" and f"{row} on tmpfs" in phases:
        measured, base = p["ns"] / 1e6, phases[f"{row} on tmpfs"]["ns"] / 1e6
    else:
        continue
    floor = floor_req + base
    print(f"floor = {floor_req:.1f} + tmpfs {base:.1f} = {floor:.1f} ms; measured {measured:.1f} ms "
          f"({measured / base:.2f}x tmpfs); ratio to floor {measured / floor:.2f} "
          f"(to the requests alone: {measured / floor_req if floor_req else float('nan'):.2f})")
EOF
