//! The pool's life cycle and every kind of bad pool file.

use std::path::{Path, PathBuf};

use lynxfs::pmem::PmemBackend;
use lynxfs::{Access, Error, MkfsOptions, Pool};

fn opts(size: u64) -> MkfsOptions {
    let mut o = MkfsOptions::new(size);
    o.lanes = 2;
    o
}

fn pool_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("pool")
}

fn open(path: &Path) -> lynxfs::Result<Pool<PmemBackend>> {
    Pool::open(path, Access::ReadWrite, PmemBackend::default())
}

fn contents(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn mkfs_then_reopen_keeps_state() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    Pool::mkfs(&p, &opts(8 << 20), PmemBackend::default()).unwrap();
    let pool = open(&p).unwrap();
    assert!(pool.was_clean);
    assert!(pool.recovery.is_none());
    let epoch = pool.epoch;
    let free = pool.alloc.blocks.free_count();
    let runs = pool.alloc.blocks.alloc(0, 10).unwrap();
    assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), 10);
    pool.close().unwrap();
    drop(pool);
    let pool = open(&p).unwrap();
    assert!(pool.was_clean, "a closed pool reopens clean");
    assert!(pool.epoch > epoch, "each open starts a new epoch");
    assert_eq!(
        pool.alloc.blocks.free_count(),
        free - 10,
        "allocator state saved at close"
    );
}

#[test]
fn unclean_close_runs_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    Pool::mkfs(&p, &opts(8 << 20), PmemBackend::default()).unwrap();
    let pool = open(&p).unwrap();
    let free = pool.alloc.blocks.free_count();
    pool.alloc.blocks.alloc(1, 7).unwrap(); // leaked by the "crash"
    pool.crash();
    let pool = open(&p).unwrap();
    assert!(!pool.was_clean);
    let rep = pool.recovery.as_ref().expect("recovery ran");
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(
        pool.alloc.blocks.free_count(),
        free,
        "leaked blocks come back"
    );
}

#[test]
fn allocator_exhaustion_is_enospc_and_pool_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    Pool::mkfs(&p, &opts(4 << 20), PmemBackend::default()).unwrap();
    let pool = open(&p).unwrap();
    let total = pool.alloc.blocks.free_count();
    assert!(pool.alloc.blocks.alloc(0, total + 1).is_none());
    assert_eq!(
        pool.alloc.blocks.free_count(),
        total,
        "a failed request takes nothing"
    );
    let all = pool.alloc.blocks.alloc(0, total).unwrap();
    assert!(pool.alloc.blocks.alloc(1, 1).is_none());
    let mut inodes = Vec::new();
    while let Some(i) = pool.alloc.inodes.alloc(0) {
        inodes.push(i);
    }
    assert!(pool.alloc.inodes.alloc(1).is_none());
    for (s, n) in all {
        pool.alloc.blocks.free(s, n);
    }
    for i in inodes {
        pool.alloc.inodes.free(i);
    }
    assert!(pool.alloc.blocks.alloc(1, 1).is_some());
    pool.close().unwrap();
    drop(pool);
    assert!(open(&p).is_ok());
}

#[test]
fn second_open_is_refused_while_held() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    Pool::mkfs(&p, &opts(4 << 20), PmemBackend::default()).unwrap();
    let first = open(&p).unwrap();
    match open(&p) {
        Err(Error::Locked { path }) => assert_eq!(path, p),
        other => panic!("expected Locked, got {:?}", other.map(|_| ())),
    }
    assert!(matches!(
        Pool::open(&p, Access::ReadOnly, PmemBackend::default()),
        Err(Error::Locked { .. })
    ));
    drop(first);
    assert!(open(&p).is_ok(), "the lock goes with the pool");
}

#[test]
fn mkfs_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    std::fs::write(&p, b"precious").unwrap();
    assert!(matches!(
        Pool::mkfs(&p, &opts(4 << 20), PmemBackend::default()),
        Err(Error::Exists { .. })
    ));
    assert_eq!(contents(&p), b"precious");
    let mut o = opts(4 << 20);
    o.force = true;
    Pool::mkfs(&p, &o, PmemBackend::default()).unwrap();
    assert!(open(&p).is_ok());
}

#[test]
fn mkfs_rejects_impossible_geometry() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    assert!(matches!(
        Pool::mkfs(&p, &opts(4096), PmemBackend::default()),
        Err(Error::Invalid(_))
    ));
    let mut o = opts(2 << 20);
    o.inodes = Some(1 << 40);
    assert!(matches!(
        Pool::mkfs(&p, &o, PmemBackend::default()),
        Err(Error::Invalid(_))
    ));
    assert!(!p.exists(), "a refused mkfs creates nothing");
}

/// Open must refuse `bytes` with an error naming the file, and leave it untouched.
fn refused(bytes: &[u8], check: impl Fn(&Error) -> bool) {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    std::fs::write(&p, bytes).unwrap();
    let err = match open(&p) {
        Ok(_) => panic!("bad pool accepted"),
        Err(e) => e,
    };
    assert!(check(&err), "unexpected error: {err}");
    assert!(
        err.to_string().contains(p.to_str().unwrap()),
        "error does not name the file: {err}"
    );
    assert_eq!(contents(&p), bytes, "a refused pool must be left untouched");
}

fn good_image() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    Pool::mkfs(&p, &opts(4 << 20), PmemBackend::default()).unwrap();
    contents(&p)
}

