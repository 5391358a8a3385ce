//! Per-call timings of the allocators (inodes, dentries, block runs) on a 1 GiB
//! layout with some background occupancy, printed in ns:
//! `cargo run --profile ci -p lynxfs --example alloc_timing [CALLS]`.
use std::time::Instant;

use lynxfs::alloc::{Allocators, UsedSets};
use lynxfs::format::{Geometry, Layout};

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let l = Layout::compute(Geometry::for_size(1 << 30, 2, None)).expect("layout");
    let a = Allocators::from_used(&l, &UsedSets::empty(&l));
    // Some background occupancy so searches are not trivially at word 0.
    let _keep: Vec<_> = (0..1000).map(|_| a.inodes.alloc(0).unwrap()).collect();
    let _keepb = a.blocks.alloc(0, 5000).unwrap();
    let ns = |t: Instant| t.elapsed().as_nanos() as f64 / f64::from(n);
    let t = Instant::now();
    for _ in 0..n {
        let i = a.inodes.alloc(0).unwrap();
        a.inodes.free(i);
    }
    println!("inode alloc+free: {:.1} ns", ns(t));
    let t = Instant::now();
    for _ in 0..n {
        let i = a.dentries.alloc(1).unwrap();
        a.dentries.free(i);
    }
    println!("dentry alloc+free: {:.1} ns", ns(t));
    for len in [1u64, 8, 100] {
        let t = Instant::now();
        for _ in 0..n {
            let r = a.blocks.alloc(0, len).unwrap();
            r.iter().for_each(|&(s, n)| a.blocks.free(s, n));
        }
        println!("blocks alloc({len})+free: {:.1} ns", ns(t));
    }
    let m = a.inodes.free_count();
    let t = Instant::now();
    for _ in 0..m {
        a.inodes.alloc(0).unwrap();
    }
    let per = t.elapsed().as_nanos() as f64 / m as f64;
    println!("inode alloc only, {m} until full (both lanes): {per:.1} ns");
    let t = Instant::now();
    let none = a.inodes.alloc(0);
    println!("inode alloc when full: {} ns", t.elapsed().as_nanos());
    assert!(
        none.is_none(),
        "an allocator with nothing free gave an inode"
    );
}
