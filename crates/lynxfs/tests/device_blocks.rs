//! A hybrid pool's device blocks: numbered and allocated on their own, so a small pool
//! serves a large disk (docs/FORMAT.md, section 17).
//!
//! Covered: a 32 MiB pool whose 512 MiB device takes 256 MiB of file data (more than
//! the pool's own blocks), across a clean close (the saved device bitmap) and a crash
//! (the recovery walk rebuilds it), fsck without leaks; a full device gives ENOSPC
//! while the pool still takes metadata (and a symlink's target, in the pool, goes back
//! there when it is removed); fsck finds a leaked device block; export and
//! import keep the numbering; mkfs refuses a device too small and a pool too small for
//! its device's bitmap.
//!
//! Run: `cargo test -p lynxfs --profile ci --test engine device_blocks::`.

use std::path::{Path, PathBuf};

use lynxfs::pmem::{Backend, PmemBackend};
use lynxfs::pool::export::{export_hybrid, DataDevice, IfStale};
use lynxfs::{Cred, Error, Fs, MkfsOptions, Pool};

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 4096;

/// A pool in /dev/shm and its device on the disk, removed at the end.
struct Pair {
    _shm: tempfile::TempDir,
    disk: tempfile::TempDir,
    pool: PathBuf,
    dev: PathBuf,
}

fn pair(pool_size: u64, device_size: u64) -> Pair {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let disk = tempfile::tempdir().unwrap();
    let pool = shm.path().join("pool");
    let dev = disk.path().join("data.dev");
    let mut o = MkfsOptions::new(pool_size);
    o.lanes = 2;
    o.reserved_percent = 0;
    o.data_device = Some(dev.clone());
    o.device_size = Some(device_size);
    Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs of a hybrid pool");
    Pair {
        _shm: shm,
        disk,
        pool,
        dev,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 12) as u8)
        .collect()
}

/// Writes `chunks` pieces of `chunk` bytes to `name`; stops at the first error.
fn fill<B: Backend>(
    fs: &Fs<B>,
    name: &str,
    chunk: usize,
    chunks: usize,
    seed: u8,
) -> lynxfs::Result<()> {
    let fd = fs.session(Cred::root()).create(name, 0o644)?;
    let piece = pattern(chunk, seed);
    let mut r = Ok(());
    for i in 0..chunks {
        if let Err(e) = fs.pwrite(fd, &piece, (i * chunk) as u64) {
            r = Err(e);
            break;
        }
    }
    fs.close_fd(fd)?;
    r
}

/// Checks the first and last piece of a file `fill` wrote.
fn check<B: Backend>(fs: &Fs<B>, name: &str, chunk: usize, chunks: usize, seed: u8) {
    let fd = fs
        .session(Cred::root())
        .open(name, libc::O_RDONLY, 0)
        .unwrap();
    assert_eq!(
        fs.fstat(fd).unwrap().size,
        (chunk * chunks) as u64,
        "{name}"
    );
    let want = pattern(chunk, seed);
    let mut buf = vec![0u8; chunk];
    for i in [0, chunks / 2, chunks - 1] {
        assert_eq!(fs.pread(fd, &mut buf, (i * chunk) as u64).unwrap(), chunk);
        assert!(buf == want, "{name}: piece {i} differs");
    }
    fs.close_fd(fd).unwrap();
}

fn device_free<B: Backend>(fs: &Fs<B>) -> u64 {
    fs.pool()
        .alloc
        .device_blocks()
        .expect("a hybrid pool")
        .free_count()
}

fn fsck_clean<B: Backend>(fs: &Fs<B>) {
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(rep.is_clean(), "{:?}", rep.problems);
}

const CHUNK: usize = 4 << 20;
const FILES: usize = 8;
/// 8 files of 32 MiB: 256 MiB.
const PER_FILE: usize = 8;

