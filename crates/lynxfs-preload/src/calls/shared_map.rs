//! Shared mappings of pool files when no FUSE mount shows the pool (the kernel has no
//! file to map). Every process of a user that maps a pool file maps one and the same
//! memory file for it, so their mappings see each other's stores at once, as mappings
//! of one file do (sqlite's WAL index, the "-shm" file, needs exactly that). The
//! memory file is loaded from the pool file by the first mapper (no other mapping of
//! it alive), and its bytes are written back to the pool file at msync, munmap, exec
//! and exit. The memory files live in `maps/` in the pool's session directory
//! (`lynxfs::runtime::attach`: made by the pool's first attacher, mode 0700, under a
//! name nobody can predict in `/dev/shm` or `$LYNXFS_RUNTIME_DIR`), so nobody else can
//! plant, read or stand in the way of them; the last process to detach removes them.
//! Every process attached to a pool runs as one user, so all of them share them.

use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use libc::{c_int, c_void, off64_t, size_t};
use parking_lot::Mutex;

use super::err;
use super::hooks::ProcessHooks;
use crate::fds::Open;
use crate::real;
use crate::state::{self, Attached};

/// One memory file, open for one or more mappings (its fd holds a shared flock: the
/// file is in use while any process holds one).
struct Backing {
    fd: c_int,
    name: CString,
}

impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: the fd this value owns; closing it drops its flock.
        unsafe { real::close(self.fd) };
        remove_if_unused(&self.name);
    }
}

/// A mapping made here: [start, start + len) maps the pool file `open` from `off`.
struct Map {
    start: usize,
    len: usize,
    off: u64,
    open: Arc<Open>,
    backing: Arc<Backing>,
}

static MAPS: Mutex<Vec<Map>> = Mutex::new(Vec::new());
/// How many mappings MAPS holds: munmap and msync look no further when none.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The directory of memory files, `maps/` in the pool's session directory: made 0700
/// if missing (by the first process of the session that maps a pool file); refused if
/// it is not a directory of the caller's that only the caller can reach (nobody else
/// can enter the session directory: this is a check that costs one fstat).
fn dir() -> Option<c_int> {
    static DIR: OnceLock<Option<c_int>> = OnceLock::new();
    *DIR.get_or_init(|| {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        // The session stays while this process is attached, which it is until it exits.
        let session = state::attachment().ok()?.fs.session_dir()?;
        let path = CString::new(session.join("maps").as_os_str().as_bytes()).ok()?;
        // SAFETY: a C string we own (the real call: not a path of the pool's). An
        // existing entry is checked below.
        unsafe { real::mkdirat(libc::AT_FDCWD, path.as_ptr(), 0o700) };
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a C string we own.
        let fd = unsafe { real::openat64(libc::AT_FDCWD, path.as_ptr(), flags, 0) };
        if fd < 0 {
            real::say(&format!(
                "{}: {}",
                path.to_string_lossy(),
                std::io::Error::last_os_error()
            ));
            return None;
        }
        let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
        // SAFETY: fstat of our own fd into a buffer of the right type.
        let ok = unsafe { real::fstat64(fd, st.as_mut_ptr()) } == 0 && {
            // SAFETY: fstat succeeded.
            let st = unsafe { st.assume_init() };
            st.st_uid == uid && st.st_mode & 0o077 == 0
        };
        if !ok {
            real::say(&format!(
                "{}: not a directory of this user's alone: shared mappings of pool files \
                 without a mount are refused (ENODEV)",
                path.to_string_lossy()
            ));
            // SAFETY: our own fd.
            unsafe { real::close(fd) };
            return None;
        }
        Some(fd)
    })
}

/// The memory file's name for inode `ino` of this pool.
fn name_for(ino: u64) -> Option<CString> {
    static POOL: OnceLock<(u64, u64)> = OnceLock::new();
    let (dev, pino) = *POOL.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        state::config()
            .and_then(|c| std::fs::metadata(&c.pool).ok())
            .map_or((0, 0), |m| (m.dev(), m.ino()))
    });
    CString::new(format!("{dev:x}-{pino:x}-{ino:x}")).ok()
}

