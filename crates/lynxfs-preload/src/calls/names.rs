//! Calls that make, remove, rename and change named files.

use std::sync::Arc;

use libc::{c_char, c_int, c_uint, mode_t, size_t, ssize_t};
use lynxfs::{SetAttr, TimeSet};

use super::{buf_mut, err, on_fd};
use crate::conv;
use crate::fds;
use crate::real;
use crate::route::{self, at_path, set_errno, with_base, Base, Route};
use crate::state::{self, Caller};

#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| s.mkdir(p, mode).map(|()| 0),
            |fd, p| real::mkdirat(fd, p, mode),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mkdirat(libc::AT_FDCWD, path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| s.mknod(p, mode, dev).map(|()| 0),
            |fd, p| real::mknodat(fd, p, mode, dev),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mknodat(libc::AT_FDCWD, path, mode, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mknodat(dirfd, path, libc::S_IFIFO | (mode & 0o7777), 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { mkfifoat(libc::AT_FDCWD, path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if flags & !libc::AT_REMOVEDIR != 0 {
        // The kernel checks the flags before the path.
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| {
                if flags & libc::AT_REMOVEDIR != 0 {
                    s.rmdir(p).map(|()| 0)
                } else {
                    s.unlink(p).map(|()| 0)
                }
            },
            |fd, p| real::unlinkat(fd, p, flags),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { unlinkat(libc::AT_FDCWD, path, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { unlinkat(libc::AT_FDCWD, path, libc::AT_REMOVEDIR) }
}

/// A path of the pool from its root, for calls naming two paths (one caller view
/// for both).
fn from_root(a: &state::Attached, base: &Base, rel: &[u8]) -> lynxfs::Result<Vec<u8>> {
    let dir = match base {
        Base::Root => return Ok(rel.to_vec()),
        Base::Cwd => a.cwd.read().cwd(),
        Base::Dir(o) => o.ino,
    };
    let mut p = a.fs.path_of(dir)?;
    p.push(b'/');
    p.extend_from_slice(rel);
    // The root-relative form: no leading '/' (that would leave the pool).
    Ok(state::rest_or_dot(&p).to_vec())
}

/// A call on two paths: both in the pool (served there, EXDEV if one leaves it),
/// both outside (the C library), or one each (EXDEV, as across file systems).
///
/// # Safety
/// The paths are null or valid C strings.
unsafe fn two_paths(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    pool: impl FnOnce(&Caller, &[u8], &[u8]) -> lynxfs::Result<()>,
    kernel: impl FnOnce() -> c_int,
) -> c_int {
    if crate::guard::inside() {
        return kernel();
    }
    // SAFETY: the caller's paths.
    let (Some(o), Some(n)) = (unsafe { state::cpath(old) }, unsafe { state::cpath(new) }) else {
        return kernel();
    };
    let _inside = crate::guard::Inside::enter();
    match (route::route(od, o), route::route(nd, n)) {
        (Route::Kernel, Route::Kernel) => kernel(),
        (Route::Pool(ob, orel), Route::Pool(nb, nrel)) => {
            let a = match state::attachment() {
                Ok(a) => a,
                Err(state::Unattached::Denied(_)) if state::mount_serves() => return kernel(),
                Err(u) => {
                    set_errno(u.errno());
                    return -1;
                }
            };
            let r = if ob.same(&nb) {
                // One starting directory for both: no need to spell either out.
                with_base(a, &ob, |s| pool(s, &orel, &nrel))
            } else {
                from_root(a, &ob, &orel)
                    .and_then(|o| Ok((o, from_root(a, &nb, &nrel)?)))
                    .and_then(|(o, n)| state::as_thread(&a.root.read(), |s| pool(s, &o, &n)))
            };
            match r {
                Ok(()) => 0,
                Err(lynxfs::Error::Outside(_)) => {
                    set_errno(libc::EXDEV);
                    -1
                }
                Err(e) => {
                    set_errno(e.errno());
                    -1
                }
            }
        }
        _ => {
            set_errno(libc::EXDEV);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe {
        two_paths(
            od,
            old,
            nd,
            new,
            |s, o, n| s.rename(o, n, flags),
            || real::renameat2(od, old, nd, new, flags),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { renameat2(od, old, nd, new, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { renameat2(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn linkat(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    if let Some(o) = linked_fd(od, old, flags) {
        // SAFETY: the caller's arguments.
        return unsafe { link_open(&o, nd, new) };
    }
    // SAFETY: the caller's paths (NULL gives None).
    if unsafe { state::cpath(old) } == Some(b"") {
        // No file named (ENOENT) or EINVAL for bad flags: the kernel says which, as it
        // would for a descriptor of its own.
        // SAFETY: the caller's arguments.
        return unsafe { real::linkat(od, old, nd, new, flags) };
    }
    // SAFETY: the caller's arguments.
    unsafe {
        two_paths(
            od,
            old,
            nd,
            new,
            |s, o, n| {
                if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) != 0 {
                    return Err(err(libc::EINVAL));
                }
                if flags & libc::AT_SYMLINK_FOLLOW != 0 {
                    let ino = s.resolve(o, true)?;
                    if ino != s.resolve(o, false)? {
                        return link_ino(s, ino, n);
                    }
                }
                s.link(o, n)
            },
            || real::linkat(od, old, nd, new, flags),
        )
    }
}

/// The open file of the pool a linkat names by descriptor, if it does: `fd` with an
/// empty path and AT_EMPTY_PATH, or the "/proc/self/fd/N" (also "/proc/PID/fd/N" of
/// this process and "/dev/fd/N") that programs follow with AT_SYMLINK_FOLLOW to name
/// an `O_TMPFILE` file; the kernel's magic link would lead to the library's stand-in.
fn linked_fd(fd: c_int, old: *const c_char, flags: c_int) -> Option<Arc<fds::Open>> {
    if crate::guard::inside() {
        return None;
    }
    // SAFETY: the caller's path (NULL gives None).
    let p = unsafe { state::cpath(old) }?;
    if p.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
        return fds::get(fd);
    }
    if flags & libc::AT_SYMLINK_FOLLOW == 0 {
        return None;
    }
    // SAFETY: getpid has no preconditions.
    let pid = format!("/proc/{}/fd/", unsafe { libc::getpid() });
    let n = [&b"/proc/self/fd/"[..], pid.as_bytes(), b"/dev/fd/"]
        .iter()
        .find_map(|pre| p.strip_prefix(*pre))?;
    let n: c_int = std::str::from_utf8(n).ok()?.parse().ok()?;
    fds::get(n)
}

/// linkat of open file `o` as `new` (from `nd`): EXDEV when `new` is outside the pool.
///
/// # Safety
/// `new` is null or a valid C string.
unsafe fn link_open(o: &fds::Open, nd: c_int, new: *const c_char) -> c_int {
    // SAFETY: the caller's path.
    unsafe {
        at_path(
            nd,
            new,
            |s, n| s.link_fd(o.handle, n).map(|()| 0),
            |_, _| {
                set_errno(libc::EXDEV);
                -1
            },
        )
    }
}

/// linkat with AT_SYMLINK_FOLLOW on a symlink: links the inode it names, `ino`, as
/// `new` (a path from the pool's root).
fn link_ino(s: &Caller, ino: u64, new: &[u8]) -> lynxfs::Result<()> {
    let trimmed = new.strip_suffix(b"/").unwrap_or(new);
    let (dir, name) = match trimmed.iter().rposition(|&c| c == b'/') {
        Some(i) => (&trimmed[..=i], &trimmed[i + 1..]),
        None => (&b"."[..], trimmed),
    };
    if name.is_empty() || name == b"." || name == b".." || trimmed.len() != new.len() {
        return Err(err(libc::EEXIST));
    }
    let parent = s.resolve(dir, true)?;
    if s.fs().ns().lookup(parent, name, &s.cred).is_ok() {
        return Err(err(libc::EEXIST));
    }
    s.fs().link_in(ino, parent, name, &s.cred)
}

#[no_mangle]
pub unsafe extern "C" fn link(old: *const c_char, new: *const c_char) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { linkat(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn symlinkat(target: *const c_char, nd: c_int, new: *const c_char) -> c_int {
    // SAFETY: the caller's strings.
    let Some(t) = (unsafe { state::cpath(target) }) else {
        // SAFETY: the C library answers EFAULT.
        return unsafe { real::symlinkat(target, nd, new) };
    };
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            nd,
            new,
            |s, p| s.symlink(t, p).map(|()| 0),
            |fd, p| real::symlinkat(target, fd, p),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, new: *const c_char) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { symlinkat(target, libc::AT_FDCWD, new) }
}

#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    b: *mut c_char,
    n: size_t,
) -> ssize_t {
    if n == 0 {
        // The kernel checks the size before the path.
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| {
                let t = s.readlink(p)?;
                let k = t.len().min(n);
                buf_mut(b.cast(), k)?.copy_from_slice(&t[..k]);
                Ok(k as ssize_t)
            },
            |fd, p| real::readlinkat(fd, p, b, n),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, b: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { readlinkat(libc::AT_FDCWD, path, b, n) }
}

#[no_mangle]
pub unsafe extern "C" fn __readlink_chk(
    path: *const c_char,
    b: *mut c_char,
    n: size_t,
    _l: size_t,
) -> ssize_t {
    // SAFETY: forwarded as received.
    unsafe { readlinkat(libc::AT_FDCWD, path, b, n) }
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: libc::off64_t) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            libc::AT_FDCWD,
            path,
            |s, p| {
                let len = u64::try_from(len).map_err(|_| err(libc::EINVAL))?;
                s.truncate(p, len).map(|()| 0)
            },
            |_, p| real::truncate64(p, len),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: libc::off64_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { truncate64(path, len) }
}

/// Changes attributes of what `p` names (the link itself with `nofollow`).
fn setattr_path(s: &Caller, p: &[u8], nofollow: bool, a: &SetAttr) -> lynxfs::Result<c_int> {
    s.on_held(p, !nofollow, |ino| s.fs().ns().set_attrs(ino, a, &s.cred))
        .map(|_| 0)
}

#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| {
                if nofollow {
                    let a = SetAttr {
                        mode: Some(mode),
                        ..Default::default()
                    };
                    return s
                        .on_held(p, false, |ino| {
                            if s.fs().mode(ino) & libc::S_IFMT == libc::S_IFLNK {
                                return Err(err(libc::EOPNOTSUPP));
                            }
                            s.fs().ns().set_attrs(ino, &a, &s.cred)
                        })
                        .map(|_| 0);
                }
                s.chmod(p, mode).map(|()| 0)
            },
            |fd, p| real::fchmodat(fd, p, mode, flags),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fchmodat(libc::AT_FDCWD, path, mode, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    on_fd(
        fd,
        |a, o| {
            let s = SetAttr {
                mode: Some(mode),
                ..Default::default()
            };
            state::with_cred(a, |c| a.fs.ns().set_attrs(o.ino, &s, c)).map(|_| 0)
        },
        // SAFETY: the C library's fchmod with the caller's arguments.
        || unsafe { real::fchmod(fd, mode) },
    )
}

/// -1 in C leaves an id alone.
fn id(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}

#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
    flags: c_int,
) -> c_int {
    if flags & libc::AT_EMPTY_PATH != 0
        // SAFETY: the caller's path.
        && unsafe { state::cpath(path) } == Some(b"")
        && dirfd != libc::AT_FDCWD
    {
        // SAFETY: forwarded.
        return unsafe { fchown(dirfd, uid, gid) };
    }
    let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
    let a = SetAttr {
        uid: id(uid),
        gid: id(gid),
        ..Default::default()
    };
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| setattr_path(s, p, nofollow, &a),
            |fd, p| real::fchownat(fd, p, uid, gid, flags),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fchownat(libc::AT_FDCWD, path, uid, gid, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    // SAFETY: forwarded as received.
    unsafe { fchownat(libc::AT_FDCWD, path, uid, gid, libc::AT_SYMLINK_NOFOLLOW) }
}

#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    on_fd(
        fd,
        |a, o| {
            let s = SetAttr {
                uid: id(uid),
                gid: id(gid),
                ..Default::default()
            };
            state::with_cred(a, |c| a.fs.ns().set_attrs(o.ino, &s, c)).map(|_| 0)
        },
        // SAFETY: the C library's fchown with the caller's arguments.
        || unsafe { real::fchown(fd, uid, gid) },
    )
}

/// utimensat's two times (null: both now).
///
/// # Safety
/// `t` is null or valid for two timespecs.
unsafe fn times(t: *const libc::timespec) -> lynxfs::Result<SetAttr> {
    if t.is_null() {
        return Ok(SetAttr {
            atime: Some(TimeSet::Now),
            mtime: Some(TimeSet::Now),
            ..Default::default()
        });
    }
    // SAFETY: two timespecs, as the contract says.
    let (at, mt) = unsafe { (&*t, &*t.add(1)) };
    Ok(SetAttr {
        atime: conv::time_set(at)?,
        mtime: conv::time_set(mt)?,
        ..Default::default()
    })
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    t: *const libc::timespec,
    flags: c_int,
) -> c_int {
    if path.is_null() {
        // Linux: a null path is the dirfd itself.
        // SAFETY: forwarded as received.
        return unsafe { futimens(dirfd, t) };
    }
    let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW != 0;
    // SAFETY: the caller's arguments.
    unsafe {
        at_path(
            dirfd,
            path,
            |s, p| setattr_path(s, p, nofollow, &times(t)?),
            |fd, p| real::utimensat(fd, p, t, flags),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, t: *const libc::timespec) -> c_int {
    on_fd(
        fd,
        |a, o| {
            // SAFETY: the caller's times.
            let t = unsafe { times(t) }?;
            state::with_cred(a, |c| a.fs.ns().set_attrs(o.ino, &t, c)).map(|_| 0)
        },
        // SAFETY: the C library's futimens with the caller's arguments.
        || unsafe { real::futimens(fd, t) },
    )
}

/// timevals (utimes) as timespecs.
///
/// # Safety
/// `tv` is null or valid for two timevals.
unsafe fn from_timevals(tv: *const libc::timeval) -> Option<[libc::timespec; 2]> {
    // SAFETY: as the contract says.
    let tv = unsafe { tv.as_ref().map(|t| [*t, *(tv.add(1))]) }?;
    Some(tv.map(|t| libc::timespec {
        tv_sec: t.tv_sec,
        // Saturated: a microsecond count out of range is EINVAL, not an overflow.
        tv_nsec: t.tv_usec.saturating_mul(1000),
    }))
}

#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    // SAFETY: the caller's times and path.
    unsafe {
        let ts = from_timevals(tv);
        utimensat(
            libc::AT_FDCWD,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            0,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn lutimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    // SAFETY: the caller's times and path.
    unsafe {
        let ts = from_timevals(tv);
        let p = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
        utimensat(libc::AT_FDCWD, path, p, libc::AT_SYMLINK_NOFOLLOW)
    }
}

#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int {
    // SAFETY: the caller's times.
    unsafe {
        let ts = from_timevals(tv);
        futimens(fd, ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()))
    }
}

#[no_mangle]
pub unsafe extern "C" fn futimesat(
    dirfd: c_int,
    path: *const c_char,
    tv: *const libc::timeval,
) -> c_int {
    // SAFETY: the caller's times and path.
    unsafe {
        let ts = from_timevals(tv);
        utimensat(
            dirfd,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            0,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, b: *const libc::utimbuf) -> c_int {
    // SAFETY: the caller's times and path.
    unsafe {
        let ts = b.as_ref().map(|b| {
            [
                libc::timespec {
                    tv_sec: b.actime,
                    tv_nsec: 0,
                },
                libc::timespec {
                    tv_sec: b.modtime,
                    tv_nsec: 0,
                },
            ]
        });
        utimensat(
            libc::AT_FDCWD,
            path,
            ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            0,
        )
    }
}
