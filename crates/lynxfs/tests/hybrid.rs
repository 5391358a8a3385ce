//! Hybrid pools: metadata in the pool, file data on a data device (docs/FORMAT.md,
//! "Hybrid pools"; docs/CONSISTENCY.md, "Hybrid pools").
//!
//! The pool file is in /dev/shm (memory, as persistent memory would be), the device a
//! file in the temporary directory (on this machine's disk). Covered: file data lands
//! on the device and reads back across a clean close and a crash, symlink targets stay
//! in the pool, both data modes, the refusals at open (missing device, not a device,
//! another pool's, another device of this pool, too small, newer format), and a
//! device that fails mid-run (EIO, ENOSPC; nothing panics, the pool stays consistent
//! and fsck names the bytes lost).
//!
//! The crash images of hybrid writes (`crash_images_of_hybrid_writes_show_old_or_new`):
//! each operation runs on the recording backend, which logs the pool's stores and
//! fences and the device's writes and flushes in one order; at every fence and device
//! flush (and at the end), the pool holds what was fenced (with or without the stores
//! since), and the device what was flushed, plus none, all or a random choice of the
//! 512-byte sectors written since (lost, reordered or torn). Each image pair is opened
//! (recovery runs) and must show the file old or new (atomic mode; inplace: each byte
//! old or new) with fsck clean. A commit's fill of the device step it reserved (zeros
//! over what no write covered, `Device::settle`) is among the recorded device writes:
//! every case that commits runs one, and the concurrent fsyncs' first commit fills
//! while the other threads write.
//!
//! Run: `cargo test -p lynxfs --profile ci --test hybrid`.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use lynxfs::format::device::{DeviceHeader, HEADER_LEN};
use lynxfs::pmem::device::Fault;
use lynxfs::pmem::{Backend, Event, PmemBackend, RecordingBackend};
use lynxfs::{Access, Cred, DataMode, Error, Fs, MkfsOptions, Pool};

const BLOCK: u64 = 4096;

/// A pool in /dev/shm and its device on the disk, removed at the end.
struct Pair {
    _shm: tempfile::TempDir,
    _disk: tempfile::TempDir,
    pool: PathBuf,
    dev: PathBuf,
}

fn pair_in(data: DataMode) -> Pair {
    pair_sized(data, 16 << 20, None)
}

/// A pair as small as a pool and its device can be (a 4 MiB pool, an 11 MiB device:
/// header, export area, 6 MiB of data), for the crash-image tests, which write both
/// files whole for every image: the default device (8 times the pool, 128 MiB) made
/// them write 144 MiB an image, most of their three minutes.
fn crash_pair_in(data: DataMode) -> Pair {
    pair_sized(data, 4 << 20, Some(11 << 20))
}

fn pair_sized(data: DataMode, size: u64, device_size: Option<u64>) -> Pair {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let disk = tempfile::tempdir().unwrap();
    let pool = shm.path().join("pool");
    let dev = disk.path().join("data.dev");
    let mut o = MkfsOptions::new(size);
    o.lanes = 2;
    o.data = data;
    o.data_device = Some(dev.clone());
    o.device_size = device_size;
    Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs of a hybrid pool");
    Pair {
        _shm: shm,
        _disk: disk,
        pool,
        dev,
    }
}

fn pair() -> Pair {
    pair_in(DataMode::Atomic)
}

