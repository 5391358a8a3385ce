//! Exports (issue 28, "a disk that moves"): a pool's metadata written to its device's
//! export area and imported into a new pool gives the same tree, every kind of entry
//! included; an export that crashed before its commit point leaves the previous one
//! importable; a damaged or foreign export is refused with an error saying why.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use lynxfs::pmem::PmemBackend;
use lynxfs::pool::export::{export, export_hybrid, read_export, DataDevice, ExportArea, IfStale};
use lynxfs::{Access, Cred, Fs, MkfsOptions, Pool, TimeSet, Timestamp};

const POOL_SIZE: u64 = 32 << 20;
/// The area at the start of a plain file standing in for the device.
const AREA: ExportArea = ExportArea {
    start: 0,
    len: 16 << 20,
};

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let s = Setup { dir };
        Pool::mkfs(
            &s.pool(),
            &MkfsOptions::new(POOL_SIZE),
            PmemBackend::default(),
        )
        .unwrap();
        let dev = File::create(s.device_path()).unwrap();
        dev.set_len(AREA.len + (1 << 20)).unwrap();
        s
    }
    fn pool(&self) -> PathBuf {
        self.dir.path().join("pool")
    }
    fn device_path(&self) -> PathBuf {
        self.dir.path().join("device")
    }
    fn device(&self) -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.device_path())
            .unwrap()
    }
    fn export(&self) -> lynxfs::pool::export::ExportReport {
        export(
            &self.pool(),
            PmemBackend::default(),
            &self.device(),
            &self.device_path(),
            AREA,
        )
        .unwrap()
    }
    /// Imports the device's current export into a new pool file named `name`.
    fn import(&self, name: &str) -> lynxfs::Result<PathBuf> {
        let e = read_export(
            &self.device(),
            &self.device_path(),
            AREA,
            None,
            IfStale::Refuse,
        )?;
        let path = self.dir.path().join(name);
        e.import(&path)?;
        Ok(path)
    }
}

fn at(sec: i64, nsec: u32) -> Option<TimeSet> {
    Some(TimeSet::At(Timestamp { sec, nsec }))
}

/// The xattr value of an ACL with these (tag, perm, id) entries (acl(5)'s layout).
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// A tree with every kind of entry.
fn populate(pool: &Path) {
    use lynxfs::meta::acl::{GROUP, GROUP_OBJ, MASK, OTHER, USER_OBJ};
    let fs = Fs::open(pool).unwrap();
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    s.mkdir("/d/sticky", 0o1777).unwrap();
    s.chmod("/d/sticky", 0o1777).unwrap();
    let fd = s.create("/d/setuid", 0o755).unwrap();
    fs.pwrite(fd, b"#!/bin/sh\necho hi\n", 0).unwrap();
    fs.close_fd(fd).unwrap();
    s.chmod("/d/setuid", 0o4755).unwrap();
    s.chown("/d/setuid", Some(1000), Some(1000)).unwrap();
    let fd = s.create("/d/owned", 0o640).unwrap();
    fs.pwrite(fd, &[7u8; 5000], 0).unwrap();
    fs.close_fd(fd).unwrap();
    s.chown("/d/owned", Some(1000), Some(100)).unwrap();
    s.chmod("/d/owned", 0o2640).unwrap();
    let fd = s.create("/d/sparse", 0o644).unwrap();
    fs.pwrite(fd, b"start", 0).unwrap();
    fs.pwrite(fd, b"end", (8 << 20) + 3).unwrap();
    fs.close_fd(fd).unwrap();
    let fd = s.create("/d/big", 0o644).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs.pwrite(fd, &big, 0).unwrap();
    fs.close_fd(fd).unwrap();
    s.link("/d/big", "/d/big-link").unwrap();
    s.symlink("big", "/d/sym").unwrap();
    s.symlink("/nowhere/at/all", "/dangling").unwrap();
    s.mknod("/d/fifo", libc::S_IFIFO | 0o600, 0).unwrap();
    s.mknod("/d/chr", libc::S_IFCHR | 0o600, libc::makedev(1, 3))
        .unwrap();
    s.setxattr("/d/owned", "user.note", b"kept", 0).unwrap();
    s.setxattr("/d/big", "user.large", &[9u8; 3000], 0).unwrap();
    s.setxattr("/d/big", "trusted.t", b"x", 0).unwrap();
    let extended = acl(&[
        (USER_OBJ, 6, u32::MAX),
        (GROUP_OBJ, 4, u32::MAX),
        (GROUP, 6, 1000),
        (MASK, 6, u32::MAX),
        (OTHER, 0, u32::MAX),
    ]);
    s.setxattr("/d/owned", "system.posix_acl_access", &extended, 0)
        .unwrap();
    s.setxattr("/d", "system.posix_acl_default", &extended, 0)
        .unwrap();
    s.utimens(
        "/d/big",
        at(1, 999_999_999),
        at(-86_400 * 365 * 30, 123_456_789),
    )
    .unwrap();
    s.utimens("/d/sparse", at(-1, 1), at(4_000_000_000, 7))
        .unwrap();
    drop(s);
    fs.close().unwrap();
}

