//! The "FUSE floor" LynxFS over FUSE is measured against: [`NullFs`], an in-memory
//! file system with no persistence, which shows what the FUSE interface alone costs.
//! Only the benchmarks use it (the `fuse-null` target of `lynxfs bench`), so it lives
//! apart from the adapter the product mounts with (`lynxfs-fuse`), whose mounting
//! ([`lynxfs_fuse::kmount`]) it shares.
//!
//! The `lynxfs-fuse-null` binary serves it in the foreground, and
//! `examples/metabench.rs` times metadata calls by hand on it and on a LynxFS mount:
//!
//! ```text
//! cargo build --release -p lynxfs-cli -p lynxfs-fuse-null --bins --examples
//! R=target/release
//! $R/lynxfs mkfs --force --size 1G /dev/shm/b.pool
//! taskset -c 0 $R/lynxfs mount -f -o entry_timeout=0,attr_timeout=0,threads=1 /dev/shm/b.pool /tmp/m &
//! taskset -c 0 $R/examples/metabench /tmp/m 2000
//! taskset -c 0 $R/lynxfs-fuse-null /tmp/n --ttl-ms 0 --threads 1 &
//! taskset -c 0 $R/examples/metabench /tmp/n 2000
//! ```

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use fuser::{BackgroundSession, Config, MountOption, Session};
use lynxfs_fuse::check_fuse_device;
use lynxfs_fuse::kmount::{self, OwnMount};

pub mod null;

pub use null::NullFs;

/// How to mount a [`NullFs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NullOptions {
    /// Kernel entry and attribute cache lifetime; zero turns the caches off.
    pub ttl: Duration,
    /// FUSE worker threads (`fuser`'s `n_threads`); 1 is `fuser`'s default.
    pub threads: usize,
}

impl Default for NullOptions {
    fn default() -> Self {
        NullOptions {
            ttl: Duration::ZERO,
            threads: 1,
        }
    }
}

/// The `fuser` session configuration for a null mount.
pub fn null_config(options: &NullOptions) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("lynxfs-null".to_string()),
        MountOption::Subtype("lynxfs-null".to_string()),
        MountOption::RW,
        MountOption::NoAtime,
        // A scratch tree (the benchmarks extract tarballs there as root).
        MountOption::NoSuid,
        MountOption::NoDev,
    ];
    config.n_threads = Some(options.threads.max(1));
    // One fd per worker avoids all workers contending on (and being woken for) one
    // fd; it only matters, and only is used, with more than one thread.
    config.clone_fd = options.threads > 1;
    config
}

/// Mounts a fresh [`NullFs`] at `mountpoint`, serving it from background threads.
pub fn mount_null(mountpoint: &Path, ttl: Duration) -> anyhow::Result<NullMount> {
    let options = NullOptions {
        ttl,
        ..NullOptions::default()
    };
    mount_null_with(mountpoint, &options)
}

/// [`mount_null`] with every option.
pub fn mount_null_with(mountpoint: &Path, options: &NullOptions) -> anyhow::Result<NullMount> {
    let (session, mount) = new_null_session(mountpoint, options)?;
    let background = match session.spawn() {
        Ok(b) => b,
        Err(e) => {
            let _ = mount.unmount();
            return Err(anyhow::Error::new(e).context("spawning the FUSE session thread"));
        }
    };
    Ok(NullMount {
        mount,
        session: Some(background),
    })
}

/// Mounts a fresh [`NullFs`] and returns the session without running it, for callers
/// that serve it on their own thread (`Session::run`), like the foreground binary,
/// with its mount (which only [`OwnMount::unmount`] ever unmounts).
pub fn new_null_session(
    mountpoint: &Path,
    options: &NullOptions,
) -> anyhow::Result<(Session<NullFs>, OwnMount)> {
    check_fuse_device()?;
    let fs = NullFs::new(options.ttl);
    kmount::session(fs, mountpoint, &null_config(options)).with_context(|| {
        format!(
            "mounting the null FUSE file system at {}",
            mountpoint.display()
        )
    })
}

/// A mounted [`NullFs`]; dropping it unmounts and waits for the session thread.
#[derive(Debug)]
pub struct NullMount {
    mount: OwnMount,
    session: Option<BackgroundSession>,
}

impl NullMount {
    pub fn mountpoint(&self) -> &Path {
        self.mount.mountpoint()
    }

    /// Unmounts now, reporting errors that `Drop` can only log.
    pub fn unmount(mut self) -> anyhow::Result<()> {
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> anyhow::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        kmount::unmount_and_join(&self.mount, session)
    }
}

impl Drop for NullMount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            eprintln!("lynxfs-fuse: {e:#}");
        }
    }
}
