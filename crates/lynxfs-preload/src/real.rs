//! The C library's own functions, which every call this library does not serve goes
//! to: found once with `dlsym(RTLD_NEXT, name)` (the next definition after ours).

use std::sync::atomic::{AtomicUsize, Ordering};

/// A message on stderr, prefixed with this library's name. Never fails: a program
/// may have closed its stderr (coreutils do at exit).
pub fn say(msg: &str) {
    let line = format!("liblynxfs_preload: {msg}\n");
    // SAFETY: a write of our own buffer to fd 2; its result does not matter.
    unsafe { write(2, line.as_ptr().cast(), line.len()) };
}

/// The address of the next definition of `name` (NUL-terminated), looked up once into
/// `cache`. Aborts if the C library lacks it: every caller names a function glibc has,
/// and going on without it could only misroute a call.
pub fn next(cache: &AtomicUsize, name: &'static [u8]) -> usize {
    let cached = cache.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: `name` is a NUL-terminated static string; dlsym only reads it.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if f == 0 {
        let msg = b"liblynxfs_preload: a C library function is missing\n";
        // SAFETY: writes a static buffer to stderr, then ends the process.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    cache.store(f, Ordering::Relaxed);
    f
}

/// `real!(fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int);`
/// defines `real::open`, calling the C library's `open`, and `found::open`, the
/// address it was found at (0 until looked up).
macro_rules! real {
    ($(fn $name:ident($($arg:ident: $t:ty),*) -> $r:ty;)*) => {
        /// Each function's address in the C library, once looked up.
        #[allow(non_upper_case_globals)]
        mod found {
            use std::sync::atomic::AtomicUsize;
            $(pub static $name: AtomicUsize = AtomicUsize::new(0);)*
        }
        $(
            #[allow(clippy::missing_safety_doc)]
            pub unsafe fn $name($($arg: $t),*) -> $r {
                let f = next(&found::$name, concat!(stringify!($name), "\0").as_bytes());
                // SAFETY: `f` is the C library's definition of this very function,
                // whose C prototype the signature here repeats.
                let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(f) };
                // SAFETY: this function's caller upholds the C function's contract (its
                // own is the same).
                unsafe { f($($arg),*) }
            }
        )*
    };
}

/// Looks up, once per process, the C library's functions a fork child calls on its
/// way to `execve` (`execve` itself, and `faccessat` when the parent is attached):
/// a lookup in the child (`dlsym`: a walk of every loaded object's symbols, in pages
/// the child faults in anew) would be paid again by every child of a program that
/// never makes those calls itself, a shell.
pub fn find_for_fork() {
    next(&found::execve, b"execve\0");
    next(&found::faccessat, b"faccessat\0");
}

use libc::{
    c_char, c_int, c_long, c_uint, c_ulong, c_void, dirent64, gid_t, iovec, mode_t, off64_t,
    size_t, ssize_t, uid_t, DIR, FILE,
};

