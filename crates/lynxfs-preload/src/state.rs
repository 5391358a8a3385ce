//! The process's view of its pool: which directory the pool answers for, the
//! attachment (made at the first call that needs it), the working directory when it
//! is inside the pool, the umask, and the caller's credentials.

use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, Session};

/// A caller of the pool: this process's credentials and a directory.
pub type Caller = Session<'static, PmemBackend>;
use parking_lot::RwLock;

/// The environment `lynxfs run` sets: the pool file, and the directory it answers for.
pub const ENV_POOL: &str = "LYNXFS_POOL";
pub const ENV_AT: &str = "LYNXFS_AT";
/// Set (to anything but "" or "0") for a program that will make many calls: it maps the
/// pool's shared runtime state in when it attaches, so its first calls do not each take
/// a page fault, at a cost (about 1.3 µs a page, 50 ms for a 4 GiB pool) that a short
/// program should not pay (docs/DESIGN-NOTES.md, "First touch and process start").
pub const ENV_POPULATE: &str = "LYNXFS_POPULATE";
/// "0" turns off the seal of the engine's mappings (`mseal`, see
/// `lynxfs::pmem::mappings`); the checks of the program's mapping calls stay.
pub const ENV_PROTECT: &str = "LYNXFS_PROTECT";
/// Set in the environment of a program exec'd or spawned by a process whose working
/// directory is inside the pool: that directory's path in the pool (the kernel's
/// own working directory cannot be there when no FUSE mount shows the pool). Read
/// at load ([`init`]); set by the exec and spawn calls (`calls::process`).
pub const ENV_CWD: &str = "LYNXFS_CWD";

/// Where the pool is, read once from the environment at load time (a program that
/// later changes its environment does not move the pool).
pub struct Config {
    pub pool: PathBuf,
    /// The directory the pool answers for: absolute, canonical, no trailing '/'
    /// (empty for "/").
    pub at: Vec<u8>,
    /// Whether to populate the runtime state at attach ([`ENV_POPULATE`]).
    pub populate: bool,
    /// Whether the engine's mappings are sealed once attached and put under a
    /// protection key where the CPU has them ([`ENV_PROTECT`]).
    pub protect: bool,
}

static CONFIG: OnceLock<Option<Config>> = OnceLock::new();

pub fn config() -> Option<&'static Config> {
    CONFIG.get_or_init(read_config).as_ref()
}

fn read_config() -> Option<Config> {
    let pool = std::env::var_os(ENV_POOL)?;
    let at = std::env::var_os(ENV_AT)?;
    let mut at = at.as_bytes().to_vec();
    while at.last() == Some(&b'/') {
        at.pop();
    }
    if !at.starts_with(b"/") && !at.is_empty() {
        return None;
    }
    let populate = std::env::var_os(ENV_POPULATE).is_some_and(|v| !v.is_empty() && v != "0");
    let protect = std::env::var_os(ENV_PROTECT).is_none_or(|v| v != "0");
    Some(Config {
        pool: PathBuf::from(pool),
        at,
        populate,
        protect,
    })
}

/// An attached pool.
pub struct Attached {
    pub fs: &'static Fs,
    /// The caller at the pool's root (paths from there, and `at` views for dirfds).
    pub root: RwLock<Caller>,
    /// The caller at its working directory, when that is inside the pool.
    pub cwd: RwLock<Caller>,
    /// The device number `stat` reports: the mount point's own (its FUSE mount's,
    /// when the pool is mounted there), so names seen with and without the preload
    /// agree.
    pub dev: u64,
}

/// The attachment, once made (a process stays attached until it exits). Made under
/// `attach_lock`, which a fork takes too (see there).
static ATTACHED: OnceLock<Attached> = OnceLock::new();
/// Why the last attach failed; read and written under `attach_lock` only.
static FAILED: parking_lot::Mutex<Option<Failure>> = parking_lot::Mutex::new(None);
/// Set when the working directory is inside the pool.
static CWD_IN_POOL: AtomicBool = AtomicBool::new(false);
/// The working directory inside the pool a program started in, by its path from the
/// pool's root, until the process attaches (see [`init`]).
static PENDING_CWD: parking_lot::Mutex<Option<Vec<u8>>> = parking_lot::Mutex::new(None);
static UMASK: AtomicU32 = AtomicU32::new(0o022);
/// Whether the attach failed (reported once).
static REPORTED: AtomicBool = AtomicBool::new(false);

