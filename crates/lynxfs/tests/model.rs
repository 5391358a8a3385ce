//! Model-based tests of the namespace and the data path.
//!
//! Random sequences of calls (mkdir, open with O_CREAT, unlink, rmdir, every form of
//! rename, link, symlink, readlink, stat, pwrite, pread, truncate, fallocate, xattrs,
//! chmod, readdir, and clean or crashed remounts) over a small name space, so that
//! names collide, run against LynxFS and against a reference model with Linux's
//! semantics (`model/reference.rs`). Every result or errno is compared, and after
//! every step the whole visible state: paths, types, sizes, link counts, modes, hard
//! link identity, file bytes, symlink targets and xattrs.
//!
//! The same sequences also run against tmpfs (a temporary directory in /dev/shm) to
//! check the model itself against Linux (`model_matches_tmpfs`).
//!
//! Then concurrency: two threads racing creates, unlinks, renames, mkdirs and rmdirs
//! in one directory, then invariants, a clean remount and a crash; and two threads on
//! disjoint names in one directory, compared with the model.
//!
//! Run: `cargo test -p lynxfs --profile ci --test model`.
//! Longer (many more cases and iterations): `LYNXFS_LONG=1 cargo test ...`.

mod common;
#[path = "model/reference.rs"]
mod reference;
#[path = "model/target.rs"]
mod target;

use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, DataMode, Fs, MkfsOptions, Pool};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use reference::Model;
use target::{apply, diff, e, kind_of, kind_of_dtype, snapshot, FsRef, LFs, Op, Out, Rng};
pub use target::{Kind, St, Target, R};

fn new_fs() -> LFs {
    new_fs_in(DataMode::Atomic)
}

/// A fresh pool in data mode `data`.
fn new_fs_in(data: DataMode) -> LFs {
    let mut o = MkfsOptions::new(16 << 20);
    o.lanes = 2;
    o.data = data;
    Fs::in_memory(&o, PmemBackend::default()).expect("in-memory pool")
}

/// Reopen a copy of `fs`'s pool, after a clean close or a crash.
fn reopen(fs: LFs, crash: bool) -> R<LFs> {
    if crash {
        fs.pool().crash_in_place();
    } else {
        e(fs.close())?;
    }
    let img = fs.pool().pm.snapshot();
    drop(fs);
    let pool = e(Pool::open_image(&img, PmemBackend::default()))?;
    assert_eq!(pool.was_clean, !crash, "the clean flag after a remount");
    Ok(Fs::new(pool))
}

/// LynxFS that owns its pool, so that it can remount.
struct Lynx {
    fs: Option<LFs>,
    /// A hybrid pool's files, reopened by path at a remount.
    hybrid: Option<Hybrid>,
    /// With full-path areas on: the state of the generator choosing when to force an
    /// evolution round, and which.
    areas: Option<std::cell::Cell<u64>>,
}

/// A hybrid pool: the pool in /dev/shm, its data device a file on the disk.
struct Hybrid {
    _shm: tempfile::TempDir,
    _disk: tempfile::TempDir,
    pool: std::path::PathBuf,
}

impl Lynx {
    fn new() -> Lynx {
        Lynx {
            fs: Some(new_fs()),
            hybrid: None,
            areas: None,
        }
    }
    fn new_in(data: DataMode) -> Lynx {
        Lynx {
            fs: Some(new_fs_in(data)),
            hybrid: None,
            areas: None,
        }
    }
    /// A hybrid pool in data mode `data` (docs/FORMAT.md, section 17).
    fn hybrid_in(data: DataMode) -> Lynx {
        let shm = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm");
        let disk = tempfile::tempdir().expect("a temporary directory");
        let pool = shm.path().join("pool");
        let mut o = MkfsOptions::new(16 << 20);
        o.lanes = 2;
        o.data = data;
        o.data_device = Some(disk.path().join("data.dev"));
        Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs of a hybrid pool");
        Lynx {
            fs: Some(Fs::open(&pool).expect("open of a hybrid pool")),
            hybrid: Some(Hybrid {
                _shm: shm,
                _disk: disk,
                pool,
            }),
            areas: None,
        }
    }
    /// With full-path areas and evolution on, evolution forced at points `seed`
    /// chooses.
    fn with_areas(seed: u64) -> Lynx {
        let t = Lynx {
            fs: Some(new_fs()),
            hybrid: None,
            areas: Some(std::cell::Cell::new(seed | 1)),
        };
        t.areas_on();
        t
    }
    fn areas_on(&self) {
        if self.areas.is_some() {
            let m = &self.fs.as_ref().expect("mounted").ns().mechanisms;
            m.set_areas(true);
            m.set_evolution(true);
        }
    }
    fn r(&self) -> FsRef<'_> {
        let fs = self.fs.as_ref().expect("mounted");
        if let Some(state) = &self.areas {
            // xorshift: about one call in four forces a split, inherit or merge round.
            let mut x = state.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            state.set(x);
            use lynxfs::meta::areas::Thresholds;
            let th = match x % 12 {
                0 => Some(Thresholds {
                    large: 0,
                    small: 0,
                    strong_percent: 101,
                    read_often: 0,
                    cold_reads: 0,
                }),
                1 => Some(Thresholds {
                    large: 0,
                    small: 0,
                    strong_percent: 0,
                    read_often: 0,
                    cold_reads: 0,
                }),
                2 => Some(Thresholds {
                    large: usize::MAX,
                    small: usize::MAX,
                    strong_percent: 101,
                    read_often: u64::MAX,
                    cold_reads: u64::MAX,
                }),
                _ => None,
            };
            if let Some(th) = th {
                fs.ns().areas.evolve(&th);
            }
        }
        FsRef(fs)
    }
}

