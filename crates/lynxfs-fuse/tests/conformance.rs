//! Conformance: the same sequence of system calls runs in a directory on a LynxFS
//! mount and in one on tmpfs (`/dev/shm`), and every call's result (value or errno,
//! plus what `stat` and `read` show afterwards) is compared. Each difference is
//! printed; the test fails on any difference not in [`ALLOWED`], which says why the
//! difference is right.
//!
//! The part "as another user" runs on a thread whose file-system credentials are
//! switched to uid 1000, gid 1000, groups [1001] (`setfsuid`, `setfsgid` and the raw
//! `setgroups` system call, all per-thread), so the kernel and the FUSE daemon see
//! that user while the rest of the process stays root.
//!
//! Needs root and `/dev/fuse`; fails loudly without them.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_fuse::mount::{mount_background, MountOptions};
use lynxfs_fuse::usage::{LiveUsage, Transport, USAGE_XATTR};

#[path = "conformance/killpriv.rs"]
mod killpriv;
#[path = "conformance/owner.rs"]
mod owner;
#[path = "conformance/race.rs"]
mod race;
#[path = "conformance/setid.rs"]
mod setid;
#[path = "conformance/spawn.rs"]
mod spawn;
#[path = "conformance/times.rs"]
mod times;

/// Differences that are right, by step label, with the reason.
const ALLOWED: &[(&str, &str)] = &[
    (
        "sparse seek data 9 after allocate",
        "tmpfs counts fallocated pages not yet written as holes; LynxFS's block map does \
         not mark blocks unwritten, so it reports them as data (zeros), which lseek(2) \
         allows: a file system may report any range of a file as data",
    ),
    (
        "user setxattr trusted",
        "the test thread changes only its file-system identity (setfsuid), so it keeps \
         CAP_SYS_ADMIN, which tmpfs honours for trusted.*; the FUSE daemon sees uid 1000 \
         and refuses, which is what a real uid 1000 (without the capability) gets on tmpfs",
    ),
];

const USER: u32 = 1000;
const GROUP: u32 = 1000;
const EXTRA_GROUP: u32 = 1001;

struct Ctx {
    root: PathBuf,
    log: Vec<(String, String)>,
    /// Descriptors still open; closed at the end so the mount can go.
    fds: Vec<i32>,
}

fn errno_str() -> String {
    let e = std::io::Error::last_os_error();
    let n = e.raw_os_error().unwrap_or(0);
    format!("Err({})", errno_name(n))
}

fn errno_name(n: i32) -> String {
    let names = [
        (libc::EPERM, "EPERM"),
        (libc::ENOENT, "ENOENT"),
        (libc::EBADF, "EBADF"),
        (libc::EACCES, "EACCES"),
        (libc::EEXIST, "EEXIST"),
        (libc::EXDEV, "EXDEV"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::EINVAL, "EINVAL"),
        (libc::EFBIG, "EFBIG"),
        (libc::ENOSPC, "ENOSPC"),
        (libc::EROFS, "EROFS"),
        (libc::EMLINK, "EMLINK"),
        (libc::ERANGE, "ERANGE"),
        (libc::ENAMETOOLONG, "ENAMETOOLONG"),
        (libc::ENOTEMPTY, "ENOTEMPTY"),
        (libc::ELOOP, "ELOOP"),
        (libc::EWOULDBLOCK, "EWOULDBLOCK"),
        (libc::ENODATA, "ENODATA"),
        (libc::EOPNOTSUPP, "EOPNOTSUPP"),
        (libc::E2BIG, "E2BIG"),
        (libc::EBUSY, "EBUSY"),
        (libc::ENOSYS, "ENOSYS"),
        (libc::EIO, "EIO"),
        (libc::ENODEV, "ENODEV"),
        (libc::ENXIO, "ENXIO"),
    ];
    names
        .iter()
        .find(|(e, _)| *e == n)
        .map_or_else(|| format!("errno {n}"), |(_, s)| s.to_string())
}

impl Ctx {
    fn path(&self, name: &str) -> CString {
        let p = if name.is_empty() {
            self.root.clone()
        } else {
            self.root.join(name)
        };
        CString::new(p.as_os_str().as_bytes()).expect("no NUL in test paths")
    }

    fn rec(&mut self, label: &str, outcome: String) {
        self.log.push((label.to_string(), outcome));
    }

    /// Records a libc return value: non-negative is success (shown unless `hide`).
    fn ret(&mut self, label: &str, r: i64, hide: bool) -> i64 {
        let s = if r < 0 {
            errno_str()
        } else if hide {
            "Ok".to_string()
        } else {
            format!("Ok({r})")
        };
        self.rec(label, s);
        r
    }

    fn call(&mut self, label: &str, r: libc::c_int) -> i64 {
        self.ret(label, i64::from(r), false)
    }

    fn open(&mut self, label: &str, name: &str, flags: i32, mode: u32) -> i32 {
        let p = self.path(name);
        // SAFETY: p is a valid C string.
        let fd = unsafe { libc::open(p.as_ptr(), flags, mode) };
        self.ret(label, i64::from(fd), true);
        if fd >= 0 {
            self.fds.push(fd);
        }
        fd
    }

    fn close(&mut self, fd: i32) {
        if fd >= 0 {
            self.fds.retain(|&f| f != fd);
            // SAFETY: closing a descriptor this test opened.
            unsafe { libc::close(fd) };
        }
    }

    fn write(&mut self, label: &str, fd: i32, data: &[u8]) {
        // SAFETY: data is a valid buffer of data.len() bytes.
        let r = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        self.ret(label, r as i64, false);
    }

    fn pwrite(&mut self, label: &str, fd: i32, data: &[u8], off: i64) {
        // SAFETY: as write.
        let r = unsafe { libc::pwrite(fd, data.as_ptr().cast(), data.len(), off) };
        self.ret(label, r as i64, false);
    }

    fn read(&mut self, label: &str, fd: i32, n: usize) {
        let mut buf = vec![0u8; n];
        // SAFETY: buf is a valid buffer of n bytes.
        let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), n) };
        self.data(label, r as i64, &buf);
    }

    fn pread(&mut self, label: &str, fd: i32, n: usize, off: i64) {
        let mut buf = vec![0u8; n];
        // SAFETY: as read.
        let r = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), n, off) };
        self.data(label, r as i64, &buf);
    }

    fn data(&mut self, label: &str, r: i64, buf: &[u8]) {
        let s = if r < 0 {
            errno_str()
        } else {
            format!("Ok({:?})", String::from_utf8_lossy(&buf[..r as usize]))
        };
        self.rec(label, s);
    }

    fn lseek(&mut self, label: &str, fd: i32, off: i64, whence: i32) {
        // SAFETY: plain integers.
        let r = unsafe { libc::lseek(fd, off, whence) };
        self.ret(label, r, false);
    }

    /// What stat shows that should not depend on the file system: type and mode,
    /// links, owner, size for files and symlinks, rdev for devices.
    fn stat_desc(st: &libc::stat) -> String {
        let kind = st.st_mode & libc::S_IFMT;
        let size = if kind == libc::S_IFREG || kind == libc::S_IFLNK {
            format!(" size={}", st.st_size)
        } else {
            String::new()
        };
        let rdev = if kind == libc::S_IFCHR || kind == libc::S_IFBLK {
            format!(" rdev={}", st.st_rdev)
        } else {
            String::new()
        };
        format!(
            "mode={:o} nlink={} uid={} gid={}{size}{rdev}",
            st.st_mode, st.st_nlink, st.st_uid, st.st_gid
        )
    }

    fn stat_with(&mut self, label: &str, name: &str, follow: bool) -> Option<libc::stat> {
        let p = self.path(name);
        // SAFETY: a zeroed stat is a valid out-buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: p and st are valid.
        let r = unsafe {
            if follow {
                libc::stat(p.as_ptr(), &mut st)
            } else {
                libc::lstat(p.as_ptr(), &mut st)
            }
        };
        if r < 0 {
            self.rec(label, errno_str());
            None
        } else {
            self.rec(label, Self::stat_desc(&st));
            Some(st)
        }
    }

    fn stat(&mut self, label: &str, name: &str) -> Option<libc::stat> {
        self.stat_with(label, name, true)
    }

    fn fstat(&mut self, label: &str, fd: i32) {
        // SAFETY: as stat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: st is a valid out-buffer.
        let r = unsafe { libc::fstat(fd, &mut st) };
        let s = if r < 0 {
            errno_str()
        } else {
            Self::stat_desc(&st)
        };
        self.rec(label, s);
    }

    fn content(&mut self, label: &str, name: &str) {
        let s = match std::fs::read(self.root.join(name)) {
            Ok(b) => format!("Ok({:?})", String::from_utf8_lossy(&b)),
            Err(e) => format!("Err({})", errno_name(e.raw_os_error().unwrap_or(0))),
        };
        self.rec(label, s);
    }

    fn mkdir(&mut self, label: &str, name: &str, mode: u32) {
        let p = self.path(name);
        // SAFETY: p is valid.
        let r = unsafe { libc::mkdir(p.as_ptr(), mode) };
        self.call(label, r);
    }

    fn path2(
        &mut self,
        label: &str,
        a: &str,
        b: &str,
        f: unsafe extern "C" fn(*const libc::c_char, *const libc::c_char) -> libc::c_int,
    ) {
        let (pa, pb) = (self.path(a), self.path(b));
        // SAFETY: both are valid C strings; f is a libc call taking two paths.
        let r = unsafe { f(pa.as_ptr(), pb.as_ptr()) };
        self.call(label, r);
    }

    /// A symlink at `name` whose target is `target`, as given (not under the root).
    fn symlink(&mut self, label: &str, target: &str, name: &str) {
        let t = CString::new(target).expect("no NUL");
        let p = self.path(name);
        // SAFETY: both are valid C strings.
        let r = unsafe { libc::symlink(t.as_ptr(), p.as_ptr()) };
        self.call(label, r);
    }

    fn rename2(&mut self, label: &str, a: &str, b: &str, flags: u32) {
        let (pa, pb) = (self.path(a), self.path(b));
        // SAFETY: renameat2 with valid paths; AT_FDCWD with absolute paths.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                pa.as_ptr(),
                libc::AT_FDCWD,
                pb.as_ptr(),
                flags,
            )
        };
        self.ret(label, r, false);
    }

    fn path1(&mut self, label: &str, a: &str, f: impl FnOnce(*const libc::c_char) -> libc::c_int) {
        let pa = self.path(a);
        let r = f(pa.as_ptr());
        self.call(label, r);
    }

    fn readdir(&mut self, label: &str, name: &str) {
        let s = match std::fs::read_dir(self.root.join(name)) {
            Ok(rd) => {
                let mut v: Vec<String> = rd
                    .map(|e| {
                        let e = e.expect("readdir entry");
                        let t = e.file_type().expect("d_type");
                        let k = if t.is_dir() {
                            "d"
                        } else if t.is_symlink() {
                            "l"
                        } else if t.is_file() {
                            "f"
                        } else {
                            "o"
                        };
                        format!("{}:{k}", e.file_name().to_string_lossy())
                    })
                    .collect();
                v.sort();
                format!("Ok({v:?})")
            }
            Err(e) => format!("Err({})", errno_name(e.raw_os_error().unwrap_or(0))),
        };
        self.rec(label, s);
    }
}

