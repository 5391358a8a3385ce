#!/usr/bin/env bash
# scripts/bench-page.sh - regenerates docs/BENCHMARKS.md, the current results: runs the
# suites (scripts/bench-all.sh), then rewrites the page from their JSON reports with
# `lynxfs bench page` (one section per report: the command, the commit, the machine and
# its load, the date, the table, the figure copied into docs/figures/). The page's
# hand-written intro, above its "Generated below this line" mark, is kept.
#
# Usage: scripts/bench-page.sh            run every suite into a new directory, then write the page
#        scripts/bench-page.sh OUT        the same, the reports in OUT
#        scripts/bench-page.sh --from OUT write the page from the reports already in OUT
#   LYNXFS, ROUNDS, SUITES   as for scripts/bench-all.sh
#   NOT_RUN   why the suites left out of SUITES were left out (a line on the page; else
#             "not part of this run"); OUT/skipped.txt may also say it, a "suite: why"
#             line per suite
#
# Needs what scripts/bench-all.sh needs (root, /dev/fuse, mkfs.ext4). A suite that
# fails is listed on the page as not run, with how long it ran; the page is written
# all the same.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LYNXFS="${LYNXFS:-$ROOT/target/release/lynxfs}"
ALL="syscalls data mdtest smallfiles recovery apps personalities ablation hybrid hybrid-fsync statall rename filetest start"

if [ "${1:-}" = "--from" ]; then
    OUT="${2:?usage: scripts/bench-page.sh --from OUT}"
else
    OUT="${1:-$(mktemp -d /tmp/lynxfs-bench-page.XXXXXX)}"
    # A failed suite is in OUT/skipped.txt; the page still shows the others.
    LYNXFS="$LYNXFS" "$ROOT/scripts/bench-all.sh" "$OUT" || true
    if [ -n "${NOT_RUN:-}" ]; then
        for suite in $ALL; do
            case " ${SUITES:-$ALL} " in
                *" $suite "*) ;;
                *) echo "$suite: $NOT_RUN" >>"$OUT/skipped.txt" ;;
            esac
        done
    fi
fi
# The figures on the page are this run's only: an old one is in git.
rm -f "$ROOT"/docs/figures/*.png
"$LYNXFS" bench page "$OUT" --page "$ROOT/docs/BENCHMARKS.md" --figures "$ROOT/docs/figures"