/// Holds the directory's flock while memory files are set up or removed, so that a
/// file is loaded, or removed, by one process while no other starts using it.
struct DirLock(c_int);

impl DirLock {
    fn take(dir: c_int) -> DirLock {
        // SAFETY: flock on our own directory fd; blocking, held briefly.
        unsafe { libc::flock(dir, libc::LOCK_EX) };
        DirLock(dir)
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::flock(self.0, libc::LOCK_UN) };
    }
}

/// Removes a memory file nobody uses any more (its bytes are in the pool file).
fn remove_if_unused(name: &CString) {
    let Some(dir) = dir() else { return };
    let _lock = DirLock::take(dir);
    let flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a C string we own, in our own directory.
    let fd = unsafe { real::openat64(dir, name.as_ptr(), flags, 0) };
    if fd < 0 {
        return;
    }
    // SAFETY: flock and unlink of our own file; the fd is closed after.
    unsafe {
        if libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) == 0 {
            real::unlinkat(dir, name.as_ptr(), 0);
        }
        real::close(fd);
    }
}

/// The memory file for pool file `o`, loaded from it if no mapping of it is alive,
/// at least `end` bytes long.
fn backing(a: &Attached, o: &Open, end: u64) -> lynxfs::Result<Backing> {
    let dir = dir().ok_or(err(libc::ENODEV))?;
    let name = name_for(o.ino).ok_or(err(libc::ENODEV))?;
    let _lock = DirLock::take(dir);
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a C string we own, in our own directory.
    let fd = unsafe { real::openat64(dir, name.as_ptr(), flags, 0o600) };
    if fd < 0 {
        return Err(err(errno()));
    }
    let b = Backing { fd, name };
    // SAFETY: flock on our own fd.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        load(a, o, fd)?;
    }
    // SAFETY: flock on our own fd (converts an exclusive lock held).
    if unsafe { libc::flock(fd, libc::LOCK_SH) } != 0 {
        return Err(err(errno()));
    }
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: fstat of our own fd into a buffer of the right type.
    if unsafe { real::fstat64(fd, st.as_mut_ptr()) } != 0 {
        return Err(err(errno()));
    }
    // SAFETY: fstat succeeded.
    let size = unsafe { st.assume_init() }.st_size as u64;
    // SAFETY: growing our own file (a mapping past its end would fault).
    if size < end && unsafe { libc::ftruncate(fd, end as off64_t) } != 0 {
        return Err(err(errno()));
    }
    Ok(b)
}

/// Copies the pool file's bytes into memory file `fd`, which held others before.
fn load(a: &Attached, o: &Open, fd: c_int) -> lynxfs::Result<()> {
    // SAFETY: truncating our own file.
    if unsafe { libc::ftruncate(fd, 0) } != 0 {
        return Err(err(errno()));
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = a.fs.pread(o.handle, &mut buf, off)?;
        if n == 0 {
            return Ok(());
        }
        let mut done = 0;
        while done < n {
            // SAFETY: our own buffer, written to our own file.
            let w = unsafe {
                real::pwrite64(
                    fd,
                    buf[done..n].as_ptr().cast(),
                    n - done,
                    (off + done as u64) as off64_t,
                )
            };
            if w <= 0 {
                return Err(err(errno()));
            }
            done += w as usize;
        }
        off += n as u64;
    }
}

/// A shared mapping of pool file `o` through its memory file.
///
/// # Safety
/// As mmap's.
pub unsafe fn map(
    a: &Attached,
    o: &Arc<Open>,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off64_t,
) -> lynxfs::Result<*mut c_void> {
    let start = u64::try_from(off).map_err(|_| err(libc::EINVAL))?;
    if len == 0 {
        return Err(err(libc::EINVAL));
    }
    let writable = a.fs.status_flags(o.handle)? & libc::O_ACCMODE != libc::O_RDONLY;
    if prot & libc::PROT_WRITE != 0 && !writable {
        return Err(err(libc::EACCES));
    }
    let b = backing(a, o, start + len as u64)?;
    // SAFETY: the C library's mmap of our memory file, with the caller's arguments.
    let p = unsafe { real::mmap64(addr, len, prot, flags, b.fd, off) };
    if p == libc::MAP_FAILED {
        return Err(err(errno()));
    }
    MAPS.lock().push(Map {
        start: p as usize,
        len,
        off: start,
        open: o.clone(),
        backing: Arc::new(b),
    });
    COUNT.fetch_add(1, Ordering::Release);
    Ok(p)
}