impl Pair {
    fn open(&self) -> lynxfs::Result<Fs<PmemBackend>> {
        Fs::open(&self.pool)
    }
    fn header(&self) -> DeviceHeader {
        let mut b = [0u8; HEADER_LEN];
        std::fs::File::open(&self.dev)
            .unwrap()
            .read_exact_at(&mut b, 0)
            .unwrap();
        DeviceHeader::decode(&b).unwrap()
    }
    /// The message opening the pool fails with.
    fn refusal(&self) -> String {
        match self.open() {
            Ok(_) => panic!("the pool opened"),
            Err(e) => {
                assert!(matches!(e, Error::Device { .. }), "{e:?}");
                e.to_string()
            }
        }
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

fn write_file<B: Backend>(fs: &Fs<B>, name: &str, data: &[u8]) {
    let fd = fs.session(Cred::root()).create(name, 0o644).unwrap();
    assert_eq!(fs.pwrite(fd, data, 0).unwrap(), data.len());
    fs.close_fd(fd).unwrap();
}

/// [`write_file`], then fsync: durable (committed) when it returns.
fn write_synced<B: Backend>(fs: &Fs<B>, name: &str, data: &[u8]) {
    let fd = fs.session(Cred::root()).create(name, 0o644).unwrap();
    assert_eq!(fs.pwrite(fd, data, 0).unwrap(), data.len());
    fs.fsync(fd).unwrap();
    fs.close_fd(fd).unwrap();
}

fn read_file<B: Backend>(fs: &Fs<B>, name: &str) -> lynxfs::Result<Vec<u8>> {
    let fd = fs.session(Cred::root()).open(name, libc::O_RDONLY, 0)?;
    let size = fs.fstat(fd)?.size as usize;
    let mut buf = vec![0u8; size];
    let r = fs.pread(fd, &mut buf, 0);
    fs.close_fd(fd)?;
    assert_eq!(r?, size);
    Ok(buf)
}

/// Where file `name`'s bytes are on the device: (file offset, device offset, length).
fn device_extents(fs: &Fs<PmemBackend>, name: &str) -> Vec<(u64, u64, u64)> {
    let fd = fs
        .session(Cred::root())
        .open(name, libc::O_RDONLY, 0)
        .unwrap();
    let ext = fs.extents(fd, 0, u64::MAX).unwrap();
    fs.close_fd(fd).unwrap();
    ext.iter()
        .map(|e| (e.logical, e.physical, e.length))
        .collect()
}

#[test]
fn file_data_is_on_the_device_and_survives_a_close_and_a_crash() {
    let p = pair();
    let data = pattern(3 * BLOCK as usize + 100, 7);
    {
        let fs = p.open().unwrap();
        write_file(&fs, "/f", &data);
        // The bytes are on the device where FIEMAP says, and nowhere in the pool.
        let dev = std::fs::read(&p.dev).unwrap();
        let h = p.header();
        let mut seen = 0;
        for (logical, physical, len) in device_extents(&fs, "/f") {
            assert!(physical >= h.data_off && physical + len <= h.data_off + h.data_len);
            let want = &data[logical as usize..(logical + len).min(data.len() as u64) as usize];
            assert_eq!(
                &dev[physical as usize..physical as usize + want.len()],
                want
            );
            seen += want.len();
        }
        assert_eq!(seen, data.len());
        let pool = std::fs::read(&p.pool).unwrap();
        assert!(
            !pool.windows(64).any(|w| w == &data[1000..1064]),
            "file data found in the pool"
        );
        fs.close().unwrap();
    }
    let fs = p.open().unwrap();
    assert!(fs.pool().was_clean);
    assert_eq!(read_file(&fs, "/f").unwrap(), data);
    write_file(&fs, "/g", b"after the reopen");
    fs.sync().unwrap();
    fs.pool().crash_in_place();
    drop(fs);
    let fs = p.open().unwrap();
    assert!(!fs.pool().was_clean, "the crash left the pool unclean");
    assert_eq!(read_file(&fs, "/f").unwrap(), data);
    assert_eq!(read_file(&fs, "/g").unwrap(), b"after the reopen");
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(rep.is_clean(), "{:?}", rep.problems);
}

#[test]
fn overwrites_truncates_and_holes_read_right_in_both_modes() {
    for mode in [DataMode::Atomic, DataMode::Inplace] {
        let p = pair_in(mode);
        let fs = p.open().unwrap();
        let mut want = pattern(5 * BLOCK as usize, 1);
        write_file(&fs, "/f", &want);
        let fd = fs
            .session(Cred::root())
            .open("/f", libc::O_RDWR, 0)
            .unwrap();
        // A partial-block overwrite, one across blocks, a write past the end (a hole).
        for (off, len, seed) in [
            (100u64, 50usize, 2u8),
            (BLOCK - 10, 30, 3),
            (9 * BLOCK, 10, 4),
        ] {
            let bytes = pattern(len, seed);
            assert_eq!(fs.pwrite(fd, &bytes, off).unwrap(), len);
            let end = off as usize + len;
            if want.len() < end {
                want.resize(end, 0);
            }
            want[off as usize..end].copy_from_slice(&bytes);
        }
        fs.ftruncate(fd, 2 * BLOCK + 5).unwrap();
        want.truncate(2 * BLOCK as usize + 5);
        fs.ftruncate(fd, 3 * BLOCK).unwrap();
        want.resize(3 * BLOCK as usize, 0);
        fs.close_fd(fd).unwrap();
        assert_eq!(read_file(&fs, "/f").unwrap(), want, "{mode:?}");
        fs.close().unwrap();
        drop(fs);
        let fs = p.open().unwrap();
        assert_eq!(
            read_file(&fs, "/f").unwrap(),
            want,
            "{mode:?} after a reopen"
        );
        assert!(lynxfs::fsck::check(fs.pool()).is_clean());
    }
}

#[test]
fn symlink_targets_stay_in_the_pool() {
    let p = pair();
    let target = "t".repeat(3000);
    {
        let fs = p.open().unwrap();
        fs.session(Cred::root()).symlink(&target, "/l").unwrap();
        assert_eq!(
            fs.session(Cred::root()).readlink("/l").unwrap(),
            target.as_bytes()
        );
        fs.pool().crash_in_place();
    }
    let pool = std::fs::read(&p.pool).unwrap();
    assert!(pool.windows(3000).any(|w| w == target.as_bytes()));
    let fs = p.open().unwrap();
    // Recovery checks a new symlink's target (log::cwon) where it is: in the pool.
    assert_eq!(
        fs.session(Cred::root()).readlink("/l").unwrap(),
        target.as_bytes()
    );
}

#[test]
fn a_missing_device_is_refused_naming_both() {
    let p = pair();
    std::fs::remove_file(&p.dev).unwrap();
    let msg = p.refusal();
    assert!(msg.contains(&*p.dev.to_string_lossy()), "{msg}");
    assert!(msg.contains(&*p.pool.to_string_lossy()), "{msg}");
    assert!(msg.contains("missing"), "{msg}");
}

#[test]
fn a_device_that_moved_opens_when_named_and_is_still_checked() {
    let p = pair();
    {
        let fs = p.open().unwrap();
        write_file(&fs, "/f", b"moved along");
        fs.close().unwrap();
    }
    let moved = p.dev.with_extension("moved");
    std::fs::rename(&p.dev, &moved).unwrap();
    assert!(p.refusal().contains("missing"));
    let open = |dev: &std::path::Path| {
        Pool::open_with_device(
            &p.pool,
            Access::ReadWrite,
            PmemBackend::default(),
            &lynxfs::progress::Quiet,
            Some(dev),
        )
    };
    let fs = Fs::new(open(&moved).unwrap());
    assert_eq!(read_file(&fs, "/f").unwrap(), b"moved along");
    fs.close().unwrap();
    drop(fs);
    // Another pool's device named instead: refused as at any open.
    let other = pair();
    let Err(e) = open(&other.dev) else {
        panic!("another pool's device opened");
    };
    assert!(e.to_string().contains("another pool"), "{e}");
}

#[test]
fn a_file_that_is_no_data_device_is_refused() {
    let p = pair();
    std::fs::File::options()
        .write(true)
        .open(&p.dev)
        .unwrap()
        .write_all_at(&[0u8; HEADER_LEN], 0)
        .unwrap();
    let msg = p.refusal();
    assert!(msg.contains("not a LynxFS data device"), "{msg}");
}

#[test]
fn another_pools_device_is_refused() {
    let (a, b) = (pair(), pair());
    std::fs::copy(&b.dev, &a.dev).unwrap();
    let msg = a.refusal();
    assert!(msg.contains("another pool"), "{msg}");
    assert!(msg.contains(&*a.pool.to_string_lossy()), "{msg}");
}

#[test]
fn another_device_of_this_pool_is_refused() {
    let p = pair();
    let mut h = p.header();
    h.device_uuid[0] ^= 1;
    std::fs::File::options()
        .write(true)
        .open(&p.dev)
        .unwrap()
        .write_all_at(&h.encode(), 0)
        .unwrap();
    let msg = p.refusal();
    assert!(
        msg.contains("not the data device this pool records"),
        "{msg}"
    );
}

#[test]
fn a_device_too_small_is_refused() {
    let p = pair();
    let h = p.header();
    std::fs::File::options()
        .write(true)
        .open(&p.dev)
        .unwrap()
        .set_len(h.device_len() - BLOCK)
        .unwrap();
    let msg = p.refusal();
    assert!(msg.contains("its header says"), "{msg}");
    // A header whose data area is smaller than the pool's blocks.
    let mut small = h.clone();
    small.data_len -= BLOCK;
    small.export_off -= BLOCK;
    let f = std::fs::File::options().write(true).open(&p.dev).unwrap();
    f.set_len(h.device_len()).unwrap();
    f.write_all_at(&small.encode(), 0).unwrap();
    let msg = p.refusal();
    assert!(msg.contains("blocks, the pool has"), "{msg}");
}

#[test]
fn a_newer_device_format_is_refused_naming_both_versions() {
    let p = pair();
    let mut b = p.header().encode();
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    std::fs::File::options()
        .write(true)
        .open(&p.dev)
        .unwrap()
        .write_all_at(&b, 0)
        .unwrap();
    let msg = p.refusal();
    assert!(
        msg.contains("version 2") && msg.contains("version 1"),
        "{msg}"
    );
}

#[test]
fn mkfs_refuses_an_existing_device_file_without_force() {
    let p = pair();
    let mut o = MkfsOptions::new(16 << 20);
    o.data_device = Some(p.dev.clone());
    let other = p.pool.with_extension("2");
    let e = Pool::mkfs(&other, &o, PmemBackend::default()).unwrap_err();
    assert!(matches!(e, Error::Exists { .. }), "{e:?}");
    assert!(!other.exists(), "a refused mkfs made a pool");
    // The first pool still opens with its device.
    p.open().unwrap();
}

#[test]
fn mkfs_force_refuses_a_device_file_of_another_user() {
    let dir = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let dev = dir.path().join("theirs.dev");
    std::fs::write(&dev, b"their bytes").unwrap();
    std::os::unix::fs::chown(&dev, Some(1000), Some(1000)).unwrap();
    let mut o = MkfsOptions::new(16 << 20);
    o.force = true;
    o.data_device = Some(dev.clone());
    let pool = shm.path().join("pool");
    let e = Pool::mkfs(&pool, &o, PmemBackend::default()).unwrap_err();
    assert!(e.to_string().contains("not by you"), "{e}");
    assert_eq!(std::fs::read(&dev).unwrap(), b"their bytes");
    assert!(!pool.exists());
}

/// mkfs of a hybrid pool whose device is `dev`, with `--force`, in a new /dev/shm
/// directory: the error, or `None` when it made the pool.
fn mkfs_force(dev: &std::path::Path) -> Option<Error> {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut o = MkfsOptions::new(16 << 20);
    o.lanes = 2;
    o.force = true;
    o.data_device = Some(dev.to_path_buf());
    let pool = shm.path().join("pool");
    let r = Pool::mkfs(&pool, &o, PmemBackend::default()).err();
    assert_eq!(pool.exists(), r.is_none(), "{r:?}");
    r
}

fn chmod(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn a_new_device_file_is_the_callers_alone() {
    let p = pair();
    assert_eq!(mode(&p.dev), 0o600);
}

#[test]
fn mkfs_force_refuses_a_device_file_open_to_others_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("shared.dev");
    for m in [0o644, 0o640, 0o604, 0o620] {
        std::fs::write(&dev, b"my bytes").unwrap();
        chmod(&dev, m);
        let e = mkfs_force(&dev).expect("a device others can open is refused");
        assert!(e.to_string().contains("open to group or others"), "{e}");
        assert_eq!(std::fs::read(&dev).unwrap(), b"my bytes");
        assert_eq!(mode(&dev), m);
    }
    // The caller's alone: formatted.
    chmod(&dev, 0o600);
    assert!(mkfs_force(&dev).is_none());
}

#[test]
fn mkfs_never_follows_a_link_at_the_device_path_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let (dev, target) = (dir.path().join("link.dev"), dir.path().join("target"));
    std::fs::write(&target, b"not a device").unwrap();
    chmod(&target, 0o600);
    std::os::unix::fs::symlink(&target, &dev).unwrap();
    let e = mkfs_force(&dev).expect("a link to a file is refused");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read(&target).unwrap(), b"not a device");
}