impl Target for Lynx {
    fn mkdir(&mut self, p: &str, mode: u32) -> R<()> {
        self.r().mkdir(p, mode)
    }
    fn create(&mut self, p: &str, flags: i32, mode: u32) -> R<()> {
        self.r().create(p, flags, mode)
    }
    fn unlink(&mut self, p: &str) -> R<()> {
        self.r().unlink(p)
    }
    fn rmdir(&mut self, p: &str) -> R<()> {
        self.r().rmdir(p)
    }
    fn rename(&mut self, from: &str, to: &str, flags: u32) -> R<()> {
        self.r().rename(from, to, flags)
    }
    fn link(&mut self, old: &str, new: &str) -> R<()> {
        self.r().link(old, new)
    }
    fn symlink(&mut self, target: &str, p: &str) -> R<()> {
        self.r().symlink(target, p)
    }
    fn readlink(&mut self, p: &str) -> R<String> {
        self.r().readlink(p)
    }
    fn stat(&mut self, p: &str, follow: bool) -> R<St> {
        self.r().stat(p, follow)
    }
    fn pwrite(&mut self, p: &str, off: u64, data: &[u8]) -> R<usize> {
        self.r().pwrite(p, off, data)
    }
    fn pread(&mut self, p: &str, off: u64, len: usize) -> R<Vec<u8>> {
        self.r().pread(p, off, len)
    }
    fn truncate(&mut self, p: &str, len: u64) -> R<()> {
        self.r().truncate(p, len)
    }
    fn fallocate(&mut self, p: &str, mode: i32, off: u64, len: u64) -> R<()> {
        self.r().fallocate(p, mode, off, len)
    }
    fn setxattr(&mut self, p: &str, name: &str, value: &[u8], flags: i32) -> R<()> {
        self.r().setxattr(p, name, value, flags)
    }
    fn getxattr(&mut self, p: &str, name: &str) -> R<Vec<u8>> {
        self.r().getxattr(p, name)
    }
    fn listxattr(&mut self, p: &str) -> R<Vec<String>> {
        self.r().listxattr(p)
    }
    fn removexattr(&mut self, p: &str, name: &str) -> R<()> {
        self.r().removexattr(p, name)
    }
    fn chmod(&mut self, p: &str, mode: u32) -> R<()> {
        self.r().chmod(p, mode)
    }
    fn readdir(&mut self, p: &str) -> R<Vec<(String, Kind)>> {
        self.r().readdir(p)
    }
    fn remount(&mut self, crash: bool) -> R<()> {
        let fs = self.fs.take().expect("mounted");
        let Some(h) = &self.hybrid else {
            self.fs = Some(reopen(fs, crash)?);
            self.areas_on();
            return Ok(());
        };
        // The pool file and the device stay as the process left them: a crash leaves
        // what every returned call made durable, and recovery runs at the open. A
        // hybrid pool's writes are durable at their commit (the model's calls all
        // are): the crash comes after one (crashes before it: tests/hybrid.rs).
        if crash {
            e(fs.sync())?;
            fs.pool().crash_in_place();
        } else {
            e(fs.close())?;
        }
        drop(fs);
        let fs = e(Fs::open(&h.pool))?;
        assert_eq!(
            fs.pool().was_clean,
            !crash,
            "the clean flag after a remount"
        );
        self.fs = Some(fs);
        self.areas_on();
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// tmpfs as a target: checks the model against Linux itself.

struct Host {
    dir: tempfile::TempDir,
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A libc return value: negative means errno.
fn ck(r: isize) -> R<isize> {
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(r)
    }
}

impl Host {
    fn new() -> Host {
        // SAFETY: umask only changes this process's file-creation mask; the model
        // has none, and nothing in this test binary depends on the default.
        unsafe { libc::umask(0) };
        let dir = tempfile::Builder::new()
            .prefix("lynxfs-model")
            .tempdir_in("/dev/shm")
            .expect("a directory in /dev/shm");
        let root = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(dir.path(), root).expect("chmod the test directory");
        Host { dir }
    }
    fn c(&self, p: &str) -> CString {
        let mut full = self.dir.path().as_os_str().to_string_lossy().into_owned();
        full.push_str(p);
        CString::new(full).expect("no NUL in test paths")
    }
    fn with_fd<T>(&self, p: &str, flags: i32, f: impl FnOnce(i32) -> R<T>) -> R<T> {
        let c = self.c(p);
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        let fd = ck(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0) } as isize)? as i32;
        let r = f(fd);
        // SAFETY: `fd` was opened above and is closed once.
        unsafe { libc::close(fd) };
        r
    }
}

