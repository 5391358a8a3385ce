//! How many FUSE requests a call through the mount costs (issue 29): counted by the
//! kernel's own `fuse:fuse_request_send` tracepoint, in a tracing instance of the
//! test's own (so tests running at once do not see each other's events), filtered to
//! the mount's connection.
//!
//! Needs root, `/dev/fuse` and tracefs (mounted at /sys/kernel/tracing if it is not);
//! fails loudly without them.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_fuse::mount::{mount_background, LynxMount, MountOptions};
use lynxfs_test_support::watchdog;

const TRACEFS: &str = "/sys/kernel/tracing";

/// A tracing instance counting one mount's FUSE requests; removed when dropped.
struct Requests {
    dir: PathBuf,
}

impl Requests {
    /// Starts counting the requests of the FUSE connection serving `mountpoint`.
    fn of(mountpoint: &Path, name: &str) -> Requests {
        if !Path::new(TRACEFS).join("instances").exists() {
            let ok = std::process::Command::new("mount")
                .args(["-t", "tracefs", "nodev", TRACEFS])
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "tracefs is not mounted at {TRACEFS} and mounting it failed"
            );
        }
        let dir = Path::new(TRACEFS)
            .join("instances")
            .join(format!("lynxfs-{name}-{}", std::process::id()));
        let _ = fs::remove_dir(&dir);
        fs::create_dir(&dir).expect("a tracing instance (tracefs, as root)");
        let dev = {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(mountpoint).expect("the mount point").dev()
        };
        // The tracepoint's dev_t is the kernel's (major << 20 | minor).
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let connection = u64::from(major) << 20 | u64::from(minor);
        let event = dir.join("events/fuse/fuse_request_send");
        fs::write(event.join("filter"), format!("connection == {connection}"))
            .expect("filtering fuse_request_send (a kernel with FUSE tracepoints)");
        fs::write(event.join("enable"), "1").expect("enabling fuse_request_send");
        Requests { dir }
    }

    /// Forgets what was counted so far.
    fn clear(&self) {
        fs::write(self.dir.join("trace"), "").expect("clearing the trace");
    }

    /// The requests counted since the last [`Self::clear`], by name (`FUSE_READ`...).
    fn counts(&self) -> HashMap<String, usize> {
        let mut text = String::new();
        fs::File::open(self.dir.join("trace"))
            .and_then(|mut f| f.read_to_string(&mut text))
            .expect("reading the trace");
        let mut counts = HashMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            // "... opcode 15 (FUSE_READ) len 80"
            if let Some(name) = line
                .split_once(" (")
                .and_then(|(_, rest)| rest.split_once(')'))
                .map(|(n, _)| n)
            {
                *counts.entry(name.to_string()).or_default() += 1;
            }
        }
        counts
    }

    fn count(&self, op: &str) -> usize {
        self.counts().get(op).copied().unwrap_or(0)
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("events/fuse/fuse_request_send/enable"), "0");
        let _ = fs::remove_dir(&self.dir);
    }
}

/// A fresh pool in /dev/shm mounted with `lynxfs mount`'s defaults.
fn mounted() -> (tempfile::TempDir, tempfile::TempDir, LynxMount) {
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let pool = dir.path().join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(64 << 20), PmemBackend::default()).expect("mkfs");
    let mnt = tempfile::tempdir().expect("mount point");
    let m = mount_background(&pool, mnt.path(), &MountOptions::default()).expect("mount");
    (dir, mnt, m)
}

/// Writes to an open file cost one WRITE each: the kernel asks no GETXATTR of
/// `security.capability` before every write (FUSE_HANDLE_KILLPRIV_V2 lets it mark the
/// inode as having no privileges to kill). Before: one GETXATTR per write.
#[test]
fn writes_to_an_open_file_ask_for_no_capability_each() {
    let _w = watchdog(
        "writes_to_an_open_file_ask_for_no_capability_each",
        Duration::from_secs(120),
    );
    let (_pool, _mnt, m) = mounted();
    let path = m.mountpoint().join("log");
    let f = fs::File::create(&path).unwrap();
    f.write_all_at(b"first", 0).unwrap();
    let r = Requests::of(m.mountpoint(), "writes");
    r.clear();
    for i in 1..=20u64 {
        f.write_all_at(&[b'x'; 4096], i * 4096).unwrap();
    }
    let counts = r.counts();
    assert_eq!(counts.get("FUSE_WRITE"), Some(&20), "{counts:?}");
    assert_eq!(counts.get("FUSE_GETXATTR"), None, "{counts:?}");
    drop(f);
    drop(r);
    m.unmount().unwrap();
}