#[test]
fn missing_pool_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    let err = open(&p).err().unwrap();
    assert!(matches!(err, Error::Missing { .. }));
    assert!(err.to_string().contains("lynxfs mkfs"));
    assert!(!p.exists());
}

#[test]
fn empty_and_tiny_files_are_too_small() {
    refused(b"", |e| matches!(e, Error::TooSmall { .. }));
    refused(&[0u8; 100], |e| matches!(e, Error::TooSmall { .. }));
}

#[test]
fn foreign_file_is_refused() {
    let junk: Vec<u8> = (0..(2u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    refused(&junk, |e| matches!(e, Error::Foreign { .. }));
    refused(&vec![0u8; 2 << 20], |e| matches!(e, Error::Foreign { .. }));
}

#[test]
fn truncated_pool_is_refused() {
    let img = good_image();
    refused(&img[..img.len() / 2], |e| {
        matches!(e, Error::Truncated { .. })
    });
    refused(&img[..8192], |e| matches!(e, Error::Truncated { .. }));
    // Cut inside the second superblock: copy A still says how big the pool is.
    refused(&img[..4200], |e| matches!(e, Error::Truncated { .. }));
}

#[test]
fn both_superblocks_corrupt_is_refused() {
    let mut img = good_image();
    img[40] ^= 0x01;
    img[4096 + 40] ^= 0x80;
    refused(&img, |e| matches!(e, Error::Corrupt { .. }));
}

#[test]
fn unknown_version_is_refused() {
    let mut img = good_image();
    for base in [0usize, 4096] {
        img[base + 8] = 99;
        let crc = crc32c::crc32c(&img[base..base + 252]);
        img[base + 252..base + 256].copy_from_slice(&crc.to_le_bytes());
    }
    refused(&img, |e| matches!(e, Error::Version { found: 99, .. }));
}

#[test]
fn one_damaged_superblock_falls_back_to_the_other() {
    for damaged in [0usize, 4096] {
        let mut img = good_image();
        img[damaged + 30] ^= 0xff;
        let dir = tempfile::tempdir().unwrap();
        let p = pool_path(&dir);
        std::fs::write(&p, &img).unwrap();
        let pool = open(&p).expect("the intact copy is used");
        assert!(pool.was_clean);
        drop(pool);
        assert!(open(&p).is_ok());
    }
}

#[test]
fn bad_bytes_in_superblock_never_panic() {
    let img = good_image();
    // Every byte of both copies, set to a few values: refused or opened, never a panic.
    for base in [0usize, 4096] {
        for off in (0..256).step_by(3) {
            for v in [0u8, 0xff, 0x41] {
                let mut bad = img.clone();
                bad[base + off] = v;
                let dir = tempfile::tempdir().unwrap();
                let p = pool_path(&dir);
                std::fs::write(&p, &bad).unwrap();
                let _ = open(&p);
            }
        }
    }
}

#[test]
fn read_only_open_leaves_the_file_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    Pool::mkfs(&p, &opts(4 << 20), PmemBackend::default()).unwrap();
    let pool = open(&p).unwrap();
    pool.crash(); // leave it unclean, so a read-only open runs recovery in memory
    let before = contents(&p);
    let ro = Pool::open(&p, Access::ReadOnly, PmemBackend::default()).unwrap();
    assert!(!ro.was_clean);
    drop(ro);
    assert_eq!(contents(&p), before);
}

/// Records what recovery and fsck report: (phase, total, units advanced).
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<(&'static str, Option<u64>, u64)>>);

impl lynxfs::Progress for Recorder {
    fn phase(&self, what: &'static str, total: Option<u64>) {
        self.0.lock().unwrap().push((what, total, 0));
    }
    fn advance(&self, n: u64) {
        self.0.lock().unwrap().last_mut().expect("a phase first").2 += n;
    }
}

impl Recorder {
    fn done(&self, phase: &str) -> (Option<u64>, u64) {
        let phases = self.0.lock().unwrap();
        let p = phases.iter().find(|p| p.0.starts_with(phase));
        let p = p.unwrap_or_else(|| panic!("no phase {phase:?} in {:?}", *phases));
        (p.1, p.2)
    }
}

#[test]
fn recovery_and_fsck_report_their_progress() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool_path(&dir);
    Pool::mkfs(&p, &opts(16 << 20), PmemBackend::default()).unwrap();
    let fs = lynxfs::Fs::open(&p).unwrap();
    let s = fs.session(lynxfs::Cred::root());
    s.mkdir("d", 0o755).unwrap();
    for i in 0..50 {
        s.mknod(&format!("d/f{i}"), libc::S_IFREG | 0o644, 0)
            .unwrap();
    }
    drop(s);
    fs.pool().crash_in_place();
    drop(fs);

    let rec = Recorder::default();
    let pool =
        Pool::open_with_progress(&p, Access::ReadWrite, PmemBackend::default(), &rec).unwrap();
    assert!(pool.recovery.is_some());
    assert_eq!(rec.done("replaying journals"), (Some(2), 2));
    // Every entry the walk accepted: d and its 50 files.
    assert_eq!(rec.done("walking the namespace"), (None, 51));
    let (total, done) = rec.done("recounting links");
    assert_eq!(total, Some(done));

    let rec = Recorder::default();
    let report = lynxfs::fsck::check_with_progress(&pool, &rec);
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(rec.done("checking the namespace"), (Some(51), 51));
}