/// Every entry of a pool: path to (stat fields, symlink target, xattrs, data hash).
fn listing(pool: &Path) -> BTreeMap<Vec<u8>, String> {
    let fs = Fs::open(pool).unwrap();
    // Reading must not change the atimes being compared.
    fs.set_atime(lynxfs::api::Atime::Never);
    let s = fs.session(Cred::root());
    let mut out = BTreeMap::new();
    let mut dirs = vec![b"/".to_vec()];
    while let Some(dir) = dirs.pop() {
        for e in s.readdir(&dir).unwrap() {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let mut path = dir.clone();
            if path != b"/" {
                path.push(b'/');
            }
            path.extend_from_slice(&e.name);
            let st = s.lstat(&path).unwrap();
            let kind = st.mode & libc::S_IFMT;
            let mut line = format!(
                "ino {} mode {:o} nlink {} uid {} gid {} size {} blocks {} rdev {} \
                 atime {:?} mtime {:?} ctime {:?} btime {:?} flags {}",
                st.ino,
                st.mode,
                st.nlink,
                st.uid,
                st.gid,
                st.size,
                st.blocks,
                st.rdev,
                st.atime,
                st.mtime,
                st.ctime,
                st.btime,
                st.flags
            );
            if kind == libc::S_IFLNK {
                line += &format!(" -> {:?}", s.readlink(&path).unwrap());
            } else {
                let mut names = s.listxattr(&path).unwrap();
                names.sort();
                for n in names {
                    let v = s.getxattr(&path, &n).unwrap();
                    line += &format!(" xattr {:?}={:08x}", n, crc32c::crc32c(&v));
                }
            }
            if kind == libc::S_IFREG {
                let fd = s.open(&path, libc::O_RDONLY, 0).unwrap();
                let mut data = vec![0u8; st.size as usize];
                let n = fs.pread(fd, &mut data, 0).unwrap();
                fs.close_fd(fd).unwrap();
                line += &format!(" data {n} {:08x}", crc32c::crc32c(&data));
            }
            if kind == libc::S_IFDIR {
                dirs.push(path.clone());
            }
            out.insert(path, line);
        }
    }
    drop(s);
    fs.close().unwrap();
    out
}

#[test]
fn an_imported_pool_has_the_same_tree_as_the_exported_one() {
    let s = Setup::new();
    populate(&s.pool());
    let report = s.export();
    assert_eq!(report.header.generation, 1);
    assert_eq!(report.replaced, None);
    let before = listing(&s.pool());
    assert_eq!(before.len(), 11, "{before:#?}");
    let copy = s.import("imported").unwrap();
    assert_eq!(listing(&copy), before);
    // The copy is a clean pool of its own that fsck finds nothing wrong with.
    let fs = Fs::open(&copy).unwrap();
    assert!(fs.pool().was_clean);
    let found = lynxfs::fsck::check(fs.pool());
    assert!(found.problems.is_empty(), "{:?}", found.problems);
}

#[test]
fn an_export_crashed_before_its_header_leaves_the_previous_one_importable() {
    let s = Setup::new();
    populate(&s.pool());
    let first = s.export();
    let at_first = listing(&s.pool());
    {
        let fs = Fs::open(&s.pool()).unwrap();
        let r = fs.session(Cred::root());
        r.mkdir("/later", 0o700).unwrap();
        r.unlink("/d/big-link").unwrap();
        drop(r);
        fs.close().unwrap();
    }
    let second = s.export();
    assert_eq!(second.header.generation, 2);
    assert_ne!(second.header.slot, first.header.slot);
    let at_second = listing(&s.pool());
    assert_ne!(at_first, at_second);
    assert_eq!(listing(&s.import("second").unwrap()), at_second);
    // A crash before the second export's commit point: its header never written, its
    // slot half written (torn).
    let dev = s.device();
    dev.write_all_at(
        &[0u8; 4096],
        AREA.start + (second.header.generation % 2) * 4096,
    )
    .unwrap();
    let slot = AREA.start + 2 * 4096 + u64::from(second.header.slot) * AREA.slot_len();
    dev.write_all_at(&vec![0xeeu8; 1 << 20], slot + 4096)
        .unwrap();
    let e = read_export(&dev, &s.device_path(), AREA, None, IfStale::Refuse).unwrap();
    assert_eq!(e.header.generation, 1);
    assert_eq!(listing(&s.import("first").unwrap()), at_first);
    // The next export goes to the slot the surviving one does not use.
    let third = s.export();
    assert_eq!(third.header.generation, 2);
    assert_eq!(third.header.slot, second.header.slot);
    assert_eq!(listing(&s.import("third").unwrap()), at_second);
}