/// A file opened again, unchanged, is read from the kernel's pages: no READ request
/// (FOPEN_KEEP_CACHE). Before: every open dropped the pages, one READ per reread.
#[test]
fn reopening_an_unchanged_file_reads_no_pages_again() {
    let _w = watchdog(
        "reopening_an_unchanged_file_reads_no_pages_again",
        Duration::from_secs(120),
    );
    let (_pool, _mnt, m) = mounted();
    let path = m.mountpoint().join("page");
    let data: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
    fs::write(&path, &data).unwrap();
    let r = Requests::of(m.mountpoint(), "reopen");
    // The pages are kept once the daemon's change forwarder has read the notices of
    // the write above (its own, which it skips): a moment after it.
    let start = std::time::Instant::now();
    loop {
        r.clear();
        assert_eq!(fs::read(&path).unwrap(), data);
        if r.count("FUSE_READ") == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "a reread still reads pages after 2 s: {:?}",
            r.counts()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    r.clear();
    for _ in 0..10 {
        assert_eq!(fs::read(&path).unwrap(), data);
    }
    assert_eq!(r.count("FUSE_OPEN"), 10, "{:?}", r.counts());
    assert_eq!(r.count("FUSE_READ"), 0, "{:?}", r.counts());
    // A write through the mount goes through the kernel's pages: kept, and right.
    fs::write(&path, b"short").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"short");
    drop(r);
    m.unmount().unwrap();
}

/// Pages are kept at an open only while a read would not update the atime (relatime
/// by default): the first read after a write through the mount still reaches the
/// daemon, which updates the atime, as on tmpfs. Seen failing with the pages kept
/// regardless (the atime stayed before the mtime).
#[test]
fn a_read_after_a_write_updates_the_atime_with_pages_kept() {
    use std::os::unix::fs::MetadataExt;
    let _w = watchdog(
        "a_read_after_a_write_updates_the_atime_with_pages_kept",
        Duration::from_secs(120),
    );
    let (_pool, _mnt, m) = mounted();
    let path = m.mountpoint().join("timed");
    // Whole pages: a page written whole is up to date in the kernel's cache, so a
    // kept one would answer the read without the daemon.
    let page = vec![b'p'; 4096];
    fs::write(&path, &page).unwrap();
    for round in 0..5 {
        assert_eq!(fs::read(&path).unwrap(), page);
        let st = fs::metadata(&path).unwrap();
        let (a, mt) = ((st.atime(), st.atime_nsec()), (st.mtime(), st.mtime_nsec()));
        assert!(
            a > mt,
            "round {round}: atime {a:?} not after mtime {mt:?} after a read"
        );
        // A write through the mount: its pages are in the kernel's cache.
        std::thread::sleep(Duration::from_millis(5));
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.write_all_at(&page, 0))
            .unwrap();
    }
    m.unmount().unwrap();
}

/// A 1 MiB read of a file whose pages are not cached is one READ: the mount's
/// readahead window is widened to the largest READ (1 MiB) once INIT is answered.
/// Before: the kernel's 128 KiB window, eight READs, each a round trip.
#[test]
fn a_large_uncached_read_is_one_request() {
    let _w = watchdog(
        "a_large_uncached_read_is_one_request",
        Duration::from_secs(120),
    );
    let (_pool, _mnt, m) = mounted();
    let path = m.mountpoint().join("big");
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    fs::write(&path, &data).unwrap();
    let f = fs::File::open(&path).unwrap();
    let r = Requests::of(m.mountpoint(), "readahead");
    for _ in 0..3 {
        // Drop the file's pages, so the read below reaches the daemon.
        // SAFETY: plain system call on a descriptor we own.
        let rc = unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
                0,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        assert_eq!(rc, 0, "posix_fadvise");
        r.clear();
        let mut buf = vec![0u8; 1 << 20];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert!(buf == data, "the read returned other bytes");
        assert_eq!(r.count("FUSE_READ"), 1, "{:?}", r.counts());
    }
    drop(f);
    drop(r);
    m.unmount().unwrap();
}

