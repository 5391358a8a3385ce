//! Which calls the pool serves: a path that resolves under the pool's directory (by
//! its text, relative to a working directory or directory fd inside the pool, or
//! entering the pool's directory from outside by name). Everything else goes to the C
//! library untouched.

use std::borrow::Cow;
use std::ffi::CString;
use std::sync::Arc;

use libc::{c_char, c_int};
use lynxfs::Error;

use crate::fds::{self, Open};
use crate::state::{self, Attached, Caller};

/// Symlinks and ".." can send a path out of the pool and back: at most this many
/// times (Linux's symlink limit), then ELOOP.
const MAX_CROSSINGS: u32 = 40;

/// Where a path is resolved from inside the pool.
pub enum Base {
    /// The pool's root (the path named the pool's directory).
    Root,
    /// The working directory, which is inside the pool.
    Cwd,
    /// An open directory of the pool (a dirfd).
    Dir(Arc<Open>),
}

impl Base {
    /// Whether two paths from these bases start in the same directory.
    pub fn same(&self, other: &Base) -> bool {
        match (self, other) {
            (Base::Root, Base::Root) | (Base::Cwd, Base::Cwd) => true,
            (Base::Dir(a), Base::Dir(b)) => a.ino == b.ino,
            _ => false,
        }
    }
}

pub enum Route<'p> {
    Kernel,
    Pool(Base, Cow<'p, [u8]>),
}

/// Where `path` (relative to `dirfd`) is served.
pub fn route(dirfd: c_int, path: &[u8]) -> Route<'_> {
    let Some(c) = state::config() else {
        return Route::Kernel;
    };
    if path.starts_with(b"/") {
        if let Some(rest) = state::under(&c.at, path) {
            return Route::Pool(Base::Root, Cow::Borrowed(state::rest_or_dot(rest)));
        }
    } else if dirfd == libc::AT_FDCWD {
        if state::cwd_in_pool() {
            return Route::Pool(Base::Cwd, Cow::Borrowed(path));
        }
    } else if let Some(o) = fds::get(dirfd) {
        return Route::Pool(Base::Dir(o), Cow::Borrowed(path));
    }
    match entering(&c.at, dirfd, path) {
        Some(rest) => Route::Pool(Base::Root, Cow::Owned(state::rest_or_dot(&rest).to_vec())),
        None => Route::Kernel,
    }
}

/// The components of `path` (empty ones and "." left out).
fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|&c| c == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
}

/// What follows the pool's directory in `path`, when `path` starts outside the pool
/// (from `dirfd`, a kernel directory) and reaches the pool's directory by its name:
/// relative from a working directory above it, through "..", or through a symlink
/// on the way (the kernel would go to the directory under the pool's instead, the
/// host file system's). The walk looks at the host directories only while the path
/// still to go names the pool's directory, so paths that cannot reach it cost nothing
/// more. A symlink outside the pool whose target leads into it, where the path
/// itself does not name the pool's directory, is the kernel's to follow.
fn entering(at: &[u8], dirfd: c_int, path: &[u8]) -> Option<Vec<u8>> {
    let name = at.rsplit(|&c| c == b'/').next().filter(|n| !n.is_empty())?;
    if !components(path).any(|c| c == name) {
        return None;
    }
    let mut cur = if path.starts_with(b"/") {
        Vec::new()
    } else {
        kernel_dir(dirfd)?
    };
    let mut rest = path.to_vec();
    let mut links = 0;
    loop {
        if !components(&rest).any(|c| c == name) {
            return None;
        }
        let start = rest.iter().position(|&c| c != b'/')?;
        let end = rest[start..]
            .iter()
            .position(|&c| c == b'/')
            .map_or(rest.len(), |i| start + i);
        let comp = rest[start..end].to_vec();
        rest.drain(..end);
        match comp.as_slice() {
            b"." => continue,
            b".." => {
                let up = cur.iter().rposition(|&c| c == b'/').unwrap_or(0);
                cur.truncate(up);
                continue;
            }
            _ => {}
        }
        let mut cand = cur.clone();
        cand.push(b'/');
        cand.extend_from_slice(&comp);
        if cand == at {
            return Some(rest);
        }
        match host_entry(&cand)? {
            Host::Dir => cur = cand,
            Host::Link(target) => {
                links += 1;
                if links > MAX_CROSSINGS {
                    return None;
                }
                if target.starts_with(b"/") {
                    cur.clear();
                }
                let mut r = target;
                r.push(b'/');
                r.extend_from_slice(&rest);
                rest = r;
            }
        }
    }
}

/// What a host path is, for the walk of [`entering`]: anything else (missing, not a
/// directory) ends the walk, the kernel then saying why.
enum Host {
    Dir,
    Link(Vec<u8>),
}

fn host_entry(path: &[u8]) -> Option<Host> {
    let c = CString::new(path).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: a C string we own and a buffer of the right type.
    if unsafe {
        crate::real::fstatat64(
            libc::AT_FDCWD,
            c.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    } != 0
    {
        return None;
    }
    // SAFETY: fstatat succeeded, so it filled `st`.
    match unsafe { st.assume_init() }.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Some(Host::Dir),
        libc::S_IFLNK => read_link(&c).map(Host::Link),
        _ => None,
    }
}

/// A symlink's target, read by the C library.
fn read_link(c: &CString) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a C string we own and a buffer of `buf.len()` bytes.
    let n = unsafe {
        crate::real::readlinkat(
            libc::AT_FDCWD,
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).ok().filter(|&n| n < buf.len())?;
    buf.truncate(n);
    Some(buf)
}

