//! The engine's records as C's: `struct stat`, `struct statvfs`, and
//! `struct timespec` times to set.

use engine::{Stat, StatFs, TimeSet, Timestamp};

use crate::edge::{Errno, R};

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Seconds and nanoseconds of a time, as `struct timespec` holds them.
fn split(t: Timestamp) -> (i64, i64) {
    (t.sec, i64::from(t.nsec))
}

/// `struct stat` of `s`. The device number is left 0: a pool is no kernel device.
pub fn stat(s: &Stat) -> libc::stat {
    // SAFETY: `struct stat` is plain integers (and padding): all zeros is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_ino = s.ino;
    st.st_mode = s.mode;
    st.st_nlink = s.nlink;
    st.st_uid = s.uid;
    st.st_gid = s.gid;
    st.st_rdev = s.rdev;
    st.st_size = signed(s.size);
    st.st_blksize = i64::from(s.blksize);
    st.st_blocks = signed(s.blocks);
    (st.st_atime, st.st_atime_nsec) = split(s.atime);
    (st.st_mtime, st.st_mtime_nsec) = split(s.mtime);
    (st.st_ctime, st.st_ctime_nsec) = split(s.ctime);
    st
}

/// `struct statvfs` of `s`.
pub fn statvfs(s: &StatFs) -> libc::statvfs {
    // SAFETY: `struct statvfs` is plain integers (and padding): all zeros is valid.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    v.f_bsize = s.block_size;
    v.f_frsize = s.block_size;
    v.f_blocks = s.blocks;
    v.f_bfree = s.blocks_free;
    v.f_bavail = s.blocks_avail;
    v.f_files = s.files;
    v.f_ffree = s.files_free;
    v.f_favail = s.files_avail;
    v.f_namemax = s.name_max;
    v
}

/// One time of utimensat(2): `UTIME_NOW`, `UTIME_OMIT` (None) or an instant, any
/// second Linux allows; EINVAL for nanoseconds out of range.
pub fn time_set(t: &libc::timespec) -> R<Option<TimeSet>> {
    match t.tv_nsec {
        libc::UTIME_NOW => Ok(Some(TimeSet::Now)),
        libc::UTIME_OMIT => Ok(None),
        ns => Timestamp::new(t.tv_sec, ns)
            .map(|t| Some(TimeSet::At(t)))
            .ok_or(Errno(libc::EINVAL)),
    }
}
