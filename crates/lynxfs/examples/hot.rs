//! Quick per-operation timings of the metadata hot path through the library, for
//! profiling (`perf record`, `valgrind --tool=callgrind`). The benchmark suites in
//! `lynxfs bench` are the measurements of record.
use std::time::Instant;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let mut o = MkfsOptions::new(1 << 30);
    o.lanes = 2;
    let fs = Fs::in_memory(&o, PmemBackend::default()).expect("pool");
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("/d/f{i}")).collect();
    let renamed: Vec<String> = (0..n).map(|i| format!("/d/g{i}")).collect();
    for round in 0..2 {
        let t = Instant::now();
        for p in &names {
            let fd = s
                .open(p, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644)
                .unwrap();
            fs.close_fd(fd).unwrap();
        }
        let create = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = Instant::now();
        for p in &names {
            s.stat(p).unwrap();
        }
        let stat = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = Instant::now();
        for (a, b) in names.iter().zip(&renamed) {
            s.rename(a, b, 0).unwrap();
        }
        let rename = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = Instant::now();
        for p in &renamed {
            s.unlink(p).unwrap();
        }
        let unlink = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = Instant::now();
        for p in &names {
            s.mkdir(p, 0o755).unwrap();
        }
        let mkdir = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = Instant::now();
        for p in &names {
            s.rmdir(p).unwrap();
        }
        let rmdir = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!(
            "round {round}: create {create:.2} stat {stat:.2} rename {rename:.2} unlink {unlink:.2} mkdir {mkdir:.2} rmdir {rmdir:.2} (us/op)"
        );
    }
}
