//! Processes. A fork's child becomes an attached process of its own and keeps its
//! pool fds, their positions shared with the parent (docs/CONSISTENCY.md, "open /
//! close by several processes"). An exec hands the fds without close-on-exec to the
//! new program: each fd's eventfd holds its description's key, which the new
//! program's copy of this library finds at load. A program stored in the pool is
//! run from a copy in memory (the kernel cannot read the pool).

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use libc::{c_char, c_int, pid_t};
use lynxfs::runtime::fork_gate;

use super::hooks::{self, Passed};
use crate::fds;
use crate::real;
use crate::route;
use crate::state::{self, Attached, ENV_CWD};

/// Set in the environment of a program exec'd by an attached process that stays in
/// the process table across the exec (it passes pool fds or locks on): the new
/// program attaches at load to take over its previous image's place. An image that
/// passes nothing leaves the table before the exec instead (`leave_for_exec`).
pub const ENV_PREVIOUS: &str = "LYNXFS_PREVIOUS_IMAGE";

/// Set in the environment of a program exec'd or spawned by an attached process that
/// may pass it pool fds, which it looks for at load.
pub const ENV_FDS: &str = "LYNXFS_FDS";

/// The working directory to hand on, when it is inside the pool (entered, or not
/// yet: see `state::init`).
fn cwd_to_pass() -> Option<Vec<u8>> {
    if !state::cwd_in_pool() {
        return None;
    }
    let Some(a) = state::attached_now() else {
        return state::pending_cwd();
    };
    let ino = a.cwd.read().cwd();
    a.fs.path_of(ino).ok()
}

/// The engine's descriptors of the pool file and its locks before a fork, which its
/// child replaces with its own (see `in_child`).
static FORK_INHERITED: parking_lot::Mutex<Vec<c_int>> = parking_lot::Mutex::new(Vec::new());

/// Registers the fork handlers; called once at load.
pub fn init() {
    // SAFETY: registers three functions that live as long as the process.
    unsafe { libc::pthread_atfork(Some(before_fork), Some(in_parent), Some(in_child)) };
}

/// Before a fork: every other thread's call into the pool finishes first, and new
/// ones wait (the fork gate: a thread in a lock wait is not waited for), so the
/// child copies no change half made; an attach in progress in another thread has
/// finished with them (see `attach_lock`); every description becomes shared, so
/// parent and child see one position.
extern "C" fn before_fork() {
    // Inside (with a pass) before the gate closes: this thread's own work below
    // goes through it.
    let _inside = crate::guard::Inside::enter();
    real::find_for_fork();
    fork_gate::close();
    crate::attach_lock::hold_for_fork();
    if let Some(a) = state::attached_now() {
        share_all(a);
        // Read before the pool's locks are held for the fork (the child cannot).
        *FORK_INHERITED.lock() = a.fs.pool_file_fds();
        // The working directory's session, read-locked across the fork: no chdir in
        // another thread changes its hold between the count taken for the child
        // here and the fork.
        let cwd = a.cwd.read();
        let held: Vec<u64> = cwd.held_cwd().into_iter().collect();
        a.fs.before_fork_holding(&held);
        std::mem::forget(cwd);
    }
}

extern "C" fn in_parent() {
    fork_gate::reopen(false);
    if let Some(a) = state::attached_now() {
        drop(cwd_kept_for_fork(a));
        a.fs.after_fork_parent();
    }
    crate::attach_lock::release_after_fork(false);
}

/// In the child: an attachment it inherited is finished (the fork waited for any in
/// progress), so the child becomes an attached process of its own.
extern "C" fn in_child() {
    fork_gate::reopen(true);
    if let Some(a) = state::attached_now() {
        let _inside = crate::guard::Inside::enter();
        let held: Vec<u64> = cwd_kept_for_fork(a).held_cwd().into_iter().collect();
        // The engine closes its inherited opens of the pool file (the parent's
        // locks are on them): they are no longer kept from the program's close.
        let inherited = std::mem::take(&mut *FORK_INHERITED.lock());
        crate::own::engine_replaced(&inherited, &[]);
        if let Err(e) = a.fs.after_fork_child_holding(&held) {
            real::say(&format!("the child of a fork cannot use the pool: {e}"));
        }
        crate::own::engine_replaced(&[], &a.fs.pool_file_fds());
    }
    crate::attach_lock::release_after_fork(true);
}

/// The read lock `before_fork` took on the working directory's session, as a guard
/// again (released when dropped).
fn cwd_kept_for_fork(a: &Attached) -> parking_lot::RwLockReadGuard<'_, state::Caller> {
    // SAFETY: `before_fork` read-locked the session in the thread that forked (in
    // the child, its only thread) and forgot the guard; this takes that one read
    // lock over, once, in the parent or the child.
    unsafe {
        a.cwd
            .make_read_guard_unchecked(parking_lot::lock_api::GuardNoSend::new())
    }
}