#[test]
fn a_torn_header_or_slot_falls_back_and_a_ruined_device_is_refused() {
    let s = Setup::new();
    populate(&s.pool());
    let first = s.export();
    let second = s.export();
    let dev = s.device();
    // A header torn at its last bytes: its checksum fails, the older copy is used.
    let h2 = AREA.start + (second.header.generation % 2) * 4096;
    dev.write_all_at(&[0xffu8; 8], h2 + 60).unwrap();
    let e = read_export(&dev, &s.device_path(), AREA, None, IfStale::Refuse).unwrap();
    assert_eq!(e.header.generation, first.header.generation);
    assert!(e.skipped.is_none());
    // The older slot damaged too (a byte of its image): nothing is usable, and the
    // error says what was found of each copy.
    let slot1 = AREA.start + 2 * 4096 + u64::from(first.header.slot) * AREA.slot_len();
    let mut b = [0u8; 1];
    dev.read_exact_at(&mut b, slot1 + 100).unwrap();
    dev.write_all_at(&[b[0] ^ 1], slot1 + 100).unwrap();
    let err = read_export(&dev, &s.device_path(), AREA, None, IfStale::Refuse)
        .expect_err("a ruined export is refused")
        .to_string();
    assert!(err.contains("no usable export"), "{err}");
    assert!(err.contains("checksum"), "{err}");
    assert!(
        err.contains(&s.device_path().display().to_string()),
        "{err}"
    );
    let path = s.dir.path().join("never");
    assert!(s.import("never").is_err());
    assert!(!path.exists());
}

#[test]
fn a_foreign_export_an_empty_area_and_an_existing_target_are_refused() {
    let s = Setup::new();
    let dev = s.device();
    let err = read_export(&dev, &s.device_path(), AREA, None, IfStale::Refuse)
        .expect_err("no export yet")
        .to_string();
    assert!(err.contains("no export header"), "{err}");
    s.export();
    let uuid = Fs::open(&s.pool()).unwrap().pool().superblock().uuid;
    let mut other = uuid;
    other[0] ^= 0xff;
    let err = read_export(&dev, &s.device_path(), AREA, Some(other), IfStale::Refuse)
        .expect_err("another pool's export")
        .to_string();
    assert!(err.contains("belongs to pool"), "{err}");
    assert!(read_export(&dev, &s.device_path(), AREA, Some(uuid), IfStale::Refuse).is_ok());
    // An existing file is never replaced by an import.
    std::fs::write(s.dir.path().join("taken"), b"mine").unwrap();
    assert!(s.import("taken").is_err());
    assert_eq!(std::fs::read(s.dir.path().join("taken")).unwrap(), b"mine");
}

#[test]
fn an_export_that_does_not_fit_changes_nothing() {
    let s = Setup::new();
    populate(&s.pool());
    let small = ExportArea {
        start: 0,
        len: 2 * 4096 + 2 * 64 * 1024,
    };
    let dev = s.device();
    let err = export(
        &s.pool(),
        PmemBackend::default(),
        &dev,
        &s.device_path(),
        small,
    )
    .expect_err("too small")
    .to_string();
    assert!(err.contains("does not fit"), "{err}");
    assert!(read_export(&dev, &s.device_path(), small, None, IfStale::Refuse).is_err());
    // The pool is unharmed and still opens.
    assert!(!listing(&s.pool()).is_empty());
}

#[test]
fn a_pool_in_use_is_not_exported() {
    let s = Setup::new();
    let fs = Fs::open(&s.pool()).unwrap();
    let err = export(
        &s.pool(),
        PmemBackend::default(),
        &s.device(),
        &s.device_path(),
        AREA,
    )
    .expect_err("in use")
    .to_string();
    assert!(err.contains("in use"), "{err}");
    drop(fs);
}

