//! A hybrid pool's data device on a file system that cannot give it what it asks for
//! (issue 43): one too full to reserve a whole 16 MiB step, and one with no
//! `fallocate` at all (ramfs). `pmem::device` reserves a step with `fallocate` before
//! its first write; these are its two fallbacks. A full file system must be a clear
//! ENOSPC that loses nothing committed; one without `fallocate` gets the step filled
//! with zeros before the write, and works as any other.
//!
//! Each test mounts a file system of its own (as root, as `./lynx test` runs).
//!
//! Run: `cargo test -p lynxfs --profile ci --test engine device_space`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, DataMode, Fs, MkfsOptions, Pool};

/// Each test mounts and runs mount(8) and umount(8): a hang ends the run, named.
fn watchdog(test: &str) -> lynxfs_test_support::Watchdog {
    lynxfs_test_support::watchdog(test, Duration::from_secs(120))
}

/// A file system mounted on a fresh directory, unmounted when dropped.
struct Mounted {
    dir: tempfile::TempDir,
}

impl Mounted {
    fn new(kind: &str, options: &str) -> Mounted {
        assert_eq!(
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() },
            0,
            "this test mounts a {kind}: run it as root (as `./lynx test` does)"
        );
        let dir = tempfile::Builder::new()
            .prefix("lynxfs-space-")
            .tempdir()
            .unwrap();
        let out = Command::new("mount")
            .args(["-t", kind, "-o", options, "lynxfs-test"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "mount -t {kind}: {out:?}");
        Mounted { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A hybrid pool in /dev/shm whose device (`device_size` bytes: the header's megabyte,
/// an export area as large as the 16 MiB pool, the rest data) is a file in `on`.
struct Pair {
    _shm: tempfile::TempDir,
    pool: PathBuf,
}

fn pair_on(on: &Path, device_size: u64) -> Pair {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = shm.path().join("pool");
    let mut o = MkfsOptions::new(16 << 20);
    o.lanes = 2;
    o.data = DataMode::Atomic;
    o.data_device = Some(on.join("data.dev"));
    o.device_size = Some(device_size);
    Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs of a hybrid pool");
    Pair { _shm: shm, pool }
}

/// Fills `dir`'s file system with one file until `left` bytes are free, as another
/// program filling the disk would.
fn fill_until(dir: &Path, left: u64) {
    use std::io::Write;
    // SAFETY: an all-zero statvfs is a valid value for statvfs to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a statvfs it may write.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    let free = st.f_bavail * st.f_frsize;
    assert!(free > left, "{free} bytes free, fewer than {left}");
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0x55u8; 1 << 20];
    let mut todo = free - left;
    while todo > 0 {
        let n = todo.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).unwrap();
        todo -= n as u64;
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29) ^ seed).collect()
}

/// Creates `name`, writes `data` at 0 and fsyncs.
fn write_synced(fs: &Fs<PmemBackend>, name: &str, data: &[u8]) -> lynxfs::Result<()> {
    let fd = fs.session(Cred::root()).create(name, 0o644)?;
    let r = fs.pwrite(fd, data, 0).and_then(|n| {
        assert_eq!(n, data.len(), "a short write without an error");
        fs.fsync(fd)
    });
    fs.close_fd(fd)?;
    r
}

/// Appends 1 MiB pieces to a new file `name` until a write fails: the error, and the
/// bytes written before it.
fn write_until_refused(fs: &Fs<PmemBackend>, name: &str, limit: u64) -> (lynxfs::Error, u64) {
    let fd = fs.session(Cred::root()).create(name, 0o644).unwrap();
    let piece = pattern(1 << 20, 2);
    let mut at = 0u64;
    let e = loop {
        assert!(at < limit, "{at} bytes written and no refusal");
        match fs.pwrite(fd, &piece, at) {
            Ok(n) => at += n as u64,
            Err(e) => break e,
        }
    };
    fs.close_fd(fd).unwrap();
    (e, at)
}

fn read_file(fs: &Fs<PmemBackend>, name: &str) -> Vec<u8> {
    let fd = fs
        .session(Cred::root())
        .open(name, libc::O_RDONLY, 0)
        .unwrap();
    let size = fs.fstat(fd).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), size);
    fs.close_fd(fd).unwrap();
    buf
}

#[test]
fn a_device_on_a_full_file_system_says_enospc_and_keeps_what_was_committed() {
    let _dog = watchdog("a_device_on_a_full_file_system_says_enospc_and_keeps_what_was_committed");
    // mkfs checks that the device fits; then another program fills the disk, leaving
    // 8 MiB: less than a step, so no step can be reserved whole and each write
    // reserves its own bytes until none are left.
    let small = Mounted::new("tmpfs", "size=64m,mode=0700");
    let p = pair_on(small.path(), 48 << 20);
    fill_until(small.path(), 8 << 20);
    let fs = Fs::open(&p.pool).unwrap();
    let kept = pattern(1 << 20, 1);
    write_synced(&fs, "kept", &kept).expect("1 MiB fits");
    let (e, written) = write_until_refused(&fs, "big", 32 << 20);
    assert_eq!(e.errno(), libc::ENOSPC, "{e:?} after {written} bytes");
    // What was committed reads back, and a small write into what is left still works.
    assert_eq!(read_file(&fs, "kept"), kept);
    fs.session(Cred::root()).unlink("big").unwrap();
    write_synced(&fs, "after", &pattern(64 << 10, 3)).expect("64 KiB after the refusal");
    drop(fs);
    let fs = Fs::open(&p.pool).unwrap();
    assert_eq!(read_file(&fs, "kept"), kept);
    assert_eq!(read_file(&fs, "after"), pattern(64 << 10, 3));
}

#[test]
fn a_device_on_a_file_system_without_fallocate_is_filled_and_works() {
    let _dog = watchdog("a_device_on_a_file_system_without_fallocate_is_filled_and_works");
    let ram = Mounted::new("ramfs", "mode=0700");
    // ramfs has no fallocate: the fallback this test is about.
    let probe = std::fs::File::create(ram.path().join("probe")).unwrap();
    // SAFETY: fallocate on a descriptor we own; it reads only its arguments.
    let r = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(&probe),
            libc::FALLOC_FL_KEEP_SIZE,
            0,
            4096,
        )
    };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EOPNOTSUPP)),
        "ramfs offered fallocate: this test no longer covers the fallback"
    );
    drop(probe);
    let p = pair_on(ram.path(), 72 << 20);
    let fs = Fs::open(&p.pool).unwrap();
    // Across two steps, and a sparse file whose hole must read as zeros.
    let a = pattern(20 << 20, 4);
    write_synced(&fs, "a", &a).unwrap();
    let fd = fs.session(Cred::root()).create("sparse", 0o644).unwrap();
    assert_eq!(fs.pwrite(fd, b"tail", 5 << 20).unwrap(), 4);
    fs.fsync(fd).unwrap();
    fs.close_fd(fd).unwrap();
    drop(fs);
    let fs = Fs::open(&p.pool).unwrap();
    assert_eq!(read_file(&fs, "a"), a);
    let sparse = read_file(&fs, "sparse");
    assert_eq!(sparse.len(), (5 << 20) + 4);
    assert!(sparse[..5 << 20].iter().all(|b| *b == 0));
    assert_eq!(&sparse[5 << 20..], b"tail");
}
