//! Directory log compaction (issue 27): listing and cold load of a directory filled
//! with 100,000 files and emptied to 10, against one that only ever held 10, through
//! the library on an in-memory pool. Two shrunk directories: one keeps its first 10
//! names (they share a log page), one keeps every 10,000th (one page each: compaction
//! moves no entry, so each survivor keeps its page). Listing: the mean of 2,000 full
//! readdirs, right after the removals and again after the directory's next load.
//! Each time is the lowest of 5 means. Cold load: the mean of 2,000 index evictions (`drop_index`, what a
//! remount leaves) each followed by the first stat of a name in the directory, less
//! the same with nothing to load. Run:
//! `cargo run -p lynxfs --profile ci --example dir_compaction`.
use std::time::Instant;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions};

const FILL: usize = 100_000;
const ROUNDS: usize = 2_000;

/// A directory: its path, the names made in it, and which of them are kept.
type Case = (&'static str, usize, fn(usize) -> bool);

/// The lowest of 5 means of `ROUNDS` calls of `f`, in microseconds (the machine is
/// shared: the lowest is the least disturbed).
fn best(mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..ROUNDS {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let mut o = MkfsOptions::new(512 << 20);
    o.lanes = 2;
    o.inodes = Some(2 * FILL as u64 + 1_000);
    let fs = Fs::in_memory(&o, PmemBackend::default()).expect("pool");
    let s = fs.session(Cred::root());
    let free = || fs.ns().statfs().blocks_free;
    let root = Cred::root();
    let list = |ino: u64| {
        best(|| {
            fs.ns().readdir(ino, 0, usize::MAX, &root).unwrap();
        })
    };
    let mut emptied = Vec::new();
    let dirs: [Case; 3] = [
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
        // Before anything evicts it: as the removals left it.
        emptied.push(list(s.stat(d).unwrap().ino));
    }
    // Nothing to load: the baseline a cold stat of the root pays anyway.
    let evict = best(|| {
        fs.ns().drop_index();
        s.stat("/small").unwrap();
    });
    let mut rows = Vec::new();
    for ((d, _, _), emptied) in dirs.into_iter().zip(emptied) {
        let ino = s.stat(d).unwrap().ino;
        assert_eq!(
            fs.ns().readdir(ino, 0, usize::MAX, &root).unwrap().len(),
            12
        );
        let name = format!("{d}/f0");
        let cold = best(|| {
            fs.ns().drop_index();
            s.stat(&name).unwrap();
        }) - evict;
        let reloaded = list(ino);
        rows.push((d, emptied, cold, reloaded));
    }
    let (_, list0, cold0, _) = rows[0];
    println!("(x: against /small; a load compacts what the removals' last check left)");
    for (d, emptied, cold, reloaded) in rows {
        println!(
            "{d:<15} listing {emptied:6.2} us ({:5.2}x)  cold load {cold:6.2} us ({:5.2}x)  \
             listing after a load {reloaded:6.2} us ({:5.2}x), {} pages",
            emptied / list0,
            cold / cold0,
            reloaded / list0,
            s.stat(d).unwrap().blocks / 8,
        );
    }
}