/// Shares every description not yet shared, giving it an eventfd of its own whose
/// count is its key (a program exec'd later finds it there): every fd of the
/// description becomes a copy of that eventfd, each keeping its close-on-exec flag;
/// and what belongs to the description is made now (its lock stand-in: see
/// [`hooks::ProcessHooks::sharing`]).
fn share_all(a: &Attached) {
    let all = fds::all();
    let mut done = std::collections::HashSet::new();
    for (_, o) in &all {
        if !done.insert(o.handle) || !matches!(a.fs.desc_of(o.handle), Ok(None)) {
            continue;
        }
        let Ok(key) = a.fs.share(o.handle) else {
            continue;
        };
        for h in hooks::registered() {
            h.sharing(a, o);
        }
        let Ok(efd) = fds::new_eventfd(true) else {
            continue;
        };
        // The eventfd counts from 0: one write makes its count the key.
        let b = key.to_ne_bytes();
        // SAFETY: an 8-byte write to our own new eventfd.
        unsafe { real::write(efd, b.as_ptr().cast(), 8) };
        for (fd, _) in all.iter().filter(|(_, p)| p.handle == o.handle) {
            let flags = if cloexec(*fd) { libc::O_CLOEXEC } else { 0 };
            // SAFETY: replacing our own fd's file with our own eventfd, same number.
            unsafe { real::dup3(efd, *fd, flags) };
            // No longer a copy of the placeholder: never parked (see `fds::park`).
            fds::set_parkable(*fd, false);
        }
        // SAFETY: the eventfd's own number; its copies keep it.
        unsafe { real::close(efd) };
    }
}

/// Whether the kernel closes `fd` at exec.
fn cloexec(fd: c_int) -> bool {
    // SAFETY: F_GETFD on an fd of ours.
    let f = unsafe { real::fcntl64(fd, libc::F_GETFD, 0) };
    f >= 0 && f & libc::FD_CLOEXEC != 0
}

/// What the next program is handed with the descriptions `keys` (and, for an exec,
/// of what the process holds): their lock stand-ins (see
/// [`hooks::ProcessHooks::handing_on`]).
fn hand_on(a: &Attached, keys: &[u64], exec: bool) -> Vec<Passed> {
    let all = fds::all();
    let mut seen = std::collections::HashSet::new();
    let descriptions: Vec<(u64, &fds::Open)> = all
        .iter()
        .filter(|(_, o)| seen.insert(o.handle))
        .filter_map(|(_, o)| match a.fs.desc_of(o.handle) {
            Ok(Some(key)) if keys.contains(&key) => Some((key, &**o)),
            _ => None,
        })
        .collect();
    hooks::registered()
        .iter()
        .map(|h| h.handing_on(&descriptions, exec))
        .collect()
}

/// The environment entries of what is handed on.
fn handed_env(passed: &[Passed]) -> Vec<&str> {
    passed.iter().filter_map(|p| p.env.as_deref()).collect()
}

/// The descriptions with an fd that survives exec, and those without.
fn passed_on(a: &Attached) -> (Vec<u64>, Vec<u64>) {
    let mut keep = Vec::new();
    let mut drop = Vec::new();
    let all = fds::all();
    let mut handles: Vec<_> = all.iter().map(|(_, o)| o.handle).collect();
    handles.sort_unstable();
    handles.dedup();
    for h in handles {
        let Ok(Some(key)) = a.fs.desc_of(h) else {
            continue;
        };
        let survives = all.iter().any(|(fd, o)| o.handle == h && !cloexec(*fd));
        if survives {
            keep.push(key)
        } else {
            drop.push(key)
        }
    }
    (keep, drop)
}

/// The environment a new program gets: the caller's, with this library's variables
/// put back if the caller dropped them, the previous-image mark when the new program
/// takes over this attached image's place (`attached`), and the mark of inherited
/// pool fds (`fds`), the entries of what the families hand on (`handed`: see
/// [`hooks::ProcessHooks::handing_on`]), and the working directory in the pool
/// (`cwd`). The caller's entries are passed by their own pointers, and the caller's
/// very array when nothing changes (the usual exec of a fork child that never touched
/// the pool: nothing copied onto heap pages the child would fault in).
fn environment(
    envp: *const *const c_char,
    attached: bool,
    fds: bool,
    handed: &[&str],
    cwd: Option<Vec<u8>>,
) -> NewEnv {
    let ours = ours_env();
    let mut have = [false; 3];
    let mut dropped = false;
    // SAFETY: `envp` is null or a NULL-terminated array of C strings (execve's).
    unsafe { each_entry(envp, |_, b| dropped |= !keeps(b, ours, &mut have)) };
    let missing = ours
        .iter()
        .zip(have)
        .any(|((_, value), had)| !had && value.is_some());
    if !dropped && !missing && !attached && !fds && handed.is_empty() && cwd.is_none() {
        return NewEnv {
            _made: Vec::new(),
            ptrs: Vec::new(),
            caller: envp,
        };
    }
    let mut ptrs = Vec::new();
    // SAFETY: as above.
    unsafe {
        each_entry(envp, |p, b| {
            if keeps(b, ours, &mut have) {
                ptrs.push(p);
            }
        })
    };
    let mut made = Vec::new();
    for (i, (name, value)) in ours.iter().enumerate() {
        if !have[i] {
            if let Some(v) = value {
                made.push(CString::new(format!("{name}={v}")).expect("no NUL in env"));
            }
        }
    }
    if attached {
        made.push(CString::new(format!("{ENV_PREVIOUS}=1")).expect("no NUL"));
    }
    if fds {
        made.push(CString::new(format!("{ENV_FDS}=1")).expect("no NUL"));
    }
    for h in handed {
        made.push(CString::new(*h).expect("digits and letters hold no NUL"));
    }
    if let Some(cwd) = cwd {
        let mut e = format!("{ENV_CWD}=").into_bytes();
        e.extend_from_slice(&cwd);
        if let Ok(e) = CString::new(e) {
            made.push(e);
        }
    }
    ptrs.extend(made.iter().map(|c| c.as_ptr()));
    ptrs.push(std::ptr::null());
    NewEnv {
        _made: made,
        ptrs,
        caller: envp,
    }
}

