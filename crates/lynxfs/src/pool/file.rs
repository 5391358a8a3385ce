//! Pool files, made and opened without trusting what is at the path.
//!
//! mkfs never writes into a file it finds: it builds the new pool in a file of its own
//! beside the path (created with `O_EXCL | O_NOFOLLOW`, mode 0600, every byte reserved
//! with `fallocate`), formats it, makes it durable, and renames it into place. Without
//! `--force` the rename never replaces anything (`RENAME_NOREPLACE`); with it, only a
//! regular file of the caller's, found without following a symlink, is replaced. A
//! failed mkfs removes its file and leaves the path as it was. A block device is the
//! exception: it is formatted in place (with `--force`), opened exclusively.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{is_block_device, lock, Access};
use crate::error::{Error, Result};

/// The pool's mode: readable and writable by its owner only (the pool holds every
/// file's bytes, whatever the modes inside it say).
pub const POOL_MODE: u32 = 0o600;

/// What mkfs found at the path.
pub(super) enum Target {
    /// Nothing: the new pool must not replace anything.
    New,
    /// A regular file of the caller's, locked (so not a mounted pool) until replaced.
    Replace(File),
    /// A block device, opened exclusively: formatted in place.
    Device(File),
}

/// The effective uid of this process.
pub fn caller_uid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// The effective gid of this process.
pub fn caller_gid() -> u32 {
    // SAFETY: getegid has no arguments and cannot fail.
    unsafe { libc::getegid() }
}

/// The caller, or root (who can change anything anyway).
fn trusted_owner(uid: u32) -> bool {
    uid == caller_uid() || uid == 0
}

fn refuse(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("{}: {why}", path.display()))
}

/// Decide what mkfs may do with `path`, looking at it without following a symlink.
pub(super) fn examine(path: &Path, force: bool) -> Result<Target> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Target::New),
        Err(e) => return Err(Error::io(path, e)),
        Ok(m) => m,
    };
    if !force {
        return Err(Error::Exists {
            path: path.to_path_buf(),
        });
    }
    if let Some(device) = block_device(path, &meta)? {
        return Ok(Target::Device(device));
    }
    let file = open_nofollow(path)?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(refuse(path, "not a regular file or block device"));
    }
    if meta.uid() != caller_uid() {
        return Err(refuse(
            path,
            format!(
                "owned by uid {}, not by you (uid {}): mkfs replaces only a file of yours \
                 (remove it first, or choose another path)",
                meta.uid(),
                caller_uid()
            ),
        ));
    }
    lock(&file, path, Access::Exclusive)?;
    Ok(Target::Replace(file))
}

/// What mkfs finds at `path` (`meta`, not following a link) when it is a block device
/// or a link to one: the device, opened exclusively; `None` for a regular file;
/// refused for anything else.
pub(super) fn block_device(path: &Path, meta: &std::fs::Metadata) -> Result<Option<File>> {
    if meta.file_type().is_symlink() {
        return symlinked_device(path, meta).map(Some);
    }
    if is_block_device(meta) {
        return open_device(path).map(Some);
    }
    if !meta.is_file() {
        return Err(refuse(path, "not a regular file or block device"));
    }
    Ok(None)
}

/// A symlink is followed only to a block device (as the links in /dev/disk/by-id), and
/// only when the link is the caller's or root's: one planted by another user in a
/// shared directory is never followed.
fn symlinked_device(path: &Path, link: &std::fs::Metadata) -> Result<File> {
    let target = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !is_block_device(&target) {
        return Err(refuse(
            path,
            "a symbolic link: mkfs does not follow one to a file (give the file's own path)",
        ));
    }
    if !trusted_owner(link.uid()) {
        return Err(refuse(
            path,
            format!(
                "a symbolic link owned by uid {}: a device is reached only through a link of \
                 yours or root's",
                link.uid()
            ),
        ));
    }
    open_device(path)
}

/// Open a block device for formatting. `O_EXCL` makes the kernel refuse (EBUSY) a device
/// that is mounted, used as swap or held by md/dm, which `flock` alone cannot see.
fn open_device(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_EXCL)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => refuse(
                path,
                "the device is busy (mounted, used as swap, or held by another driver)",
            ),
            _ => Error::io(path, e),
        })?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !is_block_device(&meta) {
        return Err(refuse(path, "changed while being looked at"));
    }
    lock(&file, path, Access::Exclusive)?;
    Ok(file)
}

