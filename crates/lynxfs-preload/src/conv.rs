//! The engine's answers in the C library's shapes.

use lynxfs::{Stat, Timestamp};

fn split(t: Timestamp) -> (i64, i64) {
    (t.sec, i64::from(t.nsec))
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
    (st.st_atime, st.st_atime_nsec) = split(s.atime);
    (st.st_mtime, st.st_mtime_nsec) = split(s.mtime);
    (st.st_ctime, st.st_ctime_nsec) = split(s.ctime);
    st
}

fn stamp(t: Timestamp) -> libc::statx_timestamp {
    // SAFETY: plain data: all-zero is valid.
    let mut ts: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    ts.tv_sec = t.sec;
    ts.tv_nsec = t.nsec;
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
    (st.stx_attributes, st.stx_attributes_mask) = attributes(s.flags);
    st
}

/// statx's `stx_attributes` for inode flags `flags`, and the mask of those LynxFS
/// keeps (immutable, append-only, nodump: the same bits as `FS_*_FL`, as in Linux).
fn attributes(flags: u32) -> (u64, u64) {
    let kept =
        (libc::STATX_ATTR_IMMUTABLE | libc::STATX_ATTR_APPEND | libc::STATX_ATTR_NODUMP) as u64;
    (u64::from(flags) & kept, kept)
}

/// One of utimensat's times as the engine's setting; EINVAL for a nanosecond field
/// out of range (every second Linux allows is kept).
pub fn time_set(t: &libc::timespec) -> lynxfs::Result<Option<lynxfs::TimeSet>> {
    match t.tv_nsec {
        libc::UTIME_OMIT => Ok(None),
        libc::UTIME_NOW => Ok(Some(lynxfs::TimeSet::Now)),
        ns => Timestamp::new(t.tv_sec, ns)
            .map(|t| Some(lynxfs::TimeSet::At(t)))
            .ok_or(lynxfs::Error::Errno(libc::EINVAL)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// statx reports chattr's flags (issue 30, item 15).
    #[test]
    fn statx_reports_the_inode_flags() {
        use lynxfs::meta::flags::{APPEND, IMMUTABLE, NOATIME, NODUMP};
        let (attrs, mask) = attributes(IMMUTABLE | APPEND | NODUMP | NOATIME);
        let want =
            (libc::STATX_ATTR_IMMUTABLE | libc::STATX_ATTR_APPEND | libc::STATX_ATTR_NODUMP) as u64;
        assert_eq!((attrs, mask), (want, want));
        assert_eq!(attributes(APPEND).0, libc::STATX_ATTR_APPEND as u64);
        assert_eq!(attributes(0).0, 0);
    }
}
