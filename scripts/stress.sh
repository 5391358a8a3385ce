#!/usr/bin/env bash
# scripts/stress.sh - the long stress run of a FUSE-mounted LynxFS pool (docs/STRESS.md).
#
# Not part of `./lynx test`: it installs Debian packages and builds the `fsx` crate, takes
# from a few minutes (bounded sizes) to a few hours (the defaults), and needs root and
# /dev/fuse. It:
#   1. builds lynxfs (release), formats a pool in /dev/shm and mounts it;
#   2. runs on the mount: fsx (three seeds), postmark, fs_mark, stress-ng's file-system
#      stressors one by one, and a Linux source tree unpacked onto the mount and onto
#      tmpfs, compared with `diff -r` and `find -printf`, then removed;
#   3. unmounts and runs `lynxfs fsck` on the pool;
#   4. prints a summary (PASS/FAIL/SKIP per step, with durations) and exits 1 if any
#      step failed.
#
# Usage: scripts/stress.sh [STEP...]     STEPs: fsx postmark fsmark stressng linux
#                                        (default: all, in that order)
# Every size is a variable with a default; a bounded run, for example:
#   FSX_OPS=100000 STRESSNG_TIMEOUT=10s scripts/stress.sh
#
# Variables (defaults in brackets):
#   LYNXFS            lynxfs binary [built: $CARGO_TARGET_DIR or ./target, release]
#   POOL              pool file [/dev/shm/stress.pool]      POOL_SIZE  [4G]
#   MNT               mount point [RUN/mnt]                 MOUNT_OPTS [none]
#   LOGDIR            logs [RUN/logs]
#                     (RUN: a new directory of root's, mktemp -d /tmp/lynxfs-stress.XXXXXX:
#                     a fixed name in /tmp could be another user's, or a symlink of theirs)
#   NO_INSTALL=1      do not run apt-get / cargo install (use what is on PATH)
#   FSX_OPS [1000000]  FSX_SEEDS ["1 2 3"]  FSX_FLEN [262144]  FSX_OPMAX [65536]
#   FSX_PARALLEL [0]   1: run the seeds at once (each on its own file of the mount)
#   FSX               fsx binary [~/.cache/lynxfs-fsx/bin/fsx, built: see build_fsx]
#   POSTMARK_FILES [5000]  POSTMARK_TX [20000]  POSTMARK_SUBDIRS [10]
#   POSTMARK_MIN [500]  POSTMARK_MAX [100000]
#   FSMARK_FILES [5000] (per iteration)  FSMARK_LOOPS [5]  FSMARK_SIZE [4096]
#   FSMARK_THREADS [2]  FSMARK_SYNC [1] (fs_mark -S)
#   STRESSNG_TIMEOUT [60s] (per stressor)  STRESSNG_WORKERS [1]
#   STRESSNG_STRESSORS [every stressor of `--class filesystem` but bind-mount, plus
#                       mmap seek readahead sendfile splice]
#   STRESSNG_EXPECTED_UNSUPPORTED [see below]: stressors whose "not supported here"
#                       (exit 4 / "skipped") is counted as SKIP rather than FAIL
#   LINUX_TARBALL [/usr/src/linux-source-*.tar.xz]
#   TMPFS_DIR [a new directory, mktemp -d /dev/shm/lynxfs-stress-tmpfs.XXXXXX]
#   STEP_TIMEOUT [4h]  a step still running after this is killed and FAILs
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
POOL="${POOL:-/dev/shm/stress.pool}"
POOL_SIZE="${POOL_SIZE:-4G}"
MNT="${MNT:-}"
MOUNT_OPTS="${MOUNT_OPTS:-}"
LOGDIR="${LOGDIR:-}"
NO_INSTALL="${NO_INSTALL:-0}"
FSX_OPS="${FSX_OPS:-1000000}"
FSX_SEEDS="${FSX_SEEDS:-1 2 3}"
FSX_FLEN="${FSX_FLEN:-262144}"
FSX_OPMAX="${FSX_OPMAX:-65536}"
FSX_PARALLEL="${FSX_PARALLEL:-0}"
FSX="${FSX:-$HOME/.cache/lynxfs-fsx/bin/fsx}"
POSTMARK_FILES="${POSTMARK_FILES:-5000}"
POSTMARK_TX="${POSTMARK_TX:-20000}"
POSTMARK_SUBDIRS="${POSTMARK_SUBDIRS:-10}"
POSTMARK_MIN="${POSTMARK_MIN:-500}"
POSTMARK_MAX="${POSTMARK_MAX:-100000}"
FSMARK_FILES="${FSMARK_FILES:-5000}"
FSMARK_LOOPS="${FSMARK_LOOPS:-5}"
FSMARK_SIZE="${FSMARK_SIZE:-4096}"
FSMARK_THREADS="${FSMARK_THREADS:-2}"
FSMARK_SYNC="${FSMARK_SYNC:-1}"
STRESSNG_TIMEOUT="${STRESSNG_TIMEOUT:-60s}"
STRESSNG_WORKERS="${STRESSNG_WORKERS:-1}"
STRESSNG_STRESSORS="${STRESSNG_STRESSORS:-}"
# Stressors that exercise something a FUSE file system cannot offer (ioctls such as
# FS_IOC_GETFLAGS/FIEMAP/fs-verity, file leases, fanotify marks, name_to_handle_at) or
# that need something this machine does not have (binderfs): if stress-ng itself says
# they are not supported here they count as SKIP; any other outcome is judged as usual.
STRESSNG_EXPECTED_UNSUPPORTED="${STRESSNG_EXPECTED_UNSUPPORTED:-binderfs chattr fanotify fiemap file-ioctl handle inode-flags lease verity}"
TMPFS_DIR="${TMPFS_DIR:-}"
STEP_TIMEOUT="${STEP_TIMEOUT:-4h}"

STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(fsx postmark fsmark stressng linux)
for s in "${STEPS[@]}"; do
    case "$s" in fsx|postmark|fsmark|stressng|linux) ;; *)
        echo "stress.sh: unknown step '$s' (fsx postmark fsmark stressng linux)" >&2; exit 2;;
    esac
done

[ "$(id -u)" = 0 ] || { echo "stress.sh: needs root (apt-get, mount)" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "stress.sh: /dev/fuse is missing" >&2; exit 2; }
# The defaults are new directories of root's: a fixed name in /tmp or /dev/shm could be
# another user's (or their symlink to anywhere), and root writes and extracts there.
if [ -z "$MNT" ] || [ -z "$LOGDIR" ]; then
    RUN="$(mktemp -d /tmp/lynxfs-stress.XXXXXX)" || exit 2
    MNT="${MNT:-$RUN/mnt}"
    LOGDIR="${LOGDIR:-$RUN/logs}"
fi
[ -n "$TMPFS_DIR" ] || TMPFS_DIR="$(mktemp -d /dev/shm/lynxfs-stress-tmpfs.XXXXXX)" || exit 2
mkdir -p "$LOGDIR"
export PATH="$HOME/.cargo/bin:$PATH"

RESULTS=()      # "STEP<TAB>RESULT<TAB>SECONDS<TAB>NOTE"
FAILED=0
record() {      # record STEP RESULT SECONDS NOTE
    RESULTS+=("$1	$2	$3	$4")
    [ "$2" = FAIL ] && FAILED=1
    printf '== %-28s %-4s %6ss  %s\n' "$1" "$2" "$3" "$4"
}
now() { date +%s; }
log() { echo "stress.sh: $*" >&2; }

