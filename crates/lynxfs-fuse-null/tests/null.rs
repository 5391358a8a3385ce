//! Mounts the null FUSE file system in a temporary directory and drives it through
//! `std::fs`, so every call goes through the kernel's FUSE client and back.
//!
//! Needs `/dev/fuse` and permission to mount (root, or `fusermount3` installed).
//! Without them the tests fail loudly rather than pass vacuously.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use lynxfs_fuse_null::{mount_null, mount_null_with, NullMount, NullOptions};
use lynxfs_test_support::{watchdog, Watchdog};
use tempfile::TempDir;

/// A mount plus the directory it lives on; fields drop in order, unmount first, and
/// the watchdog bounds the whole test, unmount included.
struct Mounted {
    mount: NullMount,
    _dir: TempDir,
    _watchdog: Watchdog,
}

impl Mounted {
    fn root(&self) -> &Path {
        self.mount.mountpoint()
    }
}

fn mount(options: Option<NullOptions>) -> Mounted {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: these tests need the FUSE device (modprobe fuse, or run \
         the container with --device /dev/fuse --cap-add SYS_ADMIN)"
    );
    let watchdog = watchdog("a null-mount test", Duration::from_secs(120));
    let dir = tempfile::tempdir().expect("creating a temporary mount point");
    let mount = match options {
        Some(options) => mount_null_with(dir.path(), &options),
        None => mount_null(dir.path(), Duration::ZERO),
    };
    let mount = mount.unwrap_or_else(|e| panic!("mounting the null FUSE file system: {e:#}"));
    Mounted {
        mount,
        _dir: dir,
        _watchdog: watchdog,
    }
}

fn errno(result: std::io::Result<impl Sized>) -> i32 {
    match result {
        Ok(_) => panic!("expected an error, got success"),
        Err(e) => e.raw_os_error().expect("an OS error"),
    }
}

#[test]
fn files_write_read_truncate() {
    let m = mount(None);
    let f = m.root().join("file");
    fs::write(&f, b"hello world").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"hello world");
    assert_eq!(fs::metadata(&f).unwrap().len(), 11);
    assert!(fs::metadata(&f).unwrap().is_file());

    // Overwrite in the middle, append, then read with an offset.
    let mut file = OpenOptions::new().read(true).write(true).open(&f).unwrap();
    file.seek(SeekFrom::Start(6)).unwrap();
    file.write_all(b"WORLD").unwrap();
    file.seek(SeekFrom::End(0)).unwrap();
    file.write_all(b"!").unwrap();
    file.seek(SeekFrom::Start(6)).unwrap();
    let mut tail = String::new();
    file.read_to_string(&mut tail).unwrap();
    assert_eq!(tail, "WORLD!");

    file.set_len(5).unwrap();
    drop(file);
    assert_eq!(fs::read(&f).unwrap(), b"hello");

    // O_TRUNC goes through setattr(size = 0).
    fs::write(&f, b"x").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"x");

    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        fs::metadata(&f).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // A larger file, spanning several FUSE write and read requests.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.root().join("big"), &big).unwrap();
    assert_eq!(fs::read(m.root().join("big")).unwrap(), big);
}

#[test]
fn file_errors() {
    let m = mount(None);
    let f = m.root().join("file");
    assert_eq!(fs::read(&f).unwrap_err().kind(), ErrorKind::NotFound);
    File::create(&f).unwrap();
    let again = OpenOptions::new().write(true).create_new(true).open(&f);
    assert_eq!(errno(again), libc::EEXIST);
    assert_eq!(errno(File::open(f.join("below"))), libc::ENOTDIR);
    assert_eq!(errno(fs::remove_dir(&f)), libc::ENOTDIR);
    assert_eq!(
        errno(fs::remove_file(m.root().join("missing"))),
        libc::ENOENT
    );
    fs::remove_file(&f).unwrap();
    assert_eq!(fs::metadata(&f).unwrap_err().kind(), ErrorKind::NotFound);
}

#[test]
fn unlinked_file_stays_readable_while_open() {
    let m = mount(None);
    let f = m.root().join("file");
    fs::write(&f, b"still here").unwrap();
    let mut open = File::open(&f).unwrap();
    fs::remove_file(&f).unwrap();
    let mut contents = String::new();
    open.read_to_string(&mut contents).unwrap();
    assert_eq!(contents, "still here");
}