fn xattr_buf(r: isize, buf: &[u8]) -> String {
    if r < 0 {
        errno_str()
    } else {
        format!("Ok({:?})", String::from_utf8_lossy(&buf[..r as usize]))
    }
}

/// A listxattr result with its names sorted: their order is unspecified.
fn sorted_names(r: isize, buf: &[u8]) -> String {
    if r < 0 {
        return errno_str();
    }
    let mut names: Vec<_> = buf[..r as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    names.sort();
    format!("Ok({names:?})")
}

/// SEEK_DATA and SEEK_HOLE on a file with holes. Holes are whole pages (tmpfs's
/// granularity, and LynxFS's block size), so both answer alike.
fn sparse(c: &mut Ctx) {
    use libc::*;
    const P: i64 = 4096;
    let fd = c.open("open sparse", "t/sparse", O_CREAT | O_RDWR, 0o644);
    // Data in pages 0, 1, 3 (partly) and 8 (partly, past the end); holes between and
    // after, up to 12 pages.
    c.pwrite("sparse page 0", fd, &[b's'; 4096], 0);
    c.pwrite("sparse page 1", fd, &[b't'; 4096], P);
    c.pwrite("sparse page 3", fd, &[b'u'; 100], 3 * P + 10);
    c.pwrite("sparse page 8", fd, &[b'v'; 10], 8 * P);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("sparse grow", unsafe { ftruncate(fd, 12 * P) });
    for (label, off, whence) in [
        ("data 0", 0, SEEK_DATA),
        ("data 100", 100, SEEK_DATA),
        ("hole 0", 0, SEEK_HOLE),
        ("hole in page 2", 2 * P + 1, SEEK_HOLE),
        ("data in page 2", 2 * P + 7, SEEK_DATA),
        ("hole in page 3", 3 * P, SEEK_HOLE),
        ("data from page 4", 4 * P, SEEK_DATA),
        ("hole from page 8", 8 * P + 60, SEEK_HOLE),
        ("data after the last", 9 * P, SEEK_DATA),
        ("hole before the end", 12 * P - 1, SEEK_HOLE),
        ("data at the end", 12 * P, SEEK_DATA),
        ("hole at the end", 12 * P, SEEK_HOLE),
        ("hole past the end", 20 * P, SEEK_HOLE),
        ("data negative", -1, SEEK_DATA),
    ] {
        c.lseek(&format!("sparse seek {label}"), fd, off, whence);
    }
    c.lseek("sparse cur after seeks", fd, 0, SEEK_CUR);
    // The kernel answers FS_IOC_FIEMAP itself for both: tmpfs has no fiemap, and FUSE
    // inodes have none either (fs/ioctl.c's ioctl_fiemap: EOPNOTSUPP, the daemon is
    // never asked). The library and the preload answer it (docs/GUIDE.md).
    let mut fm = [0u64; 4 + 7 * 4];
    fm[1] = u64::MAX;
    fm[3] = 4; // fm_extent_count
               // SAFETY: a `struct fiemap` header followed by room for 4 extents.
    let r = unsafe { ioctl(fd, 0xC020_660B, fm.as_mut_ptr()) };
    c.call("sparse fiemap", r);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("sparse punch page 0", unsafe {
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, P)
    });
    c.lseek("sparse seek hole 0 after punch", fd, 0, SEEK_HOLE);
    c.lseek("sparse seek data 0 after punch", fd, 0, SEEK_DATA);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("sparse allocate page 10", unsafe {
        fallocate(fd, 0, 10 * P, P)
    });
    c.lseek("sparse seek data 9 after allocate", fd, 9 * P, SEEK_DATA);
    c.close(fd);
}

