//! Record locks (fcntl F_SETLK and friends, lockf) and flock on pool files. The
//! kernel keeps them, on the pool's stand-in file of the inode
//! ([`lynxfs::runtime::stand_ins`]), which every process attached to the pool opens,
//! the FUSE daemon included: a lock on a pool file is the same lock on its stand-in,
//! so a preloaded process, a program through the mount and any other attached
//! process exclude each other exactly as POSIX says (per process for classic locks,
//! per open file description for OFD locks and flock). The stand-in descriptors are
//! the library's own: programs cannot close them from under it.

use std::collections::HashMap;
use std::os::fd::IntoRawFd;

use libc::c_int;
use lynxfs::runtime::fork_gate;
use parking_lot::Mutex;

use super::err;
use super::hooks::{Passed, ProcessHooks};
use crate::fds::Open;
use crate::own;
use crate::real;
use crate::state::Attached;

/// This process's stand-in fd per inode, for classic (per-process) locks.
static CLASSIC: Mutex<Option<HashMap<u64, c_int>>> = Mutex::new(None);

/// A new fd on the stand-in of `ino`, kept from programs; out of their way (moved up
/// to the engine's numbers) if `movable`: not while the process may hold record
/// locks on `ino`, since moving closes the first fd, and a close of any fd of a file
/// drops the process's record locks on it.
fn open_stand_in(a: &Attached, ino: u64, movable: bool) -> lynxfs::Result<c_int> {
    let fd = match a.fs.lock_stand_in(ino) {
        Some(Ok(fd)) => fd,
        // Attached processes have stand-ins: missing or refused, the lock cannot be
        // one every path to the pool sees.
        Some(Err(_)) | None => return Err(err(libc::ENOLCK)),
    };
    let file = std::fs::File::from(fd);
    let fd = if movable {
        lynxfs::runtime::out_of_the_way(file).into_raw_fd()
    } else {
        file.into_raw_fd()
    };
    own::keep(fd);
    Ok(fd)
}

/// Whether this process has a classic-lock stand-in of `ino` (and so may hold record
/// locks on it).
fn classic_held(ino: u64) -> bool {
    ANY_CLASSIC.load(std::sync::atomic::Ordering::Relaxed)
        && CLASSIC
            .lock()
            .as_ref()
            .is_some_and(|m| m.contains_key(&ino))
}

/// This description's own open of its inode's stand-in (its OFD locks and its flock).
fn description_fd(a: &Attached, o: &Open) -> lynxfs::Result<c_int> {
    let fd = *o
        .lock_fd
        .get_or_init(|| open_stand_in(a, o.ino, !classic_held(o.ino)).unwrap_or(-1));
    if fd < 0 {
        Err(err(libc::ENOLCK))
    } else {
        Ok(fd)
    }
}

fn classic_fd(a: &Attached, ino: u64) -> lynxfs::Result<c_int> {
    ANY_CLASSIC.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut m = CLASSIC.lock();
    let m = m.get_or_insert_with(HashMap::new);
    if let Some(&fd) = m.get(&ino) {
        return Ok(fd);
    }
    // None held yet (this fd is the only way to hold them): it may be moved up.
    let fd = open_stand_in(a, ino, true)?;
    m.insert(ino, fd);
    Ok(fd)
}

/// Whether this process ever took a classic lock (most never do: their closes then
/// skip the stand-in table).
static ANY_CLASSIC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The process closed an fd of `ino`: POSIX drops its classic locks on the file.
pub fn closed(ino: u64) {
    if !ANY_CLASSIC.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let fd = CLASSIC.lock().as_ref().and_then(|m| m.get(&ino).copied());
    if let Some(fd) = fd {
        let all = unlock_all();
        // SAFETY: an fcntl on our own stand-in fd with a valid flock.
        unsafe { real::fcntl64(fd, libc::F_SETLK, &all as *const _ as libc::c_ulong) };
    }
}

fn unlock_all() -> libc::flock {
    // SAFETY: plain data: all-zero is valid (start 0, length 0: the whole file).
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_UNLCK as i16;
    l.l_whence = libc::SEEK_SET as i16;
    l
}

/// As the kernel: a read lock needs an fd open for reading, a write lock one open
/// for writing (the stand-in is open for both), else EBADF.
fn check_access(a: &Attached, o: &Open, kind: c_int) -> lynxfs::Result<()> {
    let mode = a.fs.status_flags(o.handle)? & libc::O_ACCMODE;
    let ok = match kind {
        libc::F_RDLCK => mode != libc::O_WRONLY,
        libc::F_WRLCK => mode != libc::O_RDONLY,
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(err(libc::EBADF))
    }
}

