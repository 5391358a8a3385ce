//! `lynxfs info [--json] POOL|MOUNTPOINT`: what a pool is, how full, and (when
//! processes are attached to it) what its index and cachelets take in shared memory.
//!
//! A pool no process is attached to is opened read-only (mapped privately: the file is
//! never changed); it has no runtime state then. A pool attached elsewhere is
//! attached by `info` too, for a moment (a second attach is cheap: the state is
//! built), which gives the shared index's figures and the number of attached
//! processes. A mounted pool's figures also come from its daemon, through the mount
//! ([`lynxfs_fuse::usage`]): given the pool, the mount is found in
//! /proc/self/mountinfo; given the mount point, it is asked directly.
//!
//! What is found is gathered into an [`Info`], printed as text or, with `--json`, as
//! the object docs/JSON.md describes.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use lynxfs::alloc::NodeUsage;
use lynxfs::meta::Usage;
use lynxfs::pmem::{Backend, MsyncBackend, PmemBackend};
use lynxfs::runtime::procs::MAX_PROCS;
use lynxfs::{Access, Error, Fs, Pool};
use lynxfs_fuse::usage::{LiveUsage, USAGE_XATTR};

use crate::backend::BackendKind;
use crate::mount::{mountpoint_of_pool, pool_at};

/// Everything `info` found about one pool.
struct Info {
    pool: PathBuf,
    state: State,
    /// The superblock's figures: for a pool no process holds (the others hold it open).
    format: Option<Format>,
    usage: Usage,
    /// Whether `usage` has the index and cachelet figures (runtime state exists).
    runtime: bool,
    nodes: Vec<NodeUsage>,
    daemon: Option<LiveUsage>,
    shared: Option<Shared>,
}

enum State {
    Clean,
    NotClean,
    Attached,
    Mounted(PathBuf),
}

struct Format {
    version: u32,
    size: u64,
    lanes: u32,
    nodes: u32,
    data_mode: String,
    reserved_percent: u32,
    reserved_blocks: u64,
    reserved_inodes: u64,
    reserved_dentries: u64,
    dax: bool,
    backend: BackendKind,
    durability: String,
    mount_epoch: u64,
    /// A hybrid pool's data device.
    device: Option<DeviceInfo>,
}

/// A hybrid pool's data device, as its header says.
struct DeviceInfo {
    path: PathBuf,
    id: String,
    data_off: u64,
    data_len: u64,
    export_off: u64,
    export_len: u64,
    version: u32,
}

impl DeviceInfo {
    fn of<B: Backend>(pool: &Pool<B>) -> Option<DeviceInfo> {
        let (dev, h) = (pool.device()?, pool.device_header()?);
        Some(DeviceInfo {
            path: dev.path().to_path_buf(),
            id: lynxfs::format::device::uuid_text(&h.device_uuid),
            data_off: h.data_off,
            data_len: h.data_len,
            export_off: h.export_off,
            export_len: h.export_len,
            version: h.version,
        })
    }
}

/// The shared state of an attached pool, seen by attaching to it.
struct Shared {
    /// Processes attached, `info` included.
    processes: usize,
    /// The runtime file's allocated bytes (all shared state), if it could be read.
    runtime_bytes: Option<u64>,
    /// The full-path areas: each process keeps its own (these are `info`'s), all
    /// validated against the shared epoch.
    areas: lynxfs::meta::areas::Summary,
    areas_on: bool,
    evolution_on: bool,
}

/// What `info DEVICE` says of a data device and the export it looks at.
pub struct ExportFacts<'a> {
    pub device: &'a lynxfs::format::device::DeviceHeader,
    pub export: &'a lynxfs::pool::export::ExportHeader,
    /// The pool was opened read-write since this export.
    pub stale: bool,
}

/// `lynxfs info DEVICE`: the data device at `device`, and the pool its export holds,
/// imported into `pool` (a temporary pool) for the look. The report names the device.
pub fn print_device(
    device: &Path,
    facts: &ExportFacts<'_>,
    pool: &Path,
    kind: BackendKind,
    json: bool,
) -> Result<()> {
    let mut info = gather(pool, kind)?;
    info.pool = device.to_path_buf();
    let uuid = lynxfs::format::device::uuid_text;
    let (d, e) = (facts.device, facts.export);
    if json {
        let mut v = info.to_json();
        v["device"] = serde_json::json!({
            "id": uuid(&d.device_uuid),
            "pool_id": uuid(&d.pool_uuid),
            "export": {
                "generation": e.generation,
                "blocks": e.blocks,
                "exported_ns": e.exported_ns,
                "stale": facts.stale,
            },
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "data device:      {} (id {}), file data of pool {}",
        device.display(),
        uuid(&d.device_uuid),
        uuid(&d.pool_uuid)
    );
    println!(
        "its export:       generation {}, {} blocks ({:.1} MiB){}; the pool it holds:",
        e.generation,
        e.blocks,
        mib(e.image_len),
        if facts.stale {
            " (stale: its pool was opened read-write since)"
        } else {
            ""
        }
    );
    info.print_text();
    Ok(())
}

pub fn print(path: &Path, kind: BackendKind, json: bool) -> Result<()> {
    let info = gather(path, kind)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info.to_json())?);
    } else {
        info.print_text();
    }
    Ok(())
}