impl Target for Host {
    fn mkdir(&mut self, p: &str, mode: u32) -> R<()> {
        let c = self.c(p);
        // SAFETY: valid C string.
        ck(unsafe { libc::mkdir(c.as_ptr(), mode) } as isize).map(drop)
    }
    fn create(&mut self, p: &str, flags: i32, mode: u32) -> R<()> {
        let c = self.c(p);
        // SAFETY: valid C string; the fd is closed right away.
        let fd = ck(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode) } as isize)?;
        // SAFETY: `fd` was just opened.
        unsafe { libc::close(fd as i32) };
        Ok(())
    }
    fn unlink(&mut self, p: &str) -> R<()> {
        let c = self.c(p);
        // SAFETY: valid C string.
        ck(unsafe { libc::unlink(c.as_ptr()) } as isize).map(drop)
    }
    fn rmdir(&mut self, p: &str) -> R<()> {
        let c = self.c(p);
        // SAFETY: valid C string.
        ck(unsafe { libc::rmdir(c.as_ptr()) } as isize).map(drop)
    }
    fn rename(&mut self, from: &str, to: &str, flags: u32) -> R<()> {
        let (a, b) = (self.c(from), self.c(to));
        // SAFETY: valid C strings.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                flags,
            )
        };
        ck(r as isize).map(drop)
    }
    fn link(&mut self, old: &str, new: &str) -> R<()> {
        let (a, b) = (self.c(old), self.c(new));
        // SAFETY: valid C strings.
        ck(unsafe { libc::link(a.as_ptr(), b.as_ptr()) } as isize).map(drop)
    }
    fn symlink(&mut self, target: &str, p: &str) -> R<()> {
        let t = CString::new(target).expect("no NUL");
        let c = self.c(p);
        // SAFETY: valid C strings.
        ck(unsafe { libc::symlink(t.as_ptr(), c.as_ptr()) } as isize).map(drop)
    }
    fn readlink(&mut self, p: &str) -> R<String> {
        let c = self.c(p);
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` has room for `buf.len()` bytes.
        let n = ck(unsafe { libc::readlink(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
        buf.truncate(n as usize);
        Ok(String::from_utf8(buf).expect("UTF-8 targets"))
    }
    fn stat(&mut self, p: &str, follow: bool) -> R<St> {
        let c = self.c(p);
        // SAFETY: all-zero bytes are a valid `stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid C string and a `stat` to fill.
        let r = unsafe {
            if follow {
                libc::stat(c.as_ptr(), &mut st)
            } else {
                libc::lstat(c.as_ptr(), &mut st)
            }
        };
        ck(r as isize)?;
        let kind = kind_of(st.st_mode);
        Ok(St {
            kind,
            perm: st.st_mode & 0o7777,
            size: if kind == Kind::Dir {
                0
            } else {
                st.st_size as u64
            },
            nlink: st.st_nlink,
            ino: st.st_ino,
        })
    }
    fn pwrite(&mut self, p: &str, off: u64, data: &[u8]) -> R<usize> {
        self.with_fd(p, libc::O_WRONLY, |fd| {
            // SAFETY: `data` is valid for `data.len()` bytes.
            let n = unsafe { libc::pwrite(fd, data.as_ptr().cast(), data.len(), off as i64) };
            ck(n).map(|n| n as usize)
        })
    }
    fn pread(&mut self, p: &str, off: u64, len: usize) -> R<Vec<u8>> {
        self.with_fd(p, libc::O_RDONLY, |fd| {
            let mut buf = vec![0u8; len];
            let mut done = 0;
            loop {
                // SAFETY: the destination has `len - done` bytes of room.
                let n = ck(unsafe {
                    libc::pread(
                        fd,
                        buf[done..].as_mut_ptr().cast(),
                        len - done,
                        (off + done as u64) as i64,
                    )
                })?;
                done += n as usize;
                if n == 0 || done == len {
                    break;
                }
            }
            buf.truncate(done);
            Ok(buf)
        })
    }
    fn truncate(&mut self, p: &str, len: u64) -> R<()> {
        let c = self.c(p);
        // SAFETY: valid C string.
        ck(unsafe { libc::truncate(c.as_ptr(), len as i64) } as isize).map(drop)
    }
    fn fallocate(&mut self, p: &str, mode: i32, off: u64, len: u64) -> R<()> {
        self.with_fd(p, libc::O_WRONLY, |fd| {
            // SAFETY: a plain syscall on an open fd.
            ck(unsafe { libc::fallocate(fd, mode, off as i64, len as i64) } as isize).map(drop)
        })
    }
    fn setxattr(&mut self, p: &str, name: &str, value: &[u8], flags: i32) -> R<()> {
        let (c, n) = (self.c(p), CString::new(name).expect("no NUL"));
        // SAFETY: valid C strings and a value of `value.len()` bytes.
        let r = unsafe {
            libc::setxattr(
                c.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        };
        ck(r as isize).map(drop)
    }
    fn getxattr(&mut self, p: &str, name: &str) -> R<Vec<u8>> {
        let (c, n) = (self.c(p), CString::new(name).expect("no NUL"));
        let mut buf = vec![0u8; 65536];
        // SAFETY: `buf` has room for `buf.len()` bytes.
        let r =
            unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        buf.truncate(ck(r)? as usize);
        Ok(buf)
    }
    fn listxattr(&mut self, p: &str) -> R<Vec<String>> {
        let c = self.c(p);
        let mut buf = vec![0u8; 65536];
        // SAFETY: `buf` has room for `buf.len()` bytes.
        let r = unsafe { libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        buf.truncate(ck(r)? as usize);
        let mut v: Vec<String> = buf
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8(s.to_vec()).expect("UTF-8 names"))
            // tmpfs may carry security.* labels of its own; the model has user.* only.
            .filter(|s| s.starts_with("user."))
            .collect();
        v.sort();
        Ok(v)
    }
    fn removexattr(&mut self, p: &str, name: &str) -> R<()> {
        let (c, n) = (self.c(p), CString::new(name).expect("no NUL"));
        // SAFETY: valid C strings.
        ck(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) } as isize).map(drop)
    }
    fn chmod(&mut self, p: &str, mode: u32) -> R<()> {
        let c = self.c(p);
        // SAFETY: valid C string.
        ck(unsafe { libc::chmod(c.as_ptr(), mode) } as isize).map(drop)
    }
    fn readdir(&mut self, p: &str) -> R<Vec<(String, Kind)>> {
        let full = self.dir.path().join(p.trim_start_matches('/'));
        let rd = std::fs::read_dir(full).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let mut out = Vec::new();
        for d in rd {
            let d = d.map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            let t = d
                .file_type()
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            let kind = if t.is_dir() {
                Kind::Dir
            } else if t.is_symlink() {
                Kind::Symlink
            } else if t.is_file() {
                Kind::File
            } else {
                Kind::Other
            };
            out.push((d.file_name().to_string_lossy().into_owned(), kind));
        }
        Ok(out)
    }
}

