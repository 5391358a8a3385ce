//! `lynxfs info`: what a pool is and how full.

use std::path::Path;

use anyhow::Result;
use lynxfs::pmem::{Backend, MsyncBackend, PmemBackend};
use lynxfs::{Access, Pool};

use crate::backend::BackendKind;

pub fn print(path: &Path, kind: BackendKind) -> Result<()> {
    match kind {
        BackendKind::Pmem => print_with(path, PmemBackend::default()),
        BackendKind::Msync => print_with(path, MsyncBackend),
    }
}

fn print_with<B: Backend>(path: &Path, backend: B) -> Result<()> {
    let backend_name = backend.name();
    let pool = Pool::open(path, Access::ReadOnly, backend)?;
    let sb = pool.superblock();
    let l = &pool.layout;
    let dax = std::fs::File::open(path)
        .map(|f| lynxfs::pmem::dax_supported(&f))
        .unwrap_or(false);
    let blocks_free = pool.alloc.blocks.free_count();
    let inodes_total = l.total_inodes() - 1;
    let inodes_free = pool.alloc.inodes.free_count();
    let dentries_total = l.total_dentries() - 1;
    let dentries_free = pool.alloc.dentries.free_count();
    println!("pool:             {}", path.display());
    println!("format version:   {}", sb.version);
    println!(
        "size:             {} bytes ({:.1} MiB)",
        sb.geo.pool_size,
        sb.geo.pool_size as f64 / 1048576.0
    );
    println!("lanes:            {}", sb.geo.lanes);
    println!(
        "mapping:          {}",
        if dax {
            "MAP_SHARED_VALIDATE|MAP_SYNC (DAX)"
        } else {
            "MAP_SHARED (not DAX)"
        }
    );
    println!("durability:       {backend_name}");
    println!(
        "state:            {}",
        if pool.was_clean {
            "clean"
        } else {
            "not clean (recovery runs at the next open; figures below are what it would find)"
        }
    );
    println!("mount epoch:      {}", sb.epoch - 1);
    println!(
        "data blocks:      {} used, {} free, {} total (4 KiB each)",
        l.data_blocks - blocks_free,
        blocks_free,
        l.data_blocks
    );
    println!(
        "inodes:           {} used, {} free, {} total",
        inodes_total - inodes_free,
        inodes_free,
        inodes_total
    );
    println!(
        "dentries:         {} used, {} free, {} total",
        dentries_total - dentries_free,
        dentries_free,
        dentries_total
    );
    pool.crash(); // a read-only look: nothing to save
    Ok(())
}