/// A new program's environment (see [`environment`]): the caller's array, or one
/// made of the caller's entries kept and the entries made here.
struct NewEnv {
    /// The entries made here, which `ptrs` points into.
    _made: Vec<CString>,
    /// The array made, NULL-terminated; empty when it is the caller's.
    ptrs: Vec<*const c_char>,
    caller: *const *const c_char,
}

impl NewEnv {
    fn as_ptr(&self) -> *const *const c_char {
        if self.ptrs.is_empty() {
            self.caller
        } else {
            self.ptrs.as_ptr()
        }
    }
}

/// Calls `f` with each entry of `envp` (its pointer and its bytes).
///
/// # Safety
/// `envp` is null or a NULL-terminated array of C strings.
unsafe fn each_entry(envp: *const *const c_char, mut f: impl FnMut(*const c_char, &[u8])) {
    let mut p = envp;
    // SAFETY: as this function's contract.
    while !p.is_null() && !unsafe { *p }.is_null() {
        // SAFETY: as above.
        let e = unsafe { *p };
        // SAFETY: as above.
        f(e, unsafe { CStr::from_ptr(e) }.to_bytes());
        // SAFETY: within the array, up to its NULL.
        p = unsafe { p.add(1) };
    }
}

/// Whether the caller's entry `b` goes to the new program: not one of the marks this
/// library sets itself. Notes in `have` which of its own variables (`ours`) it is.
fn keeps(b: &[u8], ours: &[(&str, Option<String>); 3], have: &mut [bool; 3]) -> bool {
    let named = |n: &str| b.starts_with(n.as_bytes()) && b.get(n.len()) == Some(&b'=');
    let handed_on = || {
        hooks::registered()
            .iter()
            .filter_map(|h| h.env_name())
            .any(named)
    };
    if named(ENV_PREVIOUS) || named(ENV_CWD) || named(ENV_FDS) || handed_on() {
        return false;
    }
    for (i, (name, _)) in ours.iter().enumerate() {
        if named(name) {
            have[i] = true;
        }
    }
    true
}

/// This library's variables as they were at load.
fn ours_env() -> &'static [(&'static str, Option<String>); 3] {
    static E: OnceLock<[(&str, Option<String>); 3]> = OnceLock::new();
    E.get_or_init(|| {
        let get = |n: &str| std::env::var(n).ok();
        [
            ("LD_PRELOAD", get("LD_PRELOAD")),
            (state::ENV_POOL, get(state::ENV_POOL)),
            (state::ENV_AT, get(state::ENV_AT)),
        ]
    })
}

/// Reads the environment once at load (a program may change it later).
pub fn remember_env() {
    ours_env();
}

/// A program's copy in a memory file the kernel can run, by its path
/// "/proc/self/fd/N". The fd is inherited by the new program (an interpreter of a
/// script reads it there) and closed here when dropped: after a spawn, or when an
/// exec failed.
struct Runnable {
    fd: c_int,
    path: CString,
}

impl Drop for Runnable {
    fn drop(&mut self) {
        // SAFETY: the memory file's fd, owned by this value.
        unsafe { real::close(self.fd) };
    }
}

/// How many interpreters a script may go through before ELOOP, as Linux allows
/// (BINPRM_MAX_RECURSION).
const MAX_INTERPRETERS: u32 = 4;

/// What the kernel is asked to run for the path an exec was given.
struct Prepared {
    /// The file the kernel runs: a host path, or a pool program's copy in memory.
    path: CString,
    /// The arguments when they are not the caller's (a script whose interpreter is
    /// reached through the pool).
    argv: Option<Vec<CString>>,
    /// The memory copy `path` names, held open until the exec.
    _copy: Option<Runnable>,
}

impl Prepared {
    /// The arguments for the kernel: these, or the caller's.
    fn argv_or(&self, caller: *const *const c_char) -> (Vec<*const c_char>, *const *const c_char) {
        let Some(args) = &self.argv else {
            return (Vec::new(), caller);
        };
        let mut v: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
        v.push(std::ptr::null());
        let p = v.as_ptr();
        (v, p)
    }
}

/// Where a program's path leads.
enum Found {
    /// A host file, by the path the kernel runs it by.
    Kernel(CString),
    /// A pool file, copied to run.
    Pool(PoolProgram),
}

/// A pool program's copy in a memory file, and its first bytes (a script's "#!" line
/// is read from them).
struct PoolProgram {
    copy: Runnable,
    head: Vec<u8>,
}

/// How many of a program's first bytes Linux reads a "#!" line from.
const SHEBANG_MAX: usize = 256;