/// What each operation of the personalities' flowops costs, at most, in requests:
/// the floor of the kernel's FUSE protocol for the semantics the mount keeps
/// (docs/DESIGN-NOTES.md, "FUSE: fewer requests per operation (issue 29, session 7)",
/// says where each comes from). A change that adds a round trip to one fails here.
/// FORGET is not counted: the kernel sends it whenever it drops an inode, and no
/// caller waits for it.
#[test]
fn each_operation_keeps_to_its_request_budget() {
    let _w = watchdog(
        "each_operation_keeps_to_its_request_budget",
        Duration::from_secs(120),
    );
    let (_pool, _mnt, m) = mounted();
    let dir = m.mountpoint().join("d");
    fs::create_dir(&dir).unwrap();
    const N: usize = 20;
    let names: Vec<PathBuf> = (0..N).map(|i| dir.join(format!("f{i}"))).collect();
    let data = vec![b'b'; 16384];
    let r = Requests::of(m.mountpoint(), "budget");
    // Each request at most so many times per call, and all of them at most the sum;
    // plus, once, the directory's GETATTR that the previous batch's last change left
    // to the first call of this one.
    let within = |what: &str, budget: &[(&str, usize)], op: &dyn Fn(&Path)| {
        r.clear();
        for p in &names {
            op(p);
        }
        let counts = r.counts();
        let mut total = 0;
        for (name, n) in &counts {
            if name.contains("FORGET") {
                continue;
            }
            total += n;
            let carried = usize::from(name == "FUSE_GETATTR");
            let allowed = budget
                .iter()
                .find(|(b, _)| b == name)
                .map_or(0, |(_, k)| k * N)
                + carried;
            assert!(
                *n <= allowed,
                "{what}: {n} {name} for {N} calls, at most {allowed}: {counts:?}"
            );
        }
        let most = budget.iter().map(|(_, k)| k).sum::<usize>() * N + 1;
        assert!(
            total <= most,
            "{what}: {total} requests for {N} calls, at most {most}: {counts:?}"
        );
    };
    within(
        "create, write 16 KiB, close",
        &[
            // The directory's attributes, dropped by the previous create, for the
            // kernel's permission check; the name's lookup before the create.
            ("FUSE_GETATTR", 1),
            ("FUSE_LOOKUP", 1),
            ("FUSE_CREATE", 1),
            // A write-only open writes directly: one WRITE, and no GETXATTR of
            // security.capability first.
            ("FUSE_WRITE", 1),
            // Where a close drops the closer's POSIX locks (locks are shared).
            ("FUSE_FLUSH", 1),
            ("FUSE_RELEASE", 1),
        ],
        &|p| {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)
                .unwrap();
            std::io::Write::write_all(&mut f, &data).unwrap();
        },
    );
    // statx(2) asks STATX (stat(2) would ask GETATTR instead).
    within("stat after a write", &[("FUSE_STATX", 1)], &|p| {
        fs::metadata(p).unwrap();
    });
    within("stat again", &[], &|p| {
        fs::metadata(p).unwrap();
    });
    within(
        "open, read whole, close",
        &[
            ("FUSE_OPEN", 1),
            // The first read after a write reaches the daemon (atime, relatime).
            ("FUSE_READ", 1),
            ("FUSE_FLUSH", 1),
            ("FUSE_RELEASE", 1),
        ],
        &|p| assert_eq!(fs::read(p).unwrap().len(), data.len()),
    );
    within(
        "rename",
        &[("FUSE_LOOKUP", 1), ("FUSE_RENAME", 1), ("FUSE_GETATTR", 1)],
        &|p| fs::rename(p, p.with_extension("r")).unwrap(),
    );
    within("unlink", &[("FUSE_UNLINK", 1), ("FUSE_GETATTR", 1)], &|p| {
        fs::remove_file(p.with_extension("r")).unwrap()
    });
    within(
        "mkdir",
        &[("FUSE_GETATTR", 1), ("FUSE_LOOKUP", 1), ("FUSE_MKDIR", 1)],
        &|p| fs::create_dir(p).unwrap(),
    );
    within("rmdir", &[("FUSE_GETATTR", 1), ("FUSE_RMDIR", 1)], &|p| {
        fs::remove_dir(p).unwrap()
    });
    drop(r);
    m.unmount().unwrap();
}

