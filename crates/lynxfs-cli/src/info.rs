//! `lynxfs info POOL|MOUNTPOINT`: what a pool is, how full, and (when it is mounted)
//! what its index and cachelets take in the daemon's DRAM.
//!
//! A pool that is not mounted is opened read-only (mapped privately: the file is never
//! changed). A mounted pool is locked by its daemon, so its figures come from the
//! daemon, through the mount ([`lynxfs_fuse::usage`]): given the pool, the mount is
//! found in /proc/self/mountinfo; given the mount point, it is asked directly.

use std::path::Path;

use anyhow::{bail, Context, Result};
use lynxfs::pmem::{Backend, MsyncBackend, PmemBackend};
use lynxfs::{Access, Error, Pool};
use lynxfs_fuse::usage::{LiveUsage, USAGE_XATTR};

use crate::backend::BackendKind;
use crate::mount::{mountpoint_of_pool, pool_at};

pub fn print(path: &Path, kind: BackendKind) -> Result<()> {
    if path.is_dir() {
        let mp = path
            .canonicalize()
            .with_context(|| format!("{}", path.display()))?;
        let pool = pool_at(&mp)?;
        return print_live(&pool, &mp);
    }
    // A read-only mount holds the pool's lock shared, so the pool would open here too:
    // ask the mount first.
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if let Some(mp) = mountpoint_of_pool(&canonical) {
        return print_live(&canonical, &mp);
    }
    let opened = match kind {
        BackendKind::Pmem => print_with(path, PmemBackend::default()),
        BackendKind::Msync => print_with(path, MsyncBackend),
    };
    match opened {
        Err(Error::Locked { .. }) => bail!(
            "{}: in use by another process, and not mounted where this process can see it \
             (run `lynxfs info MOUNTPOINT`, or stop the process that holds it)",
            path.display()
        ),
        r => Ok(r?),
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn print_with<B: Backend>(path: &Path, backend: B) -> lynxfs::Result<()> {
    let backend_name = backend.name();
    let pool = Pool::open(path, Access::ReadOnly, backend)?;
    let sb = pool.superblock();
    let dax = std::fs::File::open(path)
        .map(|f| lynxfs::pmem::dax_supported(&f))
        .unwrap_or(false);
    println!("pool:             {}", path.display());
    println!("format version:   {}", sb.version);
    println!(
        "size:             {} bytes ({:.1} MiB)",
        sb.geo.pool_size,
        mib(sb.geo.pool_size)
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
            "clean, not mounted"
        } else {
            "not clean (recovery runs at the next open; figures below are what it would find)"
        }
    );
    println!("mount epoch:      {}", sb.epoch - 1);
    print_space(&lynxfs::meta::Usage::of_pool(&pool));
    println!(
        "index, cachelets: none (they live in DRAM while the pool is mounted: \
         `lynxfs info MOUNTPOINT` then shows them)"
    );
    pool.crash(); // a read-only look: nothing to save
    Ok(())
}

fn print_space(u: &lynxfs::meta::Usage) {
    println!(
        "data blocks:      {} used, {} free, {} total (4 KiB each)",
        u.blocks_total - u.blocks_free,
        u.blocks_free,
        u.blocks_total
    );
    println!(
        "inodes:           {} used, {} free, {} total",
        u.inodes_total - u.inodes_free,
        u.inodes_free,
        u.inodes_total
    );
    println!(
        "dentries:         {} used, {} free, {} total",
        u.dentries_total - u.dentries_free,
        u.dentries_free,
        u.dentries_total
    );
}

/// Asks the daemon serving `mountpoint` for its figures.
fn live_usage(mountpoint: &Path) -> Result<LiveUsage> {
    let raw = xattr::get(mountpoint, USAGE_XATTR)
        .with_context(|| {
            format!(
                "asking the daemon of {} for its usage",
                mountpoint.display()
            )
        })?
        .with_context(|| format!("{}: the daemon has no usage figures", mountpoint.display()))?;
    let text = String::from_utf8_lossy(&raw);
    LiveUsage::decode(&text).with_context(|| {
        format!(
            "{}: the daemon's usage figures are not understood (a different lynxfs version?)",
            mountpoint.display()
        )
    })
}

fn print_live(pool: &Path, mountpoint: &Path) -> Result<()> {
    let live = live_usage(mountpoint)?;
    let u = &live.usage;
    println!("pool:             {}", pool.display());
    println!("state:            mounted on {}", mountpoint.display());
    print_space(u);
    let per = |bytes: u64, n: u64| {
        if n == 0 {
            String::new()
        } else {
            format!(", {:.0} B each", bytes as f64 / n as f64)
        }
    };
    println!(
        "index:            {} entries of {} directories, {:.2} MiB of DRAM (estimate{})",
        u.index_entries,
        u.indexed_dirs,
        mib(u.index_bytes),
        per(u.index_bytes, u.index_entries)
    );
    println!(
        "cachelets:        {} in use, {:.2} MiB of DRAM allocated",
        u.cachelets,
        mib(u.cachelet_bytes)
    );
    println!(
        "daemon memory:    {:.1} MiB resident (anonymous)",
        mib(live.rss_anon)
    );
    Ok(())
}
