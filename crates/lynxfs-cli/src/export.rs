//! `lynxfs export POOL`, `lynxfs import DEVICE NEWPOOL`, `lynxfs umount --export`, and a
//! hybrid pool's data device used alone: `lynxfs fsck DEVICE` and `lynxfs mount DEVICE
//! DIR` (issue 28, "a disk that moves"; the format and its commit point:
//! `lynxfs::pool::export`, docs/CONSISTENCY.md "Exports").
//!
//! Without persistent memory, the device's export is imported into a temporary pool in
//! /dev/shm (DRAM), which is checked or mounted; a read-write mount exports it back to
//! the device when it ends and removes it. `lynxfs umount` waits for that (the
//! temporary pool's name says it is one: [`PMLESS_PREFIX`]).
//!
//! A stale export (its pool opened read-write since) is refused by all of them; with
//! `--stale`, `fsck DEVICE` and `mount -o ro DEVICE` look at it anyway, read-only, and
//! never export it back (that would hide the mark). `import` has no such flag: the
//! pool it makes is read-write, and its files' blocks may be another pool's now.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lynxfs::pmem::{MsyncBackend, PmemBackend};
use lynxfs::pool::export::{export_hybrid, DataDevice, Export, ExportReport, IfStale};

use crate::backend::BackendKind;

/// The file name prefix of a temporary pool serving a device without persistent
/// memory.
pub const PMLESS_PREFIX: &str = "lynxfs-pmless.";
/// Where temporary pools go: memory.
const SHM: &str = "/dev/shm";
/// How long `umount` waits for a mount without persistent memory to export.
pub const EXPORT_WAIT: Duration = Duration::from_secs(600);

/// `lynxfs export POOL`.
pub fn export(pool: &Path, kind: BackendKind) -> Result<()> {
    let start = Instant::now();
    let r = export_with(pool, kind)?;
    println!("{}", describe(pool, &r, start.elapsed()));
    Ok(())
}

fn export_with(pool: &Path, kind: BackendKind) -> Result<ExportReport> {
    let r = match kind {
        BackendKind::Pmem => export_hybrid(pool, PmemBackend::default()),
        BackendKind::Msync => export_hybrid(pool, MsyncBackend),
    };
    r.with_context(|| format!("exporting {}", pool.display()))
}

fn describe(pool: &Path, r: &ExportReport, took: Duration) -> String {
    let h = &r.header;
    format!(
        "{}: metadata exported to its data device: generation {} in slot {}, {} blocks \
         ({:.1} MiB) of a {} MiB pool, in {:.3} s",
        pool.display(),
        h.generation,
        h.slot,
        h.blocks,
        h.image_len as f64 / (1 << 20) as f64,
        h.pool_size >> 20,
        took.as_secs_f64()
    )
}

