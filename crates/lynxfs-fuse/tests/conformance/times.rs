//! Times across the whole range Linux allows (issue 17): before 1970, the 32-bit
//! minimum, the smallest and largest `timespec64`, set with utimensat and futimens and
//! read back with stat; and the birth time statx reports.

use libc::timespec;

use crate::Ctx;

/// (label, seconds, nanoseconds) of each instant set as atime and as mtime.
const INSTANTS: &[(&str, i64, i64)] = &[
    ("1960-01-01", -315_619_200, 0),
    ("half a second before 1970", -1, 500_000_000),
    ("32-bit minimum", i32::MIN as i64, 0),
    ("32-bit maximum plus one", i32::MAX as i64 + 1, 7),
    ("after u64 nanoseconds", 18_446_744_074, 1),
    ("absolute minimum", i64::MIN, 0),
    ("absolute maximum", i64::MAX, 999_999_999),
    ("absolute minimum with nanoseconds", i64::MIN, 1),
];

fn ts(sec: i64, nsec: i64) -> timespec {
    timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

/// Records the atime and mtime of `name` as stat shows them.
fn record_times(c: &mut Ctx, label: &str, name: &str) {
    if let Some(st) = c.stat(&format!("stat {label}"), name) {
        let s = format!(
            "atime={}.{} mtime={}.{}",
            st.st_atime, st.st_atime_nsec, st.st_mtime, st.st_mtime_nsec
        );
        c.rec(&format!("times {label}"), s);
    }
}

pub fn script(c: &mut Ctx) {
    let fd = c.open(
        "times: create",
        "t/times",
        libc::O_CREAT | libc::O_RDWR,
        0o644,
    );
    for &(label, sec, nsec) in INSTANTS {
        // atime at the instant, mtime one second after it (where there is one).
        let times = [ts(sec, nsec), ts(sec.saturating_add(1), nsec)];
        c.path1(&format!("utimensat {label}"), "t/times", |p| unsafe {
            // SAFETY: p is a valid path, times two timespecs.
            libc::utimensat(libc::AT_FDCWD, p, times.as_ptr(), 0)
        });
        record_times(c, label, "t/times");
        let swapped = [times[1], times[0]];
        // SAFETY: fd is open (or -1: the call fails and that is recorded).
        let r = unsafe { libc::futimens(fd, swapped.as_ptr()) };
        c.call(&format!("futimens {label}"), r);
        record_times(c, &format!("{label} (futimens)"), "t/times");
    }
    // A write after an old mtime: the clock's time replaces it.
    c.write("times: write after the old mtime", fd, b"x");
    if let Some(st) = c.stat("stat after the write", "t/times") {
        c.rec(
            "mtime moved to now",
            format!("{}", st.st_mtime > 1_700_000_000),
        );
    }
    c.close(fd);
    birth_time(c);
}

/// statx reports a birth time no later than the change time, for a new file.
fn birth_time(c: &mut Ctx) {
    let p = c.path("t/times");
    // SAFETY: a zeroed statx is a valid out-buffer.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: p and stx are valid.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            p.as_ptr(),
            0,
            libc::STATX_BASIC_STATS | libc::STATX_BTIME,
            &mut stx,
        )
    };
    c.call("statx for btime", r);
    let has = stx.stx_mask & libc::STATX_BTIME != 0;
    c.rec("statx reports btime", format!("{has}"));
    let (b, ct) = (stx.stx_btime, stx.stx_ctime);
    let sane = (b.tv_sec, b.tv_nsec) <= (ct.tv_sec, ct.tv_nsec) && b.tv_sec > 1_700_000_000;
    c.rec("btime before ctime and recent", format!("{}", has && sane));
}
