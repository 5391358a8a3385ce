//! What the suites keep from one run to the next, kept where only the caller can reach
//! it.
//!
//! `/dev/shm` and `/tmp` are shared: any user may take a name there first. A file found
//! at a name we chose may be another user's (a tarball that root would then extract,
//! setuid programs and all), and a plain create follows a symlink planted at the name
//! (root then overwrites whatever it points to). So a file kept between runs lives in
//! `BASE/lynxfs-bench-UID`, a directory of the caller's that nobody else may enter,
//! checked before every use (with lstat: a directory, not a symlink, the caller's, mode
//! 0700) and refused with the reason otherwise when it is the caller's own doing. What
//! another user made at that name is passed over, never used nor in the way: the cache
//! is then `BASE/lynxfs-bench-UID.RANDOM`, found again by listing BASE for the caller's
//! own (0700) or made under a name nobody can predict. A file there is written under a
//! temporary name created exclusively (`O_EXCL | O_NOFOLLOW`, mode 0600), then renamed
//! into place.

use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The effective uid of this process: whose files these are.
fn euid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// The caller's private directory in the shared directory `base`, made (mode 0700) if
/// missing; an error naming it if what is there is not privately the caller's.
pub(crate) fn cache_dir(base: &Path) -> anyhow::Result<PathBuf> {
    let name = format!("lynxfs-bench-{}", euid());
    let dir = base.join(&name);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir).with_context(|| format!("{}", dir.display()))?;
    if meta.uid() == euid() {
        check_private(&dir)?;
        return Ok(dir);
    }
    // Another user's: ours is under a name of our own beside it.
    let prefix = format!("{name}.");
    for e in std::fs::read_dir(base).with_context(|| format!("listing {}", base.display()))? {
        let e = e.with_context(|| format!("listing {}", base.display()))?;
        let n = e.file_name();
        if !n.to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let path = e.path();
        if std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_dir() && m.uid() == euid() && m.mode() & 0o7777 == 0o700)
        {
            return Ok(path);
        }
    }
    for _ in 0..16 {
        let dir = base.join(format!("{prefix}{}", random_hex()?));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                check_private(&dir)?;
                return Ok(dir);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
    bail!(
        "no free name for the benchmarks' cache directory in {}",
        base.display()
    )
}

/// Random hex digits for a name nobody can make first.
fn random_hex() -> anyhow::Result<String> {
    use std::io::Read;
    let mut b = [0u8; 8];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    Ok(b.iter().map(|b| format!("{b:02x}")).collect())
}

/// Refuses `dir` unless it is a directory (not a symlink to one) of the caller's that
/// no other user may enter.
fn check_private(dir: &Path) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(dir).with_context(|| format!("{}", dir.display()))?;
    let why = if meta.file_type().is_symlink() {
        "it is a symbolic link".to_string()
    } else if !meta.is_dir() {
        "it is not a directory".to_string()
    } else if meta.uid() != euid() {
        format!(
            "it is owned by uid {}, not by you (uid {})",
            meta.uid(),
            euid()
        )
    } else if meta.mode() & 0o077 != 0 {
        format!(
            "its mode is {:04o}: other users may reach into it (it must be 0700)",
            meta.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    bail!(
        "refusing {} as the benchmarks' private cache directory: {why}; remove it and run \
         again",
        dir.display()
    )
}

/// Whether `path`, in a directory from [`cache_dir`], holds a finished file of the
/// caller's; an error if something else is there.
pub(crate) fn cached(path: &Path) -> anyhow::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("{}", path.display())),
        Ok(m) if m.is_file() && m.uid() == euid() => Ok(true),
        Ok(_) => bail!(
            "{}: not a regular file of yours, so not used; remove it and run again",
            path.display()
        ),
    }
}

/// Creates `path` for writing only if nothing (not even a dangling symlink) is there:
/// mode 0600, never following a link.
pub(crate) fn create_exclusive(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Writes `path` with `fill`, into a file created exclusively beside it
/// (`PATH.partial`, replacing one a killed run left) and renamed into place once
/// complete: the final name only ever holds a whole file.
pub(crate) fn write_new(
    path: &Path,
    fill: impl FnOnce(File) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let partial = path.with_extension("partial");
    match std::fs::remove_file(&partial) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", partial.display()))
        }
        _ => {}
    }
    let file =
        create_exclusive(&partial).with_context(|| format!("creating {}", partial.display()))?;
    if let Err(e) = fill(file) {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    std::fs::rename(&partial, path)
        .with_context(|| format!("renaming {} into place", partial.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn write_new_never_writes_through_a_link_at_the_partial_name() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"kept").unwrap();
        let path = dir.path().join("t.tar");
        std::os::unix::fs::symlink(&victim, dir.path().join("t.partial")).unwrap();
        write_new(&path, |mut f| Ok(f.write_all(b"new")?)).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"kept");
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o600);
        assert!(!dir.path().join("t.partial").exists());
    }

    #[test]
    fn a_failed_write_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tar");
        let e = write_new(&path, |_| bail!("no")).unwrap_err();
        assert_eq!(e.to_string(), "no");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_cache_directory_open_to_others_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let dir = cache_dir(base.path()).unwrap();
        let m = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = cache_dir(base.path()).unwrap_err().to_string();
        assert!(e.contains("mode is 0755"), "{e}");
    }
}
