//! `lynxfs mount` / `lynxfs umount` / `mount.lynxfs` end to end, through the binary.
//! Needs root and `/dev/fuse`; fails loudly without them.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_lynxfs");

fn run(args: &[&Path]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("running lynxfs")
}

fn p(s: &str) -> &Path {
    Path::new(s)
}

fn mounted(mp: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mp = mp.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(mp.as_ref()))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn info_state(pool: &Path) -> String {
    let o = run(&[p("info"), pool]);
    assert!(o.status.success(), "info: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find(|l| l.starts_with("state:"))
        .unwrap_or("")
        .to_string()
}

#[test]
fn mount_daemon_second_mount_umount_helper_and_sigterm() {
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("pool");
    let o = run(&[p("mkfs"), p("--size"), p("64M"), &pool]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    let mnt = tempfile::tempdir().unwrap();
    let mnt = mnt.path().canonicalize().unwrap();

    // Detached mount: returns once the mount is live.
    let o = run(&[
        p("mount"),
        p("-o"),
        p("entry_timeout=0,threads=1"),
        &pool,
        &mnt,
    ]);
    assert!(o.status.success(), "mount: {}", stderr(&o));
    assert!(mounted(&mnt));
    std::fs::write(mnt.join("f"), b"through the daemon").unwrap();

    // The pool is in use: a second mount says so and fails.
    let other = tempfile::tempdir().unwrap();
    let o = run(&[p("mount"), &pool, other.path()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    assert!(!mounted(other.path()));

    // Bad options are refused before anything happens.
    let o = run(&[p("mount"), p("-o"), p("threads=0"), &pool, other.path()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("threads=0"), "{}", stderr(&o));

    // umount waits for the daemon to close the pool.
    let o = run(&[p("umount"), &mnt]);
    assert!(o.status.success(), "umount: {}", stderr(&o));
    assert!(!mounted(&mnt));
    assert!(
        info_state(&pool).ends_with(" clean, not mounted"),
        "{}",
        info_state(&pool)
    );
    let o = run(&[p("umount"), &mnt]);
    assert!(!o.status.success(), "umount of something not mounted fails");

    // The mount(8) helper, by its name (a link to the binary).
    let helper = dir.path().join("mount.lynxfs");
    std::os::unix::fs::symlink(BIN, &helper).unwrap();
    let o = Command::new(&helper)
        .arg(&pool)
        .arg(&mnt)
        .args(["-o", "rw,attr_timeout=0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "mount.lynxfs: {}", stderr(&o));
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"through the daemon");
    let o = run(&[p("umount"), &mnt]);
    assert!(o.status.success(), "umount: {}", stderr(&o));

    // Foreground: SIGTERM unmounts and closes the pool cleanly.
    let mut child = Command::new(BIN)
        .args([p("mount"), p("-f"), &pool, &mnt])
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !mounted(&mnt) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the foreground mount never appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"through the daemon");
    // SAFETY: signalling our own child by its pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let st = child.wait().unwrap();
    assert!(st.success(), "foreground mount exited with {st}");
    assert!(!mounted(&mnt));
    assert!(
        info_state(&pool).ends_with(" clean, not mounted"),
        "{}",
        info_state(&pool)
    );
}

fn info(target: &Path) -> String {
    let o = run(&[p("info"), target]);
    assert!(o.status.success(), "info: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The number after `key` on the line starting with `key` (e.g. "index:" -> entries).
fn first_number(text: &str, key: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key:?} line in:\n{text}"));
    line[key.len()..]
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no number in {line:?}"))
}

#[test]
fn info_of_a_mounted_pool_shows_the_daemons_index_and_cachelets() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("pool");
    let o = run(&[p("mkfs"), p("--size"), p("64M"), &pool]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    let offline = info(&pool);
    assert!(offline.contains("index, cachelets: none"), "{offline}");
    let mnt = tempfile::tempdir().unwrap();
    let mnt = mnt.path().canonicalize().unwrap();
    let o = run(&[p("mount"), &pool, &mnt]);
    assert!(o.status.success(), "mount: {}", stderr(&o));
    std::fs::create_dir(mnt.join("d")).unwrap();
    for i in 0..300 {
        std::fs::write(mnt.join(format!("d/f{i}")), b"x").unwrap();
    }
    // By the pool's path (the daemon holds its lock) and by the mount point.
    for target in [pool.as_path(), mnt.as_path()] {
        let live = info(target);
        assert!(
            live.contains(&format!("mounted on {}", mnt.display())),
            "{live}"
        );
        assert_eq!(first_number(&live, "inodes:"), 302, "{live}");
        assert_eq!(first_number(&live, "dentries:"), 301, "{live}");
        assert!(first_number(&live, "index:") >= 301, "{live}");
        assert!(first_number(&live, "cachelets:") >= 1, "{live}");
    }
    // The usage attribute is the root's alone and not listed.
    let names: Vec<_> = xattr::list(&mnt).unwrap().collect();
    assert!(names.is_empty(), "{names:?}");
    assert!(!matches!(
        xattr::get(mnt.join("d"), "lynxfs.usage"),
        Ok(Some(_))
    ));
    let o = run(&[p("umount"), &mnt]);
    assert!(o.status.success(), "umount: {}", stderr(&o));
    assert_eq!(first_number(&info(&pool), "inodes:"), 302);
    // A read-only mount shares the pool's lock: the pool would open, but it is mounted.
    let o = run(&[p("mount"), p("-o"), p("ro"), &pool, &mnt]);
    assert!(o.status.success(), "mount ro: {}", stderr(&o));
    let live = info(&pool);
    let o = run(&[p("umount"), &mnt]);
    assert!(o.status.success(), "umount: {}", stderr(&o));
    assert!(live.contains("mounted on"), "{live}");
}

/// Detaches a loop device when dropped.
struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn mkfs_formats_a_block_device_whose_old_bytes_are_garbage() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let img = dir.path().join("disk.img");
    // Garbage everywhere: what mkfs does not zero, the pool must not trust.
    std::fs::write(&img, vec![0xa5u8; 64 << 20]).unwrap();
    let o = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&img)
        .output()
        .expect("running losetup");
    assert!(o.status.success(), "losetup: {}", stderr(&o));
    let dev = Loop(String::from_utf8_lossy(&o.stdout).trim().to_string());
    let devp = Path::new(&dev.0);

    let o = run(&[p("mkfs"), devp]);
    assert!(
        !o.status.success(),
        "a device is formatted only with --force"
    );
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    let o = run(&[p("mkfs"), p("--force"), p("--size"), p("128M"), devp]);
    assert!(!o.status.success(), "larger than the device");
    assert!(stderr(&o).contains("less than"), "{}", stderr(&o));

    let o = run(&[p("mkfs"), p("--force"), devp]);
    assert!(o.status.success(), "mkfs: {}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("(67108864 bytes)"),
        "the whole device by default"
    );
    let o = run(&[p("fsck"), devp]);
    assert!(
        o.status.success(),
        "fsck: {}",
        String::from_utf8_lossy(&o.stdout)
    );

    let mnt = tempfile::tempdir().unwrap();
    let mnt = mnt.path().canonicalize().unwrap();
    let o = run(&[p("mount"), devp, &mnt]);
    assert!(o.status.success(), "mount: {}", stderr(&o));
    std::fs::create_dir(mnt.join("d")).unwrap();
    std::fs::write(mnt.join("d/f"), b"on a device").unwrap();
    let o = run(&[p("umount"), &mnt]);
    assert!(o.status.success(), "umount: {}", stderr(&o));
    let o = run(&[p("fsck"), devp]);
    assert!(
        o.status.success(),
        "fsck: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("2 directories, 1 files"));
    // Not DAX: the page cache sits between the mapping and the device, so msync.
    assert!(
        info(devp).contains("durability:       msync"),
        "{}",
        info(devp)
    );

    // A device another file system has mounted is refused, whatever --force says.
    let o = Command::new("mkfs.ext4")
        .args(["-q", "-F", &dev.0])
        .output()
        .expect("running mkfs.ext4");
    assert!(o.status.success(), "mkfs.ext4: {}", stderr(&o));
    let ext4 = tempfile::tempdir().unwrap();
    let o = Command::new("mount")
        .arg(&dev.0)
        .arg(ext4.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "mount: {}", stderr(&o));
    let refused = run(&[p("mkfs"), p("--force"), devp]);
    let _ = Command::new("umount").arg(ext4.path()).status();
    assert!(!refused.status.success(), "formatted a mounted device");
    assert!(stderr(&refused).contains("busy"), "{}", stderr(&refused));
}