/// Follows `path` into the pool and out of it, as the kernel would follow it (a pool
/// symlink to a host program, a host path naming the pool's directory): the pool
/// program's contents, or the host path left. The pool's refusal is an errno.
fn find(path: &CStr) -> Result<Found, c_int> {
    let found = std::cell::Cell::new(None);
    // SAFETY: a C string of the caller's, valid for the call; the kernel's side only
    // copies the path it is given.
    let r = unsafe {
        route::follow(
            libc::AT_FDCWD,
            path.as_ptr(),
            |s, rel| {
                found.set(Some(Found::Pool(read_program(s, rel)?)));
                Ok(0)
            },
            |_, p| {
                found.set(Some(Found::Kernel(CStr::from_ptr(p).to_owned())));
                0
            },
        )
    };
    match found.into_inner() {
        Some(f) if r == 0 => Ok(f),
        _ => Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOENT)),
    }
}

/// A pool program, opened for execution (its execute permission checked), copied
/// into a memory file: read by the engine straight into the memory file's pages
/// (mapped and populated at once), with no buffer between (a 1 MiB program through a
/// growing heap buffer and a `write` cost a fault per page twice over).
fn read_program(s: &state::Caller, rel: &[u8]) -> lynxfs::Result<PoolProgram> {
    let fd = s.open(rel, libc::O_RDONLY | lynxfs::api::FMODE_EXEC, 0)?;
    let r = s.fs().fstat(fd).and_then(|st| copy_program(s, fd, st.size));
    let _ = s.fs().close_fd(fd);
    r
}

