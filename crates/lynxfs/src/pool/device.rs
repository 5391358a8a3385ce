//! A hybrid pool's data device: made at mkfs, found and checked at open.
//!
//! mkfs writes the device's header (naming the pool and the device) and makes it
//! durable before the pool's superblocks, which record the device's identity and path
//! (`format::device`). An open finds the device by that path and refuses, naming both,
//! a device that is not a LynxFS data device, another pool's device, a device made
//! anew for this pool (another identity), one too small for what its header or the
//! pool needs, or a newer format.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::claim::{self, Claimant};
use super::export::{self, OpenFor};
use super::file::{self, Holds};
use super::{file_size, is_block_device, Access, MkfsOptions, DEFAULT_DEVICE_FACTOR};
use crate::error::{Error, Result};
use crate::format::device::{
    uuid_text, DeviceHeader, DeviceRecord, HeaderProblem, DATA_OFF, HEADER_LEN, RECORD_A, RECORD_B,
    RECORD_LEN,
};
use crate::format::superblock::INCOMPAT_UNDO;
use crate::format::{Layout, Superblock, BLOCK};
use crate::pmem::device::{Device, Growth};
use crate::pmem::{Backend, Pm};

/// What mkfs puts on a new data device and in the pool about it.
pub(super) struct NewDevice {
    pub record: DeviceRecord,
}

fn device_error(pool: &Path, dev: &Path, what: impl std::fmt::Display) -> Error {
    Error::Device {
        device: dev.to_path_buf(),
        what: format!("{what} (data device of pool {})", pool.display()),
    }
}

/// How many data blocks a new pool's device at `path` gets (mkfs): its size (a block
/// device's, or `device_size` if that is smaller; for a file `device_size`, else
/// [`DEFAULT_DEVICE_FACTOR`] times the pool's) less
/// the header's megabyte and an export area as large as the pool. Refused, naming the
/// device, when fewer than 16 blocks per lane are left.
pub(super) fn blocks_for(path: &Path, pool: &Path, opts: &MkfsOptions) -> Result<u64> {
    // Looked at before opening: opening a FIFO would block (make() refuses one).
    let whole = match &std::fs::metadata(path).ok() {
        Some(m) if is_block_device(m) => {
            let f = File::open(path).map_err(|e| Error::io(path, e))?;
            Some(file_size(&f, m, path)?)
        }
        _ => None,
    };
    let size = match (opts.device_size, whole) {
        (Some(asked), Some(have)) if asked > have => {
            return Err(device_error(
                pool,
                path,
                format!("a device size of {asked} bytes, but the device holds {have}"),
            ))
        }
        (Some(asked), _) => asked,
        (None, Some(have)) => have,
        (None, None) => opts.size.saturating_mul(DEFAULT_DEVICE_FACTOR),
    };
    let export = opts.size.div_ceil(BLOCK) * BLOCK;
    let lanes = opts.lanes.clamp(1, crate::format::layout::MAX_LANES) as u64;
    let blocks = size.saturating_sub(DATA_OFF + export) / BLOCK;
    if blocks < 16 * lanes {
        return Err(device_error(
            pool,
            path,
            format!(
                "too small: {size} bytes hold the header ({DATA_OFF} bytes), an export \
                 area as large as the pool ({export} bytes) and {blocks} data blocks, \
                 fewer than 16 per lane ({})",
                16 * lanes
            ),
        ));
    }
    Ok(blocks)
}

/// A device file is sparse: its blocks take room on the file system holding it only as
/// file data is written. Refuse a size that file system cannot hold (its free bytes,
/// and those an existing file there has already), or `df` on the pool would show room
/// that is not there and writes would fail with ENOSPC long before it looked full.
/// (Called by mkfs once the geometry is known to be possible: a size no pool can use
/// is refused for that first.)
pub(super) fn check_room(path: &Path, pool: &Path, opts: &MkfsOptions) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata(path).is_ok_and(|m| is_block_device(&m)) {
        return Ok(()); // its size is its own, checked by blocks_for
    }
    let asked = opts.device_size.is_some();
    let size = opts
        .device_size
        .unwrap_or_else(|| opts.size.saturating_mul(DEFAULT_DEVICE_FACTOR));
    let dir = file::parent_dir(path);
    let Some(free) = file::free_bytes(dir)? else {
        return Ok(()); // a file system without a limit
    };
    let held = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map_or(0, |m| m.blocks() * 512);
    let room = free.saturating_add(held);
    if size <= room {
        return Ok(());
    }
    let what = match asked {
        true => format!("a device size of {size} bytes"),
        false => format!(
            "the default device size ({DEFAULT_DEVICE_FACTOR} times the pool's, {size} bytes)"
        ),
    };
    Err(device_error(
        pool,
        path,
        format!(
            "{what}, but the file system holding {} has {room} bytes free for it (the \
             device file is sparse: its data would run out of room there first); give a \
             --device-size of at most {room}, or put the device where there is room",
            dir.display()
        ),
    ))
}

