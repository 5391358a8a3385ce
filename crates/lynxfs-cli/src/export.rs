//! `lynxfs export POOL`, `lynxfs import DEVICE NEWPOOL`, `lynxfs umount --export`, and a
//! hybrid pool's data device used alone: `lynxfs fsck DEVICE` and `lynxfs mount DEVICE
//! DIR` (issue 28, "a disk that moves"; the format and its commit point:
//! `lynxfs::pool::export`, docs/CONSISTENCY.md "Exports").
//!
//! Without persistent memory, the device's export is imported into a temporary pool in
//! /dev/shm (DRAM), which is checked or mounted; a read-write mount exports it back to
//! the device when it ends and removes it. `lynxfs umount` waits for that (the
//! temporary pool's name says it is one: [`PMLESS_PREFIX`]), and tells at once when
//! the daemon is gone without it (it holds a lock on the pool until it is done:
//! [`SERVING`]), saying how to recover the device.
//!
//! A stale export (its pool opened read-write since) is refused by all of them; with
//! `--stale`, `fsck DEVICE` and `mount -o ro DEVICE` look at it anyway, read-only, and
//! never export it back (that would hide the mark). `import` has no such flag: the
//! pool it makes is read-write, and its files' blocks may be another pool's now.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
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
/// How long `umount` waits for a mount without persistent memory to export (its
/// daemon alive: a daemon that is gone is noticed at once).
pub const EXPORT_WAIT: Duration = Duration::from_secs(600);
/// The byte of a temporary pool that the process serving it (the daemon of a mount
/// without persistent memory) holds with an OFD lock until it has exported and removed
/// the pool, or exits: `umount` tells a daemon still exporting from one that is gone.
/// (Bytes 0 to 3 are the engine's: `lynxfs::runtime::attach`.)
const SERVING: i64 = 64;

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
        // Only the caller's: anyone can make names in /dev/shm.
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == euid()))
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

/// A temporary pool in /dev/shm imported from a device (the header of the export it
/// came from, and whether that export is stale), removed when dropped.
struct TempPool(PathBuf, lynxfs::pool::export::ExportHeader, bool);

impl TempPool {
    /// `if_stale`: [`IfStale::Read`] only for a read-only look (`--stale`).
    fn import(device: &Path, if_stale: IfStale) -> Result<(TempPool, DataDevice)> {
        let dev = DataDevice::open(device).with_context(|| format!("{}", device.display()))?;
        let uuid = lynxfs::format::device::uuid_text(&dev.header.device_uuid);
        // A name nobody can predict, and another drawn if it is taken (anyone can make
        // names in /dev/shm: one planted there must not stop the mount).
        let mut tries = 0;
        let (path, e) = loop {
            let path = Path::new(SHM).join(format!("{PMLESS_PREFIX}{uuid}.{}.pool", random_hex()?));
            match dev.import(&path, if_stale) {
                Err(lynxfs::Error::Exists { .. }) if tries < 16 => tries += 1,
                r => {
                    let e = read_with_leftovers(&dev, |_| r)
                        .with_context(|| format!("reading {}'s export", device.display()))?;
                    break (path, e);
                }
            }
        };
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
        Ok((TempPool(path, e.header, e.stale), dev))
    }
}

impl Drop for TempPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `lynxfs fsck [--stale] DEVICE`: the device's export checked as a pool (read-only:
/// the check changes nothing on the device).
/// Reported as the device's (docs/JSON.md): an error that stops the check before it
/// starts too (exit code 8, in the JSON object with `--json`).
pub fn fsck_device(device: &Path, kind: BackendKind, json: bool, stale: bool) -> Result<ExitCode> {
    let tmp = match TempPool::import(device, if_stale(stale)) {
        Ok((tmp, _)) => tmp,
        Err(e) => return Ok(crate::fsck::failed(device, false, json, format!("{e:#}"))),
    };
    if !json {
        println!(
            "{}: checking its export, imported into {}",
            device.display(),
            tmp.0.display()
        );
    }
    Ok(crate::fsck::run_as(&tmp.0, device, false, kind, json))
}

