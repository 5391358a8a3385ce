//! The FUSE adapter over the engine (issue 6).
//!
//! * [`adapter::LynxFuse`]: `fuser::Filesystem` over [`lynxfs::Fs`], inode for inode,
//!   with no cache of its own.
//! * [`mount`]: options (`entry_timeout=`, `attr_timeout=` (60 s by default), `writeback`, `allow_other`,
//!   `default_permissions`, `threads=`, `ro`, `backend=`), foreground, daemon
//!   ([`mount::prepare`] then fork) and background mounts; the pool is closed cleanly
//!   when the session ends. The CLI (`lynxfs mount`, `lynxfs umount`, `mount.lynxfs`)
//!   is in `lynxfs-cli`; the "FUSE floor" it is measured against is in
//!   `lynxfs-fuse-null`.
//! * `tests/conformance.rs` runs the same system calls on a mount and on tmpfs and
//!   compares every result.
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
//!   `Config` passed to `Session::new` / `spawn_mount`; here that is the `threads=`
//!   mount option.

use std::path::Path;

pub mod adapter;
mod caller;
mod commits;
pub mod forward;
pub mod kmount;
pub mod locks;
pub mod mount;
pub mod mountinfo;
pub mod options;
mod readahead;
pub mod times;
pub mod usage;

pub use adapter::LynxFuse;
pub use mount::{mount, mount_background, prepare, LynxMount, MountOptions, Prepared};

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