/// Open for reading a path that must not be a symlink; `O_NONBLOCK` so that a FIFO
/// swapped in meanwhile cannot hang the open.
fn open_nofollow(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refuse(path, "became a symbolic link while being looked at"),
            _ => Error::io(path, e),
        })
}

/// The directory holding `path`.
pub(super) fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| refuse(path, "the path holds a NUL byte"))
}

/// Bytes free for the caller on the file system holding `dir`; `None` when it sets no
/// limit (a tmpfs mounted with size=0).
pub(super) fn free_bytes(dir: &Path) -> Result<Option<u64>> {
    let c = c_path(dir)?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is NUL-terminated and `st` points at space for one statvfs, which the
    // call fills on success (checked before reading it).
    let st = unsafe {
        if libc::statvfs(c.as_ptr(), st.as_mut_ptr()) != 0 {
            return Err(Error::io(dir, std::io::Error::last_os_error()));
        }
        st.assume_init()
    };
    if st.f_blocks == 0 {
        return Ok(None);
    }
    Ok(Some(
        (st.f_bavail as u64).saturating_mul(st.f_frsize as u64),
    ))
}

fn no_room(path: &Path, size: u64, free: Option<u64>) -> Error {
    refuse(
        path,
        match free {
            Some(free) => format!(
                "a pool of {size} bytes does not fit: the file system holding it has \
                 {free} bytes free"
            ),
            None => format!("the file system holding it has no room for {size} bytes"),
        },
    )
}

/// Reserve every byte of `file` up to `size`, so that no store to the mapping can find
/// its storage missing. Cheap when the file is already fully backed.
pub(super) fn reserve(file: &File, size: u64, path: &Path) -> Result<()> {
    use std::os::unix::io::AsRawFd;
    let len = libc::off_t::try_from(size).map_err(|_| refuse(path, "size out of range"))?;
    // SAFETY: posix_fallocate on a descriptor we own; no memory is passed.
    let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match r {
        0 => Ok(()),
        libc::ENOSPC | libc::EFBIG => Err(no_room(path, size, free_bytes(parent_dir(path))?)),
        e => Err(Error::io(path, std::io::Error::from_raw_os_error(e))),
    }
}

/// Bytes of `meta`'s file that have no storage behind them (holes).
pub(super) fn unbacked(meta: &std::fs::Metadata, size: u64) -> u64 {
    size.saturating_sub(meta.blocks().saturating_mul(512))
}

/// Refuse to read a pool on tmpfs whose holes its file system could not fill: reading
/// a hole there allocates memory, and a fault that finds none ends the process.
pub(super) fn check_readable(meta: &std::fs::Metadata, size: u64, path: &Path) -> Result<()> {
    let holes = unbacked(meta, size);
    if holes == 0 || !crate::pmem::on_tmpfs(path) {
        return Ok(());
    }
    match free_bytes(parent_dir(path))? {
        Some(free) if free < holes => Err(refuse(
            path,
            format!(
                "{holes} bytes of the pool have no storage behind them and its file system \
                 has only {free} bytes free: reading them would fail (free some space, or \
                 copy the pool elsewhere)"
            ),
        )),
        _ => Ok(()),
    }
}

/// What a file holds, which says who else it must be kept from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holds {
    /// A pool: no one else may be able to write it, or they could change the pool
    /// under the engine.
    Pool,
    /// A data device: no one else may be able to open it at all, since it holds every
    /// file's bytes whatever the files' modes say, and can be changed under the engine.
    Device,
}

impl Holds {
    /// The permission bits no one but the owner may have.
    fn forbidden(self) -> u32 {
        match self {
            Holds::Pool => 0o022,
            Holds::Device => 0o077,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Holds::Pool => "the pool",
            Holds::Device => "every file's data",
        }
    }
}

/// Why a file holding `holds` cannot be trusted while it is open read-write: someone
/// other than the caller (or root) owns it, or group or others have permissions they
/// must not. `None` for a block device: its permissions are the administrator's
/// business (mkfs opens it exclusively, as mkfs.ext4 does).
pub(super) fn untrusted(meta: &std::fs::Metadata, holds: Holds) -> Option<String> {
    if !meta.is_file() {
        return None;
    }
    if !trusted_owner(meta.uid()) {
        return Some(format!(
            "owned by uid {}, not by you (uid {}) or root: its owner could read and change \
             {} under this process",
            meta.uid(),
            caller_uid(),
            holds.what()
        ));
    }
    if meta.mode() & holds.forbidden() == 0 {
        return None;
    }
    let mode = meta.mode() & 0o7777;
    Some(match holds {
        Holds::Pool => format!(
            "writable by others (mode {mode:o}): anyone could change the pool under this \
             process (chmod go-w it)"
        ),
        Holds::Device => format!(
            "open to group or others (mode {mode:o}): they could read and change every \
             file's data through it (chmod go= it)"
        ),
    })
}

