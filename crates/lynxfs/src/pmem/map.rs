//! The pool's memory mapping: a file or device mapped shared, with `MAP_SYNC` when the
//! file system under it is DAX, or an anonymous mapping for tests.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use super::mappings::{self, Kind, Registered};
use crate::error::{Error, Result};

mod fault;

/// How the pool's bytes reach the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapMode {
    /// `MAP_SHARED_VALIDATE | MAP_SYNC`: stores plus flushes are durable (DAX).
    SharedSync,
    /// `MAP_SHARED`: page cache (tmpfs or a disk file system) under the mapping.
    Shared,
    /// Private anonymous memory: tests and crash images.
    Anonymous,
    /// `MAP_PRIVATE` of the file: a read-only open, whose writes never reach the file.
    Private,
}

impl MapMode {
    pub fn describe(self) -> &'static str {
        match self {
            MapMode::SharedSync => "MAP_SHARED_VALIDATE|MAP_SYNC (DAX)",
            MapMode::Shared => "MAP_SHARED (not DAX)",
            MapMode::Anonymous => "anonymous (in memory)",
            MapMode::Private => "MAP_PRIVATE (read-only open)",
        }
    }
}

/// True when `file` can be mapped with `MAP_SYNC`, i.e. it is on a DAX file system.
pub fn dax_supported(file: &File) -> bool {
    // SAFETY: a one-page probe mapping of a descriptor we own, unmapped at once if it
    // succeeds; nothing reads or writes through it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
            file.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            return false;
        }
        libc::munmap(p, 4096);
        true
    }
}

/// Whether cache-line flushes and a fence make a store to the pool at `path` durable
/// (the `pmem` backend), or the pool needs `msync` (the `msync` backend): flushes
/// suffice for a DAX mapping, and for a regular file (or one still to be created) on
/// tmpfs, which has no device below it. A block device without DAX, or a file on a disk
/// file system, has the page cache between the mapping and the medium.
pub fn flushes_suffice(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        // Opened only when it is a file or device: opening a FIFO would block.
        Ok(m) if m.is_file() || m.file_type().is_block_device() => {
            let dax = File::open(path).is_ok_and(|f| dax_supported(&f));
            dax || (m.is_file() && on_tmpfs(path))
        }
        Ok(_) => false,
        Err(_) => on_tmpfs(path),
    }
}