#[test]
fn a_small_pool_holds_more_file_data_than_its_own_blocks() {
    let p = pair(32 * MIB, 512 * MIB);
    let fs = Fs::<PmemBackend>::open(&p.pool).unwrap();
    let l = fs.pool().layout;
    let data = (FILES * PER_FILE * CHUNK) as u64;
    assert!(l.data_blocks * BLOCK < data, "the pool alone could hold it");
    assert_eq!(l.geo.device_blocks, (512 * MIB - MIB - 32 * MIB) / BLOCK);
    let st = fs.ns().statfs();
    assert_eq!(
        st.blocks, l.geo.device_blocks,
        "statfs: the device's capacity"
    );
    for f in 0..FILES {
        fill(&fs, &format!("/f{f}"), CHUNK, PER_FILE, f as u8).unwrap();
    }
    // Blocks the writes replaced (preallocation trimmed, copies written over) come
    // back at the commit, not before (docs/CONSISTENCY.md, "Frees wait for the
    // commit"); fsck counts them as held meanwhile.
    fsck_clean(&fs);
    fs.sync().unwrap();
    let used = l.geo.device_blocks - device_free(&fs);
    assert_eq!(used, data / BLOCK);
    assert_eq!(fs.ns().statfs().blocks_free, device_free(&fs));
    fsck_clean(&fs);
    let rep = lynxfs::fsck::check(fs.pool());
    assert_eq!(rep.device_blocks, used);
    // A file removed gives its device blocks back.
    fs.session(Cred::root()).unlink("/f0").unwrap();
    let used = used - (PER_FILE * CHUNK) as u64 / BLOCK;
    assert_eq!(l.geo.device_blocks - device_free(&fs), used);
    fs.close().unwrap();
    drop(fs);

    // A clean close saved the device bitmap: loaded, not walked.
    let fs = Fs::<PmemBackend>::open(&p.pool).unwrap();
    assert!(fs.pool().was_clean);
    assert_eq!(l.geo.device_blocks - device_free(&fs), used);
    for f in 1..FILES {
        check(&fs, &format!("/f{f}"), CHUNK, PER_FILE, f as u8);
    }
    fsck_clean(&fs);
    fill(&fs, "/after", CHUNK, 2, 99).unwrap();
    let used = used + 2 * CHUNK as u64 / BLOCK;
    // Committed, so the crash keeps it (an uncommitted write would be rolled back).
    fs.sync().unwrap();
    fs.pool().crash_in_place();
    drop(fs);

    // A crash: the recovery walk rebuilds the device allocator.
    let fs = Fs::<PmemBackend>::open(&p.pool).unwrap();
    assert!(!fs.pool().was_clean);
    assert_eq!(l.geo.device_blocks - device_free(&fs), used);
    check(&fs, "/after", CHUNK, 2, 99);
    check(&fs, "/f7", CHUNK, PER_FILE, 7);
    fsck_clean(&fs);
}

#[test]
fn a_full_device_gives_enospc_while_the_pool_has_room() {
    // 2 MiB of data blocks (512) on the device, a pool of 16 MiB.
    let p = pair(16 * MIB, MIB + 16 * MIB + 2 * MIB);
    let fs = Fs::<PmemBackend>::open(&p.pool).unwrap();
    assert_eq!(fs.pool().layout.geo.device_blocks, 512);
    let e = fill(&fs, "/big", 1 << 20, 3, 1).unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC);
    assert!(device_free(&fs) < 256, "the device is (nearly) full");
    let pool_free = fs.pool().alloc.blocks.free_count();
    assert!(pool_free > 1000, "the pool has room: {pool_free} blocks");
    let st = fs.ns().statfs();
    assert_eq!((st.blocks, st.blocks_free), (512, device_free(&fs)));
    // Metadata still goes into the pool: files, directories, symlinks.
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    for i in 0..50 {
        let fd = s.create(format!("/d/empty{i}"), 0o644).unwrap();
        fs.close_fd(fd).unwrap();
    }
    s.symlink("/d/empty0", "/link").unwrap();
    drop(s);
    fsck_clean(&fs);
    // Freed device blocks serve writes again; a symlink's target goes back to the
    // pool's blocks, not the device's.
    let meta_free = fs.pool().alloc.blocks.free_count();
    fs.session(Cred::root()).unlink("/link").unwrap();
    assert_eq!(fs.pool().alloc.blocks.free_count(), meta_free + 1);
    fs.session(Cred::root()).unlink("/big").unwrap();
    assert_eq!(device_free(&fs), 512);
    fill(&fs, "/again", 1 << 20, 1, 2).unwrap();
    fsck_clean(&fs);
}

#[test]
fn fsck_finds_a_leaked_device_block() {
    let p = pair(16 * MIB, 64 * MIB);
    let fs = Fs::<PmemBackend>::open(&p.pool).unwrap();
    fill(&fs, "/f", 1 << 20, 1, 3).unwrap();
    fsck_clean(&fs);
    let taken = fs.pool().alloc.data_blocks().alloc(0, 3).unwrap();
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(
        rep.problems
            .iter()
            .any(|p| p.contains("3 device block(s) are marked used but nothing reaches them")),
        "{:?}",
        rep.problems
    );
    for (s, n) in taken {
        fs.pool().alloc.data_blocks().free(s, n);
    }
    fsck_clean(&fs);
}