/// Everything root does.
fn script(c: &mut Ctx) {
    use libc::*;
    c.mkdir("mkdir t", "t", 0o755);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod t 0755", "t", |p| unsafe { chmod(p, 0o755) });

    // ---- open flags, read/write, seek ----
    let fd = c.open("open creat|excl", "t/f", O_CREAT | O_EXCL | O_RDWR, 0o644);
    c.open(
        "open creat|excl again",
        "t/f",
        O_CREAT | O_EXCL | O_RDWR,
        0o644,
    );
    c.write("write", fd, b"hello world");
    c.lseek("lseek set 0", fd, 0, SEEK_SET);
    c.read("read", fd, 100);
    c.read("read at eof", fd, 100);
    c.pread("pread 6", fd, 5, 6);
    c.pwrite("pwrite 6", fd, b"W", 6);
    c.lseek("lseek end", fd, 0, SEEK_END);
    c.lseek("lseek cur -100", fd, -100, SEEK_CUR);
    c.lseek("lseek set 100", fd, 100, SEEK_SET);
    c.write("write at 100", fd, b"x");
    c.fstat("fstat after hole", fd);
    c.pread("pread hole", fd, 4, 50);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("ftruncate 5", unsafe { ftruncate(fd, 5) });
    c.fstat("fstat after ftruncate", fd);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("fsync", unsafe { fsync(fd) });
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("fdatasync", unsafe { fdatasync(fd) });
    c.close(fd);
    c.content("content f", "t/f");

    let fd = c.open("open trunc", "t/f", O_WRONLY | O_TRUNC, 0);
    c.close(fd);
    c.stat("stat after trunc", "t/f");
    let fd = c.open("open append", "t/f", O_WRONLY | O_APPEND, 0);
    c.write("append 1", fd, b"ab");
    c.pwrite("append pwrite 0", fd, b"cd", 0);
    c.lseek("lseek append cur", fd, 0, SEEK_CUR);
    c.read("read on wronly", fd, 4);
    c.close(fd);
    c.content("content after append", "t/f");
    let fd = c.open("open rdonly", "t/f", O_RDONLY, 0);
    c.write("write on rdonly", fd, b"zz");
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("ftruncate on rdonly", unsafe { ftruncate(fd, 0) });
    c.close(fd);
    c.open("open creat existing", "t/f", O_CREAT | O_RDWR, 0o600);
    c.stat("mode kept by creat", "t/f");
    c.open("o_directory on file", "t/f", O_RDONLY | O_DIRECTORY, 0);
    let fd = c.open("open dir rdonly", "t", O_RDONLY | O_DIRECTORY, 0);
    c.read("read on dir", fd, 10);
    c.close(fd);
    c.open("open dir wronly", "t", O_WRONLY, 0);
    c.open("open dir creat", "t", O_CREAT | O_RDWR, 0o644);
    c.open("open missing", "t/missing", O_RDONLY, 0);
    c.open("open below file", "t/f/x", O_RDONLY, 0);
    c.open(
        "open name too long",
        &format!("t/{}", "n".repeat(256)),
        O_CREAT | O_RDWR,
        0o644,
    );
    c.open(
        "open name 255",
        &format!("t/{}", "n".repeat(255)),
        O_CREAT | O_RDWR,
        0o644,
    );
    c.path1(
        "unlink name 255",
        &format!("t/{}", "n".repeat(255)),
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        |p| unsafe { unlink(p) },
    );

    // ---- truncate, fallocate ----
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("truncate 3", "t/f", |p| unsafe { truncate(p, 3) });
    c.content("content after truncate 3", "t/f");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("truncate 10000", "t/f", |p| unsafe { truncate(p, 10000) });
    c.stat("stat after truncate 10000", "t/f");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("truncate dir", "t", |p| unsafe { truncate(p, 0) });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("truncate negative", "t/f", |p| unsafe { truncate(p, -1) });
    let fd = c.open("open for fallocate", "t/fa", O_CREAT | O_RDWR, 0o644);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("fallocate 0..8192", unsafe { fallocate(fd, 0, 0, 8192) });
    c.fstat("fstat after fallocate", fd);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("fallocate keep_size", unsafe {
        fallocate(fd, FALLOC_FL_KEEP_SIZE, 8192, 8192)
    });
    c.fstat("fstat after keep_size", fd);
    c.pwrite("fill", fd, &[b'a'; 8192], 0);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("punch hole", unsafe {
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 5000)
    });
    c.pread("read around hole", fd, 8, 96);
    c.pread("read hole end", fd, 8, 5096);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("punch without keep_size", unsafe {
        fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 10)
    });
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("fallocate len 0", unsafe { fallocate(fd, 0, 0, 0) });
    c.close(fd);
    sparse(c);

    // ---- directories ----
    c.mkdir("mkdir d", "t/d", 0o755);
    c.mkdir("mkdir d again", "t/d", 0o755);
    c.mkdir("mkdir d/sub", "t/d/sub", 0o700);
    c.stat("stat d", "t/d");
    c.stat("stat d/sub", "t/d/sub");
    c.mkdir("mkdir in missing", "t/nope/x", 0o755);
    c.mkdir("mkdir under file", "t/f/x", 0o755);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("rmdir nonempty", "t/d", |p| unsafe { rmdir(p) });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("rmdir file", "t/f", |p| unsafe { rmdir(p) });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("rmdir dot", "t/d/.", |p| unsafe { rmdir(p) });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("unlink dir", "t/d", |p| unsafe { unlink(p) });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("unlink missing", "t/zz", |p| unsafe { unlink(p) });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("rmdir sub", "t/d/sub", |p| unsafe { rmdir(p) });
    c.stat("stat d after rmdir", "t/d");

    // ---- rename ----
    std::fs::write(c.root.join("t/r1"), b"one").unwrap();
    std::fs::write(c.root.join("t/r2"), b"two").unwrap();
    c.path2("rename r1 r3", "t/r1", "t/r3", rename);
    c.path2("rename r3 over r2", "t/r3", "t/r2", rename);
    c.content("content r2", "t/r2");
    c.stat("stat r3 gone", "t/r3");
    c.mkdir("mkdir e", "t/e", 0o755);
    c.mkdir("mkdir e/in", "t/e/in", 0o755);
    c.path2("rename file over dir", "t/r2", "t/d", rename);
    c.path2("rename dir over file", "t/d", "t/r2", rename);
    c.path2("rename dir over nonempty", "t/d", "t/e", rename);
    c.path2("rename dir into itself", "t/e", "t/e/in/x", rename);
    c.path2("rename missing", "t/nope", "t/x", rename);
    c.path2("rename d into e", "t/d", "t/e/d", rename);
    c.stat("stat e after move", "t/e");
    c.stat("stat t after move", "t");
    std::fs::write(c.root.join("t/x1"), b"x1").unwrap();
    std::fs::write(c.root.join("t/x2"), b"x2").unwrap();
    c.rename2("noreplace onto existing", "t/x1", "t/x2", RENAME_NOREPLACE);
    c.rename2("noreplace to new", "t/x1", "t/x3", RENAME_NOREPLACE);
    c.rename2("exchange", "t/x3", "t/x2", RENAME_EXCHANGE);
    c.content("x2 after exchange", "t/x2");
    c.content("x3 after exchange", "t/x3");
    c.rename2("exchange with missing", "t/x3", "t/x9", RENAME_EXCHANGE);
    c.rename2("exchange file and dir", "t/x3", "t/e", RENAME_EXCHANGE);
    c.stat("x3 is a dir now", "t/x3");
    c.rename2(
        "both flags",
        "t/x2",
        "t/x4",
        RENAME_EXCHANGE | RENAME_NOREPLACE,
    );

    // ---- links ----
    c.path2("link f g", "t/f", "t/g", link);
    c.stat("stat f nlink 2", "t/f");
    c.path2("link existing", "t/f", "t/g", link);
    c.path2("link dir", "t/x3", "t/dl", link);
    c.path2("rename between two links", "t/f", "t/g", rename);
    c.stat("f still there", "t/f");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("unlink g", "t/g", |p| unsafe { unlink(p) });
    c.stat("stat f nlink 1", "t/f");

    // ---- symlinks ----
    c.symlink("symlink s -> f", "f", "t/s");
    c.symlink("symlink existing", "f", "t/s");
    c.stat_with("lstat s", "t/s", false);
    c.stat("stat s", "t/s");
    for (label, name) in [("readlink s", "t/s"), ("readlink file", "t/f")] {
        let p = c.path(name);
        let mut buf = [0u8; 64];
        // SAFETY: p valid, buf valid for 64 bytes.
        let r = unsafe { readlink(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        c.data(label, r as i64, &buf);
    }
    c.open("o_nofollow on symlink", "t/s", O_RDONLY | O_NOFOLLOW, 0);
    c.symlink("dangling symlink", "nowhere", "t/dang");
    c.open("open dangling", "t/dang", O_RDONLY, 0);
    c.open("creat through dangling", "t/dang", O_CREAT | O_RDWR, 0o644);
    c.stat("stat created target", "t/nowhere");

    // ---- readdir ----
    c.readdir("readdir t", "t");
    c.readdir("readdir e", "t/e");
    c.readdir("readdir file", "t/f");

    // ---- attributes ----
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod 0600", "t/f", |p| unsafe { chmod(p, 0o600) });
    c.stat("stat after chmod", "t/f");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod 04755", "t/f", |p| unsafe { chmod(p, 0o4755) });
    c.stat("stat after chmod suid", "t/f");
    let fd = c.open("open suid file", "t/f", O_WRONLY, 0);
    c.pwrite("root writes suid file", fd, b"r", 0);
    c.close(fd);
    c.stat("suid kept for root writer", "t/f");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chmod 04755 again", "t/f", |p| unsafe { chmod(p, 0o4755) });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chown 1000:1000", "t/f", |p| unsafe {
        chown(p, USER, GROUP)
    });
    c.stat("stat after chown (suid cleared)", "t/f");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("chown -1:-1", "t/f", |p| unsafe {
        chown(p, u32::MAX, u32::MAX)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("lchown symlink", "t/s", |p| unsafe { lchown(p, 7, 7) });
    c.stat_with("lstat after lchown", "t/s", false);
    c.stat("target owner unchanged", "t/f");
    let times = [
        timespec {
            tv_sec: 1000,
            tv_nsec: 5,
        },
        timespec {
            tv_sec: 2000,
            tv_nsec: 0,
        },
    ];
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("utimensat", "t/f", |p| unsafe {
        utimensat(AT_FDCWD, p, times.as_ptr(), 0)
    });
    if let Some(st) = c.stat("stat for times", "t/f") {
        let s = format!(
            "atime={}.{} mtime={}.{}",
            st.st_atime, st.st_atime_nsec, st.st_mtime, st.st_mtime_nsec
        );
        c.rec("times after utimensat", s);
    }
    let now_omit = [
        timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
    ];
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("utimensat omit/now", "t/f", |p| unsafe {
        utimensat(AT_FDCWD, p, now_omit.as_ptr(), 0)
    });
    if let Some(st) = c.stat("stat for times 2", "t/f") {
        let s = format!(
            "atime={}.{} mtime_moved={}",
            st.st_atime,
            st.st_atime_nsec,
            st.st_mtime > 2000
        );
        c.rec("times after omit/now", s);
    }

    times::script(c);

    // ---- statfs ----
    {
        let p = c.path("t");
        // SAFETY: statfs is plain integers, for which all zeros is a valid value.
        let mut s: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: p is a NUL-terminated path and s a valid out-buffer, both alive for
        // the call.
        let r = unsafe { statfs(p.as_ptr(), &mut s) };
        let sane = r == 0
            && s.f_bsize > 0
            && s.f_namelen == 255
            && s.f_blocks >= s.f_bfree
            && s.f_bfree >= s.f_bavail
            && s.f_files >= s.f_ffree;
        c.rec("statfs sane", format!("{sane}"));
    }

    // ---- xattrs ----
    xattrs(c);

    // ---- special files ----
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("mknod fifo", "t/fifo", |p| unsafe {
        mknod(p, S_IFIFO | 0o640, 0)
    });
    c.stat("stat fifo", "t/fifo");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("mknod socket", "t/sock", |p| unsafe {
        mknod(p, S_IFSOCK | 0o600, 0)
    });
    c.stat("stat socket", "t/sock");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("mknod chr", "t/null", |p| unsafe {
        mknod(p, S_IFCHR | 0o666, makedev(1, 3))
    });
    c.stat("stat chr", "t/null");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("mknod existing", "t/fifo", |p| unsafe {
        mknod(p, S_IFIFO | 0o640, 0)
    });

    // ---- flock ----
    let a = c.open("open for flock a", "t/f", O_RDONLY, 0);
    let b = c.open("open for flock b", "t/f", O_RDONLY, 0);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("flock ex a", unsafe { flock(a, LOCK_EX | LOCK_NB) });
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("flock ex b", unsafe { flock(b, LOCK_EX | LOCK_NB) });
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("flock sh b", unsafe { flock(b, LOCK_SH | LOCK_NB) });
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("unlock a", unsafe { flock(a, LOCK_UN) });
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("flock sh b again", unsafe { flock(b, LOCK_SH | LOCK_NB) });
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("flock sh a", unsafe { flock(a, LOCK_SH | LOCK_NB) });
    c.close(a);
    c.close(b);

    // ---- deleted while open ----
    let fd = c.open("open doomed", "t/doomed", O_CREAT | O_RDWR, 0o644);
    c.write("write doomed", fd, b"still here");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("unlink doomed", "t/doomed", |p| unsafe { unlink(p) });
    c.fstat("fstat unlinked", fd);
    c.pread("read unlinked", fd, 20, 0);
    c.pwrite("write unlinked", fd, b"!", 10);
    c.fstat("fstat unlinked after write", fd);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("ftruncate unlinked", unsafe { ftruncate(fd, 2) });
    c.pread("read unlinked after truncate", fd, 20, 0);
    c.close(fd);
    c.stat("stat doomed gone", "t/doomed");
    removed_open_dirs(c, "t");
    tmpfiles(c);
    inode_flags(c);
    copy_ranges(c);

    // ---- mmap ----
    let fd = c.open("open for mmap", "t/m", O_CREAT | O_RDWR, 0o644);
    // SAFETY: a libc call on an fd this test opened, with plain integers.
    c.call("ftruncate for mmap", unsafe { ftruncate(fd, 8192) });
    // SAFETY: mapping 8192 bytes of a file that is 8192 bytes long.
    let m = unsafe {
        mmap(
            std::ptr::null_mut(),
            8192,
            PROT_READ | PROT_WRITE,
            MAP_SHARED,
            fd,
            0,
        )
    };
    c.rec(
        "mmap",
        if m == MAP_FAILED {
            errno_str()
        } else {
            "Ok".into()
        },
    );
    if m != MAP_FAILED {
        // SAFETY: m maps 8192 writable bytes.
        unsafe {
            let s = std::slice::from_raw_parts_mut(m.cast::<u8>(), 8192);
            s[100..105].copy_from_slice(b"mmap!");
            s[5000..5003].copy_from_slice(b"end");
        }
        // SAFETY: m maps the file's 8192 bytes (mapped above); unmapped only here.
        c.call("msync", unsafe { msync(m, 8192, MS_SYNC) });
        // SAFETY: m maps the file's 8192 bytes (mapped above); unmapped only here.
        c.call("munmap", unsafe { munmap(m, 8192) });
    }
    c.close(fd);
    let fd = c.open("reopen mmap file", "t/m", O_RDONLY, 0);
    c.pread("read mmap write 1", fd, 5, 100);
    c.pread("read mmap write 2", fd, 3, 5000);
    c.close(fd);

    // ---- access ----
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("access f R_OK", "t/f", |p| unsafe { access(p, R_OK) });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("access fifo X_OK", "t/fifo", |p| unsafe { access(p, X_OK) });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("access missing", "t/missing", |p| unsafe {
        access(p, F_OK)
    });

    // Last, as it leaves whiteout devices behind.
    std::fs::write(c.root.join("t/w1"), b"w").unwrap();
    c.rename2("whiteout", "t/w1", "t/w2", RENAME_WHITEOUT);
    c.stat("stat whiteout", "t/w1");
    c.stat("stat whiteout moved", "t/w2");
    std::fs::write(c.root.join("t/w3"), b"w3").unwrap();
    c.rename2("whiteout over a file", "t/w3", "t/w2", RENAME_WHITEOUT);
    c.content("read whiteout target", "t/w2");
    c.stat("stat whiteout 2", "t/w3");
    c.rename2(
        "whiteout with exchange",
        "t/w3",
        "t/w2",
        RENAME_WHITEOUT | RENAME_EXCHANGE,
    );
    c.readdir("readdir whiteouts", "t");
}

/// Directories removed while open (rmdir, and a rename over them) stay usable as on
/// tmpfs: fstat answers with no links, listing gives nothing, nothing can be looked
/// up or made in them, and they can be opened again through ".". `base` is a
/// directory the caller may write in.
fn removed_open_dirs(c: &mut Ctx, base: &str) {
    use libc::*;
    let at = |n: &str| format!("{base}/{n}");
    let f = c.open("create rdf", &at("rdf"), O_CREAT | O_WRONLY, 0o644);
    c.close(f);
    c.mkdir("mkdir rd", &at("rd"), 0o755);
    let rd = c.open("open rd", &at("rd"), O_RDONLY | O_DIRECTORY, 0);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("rmdir rd", &at("rd"), |p| unsafe { rmdir(p) });
    c.removed_dir_steps("rmdir'd", rd, &at("rdf"));
    c.close(rd);
    c.mkdir("mkdir rv", &at("rv"), 0o755);
    c.mkdir("mkdir rn", &at("rn"), 0o755);
    let rv = c.open("open rv", &at("rv"), O_RDONLY | O_DIRECTORY, 0);
    c.rename2("rename rn over rv", &at("rn"), &at("rv"), 0);
    c.removed_dir_steps("renamed over", rv, &at("rdf"));
    c.close(rv);
    c.readdir("list after removed dirs", &at("rv"));
    c.stat("rdf stays", &at("rdf"));
}

impl Ctx {
    /// What a removed directory open as `fd` answers; `file` is a file to try to
    /// link and move into it.
    fn removed_dir_steps(&mut self, what: &str, fd: i32, file: &str) {
        use libc::*;
        let name = c"x";
        self.fstat(&format!("fstat {what}"), fd);
        let mut buf = [0u8; 4096];
        // SAFETY: buf is a valid buffer of buf.len() bytes for getdents64 to fill.
        let r = unsafe { syscall(SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        self.ret(&format!("getdents {what}"), r, false);
        // SAFETY: a valid descriptor and a valid C string.
        let f = unsafe { openat(fd, name.as_ptr(), O_CREAT | O_RDWR, 0o644) };
        self.ret(&format!("openat creat {what}"), i64::from(f), true);
        if f >= 0 {
            self.fds.push(f);
        }
        // SAFETY: as openat.
        let r = unsafe { mkdirat(fd, name.as_ptr(), 0o755) };
        self.call(&format!("mkdirat {what}"), r);
        // SAFETY: as openat.
        let r = unsafe { symlinkat(c"t".as_ptr(), fd, name.as_ptr()) };
        self.call(&format!("symlinkat {what}"), r);
        let f = self.path(file);
        // SAFETY: valid descriptors and C strings.
        let r = unsafe { linkat(AT_FDCWD, f.as_ptr(), fd, name.as_ptr(), 0) };
        self.call(&format!("linkat into {what}"), r);
        // SAFETY: as linkat.
        let r = unsafe { renameat(AT_FDCWD, f.as_ptr(), fd, name.as_ptr()) };
        self.call(&format!("renameat into {what}"), r);
        // SAFETY: as openat; a zeroed stat is a valid out-buffer.
        let r = unsafe {
            let mut st: stat = std::mem::zeroed();
            fstatat(fd, name.as_ptr(), &mut st, 0)
        };
        self.call(&format!("fstatat {what}"), r);
        // SAFETY: as openat; a zeroed stat is a valid out-buffer.
        let (r, up) = unsafe {
            let mut st: stat = std::mem::zeroed();
            (fstatat(fd, c"..".as_ptr(), &mut st, 0), st)
        };
        self.call(&format!("fstatat dotdot {what}"), r);
        self.rec(
            &format!("dotdot is a live directory {what}"),
            format!("{}", up.st_mode & S_IFMT == S_IFDIR && up.st_nlink > 0),
        );
        // Linux makes unnamed files in a removed directory (vfs_tmpfile has no
        // dead-directory check).
        // SAFETY: as openat.
        let t = unsafe { openat(fd, c".".as_ptr(), O_TMPFILE | O_RDWR, 0o600) };
        self.ret(&format!("tmpfile in {what}"), i64::from(t), true);
        if t >= 0 {
            self.fds.push(t);
        }
        // SAFETY: as openat.
        let r = unsafe { unlinkat(fd, c".".as_ptr(), AT_REMOVEDIR) };
        self.call(&format!("rmdir dot {what}"), r);
        // SAFETY: as openat.
        let dot = unsafe { openat(fd, c".".as_ptr(), O_RDONLY | O_DIRECTORY) };
        self.ret(&format!("open dot {what}"), i64::from(dot), true);
        if dot >= 0 {
            self.fds.push(dot);
        }
        // Also when the open failed (EBADF), so both runs take the same steps.
        self.fstat(&format!("fstat dot {what}"), dot);
        // SAFETY: as getdents64 above.
        let r = unsafe { syscall(SYS_getdents64, dot, buf.as_mut_ptr(), buf.len()) };
        self.ret(&format!("getdents dot {what}"), r, false);
        self.close(dot);
    }
}

fn xattrs(c: &mut Ctx) {
    use libc::*;
    let f = c.path("t/x2");
    let set = |name: &str, v: &[u8], flags: i32| {
        let n = CString::new(name).unwrap();
        // SAFETY: valid path, name and value buffer.
        unsafe { setxattr(f.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), flags) }
    };
    let get = |name: &str, size: usize| {
        let n = CString::new(name).unwrap();
        let mut buf = vec![0u8; size];
        // SAFETY: buf holds `size` bytes (a null pointer with size 0 is allowed too).
        let r = unsafe { getxattr(f.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size) };
        xattr_buf(r, &buf)
    };
    let list = |size: usize| {
        let mut buf = vec![0u8; size];
        // SAFETY: as get.
        let r = unsafe { listxattr(f.as_ptr(), buf.as_mut_ptr().cast(), size) };
        sorted_names(r, &buf)
    };
    let r = set("user.a", b"value", 0);
    c.call("setxattr user.a", r);
    let r = set("user.b", b"", 0);
    c.call("setxattr empty value", r);
    let r = {
        let n = CString::new("user.a").unwrap();
        // SAFETY: null buffer with size 0 asks for the size.
        unsafe { getxattr(f.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) }
    };
    c.ret("getxattr size", r as i64, false);
    c.rec("getxattr small buffer", get("user.a", 2));
    c.rec("getxattr", get("user.a", 64));
    c.rec("getxattr empty", get("user.b", 64));
    c.rec("getxattr missing", get("user.zz", 64));
    let r = {
        // SAFETY: as above.
        unsafe { listxattr(f.as_ptr(), std::ptr::null_mut(), 0) }
    };
    c.ret("listxattr size", r as i64, false);
    c.rec("listxattr small", list(3));
    c.rec("listxattr", list(256));
    let r = set("user.a", b"x", XATTR_CREATE);
    c.call("xattr create existing", r);
    let r = set("user.c", b"x", XATTR_REPLACE);
    c.call("xattr replace missing", r);
    let r = set("user.a", b"new", XATTR_REPLACE);
    c.call("xattr replace", r);
    c.rec("getxattr replaced", get("user.a", 64));
    let r = set("foo.bar", b"x", 0);
    c.call("xattr bad namespace", r);
    let r = set("trusted.t", b"root", 0);
    c.call("xattr trusted as root", r);
    c.rec("getxattr trusted", get("trusted.t", 64));
    let big = vec![b'v'; 70_000];
    let r = set("user.big", &big, 0);
    c.call("xattr too big", r);
    let n = CString::new("user.a").unwrap();
    // SAFETY: valid path and name.
    let r = unsafe { removexattr(f.as_ptr(), n.as_ptr()) };
    c.call("removexattr", r);
    // SAFETY: as above.
    let r = unsafe { removexattr(f.as_ptr(), n.as_ptr()) };
    c.call("removexattr again", r);
    c.rec("getxattr removed", get("user.a", 64));
    let s = c.path("t/s");
    let v = b"x";
    // SAFETY: valid path, name, value.
    let r = unsafe { lsetxattr(s.as_ptr(), n.as_ptr(), v.as_ptr().cast(), 1, 0) };
    c.call("user xattr on symlink", r);
    many_xattrs(c);
}

/// copy_file_range(2): a range of several MiB in one call, one cut short by the
/// source's end, and the errors (overlap within one file, an O_APPEND destination,
/// a read-only destination).
fn copy_ranges(c: &mut Ctx) {
    use libc::*;
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(c.root.join("t/cr_src"), &data).unwrap();
    let src = c.open("copy open src", "t/cr_src", O_RDWR, 0);
    let dst = c.open("copy open dst", "t/cr_dst", O_CREAT | O_RDWR, 0o644);
    let copy = |fi: i32, oi: i64, fo: i32, oo: i64, len: usize| {
        let (mut oi, mut oo) = (oi, oo);
        // SAFETY: valid descriptors and offset pointers.
        unsafe { copy_file_range(fi, &mut oi, fo, &mut oo, len, 0) as i64 }
    };
    // A short count is allowed; what matters is what lands.
    let mut done = 0;
    while done < 4_500_000 {
        let n = copy(src, 100 + done, dst, 7 + done, 4_500_000 - done as usize);
        if n <= 0 {
            break;
        }
        done += n;
    }
    c.rec("copy 4.5 MB", format!("{done}"));
    let r = copy(src, 4_999_000, dst, 0, 10_000);
    c.ret("copy past the end", r, false);
    let r = copy(src, 0, src, 1000, 5000);
    c.ret("copy overlapping", r, false);
    let r = copy(src, 0, src, 4_000_000, 5000);
    c.ret("copy within one file", r, false);
    let app = c.open(
        "copy open append",
        "t/cr_app",
        O_CREAT | O_WRONLY | O_APPEND,
        0o644,
    );
    let r = copy(src, 0, app, 0, 10);
    c.ret("copy to O_APPEND", r, false);
    let ro = c.open("copy open read-only", "t/cr_src", O_RDONLY, 0);
    let r = copy(src, 0, ro, 0, 10);
    c.ret("copy to read-only", r, false);
    for fd in [src, dst, app, ro] {
        c.close(fd);
    }
    let sum = |name: &str| {
        let b = std::fs::read(c.root.join(name)).unwrap();
        let s: u64 = b
            .iter()
            .enumerate()
            .map(|(i, &x)| (i as u64 + 1) * x as u64)
            .sum();
        format!("{} bytes, sum {s}", b.len())
    };
    let (a, b) = (sum("t/cr_dst"), sum("t/cr_src"));
    c.rec("copy result dst", a);
    c.rec("copy result src", b);
}

/// `FS_IOC_GETFLAGS`/`SETFLAGS` on the file or directory `name`: the flags, or the
/// error, as a step's outcome.
fn ioctl_flags(c: &mut Ctx, name: &str, set: Option<u32>) -> String {
    use libc::*;
    let p = c.path(name);
    // SAFETY: a valid C string.
    let fd = unsafe { open(p.as_ptr(), O_RDONLY | O_NONBLOCK) };
    if fd < 0 {
        return errno_str();
    }
    let mut flags: c_int = set.unwrap_or(0) as c_int;
    let req = if set.is_some() {
        FS_IOC_SETFLAGS
    } else {
        FS_IOC_GETFLAGS
    };
    // SAFETY: both requests read or write one int at the pointer.
    let r = unsafe { ioctl(fd, req, &mut flags as *mut c_int) };
    let out = if r < 0 {
        errno_str()
    } else {
        format!("Ok({flags:#x})")
    };
    // SAFETY: closing the descriptor opened above.
    unsafe { close(fd) };
    out
}

/// chattr's flags and their enforcement: immutable refuses every change,
/// append-only all but appends (and, for a directory, all but new names).
fn inode_flags(c: &mut Ctx) {
    use libc::*;
    const I: u32 = 0x10;
    const A: u32 = 0x20;
    const D: u32 = 0x40;
    const NOATIME: u32 = 0x80;
    for d in ["t/fl", "t/fl/di", "t/fl/da"] {
        c.mkdir("flags prep", d, 0o755);
    }
    for f in ["t/fl/fi", "t/fl/fa", "t/fl/fd", "t/fl/di/x", "t/fl/da/y"] {
        std::fs::write(c.root.join(f), b"data").unwrap();
    }
    let r = ioctl_flags(c, "t/fl/fi", None);
    c.rec("getflags plain", r);
    for (name, f) in [
        ("t/fl/fi", I),
        ("t/fl/fa", A),
        ("t/fl/di", I),
        ("t/fl/da", A),
    ] {
        let r = ioctl_flags(c, name, Some(f));
        c.rec(&format!("setflags {name}"), r);
    }
    let before = c.stat("stat before setflags d A", "t/fl/fd");
    // Apart from the clock's granularity.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let r = ioctl_flags(c, "t/fl/fd", Some(D | NOATIME));
    c.rec("setflags d A", r);
    let after = c.stat("stat after setflags d A", "t/fl/fd");
    if let (Some(b), Some(a)) = (before, after) {
        let moved = (a.st_ctime, a.st_ctime_nsec) > (b.st_ctime, b.st_ctime_nsec);
        c.rec("setflags moves ctime", format!("{moved}"));
    }
    for name in ["t/fl/fi", "t/fl/fa", "t/fl/fd", "t/fl/di"] {
        let r = ioctl_flags(c, name, None);
        c.rec(&format!("getflags {name}"), r);
    }
    let r = ioctl_flags(c, "t/fl/fd", Some(0x4));
    c.rec("setflags unsupported", r);
    for (what, name) in [("immutable", "t/fl/fi"), ("append-only", "t/fl/fa")] {
        let fd = c.open(&format!("{what} open write"), name, O_WRONLY, 0);
        c.close(fd);
        let fd = c.open(&format!("{what} open append"), name, O_WRONLY | O_APPEND, 0);
        c.write(&format!("{what} append"), fd, b"+more");
        c.close(fd);
        let fd = c.open(
            &format!("{what} open trunc"),
            name,
            O_WRONLY | O_APPEND | O_TRUNC,
            0,
        );
        c.close(fd);
        let fd = c.open(&format!("{what} open read"), name, O_RDONLY, 0);
        c.close(fd);
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("{what} truncate"), name, |p| unsafe {
            truncate(p, 1)
        });
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("{what} chmod"), name, |p| unsafe {
            chmod(p, 0o600)
        });
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("{what} chown"), name, |p| unsafe {
            chown(p, 1, 1)
        });
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("{what} utimes now"), name, |p| unsafe {
            utimes(p, std::ptr::null())
        });
        let times = [timeval {
            tv_sec: 1,
            tv_usec: 0,
        }; 2];
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("{what} utimes set"), name, |p| unsafe {
            utimes(p, times.as_ptr())
        });
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("{what} setxattr"), name, |p| unsafe {
            setxattr(p, c"user.x".as_ptr(), b"v".as_ptr().cast(), 1, 0)
        });
        c.path2(&format!("{what} link"), name, "t/fl/linked", link);
        c.path2(&format!("{what} rename"), name, "t/fl/moved", rename);
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("{what} unlink"), name, |p| unsafe { unlink(p) });
        c.content(&format!("{what} content"), name);
    }
    let fd = c.open(
        "immutable dir create",
        "t/fl/di/new",
        O_CREAT | O_WRONLY,
        0o644,
    );
    c.close(fd);
    c.mkdir("immutable dir mkdir", "t/fl/di/sub", 0o755);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("immutable dir unlink", "t/fl/di/x", |p| unsafe {
        unlink(p)
    });
    c.path2("immutable dir rename", "t/fl/di/x", "t/fl/di/x2", rename);
    let fd = c.open(
        "immutable dir write inside",
        "t/fl/di/x",
        O_WRONLY | O_APPEND,
        0,
    );
    c.close(fd);
    let fd = c.open(
        "append dir create",
        "t/fl/da/new",
        O_CREAT | O_WRONLY,
        0o644,
    );
    c.close(fd);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("append dir unlink", "t/fl/da/y", |p| unsafe { unlink(p) });
    c.path2("append dir rename out", "t/fl/da/y", "t/fl/y", rename);
    // Cleared again, so the tree can be removed.
    for name in ["t/fl/fi", "t/fl/fa", "t/fl/fd", "t/fl/di", "t/fl/da"] {
        let r = ioctl_flags(c, name, Some(0));
        c.rec(&format!("clear flags {name}"), r);
    }
}