/// Whether `cmd` is a record-lock command.
pub fn is_lock(cmd: c_int) -> bool {
    matches!(
        cmd,
        libc::F_GETLK
            | libc::F_SETLK
            | libc::F_SETLKW
            | libc::F_OFD_GETLK
            | libc::F_OFD_SETLK
            | libc::F_OFD_SETLKW
    )
}

/// A record-lock command on pool file `o`: positions relative to the file's
/// position or end are made absolute (the stand-in has neither), then the kernel
/// does the rest on the stand-in.
///
/// # Safety
/// `arg` is the caller's `struct flock` pointer (null gives EFAULT).
pub unsafe fn fcntl(
    a: &Attached,
    o: &Open,
    cmd: c_int,
    arg: *mut libc::flock,
) -> lynxfs::Result<c_int> {
    // SAFETY: the caller's flock, checked for null.
    let l = unsafe { arg.as_mut() }.ok_or(err(libc::EFAULT))?;
    let whence = l.l_whence as c_int;
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => a.fs.seek(o.handle, 0, libc::SEEK_CUR)? as i64,
        libc::SEEK_END => a.fs.fstat(o.handle)?.size as i64,
        _ => return Err(err(libc::EINVAL)),
    };
    let start = l.l_start.checked_add(base).ok_or(err(libc::EOVERFLOW))?;
    if !matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        check_access(a, o, l.l_type as c_int)?;
    }
    let mut abs = *l;
    abs.l_whence = libc::SEEK_SET as i16;
    abs.l_start = start;
    let ofd = matches!(
        cmd,
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW
    );
    let fd = if ofd {
        description_fd(a, o)?
    } else {
        classic_fd(a, o.ino)?
    };
    let mut set = || {
        // SAFETY: an fcntl on our stand-in with a valid flock of ours.
        unsafe { real::fcntl64(fd, cmd, &mut abs as *mut _ as libc::c_ulong) }
    };
    // A lock wait may last as long as another process holds the lock: no fork waits
    // for it (nothing process-local is held here).
    let r = if matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW) {
        fork_gate::step_aside(set)
    } else {
        set()
    };
    if r < 0 {
        return Err(last_error());
    }
    if matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        // The answer's positions are absolute, which the caller accepts.
        *l = abs;
    }
    Ok(r)
}

fn last_error() -> lynxfs::Error {
    err(std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::ENOLCK))
}

/// flock on pool file `o`: the description's lock on the stand-in (flock locks
/// belong to the open file description, as the description's stand-in fd does).
pub fn flock(a: &Attached, o: &Open, op: c_int) -> lynxfs::Result<c_int> {
    let fd = description_fd(a, o)?;
    // SAFETY: flock on our own stand-in fd.
    let set = || unsafe { real::flock(fd, op) };
    // A lock wait: as in `fcntl` above.
    let r = if op & libc::LOCK_NB == 0 && op & libc::LOCK_UN == 0 {
        fork_gate::step_aside(set)
    } else {
        set()
    };
    if r < 0 {
        return Err(last_error());
    }
    Ok(0)
}

/// lockf on pool file `o`, as the C library makes it of fcntl (whose own calls would
/// reach the kernel's fd, not the stand-in): a write lock of `len` bytes from the
/// file position (back from it for a negative `len`; 0 is to the end and beyond).
pub fn lockf(a: &Attached, o: &Open, cmd: c_int, len: libc::off64_t) -> lynxfs::Result<c_int> {
    // SAFETY: plain data: all-zero is valid and then filled in.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_whence = libc::SEEK_CUR as i16;
    l.l_len = len;
    let (fcmd, kind) = match cmd {
        libc::F_TEST => (libc::F_GETLK, libc::F_RDLCK),
        libc::F_ULOCK => (libc::F_SETLK, libc::F_UNLCK),
        libc::F_LOCK => (libc::F_SETLKW, libc::F_WRLCK),
        libc::F_TLOCK => (libc::F_SETLK, libc::F_WRLCK),
        _ => return Err(err(libc::EINVAL)),
    };
    l.l_type = kind as i16;
    // SAFETY: a flock of ours, live for the call.
    unsafe { fcntl(a, o, fcmd, &mut l) }?;
    // SAFETY: getpid only returns an id.
    let me = unsafe { libc::getpid() };
    if fcmd == libc::F_GETLK && l.l_type != libc::F_UNLCK as i16 && l.l_pid != me {
        return Err(err(libc::EACCES));
    }
    Ok(0)
}