#[test]
fn a_device_open_to_others_or_of_another_user_is_refused_at_a_read_write_open() {
    let p = pair();
    let read_write =
        |p: &Pair| Pool::open(&p.pool, Access::ReadWrite, PmemBackend::default()).map(drop);
    chmod(&p.dev, 0o644);
    let msg = p.refusal();
    assert!(msg.contains("open to group or others"), "{msg}");
    assert!(msg.contains(&*p.pool.to_string_lossy()), "{msg}");
    // A read-only look changes nothing and is let through, as for a pool file.
    Pool::open(&p.pool, Access::ReadOnly, PmemBackend::default()).unwrap();
    chmod(&p.dev, 0o600);
    read_write(&p).unwrap();
    std::os::unix::fs::chown(&p.dev, Some(1000), Some(1000)).unwrap();
    let msg = p.refusal();
    assert!(msg.contains("owned by uid 1000"), "{msg}");
    std::os::unix::fs::chown(&p.dev, Some(0), Some(0)).unwrap();
    read_write(&p).unwrap();
}

#[test]
fn a_link_of_another_user_at_the_device_path_is_not_followed() {
    let p = pair();
    let moved = p.dev.with_extension("real");
    std::fs::rename(&p.dev, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &p.dev).unwrap();
    // The caller's own link is followed.
    Pool::open(&p.pool, Access::ReadWrite, PmemBackend::default()).unwrap();
    std::os::unix::fs::lchown(&p.dev, Some(1000), Some(1000)).unwrap();
    let Err(e) = Pool::open(&p.pool, Access::ReadWrite, PmemBackend::default()) else {
        panic!("another user's link was followed");
    };
    assert!(
        e.to_string().contains("symbolic link owned by uid 1000"),
        "{e}"
    );
}

#[test]
fn a_failing_device_gives_eio_and_changes_nothing() {
    let p = pair();
    let fs = p.open().unwrap();
    let old = pattern(2 * BLOCK as usize, 9);
    write_file(&fs, "/f", &old);
    let free = fs.pool().alloc.data_blocks().free_count();
    let fd = fs
        .session(Cred::root())
        .open("/f", libc::O_RDWR, 0)
        .unwrap();
    let dev = fs.pool().device().unwrap();
    dev.fail(Fault::Writes);
    for (off, len) in [(0u64, 10usize), (BLOCK, BLOCK as usize), (10 * BLOCK, 5)] {
        let e = fs.pwrite(fd, &pattern(len, 1), off).unwrap_err();
        assert_eq!(e.errno(), libc::EIO, "write at {off}");
    }
    // The commit's flush fails: fsync says so.
    assert_eq!(fs.fsync(fd).unwrap_err().errno(), libc::EIO);
    assert_eq!(
        fs.pool().alloc.data_blocks().free_count(),
        free,
        "blocks leaked"
    );
    // Reads still work, and show the old bytes.
    assert_eq!(read_file(&fs, "/f").unwrap(), old);
    dev.fail(Fault::Full);
    assert_eq!(fs.pwrite(fd, b"x", 0).unwrap_err().errno(), libc::ENOSPC);
    dev.fail(Fault::All);
    let mut buf = [0u8; 16];
    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap_err().errno(), libc::EIO);
    // Namespace operations do not touch the device.
    let g = fs.session(Cred::root()).create("/g", 0o644).unwrap();
    fs.close_fd(g).unwrap();
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(
        rep.problems.iter().any(|s| s.contains("cannot be read")),
        "{:?}",
        rep.problems
    );
    dev.fail(Fault::None);
    fs.close_fd(fd).unwrap();
    assert_eq!(read_file(&fs, "/f").unwrap(), old);
    assert!(lynxfs::fsck::check(fs.pool()).is_clean());
}