/// [`read_program`]'s copy of the open pool file `fd`, `size` bytes long when it was
/// opened (a file that shrinks meanwhile is copied as far as it goes).
fn copy_program(s: &state::Caller, fd: lynxfs::api::Fd, size: u64) -> lynxfs::Result<PoolProgram> {
    let len = usize::try_from(size).map_err(|_| lynxfs::Error::Errno(libc::EFBIG))?;
    let copy = memory_file()?;
    // SAFETY: sizes our own memory file.
    if unsafe { real::ftruncate64(copy.fd, len as libc::off64_t) } != 0 {
        return Err(last_errno());
    }
    if len == 0 {
        return Ok(PoolProgram {
            copy,
            head: Vec::new(),
        });
    }
    // SAFETY: a new shared mapping of our own memory file, `len` bytes (its size),
    // placed by the kernel where nothing else is; unmapped below, and no reference to
    // it outlives this function.
    let at = unsafe {
        real::mmap64(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            copy.fd,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(last_errno());
    }
    // SAFETY: the mapping just made, `len` bytes, readable and writable, used only
    // through this slice until the munmap below.
    let pages = unsafe { std::slice::from_raw_parts_mut(at.cast::<u8>(), len) };
    let read = read_into(s, fd, pages);
    let head = pages[..len.min(SHEBANG_MAX)].to_vec();
    // SAFETY: the mapping made above; `pages` is not used after this.
    unsafe { real::munmap(at, len) };
    let done = read?;
    // SAFETY: sizes our own memory file (to what was read, if the file shrank).
    if done < len && unsafe { real::ftruncate64(copy.fd, done as libc::off64_t) } != 0 {
        return Err(last_errno());
    }
    Ok(PoolProgram { copy, head })
}

/// Reads the pool file `fd` from its start into `buf` until `buf` is full or the file
/// ends; how much was read.
fn read_into(s: &state::Caller, fd: lynxfs::api::Fd, buf: &mut [u8]) -> lynxfs::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match s.fs().pread(fd, &mut buf[done..], done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

/// A new, empty memory file the kernel can run by its path (see [`Runnable`]).
fn memory_file() -> lynxfs::Result<Runnable> {
    // SAFETY: creates a new memory file.
    let m = unsafe { libc::memfd_create(c"lynxfs-exec".as_ptr(), 0) };
    if m < 0 {
        return Err(last_errno());
    }
    Ok(Runnable {
        fd: m,
        path: CString::new(format!("/proc/self/fd/{m}")).expect("digits hold no NUL"),
    })
}

/// The last system call's errno as the engine's error.
fn last_errno() -> lynxfs::Error {
    lynxfs::Error::Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

/// A script's "#!" line, as Linux reads it: the interpreter and at most one argument
/// (the rest of the line), within the first 256 bytes.
fn shebang(file: &[u8]) -> Option<(CString, Option<CString>)> {
    let head = &file[..file.len().min(SHEBANG_MAX)];
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&c| c == b'\n').unwrap_or(line.len())];
    let blank = |c: &u8| *c == b' ' || *c == b'\t';
    let start = line.iter().position(|c| !blank(c))?;
    let end = line.iter().rposition(|c| !blank(c))? + 1;
    let line = &line[start..end];
    let split = line.iter().position(blank).unwrap_or(line.len());
    let interp = CString::new(&line[..split]).ok()?;
    let arg = &line[split..];
    let arg = match arg.iter().position(|c| !blank(c)) {
        Some(i) => Some(CString::new(&arg[i..]).ok()?),
        None => None,
    };
    Some((interp, arg))
}

/// The caller's arguments after the program name.
///
/// # Safety
/// `argv` is null or a NULL-terminated array of C strings.
unsafe fn args_after_name(argv: *const *const c_char) -> Vec<CString> {
    let mut out = Vec::new();
    if argv.is_null() {
        return out;
    }
    // SAFETY: a NULL-terminated array, as the contract says; the name is skipped.
    unsafe {
        if (*argv).is_null() {
            return out;
        }
        let mut p = argv.add(1);
        while !(*p).is_null() {
            out.push(CStr::from_ptr(*p).to_owned());
            p = p.add(1);
        }
    }
    out
}

/// What to run for `path` with the caller's `argv`: a host program as the kernel
/// finds it, a pool program from a copy in memory, and a pool script whose
/// interpreter is reached through the pool (the kernel could not find it) run by
/// that interpreter here, with the arguments Linux gives one.
///
/// # Safety
/// `argv` is null or a NULL-terminated array of C strings.
unsafe fn prepare(path: &CStr, argv: *const *const c_char) -> Result<Prepared, c_int> {
    let mut path = path.to_owned();
    let mut args: Option<Vec<CString>> = None;
    let mut found = find(&path)?;
    for _ in 0..=MAX_INTERPRETERS {
        let program = match found {
            Found::Kernel(p) => {
                return Ok(Prepared {
                    path: p,
                    argv: args,
                    _copy: None,
                })
            }
            Found::Pool(program) => program,
        };
        let via_pool = shebang(&program.head).and_then(|(interp, arg)| match find(&interp) {
            Ok(Found::Kernel(p)) if p == interp => None,
            f => Some((interp, arg, f)),
        });
        let Some((interp, arg, f)) = via_pool else {
            let copy = program.copy;
            return Ok(Prepared {
                path: copy.path.clone(),
                argv: args,
                _copy: Some(copy),
            });
        };
        let rest = match args {
            Some(a) => a.into_iter().skip(1).collect(),
            // SAFETY: as this function's contract.
            None => unsafe { args_after_name(argv) },
        };
        let mut next = vec![interp.clone()];
        next.extend(arg);
        next.push(path);
        next.extend(rest);
        args = Some(next);
        path = interp;
        found = f?;
    }
    Err(libc::ELOOP)
}

/// [`prepare`] for a path that may be null (the kernel then answers EFAULT).
///
/// # Safety
/// `path` is null or a C string; `argv` as [`prepare`]'s.
unsafe fn prepare_for(
    path: *const c_char,
    argv: *const *const c_char,
) -> Result<Option<Prepared>, c_int> {
    if path.is_null() {
        return Ok(None);
    }
    // SAFETY: a C string, as the contract says.
    unsafe { prepare(CStr::from_ptr(path), argv) }.map(Some)
}

#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let _inside = crate::guard::Inside::enter();
    // SAFETY: execve's path and argv, as the caller gave them.
    let prepared = match unsafe { prepare_for(path, argv) } {
        Ok(p) => p,
        Err(e) => {
            route::set_errno(e);
            return -1;
        }
    };
    // Looked at only now: finding a program stored in the pool attaches an image that
    // had not (a child of an unattached shell), and that image must leave the table
    // (or hand its place on) like any other, or its slot is found dead after the exec
    // and every process attached waits for a repair of the whole runtime state.
    let a = state::attached_now();
    // The other threads' pool calls finish first and no new one starts: the exec
    // ends those threads wherever they are, and one cut off mid-call would leave
    // the runtime state half changed (a thread in a lock wait holds nothing there).
    fork_gate::close();
    let mut released = Vec::new();
    let mut passed = Vec::new();
    let mut kept = false;
    if let Some(a) = a {
        share_all(a);
        let (keep, drop) = passed_on(a);
        for key in drop {
            if a.fs.release(key).is_ok() {
                released.push(key);
            }
        }
        kept = !keep.is_empty();
        passed = hand_on(a, &keep, true);
    }
    let target = prepared.as_ref().map_or(path, |p| p.path.as_ptr());
    let (_args, argv) = prepared
        .as_ref()
        .map_or((Vec::new(), argv), |p| p.argv_or(argv));
    let handed = handed_env(&passed);
    let passes_nothing = !kept && handed.is_empty();
    // Its path in the pool, read while this image may still use the pool.
    let cwd = cwd_to_pass();
    // SAFETY: the path the kernel is about to run, a C string or null.
    let left = a.filter(|_| passes_nothing && unsafe { runs(target) });
    let let_go = left.and_then(leave_for_exec);
    let env = environment(envp, a.is_some() && let_go.is_none(), kept, &handed, cwd);
    // SAFETY: the C library's execve with valid arguments and environment.
    let r = unsafe { real::execve(target, argv, env.as_ptr()) };
    // Still here: the exec failed; this image takes a slot again and holds the
    // descriptions released for it, before other threads' calls may go on.
    if let Some(a) = a {
        if let Some(let_go) = let_go {
            rejoin_after_failed_exec(a, &let_go);
        }
        for key in released {
            let _ = a.fs.claim(key);
        }
    }
    fork_gate::reopen(false);
    for p in &passed {
        p.restore();
    }
    r
}