/// The attached pool, attaching now if this is the first call that needs it. `None`
/// if there is no pool configured or it cannot be attached (see [`attachment`]).
pub fn attached() -> Option<&'static Attached> {
    attachment().ok()
}

/// The attached pool if this process attached already.
pub fn attached_now() -> Option<&'static Attached> {
    ATTACHED.get()
}

/// Why a process has no attachment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unattached {
    /// No pool configured, or the pool cannot be used (said once on stderr): its
    /// paths fail with EIO.
    Broken,
    /// The caller's credentials may not open the pool (its file is root's, 0600, and
    /// the process dropped root before its first pool call): its paths fail with this
    /// errno as the kernel's would, or go through the pool's mount where one serves
    /// the directory. Tried again once the credentials change.
    Denied(i32),
}

impl Unattached {
    pub fn errno(self) -> i32 {
        match self {
            Unattached::Broken => libc::EIO,
            Unattached::Denied(e) => e,
        }
    }
}

/// A failed attach, remembered so that each call does not try again.
enum Failure {
    Broken,
    /// Refused to `cred`: tried again by a thread whose credentials differ.
    Denied {
        errno: i32,
        cred: Cred,
    },
}

/// The attached pool, attaching now if this is the first call that needs it.
pub fn attachment() -> Result<&'static Attached, Unattached> {
    if let Some(a) = ATTACHED.get() {
        return Ok(a);
    }
    config().ok_or(Unattached::Broken)?;
    // Inside (holding a fork-gate pass) before the attach lock: a fork waits for the
    // pass, then takes the lock, so the two are always taken in this order.
    let _inside = crate::guard::Inside::enter();
    let _held = crate::attach_lock::lock();
    if let Some(a) = ATTACHED.get() {
        return Ok(a);
    }
    let mut failed = FAILED.lock();
    let me = crate::cred::read();
    match &*failed {
        Some(Failure::Broken) => return Err(Unattached::Broken),
        Some(Failure::Denied { errno, cred }) if *cred == me => {
            return Err(Unattached::Denied(*errno))
        }
        _ => {}
    }
    match attach(me.clone()) {
        Ok(a) => {
            let a = ATTACHED.get_or_init(|| a);
            // Each thread compares its credentials with the sessions' anew.
            crate::cred::all_changed();
            Ok(a)
        }
        Err(Unattached::Denied(errno)) => {
            *failed = Some(Failure::Denied { errno, cred: me });
            cwd_not_entered();
            Err(Unattached::Denied(errno))
        }
        Err(Unattached::Broken) => {
            *failed = Some(Failure::Broken);
            cwd_not_entered();
            Err(Unattached::Broken)
        }
    }
}

/// Whether the pool's directory is a FUSE mount (the pool's own, served by `lynxfs
/// mount`): a process that may not attach the pool reaches it through the kernel
/// there, as it would without this library.
pub fn mount_serves() -> bool {
    static MOUNTED: OnceLock<bool> = OnceLock::new();
    *MOUNTED.get_or_init(|| {
        let Some(c) = config().filter(|c| !c.at.is_empty()) else {
            return false;
        };
        let Ok(p) = std::ffi::CString::new(c.at.clone()) else {
            return false;
        };
        let mut st = std::mem::MaybeUninit::<libc::statfs64>::uninit();
        // SAFETY: a C string we own and a buffer of the right type.
        let r = unsafe { crate::real::statfs64(p.as_ptr(), st.as_mut_ptr()) };
        // SAFETY: statfs succeeded, so it filled `st`.
        r == 0 && unsafe { st.assume_init() }.f_type == FUSE_SUPER_MAGIC
    })
}

/// linux/magic.h's FUSE_SUPER_MAGIC.
const FUSE_SUPER_MAGIC: libc::c_long = 0x6573_5546;

