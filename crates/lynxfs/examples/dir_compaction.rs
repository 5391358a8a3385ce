//! Directory log compaction (issue 27): listing and cold load of a directory filled
//! with 100,000 files and emptied to 10, against one that only ever held 10, through
//! the library on an in-memory pool. Two shrunk directories: one keeps its first 10
//! names (they share a log page), one keeps every 10,000th (one page each: compaction
//! moves no entry, so each survivor keeps its page). Listing: the mean of 2,000 full
//! readdirs. Cold load: the mean of 2,000 index evictions (`drop_index`, what a
//! remount leaves) each followed by the first stat of a name in the directory, less
//! the same with nothing to load. Run:
//! `cargo run -p lynxfs --profile ci --example dir_compaction`.
use std::time::Instant;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions};

const FILL: usize = 100_000;
const ROUNDS: usize = 2_000;

fn main() {
    let mut o = MkfsOptions::new(512 << 20);
    o.lanes = 2;
    o.inodes = Some(2 * FILL as u64 + 1_000);
    let fs = Fs::in_memory(&o, PmemBackend::default()).expect("pool");
    let s = fs.session(Cred::root());
    let free = || fs.ns().statfs().blocks_free;
    let dirs: [(&str, usize, fn(usize) -> bool); 3] = [
        ("/small", 10, |_| true),
        ("/shrunk-first", FILL, |i| i < 10),
        ("/shrunk-spread", FILL, |i| i % 10_000 == 0),
    ];
    for (d, n, keep) in dirs {
        s.mkdir(d, 0o755).unwrap();
        let before = free();
        for i in 0..n {
            fs.close_fd(s.create(format!("{d}/f{i}"), 0o644).unwrap())
                .unwrap();
        }
        let full = before - free();
        for i in (0..n).filter(|&i| !keep(i)) {
            s.unlink(format!("{d}/f{i}")).unwrap();
        }
        println!(
            "{d:<15} {n:>6} names, {} kept: log pages {full} when full, {} after",
            (0..n).filter(|&i| keep(i)).count(),
            before - free()
        );
    }
    let root = Cred::root();
    // Nothing to load: the baseline a cold stat of the root pays anyway.
    let t = Instant::now();
    for _ in 0..ROUNDS {
        fs.ns().drop_index();
        s.stat("/small").unwrap();
    }
    let evict = t.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;
    let mut rows = Vec::new();
    for (d, _, _) in dirs {
        let ino = s.stat(d).unwrap().ino;
        assert_eq!(
            fs.ns().readdir(ino, 0, usize::MAX, &root).unwrap().len(),
            12
        );
        let t = Instant::now();
        for _ in 0..ROUNDS {
            fs.ns().readdir(ino, 0, usize::MAX, &root).unwrap();
        }
        let list = t.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;
        let name = format!("{d}/f0");
        let t = Instant::now();
        for _ in 0..ROUNDS {
            fs.ns().drop_index();
            s.stat(&name).unwrap();
        }
        let cold = t.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64 - evict;
        rows.push((d, list, cold));
    }
    let (_, list0, cold0) = rows[0];
    for (d, list, cold) in rows {
        println!(
            "{d:<15} listing {list:6.2} us ({:.2}x)   cold load {cold:6.2} us ({:.2}x)",
            list / list0,
            cold / cold0
        );
    }
}