/// Make `path` the data device of a new pool `pool` (identity `pool_uuid`) of
/// `layout`: a new file, or (with `force`) an existing file or block device, which
/// must hold the header, the layout's device blocks and an export area as large as
/// the pool.
pub(super) fn make(
    path: &Path,
    pool: &Path,
    force: bool,
    pool_uuid: [u8; 16],
    layout: &Layout,
) -> Result<NewDevice> {
    let (file, meta) = open_for_mkfs(path, force)?;
    // The absolute path, so that an open from any directory finds it.
    let abs = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
    let header = DeviceHeader::new(
        pool_uuid,
        super::uuid(),
        layout.geo.device_blocks,
        layout.geo.pool_size,
        crate::time::now_ns(),
    );
    let need = header.device_len();
    if is_block_device(&meta) {
        let have = file_size(&file, &meta, path)?;
        if have < need {
            return Err(device_error(
                pool,
                path,
                format!("the device holds {have} bytes, the pool needs {need}"),
            ));
        }
    } else if meta.len() < need {
        // Sparse: blocks take space on the disk as they are written.
        file.set_len(need).map_err(|e| Error::io(path, e))?;
    }
    let mut block = vec![0u8; BLOCK as usize];
    block[..HEADER_LEN].copy_from_slice(&header.encode());
    file.write_all_at(&block, 0)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io(path, e))?;
    let record =
        DeviceRecord::new(header.device_uuid, abs.as_os_str().as_bytes()).ok_or_else(|| {
            Error::Invalid(format!(
                "{}: the device's path is longer than {} bytes",
                abs.display(),
                crate::format::device::MAX_PATH
            ))
        })?;
    Ok(NewDevice { record })
}