/// Attaches as `cred` (the attaching thread's credentials).
fn attach(cred: Cred) -> Result<Attached, Unattached> {
    let c = config().ok_or(Unattached::Broken)?;
    let _inside = crate::guard::Inside::enter();
    match crate::own::recording_own(|| Fs::open(&c.pool)) {
        Ok(fs) => {
            let fs: &'static Fs = Box::leak(Box::new(fs));
            if c.populate {
                fs.pool().populate();
            } else {
                // A short-lived program: its new data goes to the pool file rather
                // than faulting in a fresh page at a time (pmem/through.rs).
                fs.pool().pm.start_write_through();
            }
            if c.protect {
                // The process keeps the pool until it exits: its mappings may be sealed.
                lynxfs::pmem::mappings::seal_all();
            }
            let session = |cred| {
                let mut s = fs.session(cred).mounted();
                s.set_umask(umask());
                RwLock::new(s)
            };
            let cwd = session(cred.clone());
            if let Some(rest) = PENDING_CWD.lock().take() {
                // Entered before the attachment is published: no thread sees the
                // working directory at the pool's root meanwhile.
                if cwd.write().chdir(&rest).is_err() {
                    set_cwd_in_pool(false);
                }
            }
            Ok(Attached {
                fs,
                root: session(cred),
                cwd,
                dev: mount_dev(&c.at, &c.pool),
            })
        }
        Err(e) => {
            let denied = matches!(e.errno(), libc::EACCES | libc::EPERM);
            if !REPORTED.swap(true, Ordering::Relaxed) {
                let also = if !denied {
                    ""
                } else if mount_serves() {
                    " (its paths go through the mount)"
                } else {
                    " (its paths answer that error)"
                };
                crate::real::say(&format!("{e}{also}"));
            }
            Err(if denied {
                Unattached::Denied(e.errno())
            } else {
                Unattached::Broken
            })
        }
    }
}

/// Every thread changed its ids (setuid and friends, which the C library applies to
/// each thread): the sessions take the calling thread's, and every thread reads its
/// own again at its next call.
pub fn ids_changed() {
    if let Some(a) = attached_now() {
        let c = crate::cred::read();
        a.root.write().cred = c.clone();
        a.cwd.write().cred = c;
    }
    crate::cred::all_changed();
}

/// Runs `f` with `s` as the calling thread: with its own credentials where they
/// differ from the session's (a thread that called setfsuid, or changed its ids by a
/// raw system call).
pub fn as_thread<R>(s: &Caller, f: impl FnOnce(&Caller) -> R) -> R {
    match crate::cred::differing(&s.cred) {
        None => f(s),
        Some(cred) => {
            let mut mine = s.at(s.cwd());
            mine.cred = cred;
            f(&mine)
        }
    }
}

/// [`as_thread`] for a session the call changes (a chdir's permission check).
pub fn as_thread_mut<R>(s: &mut Caller, f: impl FnOnce(&mut Caller) -> R) -> R {
    match crate::cred::differing(&s.cred) {
        None => f(s),
        Some(cred) => {
            let theirs = std::mem::replace(&mut s.cred, cred);
            let r = f(s);
            s.cred = theirs;
            r
        }
    }
}

/// Runs `f` with the calling thread's credentials (for calls on an fd, which take no
/// session).
pub fn with_cred<R>(a: &Attached, f: impl FnOnce(&Cred) -> R) -> R {
    let s = a.root.read();
    match crate::cred::differing(&s.cred) {
        None => f(&s.cred),
        Some(cred) => f(&cred),
    }
}

/// The device number of the pool's files: that of its FUSE mount when the pool's
/// directory is a mount point (so both views agree), else a number of its own (the
/// directory's file system must not seem to hold the pool's inode numbers: `rm -r`
/// compares them with the root's).
fn mount_dev(at: &[u8], pool: &std::path::Path) -> u64 {
    let at_dev = dev_of(if at.is_empty() { b"/" } else { at });
    let parent = match at.iter().rposition(|&c| c == b'/') {
        Some(0) | None => b"/".to_vec(),
        Some(i) => at[..i].to_vec(),
    };
    match at_dev {
        Some(d) if !at.is_empty() && Some(d) != dev_of(&parent) => d,
        _ => {
            use std::os::unix::fs::MetadataExt;
            let ino = std::fs::metadata(pool).map_or(0, |m| m.ino());
            // Major 0 is the kernel's for file systems without a device; minors from
            // the top of its 20-bit range, which it hands out last.
            libc::makedev(0, 0x80000 | (ino as u32 & 0x7ffff))
        }
    }
}

fn dev_of(path: &[u8]) -> Option<u64> {
    let c = std::ffi::CString::new(path).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: `c` is a valid C string and `st` a buffer of the right type.
    if unsafe { crate::real::stat64(c.as_ptr(), st.as_mut_ptr()) } == 0 {
        // SAFETY: stat succeeded, so it filled `st`.
        Some(unsafe { st.assume_init() }.st_dev)
    } else {
        None
    }
}

pub fn cwd_in_pool() -> bool {
    CWD_IN_POOL.load(Ordering::Acquire)
}

pub fn set_cwd_in_pool(on: bool) {
    if !on {
        PENDING_CWD.lock().take();
    }
    CWD_IN_POOL.store(on, Ordering::Release);
}