#[test]
fn a_device_cut_short_mid_run_reads_eio_and_fsck_names_the_loss() {
    let p = pair();
    let fs = p.open().unwrap();
    write_file(&fs, "/f", &pattern(4 * BLOCK as usize, 3));
    let (_, physical, _) = device_extents(&fs, "/f")[0];
    std::fs::File::options()
        .write(true)
        .open(&p.dev)
        .unwrap()
        .set_len(physical + BLOCK)
        .unwrap();
    assert_eq!(read_file(&fs, "/f").unwrap_err().errno(), libc::EIO);
    let rep = lynxfs::fsck::check(fs.pool());
    let lost: Vec<_> = rep
        .problems
        .iter()
        .filter(|s| s.contains("cannot be read"))
        .collect();
    assert!(!lost.is_empty(), "{:?}", rep.problems);
    fs.pool().crash_in_place();
    drop(fs);
    // Reopening refuses the device now too short for its header.
    assert!(p.refusal().contains("its header says"));
}

#[test]
fn a_read_only_open_reads_through_the_device() {
    let p = pair();
    {
        let fs = p.open().unwrap();
        write_file(&fs, "/f", b"read me");
        fs.close().unwrap();
    }
    let pool = Pool::open(&p.pool, Access::ReadOnly, PmemBackend::default()).unwrap();
    let fs = Fs::new(pool);
    assert_eq!(read_file(&fs, "/f").unwrap(), b"read me");
}

#[test]
fn a_hybrid_image_without_its_device_is_refused() {
    let p = pair();
    let img = std::fs::read(&p.pool).unwrap();
    let Err(e) = Pool::open_image(&img, PmemBackend::default()) else {
        panic!("the image opened");
    };
    assert!(e.to_string().contains("data device"), "{e}");
}

/// An operation (or two) of the crash check: its name, what it does to "/f" (which
/// holds `old`), the bytes "/f" holds after each call (the last: after it all), and
/// whether a crash may mix old and new bytes (the inplace mode's overwrites).
struct Case {
    name: &'static str,
    mode: DataMode,
    op: fn(&Fs<RecordingBackend>, lynxfs::Fd),
    new: fn(&[u8]) -> Vec<Vec<u8>>,
    bytewise: bool,
    /// The op ends with a commit (fsync, fdatasync, a shrink): once it returned, the
    /// file must be the last state exactly, whatever the device lost.
    synced: bool,
}

const OLD_LEN: usize = 4 * BLOCK as usize;

fn overwrite(f: &[u8], off: usize, len: usize, seed: u8) -> Vec<u8> {
    let mut v = f.to_vec();
    let end = off + len;
    if v.len() < end {
        v.resize(end, 0);
    }
    v[off..end].copy_from_slice(&pattern(len, seed));
    v
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "atomic overwrite across blocks",
            mode: DataMode::Atomic,
            op: |fs, fd| {
                fs.pwrite(fd, &pattern(2 * BLOCK as usize, 5), 100).unwrap();
            },
            new: |f| vec![overwrite(f, 100, 2 * BLOCK as usize, 5)],
            bytewise: false,
            synced: false,
        },
        Case {
            name: "atomic overwrite in one block",
            mode: DataMode::Atomic,
            op: |fs, fd| {
                fs.pwrite(fd, &pattern(300, 6), BLOCK + 7).unwrap();
            },
            new: |f| vec![overwrite(f, BLOCK as usize + 7, 300, 6)],
            bytewise: false,
            synced: false,
        },
        Case {
            name: "inplace overwrite across blocks",
            mode: DataMode::Inplace,
            op: |fs, fd| {
                fs.pwrite(fd, &pattern(2 * BLOCK as usize, 7), 100).unwrap();
            },
            new: |f| vec![overwrite(f, 100, 2 * BLOCK as usize, 7)],
            bytewise: true,
            synced: false,
        },
        Case {
            name: "append",
            mode: DataMode::Atomic,
            op: |fs, fd| {
                fs.pwrite(fd, &pattern(5000, 8), OLD_LEN as u64).unwrap();
            },
            new: |f| vec![overwrite(f, OLD_LEN, 5000, 8)],
            bytewise: false,
            synced: false,
        },
        Case {
            name: "inplace append past a hole",
            mode: DataMode::Inplace,
            op: |fs, fd| {
                fs.pwrite(fd, &pattern(10, 9), 6 * BLOCK + 1).unwrap();
            },
            new: |f| vec![overwrite(f, 6 * BLOCK as usize + 1, 10, 9)],
            bytewise: false,
            synced: false,
        },
        Case {
            name: "fallocate growing",
            mode: DataMode::Atomic,
            op: |fs, fd| fs.fallocate(fd, 0, OLD_LEN as u64 - 10, 2 * BLOCK).unwrap(),
            new: |f| {
                let mut v = f.to_vec();
                v.resize(OLD_LEN - 10 + 2 * BLOCK as usize, 0);
                vec![v]
            },
            bytewise: false,
            synced: false,
        },
        Case {
            name: "truncate down then up",
            mode: DataMode::Atomic,
            op: |fs, fd| {
                fs.ftruncate(fd, 100).unwrap();
                fs.ftruncate(fd, 3 * BLOCK).unwrap();
            },
            new: |f| {
                let mut v = f[..100].to_vec();
                let down = v.clone();
                v.resize(3 * BLOCK as usize, 0);
                vec![down, v]
            },
            bytewise: false,
            synced: false,
        },
        Case {
            name: "append then fsync",
            mode: DataMode::Atomic,
            op: |fs, fd| {
                fs.pwrite(fd, &pattern(5000, 10), OLD_LEN as u64).unwrap();
                fs.fsync(fd).unwrap();
            },
            new: |f| vec![overwrite(f, OLD_LEN, 5000, 10)],
            bytewise: false,
            synced: true,
        },
        Case {
            name: "two overwrites then fdatasync (one commit)",
            mode: DataMode::Atomic,
            op: |fs, fd| {
                fs.pwrite(fd, &pattern(BLOCK as usize, 11), 0).unwrap();
                fs.pwrite(fd, &pattern(300, 12), 2 * BLOCK + 5).unwrap();
                fs.fsync(fd).unwrap();
            },
            new: |f| {
                let one = overwrite(f, 0, BLOCK as usize, 11);
                let two = overwrite(&one, 2 * BLOCK as usize + 5, 300, 12);
                vec![one, two]
            },
            bytewise: false,
            synced: true,
        },
        Case {
            name: "inplace overwrite then fsync",
            mode: DataMode::Inplace,
            op: |fs, fd| {
                fs.pwrite(fd, &pattern(2 * BLOCK as usize, 13), 100)
                    .unwrap();
                fs.fsync(fd).unwrap();
            },
            new: |f| vec![overwrite(f, 100, 2 * BLOCK as usize, 13)],
            bytewise: true,
            synced: true,
        },
        Case {
            name: "truncate down (commits) then append",
            mode: DataMode::Atomic,
            op: |fs, fd| {
                fs.ftruncate(fd, 100).unwrap();
                fs.pwrite(fd, &pattern(200, 14), 100).unwrap();
            },
            new: |f| {
                let down = f[..100].to_vec();
                let mut up = down.clone();
                up.extend_from_slice(&pattern(200, 14));
                vec![down, up]
            },
            bytewise: false,
            synced: false,
        },
    ]
}