/// The daemon's own time per request type (`MountOptions::times_file`, as
/// `LYNXFS_FUSE_TIMES=FILE`, for `scripts/fusefloor.sh`): when the session ends, each
/// request type the kernel sent is in the file, counted as often as the tracepoint
/// saw it sent, with a histogram that holds every one of them.
#[test]
fn the_daemon_times_every_request_it_answers() {
    let _w = watchdog(
        "the_daemon_times_every_request_it_answers",
        Duration::from_secs(120),
    );
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let pool = dir.path().join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(64 << 20), PmemBackend::default()).expect("mkfs");
    let times = dir.path().join("times");
    let mnt = tempfile::tempdir().expect("mount point");
    let o = MountOptions {
        times_file: Some(times.clone()),
        ..MountOptions::default()
    };
    let m = mount_background(&pool, mnt.path(), &o).expect("mount");
    let r = Requests::of(m.mountpoint(), "times");
    r.clear();
    for i in 0..20 {
        fs::write(m.mountpoint().join(format!("f{i}")), [b't'; 4096]).unwrap();
    }
    let sent = r.counts();
    drop(r);
    m.unmount().unwrap();
    let text = fs::read_to_string(&times).expect("the times file, written at unmount");
    assert!(text.ends_with("# end\n"), "{text}");
    let mut timed = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut words = line.split(' ');
        let name = words.next().unwrap().to_string();
        let count: u64 = words.next().unwrap().parse().unwrap();
        let total: u64 = words.next().unwrap().parse().unwrap();
        let in_buckets: u64 = words
            .map(|w| w.split_once(':').unwrap().1.parse::<u64>().unwrap())
            .sum();
        assert_eq!(in_buckets, count, "{line}");
        assert!(total > 0, "{line}");
        timed.insert(name, count);
    }
    // Only this test's calls made files: CREATE and WRITE come from them alone.
    for op in ["FUSE_CREATE", "FUSE_WRITE"] {
        assert_eq!(sent.get(op), Some(&20), "sent: {sent:?}");
        assert_eq!(timed.get(op), Some(&20), "timed: {text}");
    }
    for (op, n) in &sent {
        if !op.contains("FORGET") {
            assert!(timed.get(op) >= Some(&(*n as u64)), "{op}: {sent:?} {text}");
        }
    }
}

/// A write-only open writes straight to the daemon (FOPEN_DIRECT_IO): one WRITE per
/// write(2) and no GETXATTR of `security.capability` before the first. Through the
/// page cache, tar's 10 KiB writes cost 1-2 WRITEs each (a WRITE ends at every page
/// written in part) and each new file one GETXATTR: seen failing with 80 WRITEs and
/// 20 GETXATTRs. Readers still see the new bytes: the kernel drops its pages of the
/// range written.
#[test]
fn write_only_opens_send_one_write_per_call_and_no_capability_check() {
    let _w = watchdog(
        "write_only_opens_send_one_write_per_call_and_no_capability_check",
        Duration::from_secs(120),
    );
    let (_pool, _mnt, m) = mounted();
    let block: Vec<u8> = (0..10240u32).map(|i| (i % 241) as u8).collect();
    let r = Requests::of(m.mountpoint(), "direct");
    r.clear();
    for i in 0..20 {
        let mut f = fs::File::create(m.mountpoint().join(format!("t{i}"))).unwrap();
        for _ in 0..3 {
            std::io::Write::write_all(&mut f, &block).unwrap();
        }
    }
    let counts = r.counts();
    assert_eq!(counts.get("FUSE_WRITE"), Some(&60), "{counts:?}");
    assert_eq!(counts.get("FUSE_GETXATTR"), None, "{counts:?}");

    // A reader's cached pages give way to a write-only open's write.
    let path = m.mountpoint().join("t0");
    let reader = fs::File::open(&path).unwrap();
    let mut old = vec![0u8; 3 * block.len()];
    reader.read_exact_at(&mut old, 0).unwrap();
    r.clear();
    reader.read_exact_at(&mut old, 0).unwrap();
    assert_eq!(
        r.count("FUSE_READ"),
        0,
        "the pages are cached: {:?}",
        r.counts()
    );
    let writer = fs::OpenOptions::new().write(true).open(&path).unwrap();
    writer.write_all_at(b"new bytes", 5000).unwrap();
    drop(writer);
    let mut now = vec![0u8; old.len()];
    reader.read_exact_at(&mut now, 0).unwrap();
    old[5000..5009].copy_from_slice(b"new bytes");
    assert!(now == old, "the reader saw the old bytes");
    assert_eq!(fs::read(&path).unwrap(), old);
    drop(reader);
    drop(r);
    m.unmount().unwrap();
}