/// Run `ops` on the model and on `t`, comparing every result and, every
/// `check_every` steps, the whole state.
fn run(ops: &[Op], t: &mut dyn Target, check_every: usize) -> Result<(), String> {
    let mut m = Model::new();
    for (i, op) in ops.iter().enumerate() {
        let want = apply(op, &mut m);
        let got = apply(op, t);
        if want != got {
            return Err(format!(
                "step {i}: {op:?}\n  model:  {want:?}\n  target: {got:?}\n  steps: {:?}",
                &ops[..=i]
            ));
        }
        if (i + 1) % check_every == 0 || i + 1 == ops.len() {
            let (a, b) = (snapshot(&mut m)?, snapshot(t)?);
            if a != b {
                return Err(format!(
                    "state after step {i}: {op:?}\n{}  steps: {:?}",
                    diff(&a, &b),
                    &ops[..=i]
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Generators.

const NAMES: [&str; 3] = ["a", "b", "c"];
const XNAMES: [&str; 3] = ["user.x", "user.y", "user.a_much_longer_attribute_name"];

/// What a target can take: tmpfs is not the root of anything, so the host oracle gets
/// no "..", no absolute symlink targets (both would leave the test directory).
#[derive(Clone, Copy)]
struct Profile {
    escapes: bool,
}

fn path(p: Profile) -> BoxedStrategy<String> {
    let comp = if p.escapes {
        prop_oneof![12 => proptest::sample::select(&NAMES[..]), 1 => Just("."), 1 => Just("..")]
            .boxed()
    } else {
        prop_oneof![12 => proptest::sample::select(&NAMES[..]), 1 => Just(".")].boxed()
    };
    prop::collection::vec(comp, 1..=3)
        .prop_map(|c| format!("/{}", c.join("/")))
        .boxed()
}

fn symlink_target(p: Profile) -> BoxedStrategy<String> {
    let rel = prop::collection::vec(proptest::sample::select(&NAMES[..]), 1..=2)
        .prop_map(|c| c.join("/"));
    if p.escapes {
        prop_oneof![
            3 => rel,
            2 => path(p),
            1 => proptest::sample::select(&NAMES[..]).prop_map(|n| format!("../{n}")),
            1 => Just(".".to_string()),
            1 => Just("..".to_string()),
        ]
        .boxed()
    } else {
        prop_oneof![4 => rel, 1 => Just(".".to_string())].boxed()
    }
}

fn offset() -> BoxedStrategy<u64> {
    prop_oneof![0..64u64, 4090..4100u64, 8180..8200u64, 0..20_000u64].boxed()
}

fn length() -> BoxedStrategy<usize> {
    prop_oneof![0..16usize, 1..700usize, 4090..4100usize, 4000..9000usize].boxed()
}

fn op(p: Profile) -> BoxedStrategy<Op> {
    let xname = || proptest::sample::select(&XNAMES[..]).prop_map(str::to_string);
    let rename_flags =
        proptest::sample::select(vec![0, 0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE]);
    let create_flags = proptest::sample::select(vec![0, libc::O_EXCL, libc::O_TRUNC])
        .prop_map(|f| f | libc::O_CREAT | libc::O_WRONLY);
    let falloc = proptest::sample::select(vec![
        0,
        libc::FALLOC_FL_KEEP_SIZE,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
    ]);
    let xflags = proptest::sample::select(vec![0, libc::XATTR_CREATE, libc::XATTR_REPLACE]);
    let mkdir_mode = proptest::sample::select(vec![0o755, 0o700, 0o1777, 0o2755]);
    let file_mode = proptest::sample::select(vec![0o644, 0o600, 0o4755]);
    let chmod_mode = proptest::sample::select(vec![0o644, 0o600, 0o755, 0o4755, 0o2711, 0o1777, 0]);
    prop_oneof![
        3 => (path(p), mkdir_mode).prop_map(|(a, m)| Op::Mkdir(a, m)),
        4 => (path(p), create_flags, file_mode).prop_map(|(a, f, m)| Op::Create(a, f, m)),
        2 => path(p).prop_map(Op::Unlink),
        2 => path(p).prop_map(Op::Rmdir),
        4 => (path(p), path(p), rename_flags).prop_map(|(a, b, f)| Op::Rename(a, b, f)),
        2 => (path(p), path(p)).prop_map(|(a, b)| Op::Link(a, b)),
        2 => (symlink_target(p), path(p)).prop_map(|(t, a)| Op::Symlink(t, a)),
        1 => path(p).prop_map(Op::Readlink),
        2 => (path(p), any::<bool>()).prop_map(|(a, f)| Op::Stat(a, f)),
        6 => (path(p), offset(), length(), any::<u8>()).prop_map(|(a, o, l, s)| Op::Pwrite(a, o, l, s)),
        2 => (path(p), offset(), length()).prop_map(|(a, o, l)| Op::Pread(a, o, l)),
        2 => (path(p), prop_oneof![0..10u64, 4095..4098u64, 0..20_000u64]).prop_map(|(a, l)| Op::Truncate(a, l)),
        3 => (path(p), falloc, offset(), prop_oneof![0..3u64, 1..10_000u64]).prop_map(|(a, m, o, l)| Op::Fallocate(a, m, o, l)),
        2 => (path(p), xname(), prop::collection::vec(any::<u8>(), 0..40), xflags).prop_map(|(a, n, v, f)| Op::SetXattr(a, n, v, f)),
        1 => (path(p), xname()).prop_map(|(a, n)| Op::GetXattr(a, n)),
        1 => path(p).prop_map(Op::ListXattr),
        1 => (path(p), xname()).prop_map(|(a, n)| Op::RemoveXattr(a, n)),
        1 => (path(p), chmod_mode).prop_map(|(a, m)| Op::Chmod(a, m)),
        1 => path(p).prop_map(Op::Readdir),
        // No-ops on tmpfs.
        1 => Just(Op::Remount),
        1 => Just(Op::Crash),
    ]
    .boxed()
}

fn long() -> bool {
    std::env::var_os("LYNXFS_LONG").is_some_and(|v| v != "0")
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        // Regressions worth keeping become named tests below, not files in the tree.
        failure_persistence: None,
        // A failing sequence is worth shrinking well: each try takes milliseconds.
        max_shrink_iters: 20_000,
        ..Config::default()
    })
}

fn ops(p: Profile) -> impl Strategy<Value = Vec<Op>> {
    let max = if long() { 160 } else { 80 };
    prop::collection::vec(op(p), 30..max)
}

/// LynxFS against the model.
#[test]
fn lynxfs_matches_model() {
    let p = Profile { escapes: true };
    let cases = if long() { 5000 } else { 200 };
    runner(cases)
        .run(&ops(p), |ops| {
            let mut t = Lynx::new();
            run(&ops, &mut t, 1).map_err(TestCaseError::fail)
        })
        .unwrap();
}

/// With full-path areas and evolution on, evolution rounds (split, inherit, merge)
/// forced at random points: the same model. Lookups after renames of area roots and of
/// other directories, rmdirs, chmods, symlinks, `..` and hard links must all still be
/// the walk's.
#[test]
fn lynxfs_with_areas_matches_model() {
    let p = Profile { escapes: true };
    let cases = if long() { 3000 } else { 150 };
    let seed = std::cell::Cell::new(0x9e37_79b9_7f4a_7c15u64);
    runner(cases)
        .run(&ops(p), |ops| {
            seed.set(
                seed.get()
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407),
            );
            let mut t = Lynx::with_areas(seed.get());
            run(&ops, &mut t, 1).map_err(TestCaseError::fail)
        })
        .unwrap();
}

/// The inplace data mode changes how overwrites reach the pool, not what they do: the
/// same model, with remounts (clean and crashed) among the operations.
#[test]
fn lynxfs_in_inplace_mode_matches_model() {
    let p = Profile { escapes: true };
    let cases = if long() { 2000 } else { 100 };
    runner(cases)
        .run(&ops(p), |ops| {
            let mut t = Lynx::new_in(DataMode::Inplace);
            run(&ops, &mut t, 1).map_err(TestCaseError::fail)
        })
        .unwrap();
}

/// A hybrid pool (file data on a data device) in both data modes: the same model, with
/// remounts (clean and crashed) among the operations.
#[test]
fn lynxfs_on_a_hybrid_pool_matches_model() {
    let p = Profile { escapes: true };
    let cases = if long() { 1000 } else { 40 };
    for mode in [DataMode::Atomic, DataMode::Inplace] {
        runner(cases)
            .run(&ops(p), |ops| {
                let mut t = Lynx::hybrid_in(mode);
                run(&ops, &mut t, 1).map_err(TestCaseError::fail)
            })
            .unwrap();
    }
}

/// The model against tmpfs: the model must be Linux.
#[test]
fn model_matches_tmpfs() {
    let p = Profile { escapes: false };
    let cases = if long() { 2000 } else { 100 };
    runner(cases)
        .run(&ops(p), |ops| {
            let mut t = Host::new();
            run(&ops, &mut t, 4).map_err(TestCaseError::fail)
        })
        .unwrap();
}

// ---------------------------------------------------------------------------------
// Concurrency.

const SHARED: [&str; 6] = ["n0", "n1", "n2", "n3", "n4", "n5"];

/// Errnos a racing namespace call may fail with; anything else is a bug.
const RACE_ERRNOS: [i32; 7] = [
    libc::ENOENT,
    libc::EEXIST,
    libc::ENOTDIR,
    libc::EISDIR,
    libc::ENOTEMPTY,
    libc::EPERM,
    libc::EINVAL,
];

/// Random creates, unlinks, renames, links, mkdirs and rmdirs on the names in /d.
fn race(fs: &LFs, seed: u64, iters: usize) {
    let mut r = Rng(seed | 1);
    let mut t = FsRef(fs);
    for _ in 0..iters {
        let a = format!("/d/{}", r.pick(&SHARED));
        let b = format!("/d/{}", r.pick(&SHARED));
        let res = match r.below(7) {
            0 => t.create(&a, libc::O_CREAT | libc::O_WRONLY, 0o644),
            1 => t.unlink(&a),
            2 => t.mkdir(&a, 0o755),
            3 => t.rmdir(&a),
            4 => t.link(&a, &b),
            _ => {
                let flags = *r.pick(&[0, 0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE]);
                t.rename(&a, &b, flags)
            }
        };
        if let Err(e) = res {
            assert!(RACE_ERRNOS.contains(&e), "unexpected errno {e}");
        }
    }
}

/// The shared directory's listing with inode numbers, after checking that every
/// listed name stats as the type readdir gave, that a file's link count is its number
/// of names (all of them are in /d), and the directory's is 2 + its subdirectories.
fn check_shared(fs: &LFs) -> Vec<(Vec<u8>, u64)> {
    let s = fs.session(Cred::root());
    let list: Vec<_> = s
        .readdir("/d")
        .unwrap()
        .into_iter()
        .filter(|d| d.name != b"." && d.name != b"..")
        .collect();
    let mut names: Vec<_> = list.iter().map(|d| (d.name.clone(), d.ino)).collect();
    names.sort();
    let unique: BTreeSet<_> = names.iter().map(|n| &n.0).collect();
    assert_eq!(unique.len(), names.len(), "a name listed twice: {names:?}");
    let mut subdirs = 0;
    for d in &list {
        let p = format!("/d/{}", String::from_utf8_lossy(&d.name));
        let st = s.lstat(&p).unwrap_or_else(|e| {
            let d_ino = s.lstat("/d").map(|st| st.ino).unwrap_or(0);
            let entry = fs.ns().index.find(&fs.pool().pm, d_ino, &d.name);
            let l = &fs.pool().layout;
            let ino_word = l.ino_valid(d.ino).then(|| fs.pool().pm.load_u64(l.inode_addr(d.ino)));
            panic!("{p} is listed (ino {}, dtype {}) but: {e}; index entry {entry:?}; inode word {ino_word:?}", d.ino, d.dtype)
        });
        assert_eq!(
            st.ino, d.ino,
            "{p}: readdir and lstat disagree on the inode"
        );
        assert_eq!(kind_of(st.mode), kind_of_dtype(d.dtype), "{p}: d_type");
        if kind_of(st.mode) == Kind::Dir {
            subdirs += 1;
            assert_eq!(st.nlink, 2, "{p}: an empty directory's nlink");
        } else {
            let names = list.iter().filter(|e| e.ino == d.ino).count() as u64;
            assert_eq!(st.nlink, names, "{p}: nlink against its names");
        }
    }
    assert_eq!(s.stat("/d").unwrap().nlink, 2 + subdirs, "/d: nlink");
    names
}

/// Free counts, to catch leaks across a remount (recovery rebuilds them from a walk).
/// Free blocks and inodes once every directory has been loaded afresh: a load
/// compacts a log worth it (issue 27), so both sides of a remount are counted after
/// their loads have done so.
fn free_counts(fs: &LFs) -> (u64, u64) {
    fs.ns().drop_index();
    snapshot(&mut FsRef(fs)).unwrap();
    let f = fs.session(Cred::root()).statfs();
    // A hybrid pool's statfs counts its device blocks: add the pool's own.
    let a = &fs.pool().alloc;
    let pool_blocks = a.device_blocks().map_or(0, |_| a.blocks.free_count());
    (f.blocks_free + pool_blocks, f.files_free)
}

#[test]
fn racing_namespace_calls_in_one_directory() {
    let (rounds, iters) = if long() { (40, 20_000) } else { (8, 3_000) };
    let mut fs = new_fs();
    fs.session(Cred::root()).mkdir("/d", 0o755).unwrap();
    for round in 0..rounds {
        std::thread::scope(|sc| {
            for k in 0..2u64 {
                let fs = &fs;
                sc.spawn(move || race(fs, round * 2 + k + 1, iters));
            }
        });
        let before = check_shared(&fs);
        let state = snapshot(&mut FsRef(&fs)).unwrap();
        let free = free_counts(&fs);
        let crash = round % 2 == 1;
        fs = reopen(fs, crash).unwrap();
        let after = check_shared(&fs);
        assert_eq!(
            before, after,
            "round {round}: listing after remount (crash {crash})"
        );
        let state2 = snapshot(&mut FsRef(&fs)).unwrap();
        assert!(
            state == state2,
            "round {round}: state after remount (crash {crash}):\n{}",
            diff(&state, &state2)
        );
        assert_eq!(
            free,
            free_counts(&fs),
            "round {round}: free blocks and inodes (crash {crash})"
        );
    }
}

/// Random calls on `names` only (each thread has its own), in /d.
fn own_ops(seed: u64, names: &[String], n: usize) -> Vec<Op> {
    let mut r = Rng(seed | 1);
    let path = |r: &mut Rng| -> String {
        if r.below(4) == 0 {
            format!("/d/{}/{}", r.pick(names), r.pick(names))
        } else {
            format!("/d/{}", r.pick(names))
        }
    };
    (0..n)
        .map(|_| {
            let (a, b) = (path(&mut r), path(&mut r));
            match r.below(12) {
                0 | 1 => Op::Create(a, libc::O_CREAT | libc::O_WRONLY, 0o644),
                2 => Op::Unlink(a),
                3 => Op::Mkdir(a, 0o755),
                4 => Op::Rmdir(a),
                5 | 6 => {
                    let f = *r.pick(&[0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE]);
                    Op::Rename(a, b, f)
                }
                7 => Op::Link(a, b),
                8 => Op::Symlink(r.pick(names).clone(), a),
                9 => Op::Pwrite(
                    a,
                    r.below(10_000),
                    r.below(6000) as usize,
                    r.below(256) as u8,
                ),
                10 => Op::Truncate(a, r.below(9000)),
                _ => Op::SetXattr(
                    a,
                    r.pick(&XNAMES).to_string(),
                    vec![r.below(256) as u8; 5],
                    0,
                ),
            }
        })
        .collect()
}

#[test]
fn two_threads_on_disjoint_names_match_the_model() {
    let (rounds, n) = if long() { (30, 4000) } else { (5, 800) };
    for round in 0..rounds {
        let fs = new_fs();
        fs.session(Cred::root()).mkdir("/d", 0o755).unwrap();
        let mut model = Model::new();
        model.mkdir("/d", 0o755).unwrap();
        let plans: Vec<Vec<Op>> = (0..2u64)
            .map(|k| {
                let names: Vec<String> =
                    ["a", "b", "c"].iter().map(|n| format!("t{k}{n}")).collect();
                own_ops(round * 2 + k + 7, &names, n)
            })
            .collect();
        let results: Vec<Vec<R<Out>>> = std::thread::scope(|sc| {
            let hs: Vec<_> = plans
                .iter()
                .map(|ops| {
                    let fs = &fs;
                    sc.spawn(move || ops.iter().map(|op| apply(op, &mut FsRef(fs))).collect())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // Disjoint names: every call's result is what it would be run alone.
        for (k, (ops, res)) in plans.iter().zip(&results).enumerate() {
            for (i, (op, got)) in ops.iter().zip(res).enumerate() {
                let want = apply(op, &mut model);
                assert_eq!(&want, got, "round {round}, thread {k}, step {i}: {op:?}");
            }
        }
        let mut fs = Lynx {
            fs: Some(fs),
            hybrid: None,
            areas: None,
        };
        for (what, crash) in [
            ("after the threads", None),
            ("after a remount", Some(false)),
            ("after a crash", Some(true)),
        ] {
            if let Some(c) = crash {
                fs.remount(c).unwrap();
            }
            let (a, b) = (snapshot(&mut model).unwrap(), snapshot(&mut fs).unwrap());
            assert!(a == b, "round {round}, state {what}:\n{}", diff(&a, &b));
        }
    }
}

/// Directories under /t the tree race names (some may not exist at a given moment).
const TREE_DIRS: [&str; 7] = ["/t", "/t/a", "/t/b", "/t/c", "/t/a/b", "/t/b/c", "/t/c/a"];
/// Names the tree race moves around: directories and files, so that they collide.
const TREE_NAMES: [&str; 6] = ["a", "b", "c", "f", "g", "h"];

/// Random renames of every kind (plain, NOREPLACE, EXCHANGE) of files and directories
/// between the directories of /t: files within a directory, across directories, and
/// directories into one another (so some would make cycles).
fn tree_race(fs: &LFs, seed: u64, iters: usize) {
    let mut r = Rng(seed | 1);
    let mut t = FsRef(fs);
    for _ in 0..iters {
        let a = format!("{}/{}", r.pick(&TREE_DIRS), r.pick(&TREE_NAMES));
        let b = format!("{}/{}", r.pick(&TREE_DIRS), r.pick(&TREE_NAMES));
        let flags = *r.pick(&[0, 0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE]);
        if let Err(e) = t.rename(&a, &b, flags) {
            assert!(
                [
                    libc::ENOENT,
                    libc::EEXIST,
                    libc::ENOTDIR,
                    libc::EISDIR,
                    libc::ENOTEMPTY,
                    libc::EINVAL,
                    libc::EBUSY
                ]
                .contains(&e),
                "rename {a} -> {b} (flags {flags}): unexpected errno {e}"
            );
        }
    }
}

/// Walk the whole tree from the root: no directory twice (no cycle, nothing reachable
/// two ways), link counts right (files have one name each here, a directory 2 + its
/// subdirectories), and every inode in use reachable (nothing cut off by a rename).
fn check_tree(fs: &LFs) {
    let s = fs.session(Cred::root());
    let mut seen = BTreeSet::new();
    let mut stack = vec![b"/".to_vec()];
    while let Some(dir) = stack.pop() {
        let st = s.lstat(&dir).unwrap();
        assert!(
            seen.insert(st.ino),
            "{}: reached twice",
            String::from_utf8_lossy(&dir)
        );
        let mut subdirs = 0;
        for d in s.readdir(&dir).unwrap() {
            if d.name == b"." || d.name == b".." {
                continue;
            }
            let mut p = dir.clone();
            if p != b"/" {
                p.push(b'/');
            }
            p.extend_from_slice(&d.name);
            let cst = s.lstat(&p).unwrap();
            assert_eq!(
                cst.ino,
                d.ino,
                "{}: readdir and lstat",
                String::from_utf8_lossy(&p)
            );
            if kind_of(cst.mode) == Kind::Dir {
                subdirs += 1;
                stack.push(p);
            } else {
                assert_eq!(cst.nlink, 1, "{}: nlink", String::from_utf8_lossy(&p));
                assert!(
                    seen.insert(cst.ino),
                    "{}: a second name",
                    String::from_utf8_lossy(&p)
                );
            }
        }
        assert_eq!(
            st.nlink,
            2 + subdirs,
            "{}: nlink",
            String::from_utf8_lossy(&dir)
        );
    }
    let f = s.statfs();
    assert_eq!(
        f.files - f.files_free,
        seen.len() as u64,
        "inodes in use against inodes reachable from the root"
    );
}

#[test]
fn racing_renames_across_a_tree_keep_it_a_tree() {
    let (rounds, iters) = if long() { (30, 20_000) } else { (6, 3_000) };
    let mut fs = new_fs();
    {
        let s = fs.session(Cred::root());
        s.mkdir("/t", 0o755).unwrap();
        for d in ["/t/a", "/t/b", "/t/c", "/t/a/b"] {
            s.mkdir(d, 0o755).unwrap();
        }
        for f in ["/t/f", "/t/g", "/t/a/h", "/t/b/f", "/t/a/b/g"] {
            let fd = s.open(f, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
            fs.close_fd(fd).unwrap();
        }
    }
    for round in 0..rounds {
        std::thread::scope(|sc| {
            for k in 0..3u64 {
                let fs = &fs;
                sc.spawn(move || tree_race(fs, round * 3 + k + 101, iters));
            }
        });
        check_tree(&fs);
        let state = snapshot(&mut FsRef(&fs)).unwrap();
        let free = free_counts(&fs);
        let crash = round % 2 == 1;
        fs = reopen(fs, crash).unwrap();
        check_tree(&fs);
        let state2 = snapshot(&mut FsRef(&fs)).unwrap();
        assert!(
            state == state2,
            "round {round}: state after remount (crash {crash}):\n{}",
            diff(&state, &state2)
        );
        assert_eq!(
            free,
            free_counts(&fs),
            "round {round}: free counts (crash {crash})"
        );
    }
}

/// Threads each renaming a file of their own onto one shared name: the name is always
/// there or being replaced, so every such rename succeeds (none may see the other's
/// rename half done and report EEXIST or ENOENT).
#[test]
fn renames_onto_one_name_from_several_threads_all_succeed() {
    let iters = if long() { 20_000 } else { 3_000 };
    let fs = new_fs();
    fs.session(Cred::root()).mkdir("/d", 0o755).unwrap();
    std::thread::scope(|sc| {
        for k in 0..3 {
            let fs = &fs;
            sc.spawn(move || {
                let s = fs.session(Cred::root());
                let own = format!("/d/own{k}");
                for i in 0..iters {
                    let fd = s.open(&own, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
                    fs.close_fd(fd).unwrap();
                    let r = s.rename(&own, "/d/shared", 0);
                    assert!(
                        r.is_ok(),
                        "thread {k}, step {i}: rename onto /d/shared: {r:?}"
                    );
                }
            });
        }
    });
    let s = fs.session(Cred::root());
    let names: Vec<_> = s
        .readdir("/d")
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert!(names.contains(&b"shared".to_vec()), "{names:?}");
    assert_eq!(names.len(), 3, "only ., .. and shared are left: {names:?}");
}

/// Two directories moved into each other at the same moment (p into q while q into
/// p): at most one move may succeed, or both would hang off each other, cut off from
/// the root (the ancestor check of each must see the other's move).
#[test]
fn two_directories_moved_into_each_other_at_once_never_make_a_cycle() {
    let iters = if long() { 20_000 } else { 2_000 };
    let fs = new_fs();
    let s = fs.session(Cred::root());
    for d in ["/t", "/t/p", "/t/q"] {
        s.mkdir(d, 0o755).unwrap();
    }
    let start = std::sync::Barrier::new(2);
    for i in 0..iters {
        let (a, b) = std::thread::scope(|sc| {
            let mv = |from: &'static str, to: &'static str| {
                let (fs, start) = (&fs, &start);
                sc.spawn(move || {
                    let s = fs.session(Cred::root());
                    start.wait();
                    s.rename(from, to, 0)
                })
            };
            let (a, b) = (mv("/t/p", "/t/q/p"), mv("/t/q", "/t/p/q"));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert!(a.is_err() || b.is_err(), "step {i}: both moves succeeded");
        if a.is_ok() {
            s.rename("/t/q/p", "/t/p", 0).unwrap();
        }
        if b.is_ok() {
            s.rename("/t/p/q", "/t/q", 0).unwrap();
        }
    }
    check_tree(&fs);
}