/// A small deterministic generator (xorshift) for the torn-sector choices.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const SECTOR: u64 = 512;

/// `img` with the sectors of `writes` that `keep` chooses applied (a write's sector
/// is applied whole or not at all: a disk tears at sectors).
fn apply_sectors(img: &mut Vec<u8>, writes: &[(u64, &[u8])], keep: &mut dyn FnMut() -> bool) {
    for &(off, bytes) in writes {
        let end = off + bytes.len() as u64;
        let mut s = off;
        while s < end {
            let e = ((s / SECTOR + 1) * SECTOR).min(end);
            if keep() {
                let (a, b) = (s as usize, e as usize);
                if img.len() < b {
                    img.resize(b, 0);
                }
                img[a..b].copy_from_slice(&bytes[(s - off) as usize..(e - off) as usize]);
            }
            s = e;
        }
    }
}

/// The pool images at crash point `k` of `events` over `pm`: what was fenced before
/// it, with none and with all of the stores since.
fn pool_images(pm: &[u8], events: &[Event], k: usize) -> Vec<Vec<u8>> {
    let fenced = events[..k]
        .iter()
        .rposition(|e| matches!(e, Event::Fence))
        .map_or(0, |i| i + 1);
    let apply = |upto: usize| {
        let mut img = pm.to_vec();
        for e in &events[..upto] {
            if let Event::Store { off, bytes } = e {
                img[*off as usize..*off as usize + bytes.len()].copy_from_slice(bytes);
            }
        }
        img
    };
    if fenced == k {
        vec![apply(k)]
    } else {
        vec![apply(fenced), apply(k)]
    }
}

/// The device images at crash point `k`: what was flushed before it, plus none, all,
/// and three random choices of the sectors written since (in reverse order too: a
/// disk may reorder them).
fn device_images(dev: &[u8], events: &[Event], k: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    let synced = events[..k]
        .iter()
        .rposition(|e| matches!(e, Event::DeviceSync))
        .map_or(0, |i| i + 1);
    let writes = |r: std::ops::Range<usize>| -> Vec<(u64, &[u8])> {
        events[r]
            .iter()
            .filter_map(|e| match e {
                Event::DeviceWrite { off, bytes } => Some((*off, bytes.as_slice())),
                _ => None,
            })
            .collect()
    };
    let mut base = dev.to_vec();
    apply_sectors(&mut base, &writes(0..synced), &mut || true);
    let pending = writes(synced..k);
    if pending.is_empty() {
        return vec![base];
    }
    let mut out = vec![base.clone()];
    let mut all = base.clone();
    apply_sectors(&mut all, &pending, &mut || true);
    out.push(all);
    for _ in 0..3 {
        let mut img = base.clone();
        let mut rev = pending.clone();
        rev.reverse();
        apply_sectors(&mut img, &rev, &mut || rng.next().is_multiple_of(2));
        out.push(img);
    }
    out
}

/// The bytes of the file at `path`, its pages then dropped from the kernel's cache: a
/// read leaves the device's never-written ranges cached (as zeros), which a fill then
/// takes for data and leaves alone.
fn read_uncached(path: &std::path::Path) -> Vec<u8> {
    use std::os::fd::AsRawFd;
    let bytes = std::fs::read(path).unwrap();
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: posix_fadvise only reads its arguments; `f` is open for the call.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0, "posix_fadvise");
    bytes
}

/// Bytes of zeros written to the device in pieces of at least 64 KiB among `events`:
/// a commit's fill of a device step ([`lynxfs::pmem::device::Device::settle`]; the
/// data path writes zeros a block or a file's gap at a time).
fn filled_bytes(events: &[Event]) -> u64 {
    events
        .iter()
        .filter_map(|e| match e {
            Event::DeviceWrite { bytes, .. }
                if bytes.len() >= 64 << 10 && bytes.iter().all(|&b| b == 0) =>
            {
                Some(bytes.len() as u64)
            }
            _ => None,
        })
        .sum()
}

/// What [`judge`] found: image pairs judged, violations, and bytes of zeros a commit's
/// fill of the device wrote during the op.
struct Judged {
    images: usize,
    bad: Vec<String>,
    filled: u64,
}

