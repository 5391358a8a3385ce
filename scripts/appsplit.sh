#!/bin/bash
# Each step of `lynxfs bench apps` as one program run, split into its user and system
# time (perf's user_time and system_time, 5 runs each; docs/DESIGN-NOTES.md, "How much of
# each apps step is its program's own"):
#
#   scripts/appsplit.sh DIR [TAR]
#
# DIR: an empty directory on the file system measured (for the preload, run the script
# inside `lynxfs run --pool POOL --at DIR`). TAR: the tarball (default: the generated
# 5,000-file tree `lynxfs bench apps --tree generated --files 5000` leaves in
# /dev/shm/lynxfs-bench-UID). The user time on tmpfs is the program's own work, which no
# file system removes: user/total bounds the time any file system can reach.
set -u
D=$1; T=${2:-/dev/shm/lynxfs-bench-$(id -u)/generated-5000.tar}
[ -f "$T" ] || { echo "no tarball $T (run lynxfs bench apps --tree generated --files 5000 once)" >&2; exit 2; }
[ -d "$D" ] || { echo "no directory $D" >&2; exit 2; }
T=$(realpath "$T"); SQL=/dev/shm/lynxfs-bench-$(id -u)
# Every path below is relative to DIR (the --pre commands run in a shell of their own).
cd "$D" || exit 2
# Not -x: its CSV has no elapsed line, and duration_time counts the --pre command too.
P="perf stat -e user_time,system_time -r 5"
show() { awk -v n="$1" '/time elapsed/{d=$1*1e3} /user_time/{u=$1/1e6} /system_time/{s=$1/1e6} END{printf "%-16s %7.2f ms  user %6.2f  sys %6.2f  user/elapsed %.2f\n", n, d, u, s, u/d}'; }
rm -rf gen-tree
$P --pre "rm -rf gen-tree" tar -xf "$T" 2>&1 >/dev/null | show tar
tar -xf "$T"
$P du -s gen-tree 2>&1 >/dev/null | show "du warm"
$P find gen-tree -name '*.c' 2>&1 >/dev/null | show "find warm"
cp -a gen-tree/fs fs0
$P --pre "rm -rf gen-tree/fs; cp -a fs0 gen-tree/fs" gzip -r gen-tree/fs 2>&1 >/dev/null | show "gzip -r"
rm -rf gen-tree/fs; cp -a fs0 gen-tree/fs
$P --pre "rm -rf gen-tree/fs/.git" git -C gen-tree/fs init -q 2>&1 >/dev/null | show "git init"
$P --pre "rm -f gen-tree/fs/.git/index" git -C gen-tree/fs add -A 2>&1 >/dev/null | show "git add"
git -C gen-tree/fs -c user.name=a -c user.email=a@b commit -qm x >/dev/null
$P git -C gen-tree/fs status 2>&1 >/dev/null | show "git status"
$P git -C gen-tree/fs log --stat 2>&1 >/dev/null | show "git log --stat"
$P --pre "rm -f b.sqlite" sqlite3 b.sqlite ".read $SQL/apps-inserts-v1.sql" 2>&1 >/dev/null | show "sqlite inserts"
$P --pre "cp b.sqlite c.sqlite" sqlite3 c.sqlite ".read $SQL/apps-queries-v1.sql" 2>&1 >/dev/null | show "sqlite queries"
$P --pre "rm -rf x; cp -a gen-tree x" rm -rf x 2>&1 >/dev/null | show "rm -rf"
rm -rf gen-tree fs0 b.sqlite c.sqlite x