/// `O_TMPFILE`: an unnamed file, then named by `linkat` through /proc/self/fd (what
/// programs do without CAP_DAC_READ_SEARCH); `O_EXCL` keeps it unnamed for good.
fn tmpfiles(c: &mut Ctx) {
    use libc::*;
    c.mkdir("tmpfile dir", "t/tmp", 0o755);
    let fd = c.open("open tmpfile", "t/tmp", O_TMPFILE | O_RDWR, 0o640);
    c.write("write tmpfile", fd, b"unnamed data");
    c.fstat("fstat tmpfile", fd);
    c.readdir("readdir with tmpfile", "t/tmp");
    let link = |c: &mut Ctx, fd: i32, name: &str| {
        let from = CString::new(format!("/proc/self/fd/{fd}")).unwrap();
        let to = c.path(name);
        // SAFETY: valid C strings.
        unsafe {
            linkat(
                AT_FDCWD,
                from.as_ptr(),
                AT_FDCWD,
                to.as_ptr(),
                AT_SYMLINK_FOLLOW,
            )
        }
    };
    let r = link(c, fd, "t/tmp/named");
    c.call("linkat tmpfile", r);
    c.fstat("fstat tmpfile linked", fd);
    c.content("read linked tmpfile", "t/tmp/named");
    let r = link(c, fd, "t/tmp/named2");
    c.call("linkat tmpfile again", r);
    let to = c.path("t/tmp/named3");
    // SAFETY: a valid descriptor and C strings.
    let r = unsafe { linkat(fd, c"".as_ptr(), AT_FDCWD, to.as_ptr(), AT_EMPTY_PATH) };
    c.call("linkat tmpfile by empty path", r);
    c.close(fd);
    c.stat("stat linked tmpfile", "t/tmp/named");
    let fd = c.open(
        "open tmpfile excl",
        "t/tmp",
        O_TMPFILE | O_EXCL | O_WRONLY,
        0o600,
    );
    c.write("write tmpfile excl", fd, b"gone");
    let r = link(c, fd, "t/tmp/never");
    c.call("linkat tmpfile excl", r);
    c.close(fd);
    c.open(
        "open tmpfile read-only",
        "t/tmp",
        O_TMPFILE | O_RDONLY,
        0o600,
    );
    c.readdir("readdir after tmpfiles", "t/tmp");
}

