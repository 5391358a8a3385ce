//! Page faults and time per operation on a fresh pool, round by round (issue 29):
//! `cargo run --release -p lynxfs --example first_touch -- [FILES] [ROUNDS] [DIR]
//! [populate]`. The pool is made in DIR (default /dev/shm) as `lynxfs bench` makes its
//! lib target's (4 GiB, 2^20 inodes); `populate` calls `Pool::populate` after the open.
//! Each round creates FILES files, stats and unlinks them; it prints microseconds and
//! minor faults per operation, and the pages each mapping (pool, runtime region) gained.
use std::path::{Path, PathBuf};
use std::time::Instant;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};

fn minor_faults() -> i64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given; checked before reading.
    unsafe {
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()), 0);
        u.assume_init().ru_minflt
    }
}

/// Resident kB of the mappings whose path contains `pool` and of the runtime region
/// (a `.run` file in /dev/shm), from /proc/self/smaps.
fn resident_kb(pool: &Path) -> (u64, u64) {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let pool = pool.to_string_lossy();
    let (mut p, mut r, mut which) = (0, 0, 0);
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            which = if line.contains(pool.as_ref()) {
                1
            } else if line.contains("/lynxfs-") && line.contains(".run") {
                2
            } else {
                0
            };
            continue;
        }
        if let Some(v) = line.strip_prefix("Rss:") {
            let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap();
            match which {
                1 => p += kb,
                2 => r += kb,
                _ => {}
            }
        }
    }
    (p, r)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = args.next().unwrap_or_else(|| "/dev/shm".into());
    let populate = args.next().is_some_and(|a| a == "populate");
    let path = PathBuf::from(format!("{dir}/first-touch-{}.pool", std::process::id()));
    let mut o = MkfsOptions::new(4 << 30);
    o.inodes = Some(1 << 20);
    Pool::mkfs(&path, &o, PmemBackend::default()).expect("mkfs");
    let (f0, t0) = (minor_faults(), Instant::now());
    let fs = Fs::open(&path).expect("open");
    if populate {
        fs.pool().populate();
    }
    let (kp, kr) = resident_kb(&path);
    println!(
        "open{}: {:.0} us, {} minor faults; resident pool {kp} kB, runtime region {kr} kB",
        if populate { " and populate" } else { "" },
        t0.elapsed().as_secs_f64() * 1e6,
        minor_faults() - f0
    );
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("/d/f{i}")).collect();
    for round in 0..rounds {
        let mut line = format!("round {round}:");
        let (kp0, kr0) = resident_kb(&path);
        let mut step = |name: &str, f: &dyn Fn(&str)| {
            let (f0, t0) = (minor_faults(), Instant::now());
            names.iter().for_each(|p| f(p));
            let us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
            let faults = (minor_faults() - f0) as f64 / n as f64;
            line += &format!(" {name} {us:.2} us {faults:.2} faults/op;");
        };
        step("create", &|p| {
            let fd = s.create(p, 0o644).unwrap();
            fs.close_fd(fd).unwrap();
        });
        step("stat", &|p| {
            s.stat(p).unwrap();
        });
        step("unlink", &|p| s.unlink(p).unwrap());
        let (kp1, kr1) = resident_kb(&path);
        println!(
            "{line} new resident pages: pool {}, runtime region {}",
            (kp1 - kp0) / 4,
            (kr1 - kr0) / 4
        );
    }
    drop(s);
    drop(fs);
    let _ = std::fs::remove_file(&path);
}