/// `lynxfs import DEVICE NEWPOOL`.
pub fn import(device: &Path, new_pool: &Path) -> Result<()> {
    let start = Instant::now();
    let what = || format!("importing {} into {}", device.display(), new_pool.display());
    let dev = DataDevice::open(device).with_context(what)?;
    let e =
        read_with_leftovers(&dev, |d| d.import(new_pool, IfStale::Refuse)).with_context(what)?;
    warn_skipped(&e, "imported");
    println!(
        "{}: pool rebuilt from {}'s export of generation {} ({} blocks), in {:.3} s",
        new_pool.display(),
        device.display(),
        e.header.generation,
        e.header.blocks,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Says why the newest export was passed over, if it was.
fn warn_skipped(e: &Export, used: &str) {
    if let Some(why) = &e.skipped {
        eprintln!("lynxfs: warning: the newest export was not usable ({why}); {used} an older one");
    }
}

/// `dev`'s export, or why not, mentioning the temporary pools that mounts of the
/// device without persistent memory left in /dev/shm (a session that crashed left the
/// device's export stale, and its metadata there).
fn read_with_leftovers(
    dev: &DataDevice,
    read: impl FnOnce(&DataDevice) -> lynxfs::Result<Export>,
) -> Result<Export> {
    let err = match read(dev) {
        Ok(e) => return Ok(e),
        Err(e) => anyhow::Error::from(e),
    };
    let prefix = format!(
        "{PMLESS_PREFIX}{}.",
        lynxfs::format::device::uuid_text(&dev.header.device_uuid)
    );
    let found: Vec<String> = std::fs::read_dir(SHM)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path().display().to_string())
        .collect();
    Err(match found.is_empty() {
        true => err,
        false => err.context(format!(
            "a mount of this device without persistent memory left its metadata in {}: if \
             that session ended without exporting, `lynxfs export` that pool",
            found.join(", ")
        )),
    })
}

/// Is `path` a data device (rather than a pool)?
pub fn is_device(path: &Path) -> bool {
    DataDevice::is_device(path)
}

/// A temporary pool in /dev/shm imported from a device, removed when dropped.
struct TempPool(PathBuf);

impl TempPool {
    /// `if_stale`: [`IfStale::Read`] only for a read-only look (`--stale`).
    fn import(device: &Path, if_stale: IfStale) -> Result<(TempPool, DataDevice)> {
        let dev = DataDevice::open(device).with_context(|| format!("{}", device.display()))?;
        let name = format!(
            "{PMLESS_PREFIX}{}.{}.pool",
            lynxfs::format::device::uuid_text(&dev.header.device_uuid),
            std::process::id()
        );
        let path = Path::new(SHM).join(name);
        let e = read_with_leftovers(&dev, |d| d.import(&path, if_stale))
            .with_context(|| format!("reading {}'s export", device.display()))?;
        warn_skipped(&e, "using");
        if e.stale {
            eprintln!(
                "lynxfs: warning: {}'s export (generation {}) is stale: its pool was opened \
                 read-write since, so files may show bytes of other files or of later \
                 writes; looking at it read-only",
                device.display(),
                e.header.generation
            );
        }
        Ok((TempPool(path), dev))
    }
}

impl Drop for TempPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `lynxfs fsck [--stale] DEVICE`: the device's export checked as a pool (read-only:
/// the check changes nothing on the device).
pub fn fsck_device(device: &Path, kind: BackendKind, json: bool, stale: bool) -> Result<ExitCode> {
    let (tmp, _) = TempPool::import(device, if_stale(stale))?;
    if !json {
        println!(
            "{}: checking its export, imported into {}",
            device.display(),
            tmp.0.display()
        );
    }
    Ok(crate::fsck::run(&tmp.0, false, kind, json))
}

fn if_stale(stale: bool) -> IfStale {
    match stale {
        true => IfStale::Read,
        false => IfStale::Refuse,
    }
}

/// `lynxfs mount [--stale] DEVICE DIR`: serves the device without persistent memory,
/// from a pool in /dev/shm imported from its export, exported back when a read-write
/// mount ends. `--stale` (a stale export) only with `-o ro`.
pub fn mount_device(
    device: &Path,
    mountpoint: &Path,
    foreground: bool,
    options: &[String],
    stale: bool,
) -> Result<()> {
    let read_only = crate::mount::read_only(options)?;
    if stale && !read_only {
        anyhow::bail!(
            "{}: --stale mounts a stale export read-only only (add -o ro): its files' \
             blocks may be another pool's now",
            device.display()
        );
    }
    let (tmp, _) = TempPool::import(device, if_stale(stale))?;
    crate::mount::mount(&tmp.0, mountpoint, foreground, options)?;
    if read_only {
        // Nothing changed: the device's export (or its stale mark) stays as it is.
        return Ok(());
    }
    // The mount has ended (in the daemon, when detached) and the pool is closed:
    // the device gets its metadata back, then the temporary pool goes.
    if let Err(e) = export_with(&tmp.0, BackendKind::pick(None, &tmp.0)) {
        // The metadata is only in the temporary pool now: keep it, where `umount`
        // looks.
        let kept = unexported(&tmp.0);
        std::fs::rename(&tmp.0, &kept)
            .with_context(|| format!("keeping {} as {}", tmp.0.display(), kept.display()))?;
        std::mem::forget(tmp);
        return Err(e.context(format!(
            "the metadata is kept in {}: run `lynxfs export` on it",
            kept.display()
        )));
    }
    Ok(())
}

/// Where a temporary pool whose export failed is kept.
fn unexported(pool: &Path) -> PathBuf {
    let mut name = pool.as_os_str().to_owned();
    name.push(".unexported");
    PathBuf::from(name)
}

/// `lynxfs umount --export DIR`, and `umount` of a mount without persistent memory: after
/// the unmount, export (or wait until the daemon has exported and removed its
/// temporary pool).
pub fn after_umount(source: &Path, export: bool) -> Result<()> {
    if is_pmless(source) {
        let start = Instant::now();
        while source.exists() {
            if start.elapsed() > EXPORT_WAIT {
                anyhow::bail!(
                    "{}: still exporting after {:?}",
                    source.display(),
                    EXPORT_WAIT
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let kept = unexported(source);
        if kept.exists() {
            anyhow::bail!(
                "the export to the data device failed; the metadata is kept in {}: run \
                 `lynxfs export {}`",
                kept.display(),
                kept.display()
            );
        }
        return Ok(());
    }
    if export {
        self::export(source, BackendKind::pick(None, source))?;
    }
    Ok(())
}

/// Is `pool` the temporary pool of a mount without persistent memory?
fn is_pmless(pool: &Path) -> bool {
    pool.parent() == Some(Path::new(SHM))
        && pool
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(PMLESS_PREFIX))
}