/// More attributes than one 4 KiB block holds, and values at Linux's 64 KiB limit
/// (trusted.*, which tmpfs does not count against its user.* quota).
fn many_xattrs(c: &mut Ctx) {
    use libc::*;
    let f = c.path("t/x2");
    let set = |name: &str, v: &[u8]| {
        let n = CString::new(name).unwrap();
        // SAFETY: valid path, name and value buffer.
        unsafe { setxattr(f.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }
    };
    let get = |name: &str| {
        let n = CString::new(name).unwrap();
        let mut buf = vec![0u8; 65536];
        // SAFETY: buf holds 65536 bytes.
        let r = unsafe { getxattr(f.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        match r {
            r if r < 0 => errno_str(),
            r => format!(
                "Ok({r} bytes, sum {})",
                buf[..r as usize].iter().map(|&b| b as u64).sum::<u64>()
            ),
        }
    };
    let list_len = || {
        // SAFETY: a null buffer with size 0 asks for the size.
        let r = unsafe { listxattr(f.as_ptr(), std::ptr::null_mut(), 0) };
        r as i64
    };
    let first_failure = (0..1200)
        .map(|i| {
            (
                i,
                set(
                    &format!("trusted.many{i:04}"),
                    format!("value {i}").as_bytes(),
                ),
            )
        })
        .find(|&(_, r)| r < 0)
        .map(|(i, _)| format!("attribute {i}: {}", errno_str()));
    c.rec("xattr 1200 small", format!("{first_failure:?}"));
    c.ret("listxattr 1200", list_len(), false);
    c.rec("getxattr 0", get("trusted.many0000"));
    c.rec("getxattr 1199", get("trusted.many1199"));
    let big: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
    let r = set("trusted.big", &big);
    c.call("xattr 64 KiB", r);
    c.rec("getxattr 64 KiB", get("trusted.big"));
    let r = set("trusted.big2", &big[..65535]);
    c.call("xattr second 64 KiB", r);
    c.rec("getxattr second 64 KiB", get("trusted.big2"));
    let removed = (0..1200)
        .step_by(2)
        .filter(|i| {
            let n = CString::new(format!("trusted.many{i:04}")).unwrap();
            // SAFETY: valid path and name.
            unsafe { removexattr(f.as_ptr(), n.as_ptr()) == 0 }
        })
        .count();
    c.rec("removexattr 600", format!("{removed}"));
    c.ret("listxattr after removes", list_len(), false);
    c.rec("getxattr removed one", get("trusted.many0000"));
    c.rec("getxattr kept one", get("trusted.many1199"));
    c.rec("getxattr 64 KiB kept", get("trusted.big"));
}

/// What uid 1000 (groups 1000, 1001) may and may not do. Root prepares the files.
fn prepare_user(c: &mut Ctx) {
    use libc::*;
    c.mkdir("prep pub", "t/pub", 0o777);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("prep chmod pub", "t/pub", |p| unsafe { chmod(p, 0o777) });
    c.mkdir("prep priv", "t/priv", 0o700);
    c.mkdir("prep sticky", "t/sticky", 0o777);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("prep chmod sticky", "t/sticky", |p| unsafe {
        chmod(p, 0o1777)
    });
    for (name, mode, gid) in [
        ("t/rootfile", 0o644, 0),
        ("t/secret", 0o600, 0),
        ("t/grpfile", 0o640, EXTRA_GROUP),
        ("t/sticky/rootf", 0o666, 0),
        ("t/pub/rootf", 0o644, 0),
        ("t/pub/suid", 0o4666, 0),
        ("t/pub/sgid", 0o2676, 0),
        ("t/pub/sgid2", 0o2676, 0),
    ] {
        std::fs::write(c.root.join(name), b"data").unwrap();
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("prep chmod {name}"), name, |p| unsafe {
            chmod(p, mode)
        });
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("prep chown {name}"), name, |p| unsafe {
            chown(p, 0, gid)
        });
    }
    // A program only others may execute (mode 001), owned by root.
    let program = std::fs::read("/usr/bin/true").expect("/usr/bin/true");
    std::fs::write(c.root.join("t/pub/x001"), program).unwrap();
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("prep chmod x001", "t/pub/x001", |p| unsafe {
        chmod(p, 0o001)
    });
    killpriv::prepare(c);
}

fn as_user(c: &mut Ctx) {
    use libc::*;
    // Execute needs x only: the open for exec asks for nothing else (issue 17, item 3).
    let ran = match std::process::Command::new(c.root.join("t/pub/x001")).output() {
        Ok(o) => format!("Ok(status {:?})", o.status.code()),
        Err(e) => format!("Err({})", errno_name(e.raw_os_error().unwrap_or(0))),
    };
    c.rec("user exec x001 of root", ran);
    c.open("user creat in t", "t/x", O_CREAT | O_RDWR, 0o644);
    let fd = c.open("user creat in pub", "t/pub/mine", O_CREAT | O_RDWR, 0o644);
    c.close(fd);
    c.stat("user stat mine", "t/pub/mine");
    c.mkdir("user mkdir in pub", "t/pub/mydir", 0o755);
    c.stat("user stat mydir", "t/pub/mydir");
    c.open("user read secret", "t/secret", O_RDONLY, 0);
    c.open("user write rootfile", "t/rootfile", O_WRONLY, 0);
    c.open("user trunc rootfile", "t/rootfile", O_RDONLY | O_TRUNC, 0);
    let fd = c.open("user read rootfile", "t/rootfile", O_RDONLY, 0);
    c.close(fd);
    let fd = c.open(
        "user read grpfile (supplementary group)",
        "t/grpfile",
        O_RDONLY,
        0,
    );
    c.read("user read grpfile data", fd, 10);
    c.close(fd);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user chmod rootfile", "t/rootfile", |p| unsafe {
        chmod(p, 0o777)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user chmod mine", "t/pub/mine", |p| unsafe {
        chmod(p, 0o600)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user chown mine to root", "t/pub/mine", |p| unsafe {
        chown(p, 0, u32::MAX)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user chgrp mine 1001", "t/pub/mine", |p| unsafe {
        chown(p, u32::MAX, EXTRA_GROUP)
    });
    c.stat("user stat mine after chgrp", "t/pub/mine");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user chgrp mine 5", "t/pub/mine", |p| unsafe {
        chown(p, u32::MAX, 5)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user chmod mine setgid", "t/pub/mine", |p| unsafe {
        chmod(p, 0o2755)
    });
    c.stat("user stat mine setgid", "t/pub/mine");
    let now = [
        timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
        timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
    ];
    let at = [
        timespec {
            tv_sec: 5,
            tv_nsec: 0,
        },
        timespec {
            tv_sec: 5,
            tv_nsec: 0,
        },
    ];
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user utime now rootfile", "t/rootfile", |p| unsafe {
        utimensat(AT_FDCWD, p, now.as_ptr(), 0)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user utime at rootfile", "t/rootfile", |p| unsafe {
        utimensat(AT_FDCWD, p, at.as_ptr(), 0)
    });
    c.path1(
        "user utime now sticky/rootf (writable)",
        "t/sticky/rootf",
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        |p| unsafe { utimensat(AT_FDCWD, p, now.as_ptr(), 0) },
    );
    for f in ["t/pub/suid", "t/pub/sgid"] {
        let fd = c.open(&format!("user open {f}"), f, O_WRONLY, 0);
        c.write(&format!("user write {f}"), fd, b"x");
        c.close(fd);
        c.stat(&format!("user write cleared privs of {f}"), f);
    }
    c.path1(
        "user chmod suid file (drop bits, not owner)",
        "t/pub/sgid2",
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        |p| unsafe { chmod(p, 0o676) },
    );
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user truncate rootfile", "t/rootfile", |p| unsafe {
        truncate(p, 0)
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user unlink sticky/rootf", "t/sticky/rootf", |p| unsafe {
        unlink(p)
    });
    c.path2(
        "user rename sticky/rootf",
        "t/sticky/rootf",
        "t/sticky/mine",
        rename,
    );
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user unlink pub/rootf", "t/pub/rootf", |p| unsafe {
        unlink(p)
    });
    c.readdir("user readdir priv", "t/priv");
    c.stat("user stat in priv", "t/priv/x");
    c.readdir("user readdir pub", "t/pub");
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user mknod chr", "t/pub/null", |p| unsafe {
        mknod(p, S_IFCHR | 0o666, makedev(1, 3))
    });
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user mknod fifo", "t/pub/fifo", |p| unsafe {
        mknod(p, S_IFIFO | 0o666, 0)
    });
    c.path2("user link rootfile", "t/rootfile", "t/pub/hl", link);
    c.path2("user rename mine into t", "t/pub/mine", "t/mine", rename);
    // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
    c.path1("user rmdir mydir", "t/pub/mydir", |p| unsafe { rmdir(p) });
    let f = c.path("t/rootfile");
    let n = CString::new("user.u").unwrap();
    // SAFETY: valid path, name, value.
    let r = unsafe { setxattr(f.as_ptr(), n.as_ptr(), b"x".as_ptr().cast(), 1, 0) };
    c.call("user setxattr rootfile", r);
    let n = CString::new("trusted.t").unwrap();
    let mine = c.path("t/pub/mine");
    // SAFETY: as above.
    let r = unsafe { setxattr(mine.as_ptr(), n.as_ptr(), b"x".as_ptr().cast(), 1, 0) };
    c.call("user setxattr trusted", r);
    killpriv::as_user(c);
}