/// Whether the kernel will find `path` to run (so that an exec that leaves the pool
/// first seldom has to come back: a PATH search's misses end here), asked of the
/// kernel itself (`path` is the one it is given).
///
/// # Safety
/// `path` is null or a C string.
unsafe fn runs(path: *const c_char) -> bool {
    // SAFETY: as the contract says; the kernel only reads the path.
    !path.is_null() && unsafe { real::faccessat(libc::AT_FDCWD, path, libc::X_OK, 0) } == 0
}

/// An exec that hands the next program nothing of the pool (no pool fd, no lock):
/// this image leaves the process table itself, if it holds no inode but its working
/// directory (which the next program enters again by its path), and the next program
/// starts unattached, as any program does: it attaches at its first pool call, or
/// never (docs/DESIGN-NOTES.md, "Process start in every placement"). The references
/// given up, or `None` when this image stays: the next program then takes its place
/// at load.
fn leave_for_exec(a: &Attached) -> Option<Vec<u64>> {
    let mut held: Vec<u64> = a.root.read().held_cwd().into_iter().collect();
    let mut let_go = Vec::new();
    match a.cwd.read().held_cwd() {
        Some(ino) if state::cwd_in_pool() => let_go.push(ino),
        Some(ino) => held.push(ino),
        None => {}
    }
    a.fs.leave_for_exec(&held, &let_go).then_some(let_go)
}

/// After an exec that [`leave_for_exec`] prepared failed: a slot again and the
/// references given up, or, when that cannot be (every slot taken meanwhile, the
/// working directory removed and freed), the end of the process: it must not touch
/// the pool so, and its caller may go on to.
fn rejoin_after_failed_exec(a: &Attached, let_go: &[u64]) {
    if let Err(e) = a.fs.rejoin_after_failed_exec(let_go) {
        real::say(&format!("after a failed exec the pool cannot be used: {e}"));
        // SAFETY: ends the process at once; it holds no slot, and the kernel drops its
        // locks on the pool file.
        unsafe { libc::abort() };
    }
}

extern "C" {
    static environ: *const *const c_char;
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the process's environment, as execv passes it.
    unsafe { execve(path, argv, environ) }
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: forwarded with the process's environment.
    unsafe { execvpe(file, argv, environ) }
}

/// execvpe: a name without '/' is looked for in PATH, as the C library does.
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's file name.
    let Some(f) = (unsafe { state::cpath(file) }) else {
        route::set_errno(libc::EFAULT);
        return -1;
    };
    if f.is_empty() {
        route::set_errno(libc::ENOENT);
        return -1;
    }
    if f.contains(&b'/') {
        // SAFETY: forwarded.
        return unsafe { exec_or_shell(file, argv, envp) };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    let mut denied = false;
    for dir in std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).split(|&c| c == b':') {
        let mut full = if dir.is_empty() {
            b".".to_vec()
        } else {
            dir.to_vec()
        };
        full.push(b'/');
        full.extend_from_slice(f);
        let Ok(c) = CString::new(full) else { continue };
        // SAFETY: a C string we own, with the caller's argv and envp.
        unsafe { exec_or_shell(c.as_ptr(), argv, envp) };
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EACCES) => denied = true,
            Some(libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT) => {}
            _ => return -1,
        }
    }
    route::set_errno(if denied { libc::EACCES } else { libc::ENOENT });
    -1
}