/// Writes [from, to) of mapping `m` (addresses) back to its pool file, up to the
/// file's end (a mapping may reach past it; the file does not grow).
fn write_back(a: &Attached, m: &Map, from: usize, to: usize) {
    let Ok(size) = a.fs.fstat(m.open.handle).map(|st| st.size) else {
        return;
    };
    let mut at = m.off + (from - m.start) as u64;
    let end = (m.off + (to - m.start) as u64).min(size);
    let mut buf = vec![0u8; 1 << 20];
    while at < end {
        let n = ((end - at) as usize).min(buf.len());
        // SAFETY: reading our own memory file into our own buffer (the mapping
        // itself may not be readable).
        let got = unsafe { real::pread64(m.backing.fd, buf.as_mut_ptr().cast(), n, at as off64_t) };
        if got <= 0 {
            return;
        }
        let got = got as usize;
        if a.fs.pwrite(m.open.handle, &buf[..got], at).is_err() {
            return;
        }
        at += got as u64;
    }
}

/// The page-rounded range [addr, addr + len).
fn range(addr: *mut c_void, len: size_t) -> (usize, usize) {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize;
    let from = addr as usize;
    (from, from.saturating_add(len.div_ceil(page) * page))
}

/// Writes back what [addr, addr + len) maps of pool files; with `unmap`, those
/// mappings (or their parts in the range) are forgotten: returned, to be dropped once
/// the kernel's mapping is gone (it holds the memory file's flock until then).
fn settle(addr: *mut c_void, len: size_t, unmap: bool) -> Vec<Map> {
    let mut gone = Vec::new();
    if COUNT.load(Ordering::Acquire) == 0 || crate::guard::inside() {
        return gone;
    }
    let Some(a) = state::attached_now() else {
        return gone;
    };
    let _inside = crate::guard::Inside::enter();
    let (from, to) = range(addr, len);
    let mut maps = MAPS.lock();
    let mut kept = Vec::with_capacity(maps.len());
    for m in maps.drain(..) {
        let (s, e) = (m.start, m.start + m.len);
        if e <= from || s >= to {
            kept.push(m);
            continue;
        }
        crate::guard::on_live_thread(|| write_back(a, &m, from.max(s), to.min(e)));
        if !unmap {
            kept.push(m);
            continue;
        }
        // The parts outside the range stay mapped.
        if s < from {
            kept.push(Map {
                len: from - s,
                open: m.open.clone(),
                backing: m.backing.clone(),
                ..m
            });
        }
        if e > to {
            kept.push(Map {
                start: to,
                len: e - to,
                off: m.off + (to - s) as u64,
                open: m.open.clone(),
                backing: m.backing.clone(),
            });
        }
        gone.push(m);
    }
    COUNT.store(kept.len(), Ordering::Release);
    *maps = kept;
    gone
}

/// The shared mappings' part at exit: every mapping's bytes go back to its pool
/// file.
pub struct MapHooks;

impl ProcessHooks for MapHooks {
    fn detaching(&self, a: &Attached) {
        for m in MAPS.lock().iter() {
            write_back(a, m, m.start, m.start + m.len);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if super::maps::refused("munmap", addr, len) {
        return -1;
    }
    let gone = settle(addr, len, true);
    // SAFETY: the C library's munmap with the caller's arguments.
    let r = unsafe { real::munmap(addr, len) };
    let _inside = crate::guard::Inside::enter();
    drop(gone);
    r
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    drop(settle(addr, len, false));
    // SAFETY: the C library's msync with the caller's arguments.
    unsafe { real::msync(addr, len, flags) }
}