/// Runs `f` on a new thread whose file-system identity is uid 1000, gid 1000,
/// groups [1001]; the switch is per-thread and dies with the thread.
fn run_as_user(c: &mut Ctx, f: fn(&mut Ctx)) {
    let mut moved = Ctx {
        root: c.root.clone(),
        log: Vec::new(),
        fds: Vec::new(),
    };
    let moved = std::thread::spawn(move || {
        let groups = [EXTRA_GROUP];
        // SAFETY: raw system calls (per-thread, unlike glibc's setgroups wrapper)
        // with a valid group array.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr()),
                0,
                "setgroups (the test must run as root)"
            );
            libc::syscall(libc::SYS_setfsgid, GROUP);
            libc::syscall(libc::SYS_setfsuid, USER);
        }
        f(&mut moved);
        moved
    })
    .join()
    .expect("user thread");
    c.log.extend(moved.log);
    c.fds.extend(moved.fds);
}

fn run_all(root: &Path) -> Vec<(String, String)> {
    let mut c = Ctx {
        root: root.to_path_buf(),
        log: Vec::new(),
        fds: Vec::new(),
    };
    script(&mut c);
    prepare_user(&mut c);
    run_as_user(&mut c, as_user);
    for fd in std::mem::take(&mut c.fds) {
        c.close(fd);
    }
    c.log
}

