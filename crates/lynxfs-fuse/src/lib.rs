//! The FUSE adapter over the engine (issue 6), and the "FUSE floor" it is measured
//! against: [`null::NullFs`], an in-memory file system with no persistence, which
//! shows what the FUSE interface alone costs.
//!
//! * [`adapter::LynxFuse`]: `fuser::Filesystem` over [`lynxfs::Fs`], inode for inode,
//!   with no cache of its own.
//! * [`mount`]: options (`entry_timeout=`, `attr_timeout=` (60 s by default), `writeback`, `allow_other`,
//!   `default_permissions`, `threads=`, `ro`, `backend=`), foreground, daemon
//!   ([`mount::prepare`] then fork) and background mounts; the pool is closed cleanly
//!   when the session ends. The CLI (`lynxfs mount`, `lynxfs umount`, `mount.lynxfs`)
//!   is in `lynxfs-cli`.
//! * `tests/conformance.rs` runs the same system calls on a mount and on tmpfs and
//!   compares every result; `examples/metabench.rs` times metadata calls by hand:
//!
//! ```text
//! cargo build --release -p lynxfs-cli -p lynxfs-fuse --bins --examples
//! R=target/release
//! $R/lynxfs mkfs --force --size 1G /dev/shm/b.pool
//! taskset -c 0 $R/lynxfs mount -f -o entry_timeout=0,attr_timeout=0,threads=1 /dev/shm/b.pool /tmp/m &
//! taskset -c 0 $R/examples/metabench /tmp/m 2000
//! taskset -c 0 $R/lynxfs-fuse-null /tmp/n --ttl-ms 0 --threads 1 &
//! taskset -c 0 $R/examples/metabench /tmp/n 2000
//! ```
//!
//! # About `fuser` 0.18.0 (the version pinned in Cargo.lock)
//!
//! * **Mounting needs no libfuse.** We mount ourselves ([`kmount`]): `mount(2)` on
//!   `/dev/fuse` as root, otherwise the setuid `fusermount3`, which sends the
//!   `/dev/fuse` fd back over a Unix socket; the session is then built with
//!   `Session::from_fd`, so `fuser` never unmounts (its own unmount goes by path
//!   after the session ended, and hit other file systems at that path). The runtime
//!   needs the `fuse3` package (for `fusermount3`) only when not root; `libfuse3-dev`
//!   is not needed at all.
//! * **Threads.** `Filesystem` methods take `&self` and the trait requires
//!   `Send + Sync`, because the session can run several worker threads.
//!   `Session::run` spawns `Config::n_threads` event-loop threads (default `None` =
//!   one thread), named `fuser-0..`, each reading requests from `/dev/fuse` and
//!   dispatching them to the shared file system; the calling thread only joins them.
//!   With `Config::clone_fd = true` each worker gets its own fd via
//!   `FUSE_DEV_IOC_CLONE` (Linux 4.5+), so the kernel queues requests per fd instead
//!   of waking all readers on one fd. `Session::spawn` / `fuser::spawn_mount` run the
//!   same `run` on one extra background thread (`fuser-bg`) and return a
//!   `BackgroundSession`, which unmounts when dropped or on `umount_and_join`.
//!   Multi-threading is enabled by setting `n_threads` (and `clone_fd`) in the
//!   `Config` passed to `Session::new` / `spawn_mount`; here that is
//!   [`NullOptions::threads`].

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use fuser::{BackgroundSession, Config, MountOption, Session};

use kmount::OwnMount;

pub mod adapter;
mod caller;
pub mod forward;
pub mod kmount;
pub mod locks;
pub mod mount;
pub mod mountinfo;
pub mod null;
pub mod usage;

pub use adapter::LynxFuse;
pub use mount::{mount, mount_background, prepare, LynxMount, MountOptions, Prepared};
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

/// Fails with a clear message when the kernel's FUSE device is missing (a container
/// started without `--device /dev/fuse`), instead of a bare ENOENT from the mount.
pub fn check_fuse_device() -> anyhow::Result<()> {
    let dev = Path::new("/dev/fuse");
    if !dev.exists() {
        anyhow::bail!(
            "/dev/fuse does not exist: load the fuse module (modprobe fuse) or, in a \
             container, pass the device in (e.g. docker run --device /dev/fuse --cap-add SYS_ADMIN)"
        );
    }
    Ok(())
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
