//! `lynxfs demo`: make the default pool and run a short workload on it, printing what
//! it measured.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use lynxfs::pmem::PmemBackend;
use lynxfs::{Access, MkfsOptions, Pool};

pub fn run(path: &Path, size: u64) -> Result<()> {
    let mut opts = MkfsOptions::new(size);
    opts.force = true;
    let t = Instant::now();
    Pool::mkfs(path, &opts, PmemBackend::default())?;
    println!(
        "mkfs {} ({} MiB): {:.1} ms",
        path.display(),
        size >> 20,
        ms(t)
    );

    let t = Instant::now();
    let pool = Pool::open(path, Access::ReadWrite, PmemBackend::default())?;
    println!("open (clean):      {:.2} ms", ms(t));

    // Allocator round trips: the per-lane lists every create and write will use.
    let n = pool.alloc.inodes.free_count() as usize;
    let t = Instant::now();
    let mut got = Vec::with_capacity(n);
    for _ in 0..n {
        let lane = lynxfs::alloc::lane::current(pool.layout.lanes());
        got.push(pool.alloc.inodes.alloc(lane).expect("free inode"));
    }
    for i in got.drain(..) {
        pool.alloc.inodes.free(i);
    }
    println!(
        "inode alloc+free:  {:.0} ns per pair ({n} pairs)",
        ms(t) * 1e6 / n as f64
    );

    let t = Instant::now();
    pool.close()?;
    println!("close (clean):     {:.2} ms", ms(t));
    drop(pool);

    let pool = Pool::open(path, Access::ReadWrite, PmemBackend::default())?;
    pool.crash();
    let t = Instant::now();
    let pool = Pool::open(path, Access::ReadWrite, PmemBackend::default())?;
    println!("open (after crash, recovery): {:.2} ms", ms(t));
    pool.close()?;
    Ok(())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