fn make_pool(dir: &Path) -> PathBuf {
    let pool = dir.join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(128 << 20), PmemBackend::default()).expect("mkfs");
    pool
}

fn open_dir_to_all(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn compare(options: &str) {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: this test needs the FUSE device"
    );
    // SAFETY: geteuid cannot fail.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test must run as root");
    let shm = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let pool_dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let mnt = tempfile::tempdir().expect("mount point");
    open_dir_to_all(shm.path());
    open_dir_to_all(mnt.path());
    let pool = make_pool(pool_dir.path());
    let opts = MountOptions::parse(options).expect("options");
    let mount = mount_background(&pool, mnt.path(), &opts).expect("mounting the pool");
    check_transport(options, mnt.path());

    let want = run_all(shm.path());
    let got = run_all(mnt.path());
    mount.unmount().expect("unmount");
    check_same(options, &want, &got);
}

/// Fails unless the daemon serving `mnt` uses the transport `options` ask for
/// (`io_uring=on`: io_uring; `io_uring=off`: /dev/fuse; otherwise anything).
pub fn check_transport(options: &str, mnt: &Path) {
    let want = if options.split(',').any(|o| o == "io_uring=on") {
        Transport::IoUring
    } else if options.split(',').any(|o| o == "io_uring=off") {
        Transport::DevFuse
    } else {
        return;
    };
    let path = CString::new(mnt.as_os_str().as_bytes()).unwrap();
    let name = CString::new(USAGE_XATTR).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: NUL-terminated path and name; `buf` is writable for its length.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert!(
        n > 0,
        "the usage attribute of {}: {}",
        mnt.display(),
        errno_str()
    );
    let text = String::from_utf8_lossy(&buf[..n as usize]);
    let live = LiveUsage::decode(&text).expect("usage figures");
    assert_eq!(
        live.transport,
        Some(want),
        "[{options}] the daemon's transport"
    );
}

