//! A hybrid pool (`mkfs --data-device`) through the FUSE mount: files written, read
//! and changed through a shared `mmap` (the kernel's page cache over the mount) land on
//! the data device and read back after an unmount and a new mount; fsck is clean.
//! Concurrent fsyncs through the mount (answered by the daemon's commit threads) are
//! committed when they return: their files survive the daemon's SIGKILL.
//! Needs root and `/dev/fuse`; every command has a time limit and the test a watchdog.

use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use lynxfs_test_support::child::{holder_of, output_within};
use lynxfs_test_support::{wait_until, watchdog};

const BIN: &str = env!("CARGO_BIN_EXE_lynxfs");

fn run(args: &[&Path]) -> Output {
    output_within(Command::new(BIN).args(args), Duration::from_secs(120))
}

fn ok(o: Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn mounted(mp: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mp = mp.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(mp.as_ref()))
}

/// Unmounts on drop, so a failing test leaves no mount behind.
struct Mount<'a>(&'a Path);

impl<'a> Mount<'a> {
    fn new(pool: &Path, mnt: &'a Path) -> Mount<'a> {
        ok(run(&[Path::new("mount"), pool, mnt]), "mount");
        wait_until("the mount", Duration::from_secs(60), || mounted(mnt));
        Mount(mnt)
    }
}

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        if mounted(self.0) {
            let _ = run(&[Path::new("umount"), self.0]);
        }
        if mounted(self.0) {
            let _ = output_within(
                Command::new("umount").arg("-l").arg(self.0),
                Duration::from_secs(60),
            );
        }
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// Store `bytes` at the start of `path` through a shared mapping, then msync.
fn store_through_mmap(path: &Path, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: a fresh shared mapping of `len` bytes of an open file; nothing else
    // refers to the memory, and it is unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `p` maps `len >= bytes.len()` writable bytes (checked by the caller's file).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), bytes.len());
        assert_eq!(libc::msync(p, len, libc::MS_SYNC), 0);
        assert_eq!(libc::munmap(p, len), 0);
    }
}

#[test]
fn a_hybrid_pool_through_the_mount_with_mmap() {
    let _w = watchdog(
        "a_hybrid_pool_through_the_mount_with_mmap",
        Duration::from_secs(300),
    );
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let disk = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let (pool, dev) = (shm.path().join("pool"), disk.path().join("data.dev"));
    let mkfs = [Path::new("mkfs"), Path::new("--size"), Path::new("64M")];
    let mut args = mkfs.to_vec();
    args.extend([Path::new("--data-device"), &dev, &pool]);
    ok(run(&args), "mkfs");
    let data = pattern(3 << 20);
    let marker = b"written through a shared mapping";
    {
        let _m = Mount::new(&pool, mnt.path());
        std::fs::write(mnt.path().join("big"), &data).unwrap();
        std::fs::write(mnt.path().join("small"), b"hello").unwrap();
        store_through_mmap(&mnt.path().join("big"), marker);
        let got = std::fs::read(mnt.path().join("big")).unwrap();
        assert_eq!(&got[..marker.len()], marker);
        ok(run(&[Path::new("umount"), mnt.path()]), "umount");
    }
    // The bytes are on the device.
    let on_dev = std::fs::read(&dev).unwrap();
    assert!(on_dev.windows(marker.len()).any(|w| w == marker));
    {
        let _m = Mount::new(&pool, mnt.path());
        let mut want = data.clone();
        want[..marker.len()].copy_from_slice(marker);
        assert!(std::fs::read(mnt.path().join("big")).unwrap() == want);
        assert_eq!(std::fs::read(mnt.path().join("small")).unwrap(), b"hello");
        ok(run(&[Path::new("umount"), mnt.path()]), "umount");
    }
    let out = ok(run(&[Path::new("fsck"), &pool]), "fsck");
    assert!(out.contains("clean"), "{out}");
}

/// Issue 43: FSYNCs are answered from the daemon's commit threads (so that many share
/// one device flush); each must have committed when it returns. Sixteen threads write
/// a file each and fsync at once, the daemon is killed, and after recovery (which
/// rolls back what did not commit) every file holds what its fsync returned with.
#[test]
fn concurrent_fsyncs_through_the_mount_survive_the_daemons_death() {
    const FILES: usize = 16;
    let _w = watchdog(
        "concurrent_fsyncs_through_the_mount_survive_the_daemons_death",
        Duration::from_secs(300),
    );
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let disk = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let (pool, dev) = (shm.path().join("pool"), disk.path().join("data.dev"));
    let p = Path::new;
    ok(
        run(&[
            p("mkfs"),
            p("--size"),
            p("64M"),
            p("--data-device"),
            &dev,
            &pool,
        ]),
        "mkfs",
    );
    let content = |i: usize| -> Vec<u8> {
        let mut v = pattern(64 << 10);
        v[..8].copy_from_slice(&(i as u64).to_le_bytes());
        v
    };
    let m = Mount::new(&pool, mnt.path());
    std::thread::scope(|s| {
        for i in 0..FILES {
            let (path, bytes) = (mnt.path().join(format!("f{i}")), content(i));
            s.spawn(move || {
                let mut f = std::fs::File::create(&path).unwrap();
                std::io::Write::write_all(&mut f, &bytes).unwrap();
                f.sync_all().unwrap();
            });
        }
    });
    let daemon = holder_of(&pool).expect("the daemon holds its pool");
    // SAFETY: kill takes plain integers.
    assert_eq!(unsafe { libc::kill(daemon, libc::SIGKILL) }, 0);
    wait_until("the daemon's death", Duration::from_secs(60), || {
        holder_of(&pool).is_none()
    });
    drop(m);
    assert!(!mounted(mnt.path()), "unmounted after the daemon's death");
    let _m = Mount::new(&pool, mnt.path());
    for i in 0..FILES {
        let got = std::fs::read(mnt.path().join(format!("f{i}"))).unwrap();
        assert!(
            got == content(i),
            "f{i}: {} bytes, not what its fsync returned with",
            got.len()
        );
    }
    ok(run(&[p("umount"), mnt.path()]), "umount");
    let out = ok(run(&[p("fsck"), &pool]), "fsck");
    assert!(out.contains("clean"), "{out}");
}