#[test]
fn directories() {
    let m = mount(None);
    let d = m.root().join("d");
    fs::create_dir(&d).unwrap();
    assert!(fs::metadata(&d).unwrap().is_dir());
    assert_eq!(errno(fs::create_dir(&d)), libc::EEXIST);
    assert_eq!(errno(fs::remove_file(&d)), libc::EISDIR);
    assert_eq!(errno(File::create(m.root().join("nope/f"))), libc::ENOENT);

    fs::write(d.join("a"), b"a").unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    assert_eq!(errno(fs::remove_dir(&d)), libc::ENOTEMPTY);

    let mut names: Vec<String> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "sub"]);

    fs::remove_file(d.join("a")).unwrap();
    fs::remove_dir(d.join("sub")).unwrap();
    fs::remove_dir(&d).unwrap();
    assert_eq!(fs::read_dir(m.root()).unwrap().count(), 0);
}

#[test]
fn many_entries_list_and_remove_all() {
    let m = mount(None);
    let d = m.root().join("many");
    fs::create_dir(&d).unwrap();
    // Enough names to need several readdir requests; remove_dir_all deletes while
    // it lists, which is what the stable readdir cookies are for.
    for i in 0..1_000 {
        File::create(d.join(format!("file-with-a-longish-name-{i:05}"))).unwrap();
    }
    assert_eq!(fs::read_dir(&d).unwrap().count(), 1_000);
    fs::remove_dir_all(&d).unwrap();
    assert!(!d.exists());
}

#[test]
fn renames() {
    let m = mount(None);
    let root = m.root();
    fs::write(root.join("f"), b"data").unwrap();
    fs::create_dir(root.join("d")).unwrap();
    fs::create_dir(root.join("full")).unwrap();
    fs::write(root.join("full/x"), b"").unwrap();

    fs::rename(root.join("f"), root.join("g")).unwrap();
    assert!(!root.join("f").exists());
    assert_eq!(fs::read(root.join("g")).unwrap(), b"data");

    fs::rename(root.join("g"), root.join("d/g")).unwrap();
    assert_eq!(fs::read(root.join("d/g")).unwrap(), b"data");

    // Replacing an existing file.
    fs::write(root.join("h"), b"new").unwrap();
    fs::rename(root.join("h"), root.join("d/g")).unwrap();
    assert_eq!(fs::read(root.join("d/g")).unwrap(), b"new");

    assert_eq!(
        errno(fs::rename(root.join("d/g"), root.join("full"))),
        libc::EISDIR
    );
    assert_eq!(
        errno(fs::rename(root.join("full"), root.join("d/g"))),
        libc::ENOTDIR
    );
    assert_eq!(
        errno(fs::rename(root.join("d"), root.join("full"))),
        libc::ENOTEMPTY
    );
    assert_eq!(
        errno(fs::rename(root.join("nope"), root.join("x"))),
        libc::ENOENT
    );

    // Directory rename: its contents move with it.
    fs::rename(root.join("d"), root.join("full/d2")).unwrap();
    assert_eq!(fs::read(root.join("full/d2/g")).unwrap(), b"new");
    let dotdot = fs::metadata(root.join("full/d2/..")).unwrap();
    assert_eq!(dotdot.len(), fs::metadata(root.join("full")).unwrap().len());
}

#[test]
fn multi_threaded_session_serves_requests() {
    let options = NullOptions {
        ttl: Duration::ZERO,
        threads: 2,
    };
    let m = mount(Some(options));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let dir = m.root().join(format!("t{t}"));
            std::thread::spawn(move || {
                fs::create_dir(&dir).unwrap();
                for i in 0..50 {
                    fs::write(dir.join(i.to_string()), i.to_string()).unwrap();
                }
                fs::remove_dir_all(&dir).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(fs::read_dir(m.root()).unwrap().count(), 0);
}

#[test]
fn statfs_and_explicit_unmount() {
    let m = mount(None);
    let stat = nix::sys::statvfs::statvfs(m.root()).unwrap();
    assert!(stat.blocks_free() > 0);
    assert_eq!(stat.name_max(), 255);
    let Mounted {
        mount,
        _dir,
        _watchdog,
    } = m;
    let path = mount.mountpoint().to_path_buf();
    mount.unmount().unwrap();
    // After unmounting, the temporary directory is an ordinary empty directory again.
    assert_eq!(fs::read_dir(&path).unwrap().count(), 0);
}