/// Compares two runs step by step; fails on any difference not in [`ALLOWED`].
fn check_same(config: &str, want: &[(String, String)], got: &[(String, String)]) {
    assert_eq!(want.len(), got.len(), "both runs take the same steps");
    let mut bad = 0;
    for ((label, w), (label2, g)) in want.iter().zip(got) {
        assert_eq!(label, label2);
        if std::env::var_os("LYNXFS_CONFORMANCE_VERBOSE").is_some() {
            println!("{label}: tmpfs {w}, lynxfs {g}");
        }
        if w == g {
            continue;
        }
        match ALLOWED.iter().find(|(l, _)| l == label) {
            Some((_, why)) => {
                println!("allowed difference at {label:?}: tmpfs {w}, lynxfs {g} ({why})")
            }
            None => {
                bad += 1;
                println!("DIFFERENCE at {label:?}: tmpfs {w}, lynxfs {g}");
            }
        }
    }
    println!(
        "[{config}] {} steps compared, {bad} differences",
        want.len()
    );
    assert_eq!(bad, 0, "{bad} unexplained differences (printed above)");
}

#[test]
fn matches_tmpfs_with_caches_off() {
    compare("entry_timeout=0,attr_timeout=0,allow_other,io_uring=on");
}

#[test]
fn matches_tmpfs_with_caches_off_over_dev_fuse() {
    compare("entry_timeout=0,attr_timeout=0,allow_other,io_uring=off");
}

#[test]
fn matches_tmpfs_with_default_caches() {
    compare("allow_other,io_uring=on");
}

#[test]
fn matches_tmpfs_with_default_caches_over_dev_fuse() {
    compare("allow_other,io_uring=off");
}

#[test]
fn matches_tmpfs_with_kernel_permission_checks() {
    compare("allow_other,default_permissions,threads=1");
}

/// The daemon's own checks decide: see [`owner`].
#[test]
fn matches_tmpfs_as_mount_owner_without_default_permissions() {
    const NAME: &str = "matches_tmpfs_as_mount_owner_without_default_permissions";
    match spawn::role_for(NAME) {
        Some(args) => owner::child(&args),
        None => owner::parent(NAME, "daemon_permissions,attr_timeout=0"),
    }
}

/// As above, with the kernel caching names and attributes for a second.
#[test]
fn matches_tmpfs_as_mount_owner_with_default_caches() {
    const NAME: &str = "matches_tmpfs_as_mount_owner_with_default_caches";
    match spawn::role_for(NAME) {
        Some(args) => owner::child(&args),
        None => owner::parent(NAME, ""),
    }
}

/// A directory that loses its x bit stops its owner at once, cached names or not
/// (tmpfs refuses at once). Without the kernel's checks it would reuse a name it
/// cached for entry_timeout without asking the daemon; so default mounts have the
/// kernel check (FUSE_POSIX_ACL turns `default_permissions` on), and
/// `daemon_permissions` mounts cache no names.
#[test]
fn owner_loses_cached_names_when_a_directory_loses_search_permission() {
    const NAME: &str = "owner_loses_cached_names_when_a_directory_loses_search_permission";
    match spawn::role_for(NAME) {
        Some(args) => owner::cached_window_child(&args),
        None => owner::parent(NAME, ""),
    }
}

/// Set-ID bits after another user's write, through exec and open: see [`setid`].
/// With FUSE_HANDLE_KILLPRIV the engine drops the bits during the write, and tells
/// the kernel to drop its cached mode (attr_timeout), which execve would honour.
#[test]
fn exec_after_a_write_by_another_user_does_not_run_as_the_owner() {
    const NAME: &str = "exec_after_a_write_by_another_user_does_not_run_as_the_owner";
    match spawn::role_for(NAME) {
        Some(path) => setid::fstat_child(&path),
        None => setid::parent(NAME, "allow_other,suid"),
    }
}

/// As above with the kernel's caches off.
#[test]
fn exec_after_a_write_by_another_user_with_caches_off() {
    const NAME: &str = "exec_after_a_write_by_another_user_with_caches_off";
    match spawn::role_for(NAME) {
        Some(path) => setid::fstat_child(&path),
        None => setid::parent(NAME, "allow_other,suid,entry_timeout=0,attr_timeout=0"),
    }
}

/// Two threads and two processes race on the same names: see [`race`].
#[test]
fn racing_callers_keep_what_tmpfs_keeps() {
    const NAME: &str = "racing_callers_keep_what_tmpfs_keeps";
    match spawn::role_for(NAME) {
        Some(args) => race::child(&args),
        None => race::parent(NAME, "", false),
    }
}

/// As above with the kernel's caches off, so every call reaches the daemon.
#[test]
fn racing_callers_with_caches_off() {
    const NAME: &str = "racing_callers_with_caches_off";
    match spawn::role_for(NAME) {
        Some(args) => race::child(&args),
        None => race::parent(
            NAME,
            "entry_timeout=0,attr_timeout=0,threads=4,io_uring=on",
            false,
        ),
    }
}

/// As above over the classic /dev/fuse transport.
#[test]
fn racing_callers_with_caches_off_over_dev_fuse() {
    const NAME: &str = "racing_callers_with_caches_off_over_dev_fuse";
    match spawn::role_for(NAME) {
        Some(args) => race::child(&args),
        None => race::parent(
            NAME,
            "entry_timeout=0,attr_timeout=0,threads=4,io_uring=off",
            false,
        ),
    }
}

/// Reads racing truncates must never return bytes no one wrote.
#[test]
#[ignore = "issue 11 item 14: a read racing a truncate can return zeros of the old \
            size (the kernel's FUSE page cache fills a short read up to its cached size)"]
fn racing_reads_see_only_bytes_someone_wrote() {
    const NAME: &str = "racing_reads_see_only_bytes_someone_wrote";
    match spawn::role_for(NAME) {
        Some(args) => race::child(&args),
        None => race::parent(NAME, "entry_timeout=0,attr_timeout=0,threads=4", true),
    }
}