#[test]
fn export_and_import_keep_the_device_numbering() {
    let p = pair(16 * MIB, 256 * MIB);
    {
        let fs = Fs::<PmemBackend>::open(&p.pool).unwrap();
        // More file data than the pool's own blocks.
        for f in 0..5 {
            fill(&fs, &format!("/f{f}"), CHUNK, 1, f as u8).unwrap();
        }
        fs.session(Cred::root()).symlink("/f1", "/link").unwrap();
        fs.close().unwrap();
    }
    export_hybrid(&p.pool, PmemBackend::default()).unwrap();
    std::fs::remove_file(&p.pool).unwrap();
    let new_pool = p.disk.path().join("imported");
    DataDevice::open(&p.dev)
        .unwrap()
        .import(&new_pool, IfStale::Refuse)
        .unwrap();
    let fs = Fs::<PmemBackend>::open(&new_pool).unwrap();
    assert!(fs.pool().layout.data_blocks * BLOCK < 5 * CHUNK as u64);
    for f in 0..5 {
        check(&fs, &format!("/f{f}"), CHUNK, 1, f as u8);
    }
    assert_eq!(
        fs.pool().layout.geo.device_blocks - device_free(&fs),
        5 * CHUNK as u64 / BLOCK
    );
    fsck_clean(&fs);
    // It takes new data where nothing is.
    fill(&fs, "/new", CHUNK, 1, 9).unwrap();
    check(&fs, "/f4", CHUNK, 1, 4);
    fsck_clean(&fs);
}

fn mkfs_error(pool_size: u64, device_size: u64, dir: &Path) -> Error {
    let mut o = MkfsOptions::new(pool_size);
    o.lanes = 2;
    o.data_device = Some(dir.join("dev"));
    o.device_size = Some(device_size);
    let pool = dir.join("pool");
    let e = Pool::mkfs(&pool, &o, PmemBackend::default()).unwrap_err();
    assert!(
        !pool.exists() && !dir.join("dev").exists(),
        "a refused mkfs made something"
    );
    e
}

#[test]
fn mkfs_refuses_a_device_too_small_or_a_pool_too_small_for_its_bitmap() {
    let dir = tempfile::tempdir().unwrap();
    // Header and export area, and fewer than 16 blocks per lane.
    let e = mkfs_error(16 * MIB, MIB + 16 * MIB + 31 * BLOCK, dir.path());
    assert!(matches!(e, Error::Device { .. }), "{e:?}");
    assert!(e.to_string().contains("too small"), "{e}");
    // 1 TiB of device blocks need a 32 MiB bitmap: not in a 4 MiB pool.
    let e = mkfs_error(4 * MIB, 1 << 40, dir.path());
    assert!(e.to_string().contains("bitmap of a data device of"), "{e}");
    // A device size without a device.
    let mut o = MkfsOptions::new(16 * MIB);
    o.device_size = Some(64 * MIB);
    assert!(Pool::mkfs(&dir.path().join("p"), &o, PmemBackend::default()).is_err());
}

#[test]
fn a_hybrid_pool_of_the_earlier_format_is_refused() {
    use lynxfs::format::superblock::{INCOMPAT_DEVICE_BLOCKS, SB_LEN};
    use lynxfs::format::{Geometry, Layout, Superblock};
    use std::os::unix::fs::FileExt;
    // A device small enough that its bitmap fits the saved state's padding: without
    // the count, the regions are where they were.
    let p = pair(16 * MIB, 64 * MIB);
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&p.pool)
        .unwrap();
    for off in [0, BLOCK] {
        let mut b = [0u8; SB_LEN];
        f.read_exact_at(&mut b, off).unwrap();
        let mut sb = Superblock::decode(&b).unwrap();
        sb.incompat &= !INCOMPAT_DEVICE_BLOCKS;
        sb.geo = Geometry {
            device_blocks: 0,
            ..sb.geo
        };
        let old = Layout::compute(sb.geo).unwrap();
        assert_eq!(old.state_len, sb.layout.state_len, "the regions moved");
        sb.layout = old;
        f.write_all_at(&sb.encode(), off).unwrap();
    }
    match Fs::<PmemBackend>::open(&p.pool) {
        Ok(_) => panic!("a hybrid pool without a device block count opened"),
        Err(e) => assert!(e.to_string().contains("earlier format"), "{e}"),
    }
}
