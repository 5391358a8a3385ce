//! FS_IOC_FIEMAP answered as Linux's ioctl answers it, for the callers that serve the
//! ioctl themselves (the preload library, the C API): the kernel never passes it to a
//! FUSE daemon (fs/ioctl.c's ioctl_fiemap wants `inode->i_op->fiemap`, which FUSE's
//! inodes lack, and says EOPNOTSUPP first).

use crate::data::FileExtent;
use crate::error::{errno, Error, Result};
use crate::pmem::Backend;

use super::{Fd, Fs};

/// The ioctl's request number: `_IOWR('f', 11, struct fiemap)`.
pub const FS_IOC_FIEMAP: u64 = 0xC020_660B;
/// `FIEMAP_FLAG_SYNC`: write the file's data out first (it always is, here).
pub const FLAG_SYNC: u32 = 1;
/// The most extents one call may ask for, as Linux's FIEMAP_MAX_EXTENTS.
pub const MAX_EXTENTS: u32 = u32::MAX / std::mem::size_of::<FiemapExtent>() as u32;

/// `struct fiemap` of <linux/fiemap.h>, without the extents that follow it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fiemap {
    pub fm_start: u64,
    pub fm_length: u64,
    pub fm_flags: u32,
    pub fm_mapped_extents: u32,
    pub fm_extent_count: u32,
    pub fm_reserved: u32,
}

/// `struct fiemap_extent` of <linux/fiemap.h>.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FiemapExtent {
    pub fe_logical: u64,
    pub fe_physical: u64,
    pub fe_length: u64,
    pub fe_reserved64: [u64; 2],
    pub fe_flags: u32,
    pub fe_reserved: [u32; 3],
}

impl From<FileExtent> for FiemapExtent {
    fn from(e: FileExtent) -> Self {
        FiemapExtent {
            fe_logical: e.logical,
            fe_physical: e.physical,
            fe_length: e.length,
            fe_flags: e.flags,
            ..Default::default()
        }
    }
}

impl<B: Backend> Fs<B> {
    /// The ioctl on open file `fd` with the caller's header `head`, which it updates
    /// as the kernel does (also on failure: an unsupported flag is EBADR with
    /// `fm_flags` naming it): the extents to copy to `fm_extents`, at most
    /// `fm_extent_count` of them; with a count of 0 none, `fm_mapped_extents` then
    /// says how many there are.
    pub fn fiemap(&self, fd: Fd, head: &mut Fiemap) -> Result<Vec<FiemapExtent>> {
        head.fm_mapped_extents = 0;
        // The kernel's order: the file's kind, the count, the range, the flags.
        if self.fstat(fd)?.mode & libc::S_IFMT != libc::S_IFREG {
            return Err(errno::EOPNOTSUPP);
        }
        if head.fm_extent_count > MAX_EXTENTS || head.fm_length == 0 {
            return Err(errno::EINVAL);
        }
        if head.fm_start >= crate::data::MAX_FILE {
            return Err(errno::EFBIG);
        }
        let unsupported = head.fm_flags & !FLAG_SYNC;
        if unsupported != 0 {
            head.fm_flags = unsupported;
            return Err(Error::Errno(libc::EBADR));
        }
        let found = self.extents(fd, head.fm_start, head.fm_length)?;
        let n = found.len().min(u32::MAX as usize) as u32;
        if head.fm_extent_count == 0 {
            head.fm_mapped_extents = n;
            return Ok(Vec::new());
        }
        let out: Vec<FiemapExtent> = found
            .into_iter()
            .take(head.fm_extent_count as usize)
            .map(FiemapExtent::from)
            .collect();
        head.fm_mapped_extents = out.len() as u32;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structs_have_linuxs_layout() {
        assert_eq!(std::mem::size_of::<Fiemap>(), 32);
        assert_eq!(std::mem::size_of::<FiemapExtent>(), 56);
        // _IOWR('f', 11, struct fiemap): read and write, the header's size, 'f', 11.
        let nr = (3u64 << 30) | ((std::mem::size_of::<Fiemap>() as u64) << 16) | (0x66 << 8) | 11;
        assert_eq!(nr, FS_IOC_FIEMAP);
    }
}