/// Run `case` on a fresh hybrid pool and judge every crash image. The pool's first
/// commit (before the op) wrote "/f" into a device step just reserved, so a commit of
/// the op fills the rest of that step: the crash images then hold those zeros lost,
/// torn or written around the op's data.
fn judge(case: &Case) -> Judged {
    let p = crash_pair_in(case.mode);
    let old = pattern(OLD_LEN, 1);
    let rec = RecordingBackend::new();
    let fs = Fs::new(Pool::open(&p.pool, Access::ReadWrite, rec.clone()).unwrap());
    write_synced(&fs, "/f", &old);
    let fd = fs
        .session(Cred::root())
        .open("/f", libc::O_RDWR, 0)
        .unwrap();
    let pm = std::fs::read(&p.pool).unwrap();
    let dev = read_uncached(&p.dev);
    rec.take();
    (case.op)(&fs, fd);
    let events = rec.take();
    let filled = filled_bytes(&events);
    let states = (case.new)(&old);
    let new = states.last().expect("a state after the op").clone();
    assert_eq!(
        read_file(&fs, "/f").unwrap(),
        new,
        "{}: the op itself",
        case.name
    );
    fs.pool().crash_in_place();
    drop(fs);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::DeviceWrite { .. })),
        "{}: nothing written to the device",
        case.name
    );
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut judged, mut bad) = (0, Vec::new());
    let points = (0..=events.len())
        .filter(|&k| k == events.len() || matches!(events[k], Event::Fence | Event::DeviceSync));
    for k in points {
        for pool_img in pool_images(&pm, &events, k) {
            for dev_img in device_images(&dev, &events, k, &mut rng) {
                judged += 1;
                std::fs::write(&p.pool, &pool_img).unwrap();
                std::fs::write(&p.dev, &dev_img).unwrap();
                let fs = match p.open() {
                    Ok(fs) => fs,
                    Err(e) => {
                        bad.push(format!("{} at event {k}: open failed: {e}", case.name));
                        continue;
                    }
                };
                let got = read_file(&fs, "/f").unwrap();
                let committed = case.synced && k == events.len();
                let fine = if committed {
                    got == new
                } else {
                    got == old
                        || states.contains(&got)
                        || (case.bytewise
                            && got.len() == old.len()
                            && got
                                .iter()
                                .zip(&old)
                                .zip(&new)
                                .all(|((g, o), n)| g == o || g == n))
                };
                if !fine {
                    bad.push(format!(
                        "{} at event {k}: /f is neither old nor new ({} bytes)",
                        case.name,
                        got.len()
                    ));
                }
                let rep = lynxfs::fsck::check(fs.pool());
                if !rep.is_clean() {
                    bad.push(format!(
                        "{} at event {k}: fsck: {:?}",
                        case.name, rep.problems
                    ));
                }
                fs.pool().crash_in_place();
            }
        }
    }
    Judged {
        images: judged,
        bad,
        filled,
    }
}

#[test]
fn crash_images_of_hybrid_writes_show_old_or_new() {
    let mut all_bad = Vec::new();
    for case in cases() {
        let Judged {
            images,
            bad,
            filled,
        } = judge(&case);
        println!(
            "{}: {images} crash images, {} violations, {filled} bytes of zeros filled",
            case.name,
            bad.len()
        );
        assert!(images > 3, "{}: too few crash points", case.name);
        // A commit in the op settles the step "/f" was written into.
        assert!(
            !case.synced || filled >= 1 << 20,
            "{}: the commit filled no device step",
            case.name
        );
        all_bad.extend(bad);
    }
    assert!(all_bad.is_empty(), "{all_bad:#?}");
}

