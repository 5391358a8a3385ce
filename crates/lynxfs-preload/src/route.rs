//! Which calls the pool serves: a path under the pool's directory (by its text, or
//! relative to a working directory or directory fd inside the pool). Everything else
//! goes to the C library untouched.

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
    Pool(Base, &'p [u8]),
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

/// Where `path` (relative to `dirfd`) is served.
pub fn route(dirfd: c_int, path: &[u8]) -> Route<'_> {
    let Some(c) = state::config() else {
        return Route::Kernel;
    };
    if path.starts_with(b"/") {
        return match under(&c.at, path) {
            Some(rest) => Route::Pool(Base::Root, state::rest_or_dot(rest)),
            None => Route::Kernel,
        };
    }
    if dirfd == libc::AT_FDCWD {
        return if state::cwd_in_pool() {
            Route::Pool(Base::Cwd, path)
        } else {
            Route::Kernel
        };
    }
    match fds::get(dirfd) {
        Some(o) => Route::Pool(Base::Dir(o), path),
        None => Route::Kernel,
    }
}

/// Runs `f` with the caller positioned at `base`.
pub fn with_base<R>(a: &Attached, base: &Base, f: impl FnOnce(&Caller) -> R) -> R {
    match base {
        Base::Root => f(&a.root.read()),
        Base::Cwd => f(&a.cwd.read()),
        Base::Dir(o) => f(&a.root.read().at(o.ino)),
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
    mut pool: impl FnMut(&Caller, &[u8]) -> lynxfs::Result<R>,
    kernel: impl FnOnce(c_int, *const c_char) -> R,
) -> R {
    if crate::guard::inside() {
        return kernel(dirfd, path);
    }
    // SAFETY: as this function's contract.
    let Some(bytes) = (unsafe { state::cpath(path) }) else {
        return kernel(dirfd, path);
    };
    let _inside = crate::guard::Inside::enter();
    // The path once it left the pool: absolute, so from the process's root.
    let mut cur: Option<CString> = None;
    for _ in 0..MAX_CROSSINGS {
        let p = cur.as_ref().map_or(bytes, |c| c.to_bytes());
        let fd = if cur.is_some() { libc::AT_FDCWD } else { dirfd };
        let rest = match route(fd, p) {
            Route::Kernel => return kernel(fd, cur.as_ref().map_or(path, |c| c.as_ptr())),
            Route::Pool(base, rel) => {
                let Some(a) = state::attached() else {
                    set_errno(libc::EIO);
                    return R::FAIL;
                };
                match crate::guard::on_live_thread(|| with_base(a, &base, |s| pool(s, rel))) {
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
    fn under_compares_components() {
        assert_eq!(under(b"/mnt/lx", b"/mnt/lx"), Some(&b""[..]));
        assert_eq!(under(b"/mnt/lx", b"/mnt/lx/a/b"), Some(&b"/a/b"[..]));
        assert_eq!(under(b"/mnt/lx", b"//mnt/./lx//a"), Some(&b"//a"[..]));
        assert_eq!(under(b"/mnt/lx", b"/mnt/lxy/a"), None);
        assert_eq!(under(b"/mnt/lx", b"/mnt/../mnt/lx/a"), None);
        assert_eq!(under(b"/mnt/lx", b"mnt/lx"), None);
        assert_eq!(under(b"", b"/any"), Some(&b"/any"[..]));
    }

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