fn gather(path: &Path, kind: BackendKind) -> Result<Info> {
    if path.is_dir() {
        let mp = path
            .canonicalize()
            .with_context(|| format!("{}", path.display()))?;
        let pool = pool_at(&mp).map_err(|e| not_a_mount_hint(e, &mp))?;
        return gather_live(&pool, &mp, kind);
    }
    // A read-only mount holds the pool's lock shared, so the pool would open here too:
    // ask the mount first.
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if let Some(mp) = mountpoint_of_pool(&canonical) {
        return gather_live(&canonical, &mp, kind);
    }
    if let Some(view) = attached_view(path, kind)? {
        return Ok(Info {
            pool: path.to_path_buf(),
            state: State::Attached,
            format: None,
            usage: view.usage,
            runtime: true,
            nodes: view.nodes,
            daemon: None,
            shared: Some(view.shared),
        });
    }
    let opened = match kind {
        BackendKind::Pmem => gather_closed(path, kind, PmemBackend::default()),
        BackendKind::Msync => gather_closed(path, kind, MsyncBackend),
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

/// What guards the pool's memory inside a preloaded program or a C API user on this
/// machine (docs/ARCHITECTURE.md, "The pool inside its host program").
fn protection_text() -> &'static str {
    if lynxfs::pmem::keys::supported() {
        "mappings sealed; protection keys on (stray stores of a preloaded program fault; \
         LYNXFS_PROTECT=0 turns both off)"
    } else {
        "mappings sealed; no protection keys on this CPU (stray stores are not caught; \
         LYNXFS_PROTECT=0 turns the seal off)"
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// A pool nobody holds, opened read-only.
fn gather_closed<B: Backend>(path: &Path, kind: BackendKind, backend: B) -> lynxfs::Result<Info> {
    let durability = backend.name();
    let pool = Pool::open(path, Access::ReadOnly, backend)?;
    let sb = pool.superblock();
    let dax = std::fs::File::open(path)
        .map(|f| lynxfs::pmem::dax_supported(&f))
        .unwrap_or(false);
    let info = Info {
        pool: path.to_path_buf(),
        state: if pool.was_clean {
            State::Clean
        } else {
            State::NotClean
        },
        format: Some(Format {
            version: sb.version,
            size: sb.geo.pool_size,
            lanes: sb.geo.lanes,
            nodes: sb.geo.nodes,
            data_mode: pool.data_mode().to_string(),
            reserved_percent: sb.reserved_percent,
            reserved_blocks: pool.alloc.blocks.reserved(),
            reserved_inodes: pool.alloc.inodes.reserved(),
            reserved_dentries: pool.alloc.dentries.reserved(),
            dax,
            backend: kind,
            durability,
            mount_epoch: sb.epoch - 1,
            device: DeviceInfo::of(&pool),
        }),
        usage: Usage::of_pool(&pool),
        runtime: false,
        nodes: pool.alloc.node_usage(&pool.layout),
        daemon: None,
        shared: None,
    };
    pool.crash(); // a read-only look: nothing to save
    Ok(info)
}

fn gather_live(pool: &Path, mountpoint: &Path, kind: BackendKind) -> Result<Info> {
    let live = live_usage(mountpoint)?;
    // A read-only mount works on a private copy: nothing is attached then (and its
    // figures per node are not known).
    let view = attached_view(pool, kind)?;
    let (nodes, shared) = match view {
        Some(v) => (v.nodes, Some(v.shared)),
        None => (Vec::new(), None),
    };
    Ok(Info {
        pool: pool.to_path_buf(),
        state: State::Mounted(mountpoint.to_path_buf()),
        format: None,
        usage: live.usage.clone(),
        runtime: true,
        nodes,
        daemon: Some(live),
        shared,
    })
}

impl Info {
    fn print_text(&self) {
        println!("pool:             {}", self.pool.display());
        if let Some(f) = &self.format {
            f.print_text();
        }
        println!("state:            {}", self.state_text());
        if let Some(f) = &self.format {
            println!("mount epoch:      {}", f.mount_epoch);
        }
        println!("host protection:  {}", protection_text());
        print_space(&self.usage);
        print_nodes(&self.nodes);
        if self.runtime {
            print_runtime(&self.usage);
        } else {
            println!(
                "index, cachelets: none (they live in shared memory while processes are \
                 attached: `lynxfs info` then shows them)"
            );
        }
        if let Some(live) = &self.daemon {
            println!(
                "daemon memory:    {:.1} MiB resident (anonymous)",
                mib(live.rss_anon)
            );
            if let Some(t) = live.transport {
                println!("FUSE transport:   {}", t.name());
            }
        }
        if let Some(shared) = &self.shared {
            print_shared(shared, &self.usage);
        }
    }

    fn state_text(&self) -> String {
        match &self.state {
            State::Clean => "clean, not mounted".into(),
            State::NotClean => "not clean (recovery runs at the next open; figures below are \
                                what it would find)"
                .into(),
            State::Attached => "attached by another process, not mounted".into(),
            State::Mounted(mp) => format!("mounted on {}", mp.display()),
        }
    }
}

impl Format {
    fn print_text(&self) {
        println!("format version:   {}", self.version);
        println!(
            "size:             {} bytes ({:.1} MiB)",
            self.size,
            mib(self.size)
        );
        println!("lanes:            {}", self.lanes);
        println!("NUMA nodes:       {}", self.nodes);
        println!("data mode:        {}", self.data_mode);
        println!(
            "reserved:         {}% for root ({} blocks, {} inodes, {} dentries; mkfs --reserved)",
            self.reserved_percent,
            self.reserved_blocks,
            self.reserved_inodes,
            self.reserved_dentries
        );
        println!(
            "mapping:          {}",
            if self.dax {
                "MAP_SHARED_VALIDATE|MAP_SYNC (DAX)"
            } else {
                "MAP_SHARED (not DAX)"
            }
        );
        println!(
            "durability:       {} (chosen each time the pool is opened, by where \
             it lives or by --backend / -o backend=; not recorded in the pool)",
            self.durability
        );
        match &self.device {
            None => println!("file data:        in the pool"),
            Some(d) => {
                println!(
                    "data device:      {} (id {}, header version {})",
                    d.path.display(),
                    d.id,
                    d.version
                );
                println!(
                    "device areas:     data {} bytes at {}, export {} bytes at {}",
                    d.data_len, d.data_off, d.export_len, d.export_off
                );
            }
        }
    }
}

fn print_space(u: &Usage) {
    let pool_blocks = if u.device_blocks_total > 0 {
        "pool blocks:      "
    } else {
        "data blocks:      "
    };
    println!(
        "{pool_blocks}{} used, {} free, {} total (4 KiB each)",
        u.blocks_total - u.blocks_free,
        u.blocks_free,
        u.blocks_total
    );
    if u.device_blocks_total > 0 {
        println!(
            "device blocks:    {} used, {} free, {} total (4 KiB each; file data)",
            u.device_blocks_total - u.device_blocks_free,
            u.device_blocks_free,
            u.device_blocks_total
        );
    }
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
    usage: Usage,
    /// What each NUMA node's lanes hold.
    nodes: Vec<NodeUsage>,
    shared: Shared,
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
        usage: fs.ns().usage(),
        nodes: fs.pool().alloc.node_usage(&fs.pool().layout),
        shared: Shared {
            processes,
            runtime_bytes: fs
                .pool()
                .attachment()
                .and_then(|a| a.region().allocated_bytes()),
            areas: fs.ns().areas.summary(),
            areas_on: fs.ns().mechanisms.areas(),
            evolution_on: fs.ns().mechanisms.evolution(),
        },
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

/// The shared-memory lines of an attached pool.
fn print_shared(shared: &Shared, u: &Usage) {
    println!(
        "attached:         {} processes (this one included)",
        shared.processes
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
    let a = &shared.areas;
    println!(
        "areas:            {} (each process keeps its own: this one has {} areas, {} \
         directories, labels {}); epoch {} (directory renames, removals and permission \
         changes since the runtime state was built); evolution {}",
        if shared.areas_on { "on" } else { "off" },
        a.areas.len(),
        a.areas.iter().map(|x| x.entries).sum::<usize>(),
        a.areas
            .iter()
            .map(|x| x.label.name())
            .collect::<Vec<_>>()
            .join(","),
        a.epoch,
        if shared.evolution_on { "on" } else { "off" },
    );
    if let Some(b) = shared.runtime_bytes {
        println!(
            "runtime state:    {:.2} MiB of shared memory in all (index, cachelets, \
             allocators, process tables{})",
            mib(b),
            per_entry(b, u.index_entries).replace(" each", " per indexed entry")
        );
    }
}

/// The index and the cachelets: shared memory of the pool's runtime state.
fn print_runtime(u: &Usage) {
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

/// The version of `info --json`'s schema (docs/JSON.md): raised when a field changes
/// meaning or goes away; new fields may appear without it.
pub const INFO_SCHEMA: &str = "lynxfs-info/1";

fn used_free_total(used: u64, total: u64) -> serde_json::Value {
    serde_json::json!({ "used": used, "free": total - used, "total": total })
}

impl Info {
    /// The object docs/JSON.md describes; every key is always there (null when not
    /// known for this state).
    fn to_json(&self) -> serde_json::Value {
        use serde_json::{json, Value};
        let keys = lynxfs::pmem::keys::supported();
        let u = &self.usage;
        let (state, mountpoint) = match &self.state {
            State::Clean => ("clean", None),
            State::NotClean => ("not_clean", None),
            State::Attached => ("attached", None),
            State::Mounted(mp) => ("mounted", Some(mp.display().to_string())),
        };
        let format = self.format.as_ref().map(|f| {
            json!({
                "version": f.version,
                "size_bytes": f.size,
                "lanes": f.lanes,
                "numa_nodes": f.nodes,
                "data_mode": f.data_mode,
                "reserved_percent": f.reserved_percent,
                "reserved": {
                    "blocks": f.reserved_blocks,
                    "inodes": f.reserved_inodes,
                    "dentries": f.reserved_dentries,
                },
                "dax": f.dax,
                "backend": match f.backend {
                    BackendKind::Pmem => "pmem",
                    BackendKind::Msync => "msync",
                },
                "durability": f.durability,
                "mount_epoch": f.mount_epoch,
                "data_device": f.device.as_ref().map(|d| json!({
                    "path": d.path.display().to_string(),
                    "id": d.id,
                    "version": d.version,
                    "data": { "offset": d.data_off, "bytes": d.data_len },
                    "export": { "offset": d.export_off, "bytes": d.export_len },
                })),
            })
        });
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .map(|n| {
                json!({
                    "blocks": used_free_total(n.blocks_used, n.blocks_total),
                    "inodes": used_free_total(n.inodes_used, n.inodes_total),
                    "dentries": used_free_total(n.dentries_used, n.dentries_total),
                })
            })
            .collect();
        json!({
            "schema": INFO_SCHEMA,
            "pool": self.pool.display().to_string(),
            // Filled in by `print_device` for a data device.
            "device": null,
            "state": state,
            "mountpoint": mountpoint,
            "protection_keys": keys,
            "format": format,
            "space": {
                "block_size": 4096,
                "blocks": used_free_total(u.blocks_total - u.blocks_free, u.blocks_total),
                "inodes": used_free_total(u.inodes_total - u.inodes_free, u.inodes_total),
                "dentries": used_free_total(u.dentries_total - u.dentries_free, u.dentries_total),
                "device_blocks": (u.device_blocks_total > 0).then(|| used_free_total(
                    u.device_blocks_total - u.device_blocks_free,
                    u.device_blocks_total,
                )),
            },
            "nodes": nodes,
            "index": self.runtime.then(|| json!({
                "entries": u.index_entries,
                "directories": u.indexed_dirs,
                "bytes": u.index_bytes,
            })),
            "cachelets": self.runtime.then(|| json!({
                "count": u.cachelets,
                "bytes": u.cachelet_bytes,
            })),
            "processes": self.shared.as_ref().map(|s| s.processes),
            "runtime_bytes": self.shared.as_ref().and_then(|s| s.runtime_bytes),
            "areas": self.shared.as_ref().map(|s| json!({
                "on": s.areas_on,
                "evolution": s.evolution_on,
                "epoch": s.areas.epoch,
                "count": s.areas.areas.len(),
                "areas": s.areas.areas.iter().map(|a| json!({
                    "root": a.root,
                    "directories": a.entries,
                    "label": a.label.name(),
                })).collect::<Vec<Value>>(),
            })),
            "daemon": self.daemon.as_ref().map(|d| json!({
                "rss_anon_bytes": d.rss_anon,
                "transport": d.transport.map(|t| t.name()),
            })),
        })
    }
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
        assert_eq!(view.shared.processes, 2, "this test's Fs and info's attach");
        assert!(view.usage.index_entries >= 51, "{:?}", view.usage);
        assert!(view.usage.index_bytes > 0);
        assert!(view.shared.runtime_bytes.unwrap() > 0);
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