# ---------------------------------------------------------------- installing
install_tools() {
    [ "$NO_INSTALL" = 1 ] && return 0
    local pkgs=()
    command -v fusermount3 >/dev/null || pkgs+=(fuse3)
    command -v postmark    >/dev/null || pkgs+=(postmark)
    command -v fs_mark     >/dev/null || pkgs+=(fsmark)
    command -v stress-ng   >/dev/null || pkgs+=(stress-ng)
    compgen -G '/usr/src/linux-source-*.tar.xz' >/dev/null || pkgs+=(linux-source)
    command -v xz >/dev/null || pkgs+=(xz-utils)
    if [ ${#pkgs[@]} -gt 0 ]; then
        log "apt-get install ${pkgs[*]}"
        apt-get update -qq >"$LOGDIR/apt.log" 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >>"$LOGDIR/apt.log" 2>&1 \
            || log "apt-get install failed (see $LOGDIR/apt.log); missing tools are SKIPped"
    fi
    [ -x "$FSX" ] || build_fsx
}

# fsx 0.3.2's map-read (`domapread`) maps a range of the file and never unmaps it, so
# every map-read leaves a mapping of the test file behind. The leak makes each later
# truncate, hole punch or cache invalidation walk all of them (the kernel unmaps a
# file's pages from every mapping): a 1,000,000-operation run slows from about 1,000
# to under 200 operations per second and then runs out of mappings. We build fsx 0.3.2
# with one line added, the `munmap` that `domapwrite` already has; no operation or
# check of fsx changes.
build_fsx() {
    local ver=0.3.2 src dir="$LOGDIR/fsx-src"
    log "building fsx $ver with the map-read leak fixed (into ${FSX%/bin/fsx})"
    src="$(ls -d "$HOME"/.cargo/registry/src/*/fsx-$ver 2>/dev/null | head -1)"
    if [ -z "$src" ]; then
        # Fetches the crate's source into the registry (and installs the stock fsx).
        cargo install --quiet --version "$ver" fsx >"$LOGDIR/cargo-install-fsx.log" 2>&1
        src="$(ls -d "$HOME"/.cargo/registry/src/*/fsx-$ver 2>/dev/null | head -1)"
    fi
    [ -n "$src" ] || { log "no fsx $ver source (see $LOGDIR/cargo-install-fsx.log)"; return; }
    rm -rf "$dir" && cp -r "$src" "$dir"
    # The first check_eofpage call is domapread's (domapwrite's is followed by munmap).
    awk '!done && /self\.check_eofpage\(offset, p\.as_ptr\(\), size\);/ {
             print; print "            munmap(p, map_size).unwrap();"; done = 1; next } { print }' \
        "$src/src/main.rs" >"$dir/src/main.rs"
    [ "$(grep -c 'munmap(p, map_size)' "$dir/src/main.rs")" = 2 ] \
        || { log "patching fsx failed"; return; }
    cargo install --locked --quiet --path "$dir" --root "${FSX%/bin/fsx}" \
        >"$LOGDIR/cargo-install-fsx.log" 2>&1 \
        || log "building fsx failed (see $LOGDIR/cargo-install-fsx.log)"
}

build_lynxfs() {
    if [ -n "${LYNXFS:-}" ]; then return 0; fi
    log "building lynxfs (release)"
    (cd "$ROOT" && cargo build --release -q -p lynxfs-cli) || { log "build failed"; exit 2; }
    LYNXFS="${CARGO_TARGET_DIR:-$ROOT/target}/release/lynxfs"
}

# ---------------------------------------------------------------- the mount
mounted() { mountpoint -q "$MNT"; }
do_umount() {
    if mounted; then
        "$LYNXFS" umount "$MNT" >>"$LOGDIR/mount.log" 2>&1 || fusermount3 -u "$MNT" >>"$LOGDIR/mount.log" 2>&1 \
            || { sleep 2; fusermount3 -uz "$MNT" >>"$LOGDIR/mount.log" 2>&1; }
    fi
    # wait for the daemon to let go of the pool (fsck refuses a pool "in use")
    local i
    for i in $(seq 1 60); do
        pgrep -f "lynxfs mount.* $MNT\$" >/dev/null 2>&1 || break
        sleep 0.5
    done
}
cleanup() {
    do_umount
    rm -rf "$TMPFS_DIR"
}
trap cleanup EXIT
trap 'echo "stress.sh: interrupted" >&2; exit 130' INT TERM

setup_pool() {
    mkdir -p "$MNT"
    mounted && do_umount
    local opts=()
    [ -n "$MOUNT_OPTS" ] && opts=(-o "$MOUNT_OPTS")
    "$LYNXFS" mkfs --force --size "$POOL_SIZE" "$POOL" >"$LOGDIR/mkfs.log" 2>&1 \
        || { cat "$LOGDIR/mkfs.log" >&2; log "mkfs failed"; exit 2; }
    "$LYNXFS" mount "${opts[@]}" "$POOL" "$MNT" >"$LOGDIR/mount.log" 2>&1 \
        || { cat "$LOGDIR/mount.log" >&2; log "mount failed"; exit 2; }
    local i
    for i in $(seq 1 50); do mounted && break; sleep 0.1; done
    mounted || { log "$MNT is not a mount point after 'lynxfs mount'"; exit 2; }
    log "pool $POOL ($POOL_SIZE) mounted on $MNT${MOUNT_OPTS:+ with -o $MOUNT_OPTS}"
}

# A step whose tool died may have taken the daemon with it: note it, and remount so
# later steps still run (the step has already failed).
check_alive() {     # check_alive STEP
    if ! mounted || ! stat "$MNT" >/dev/null 2>&1; then
        log "$1: the mount is gone or dead; remounting a fresh pool for the next steps"
        record "$1:mount-alive" FAIL 0 "mount dead after $1 (see $LOGDIR/mount.log)"
        fusermount3 -uz "$MNT" >/dev/null 2>&1
        setup_pool
    fi
}

# ---------------------------------------------------------------- 1. fsx
step_fsx() {
    if [ ! -x "$FSX" ]; then record fsx SKIP 0 "no $FSX (see build_fsx)"; return; fi
    local cfg="$LOGDIR/fsx.toml"
    # Every operation fsx-rs knows, with the weights of its sample config plus the
    # optional ones (fallocate, hole punching, sendfile, fadvise, copy_file_range).
    cat >"$cfg" <<EOF
flen = $FSX_FLEN
[opsize]
max = $FSX_OPMAX
[weights]
close_open = 1
read = 10
write = 10
mapread = 10
mapwrite = 10
invalidate = 1
truncate = 2
fsync = 1
fdatasync = 1
posix_fallocate = 1
punch_hole = 1
sendfile = 1
posix_fadvise = 1
copy_file_range = 1
EOF
    local seed
    mkdir -p "$MNT/fsx"
    if [ "$FSX_PARALLEL" = 1 ]; then
        # Every seed at once, each on its own file of the one mount.
        local pids=()
        for seed in $FSX_SEEDS; do run_fsx "$cfg" "$seed" & pids+=($!); done
        for pid in "${pids[@]}"; do wait "$pid"; done
        for seed in $FSX_SEEDS; do judge_fsx "$seed"; done
    else
        for seed in $FSX_SEEDS; do run_fsx "$cfg" "$seed"; judge_fsx "$seed"; done
    fi
    rm -rf "$MNT/fsx"
}

run_fsx() {     # run_fsx CONFIG SEED: runs one seed, leaves its exit code and seconds
    local seed=$2 t0 rc
    mkdir -p "$LOGDIR/fsx-$seed"
    t0=$(now)
    timeout "$STEP_TIMEOUT" "$FSX" -f "$1" -N "$FSX_OPS" -S "$seed" -P "$LOGDIR/fsx-$seed" \
        "$MNT/fsx/file-$seed" >"$LOGDIR/fsx-$seed.log" 2>&1
    rc=$?
    echo "$rc $(( $(now) - t0 ))" >"$LOGDIR/fsx-$seed.result"
}

judge_fsx() {   # judge_fsx SEED
    local seed=$1 rc dt
    read -r rc dt <"$LOGDIR/fsx-$seed.result"
    local rate="$(( FSX_OPS / (dt > 0 ? dt : 1) )) ops/s"
    if [ "$rc" = 0 ] && grep -q 'All operations completed A-OK' "$LOGDIR/fsx-$seed.log"; then
        record "fsx seed $seed" PASS "$dt" "$FSX_OPS ops, $rate"
    else
        record "fsx seed $seed" FAIL "$dt" "exit $rc, see $LOGDIR/fsx-$seed.log: $(grep -m1 -iE 'error|fail|panic' "$LOGDIR/fsx-$seed.log")"
    fi
    rm -f "$MNT/fsx/file-$seed"
    check_alive "fsx seed $seed"
}

# ---------------------------------------------------------------- 2. postmark
step_postmark() {
    if ! command -v postmark >/dev/null; then record postmark SKIP 0 "postmark not installed"; return; fi
    local cfg="$LOGDIR/postmark.cfg" t0 dt rc
    mkdir -p "$MNT/postmark"
    cat >"$cfg" <<EOF
set location $MNT/postmark
set number $POSTMARK_FILES
set transactions $POSTMARK_TX
set subdirectories $POSTMARK_SUBDIRS
set size $POSTMARK_MIN $POSTMARK_MAX
set read 4096
set write 4096
set buffering false
set report terse
run $LOGDIR/postmark.report
show
quit
EOF
    t0=$(now)
    (cd "$LOGDIR" && timeout "$STEP_TIMEOUT" postmark "$cfg") >"$LOGDIR/postmark.log" 2>&1
    rc=$?; dt=$(( $(now) - t0 ))
    # postmark exits 0 even when a call fails: it prints "Error ..." and goes on.
    local leftover
    leftover=$(find "$MNT/postmark" -mindepth 1 2>/dev/null | wc -l)
    if [ $rc = 0 ] && ! grep -qiE 'error|cannot|can.t' "$LOGDIR/postmark.log" && [ "$leftover" = 0 ]; then
        record postmark PASS "$dt" "$POSTMARK_FILES files, $POSTMARK_TX transactions, $POSTMARK_MIN-$POSTMARK_MAX bytes, $POSTMARK_SUBDIRS subdirs"
    else
        record postmark FAIL "$dt" "exit $rc, $leftover entries left, see $LOGDIR/postmark.log: $(grep -m1 -iE 'error|cannot|can.t' "$LOGDIR/postmark.log")"
    fi
    rm -rf "$MNT/postmark"
    check_alive postmark
}

# ---------------------------------------------------------------- 3. fs_mark
step_fsmark() {
    if ! command -v fs_mark >/dev/null; then
        record fs_mark SKIP 0 "fs_mark not installed (Debian package 'fsmark')"; return
    fi
    local t0 dt rc dirs=() i
    for i in $(seq 1 "$FSMARK_THREADS"); do mkdir -p "$MNT/fsmark/d$i"; dirs+=(-d "$MNT/fsmark/d$i"); done
    t0=$(now)
    # -D/-N: 16 subdirectories per directory, 256 files each in turn. fs_mark keeps
    # the files of every iteration (so the file system fills up loop by loop); the
    # tree is removed afterwards.
    timeout "$STEP_TIMEOUT" fs_mark "${dirs[@]}" -n "$FSMARK_FILES" -L "$FSMARK_LOOPS" \
        -s "$FSMARK_SIZE" -S "$FSMARK_SYNC" -D 16 -N 256 -l "$LOGDIR/fsmark.fslog" \
        >"$LOGDIR/fsmark.log" 2>&1
    rc=$?; dt=$(( $(now) - t0 ))
    local rows
    rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ ' "$LOGDIR/fsmark.log")
    if [ $rc = 0 ] && [ "$rows" = "$FSMARK_LOOPS" ] && ! grep -qiE 'error|fail' "$LOGDIR/fsmark.log"; then
        record fs_mark PASS "$dt" "$FSMARK_THREADS threads x $FSMARK_FILES files x $FSMARK_LOOPS loops, $FSMARK_SIZE bytes, -S $FSMARK_SYNC"
    else
        record fs_mark FAIL "$dt" "exit $rc, $rows of $FSMARK_LOOPS iterations, see $LOGDIR/fsmark.log: $(grep -m1 -iE 'error|fail' "$LOGDIR/fsmark.log")"
    fi
    rm -rf "$MNT/fsmark"
    check_alive fs_mark
}

# ---------------------------------------------------------------- 4. stress-ng
step_stressng() {
    if ! command -v stress-ng >/dev/null; then record stress-ng SKIP 0 "stress-ng not installed"; return; fi
    local list="$STRESSNG_STRESSORS"
    if [ -z "$list" ]; then
        # bind-mount is left out: stress-ng runs it only with --pathological, and it
        # bind-mounts / in a namespace, not the mount under test.
        list="$(stress-ng --class 'filesystem?' 2>&1 | sed -n 's/^.*stressors: //p' | sed 's/\bbind-mount\b//') mmap seek readahead sendfile splice"
    fi
    local s t0 dt rc out note res
    mkdir -p "$MNT/stress-ng"
    for s in $list; do
        out="$LOGDIR/stress-ng-$s.log"
        t0=$(now)
        # stress-ng exits 0 (passed), 1 (error), 2 (a stressor failed), 3 (no
        # resources), 4 (not implemented / not supported here)
        timeout --kill-after=30s "$(( ${STRESSNG_TIMEOUT%s} + 300 ))s" \
            stress-ng --"$s" "$STRESSNG_WORKERS" --timeout "$STRESSNG_TIMEOUT" \
            --temp-path "$MNT/stress-ng" --verify --metrics-brief --oomable >"$out" 2>&1
        rc=$?; dt=$(( $(now) - t0 ))
        note="$(grep -m1 -E 'fail|error|skipped|not supported|not implemented' "$out" | sed 's/^stress-ng: [a-z]*: *\[[0-9]*\] *//')"
        if [ $rc = 0 ] && ! grep -qE 'skipped|not supported|not implemented|unsupported' "$out"; then
            res=PASS; note="$(grep -m1 -E "^stress-ng: (info|metrc): +\[[0-9]+\] +$s +[0-9]+ " "$out" | awk '{print $5" bogo-ops"}')"
        elif [ $rc = 0 ] || [ $rc = 4 ] || [ $rc = 3 ]; then
            if grep -qE 'skipped|not supported|not implemented|unsupported' "$out" || [ $rc = 4 ]; then
                if [[ " $STRESSNG_EXPECTED_UNSUPPORTED " == *" $s "* ]]; then res=SKIP; else res=FAIL; fi
                note="not supported: $note"
            else
                res=FAIL; note="exit $rc: $note"
            fi
        else
            res=FAIL; note="exit $rc: $note"
        fi
        record "stress-ng $s" "$res" "$dt" "$note"
        rm -rf "$MNT/stress-ng"/* 2>/dev/null
        check_alive "stress-ng $s"
        mkdir -p "$MNT/stress-ng"
    done
    rm -rf "$MNT/stress-ng"
}

# ---------------------------------------------------------------- 5. Linux tree
step_linux() {
    local tarball="${LINUX_TARBALL:-}"
    [ -n "$tarball" ] || tarball=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -1)
    if [ -z "$tarball" ] || [ ! -f "$tarball" ]; then
        record linux-tree SKIP 0 "no Linux source tarball (Debian package 'linux-source')"; return
    fi
    local t0 dt t1 rc=0 notes=()
    # Emptied, not removed and made again: in /dev/shm the name would be free meanwhile.
    mkdir -p "$TMPFS_DIR" "$MNT/linux" && find "$TMPFS_DIR" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
    t0=$(now)
    timeout "$STEP_TIMEOUT" tar -xJf "$tarball" -C "$MNT/linux" >"$LOGDIR/linux-untar-lynxfs.log" 2>&1 \
        || { rc=1; notes+=("tar onto the mount failed"); }
    t1=$(now)
    record "linux untar (lynxfs)" "$([ $rc = 0 ] && echo PASS || echo FAIL)" $(( t1 - t0 )) "$(basename "$tarball")"
    t0=$(now)
    tar -xJf "$tarball" -C "$TMPFS_DIR" >"$LOGDIR/linux-untar-tmpfs.log" 2>&1 \
        || { rc=1; notes+=("tar onto tmpfs failed"); }
    record "linux untar (tmpfs)" "$([ $rc = 0 ] && echo PASS || echo FAIL)" $(( $(now) - t0 )) "reference copy"

    # contents: diff -r (symlinks compared as links, not followed)
    t0=$(now)
    if diff -r --no-dereference "$TMPFS_DIR" "$MNT/linux" >"$LOGDIR/linux-diff.log" 2>&1; then
        record "linux diff -r" PASS $(( $(now) - t0 )) "$(find "$MNT/linux" | wc -l) entries"
    else
        record "linux diff -r" FAIL $(( $(now) - t0 )) "$(wc -l <"$LOGDIR/linux-diff.log") lines of differences, see $LOGDIR/linux-diff.log"
    fi
    # names, types, sizes, modes, link targets, mtimes (directory sizes are the file
    # system's own business and left out)
    t0=$(now)
    # Directory mtimes are left out too: tar creates the directories that are not
    # members of the archive (126 in linux-source-6.1) with the current time.
    local fmt_dir='%p %y %m\n' fmt='%p %y %s %m %l %TY-%Tm-%Td+%TT\n'
    (cd "$TMPFS_DIR" && find . -type d -printf "$fmt_dir" -o -printf "$fmt" | LC_ALL=C sort) >"$LOGDIR/linux-find-tmpfs.txt"
    (cd "$MNT/linux" && find . -type d -printf "$fmt_dir" -o -printf "$fmt" | LC_ALL=C sort) >"$LOGDIR/linux-find-lynxfs.txt"
    if cmp -s "$LOGDIR/linux-find-tmpfs.txt" "$LOGDIR/linux-find-lynxfs.txt"; then
        record "linux find -printf" PASS $(( $(now) - t0 )) "$(wc -l <"$LOGDIR/linux-find-lynxfs.txt") lines equal"
    else
        diff "$LOGDIR/linux-find-tmpfs.txt" "$LOGDIR/linux-find-lynxfs.txt" >"$LOGDIR/linux-find.diff"
        record "linux find -printf" FAIL $(( $(now) - t0 )) "see $LOGDIR/linux-find.diff ($(wc -l <"$LOGDIR/linux-find.diff") lines)"
    fi
    t0=$(now)
    if rm -rf "$MNT/linux" 2>"$LOGDIR/linux-rm.log" && [ ! -e "$MNT/linux" ]; then
        record "linux rm -rf" PASS $(( $(now) - t0 )) ""
    else
        record "linux rm -rf" FAIL $(( $(now) - t0 )) "see $LOGDIR/linux-rm.log"
    fi
    rm -rf "$TMPFS_DIR"
    check_alive linux
}

# ---------------------------------------------------------------- main
T_ALL=$(now)
install_tools
build_lynxfs
log "lynxfs: $LYNXFS; logs: $LOGDIR"
setup_pool
for s in "${STEPS[@]}"; do
    log "---- $s ----"
    "step_$s"
done

# the file system must be empty again (every step removes what it made)
left=$(find "$MNT" -mindepth 1 2>/dev/null | head -20)
[ -z "$left" ] || record "mount empty at end" FAIL 0 "left: $(echo $left)"
"$LYNXFS" info "$POOL" >"$LOGDIR/info-before-umount.txt" 2>&1 || true
t0=$(now)
do_umount
if mounted; then record umount FAIL $(( $(now) - t0 )) "still mounted"; else record umount PASS $(( $(now) - t0 )) ""; fi
t0=$(now)
"$LYNXFS" fsck "$POOL" >"$LOGDIR/fsck.log" 2>&1
rc=$?
if [ $rc = 0 ]; then
    record fsck PASS $(( $(now) - t0 )) "clean"
else
    record fsck FAIL $(( $(now) - t0 )) "exit $rc, see $LOGDIR/fsck.log: $(head -3 "$LOGDIR/fsck.log" | tr '\n' ' ')"
fi

echo
echo "================ LynxFS stress summary ($(( $(now) - T_ALL ))s in all; logs in $LOGDIR) ================"
npass=0; nfail=0; nskip=0
for r in "${RESULTS[@]}"; do
    IFS=$'\t' read -r name res secs note <<<"$r"
    printf '%-4s %-30s %6ss  %s\n' "$res" "$name" "$secs" "$note"
    case "$res" in PASS) npass=$((npass+1));; FAIL) nfail=$((nfail+1));; SKIP) nskip=$((nskip+1));; esac
done
echo "stress: $npass passed, $nfail failed, $nskip skipped"
exit $FAILED
