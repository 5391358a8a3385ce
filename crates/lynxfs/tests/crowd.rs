//! Many more threads than CPUs on one file or one directory (issue 29, "waits that
//! behave with more threads than CPUs"): every one finishes, and nothing is lost.
//! Correctness only: how long the waits take is the benchmarks' business.

use crate::common;

use std::collections::HashSet;
use std::sync::Barrier;
use std::time::Duration;

use common::fs;
use lynxfs::Cred;

/// How long one test may run before the process aborts (a wait that never ends).
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn sixty_four_threads_appending_to_one_file_lose_no_byte() {
    let _w = lynxfs_test_support::watchdog("appending_to_one_file", LIMIT);
    const THREADS: usize = 64;
    const APPENDS: usize = 200;
    let fs = fs(256 << 20);
    let s = fs.session(Cred::root());
    fs.close_fd(s.open("/log", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap())
        .unwrap();
    let go = Barrier::new(THREADS);
    let written: usize = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (fs, s, go) = (&fs, &s, &go);
                sc.spawn(move || {
                    let fd = s.open("/log", libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
                    // Each thread's bytes carry its number, so a torn or overlapping
                    // append shows in the counts below.
                    let mut total = 0;
                    go.wait();
                    for i in 0..APPENDS {
                        let n = 1 + (t * 131 + i * 977) % 6000;
                        assert_eq!(fs.write(fd, &vec![t as u8; n]).unwrap(), n);
                        total += n;
                    }
                    fs.close_fd(fd).unwrap();
                    total
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(s.stat("/log").unwrap().size, written as u64);
    let fd = s.open("/log", libc::O_RDONLY, 0).unwrap();
    let mut all = vec![0u8; written];
    assert_eq!(fs.pread(fd, &mut all, 0).unwrap(), written);
    let mut per_thread = [0usize; THREADS];
    all.iter().for_each(|&b| per_thread[b as usize] += 1);
    for (t, &got) in per_thread.iter().enumerate() {
        let want: usize = (0..APPENDS).map(|i| 1 + (t * 131 + i * 977) % 6000).sum();
        assert_eq!(got, want, "thread {t}'s bytes");
    }
}

#[test]
fn thirty_two_threads_creating_in_one_directory_leave_every_name() {
    let _w = lynxfs_test_support::watchdog("creating_in_one_directory", LIMIT);
    const THREADS: usize = 32;
    const FILES: usize = 300;
    let fs = fs(128 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    let go = Barrier::new(THREADS);
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (fs, s, go) = (&fs, &s, &go);
            sc.spawn(move || {
                go.wait();
                for i in 0..FILES {
                    let fd = s
                        .open(
                            format!("/d/t{t}-{i}"),
                            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                            0o644,
                        )
                        .unwrap();
                    fs.close_fd(fd).unwrap();
                }
            });
        }
    });
    let names: HashSet<Vec<u8>> = s
        .readdir("/d")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    assert_eq!(names.len(), THREADS * FILES);
    for t in 0..THREADS {
        for i in 0..FILES {
            assert!(names.contains(format!("t{t}-{i}").as_bytes()), "t{t}-{i}");
        }
    }
}

/// Readers of a file in a crowd with a writer that rewrites it whole: every read sees
/// one whole version (the lock's readers and writer exclude each other), and all end.
#[test]
fn a_hundred_threads_reading_one_file_beside_a_writer_see_whole_versions() {
    let _w = lynxfs_test_support::watchdog("reading_one_file", LIMIT);
    const READERS: usize = 100;
    const SIZE: usize = 12 << 10;
    let fs = fs(64 << 20);
    let s = fs.session(Cred::root());
    let w = s.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    fs.pwrite(w, &[0u8; SIZE], 0).unwrap();
    let go = Barrier::new(READERS + 1);
    std::thread::scope(|sc| {
        let (fs, s, go) = (&fs, &s, &go);
        sc.spawn(move || {
            go.wait();
            for v in 1..=200u8 {
                fs.pwrite(w, &[v; SIZE], 0).unwrap();
            }
        });
        for _ in 0..READERS {
            sc.spawn(move || {
                go.wait();
                let mut buf = vec![0u8; SIZE];
                for _ in 0..100 {
                    let fd = s.open("/f", libc::O_RDONLY, 0).unwrap();
                    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), SIZE);
                    assert!(buf.iter().all(|&b| b == buf[0]), "a torn read");
                    fs.close_fd(fd).unwrap();
                }
            });
        }
    });
    fs.close_fd(w).unwrap();
}