/// A hybrid pool and its data device in one directory.
fn hybrid(dir: &Path) -> (PathBuf, PathBuf) {
    let (pool, dev) = (dir.join("hpool"), dir.join("hdev"));
    let mut opts = MkfsOptions::new(POOL_SIZE);
    opts.data_device = Some(dev.clone());
    Pool::mkfs(&pool, &opts, PmemBackend::default()).unwrap();
    (pool, dev)
}

#[test]
fn a_hybrid_pool_moves_with_its_device_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev) = hybrid(dir.path());
    populate(&pool);
    // Listed before the export: any read-write open after it makes it stale.
    let before = listing(&pool);
    let report = export_hybrid(&pool, PmemBackend::default()).unwrap();
    assert_eq!(report.header.generation, 1);
    // The persistent memory is lost, and the disk moves (another path).
    std::fs::remove_file(&pool).unwrap();
    let moved = dir.path().join("moved-dev");
    std::fs::rename(&dev, &moved).unwrap();
    let device = DataDevice::open(&moved).unwrap();
    let new_pool = dir.path().join("new-pool");
    device.import(&new_pool, IfStale::Refuse).unwrap();
    // The new pool finds its device where it is now, and has the same tree and data.
    assert_eq!(listing(&new_pool), before);
    let fs = Fs::open(&new_pool).unwrap();
    let found = lynxfs::fsck::check(fs.pool());
    assert!(found.problems.is_empty(), "{:?}", found.problems);
    drop(fs);
    // It keeps working and exports again, to the other slot.
    {
        let fs = Fs::open(&new_pool).unwrap();
        let s = fs.session(Cred::root());
        let fd = s.create("/after-move", 0o600).unwrap();
        fs.pwrite(fd, b"new data on the device", 0).unwrap();
        fs.close_fd(fd).unwrap();
        drop(s);
        fs.close().unwrap();
    }
    let after = listing(&new_pool);
    let again = export_hybrid(&new_pool, PmemBackend::default()).unwrap();
    // Generation 2 was the stale mark of the new pool's first read-write open.
    assert_eq!(again.header.generation, 3);
    assert_eq!(again.replaced, Some(2));
    assert_ne!(again.header.slot, report.header.slot);
    std::fs::remove_file(&new_pool).unwrap();
    let third = dir.path().join("third-pool");
    DataDevice::open(&moved)
        .unwrap()
        .import(&third, IfStale::Refuse)
        .unwrap();
    assert_eq!(listing(&third), after);
}

#[test]
fn a_device_is_refused_when_it_is_not_one_or_holds_another_pools_export() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev) = hybrid(dir.path());
    // Nothing exported yet.
    let err = DataDevice::open(&dev)
        .unwrap()
        .import(&dir.path().join("x"), IfStale::Refuse)
        .expect_err("no export")
        .to_string();
    assert!(err.contains("no usable export"), "{err}");
    export_hybrid(&pool, PmemBackend::default()).unwrap();
    // Another pool's device with this export copied in: the export is of a pool the
    // device does not belong to.
    let other = tempfile::tempdir().unwrap();
    let (_, other_dev) = hybrid(other.path());
    let h = DataDevice::open(&dev).unwrap().header;
    let o = DataDevice::open(&other_dev).unwrap().header;
    let mut area = vec![0u8; h.export_len as usize];
    File::open(&dev)
        .unwrap()
        .read_exact_at(&mut area, h.export_off)
        .unwrap();
    OpenOptions::new()
        .write(true)
        .open(&other_dev)
        .unwrap()
        .write_all_at(&area, o.export_off)
        .unwrap();
    let err = DataDevice::open(&other_dev)
        .unwrap()
        .import(&other.path().join("x"), IfStale::Refuse)
        .expect_err("a foreign export")
        .to_string();
    assert!(err.contains("belongs to pool"), "{err}");
    assert!(!other.path().join("x").exists());
    // A pool file is not a device; an all-PM pool has no device to export to.
    let err = DataDevice::open(&pool)
        .expect_err("not a device")
        .to_string();
    assert!(err.contains("not a LynxFS data device"), "{err}");
    let s = Setup::new();
    let err = export_hybrid(&s.pool(), PmemBackend::default())
        .expect_err("all-PM")
        .to_string();
    assert!(err.contains("not a hybrid pool"), "{err}");
}