/// The working directory in the pool a program started in and has not entered yet
/// (it has not attached): its path from the pool's root.
pub fn pending_cwd() -> Option<Vec<u8>> {
    PENDING_CWD.lock().clone()
}

/// The pool could not be attached: a working directory in it that was not entered
/// yet is given up, as it was when the program started attached (relative paths go
/// to the kernel).
fn cwd_not_entered() {
    if PENDING_CWD.lock().take().is_some() {
        CWD_IN_POOL.store(false, Ordering::Release);
    }
}

pub fn umask() -> u32 {
    UMASK.load(Ordering::Relaxed)
}

/// The process's umask is now `m`: the sessions apply it to what they create.
pub fn set_umask(m: u32) {
    UMASK.store(m & 0o777, Ordering::Relaxed);
    if let Some(a) = attached_now() {
        a.root.write().set_umask(m);
        a.cwd.write().set_umask(m);
    }
}

/// At load: the umask, and the working directory if it is inside the pool (a
/// program started there, or exec'd by one that worked there). The directory is
/// entered by its path when the process attaches (its first pool call, a relative
/// path among them), not here: a program that never touches the pool never attaches
/// (docs/DESIGN-NOTES.md, "Process start in every placement"). A process attached
/// already (it took over its previous image's place) enters it now.
pub fn init() {
    set_umask(crate::real::kernel::read_umask());
    let Some(c) = config() else { return };
    // A preloaded parent working inside the pool said where; else the kernel's
    // working directory may be under the pool's directory (its mount).
    let inherited = std::env::var_os(ENV_CWD);
    let kernel = match inherited {
        Some(_) => None,
        None => crate::real::kernel::cwd(),
    };
    let rest = match (&inherited, &kernel) {
        (Some(p), _) => Some(p.as_bytes()),
        (None, Some(k)) => under(&c.at, k),
        (None, None) => None,
    };
    let Some(rest) = rest else { return };
    let rest = rest_or_dot(rest);
    if let Some(a) = attached_now() {
        if a.cwd.write().chdir(rest).is_ok() {
            set_cwd_in_pool(true);
        }
        return;
    }
    // At load: no other thread can be attaching.
    *PENDING_CWD.lock() = Some(rest.to_vec());
    set_cwd_in_pool(true);
}

/// What follows `at` in `path`, if `path` (absolute) names `at` or something under
/// it, compared component by component ("//" and "." ignored). A ".." before the
/// end of `at` leaves the question to the kernel.
pub fn under<'p>(at: &[u8], path: &'p [u8]) -> Option<&'p [u8]> {
    if !path.starts_with(b"/") {
        return None;
    }
    let mut want = at.split(|&c| c == b'/').filter(|c| !c.is_empty());
    let mut i = 0;
    let mut next = want.next();
    while let Some(w) = next {
        while i < path.len() && path[i] == b'/' {
            i += 1;
        }
        let start = i;
        while i < path.len() && path[i] != b'/' {
            i += 1;
        }
        let c = &path[start..i];
        if c == b"." {
            continue;
        }
        if c != w {
            return None;
        }
        next = want.next();
    }
    Some(&path[i..])
}

/// A pool path relative to the root: "." for the root itself.
pub fn rest_or_dot(rest: &[u8]) -> &[u8] {
    let r = trim_slashes(rest);
    if r.is_empty() {
        b"."
    } else {
        r
    }
}

fn trim_slashes(p: &[u8]) -> &[u8] {
    let start = p.iter().position(|&c| c != b'/').unwrap_or(p.len());
    &p[start..]
}

/// A NUL-terminated C path as bytes; `None` for a null pointer (the C library then
/// answers EFAULT itself).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that outlives the call.
pub unsafe fn cpath<'a>(p: *const libc::c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated, as the caller promises.
    Some(unsafe { CStr::from_ptr(p) }.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_compares_components() {
        assert_eq!(under(b"/mnt/lx", b"/mnt/lx"), Some(&b""[..]));
        assert_eq!(under(b"/mnt/lx", b"/mnt/lx/a/b"), Some(&b"/a/b"[..]));
        assert_eq!(under(b"/mnt/lx", b"//mnt/./lx//a"), Some(&b"//a"[..]));
        assert_eq!(under(b"/mnt/lx", b"/mnt/lxy/a"), None);
        assert_eq!(under(b"/mnt/lx", b"/mnt/../mnt/lx/a"), None);
        assert_eq!(under(b"/mnt/lx", b"mnt/lx"), None);
        assert_eq!(under(b"", b"/any"), Some(&b"/any"[..]));
    }
}