/// The device mkfs formats, and what it is: a new file, created exclusively and
/// never through a link (`O_CREAT | O_EXCL | O_NOFOLLOW`), so that a file or link
/// another user puts at the path meanwhile is never used, mode 0600 whatever the
/// umask; or (with `force`) an existing regular file that is the caller's (or root's)
/// and open to no one else, or a block device opened exclusively (a link to one, as
/// in /dev/disk/by-id, followed only when it is the caller's or root's), as mkfs.ext4
/// judges it.
fn open_for_mkfs(path: &Path, force: bool) -> Result<(File, std::fs::Metadata)> {
    let io = |e| Error::io(path, e);
    let new = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(super::POOL_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    let file = match new {
        Ok(file) => {
            // The umask may have taken the owner's bits.
            file.set_permissions(std::fs::Permissions::from_mode(super::POOL_MODE))
                .map_err(io)?;
            file
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists && force => {
            let file = open_existing(path)?;
            let me = Claimant::Alone {
                what: "mkfs --force".into(),
            };
            claim::claim(&file, path, &me)?;
            file
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return Err(Error::Exists {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(io)?;
    Ok((file, meta))
}

/// An existing device for `mkfs --force`: a block device (or a link to one) as
/// `file::block_device` opens it, or a regular file of the caller's open to no one
/// else, opened without following a link.
fn open_existing(path: &Path) -> Result<File> {
    let io = |e| Error::io(path, e);
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    if let Some(device) = file::block_device(path, &meta)? {
        return Ok(device);
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(Error::Invalid(format!(
            "{}: not a regular file or block device",
            path.display()
        )));
    }
    file::check_trusted(&meta, path, Holds::Device)?;
    Ok(file)
}

/// The pool's record of its device: the first valid copy that agrees with the
/// superblock's identity.
pub(crate) fn record<B: Backend>(pm: &Pm<B>, sb: &Superblock) -> Option<DeviceRecord> {
    [RECORD_A, RECORD_B].into_iter().find_map(|at| {
        let mut b = [0u8; RECORD_LEN];
        pm.read(at, &mut b);
        DeviceRecord::decode(&b).filter(|r| Some(r.device_uuid) == sb.data_device)
    })
}

/// Read a device's header (`lynxfs info`, `fsck`, open).
pub fn read_header(
    file: &File,
) -> std::io::Result<std::result::Result<DeviceHeader, HeaderProblem>> {
    let mut b = [0u8; HEADER_LEN];
    match file.read_exact_at(&mut b, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(Err(HeaderProblem::Magic)),
        Err(e) => return Err(e),
    }
    Ok(DeviceHeader::decode(&b))
}

/// Find and check the data device of pool `pool` (superblock `sb`), at `path` if
/// given, else where the pool records it. A read-write open for use marks the
/// device's export stale before anything else happens (`export::mark_stale`).
pub(super) fn attach<B: Backend>(
    pm: &Pm<B>,
    pool: &Path,
    pool_file: &File,
    sb: &Superblock,
    access: Access,
    path: Option<&Path>,
    purpose: OpenFor,
) -> Result<(Device, DeviceHeader)> {
    let want = sb.data_device.expect("a hybrid pool");
    let path: PathBuf = match path {
        Some(p) => p.to_path_buf(),
        None => {
            let r = record(pm, sb).ok_or_else(|| {
                Error::corrupt(pool, "both records of the data device's path are damaged")
            })?;
            PathBuf::from(std::ffi::OsStr::from_bytes(&r.path))
        }
    };
    file::check_link(&path)?;
    let file = OpenOptions::new()
        .read(true)
        .write(access != Access::ReadOnly)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| {
            let why = match e.kind() {
                ErrorKind::NotFound => "missing".to_string(),
                _ => e.to_string(),
            };
            device_error(pool, &path, format!("cannot open the data device: {why}"))
        })?;
    let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
    if !meta.is_file() && !is_block_device(&meta) {
        return Err(device_error(
            pool,
            &path,
            "not a regular file or block device",
        ));
    }
    // As for the pool file: what may change under a read-write open is checked then.
    if access != Access::ReadOnly {
        if let Some(why) = file::untrusted(&meta, Holds::Device) {
            return Err(device_error(pool, &path, why));
        }
    }
    let header = read_header(&file)
        .map_err(|e| Error::io(&path, e))?
        .map_err(|p| match p {
            HeaderProblem::Magic => device_error(pool, &path, "not a LynxFS data device"),
            p => device_error(pool, &path, p),
        })?;
    check(pool, &path, sb, want, &header)?;
    let have = file_size(&file, &meta, &path)?;
    if have < header.device_len() {
        return Err(device_error(
            pool,
            &path,
            format!(
                "the device holds {have} bytes, its header says {}",
                header.device_len()
            ),
        ));
    }
    if access != Access::ReadOnly {
        // One pool per device, claimed before the pool can change anything on it.
        let me = Claimant::pool(pool, pool_file).map_err(|e| Error::io(pool, e))?;
        claim::claim(&file, &path, &me).map_err(|e| match e {
            Error::Device { what, .. } => device_error(pool, &path, what),
            e => e,
        })?;
    }
    if access != Access::ReadOnly && purpose == OpenFor::Use {
        export::mark_stale(&file, &path, &header, sb.uuid).map_err(|e| {
            device_error(
                pool,
                &path,
                format!("cannot mark its export stale before a read-write open: {e}"),
            )
        })?;
    }
    let growth = match sb.incompat & INCOMPAT_UNDO {
        0 => Growth::Fill,
        _ => Growth::Reserve,
    };
    let dev = Device::new(file, &path, (header.data_off, header.data_len), growth);
    Ok((dev, header))
}

/// The header names this pool and the device the pool records, and holds its blocks.
fn check(
    pool: &Path,
    path: &Path,
    sb: &Superblock,
    want: [u8; 16],
    h: &DeviceHeader,
) -> Result<()> {
    if h.pool_uuid != sb.uuid {
        return Err(device_error(
            pool,
            path,
            format!(
                "the data device of another pool (pool id {}; this pool's is {})",
                uuid_text(&h.pool_uuid),
                uuid_text(&sb.uuid)
            ),
        ));
    }
    if h.device_uuid != want {
        return Err(device_error(
            pool,
            path,
            format!(
                "not the data device this pool records (device id {}; the pool records {})",
                uuid_text(&h.device_uuid),
                uuid_text(&want)
            ),
        ));
    }
    if h.data_blocks() < sb.layout.geo.device_blocks {
        return Err(device_error(
            pool,
            path,
            format!(
                "too small: its data area holds {} blocks, the pool has {} on it",
                h.data_blocks(),
                sb.layout.geo.device_blocks
            ),
        ));
    }
    Ok(())
}

/// Write the pool's records of its device (both copies, durably): at mkfs, before the
/// superblocks that point at them.
pub(super) fn write_records<B: Backend>(pm: &Pm<B>, r: &DeviceRecord) {
    let bytes = r.encode();
    let mut b = pm.batch();
    b.write(RECORD_A, &bytes).write(RECORD_B, &bytes);
    let _ = b.persist();
}
