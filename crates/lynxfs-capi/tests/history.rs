//! Concurrent histories through the C API (issue 42): four threads of one process
//! share one `lynxfs_t` of liblynxfs.so (loaded with `dlopen`, built by cargo with
//! this test's profile) and rename, replace, exchange, remove, open and stat a few
//! names (`lynxfs_test_support::history_run`), every call timed; the history must
//! be linearizable per name under Linux's semantics
//! (`lynxfs_test_support::history`), as through the library, the preload and the
//! mount (crates/lynxfs/tests/history.rs, crates/lynxfs-preload/tests/history.rs).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::time::Duration;

use engine::pmem::PmemBackend;
use engine::{MkfsOptions, Pool};
use lynxfs_test_support::built;
use lynxfs_test_support::history::{check, parse, History};
use lynxfs_test_support::history_run::{run_threads, setup, Front};

/// How long the threads call, and the calls each makes at most.
const RUN: Duration = Duration::from_millis(1500);
const MAX_CALLS: usize = 60_000;
const THREADS: u32 = 4;
/// `LYNXFS_AT_FDCWD` of lynxfs.h.
const AT_FDCWD: c_int = -100;

type Handle = *const c_void;

/// The C API's calls a history makes, from liblynxfs.so.
struct Api {
    attach: unsafe extern "C" fn(*const c_char, c_int, *mut c_int) -> Handle,
    detach: unsafe extern "C" fn(Handle) -> c_int,
    open: unsafe extern "C" fn(Handle, *const c_char, c_int, libc::mode_t) -> c_int,
    close: unsafe extern "C" fn(Handle, c_int) -> c_int,
    read: unsafe extern "C" fn(Handle, c_int, *mut c_void, usize) -> isize,
    write: unsafe extern "C" fn(Handle, c_int, *const c_void, usize) -> isize,
    fstat: unsafe extern "C" fn(Handle, c_int, *mut libc::stat) -> c_int,
    stat: unsafe extern "C" fn(Handle, *const c_char, *mut libc::stat) -> c_int,
    mkdir: unsafe extern "C" fn(Handle, *const c_char, libc::mode_t) -> c_int,
    unlink: unsafe extern "C" fn(Handle, *const c_char) -> c_int,
    renameat2:
        unsafe extern "C" fn(Handle, c_int, *const c_char, c_int, *const c_char, u32) -> c_int,
}

/// The function `name` of the library `lib` (from `dlopen`), or a failed test.
///
/// # Safety
/// `F` is a function pointer type matching the function's C declaration.
unsafe fn function<F: Copy>(lib: *mut c_void, name: &str) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let c = CString::new(name).unwrap();
    // SAFETY: `lib` is a live handle from dlopen; `c` is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    assert!(!p.is_null(), "liblynxfs.so has no {name}");
    // SAFETY: `p` is the address of the function, and `F` (a pointer-sized function
    // pointer type, checked above) its type, as the caller promises.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

impl Api {
    /// liblynxfs.so of the sources under test, loaded for the rest of the process.
    fn load() -> Api {
        let dir = built::build(&["liblynxfs.so"]).unwrap_or_else(|e| panic!("{e}"));
        let path = CString::new(
            dir.join("liblynxfs.so")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: a NUL-terminated path; the library is never closed, so the
        // function pointers taken from it stay valid.
        let lib = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            // SAFETY: dlerror returns a NUL-terminated message after a failed dlopen.
            let why = unsafe { CStr::from_ptr(libc::dlerror()) };
            panic!("dlopen liblynxfs.so: {why:?}");
        }
        // SAFETY: each field's type is the function lynxfs.h declares under that
        // name (C types mapped to Rust's: lynxfs_t * to a pointer, size_t to usize,
        // ssize_t to isize, struct stat to libc::stat).
        unsafe {
            Api {
                attach: function(lib, "lynxfs_attach"),
                detach: function(lib, "lynxfs_detach"),
                open: function(lib, "lynxfs_open"),
                close: function(lib, "lynxfs_close"),
                read: function(lib, "lynxfs_read"),
                write: function(lib, "lynxfs_write"),
                fstat: function(lib, "lynxfs_fstat"),
                stat: function(lib, "lynxfs_stat"),
                mkdir: function(lib, "lynxfs_mkdir"),
                unlink: function(lib, "lynxfs_unlink"),
                renameat2: function(lib, "lynxfs_renameat2"),
            }
        }
    }
}

/// A history's front end on the C API: one handle shared by every thread.
struct Capi {
    api: Api,
    fs: Handle,
    dir: &'static str,
}

// SAFETY: lynxfs.h allows a lynxfs_t to be used by several threads at once (only
// lynxfs_detach must be last, and it is called after the threads are joined); the
// rest is plain function pointers.
unsafe impl Sync for Capi {}

/// A C API result: negative is -errno.
fn ok(r: isize) -> Result<isize, i32> {
    if r < 0 {
        Err(-r as i32)
    } else {
        Ok(r)
    }
}

