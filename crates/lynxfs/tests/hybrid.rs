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
//! Run: `cargo test -p lynxfs --profile ci --test hybrid`.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use lynxfs::format::device::{DeviceHeader, HEADER_LEN};
use lynxfs::pmem::device::Fault;
use lynxfs::pmem::PmemBackend;
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
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let disk = tempfile::tempdir().unwrap();
    let pool = shm.path().join("pool");
    let dev = disk.path().join("data.dev");
    let mut o = MkfsOptions::new(16 << 20);
    o.lanes = 2;
    o.data = data;
    o.data_device = Some(dev.clone());
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

fn write_file(fs: &Fs<PmemBackend>, name: &str, data: &[u8]) {
    let fd = fs.session(Cred::root()).create(name, 0o644).unwrap();
    assert_eq!(fs.pwrite(fd, data, 0).unwrap(), data.len());
    fs.close_fd(fd).unwrap();
}

fn read_file(fs: &Fs<PmemBackend>, name: &str) -> lynxfs::Result<Vec<u8>> {
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
fn a_failing_device_gives_eio_and_changes_nothing() {
    let p = pair();
    let fs = p.open().unwrap();
    let old = pattern(2 * BLOCK as usize, 9);
    write_file(&fs, "/f", &old);
    let free = fs.pool().alloc.blocks.free_count();
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
    assert_eq!(fs.ftruncate(fd, 20 * BLOCK).unwrap_err().errno(), libc::EIO);
    assert_eq!(fs.pool().alloc.blocks.free_count(), free, "blocks leaked");
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