/// In a new program's environment: the lock stand-in fds it inherits, so its locks
/// outlive the exec as the kernel's do. `d<key>:<fd>` is a shared description's (its
/// OFD locks and flock belong to the description, which the program inherits);
/// `c<ino>:<fd>` is the process's own for `ino` (an exec keeps the process's record
/// locks). Entries are separated by commas.
const ENV_LOCKS: &str = "LYNXFS_LOCK_FDS";

/// The locks' part in forks and new programs: a description's stand-in is opened
/// before the description is shared, and the stand-ins go to a new program with the
/// descriptions (and, at an exec, the process's classic ones: an exec keeps them).
pub struct LockHooks;

impl ProcessHooks for LockHooks {
    fn sharing(&self, a: &Attached, o: &Open) {
        // The description's locks go where it goes: its stand-in fd is opened now,
        // before the fork or exec that hands the description on (a lock taken later
        // by any holder is then on the one open all holders share).
        let _ = description_fd(a, o);
    }

    fn handing_on(&self, descriptions: &[(u64, &Open)], exec: bool) -> Passed {
        pass_on(descriptions, exec)
    }

    fn env_name(&self) -> Option<&'static str> {
        Some(ENV_LOCKS)
    }

    fn adopting(&self, a: &Attached, by_key: &HashMap<u64, std::sync::Arc<Open>>) {
        adopt_passed(a, by_key);
    }
}

/// Opens to the next program the stand-ins of `descriptions` (key and description)
/// and, for an exec (`classic`), the process's classic-lock stand-ins.
fn pass_on(descriptions: &[(u64, &Open)], classic: bool) -> Passed {
    let mut entries: Vec<(char, u64, c_int)> = descriptions
        .iter()
        .filter_map(|(key, o)| Some(('d', *key, *o.lock_fd.get().filter(|&&fd| fd >= 0)?)))
        .collect();
    if classic {
        if let Some(m) = CLASSIC.lock().as_ref() {
            entries.extend(m.iter().map(|(&ino, &fd)| ('c', ino, fd)));
        }
    }
    let mut fds = Vec::new();
    let mut env = Vec::new();
    for (kind, id, fd) in entries {
        // SAFETY: F_SETFD on a stand-in fd of ours.
        if unsafe { real::fcntl64(fd, libc::F_SETFD, 0) } == 0 {
            fds.push(fd);
            env.push(format!("{kind}{id}:{fd}"));
        }
    }
    let env = (!env.is_empty()).then(|| format!("{ENV_LOCKS}={}", env.join(",")));
    Passed { fds, env }
}

/// At load, after the inherited descriptions are adopted (`by_key`): takes back the
/// stand-in fds the previous program passed on, each checked to be the stand-in of
/// its file (an fd number the environment names may be anything by now).
fn adopt_passed(a: &Attached, by_key: &HashMap<u64, std::sync::Arc<Open>>) {
    let Some(list) = std::env::var_os(ENV_LOCKS) else {
        return;
    };
    for entry in list.to_string_lossy().split(',') {
        let Some((id, fd)) = entry.get(1..).and_then(|e| e.split_once(':')) else {
            continue;
        };
        let (Ok(id), Ok(fd)) = (id.parse::<u64>(), fd.parse::<c_int>()) else {
            continue;
        };
        let (description, ino) = match entry.as_bytes()[0] {
            b'd' => match by_key.get(&id) {
                Some(o) => (Some(o), o.ino),
                None => continue,
            },
            b'c' => (None, id),
            _ => continue,
        };
        if !is_stand_in_of(a, fd, ino) {
            continue;
        }
        // SAFETY: F_SETFD on the stand-in fd just checked.
        unsafe { real::fcntl64(fd, libc::F_SETFD, libc::FD_CLOEXEC as libc::c_ulong) };
        let taken = match description {
            Some(o) => o.lock_fd.set(fd).is_ok(),
            None => {
                let mut m = CLASSIC.lock();
                let m = m.get_or_insert_with(HashMap::new);
                ANY_CLASSIC.store(true, std::sync::atomic::Ordering::Relaxed);
                m.insert(ino, fd).is_none()
            }
        };
        if taken {
            own::keep(fd);
        }
    }
}

/// Whether `fd` is open on the stand-in of `ino` (looked at by path: opening and
/// closing another fd of it would drop this process's record locks on it).
fn is_stand_in_of(a: &Attached, fd: c_int, ino: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(path) = a.fs.lock_stand_in_path(ino) else {
        return false;
    };
    let Ok(want) = std::fs::symlink_metadata(path) else {
        return false;
    };
    // SAFETY: plain data, filled in by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into our own struct.
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    ok && want.is_file() && (st.st_dev, st.st_ino) == (want.dev(), want.ino())
}
