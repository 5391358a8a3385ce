//! The engine's answers in the C library's shapes.

use lynxfs::Stat;

fn split_ns(t: u64) -> (i64, i64) {
    ((t / 1_000_000_000) as i64, (t % 1_000_000_000) as i64)
}

/// `struct stat` (the same layout as `stat64` on 64-bit Linux).
pub fn stat64(s: &Stat, dev: u64) -> libc::stat64 {
    // SAFETY: stat64 is plain data: all-zero is a valid value.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    st.st_dev = dev;
    st.st_ino = s.ino;
    st.st_mode = s.mode;
    st.st_nlink = s.nlink;
    st.st_uid = s.uid;
    st.st_gid = s.gid;
    st.st_rdev = s.rdev;
    st.st_size = s.size as i64;
    st.st_blksize = s.blksize as i64;
    st.st_blocks = s.blocks as i64;
    (st.st_atime, st.st_atime_nsec) = split_ns(s.atime);
    (st.st_mtime, st.st_mtime_nsec) = split_ns(s.mtime);
    (st.st_ctime, st.st_ctime_nsec) = split_ns(s.ctime);
    st
}

fn stamp(t: u64) -> libc::statx_timestamp {
    let (sec, nsec) = split_ns(t);
    // SAFETY: plain data: all-zero is valid.
    let mut ts: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    ts.tv_sec = sec;
    ts.tv_nsec = nsec as u32;
    ts
}

/// `struct statx`, every basic field and the birth time filled.
pub fn statx(s: &Stat, dev: u64) -> libc::statx {
    // SAFETY: plain data: all-zero is valid.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    st.stx_mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
    st.stx_blksize = s.blksize;
    st.stx_nlink = s.nlink as u32;
    st.stx_uid = s.uid;
    st.stx_gid = s.gid;
    st.stx_mode = s.mode as u16;
    st.stx_ino = s.ino;
    st.stx_size = s.size;
    st.stx_blocks = s.blocks;
    st.stx_atime = stamp(s.atime);
    st.stx_btime = stamp(s.btime);
    st.stx_ctime = stamp(s.ctime);
    st.stx_mtime = stamp(s.mtime);
    st.stx_rdev_major = libc::major(s.rdev as libc::dev_t);
    st.stx_rdev_minor = libc::minor(s.rdev as libc::dev_t);
    st.stx_dev_major = libc::major(dev);
    st.stx_dev_minor = libc::minor(dev);
    st
}

/// One of utimensat's times as the engine's setting; EINVAL for a nanosecond field
/// out of range or a time before 1970 (the pool keeps unsigned nanoseconds).
pub fn time_set(t: &libc::timespec) -> lynxfs::Result<Option<lynxfs::TimeSet>> {
    let bad = lynxfs::Error::Errno(libc::EINVAL);
    match t.tv_nsec {
        libc::UTIME_OMIT => Ok(None),
        libc::UTIME_NOW => Ok(Some(lynxfs::TimeSet::Now)),
        ns if (0..1_000_000_000).contains(&ns) => {
            let s = u64::try_from(t.tv_sec).map_err(|_| bad)?;
            let at = s
                .checked_mul(1_000_000_000)
                .ok_or(lynxfs::Error::Errno(libc::EOVERFLOW))?;
            Ok(Some(lynxfs::TimeSet::At(at + ns as u64)))
        }
        _ => Err(bad),
    }
}