/// [`untrusted`] as an error naming `path`.
pub(super) fn check_trusted(meta: &std::fs::Metadata, path: &Path, holds: Holds) -> Result<()> {
    untrusted(meta, holds).map_or(Ok(()), |why| Err(refuse(path, why)))
}

/// A symlink at the pool's path is followed only when it is the caller's or root's.
pub(super) fn check_link(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() && !trusted_owner(m.uid()) => Err(refuse(
            path,
            format!(
                "a symbolic link owned by uid {}: only a link of yours or root's is followed",
                m.uid()
            ),
        )),
        _ => Ok(()),
    }
}

/// The new pool, in a file of its own beside the path until [`Staged::commit`]; removed
/// if dropped before.
pub(super) struct Staged {
    file: File,
    tmp: PathBuf,
    path: PathBuf,
    committed: bool,
}

impl Staged {
    /// Create the file beside `path`, mode 0600, with `size` bytes reserved.
    pub fn create(path: &Path, size: u64) -> Result<Staged> {
        let dir = parent_dir(path);
        let free = free_bytes(dir)?;
        if free.is_some_and(|f| f < size) {
            return Err(no_room(path, size, free));
        }
        let (file, tmp) = create_beside(path)?;
        let staged = Staged {
            file,
            tmp,
            path: path.to_path_buf(),
            committed: false,
        };
        // The umask may have taken the owner's bits too.
        staged
            .file
            .set_permissions(std::fs::Permissions::from_mode(POOL_MODE))
            .map_err(|e| Error::io(&staged.tmp, e))?;
        reserve(&staged.file, size, path)?;
        Ok(staged)
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Make the pool durable and move it to the path: replacing what is there only when
    /// `replace` (a file of the caller's was found there), else only if nothing is.
    pub fn commit(mut self, replace: bool) -> Result<()> {
        self.file.sync_all().map_err(|e| Error::io(&self.path, e))?;
        let (from, to) = (c_path(&self.tmp)?, c_path(&self.path)?);
        if replace {
            // SAFETY: two NUL-terminated paths; rename never follows a symlink at `to`.
            if unsafe { libc::rename(from.as_ptr(), to.as_ptr()) } != 0 {
                return Err(Error::io(&self.path, std::io::Error::last_os_error()));
            }
        } else {
            rename_noreplace(&from, &to, &self.path)?;
        }
        self.committed = true;
        sync_dir(parent_dir(&self.path))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Create a new file in `path`'s directory, never following or reusing anything there.
fn create_beside(path: &Path) -> Result<(File, PathBuf)> {
    let name = path
        .file_name()
        .ok_or_else(|| refuse(path, "names no file"))?;
    let mut last = None;
    for attempt in 0..64u32 {
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".mkfs-{}-{attempt}-{}",
            std::process::id(),
            crate::time::now_ns() % 1_000_000_007
        ));
        let tmp = parent_dir(path).join(tmp_name);
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(POOL_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Err(Error::io(
        path,
        last.unwrap_or_else(|| ErrorKind::AlreadyExists.into()),
    ))
}

/// Rename that fails if `to` exists. File systems without `RENAME_NOREPLACE` get
/// link + unlink, which refuses an existing `to` the same way.
fn rename_noreplace(from: &CString, to: &CString, path: &Path) -> Result<()> {
    let exists = || Error::Exists {
        path: path.to_path_buf(),
    };
    // SAFETY: two NUL-terminated paths, relative to the working directory.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EEXIST) => Err(exists()),
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            // SAFETY: as above; link(2) does not follow a symlink at `from`.
            if unsafe { libc::link(from.as_ptr(), to.as_ptr()) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(match e.raw_os_error() {
                    Some(libc::EEXIST) => exists(),
                    _ => Error::io(path, e),
                });
            }
            // SAFETY: a NUL-terminated path; the pool now also lives at `to`.
            unsafe { libc::unlink(from.as_ptr()) };
            Ok(())
        }
        _ => Err(Error::io(path, e)),
    }
}

/// Make a rename in `dir` durable.
fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| Error::io(dir, e))?;
    d.sync_all().map_err(|e| Error::io(dir, e))
}
