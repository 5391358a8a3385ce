//! `lynxfs info POOL|MOUNTPOINT`: what a pool is, how full, and (when processes are
//! attached to it) what its index and cachelets take in shared memory.
//!
//! A pool no process is attached to is opened read-only (mapped privately: the file is
//! never changed); it has no runtime state then. A pool attached elsewhere is
//! attached by `info` too, for a moment (a second attach is cheap: the state is
//! built), which gives the shared index's figures and the number of attached
//! processes. A mounted pool's figures also come from its daemon, through the mount
//! ([`lynxfs_fuse::usage`]): given the pool, the mount is found in
//! /proc/self/mountinfo; given the mount point, it is asked directly.

use std::path::Path;

use anyhow::{bail, Context, Result};
use lynxfs::alloc::NodeUsage;
use lynxfs::pmem::{Backend, MsyncBackend, PmemBackend};
use lynxfs::runtime::procs::MAX_PROCS;
use lynxfs::{Access, Error, Fs, Pool};
use lynxfs_fuse::usage::{LiveUsage, USAGE_XATTR};

use crate::backend::BackendKind;
use crate::mount::{mountpoint_of_pool, pool_at};

pub fn print(path: &Path, kind: BackendKind) -> Result<()> {
    if path.is_dir() {
        let mp = path
            .canonicalize()
            .with_context(|| format!("{}", path.display()))?;
        let pool = pool_at(&mp).map_err(|e| not_a_mount_hint(e, &mp))?;
        return print_live(&pool, &mp, kind);
    }
    // A read-only mount holds the pool's lock shared, so the pool would open here too:
    // ask the mount first.
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if let Some(mp) = mountpoint_of_pool(&canonical) {
        return print_live(&canonical, &mp, kind);
    }
    if let Some(view) = attached_view(path, kind)? {
        return print_attached(path, &view);
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
    println!("NUMA nodes:       {}", sb.geo.nodes);
    println!("data mode:        {}", pool.data_mode());
    println!(
        "reserved:         {}% for root ({} blocks, {} inodes, {} dentries; mkfs --reserved)",
        sb.reserved_percent,
        pool.alloc.blocks.reserved(),
        pool.alloc.inodes.reserved(),
        pool.alloc.dentries.reserved()
    );
    println!(
        "mapping:          {}",
        if dax {
            "MAP_SHARED_VALIDATE|MAP_SYNC (DAX)"
        } else {
            "MAP_SHARED (not DAX)"
        }
    );
    println!(
        "durability:       {backend_name} (chosen each time the pool is opened, by where \
         it lives or by --backend / -o backend=; not recorded in the pool)"
    );
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
    print_nodes(&pool.alloc.node_usage(&pool.layout));
    println!(
        "index, cachelets: none (they live in shared memory while processes are attached: \
         `lynxfs info` then shows them)"
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

/// One line per NUMA node of a pool that spans more than one: what each node's part of
/// the inode and dentry tables and of the data area holds.
fn print_nodes(nodes: &[NodeUsage]) {
    if nodes.len() < 2 {
        return;
    }
    for (k, n) in nodes.iter().enumerate() {
        println!(
            "{:<18}inodes {}/{} used, dentries {}/{} used, data blocks {}/{} used",
            format!("node {k}:"),
            n.inodes_used,
            n.inodes_total,
            n.dentries_used,
            n.dentries_total,
            n.blocks_used,
            n.blocks_total
        );
    }
}

/// Asks the daemon serving `mountpoint` for its figures.
fn live_usage(mountpoint: &Path) -> Result<LiveUsage> {
    let raw = xattr::get(mountpoint, USAGE_XATTR)
        .with_context(|| {
            format!(
                "asking the daemon of {} for its usage{}",
                mountpoint.display(),
                " (only the user who mounted it and root may)"
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

/// What an attached pool's shared state holds, seen by attaching to it.
struct AttachedView {
    /// Processes attached, `info` included.
    processes: usize,
    usage: lynxfs::meta::Usage,
    /// What each NUMA node's lanes hold.
    nodes: Vec<NodeUsage>,
    /// The runtime file's allocated bytes (all shared state), if it could be read.
    runtime_bytes: Option<u64>,
}

/// Attaches `path` for a moment if another process is attached to it (never builds the
/// runtime state of an unattached pool); `None` when no one else is attached.
fn attached_view(path: &Path, kind: BackendKind) -> Result<Option<AttachedView>> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    // Non-blocking: opening a FIFO must not wait for a writer. What is not a pool file
    // or device (or cannot be opened) is left to the read-only open, which says why.
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    else {
        return Ok(None);
    };
    let kind_ok = file
        .metadata()
        .is_ok_and(|m| m.is_file() || m.file_type().is_block_device());
    if !kind_ok {
        return Ok(None);
    }
    let elsewhere = lynxfs::runtime::attach::attached_elsewhere(&file)
        .with_context(|| format!("{}: looking for attached processes", path.display()))?;
    if !elsewhere {
        return Ok(None);
    }
    let view = match kind {
        BackendKind::Pmem => view_with(path, PmemBackend::default()),
        BackendKind::Msync => view_with(path, MsyncBackend),
    };
    Ok(Some(view.with_context(|| {
        format!("{}: attaching to read its shared state", path.display())
    })?))
}

fn view_with<B: Backend>(path: &Path, backend: B) -> lynxfs::Result<AttachedView> {
    let fs = Fs::new(Pool::open(path, Access::ReadWrite, backend)?);
    let processes = fs.pool().attachment().map_or(1, |a| {
        (0..MAX_PROCS).filter(|&s| a.procs().alive(s)).count()
    });
    let view = AttachedView {
        processes,
        usage: fs.ns().usage(),
        nodes: fs.pool().alloc.node_usage(&fs.pool().layout),
        runtime_bytes: fs
            .pool()
            .attachment()
            .and_then(|a| a.region().allocated_bytes()),
    };
    fs.close()?;
    Ok(view)
}

/// `bytes` over `n` entries, as ", X B each" (nothing for no entries).
fn per_entry(bytes: u64, n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(", {:.0} B each", bytes as f64 / n as f64)
    }
}

/// The shared-memory lines of an attached pool's view.
fn print_shared(view: &AttachedView) {
    let u = &view.usage;
    println!(
        "attached:         {} processes (this one included)",
        view.processes
    );
    println!(
        "DRAM per entry:   {} (index estimate, shared memory; {} entries indexed)",
        if u.index_entries == 0 {
            "n/a".to_string()
        } else {
            format!("{:.0} B", u.index_bytes as f64 / u.index_entries as f64)
        },
        u.index_entries
    );
    if let Some(b) = view.runtime_bytes {
        println!(
            "runtime state:    {:.2} MiB of shared memory in all (index, cachelets, \
             allocators, process tables{})",
            mib(b),
            per_entry(b, u.index_entries).replace(" each", " per indexed entry")
        );
    }
}

/// The index and the cachelets: shared memory of the pool's runtime state.
fn print_runtime(u: &lynxfs::meta::Usage) {
    println!(
        "index:            {} entries of {} directories, {:.2} MiB of shared memory \
         (estimate{})",
        u.index_entries,
        u.indexed_dirs,
        mib(u.index_bytes),
        per_entry(u.index_bytes, u.index_entries)
    );
    println!(
        "cachelets:        {} in use, {:.2} MiB of shared memory (at most)",
        u.cachelets,
        mib(u.cachelet_bytes)
    );
}

fn print_attached(pool: &Path, view: &AttachedView) -> Result<()> {
    let u = &view.usage;
    println!("pool:             {}", pool.display());
    println!("state:            attached by another process, not mounted");
    print_space(u);
    print_nodes(&view.nodes);
    print_runtime(u);
    print_shared(view);
    Ok(())
}

fn print_live(pool: &Path, mountpoint: &Path, kind: BackendKind) -> Result<()> {
    let live = live_usage(mountpoint)?;
    let u = &live.usage;
    println!("pool:             {}", pool.display());
    println!("state:            mounted on {}", mountpoint.display());
    // A read-only mount works on a private copy: nothing is attached then (and its
    // figures per node are not shown).
    let view = attached_view(pool, kind)?;
    print_space(u);
    if let Some(view) = &view {
        print_nodes(&view.nodes);
    }
    print_runtime(u);
    println!(
        "daemon memory:    {:.1} MiB resident (anonymous)",
        mib(live.rss_anon)
    );
    if let Some(t) = live.transport {
        println!("FUSE transport:   {}", t.name());
    }
    if let Some(view) = &view {
        print_shared(view);
    }
    Ok(())
}

/// A directory that is not a LynxFS mount point: the user may have meant a pool, so
/// say what `info` takes and which pools are mounted now.
fn not_a_mount_hint(e: anyhow::Error, dir: &Path) -> anyhow::Error {
    let mounted: Vec<String> = lynxfs_fuse::mountinfo::mounts()
        .into_iter()
        .filter(|m| m.fstype == "fuse.lynxfs" || m.fstype == "fuse")
        .map(|m| format!("{} on {}", m.source, m.mountpoint))
        .collect();
    let now = if mounted.is_empty() {
        "no pool is mounted now".to_string()
    } else {
        format!("mounted now: {}", mounted.join(", "))
    };
    e.context(format!(
        "{} is a directory: `lynxfs info` takes a pool file (such as {}) or the \
         directory a pool is mounted on ({now})",
        dir.display(),
        crate::DEFAULT_POOL
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lynxfs::{Cred, MkfsOptions};

    #[test]
    fn an_attached_pool_is_seen_by_attaching_and_an_unattached_one_is_left_alone() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let path = dir.path().join("pool");
        Pool::mkfs(&path, &MkfsOptions::new(64 << 20), PmemBackend::default()).unwrap();
        assert!(attached_view(&path, BackendKind::Pmem).unwrap().is_none());

        let fs = Fs::open(&path).unwrap();
        let s = fs.session(Cred::root());
        s.mkdir("d", 0o755).unwrap();
        for i in 0..50 {
            s.mknod(format!("d/f{i}"), libc::S_IFREG | 0o644, 0)
                .unwrap();
        }
        let view = attached_view(&path, BackendKind::Pmem).unwrap().unwrap();
        assert_eq!(view.processes, 2, "this test's Fs and info's attach");
        assert!(view.usage.index_entries >= 51, "{:?}", view.usage);
        assert!(view.usage.index_bytes > 0);
        assert!(view.runtime_bytes.unwrap() > 0);
        let inodes: u64 = view.nodes.iter().map(|n| n.inodes_used).sum();
        assert_eq!(inodes, 52, "the root, d and 50 files, counted by node");
        // info detached again: the pool's owner is alone and works on.
        assert!(s.lstat("d/f49").is_ok());
        drop(s);
        fs.close().unwrap();
        drop(fs);
        assert!(attached_view(&path, BackendKind::Pmem).unwrap().is_none());
    }

    #[test]
    fn a_fifo_or_a_missing_file_is_left_to_the_read_only_open() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Returns at once (no writer needed) and attaches nothing.
        assert!(attached_view(&fifo, BackendKind::Pmem).unwrap().is_none());
        let missing = dir.path().join("missing");
        assert!(attached_view(&missing, BackendKind::Pmem)
            .unwrap()
            .is_none());
    }

    #[test]
    fn per_entry_figures() {
        assert_eq!(per_entry(100, 0), "");
        assert_eq!(per_entry(6400, 100), ", 64 B each");
    }
}