/// `lynxfs info DEVICE`: a data device, and the pool its newest export holds (imported
/// into a temporary pool for the look, a stale export included: nothing is written).
pub fn info_device(device: &Path, kind: BackendKind, json: bool) -> Result<()> {
    let (tmp, dev) = TempPool::import(device, IfStale::Read)?;
    let export = crate::info::ExportFacts {
        device: &dev.header,
        export: &tmp.1,
        stale: tmp.2,
    };
    crate::info::print_device(device, &export, &tmp.0, kind, json)
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
    // Held until this process ends (the daemon, once mount has forked): until after
    // the export and the removal of the temporary pool, or its death. Never released
    // before: `umount` would take the pool still there for a dead daemon's.
    std::mem::forget(hold_serving(&tmp.0)?);
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
        // Never over what is there (another user's name, in /dev/shm): then the pool
        // stays where it is, which `umount` reports the same way.
        let kept = match rename_noreplace(&tmp.0, &kept) {
            Ok(()) => kept,
            Err(_) => tmp.0.clone(),
        };
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
            if serving(source) == Some(false) && source.exists() {
                anyhow::bail!(
                    "the daemon that served this mount of a data device is gone (killed, or \
                     it crashed) before it exported the metadata back to the device: the \
                     device's export is older than what the mount showed, and the metadata \
                     is in {src}. To recover the device: `lynxfs export {src}` writes it to \
                     the device, then remove {src}",
                    src = source.display()
                );
            }
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
        // Ours only: anyone can make that name in /dev/shm.
        if std::fs::symlink_metadata(&kept).is_ok_and(|m| m.is_file() && m.uid() == euid()) {
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

/// Takes the [`SERVING`] lock on the temporary pool at `pool`, on an open of its own
/// (returned: the lock lasts while it is open).
fn hold_serving(pool: &Path) -> Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(pool)
        .with_context(|| format!("{}", pool.display()))?;
    if !serving_lock(&f, libc::F_OFD_SETLK, libc::F_WRLCK)
        .with_context(|| format!("locking {}", pool.display()))?
    {
        anyhow::bail!("{}: served by another process already", pool.display());
    }
    Ok(f)
}

/// Whether a process holds the [`SERVING`] lock of the temporary pool at `pool`;
/// `None` if that cannot be told (the pool gone, or not readable by the caller).
fn serving(pool: &Path) -> Option<bool> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(pool)
        .ok()?;
    // F_OFD_GETLK answers "unlocked" when no other open holds a conflicting lock.
    serving_lock(&f, libc::F_OFD_GETLK, libc::F_WRLCK)
        .ok()
        .map(|free| !free)
}

/// `fcntl(cmd)` of an OFD lock of `kind` on byte [`SERVING`] of `f`. For F_OFD_SETLK:
/// whether it was had. For F_OFD_GETLK: whether nobody else holds a conflicting lock.
fn serving_lock(f: &std::fs::File, cmd: libc::c_int, kind: libc::c_int) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain C struct; all-zero is a valid value that we then fill in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = SERVING;
    fl.l_len = 1;
    // SAFETY: fcntl on a descriptor `f` owns, with a pointer to a live flock struct
    // (F_OFD_GETLK writes into it).
    let r = unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut fl as *mut libc::flock) };
    if r == 0 {
        return Ok(cmd == libc::F_OFD_SETLK || fl.l_type == libc::F_UNLCK as libc::c_short);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) if cmd == libc::F_OFD_SETLK => Ok(false),
        _ => Err(e),
    }
}

/// Renames `from` to `to` unless something is at `to`.
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c =
        |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: renameat2 reads two NUL-terminated paths that outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Random hex digits for a temporary pool's name (nobody can make it first).
fn random_hex() -> Result<String> {
    use std::io::Read;
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    Ok(b.iter().map(|b| format!("{b:02x}")).collect())
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