/// Group commit under the crash checker: three threads append to files of their own and
/// fsync at once, so commits run while others write and wait for each other's flush
/// (a waiter whose writes a commit in flight covers returns with it). At every fence
/// and device flush, with the device's unflushed sectors lost, kept, torn or reordered:
/// a file whose fsync had returned shows its append, every other file old or new, and
/// fsck is clean.
#[test]
fn crash_images_of_concurrent_fsyncs_keep_every_returned_one() {
    const THREADS: usize = 3;
    const ROUNDS: usize = 2;
    let p = crash_pair_in(DataMode::Atomic);
    let rec = RecordingBackend::new();
    let fs = Fs::new(Pool::open(&p.pool, Access::ReadWrite, rec.clone()).unwrap());
    let old = pattern(OLD_LEN, 1);
    let name = |i: usize| format!("/t{i}");
    // One commit before the threads: the device step the files are in is reserved
    // and seen with holes, so the threads' first commit fills it while others write.
    for i in 0..THREADS {
        write_file(&fs, &name(i), &old);
    }
    fs.sync().unwrap();
    // The states of file `i`: old, then one append per round.
    let states = |i: usize| -> Vec<Vec<u8>> {
        let mut v = vec![old.clone()];
        for r in 0..ROUNDS {
            let last = v.last().unwrap().clone();
            v.push(overwrite(
                &last,
                last.len(),
                3000,
                (20 + i * ROUNDS + r) as u8,
            ));
        }
        v
    };
    let pm = std::fs::read(&p.pool).unwrap();
    let dev = read_uncached(&p.dev);
    rec.take();
    // A commit that never ends (a lost wake-up of the commit mutex) fails the run.
    let hang = lynxfs_test_support::watchdog(
        "crash_images_of_concurrent_fsyncs_keep_every_returned_one",
        std::time::Duration::from_secs(120),
    );
    // For each thread and round: how many events were logged once its fsync returned.
    let returned: Vec<Vec<usize>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|i| {
                let (fs, rec, want) = (&fs, &rec, states(i));
                s.spawn(move || {
                    let fd = fs
                        .session(Cred::root())
                        .open(name(i), libc::O_RDWR, 0)
                        .unwrap();
                    let mut at = Vec::new();
                    for r in 0..ROUNDS {
                        let end = want[r].len();
                        let bytes = &want[r + 1][end..];
                        assert_eq!(fs.pwrite(fd, bytes, end as u64).unwrap(), bytes.len());
                        fs.fsync(fd).unwrap();
                        at.push(rec.len());
                    }
                    fs.close_fd(fd).unwrap();
                    at
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    drop(hang);
    let events = rec.take();
    let flushes = events
        .iter()
        .filter(|e| matches!(e, Event::DeviceSync))
        .count();
    let filled = filled_bytes(&events);
    println!(
        "{} fsyncs, {flushes} device flushes, {filled} bytes of zeros filled",
        THREADS * ROUNDS
    );
    assert!(flushes <= THREADS * ROUNDS);
    assert!(filled >= 1 << 20, "no commit filled the files' device step");
    fs.pool().crash_in_place();
    drop(fs);
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let (mut judged, mut bad) = (0, Vec::new());
    let points = (0..=events.len())
        .filter(|&k| k == events.len() || matches!(events[k], Event::Fence | Event::DeviceSync));
    for k in points {
        for pool_img in pool_images(&pm, &events, k) {
            for dev_img in device_images(&dev, &events, k, &mut rng) {
                judged += 1;
                std::fs::write(&p.pool, &pool_img).unwrap();
                std::fs::write(&p.dev, &dev_img).unwrap();
                let fs = match p.open() {
                    Ok(fs) => fs,
                    Err(e) => {
                        bad.push(format!("at event {k}: open failed: {e}"));
                        continue;
                    }
                };
                for (i, at) in returned.iter().enumerate() {
                    let got = read_file(&fs, &name(i)).unwrap();
                    let states = states(i);
                    // The newest state an fsync that returned before this point made
                    // durable: the file must hold it or a later one.
                    let floor = at.iter().filter(|&&n| n <= k).count();
                    if !states[floor..].contains(&got) {
                        bad.push(format!(
                            "at event {k}: {} holds {} bytes, not a state from fsync {floor} on",
                            name(i),
                            got.len()
                        ));
                    }
                }
                let rep = lynxfs::fsck::check(fs.pool());
                if !rep.is_clean() {
                    bad.push(format!("at event {k}: fsck: {:?}", rep.problems));
                }
                fs.pool().crash_in_place();
            }
        }
    }
    println!("{judged} crash images");
    assert!(judged > 3, "too few crash points");
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The device flushes (commits) `f` makes on `fs`, whose recording is `rec`.
fn flushes_of(rec: &RecordingBackend, f: impl FnOnce()) -> usize {
    rec.take();
    f();
    rec.take()
        .iter()
        .filter(|e| matches!(e, Event::DeviceSync))
        .count()
}

/// An fsync finds its own writes: one of a file with nothing pending (data already
/// committed, a chmod, a directory, a new empty file) flushes nothing, even while
/// other files have writes pending, which a crash then rolls back; one whose writes
/// an earlier commit covered flushes nothing either; one with writes pending commits.
#[test]
fn an_fsync_flushes_only_when_its_file_has_writes_pending() {
    let p = pair();
    let rec = RecordingBackend::new();
    let fs = Fs::new(Pool::open(&p.pool, Access::ReadWrite, rec.clone()).unwrap());
    let s = fs.session(Cred::root());
    let v1 = pattern(3 * BLOCK as usize, 1);
    write_synced(&fs, "/f", &v1);
    write_file(&fs, "/pending", &pattern(2 * BLOCK as usize, 2));
    let fd = s.open("/f", libc::O_RDWR, 0).unwrap();
    s.mkdir("/d", 0o755).unwrap();
    let dfd = s.open("/d", libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    let none = flushes_of(&rec, || {
        fs.fsync(fd).unwrap();
        s.chmod("/f", 0o600).unwrap();
        fs.fsync(fd).unwrap();
        fs.fsync(dfd).unwrap();
        let e = s.create("/d/empty", 0o644).unwrap();
        fs.fsync(e).unwrap();
        fs.close_fd(e).unwrap();
    });
    assert_eq!(none, 0, "an fsync with nothing of its file pending flushed");
    // Two files written in one transaction; the first one's fsync commits both.
    let (a, b) = (pattern(BLOCK as usize, 3), pattern(BLOCK as usize, 4));
    let fa = s.create("/a", 0o644).unwrap();
    let fb = s.create("/b", 0o644).unwrap();
    fs.pwrite(fa, &a, 0).unwrap();
    fs.pwrite(fb, &b, 0).unwrap();
    assert_eq!(flushes_of(&rec, || fs.fsync(fa).unwrap()), 1);
    fs.pwrite(fd, &v1[..100], 0).unwrap();
    assert_eq!(
        flushes_of(&rec, || fs.fsync(fb).unwrap()),
        0,
        "/b's write was committed with /a's"
    );
    assert_eq!(flushes_of(&rec, || fs.fsync(fd).unwrap()), 1);
    fs.pwrite(fd, &pattern(100, 5), 0).unwrap();
    write_file(&fs, "/late", &pattern(BLOCK as usize, 6));
    for h in [fd, dfd, fa, fb] {
        fs.close_fd(h).unwrap();
    }
    drop(s);
    fs.pool().crash_in_place();
    drop(fs);
    let fs = p.open().unwrap();
    assert!(lynxfs::fsck::check(fs.pool()).is_clean());
    let s = fs.session(Cred::root());
    assert_eq!(read_file(&fs, "/f").unwrap(), v1, "/f as last fsync'd");
    assert_eq!(s.stat("/f").unwrap().mode & 0o7777, 0o600);
    assert_eq!(read_file(&fs, "/d/empty").unwrap(), b"");
    assert_eq!(
        read_file(&fs, "/pending").unwrap(),
        pattern(2 * BLOCK as usize, 2),
        "committed with /a's write"
    );
    assert_eq!(read_file(&fs, "/late").unwrap(), b"", "never committed");
    assert_eq!(read_file(&fs, "/a").unwrap(), a);
    assert_eq!(read_file(&fs, "/b").unwrap(), b);
}

/// Overwrite `data` over "/f" (open `fd`) from 0, growing it.
fn rewrite(fs: &Fs<PmemBackend>, name: &str, data: &[u8], sync: bool) {
    let fd = fs
        .session(Cred::root())
        .open(name, libc::O_RDWR, 0)
        .unwrap();
    assert_eq!(fs.pwrite(fd, data, 0).unwrap(), data.len());
    if sync {
        fs.fsync(fd).unwrap();
    }
    fs.close_fd(fd).unwrap();
}

/// Crash `fs` (nothing saved, nothing committed) and open the pair again.
fn crash_and_reopen(p: &Pair, fs: Fs<PmemBackend>) -> Fs<PmemBackend> {
    fs.pool().crash_in_place();
    drop(fs);
    let fs = p.open().unwrap();
    assert!(!fs.pool().was_clean);
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(rep.is_clean(), "{:?}", rep.problems);
    fs
}

#[test]
fn a_crash_before_the_commit_rolls_back_and_a_commit_keeps() {
    let p = pair();
    let v1 = pattern(3 * BLOCK as usize + 100, 1);
    let v2 = pattern(5 * BLOCK as usize + 7, 2);
    let fs = p.open().unwrap();
    write_synced(&fs, "/f", &v1);
    // Written (in the page cache, so on the device file too) but not committed: the
    // file goes back to its last committed map and size.
    rewrite(&fs, "/f", &v2, false);
    assert_eq!(read_file(&fs, "/f").unwrap(), v2);
    let fs = crash_and_reopen(&p, fs);
    assert_eq!(read_file(&fs, "/f").unwrap(), v1);
    // Committed by fsync: kept.
    rewrite(&fs, "/f", &v2, true);
    let fs = crash_and_reopen(&p, fs);
    assert_eq!(read_file(&fs, "/f").unwrap(), v2);
    // An O_DSYNC write is durable when it returns.
    let fd = fs
        .session(Cred::root())
        .open("/f", libc::O_RDWR | libc::O_DSYNC, 0)
        .unwrap();
    fs.pwrite(fd, &v1, 0).unwrap();
    let mut v3 = v2.clone();
    v3[..v1.len()].copy_from_slice(&v1);
    let fs = crash_and_reopen(&p, fs);
    assert_eq!(read_file(&fs, "/f").unwrap(), v3);
    // A file created and written without a commit stays (its name is durable), empty.
    write_file(&fs, "/new", &v1);
    let fs = crash_and_reopen(&p, fs);
    assert_eq!(read_file(&fs, "/new").unwrap(), b"");
    // Write a temporary file, rename it over the old one (no fsync): the rename
    // commits the data first (auto_da_alloc), never an empty file after a crash.
    write_file(&fs, "/f.tmp", &v1);
    fs.session(Cred::root()).rename("/f.tmp", "/f", 0).unwrap();
    let fs = crash_and_reopen(&p, fs);
    assert_eq!(read_file(&fs, "/f").unwrap(), v1);
    // A clean close commits.
    rewrite(&fs, "/f", &v2, false);
    fs.close().unwrap();
    drop(fs);
    let fs = p.open().unwrap();
    assert!(fs.pool().was_clean);
    assert_eq!(read_file(&fs, "/f").unwrap(), v2);
}

#[test]
fn blocks_an_uncommitted_original_names_are_not_reused_before_the_commit() {
    let p = pair();
    let fs = p.open().unwrap();
    write_synced(&fs, "/f", &pattern(4 * BLOCK as usize, 3));
    let free = || fs.pool().alloc.data_blocks().free_count();
    let before = free();
    // Copy-on-write overwrites: fresh blocks in, the old ones held back.
    rewrite(&fs, "/f", &pattern(4 * BLOCK as usize, 4), false);
    assert_eq!(
        free(),
        before - 4,
        "the replaced blocks were given back early"
    );
    fs.sync().unwrap();
    assert_eq!(free(), before, "the commit gives them back");
}

#[test]
fn a_one_block_overwrite_in_a_tree_leaf_is_rolled_back_too() {
    let p = pair();
    let fs = p.open().unwrap();
    let fd = fs
        .session(Cred::root())
        .open("/f", libc::O_RDWR | libc::O_CREAT, 0o644)
        .unwrap();
    // Every other block: more extents than the inode holds, so the map is a tree and
    // each written block an extent of its own in a leaf.
    for i in 0..12u64 {
        fs.pwrite(fd, &pattern(BLOCK as usize, i as u8), 2 * i * BLOCK)
            .unwrap();
    }
    fs.fsync(fd).unwrap();
    let old = {
        let mut b = vec![0u8; BLOCK as usize];
        fs.pread(fd, &mut b, 4 * BLOCK).unwrap();
        b
    };
    fs.pwrite(fd, &pattern(BLOCK as usize, 99), 4 * BLOCK)
        .unwrap();
    fs.close_fd(fd).unwrap();
    let fs = crash_and_reopen(&p, fs);
    let got = read_file(&fs, "/f").unwrap();
    assert!(
        got[4 * BLOCK as usize..5 * BLOCK as usize] == old[..],
        "block 4 does not hold its committed bytes"
    );
}

#[test]
fn a_crash_during_the_rollback_rolls_back_again() {
    let p = pair();
    let v1 = pattern(2 * BLOCK as usize + 10, 5);
    {
        let fs = p.open().unwrap();
        write_synced(&fs, "/f", &v1);
        rewrite(&fs, "/f", &pattern(6 * BLOCK as usize, 6), false);
        write_file(&fs, "/g", &pattern(3 * BLOCK as usize, 7));
        fs.pool().crash_in_place();
    }
    let crashed = std::fs::read(&p.pool).unwrap();
    // The recovery that rolls back, recorded store by store.
    let rec = RecordingBackend::new();
    let pool = Pool::open(&p.pool, Access::ReadWrite, rec.clone()).unwrap();
    let events = rec.take();
    pool.crash_in_place();
    drop(pool);
    let fences: Vec<usize> = (0..=events.len())
        .filter(|&k| k == events.len() || matches!(events[k], Event::Fence))
        .collect();
    assert!(fences.len() > 2, "too few crash points");
    for k in fences {
        for img in pool_images(&crashed, &events, k) {
            std::fs::write(&p.pool, &img).unwrap();
            let fs = p.open().unwrap();
            assert_eq!(read_file(&fs, "/f").unwrap(), v1, "crash at event {k}");
            assert_eq!(read_file(&fs, "/g").unwrap(), b"", "crash at event {k}");
            let rep = lynxfs::fsck::check(fs.pool());
            assert!(rep.is_clean(), "crash at event {k}: {:?}", rep.problems);
            fs.pool().crash_in_place();
        }
    }
}

/// Child mode of [`a_commit_by_one_process_covers_another_processs_writes`]: write
/// "/b" in the pool named here (no commit), say so, and die without a close when
/// stdin closes.
const CHILD_POOL_ENV: &str = "LYNXFS_HYBRID_CHILD_POOL";

#[test]
fn hybrid_writer_child() {
    let Ok(pool) = std::env::var(CHILD_POOL_ENV) else {
        return;
    };
    let fs = Fs::new(Pool::open(pool.as_ref(), Access::ReadWrite, PmemBackend::default()).unwrap());
    write_file(&fs, "/b", &pattern(3 * BLOCK as usize, 8));
    println!("written");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    // SAFETY: _exit ends the process at once: nothing is closed or committed.
    unsafe { libc::_exit(0) };
}

/// Run [`hybrid_writer_child`] on `p` until it has written.
fn spawn_writer(p: &Pair) -> std::process::Child {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hybrid_writer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_POOL_ENV, &p.pool)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines() {
            if l.is_ok_and(|l| l.contains("written")) {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(std::time::Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        panic!("the child did not write");
    }
    child
}

#[test]
fn a_commit_by_one_process_covers_another_processs_writes() {
    let p = pair();
    let data = pattern(3 * BLOCK as usize, 8);
    for commit in [false, true] {
        let fs = p.open().unwrap();
        write_file(&fs, "/a", &pattern(BLOCK as usize + 5, 9));
        let mut child = spawn_writer(&p);
        if commit {
            fs.sync().unwrap();
        }
        fs.pool().crash_in_place();
        drop(fs);
        drop(child.stdin.take());
        child.wait().unwrap();
        let fs = p.open().unwrap();
        let (a, b) = (read_file(&fs, "/a").unwrap(), read_file(&fs, "/b").unwrap());
        if commit {
            assert_eq!(a, pattern(BLOCK as usize + 5, 9));
            assert_eq!(b, data, "the other process's write was not committed");
        } else {
            assert_eq!((a, b), (Vec::new(), Vec::new()), "nothing committed");
        }
        assert!(lynxfs::fsck::check(fs.pool()).is_clean());
        fs.session(Cred::root()).unlink("/a").unwrap();
        fs.session(Cred::root()).unlink("/b").unwrap();
        fs.close().unwrap();
    }
}