real! {
    fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int;
    fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t;
    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t;
    fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t;
    fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t;
    fn preadv64(fd: c_int, iov: *const iovec, n: c_int, off: off64_t) -> ssize_t;
    fn pwritev64(fd: c_int, iov: *const iovec, n: c_int, off: off64_t) -> ssize_t;
    fn preadv64v2(fd: c_int, iov: *const iovec, n: c_int, off: off64_t, flags: c_int) -> ssize_t;
    fn pwritev64v2(fd: c_int, iov: *const iovec, n: c_int, off: off64_t, flags: c_int) -> ssize_t;
    fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t;
    fn stat64(path: *const c_char, st: *mut libc::stat64) -> c_int;
    fn fstat64(fd: c_int, st: *mut libc::stat64) -> c_int;
    fn fstatat64(dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int;
    fn statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, st: *mut libc::statx) -> c_int;
    fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int;
    fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int;
    fn mknodat(dirfd: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int;
    fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    fn renameat2(od: c_int, old: *const c_char, nd: c_int, new: *const c_char, flags: c_uint) -> c_int;
    fn linkat(od: c_int, old: *const c_char, nd: c_int, new: *const c_char, flags: c_int) -> c_int;
    fn symlinkat(target: *const c_char, nd: c_int, new: *const c_char) -> c_int;
    fn readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t;
    fn truncate64(path: *const c_char, len: off64_t) -> c_int;
    fn ftruncate64(fd: c_int, len: off64_t) -> c_int;
    fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int;
    fn fsync(fd: c_int) -> c_int;
    fn fdatasync(fd: c_int) -> c_int;
    fn sync() -> ();
    fn syncfs(fd: c_int) -> c_int;
    fn fchmodat(dirfd: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int;
    fn fchmod(fd: c_int, mode: mode_t) -> c_int;
    fn fchownat(dirfd: c_int, path: *const c_char, uid: uid_t, gid: gid_t, flags: c_int) -> c_int;
    fn fchown(fd: c_int, uid: uid_t, gid: gid_t) -> c_int;
    fn utimensat(dirfd: c_int, path: *const c_char, t: *const libc::timespec, flags: c_int) -> c_int;
    fn futimens(fd: c_int, t: *const libc::timespec) -> c_int;
    fn chdir(path: *const c_char) -> c_int;
    fn fchdir(fd: c_int) -> c_int;
    fn getcwd(buf: *mut c_char, n: size_t) -> *mut c_char;
    fn dup(fd: c_int) -> c_int;
    fn dup2(fd: c_int, new: c_int) -> c_int;
    fn dup3(fd: c_int, new: c_int, flags: c_int) -> c_int;
    fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int;
    fn flock(fd: c_int, op: c_int) -> c_int;
    fn lockf64(fd: c_int, cmd: c_int, len: off64_t) -> c_int;
    // Variadic in C; its one optional argument passed as a fixed one (see `calls`).
    fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int;
    fn fdopendir(fd: c_int) -> *mut DIR;
    fn readdir64(d: *mut DIR) -> *mut dirent64;
    fn closedir(d: *mut DIR) -> c_int;
    fn rewinddir(d: *mut DIR) -> ();
    fn seekdir(d: *mut DIR, loc: c_long) -> ();
    fn telldir(d: *mut DIR) -> c_long;
    fn dirfd(d: *mut DIR) -> c_int;
    fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn statfs64(path: *const c_char, st: *mut libc::statfs64) -> c_int;
    fn fstatfs64(fd: c_int, st: *mut libc::statfs64) -> c_int;
    fn statvfs64(path: *const c_char, st: *mut libc::statvfs64) -> c_int;
    fn fstatvfs64(fd: c_int, st: *mut libc::statvfs64) -> c_int;
    fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE;
    fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE;
    fn fclose(f: *mut FILE) -> c_int;
    fn freopen64(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE;
    fn fileno(f: *mut FILE) -> c_int;
    fn umask(mask: mode_t) -> mode_t;
    fn setuid(u: uid_t) -> c_int;
    fn setgid(g: gid_t) -> c_int;
    fn seteuid(u: uid_t) -> c_int;
    fn setegid(g: gid_t) -> c_int;
    fn setreuid(r: uid_t, e: uid_t) -> c_int;
    fn setregid(r: gid_t, e: gid_t) -> c_int;
    fn setresuid(r: uid_t, e: uid_t, s: uid_t) -> c_int;
    fn setresgid(r: gid_t, e: gid_t, s: gid_t) -> c_int;
    fn setgroups(n: size_t, list: *const gid_t) -> c_int;
    fn initgroups(user: *const c_char, group: gid_t) -> c_int;
    fn setfsuid(u: uid_t) -> c_int;
    fn setfsgid(g: gid_t) -> c_int;
    fn capset(header: *mut c_void, data: *const c_void) -> c_int;
    fn syscall(n: c_long, a: c_long, b: c_long, c: c_long, d: c_long, e: c_long, f: c_long) -> c_long;
    fn mkostemps64(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int;
    fn mkdtemp(template: *mut c_char) -> *mut c_char;
    fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char;
    fn system(cmd: *const c_char) -> c_int;
    fn popen(cmd: *const c_char, mode: *const c_char) -> *mut FILE;
    fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn posix_spawn(pid: *mut libc::pid_t, path: *const c_char, fa: *const libc::posix_spawn_file_actions_t, at: *const libc::posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    fn posix_spawnp(pid: *mut libc::pid_t, path: *const c_char, fa: *const libc::posix_spawn_file_actions_t, at: *const libc::posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    fn _exit(status: c_int) -> ();
    fn fork() -> libc::pid_t;
    fn mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off64_t) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: size_t) -> c_int;
    fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int;
    fn pkey_mprotect(addr: *mut c_void, len: size_t, prot: c_int, pkey: c_int) -> c_int;
    fn pkey_free(pkey: c_int) -> c_int;
    fn pkey_set(pkey: c_int, rights: libc::c_uint) -> c_int;
    fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int;
    // Variadic in C; its one optional argument passed as a fixed one (see `calls::maps`).
    fn mremap(old: *mut c_void, old_len: size_t, new_len: size_t, flags: c_int, new_addr: *mut c_void) -> *mut c_void;
    fn remap_file_pages(addr: *mut c_void, size: size_t, prot: c_int, pgoff: size_t, flags: c_int) -> c_int;
    fn shmat(id: c_int, addr: *const c_void, flags: c_int) -> *mut c_void;
    fn pipe(fds: *mut c_int) -> c_int;
    fn pipe2(fds: *mut c_int, flags: c_int) -> c_int;
    fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int;
    fn socketpair(domain: c_int, kind: c_int, protocol: c_int, sv: *mut c_int) -> c_int;
    fn accept(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int;
    fn accept4(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t, flags: c_int) -> c_int;
    fn eventfd(initval: c_uint, flags: c_int) -> c_int;
    fn epoll_create(size: c_int) -> c_int;
    fn epoll_create1(flags: c_int) -> c_int;
    fn inotify_init() -> c_int;
    fn inotify_init1(flags: c_int) -> c_int;
    fn timerfd_create(clock: c_int, flags: c_int) -> c_int;
    fn signalfd(fd: c_int, mask: *const libc::sigset_t, flags: c_int) -> c_int;
    fn memfd_create(name: *const c_char, flags: c_uint) -> c_int;
    fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int;
    fn posix_fadvise64(fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int;
    fn sendfile64(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t;
    fn copy_file_range(inp: c_int, ioff: *mut off64_t, out: c_int, ooff: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t;
    fn getxattr(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t;
    fn lgetxattr(path: *const c_char, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t;
    fn fgetxattr(fd: c_int, name: *const c_char, v: *mut c_void, n: size_t) -> ssize_t;
    fn setxattr(path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, flags: c_int) -> c_int;
    fn lsetxattr(path: *const c_char, name: *const c_char, v: *const c_void, n: size_t, flags: c_int) -> c_int;
    fn fsetxattr(fd: c_int, name: *const c_char, v: *const c_void, n: size_t, flags: c_int) -> c_int;
    fn listxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t;
    fn llistxattr(path: *const c_char, list: *mut c_char, n: size_t) -> ssize_t;
    fn flistxattr(fd: c_int, list: *mut c_char, n: size_t) -> ssize_t;
    fn removexattr(path: *const c_char, name: *const c_char) -> c_int;
    fn lremovexattr(path: *const c_char, name: *const c_char) -> c_int;
    fn fremovexattr(fd: c_int, name: *const c_char) -> c_int;
}

/// System calls made by this library itself where the C library's function would
/// cost every preloaded process a `dlsym` at its start (the first call of each
/// function above looks it up) and the kernel's own answer is what is asked.
pub mod kernel {
    use libc::{c_long, mode_t};

    /// The process's file mode creation mask (umask(2)), read by setting it and
    /// putting it back. Only while no other thread can run (the library's load).
    pub fn read_umask() -> mode_t {
        let m = syscall1(libc::SYS_umask, 0o022);
        syscall1(libc::SYS_umask, m);
        m as mode_t
    }

    /// The kernel's working directory (getcwd(2)); `None` when it has none
    /// reachable. One longer than the kernel names is asked of the C library, which
    /// finds it by walking up.
    pub fn cwd() -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStringExt;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        let n = syscall2(
            libc::SYS_getcwd,
            buf.as_mut_ptr() as c_long,
            buf.len() as c_long,
        );
        if n == -(libc::ENAMETOOLONG as c_long) {
            return std::env::current_dir()
                .ok()
                .map(|p| p.into_os_string().into_vec());
        }
        // The length counts the NUL; an unreachable directory is "(unreachable)/...".
        if n <= 1 || buf[0] != b'/' {
            return None;
        }
        buf.truncate(n as usize - 1);
        Some(buf)
    }

    #[cfg(target_arch = "x86_64")]
    fn syscall1(n: c_long, a: c_long) -> c_long {
        syscall2(n, a, 0)
    }

    /// The `syscall` instruction itself, for the two calls above: neither touches
    /// memory but the buffer getcwd is given.
    #[cfg(target_arch = "x86_64")]
    fn syscall2(n: c_long, a: c_long, b: c_long) -> c_long {
        let ret: c_long;
        // SAFETY: umask changes only the process's mask; getcwd writes at most
        // `b` bytes into the buffer at `a`, which its caller owns. The kernel
        // clobbers RCX and R11.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") n => ret,
                in("rdi") a,
                in("rsi") b,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack)
            )
        };
        ret
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn syscall1(n: c_long, a: c_long) -> c_long {
        syscall2(n, a, 0)
    }

    /// Elsewhere through the C library's `syscall` (looked up once).
    #[cfg(not(target_arch = "x86_64"))]
    fn syscall2(n: c_long, a: c_long, b: c_long) -> c_long {
        // SAFETY: as the x86-64 version's.
        let r = unsafe { super::syscall(n, a, b, 0, 0, 0, 0) };
        if r < 0 {
            -(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL) as c_long)
        } else {
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::kernel;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn the_kernel_names_the_working_directory_as_the_c_library_does() {
        let std = std::env::current_dir().expect("a working directory");
        assert_eq!(kernel::cwd().as_deref(), Some(std.as_os_str().as_bytes()));
    }

    #[test]
    fn the_umask_read_by_system_calls_is_the_one_set() {
        // SAFETY: swaps the process's mask; the old one is put back below.
        let old = unsafe { super::umask(0o027) };
        let read = kernel::read_umask();
        // SAFETY: as above.
        let now = unsafe { super::umask(old) };
        assert_eq!((read, now), (0o027, 0o027));
    }
}