/// Writes `data` into a new file `name` of the pool (opened read-write), and closes it.
fn write_file(pool: &Path, name: &str, data: &[u8]) {
    let fs = Fs::open(pool).unwrap();
    let s = fs.session(Cred::root());
    let fd = s.create(name, 0o644).unwrap();
    fs.pwrite(fd, data, 0).unwrap();
    fs.close_fd(fd).unwrap();
    drop(s);
    fs.close().unwrap();
}

/// Imports `dev`'s export into a new pool `name` beside it.
fn import_device(dev: &Path, name: &str, if_stale: IfStale) -> lynxfs::Result<PathBuf> {
    let path = dev.with_file_name(name);
    DataDevice::open(dev)?.import(&path, if_stale)?;
    Ok(path)
}

#[test]
fn an_export_is_stale_once_its_pool_is_opened_read_write_until_exported_again() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev) = hybrid(dir.path());
    populate(&pool);
    let at_export = listing(&pool);
    export_hybrid(&pool, PmemBackend::default()).unwrap();
    // The pool moves on: its file's blocks on the device are the device's newest.
    write_file(&pool, "/after", &[0xa5u8; 70_000]);
    let err = import_device(&dev, "refused", IfStale::Refuse)
        .expect_err("a stale export is imported")
        .to_string();
    assert!(err.contains("the export is stale"), "{err}");
    assert!(err.contains("export it again"), "{err}");
    assert!(err.contains(&dev.display().to_string()), "{err}");
    assert!(!dir.path().join("refused").exists());
    let err = DataDevice::open(&dev)
        .unwrap()
        .read_export(IfStale::Refuse)
        .expect_err("a stale export is read")
        .to_string();
    assert!(err.contains("stale mark of generation 2"), "{err}");
    // Asked for, the stale export is read for a look, and says it is stale.
    let e = DataDevice::open(&dev)
        .unwrap()
        .read_export(IfStale::Read)
        .unwrap();
    assert!(e.stale);
    assert_eq!(e.header.generation, 1);
    let look = import_device(&dev, "look", IfStale::Read).unwrap();
    let fs = Fs::<PmemBackend>::new(
        Pool::open(&look, Access::ReadOnly, PmemBackend::default()).unwrap(),
    );
    assert!(fs.session(Cred::root()).lstat("/after").is_err());
    drop(fs);
    std::fs::remove_file(&look).unwrap();
    // Exported again: the device holds the pool as it is now.
    let now = listing(&pool);
    assert_ne!(now, at_export);
    let again = export_hybrid(&pool, PmemBackend::default()).unwrap();
    assert_eq!((again.header.generation, again.replaced), (3, Some(2)));
    std::fs::remove_file(&pool).unwrap();
    let moved = import_device(&dev, "moved", IfStale::Refuse).unwrap();
    assert_eq!(listing(&moved), now);
}

#[test]
fn a_read_only_open_and_an_export_leave_the_export_current() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev) = hybrid(dir.path());
    populate(&pool);
    let before = listing(&pool);
    let first = export_hybrid(&pool, PmemBackend::default()).unwrap();
    // Read-only opens (fsck, info) change nothing, on the device or in the pool.
    for _ in 0..2 {
        let p = Pool::open(&pool, Access::ReadOnly, PmemBackend::default()).unwrap();
        let found = lynxfs::fsck::check(&p);
        assert!(found.problems.is_empty(), "{:?}", found.problems);
    }
    let e = DataDevice::open(&dev)
        .unwrap()
        .read_export(IfStale::Refuse)
        .unwrap();
    assert_eq!((e.header.generation, e.stale), (1, false));
    // An export's own open does not mark the export it replaces: a second export
    // crashed before its header leaves the first one current, not stale.
    let second = export_hybrid(&pool, PmemBackend::default()).unwrap();
    assert_eq!((second.header.generation, second.replaced), (2, Some(1)));
    let h = DataDevice::open(&dev).unwrap().header;
    let d = OpenOptions::new().write(true).open(&dev).unwrap();
    // Generation 2's header is copy 0, at the area's start.
    d.write_all_at(&[0u8; 4096], h.export_off).unwrap();
    let e = DataDevice::open(&dev)
        .unwrap()
        .read_export(IfStale::Refuse)
        .unwrap();
    assert_eq!(e.header.generation, first.header.generation);
    std::fs::remove_file(&pool).unwrap();
    let moved = import_device(&dev, "moved", IfStale::Refuse).unwrap();
    assert_eq!(listing(&moved), before);
}