/// execve, and a file the kernel cannot run (no #! line) run by /bin/sh, as
/// execvp does.
///
/// # Safety
/// As execve's arguments.
unsafe fn exec_or_shell(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: forwarded.
    let r = unsafe { execve(path, argv, envp) };
    if std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOEXEC) {
        return r;
    }
    let mut args: Vec<*const c_char> = vec![c"/bin/sh".as_ptr(), path];
    // SAFETY: argv is a NULL-terminated array; its first entry is the program name.
    unsafe {
        let mut p = argv;
        if !p.is_null() && !(*p).is_null() {
            p = p.add(1);
            while !(*p).is_null() {
                args.push(*p);
                p = p.add(1);
            }
        }
    }
    args.push(std::ptr::null());
    // SAFETY: a NULL-terminated argv of valid strings.
    unsafe { execve(c"/bin/sh".as_ptr(), args.as_ptr(), envp) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    fa: *const libc::posix_spawn_file_actions_t,
    at: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: forwarded; the spawn function is the C library's posix_spawn.
    unsafe { spawn(pid, path, fa, at, argv, envp, false) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    path: *const c_char,
    fa: *const libc::posix_spawn_file_actions_t,
    at: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { spawn(pid, path, fa, at, argv, envp, true) }
}

/// posix_spawn(p): the child's program takes over a claim on every description
/// with an fd it inherits, made here before the spawn (and given back if it fails).
///
/// # Safety
/// As posix_spawn's arguments.
unsafe fn spawn(
    pid: *mut pid_t,
    path: *const c_char,
    fa: *const libc::posix_spawn_file_actions_t,
    at: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
    search: bool,
) -> c_int {
    let _inside = crate::guard::Inside::enter();
    let claimed = claim_for_child();
    let found = if search { searched(path) } else { None };
    let (path, search) = match &found {
        Some(p) => (p.as_ptr(), false),
        None => (path, search),
    };
    let prepared = if search {
        None
    } else {
        // SAFETY: posix_spawn's path and argv (one layout with execve's).
        match unsafe { prepare_for(path, argv.cast()) } {
            Ok(p) => p,
            Err(e) => {
                release_all(&claimed);
                return e;
            }
        }
    };
    // A new process inherits the descriptions' locks, not the spawner's own.
    let passed = state::attached_now().map_or_else(Vec::new, |a| hand_on(a, &claimed, false));
    let target = prepared.as_ref().map_or(path, |p| p.path.as_ptr());
    let (_args, argv) = prepared
        .as_ref()
        .map_or((Vec::new(), argv.cast()), |p| p.argv_or(argv.cast()));
    let argv = argv.cast::<*mut c_char>();
    // A spawned program is a new process: no previous image of it to take over.
    let handed = handed_env(&passed);
    let attached = state::attached_now().is_some();
    let new_env = environment(envp.cast(), false, attached, &handed, cwd_to_pass());
    let env = new_env.as_ptr().cast::<*mut c_char>();
    // SAFETY: the C library's spawn with the caller's arguments and a valid env.
    let r = unsafe {
        if search {
            real::posix_spawnp(pid, target, fa, at, argv, env)
        } else {
            real::posix_spawn(pid, target, fa, at, argv, env)
        }
    };
    for p in &passed {
        p.restore();
    }
    if r != 0 {
        release_all(&claimed);
    }
    r
}

/// The program posix_spawnp runs for `file`, when the search is this library's to
/// make (the C library's would look in the host directory under the pool's): a path,
/// or a name looked for on a PATH with a directory of the pool. The first candidate
/// that is a pool program or an executable host file; `None` leaves the search (and
/// its error) to the C library.
fn searched(file: *const c_char) -> Option<CString> {
    // SAFETY: posix_spawnp's file, null or a C string.
    let f = unsafe { state::cpath(file) }.filter(|f| !f.is_empty())?;
    if f.contains(&b'/') {
        return CString::new(f).ok();
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    let path = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    let dirs: Vec<&[u8]> = path
        .split(|&c| c == b':')
        .map(|d| if d.is_empty() { &b"."[..] } else { d })
        .collect();
    let in_pool = |p: &[u8]| matches!(route::route(libc::AT_FDCWD, p), route::Route::Pool(..));
    if !dirs.iter().any(|d| in_pool(d)) {
        return None;
    }
    dirs.iter().find_map(|d| {
        let full = CString::new([*d, b"/", f].concat()).ok()?;
        let runs = if in_pool(full.to_bytes()) {
            find(&full).is_ok()
        } else {
            // SAFETY: a C string we own.
            unsafe {
                libc::faccessat(libc::AT_FDCWD, full.as_ptr(), libc::X_OK, libc::AT_EACCESS) == 0
            }
        };
        runs.then_some(full)
    })
}

/// Before starting a new program in a child: every description with an fd the child
/// inherits is shared (its eventfd keyed) and claimed once more, the claim the new
/// program takes over when it adopts the description.
fn claim_for_child() -> Vec<u64> {
    let Some(a) = state::attached_now() else {
        return Vec::new();
    };
    share_all(a);
    let (keep, _) = passed_on(a);
    keep.into_iter()
        .filter(|&key| a.fs.claim(key).is_ok())
        .collect()
}

/// Gives back claims made for a child that did not start.
fn release_all(keys: &[u64]) {
    if let Some(a) = state::attached_now() {
        for &key in keys {
            let _ = a.fs.release(key);
        }
    }
}

/// system: glibc starts the shell with its internal posix_spawn, so the claims the
/// shell takes over are made here (and given back when no shell was started).
#[no_mangle]
pub unsafe extern "C" fn system(cmd: *const c_char) -> c_int {
    let claimed = {
        let _inside = crate::guard::Inside::enter();
        if cmd.is_null() {
            Vec::new()
        } else {
            claim_for_child()
        }
    };
    mark_fds_passed(&claimed);
    // SAFETY: the C library's system with the caller's command.
    let r = unsafe { real::system(cmd) };
    if r == -1 {
        release_all(&claimed);
    }
    r
}

/// The C library spawns system's and popen's shell itself, with the process's own
/// environment: when pool fds go to it, the environment says so (see [`ENV_FDS`]).
fn mark_fds_passed(claimed: &[u64]) {
    if !claimed.is_empty() && std::env::var_os(ENV_FDS).is_none() {
        let name = CString::new(ENV_FDS).expect("no NUL");
        // SAFETY: two NUL-terminated strings; setenv copies them. (Not safe against a
        // thread reading the environment at this moment, as every setenv.)
        unsafe { libc::setenv(name.as_ptr(), c"1".as_ptr(), 1) };
    }
}

/// popen: as system, for a shell that runs alongside.
#[no_mangle]
pub unsafe extern "C" fn popen(cmd: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let claimed = {
        let _inside = crate::guard::Inside::enter();
        claim_for_child()
    };
    mark_fds_passed(&claimed);
    // SAFETY: the C library's popen with the caller's arguments.
    let f = unsafe { real::popen(cmd, mode) };
    if f.is_null() {
        release_all(&claimed);
    }
    f
}

/// vfork is fork here: the child must become an attached process of its own before
/// it may touch the pool, which a child sharing its parent's memory cannot do.
#[no_mangle]
pub extern "C" fn vfork() -> pid_t {
    fork()
}

/// The C library's fork (whose handlers, registered by `init`, do the pool's part),
/// then, if no child was made, the claims taken for it are given back.
#[no_mangle]
pub extern "C" fn fork() -> pid_t {
    // SAFETY: the C library's fork; its handlers run as always.
    let pid = unsafe { real::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        if let Some(a) = state::attached_now() {
            let _inside = crate::guard::Inside::enter();
            a.fs.fork_failed();
        }
        route::set_errno(e.raw_os_error().unwrap_or(libc::EAGAIN));
    }
    pid
}

/// Leaves the pool first, so that the exit is not taken for a crash.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    detach();
    // SAFETY: the C library's _exit.
    unsafe { real::_exit(status) };
    unreachable!("_exit returned")
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    // SAFETY: forwarded.
    unsafe { _exit(status) }
}

/// Leaves the pool (at exit): stdio buffers of pool files are flushed first. The
/// work runs here even once the C library has destroyed this thread's thread-locals
/// (exit runs their destructors before the exit handlers): the engine's and this
/// library's thread-locals on this path have no destructor (they stay usable), or
/// are reached with `try_with` (a mapping's spares, parking_lot's thread data), and
/// the preload's backend is never `MsyncBackend` (whose pending list has one).
pub fn detach() {
    if let Some(a) = state::attached_now() {
        // SAFETY: flushes every stdio stream (ours write to the pool here).
        unsafe { libc::fflush(std::ptr::null_mut()) };
        let _inside = crate::guard::Inside::enter();
        for h in hooks::registered() {
            h.detaching(a);
        }
        // The working directory's hold is an open reference too: let it go.
        let root = a.root.read().at(lynxfs::format::ROOT_INO);
        *a.cwd.write() = root;
        if let Err(e) = a.fs.close() {
            real::say(&format!("detaching from the pool: {e}"));
        }
    }
}

/// What a program exec'd with pool fds finds at load: each inherited eventfd whose
/// count is a live description's key becomes a pool fd again, and the process's
/// previous image's place in the pool is taken over.
pub fn adopt_inherited() {
    // Only a program started by an attached one can have inherited pool fds: any
    // other is spared a look at every fd it has (a /proc/self/fd listing and a
    // readlink each, at every process start).
    if std::env::var_os(ENV_FDS).is_none() && std::env::var_os(ENV_PREVIOUS).is_none() {
        return;
    }
    let inherited = inherited_keys();
    if inherited.is_empty() && std::env::var_os(ENV_PREVIOUS).is_none() {
        return;
    }
    let Some(a) = state::attached() else { return };
    let _inside = crate::guard::Inside::enter();
    let mut by_key: std::collections::HashMap<u64, std::sync::Arc<fds::Open>> = Default::default();
    for (fd, key) in inherited {
        if let Some(o) = by_key.get(&key) {
            fds::insert(fd, o.clone());
            continue;
        }
        let Ok(h) = a.fs.adopt(key) else { continue };
        let Ok(st) = a.fs.fstat(h) else {
            let _ = a.fs.close_fd(h);
            continue;
        };
        let o = std::sync::Arc::new(fds::Open::new(
            h,
            st.ino,
            st.mode & libc::S_IFMT == libc::S_IFDIR,
        ));
        fds::insert(fd, o.clone());
        by_key.insert(key, o);
    }
    for h in hooks::registered() {
        h.adopting(a, &by_key);
    }
    if let Err(e) = a.fs.forget_previous_image() {
        real::say(&format!("taking over from the program before exec: {e}"));
    }
}

/// Every open eventfd and its count (from /proc/self/fdinfo).
fn inherited_keys() -> Vec<(c_int, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<c_int>().ok()) else {
            continue;
        };
        let is_eventfd =
            std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:[eventfd]");
        if !is_eventfd {
            continue;
        }
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) else {
            continue;
        };
        let count = info
            .lines()
            .find_map(|l| l.strip_prefix("eventfd-count:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok());
        if let Some(k) = count.filter(|&k| k != 0) {
            out.push((fd, k));
        }
    }
    out
}

// execl, execlp and execle: variadic in C, gathered by src/exec_list.c. Each entry
// point is a bare jump, so the C function receives the caller's arguments (registers
// and stack) exactly as they were passed.
// The jump: x86-64 and AArch64 only, where calls/mod.rs's calling-convention
// assumption holds too.
#[cfg(target_arch = "x86_64")]
macro_rules! jump {
    () => {
        "jmp {f}"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! jump {
    () => {
        "b {f}"
    };
}
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("liblynxfs_preload supports x86-64 and AArch64 Linux only (calls/mod.rs)");

extern "C" {
    fn lynxfs_execl();
    fn lynxfs_execlp();
    fn lynxfs_execle();
}

#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execl() {
    std::arch::naked_asm!(jump!(), f = sym lynxfs_execl)
}

#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execlp() {
    std::arch::naked_asm!(jump!(), f = sym lynxfs_execlp)
}

#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execle() {
    std::arch::naked_asm!(jump!(), f = sym lynxfs_execle)
}
