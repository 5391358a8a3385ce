//! `lynxfs mkfs`: make a pool file, or format a block device.

use std::path::Path;

use anyhow::{bail, Context, Result};
use lynxfs::format::layout::MAX_LANES;
use lynxfs::format::superblock::MAX_RESERVED_PERCENT;
use lynxfs::pmem::{Backend, MsyncBackend, PmemBackend};
use lynxfs::{MkfsOptions, Pool};

use crate::backend::BackendKind;
use crate::progress::Bar;

/// What `lynxfs mkfs` was asked for.
pub struct Request<'a> {
    pub pool: &'a Path,
    pub size: Option<u64>,
    pub lanes: Option<u32>,
    pub inodes: Option<u64>,
    /// NUMA nodes; default: the machine's.
    pub nodes: Option<u32>,
    pub force: bool,
    pub backend: Option<BackendKind>,
    /// The pool's default data mode.
    pub data: lynxfs::DataMode,
    /// Owner of the root directory; default: the caller.
    pub root_owner: Option<(u32, u32)>,
    /// Percent held back for root.
    pub reserved: u32,
    /// A hybrid pool's data device (or file).
    pub data_device: Option<&'a Path>,
    /// The data device's size; default: see `MkfsOptions::device_size`.
    pub device_size: Option<u64>,
}

/// `UID:GID`, both numeric, for `--root-owner`.
pub fn parse_owner(s: &str) -> std::result::Result<(u32, u32), String> {
    let bad = || format!("{s:?}: expected UID:GID, two numbers (e.g. 1000:1000)");
    let (u, g) = s.split_once(':').ok_or_else(bad)?;
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

pub fn run(r: &Request<'_>) -> Result<()> {
    let device = match r.pool.exists() {
        true => Pool::<PmemBackend>::device_size(r.pool)?,
        false => None,
    };
    let size = r.size.or(device).unwrap_or(1 << 30);
    let mut opts = MkfsOptions::new(size);
    if let Some(n) = r.nodes {
        opts.nodes = Some(n);
        // One lane per CPU, rounded up so that every node gets as many (a bad count
        // is refused by mkfs, with its reason).
        opts.lanes = lynxfs::pool::default_lanes().div_ceil(n.max(1)) * n.max(1);
    }
    if let Some(l) = r.lanes {
        if !(1..=MAX_LANES).contains(&l) {
            bail!("--lanes {l}: must be 1 to {MAX_LANES}");
        }
        opts.lanes = l;
    }
    if r.reserved > MAX_RESERVED_PERCENT {
        bail!(
            "--reserved {}: must be 0 to {MAX_RESERVED_PERCENT} (percent)",
            r.reserved
        );
    }
    opts.reserved_percent = r.reserved;
    opts.inodes = r.inodes;
    opts.force = r.force;
    opts.data = r.data;
    opts.data_device = r.data_device.map(Path::to_path_buf);
    opts.device_size = r.device_size;
    if let Some(owner) = r.root_owner {
        opts.root_owner = owner;
    }
    // The pool's own durability rules from the first store: on a disk (or a device
    // without DAX) mkfs's fences must be msyncs, or a power cut could leave a
    // superblock on the medium over tables that never got there.
    match BackendKind::pick(r.backend, r.pool) {
        BackendKind::Pmem => format(r.pool, &opts, PmemBackend::default()),
        BackendKind::Msync => format(r.pool, &opts, MsyncBackend),
    }?;
    let what = if device.is_some() {
        "formatted"
    } else {
        "created"
    };
    println!("{what} {} ({size} bytes)", r.pool.display());
    if let Some(d) = r.data_device {
        println!("file data on {}", d.display());
    }
    Ok(())
}

fn format<B: Backend>(pool: &Path, opts: &MkfsOptions, backend: B) -> Result<()> {
    let bar = Bar::new();
    let made = Pool::mkfs_with_progress(pool, opts, backend, &bar);
    bar.finish();
    // The engine's errors name the pool already.
    made.context("mkfs")
}