/// True when `path` is on tmpfs (memory that survives a process crash, not a power cut).
pub fn on_tmpfs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` points at writable space for one
    // statfs, which the call fills on success (checked before reading it).
    unsafe {
        if libc::statfs(c.as_ptr(), st.as_mut_ptr()) != 0 {
            return false;
        }
        st.assume_init().f_type == libc::TMPFS_MAGIC
    }
}

/// A live mapping. Unmapped on drop.
pub struct Mapping {
    base: *mut u8,
    len: usize,
    mode: MapMode,
    /// Set for a file mapping: a fault in it stops the process with a message.
    watch: Option<fault::Watch>,
    /// The range in the engine's registry, so that the host program's calls cannot
    /// replace it ([`mappings`]).
    registered: Registered,
}

// SAFETY: the mapping is plain memory shared by design; every access goes through
// `Pm`, which uses atomic or copy operations on raw pointers and never hands out
// references that could alias a concurrent writer.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// The exit status of a process whose pool mapping lost its storage (see [`fault`]).
    pub const FAULT_EXIT: i32 = fault::FAULT_EXIT;

    /// Map `file` (of `len` bytes) read-write and shared, trying `MAP_SYNC` first.
    pub fn map_file(file: &File, len: usize, path: &Path) -> Result<Mapping> {
        let fd = file.as_raw_fd();
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh mapping of a file descriptor we own, at a free address in
        // the engine's area or of the kernel's choosing; the result is checked against
        // MAP_FAILED.
        let sync = unsafe {
            mappings::map_placed(len, prot, libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC, fd, 0)
        };
        if sync != libc::MAP_FAILED {
            return Ok(Mapping::of_file(
                sync.cast(),
                len,
                MapMode::SharedSync,
                path,
            ));
        }
        // SAFETY: as above, without MAP_SYNC (the file is not on DAX).
        let shared = unsafe { mappings::map_placed(len, prot, libc::MAP_SHARED, fd, 0) };
        if shared == libc::MAP_FAILED {
            return Err(Error::io(path, std::io::Error::last_os_error()));
        }
        Ok(Mapping::of_file(shared.cast(), len, MapMode::Shared, path))
    }

    /// Map `file` copy-on-write: reads see the file, writes stay in this process.
    pub fn map_private(file: &File, len: usize, path: &Path) -> Result<Mapping> {
        // SAFETY: a fresh private mapping of a descriptor we own, at a free address;
        // checked below.
        let p = unsafe {
            mappings::map_placed(
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::io(path, std::io::Error::last_os_error()));
        }
        Ok(Mapping::of_file(p.cast(), len, MapMode::Private, path))
    }

    /// Zeroed private memory of `len` bytes (an in-memory pool).
    pub fn anonymous(len: usize) -> Result<Mapping> {
        Self::anonymous_as(len, Kind::Pool)
    }

    /// Zeroed private memory of `len` bytes holding `kind`: the engine's own
    /// bookkeeping is placed with the pool ([`mappings::map_placed`]), an in-memory
    /// pool (tests, crash images) where the kernel puts it.
    pub(super) fn anonymous_as(len: usize, kind: Kind) -> Result<Mapping> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        // SAFETY: a fresh anonymous mapping at a free address; checked against
        // MAP_FAILED.
        let p = unsafe {
            if kind == Kind::Private {
                mappings::map_placed(len, prot, flags, -1, 0)
            } else {
                libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0)
            }
        };
        if p == libc::MAP_FAILED {
            return Err(Error::io(
                Path::new("<memory>"),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(Mapping {
            base: p.cast(),
            len,
            mode: MapMode::Anonymous,
            watch: None,
            registered: mappings::register(p.cast(), len, kind),
        })
    }

    /// A fresh file mapping, watched for faults (see [`fault`]).
    fn of_file(base: *mut u8, len: usize, mode: MapMode, path: &Path) -> Mapping {
        Mapping {
            base,
            len,
            mode,
            watch: Some(fault::watch(base, len, path)),
            registered: mappings::register(base, len, Kind::Pool),
        }
    }

    /// Private memory holding a copy of `img`. Crash checkers open hundreds of
    /// thousands of images: the memory of a dropped image mapping of up to
    /// `SPARE_MAX_LEN` bytes is kept for the next one of the same size on this thread,
    /// which saves the kernel a page fault per page (most of what an image costs).
    pub fn anonymous_copy(img: &[u8]) -> Result<Mapping> {
        let spare = SPARES.with(|s| {
            let mut s = s.borrow_mut();
            let i = s.0.iter().position(|&(_, len)| len == img.len())?;
            Some(s.0.swap_remove(i).0)
        });
        let map = match spare {
            Some(base) => Mapping {
                base,
                len: img.len(),
                mode: MapMode::Anonymous,
                watch: None,
                registered: mappings::register(base, img.len(), Kind::Pool),
            },
            None => Self::anonymous(img.len())?,
        };
        // SAFETY: the mapping is `img.len()` bytes long and owned by this new value
        // only (a spare is unmapped memory of no other `Mapping`); `img` is a separate
        // buffer. Every byte is overwritten, so a spare's old contents do not show.
        unsafe { std::ptr::copy_nonoverlapping(img.as_ptr(), map.base, img.len()) };
        Ok(map)
    }

    pub fn base(&self) -> *mut u8 {
        self.base
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn mode(&self) -> MapMode {
        self.mode
    }
}

/// Image mappings kept for reuse by `anonymous_copy` (at most this size and number per
/// thread).
const SPARE_MAX_LEN: usize = 8 << 20;
const SPARES_PER_THREAD: usize = 4;

/// A thread's spare mappings, unmapped when the thread ends.
struct Spares(Vec<(*mut u8, usize)>);

impl Drop for Spares {
    fn drop(&mut self) {
        for &(base, len) in &self.0 {
            // SAFETY: each spare came from a successful mmap of `len` bytes, and no
            // `Mapping` refers to it any more (it was moved here on drop).
            unsafe {
                mappings::unmap_own(base, len);
            }
        }
    }
}

thread_local! {
    static SPARES: std::cell::RefCell<Spares> = const { std::cell::RefCell::new(Spares(Vec::new())) };
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Unwatched and out of the registry first: once unmapped, the addresses may
        // be reused.
        drop(self.watch.take());
        drop(std::mem::replace(&mut self.registered, Registered::NONE));
        let (base, len) = (self.base, self.len);
        if self.mode == MapMode::Anonymous && len <= SPARE_MAX_LEN {
            let kept = SPARES
                .try_with(|s| {
                    let mut s = s.borrow_mut();
                    let room = s.0.len() < SPARES_PER_THREAD;
                    if room {
                        s.0.push((base, len));
                    }
                    room
                })
                .unwrap_or(false);
            if kept {
                return;
            }
        }
        // SAFETY: `base`/`len` came from a successful mmap and are unmapped once; no
        // `Pm` outlives its mapping (it owns it).
        unsafe {
            mappings::unmap_own(base, len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(m: &Mapping) -> Vec<u8> {
        // SAFETY: the mapping is `len` bytes of readable memory this test owns.
        unsafe { std::slice::from_raw_parts(m.base(), m.len()) }.to_vec()
    }

    #[test]
    fn a_reused_image_mapping_shows_only_the_new_image() {
        let a = vec![0xAAu8; 64 << 10];
        let b: Vec<u8> = (0..64 << 10).map(|i| i as u8).collect();
        let first = Mapping::anonymous_copy(&a).unwrap();
        let base = first.base();
        drop(first);
        let second = Mapping::anonymous_copy(&b).unwrap();
        assert_eq!(second.base(), base, "the spare was reused");
        assert_eq!(bytes(&second), b);
        // A zeroed mapping never comes from the spares.
        drop(second);
        assert!(bytes(&Mapping::anonymous(64 << 10).unwrap())
            .iter()
            .all(|&x| x == 0));
    }
}
