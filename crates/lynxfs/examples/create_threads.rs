//! CPU time per operation with one thread and with two, to attribute what two threads
//! creating files share (issue 16: creates that scale). Each case runs on a pool file
//! in /dev/shm opened as `lynxfs bench` opens it (attached: the runtime region, the
//! per-process open table), in one shared directory and in a directory per thread:
//!
//! - `create+close`: open(O_CREAT | O_EXCL) and close, as the bench's create;
//! - `ns create`: the namespace's create alone (no handle, no open reference);
//! - `open+close`: open and close of files that exist;
//! - `open ref`: the open reference alone (the per-process open table entry and the
//!   inode's open count, as an open and its close take and give back).
//!
//! `cargo run --release --example create_threads -- [FILES] [ROUNDS] [CASE] [THREADS]`
//! prints, per case (or only those whose label starts with CASE, and with THREADS only
//! that many threads: for `perf record`),
//! the median over the rounds of each thread's CPU time per operation (µs) with one
//! thread and with two (CPU time, not wall time, so a busy machine changes it little).
//! `perf record` on it shows where the second thread's extra time goes.
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use lynxfs::meta::NewNode;
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};

/// The calling thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What each thread does to each of its names.
#[derive(Clone, Copy, PartialEq)]
enum Case {
    CreateClose,
    NsCreate,
    OpenClose,
    OpenRef,
}

impl Case {
    fn label(self) -> &'static str {
        match self {
            Case::CreateClose => "create+close",
            Case::NsCreate => "ns create",
            Case::OpenClose => "open+close",
            Case::OpenRef => "open ref",
        }
    }
}

/// One thread's pass over its names; returns its CPU time.
fn pass(fs: &Fs<PmemBackend>, case: Case, names: &[String], inos: &[u64]) -> u64 {
    let s = fs.session(Cred::root());
    // The namespace's create takes the parent by number: looked up before the clock.
    let dir = names
        .first()
        .and_then(|p| p.rsplit_once('/'))
        .map(|(d, _)| d);
    let parent = dir.map_or(0, |d| s.stat(d).expect("dir").ino);
    let start = thread_cpu_ns();
    match case {
        Case::CreateClose => {
            for p in names {
                let fd = s
                    .open(p, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644)
                    .expect("create");
                fs.close_fd(fd).expect("close");
            }
        }
        Case::NsCreate => {
            for p in names {
                let (_, name) = p.rsplit_once('/').expect("a path in a directory");
                let node = NewNode {
                    mode: libc::S_IFREG | 0o644,
                    rdev: 0,
                    target: None,
                    umask: 0,
                };
                fs.ns()
                    .create(parent, name.as_bytes(), node, &Cred::root(), true)
                    .expect("create");
            }
        }
        Case::OpenClose => {
            for p in names {
                let fd = s.open(p, libc::O_RDONLY, 0).expect("open");
                fs.close_fd(fd).expect("close");
            }
        }
        Case::OpenRef => {
            for &ino in inos {
                let fd = fs.open_ino(ino, libc::O_RDONLY, &Cred::root(), false);
                fs.close_fd(fd.expect("open").fd).expect("close");
            }
        }
    }
    thread_cpu_ns() - start
}

/// One run's result: CPU µs per operation, and the threads' CPU time over the wall
/// time (near 2 when two threads really ran at once; a busy machine makes it less).
struct Run {
    cpu_us: f64,
    overlap: f64,
}

/// `threads` threads running `case`, each on its own names, in one directory
/// (`shared`) or one each.
fn run(fs: &Fs<PmemBackend>, case: Case, threads: usize, shared: bool, n: usize, tag: &str) -> Run {
    let s = fs.session(Cred::root());
    let names: Vec<Vec<String>> = (0..threads)
        .map(|t| {
            let dir = if shared {
                format!("/{tag}")
            } else {
                format!("/{tag}-{t}")
            };
            let _ = s.mkdir(&dir, 0o755);
            (0..n).map(|i| format!("{dir}/t{t}-{i}")).collect()
        })
        .collect();
    // Opening needs files that exist; the namespace's create alone needs none.
    let inos: Vec<Vec<u64>> = if matches!(case, Case::OpenClose | Case::OpenRef) {
        names
            .iter()
            .map(|ns| {
                ns.iter()
                    .map(|p| {
                        let fd = s.create(p, 0o644).expect("create");
                        let ino = fs.fd_ino(fd).expect("ino");
                        fs.close_fd(fd).expect("close");
                        ino
                    })
                    .collect()
            })
            .collect()
    } else {
        vec![Vec::new(); threads]
    };
    let cpu = AtomicU64::new(0);
    let wall = std::time::Instant::now();
    std::thread::scope(|sc| {
        for (names, inos) in names.iter().zip(&inos) {
            let cpu = &cpu;
            sc.spawn(move || cpu.fetch_add(pass(fs, case, names, inos), Ordering::Relaxed));
        }
    });
    let wall_ns = wall.elapsed().as_nanos() as f64;
    for p in names.iter().flatten() {
        s.unlink(p).expect("unlink");
    }
    let cpu = cpu.into_inner() as f64;
    Run {
        cpu_us: cpu / 1e3 / (n * threads) as f64,
        overlap: cpu / wall_ns,
    }
}

/// The median (NaN for no values: a thread count not run).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let only = args.next().unwrap_or_default();
    // With a fourth argument (1 or 2), only that many threads run: a profile of one
    // count alone (`perf record`, then compare the two).
    let counts: Vec<usize> = match args.next().and_then(|a| a.parse().ok()) {
        Some(t) => vec![t],
        None => vec![1, 2],
    };
    let path = Path::new("/dev/shm").join(format!("lynxfs-create-threads-{}", std::process::id()));
    let mut o = MkfsOptions::new(1 << 30);
    o.inodes = Some(1 << 18);
    Pool::mkfs(&path, &o, PmemBackend::default()).expect("mkfs");
    let fs = Fs::open(&path).expect("open the pool");
    println!("CPU µs per operation (median of {rounds} rounds, {n} names per thread)");
    let cases = [
        Case::CreateClose,
        Case::NsCreate,
        Case::OpenClose,
        Case::OpenRef,
    ];
    for case in cases.into_iter().filter(|c| c.label().starts_with(&only)) {
        for shared in [true, false] {
            let mut one = Vec::new();
            let mut two = Vec::new();
            let mut overlap = Vec::new();
            for r in 0..rounds {
                if counts.contains(&1) {
                    one.push(run(&fs, case, 1, shared, n, &format!("a{r}")).cpu_us);
                }
                if counts.contains(&2) {
                    let both = run(&fs, case, 2, shared, n, &format!("b{r}"));
                    two.push(both.cpu_us);
                    overlap.push(both.overlap);
                }
            }
            let (one, two, overlap) = (median(one), median(two), median(overlap));
            println!(
                "{:<13} {:<9} 1 thread {one:.2}  2 threads {two:.2}  ({:+.2}; {overlap:.2} CPUs busy)",
                case.label(),
                if shared { "one dir" } else { "two dirs" },
                two - one
            );
        }
    }
    drop(fs);
    let _ = std::fs::remove_file(&path);
}