#[test]
fn a_crash_during_the_stale_mark_leaves_the_export_current_and_the_next_open_marks_it() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev) = hybrid(dir.path());
    populate(&pool);
    let before = listing(&pool);
    export_hybrid(&pool, PmemBackend::default()).unwrap();
    let h = DataDevice::open(&dev).unwrap().header;
    // The mark (generation 2) goes to copy 0, the export (1) is in copy 1.
    let mark_at = h.export_off;
    let d = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&dev)
        .unwrap();
    let mut export_header = [0u8; 4096];
    d.read_exact_at(&mut export_header, h.export_off + 4096)
        .unwrap();
    // The open that writes the mark crashes while it is written: torn, at each of
    // the header's sectors' worth of bytes (the mark is the first 96 bytes of its
    // block); the open never got past the mark, so the pool has not moved on.
    {
        let fs = Fs::open(&pool).unwrap();
        drop(fs);
    }
    let mut mark = [0u8; 96];
    d.read_exact_at(&mut mark, mark_at).unwrap();
    for torn_at in [1usize, 8, 40, 64, 95] {
        let mut torn = mark;
        torn[torn_at..].fill(0);
        if torn == mark {
            // The mark's bytes from there on were zeros already (its checksum's top
            // byte is zero once in 256 marks): that write is whole, not torn.
            continue;
        }
        d.write_all_at(&torn, mark_at).unwrap();
        let e = DataDevice::open(&dev)
            .unwrap()
            .read_export(IfStale::Refuse)
            .unwrap_or_else(|e| panic!("torn at {torn_at}: {e}"));
        assert_eq!(
            (e.header.generation, e.stale),
            (1, false),
            "torn at {torn_at}"
        );
    }
    // The export's header itself was never touched by the mark.
    let mut now = [0u8; 4096];
    d.read_exact_at(&mut now, h.export_off + 4096).unwrap();
    assert_eq!(now, export_header);
    let moved = import_device(&dev, "moved", IfStale::Refuse).unwrap();
    assert_eq!(listing(&moved), before);
    std::fs::remove_file(&moved).unwrap();
    // The next read-write open marks it again, whole.
    write_file(&pool, "/later", b"moves on");
    let err = import_device(&dev, "refused", IfStale::Refuse)
        .expect_err("stale")
        .to_string();
    assert!(err.contains("the export is stale"), "{err}");
}

/// The message of a refused open of `pool` read-write.
fn refused_open(pool: &Path) -> String {
    match Pool::open(pool, Access::ReadWrite, PmemBackend::default()) {
        Ok(_) => panic!("{} opened", pool.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_data_device_serves_one_pool_at_a_time_and_names_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, dev) = hybrid(dir.path());
    write_file(&pool, "/f", b"the first pool's");
    export_hybrid(&pool, PmemBackend::default()).unwrap();
    // A copy of the pool is another pool on the same device.
    let copy = dir.path().join("copy");
    std::fs::copy(&pool, &copy).unwrap();
    let fs = Fs::open(&pool).unwrap();
    // The pool's own processes share the device: another attachment of it opens.
    let again = Pool::open(&pool, Access::ReadWrite, PmemBackend::default()).unwrap();
    drop(again);
    let err = refused_open(&copy);
    assert!(err.contains("in use by pool"), "{err}");
    assert!(err.contains(&*pool.to_string_lossy()), "{err}");
    assert!(err.contains(&*copy.to_string_lossy()), "{err}");
    // A use of the device alone is refused too, naming the pool, and changes nothing.
    let err = import_device(&dev, "imported", IfStale::Read)
        .expect_err("an import of a device in use")
        .to_string();
    assert!(err.contains("in use by pool"), "{err}");
    assert!(!dir.path().join("imported").exists());
    let mut opts = MkfsOptions::new(POOL_SIZE);
    opts.data_device = Some(dev.clone());
    opts.force = true;
    let other = dir.path().join("other");
    let err = Pool::mkfs(&other, &opts, PmemBackend::default())
        .expect_err("mkfs --force of a device in use")
        .to_string();
    assert!(err.contains("in use by pool"), "{err}");
    assert!(!other.exists());
    // Closed, the device is free for the next pool, which then holds it.
    fs.close().unwrap();
    drop(fs);
    let copy_fs = Fs::open(&copy).unwrap();
    let err = refused_open(&pool);
    assert!(err.contains(&*copy.to_string_lossy()), "{err}");
    drop(copy_fs);
    assert!(listing(&pool).contains_key(b"/f".as_slice()));
}