/// The absolute path of a kernel directory a relative path starts from: the working
/// directory, or the directory `dirfd` is open on (as the kernel names it; a
/// removed one has no path).
fn kernel_dir(dirfd: c_int) -> Option<Vec<u8>> {
    let p = if dirfd == libc::AT_FDCWD {
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: a buffer of `buf.len()` bytes; the C library's own getcwd.
        let r = unsafe { crate::real::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
        if r.is_null() {
            return None;
        }
        let n = buf.iter().position(|&c| c == 0)?;
        buf.truncate(n);
        buf
    } else {
        let link = CString::new(format!("/proc/self/fd/{dirfd}")).ok()?;
        read_link(&link)?
    };
    if !p.starts_with(b"/") || p.ends_with(b" (deleted)") {
        return None;
    }
    // The root is the empty path here (components are appended with their '/').
    Some(if p == b"/" { Vec::new() } else { p })
}

/// Runs `f` with the caller positioned at `base`.
pub fn with_base<R>(a: &Attached, base: &Base, f: impl FnOnce(&Caller) -> R) -> R {
    match base {
        Base::Root => state::as_thread(&a.root.read(), f),
        Base::Cwd => state::as_thread(&a.cwd.read(), f),
        Base::Dir(o) => state::as_thread(&a.root.read().at(o.ino), f),
    }
}

/// The absolute path a path that left the pool continues at: as given if absolute,
/// else relative to the pool's directory ("../x" from the pool's root is "x" in the
/// directory above it).
fn outside_path(at: &[u8], rest: Vec<u8>) -> Vec<u8> {
    if rest.starts_with(b"/") {
        return rest;
    }
    let parent = match at.iter().rposition(|&c| c == b'/') {
        Some(i) => &at[..i],
        None => &at[..0],
    };
    let mut p = parent.to_vec();
    // `rest` starts with "..", the step up from `at` just taken.
    let after = &rest[2..];
    if !after.is_empty() && !after.starts_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(after);
    if p.is_empty() {
        p.push(b'/');
    }
    p
}

pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// A value for failure (-1) of a C call's return type.
pub trait Fail: Copy {
    const FAIL: Self;
}
impl Fail for c_int {
    const FAIL: Self = -1;
}
impl Fail for isize {
    const FAIL: Self = -1;
}
impl Fail for i64 {
    const FAIL: Self = -1;
}

/// Serves a call on one path: `pool` in the pool, `kernel` (the C library, given a
/// dirfd and a path) otherwise, following the path out of the pool and back as
/// symlinks and ".." lead it. Errors of the pool set errno and give -1.
///
/// # Safety
/// `path` is null or a NUL-terminated string valid for the call.
pub unsafe fn at_path<R: Fail>(
    dirfd: c_int,
    path: *const c_char,
    pool: impl FnMut(&Caller, &[u8]) -> lynxfs::Result<R>,
    kernel: impl FnOnce(c_int, *const c_char) -> R,
) -> R {
    if crate::guard::inside() {
        return kernel(dirfd, path);
    }
    let _inside = crate::guard::Inside::enter();
    // SAFETY: as this function's contract.
    unsafe { follow(dirfd, path, pool, kernel) }
}

/// [`at_path`] for a caller already inside this library (which has entered
/// [`crate::guard::Inside`]).
///
/// # Safety
/// `path` is null or a NUL-terminated string valid for the call.
pub unsafe fn follow<R: Fail>(
    dirfd: c_int,
    path: *const c_char,
    mut pool: impl FnMut(&Caller, &[u8]) -> lynxfs::Result<R>,
    kernel: impl FnOnce(c_int, *const c_char) -> R,
) -> R {
    // SAFETY: as this function's contract.
    let Some(bytes) = (unsafe { state::cpath(path) }) else {
        return kernel(dirfd, path);
    };
    // The path once it left the pool: absolute, so from the process's root.
    let mut cur: Option<CString> = None;
    for _ in 0..MAX_CROSSINGS {
        let p = cur.as_ref().map_or(bytes, |c| c.to_bytes());
        let fd = if cur.is_some() { libc::AT_FDCWD } else { dirfd };
        let rest = match route(fd, p) {
            Route::Kernel => return kernel(fd, cur.as_ref().map_or(path, |c| c.as_ptr())),
            Route::Pool(base, rel) => {
                let a = match state::attachment() {
                    Ok(a) => a,
                    // Not attached, so the path is the caller's own, as given.
                    Err(state::Unattached::Denied(_)) if state::mount_serves() => {
                        return kernel(dirfd, path)
                    }
                    Err(u) => {
                        set_errno(u.errno());
                        return R::FAIL;
                    }
                };
                match crate::guard::on_live_thread(|| with_base(a, &base, |s| pool(s, &rel))) {
                    Ok(v) => return v,
                    Err(Error::Outside(rest)) => rest,
                    Err(e) => {
                        set_errno(e.errno());
                        return R::FAIL;
                    }
                }
            }
        };
        let c = state::config().expect("attached, so configured");
        match CString::new(outside_path(&c.at, rest)) {
            Ok(c) => cur = Some(c),
            Err(_) => {
                set_errno(libc::EINVAL);
                return R::FAIL;
            }
        }
    }
    set_errno(libc::ELOOP);
    R::FAIL
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaving_the_pool_continues_above_its_directory() {
        assert_eq!(outside_path(b"/mnt/lx", b"..".to_vec()), b"/mnt");
        assert_eq!(outside_path(b"/mnt/lx", b"../x/y".to_vec()), b"/mnt/x/y");
        assert_eq!(outside_path(b"/lx", b"../x".to_vec()), b"/x");
        assert_eq!(outside_path(b"/lx", b"..".to_vec()), b"/");
        assert_eq!(
            outside_path(b"/mnt/lx", b"/etc/passwd".to_vec()),
            b"/etc/passwd"
        );
    }
}