impl Capi {
    fn path(&self, p: &str) -> CString {
        CString::new(format!("{}/{p}", self.dir)).unwrap()
    }

    /// fstat of `fd` then its close; the stat's result.
    fn fstat_and_close(&self, fd: c_int) -> Result<libc::stat, i32> {
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fs` is live; `st` is valid through the call; `fd` is ours, closed once.
        let r = unsafe { (self.api.fstat)(self.fs, fd, &mut st) };
        // SAFETY: as above.
        unsafe { (self.api.close)(self.fs, fd) };
        ok(r as isize).map(|_| st)
    }
}

impl Front for Capi {
    fn write_file(&self, path: &str, id: u64) -> Result<u64, i32> {
        let p = self.path(path);
        let flags = libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY;
        // SAFETY: `fs` is live; `p` is NUL-terminated through the call.
        let fd = ok(unsafe { (self.api.open)(self.fs, p.as_ptr(), flags, 0o644) } as isize)?;
        let bytes = id.to_le_bytes();
        // SAFETY: `bytes` is valid for 8 bytes; `fd` is ours.
        let n = unsafe { (self.api.write)(self.fs, fd as c_int, bytes.as_ptr().cast(), 8) };
        let st = self.fstat_and_close(fd as c_int)?;
        match ok(n)? {
            8 => Ok(st.st_ino),
            _ => Err(libc::EIO),
        }
    }

    fn mkdir(&self, path: &str) -> Result<(), i32> {
        let p = self.path(path);
        // SAFETY: `fs` is live; `p` is NUL-terminated through the call.
        ok(unsafe { (self.api.mkdir)(self.fs, p.as_ptr(), 0o755) } as isize).map(drop)
    }

    fn rename(&self, from: &str, to: &str, flags: u32) -> Result<(), i32> {
        let (a, b) = (self.path(from), self.path(to));
        // SAFETY: `fs` is live; both paths are NUL-terminated through the call.
        let r = unsafe {
            (self.api.renameat2)(self.fs, AT_FDCWD, a.as_ptr(), AT_FDCWD, b.as_ptr(), flags)
        };
        ok(r as isize).map(drop)
    }

    fn unlink(&self, path: &str) -> Result<(), i32> {
        let p = self.path(path);
        // SAFETY: `fs` is live; `p` is NUL-terminated through the call.
        ok(unsafe { (self.api.unlink)(self.fs, p.as_ptr()) } as isize).map(drop)
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, i32> {
        let p = self.path(path);
        // SAFETY: `fs` is live; `p` is NUL-terminated through the call.
        let fd = ok(unsafe { (self.api.open)(self.fs, p.as_ptr(), libc::O_RDONLY, 0) } as isize)?;
        let mut buf = [0u8; 16];
        // SAFETY: `buf` is valid for 16 bytes; `fd` is ours, closed once.
        let n = unsafe { (self.api.read)(self.fs, fd as c_int, buf.as_mut_ptr().cast(), 16) };
        // SAFETY: as above.
        unsafe { (self.api.close)(self.fs, fd as c_int) };
        Ok(buf[..ok(n)? as usize].to_vec())
    }

    fn stat(&self, path: &str) -> Result<(u64, u64, bool), i32> {
        let p = self.path(path);
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fs` is live; `p` and `st` are valid through the call.
        ok(unsafe { (self.api.stat)(self.fs, p.as_ptr(), &mut st) } as isize)?;
        let dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        Ok((st.st_ino, st.st_size as u64, dir))
    }
}

#[test]
fn histories_through_the_c_api_are_linearizable() {
    let _dog = lynxfs_test_support::watchdog("history through the C API", Duration::from_secs(300));
    let api = Api::load();
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("h.pool");
    Pool::mkfs(&pool, &MkfsOptions::new(64 << 20), PmemBackend::default()).expect("mkfs");
    let c = CString::new(pool.into_os_string().into_encoded_bytes()).unwrap();
    let mut err = 0;
    // SAFETY: a NUL-terminated path; `err` is writable.
    let fs = unsafe { (api.attach)(c.as_ptr(), 0, &mut err) };
    assert!(!fs.is_null(), "lynxfs_attach: {err}");
    let names = CString::new("/h").unwrap();
    // SAFETY: `fs` is live; `names` is NUL-terminated.
    assert_eq!(unsafe { (api.mkdir)(fs, names.as_ptr(), 0o755) }, 0);
    let front = Capi { api, fs, dir: "/h" };
    let mut text = setup(&front).unwrap().join("\n");
    text.push('\n');
    text += &run_threads(&front, 0, THREADS, RUN, MAX_CALLS).join("\n");
    // SAFETY: the handle from lynxfs_attach, after every thread's last call.
    assert_eq!(unsafe { (front.api.detach)(front.fs) }, 0);
    let mut h = History::default();
    parse(&text, &mut h).unwrap();
    let checked = check(&h).unwrap_or_else(|v| panic!("{v}"));
    eprintln!("C API: {checked:?}");
    assert!(checked.calls > 10_000, "only {} calls", checked.calls);
}
