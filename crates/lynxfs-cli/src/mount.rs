//! `lynxfs mount`, `lynxfs umount`, and the `mount.lynxfs` helper that mount(8) runs
//! for `mount -t lynxfs POOL DIR` (as `/sbin/mount.lynxfs POOL DIR [-sfnv] [-o OPTS]`).
//!
//! Without `-f`, `mount` opens the pool and mounts it in the foreground process, so
//! every error (missing or busy pool, bad mount point, bad option) is reported and
//! the exit status says so; only once the mount is live (the kernel's INIT answered)
//! does it fork, and the parent exits 0 while the child serves. The fork happens
//! while the process still has one thread (checked), before any worker starts.

use std::ffi::OsString;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use lynxfs_fuse::kmount::BUSY_PATIENCE;
use lynxfs_fuse::mount::{block_stop_signals, prepare_with_progress, MountOptions};
use lynxfs_fuse::mountinfo::MountEntry;

use crate::progress::Bar;

/// How long `umount` waits for the daemon to close the pool after the unmount.
const CLOSE_WAIT: Duration = Duration::from_secs(30);

/// `lynxfs mount [-f] [-o OPTIONS] POOL MOUNTPOINT`
pub fn mount(pool: &Path, mountpoint: &Path, foreground: bool, options: &[String]) -> Result<()> {
    let mut opts = MountOptions::default();
    for o in options {
        opts.apply(o)?;
    }
    let signals = block_stop_signals()?;
    let bar = Bar::new();
    let prepared = prepare_with_progress(pool, mountpoint, &opts, &bar)
        .with_context(|| format!("mounting {} at {}", pool.display(), mountpoint.display()))?;
    bar.finish();
    if !foreground {
        detach()?;
    }
    prepared.run(Some(signals))
}

/// Whether these `-o` options make a read-only mount (checked as the mount checks them).
pub fn read_only(options: &[String]) -> Result<bool> {
    let mut opts = MountOptions::default();
    for o in options {
        opts.apply(o)?;
    }
    Ok(opts.read_only)
}

fn threads_in_process() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Forks; the parent exits 0 at once (without running destructors, which would
/// unmount), the child starts a new session with its standard streams on /dev/null.
fn detach() -> Result<()> {
    if threads_in_process() != Some(1) {
        bail!("cannot detach: the process already runs several threads (use -f)");
    }
    let devnull = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .context("opening /dev/null")?;
    // SAFETY: the process has one thread (checked above), so the child is a complete
    // copy and may go on running Rust code.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(std::io::Error::last_os_error()).context("fork"),
        0 => {
            // SAFETY: setsid and dup2 take plain integers; devnull is an open fd.
            unsafe {
                libc::setsid();
                for fd in 0..3 {
                    libc::dup2(devnull.as_raw_fd(), fd);
                }
            }
            // The parent exits without detaching: the pool's process table must
            // name this process instead.
            lynxfs::runtime::attachment::after_fork().context("taking over the pool")?;
            Ok(())
        }
        _ => {
            // SAFETY: _exit ends the parent without running destructors: the mount
            // and the pool now belong to the child.
            unsafe { libc::_exit(0) }
        }
    }
}

/// The mounts this process sees, in mount order.
fn mounts() -> Vec<MountEntry> {
    lynxfs_fuse::mountinfo::mounts()
}

/// Mounted by root through mount(2), the subtype is not recorded: plain "fuse".
fn is_lynxfs_type(fstype: &str) -> bool {
    fstype == "fuse.lynxfs" || fstype == "fuse"
}

/// The topmost mount at `mountpoint`, from /proc/self/mountinfo.
fn mount_at(mountpoint: &Path) -> Option<MountEntry> {
    let want = mountpoint.to_string_lossy();
    mounts().into_iter().rev().find(|m| m.mountpoint == want)
}

/// Where `pool` (a canonical path) is mounted, if it is: mounts record the pool's
/// canonical path as their source.
pub fn mountpoint_of_pool(pool: &Path) -> Option<PathBuf> {
    let want = pool.to_string_lossy();
    mounts()
        .into_iter()
        .rev()
        .find(|m| is_lynxfs_type(&m.fstype) && m.source == want)
        .map(|m| PathBuf::from(m.mountpoint))
}

/// The pool mounted at `mountpoint` (canonical), if that is a LynxFS mount.
pub fn pool_at(mountpoint: &Path) -> Result<PathBuf> {
    match mount_at(mountpoint) {
        Some(m) if is_lynxfs_type(&m.fstype) => Ok(PathBuf::from(m.source)),
        Some(m) => bail!(
            "{}: not a LynxFS mount (type {})",
            mountpoint.display(),
            m.fstype
        ),
        None => bail!("{}: not a mount point", mountpoint.display()),
    }
}

/// Can the pool's lock be taken, i.e. has its daemon closed it? (A file or a block
/// device: the daemon holds either with `flock`.)
fn pool_released(pool: &Path) -> bool {
    let Ok(f) = std::fs::File::open(pool) else {
        return true;
    };
    // SAFETY: flock on a descriptor we own; the lock goes with the file on return.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Who holds the file system on `device` (`major:minor`): processes using files on
/// it, and copies of it in other mount namespaces; empty if nobody we can see.
fn holders(device: &str) -> String {
    let users = lynxfs_fuse::mountinfo::users_of(device)
        .into_iter()
        .map(|(pid, cmd)| format!("pid {pid} ({cmd}) uses files on it"));
    let copies = lynxfs_fuse::mountinfo::copies_elsewhere(device)
        .into_iter()
        .map(|c| {
            format!(
                "the mount namespace of pid {} ({}) has a copy of it at {}",
                c.pid,
                c.command,
                c.mountpoints.join(", ")
            )
        });
    users.chain(copies).collect::<Vec<_>>().join("; ")
}

/// Unmounts the topmost mount at `mp` (checked to be LynxFS by the caller, its device
/// `device`). A busy mount is retried for a moment: a process that forked while
/// holding a file there holds a copy until it `exec`s.
fn unmount_path(mp: &Path, device: &str) -> Result<()> {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        let st = Command::new("fusermount3")
            .arg("-u")
            .arg("--")
            .arg(mp)
            .status()
            .context("running fusermount3 (install the fuse3 package)")?;
        if !st.success() {
            bail!("fusermount3 -u {} failed ({st})", mp.display());
        }
        return Ok(());
    }
    let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes())
        .context("mount point contains a NUL byte")?;
    let start = Instant::now();
    loop {
        // SAFETY: c is a valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::UMOUNT_NOFOLLOW) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() > BUSY_PATIENCE {
            bail!(
                "umount {}: {e}: {} (`umount -l {}` detaches it now and lets them \
                 finish)",
                mp.display(),
                nonempty(holders(device), "held by a process we cannot see"),
                mp.display()
            );
        }
        if e.raw_os_error() != Some(libc::EBUSY) {
            bail!("umount {}: {e}", mp.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `lynxfs umount MOUNTPOINT`: unmounts, then, if that was the pool's last mount,
/// waits until the daemon has closed the pool, so the pool (file or device) can be used
/// again as soon as this returns. While another mount of the pool remains, the pool
/// stays in use anyway: it returns once the kernel has unmounted. Returns the pool.
pub fn umount(mountpoint: &Path) -> Result<PathBuf> {
    let mp = mountpoint
        .canonicalize()
        .with_context(|| format!("{}", mountpoint.display()))?;
    let entry = match mount_at(&mp) {
        Some(m) if is_lynxfs_type(&m.fstype) => m,
        Some(m) => bail!("{}: not a LynxFS mount (type {})", mp.display(), m.fstype),
        None => bail!("{}: not mounted", mp.display()),
    };
    let source = PathBuf::from(&entry.source);
    unmount_path(&mp, &entry.device)?;
    let start = Instant::now();
    while source.exists() && !pool_released(&source) && mountpoint_of_pool(&source).is_none() {
        if start.elapsed() > CLOSE_WAIT {
            bail!(
                "{} unmounted, but its pool {} is still held after {:?}: {}",
                mp.display(),
                source.display(),
                CLOSE_WAIT,
                nonempty(
                    holders(&entry.device),
                    "by its daemon (`kill -TERM` it to stop it)"
                )
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(source)
}

fn nonempty(s: String, otherwise: &str) -> String {
    if s.is_empty() {
        otherwise.to_string()
    } else {
        s
    }
}

/// `mount.lynxfs POOL DIR [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE]`, as mount(8) calls it.
pub fn helper_main(args: Vec<OsString>) -> ExitCode {
    match helper(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mount.lynxfs: {e:#}");
            // mount(8)'s "mount failure".
            ExitCode::from(32)
        }
    }
}

fn helper(args: Vec<OsString>) -> Result<()> {
    let mut pos = Vec::new();
    let mut options = Vec::new();
    let mut fake = false;
    let mut it = args.into_iter().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-o") => options.push(
                it.next()
                    .context("-o needs a value")?
                    .into_string()
                    .map_err(|_| anyhow::anyhow!("options are not UTF-8"))?,
            ),
            Some("-t") | Some("-N") => {
                it.next().context("option needs a value")?;
            }
            Some(f) if f.starts_with('-') && f.len() > 1 => {
                for c in f[1..].chars() {
                    match c {
                        'f' => fake = true,
                        's' | 'n' | 'v' => {}
                        _ => bail!("unknown flag -{c}"),
                    }
                }
            }
            _ => pos.push(PathBuf::from(a)),
        }
    }
    let [pool, dir] = <[PathBuf; 2]>::try_from(pos)
        .map_err(|_| anyhow::anyhow!("usage: mount.lynxfs POOL DIR [-o OPTIONS]"))?;
    if fake {
        return Ok(());
    }
    if has_option(&options, "remount") {
        return remount(&dir, &options);
    }
    // mount(8): "nofail: do not report errors for this device if it does not exist"
    // (a DAX device not there at boot, a /dev/shm pool not yet remade).
    if has_option(&options, "nofail") && std::fs::symlink_metadata(&pool).is_err() {
        return Ok(());
    }
    mount(&pool, &dir, false, &options)
}

/// Is `name` among the comma-separated `-o` lists?
fn has_option(options: &[String], name: &str) -> bool {
    options
        .iter()
        .flat_map(|l| l.split(','))
        .any(|o| o.trim() == name)
}

/// The kernel flags statvfs reports and remount may change, as mount(2) spells them.
const REMOUNT_FLAGS: [(u64, libc::c_ulong); 7] = [
    (libc::ST_RDONLY, libc::MS_RDONLY),
    (libc::ST_NOSUID, libc::MS_NOSUID),
    (libc::ST_NODEV, libc::MS_NODEV),
    (libc::ST_NOEXEC, libc::MS_NOEXEC),
    (libc::ST_NOATIME, libc::MS_NOATIME),
    (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
    (libc::ST_RELATIME, libc::MS_RELATIME),
];

/// `mount -o remount,OPTIONS DIR`: the live mount's kernel flags with OPTIONS applied
/// (`ro` makes the kernel refuse every change with EROFS while open files stay
/// readable; `rw` undoes it). mount(8) passes back every option the mount has now
/// (`relatime`, `user_id=0`, `default_permissions`, ...): an option equal to what the
/// mount has is no change. Options that would need a new daemon are refused.
fn remount(dir: &Path, options: &[String]) -> Result<()> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .context("mount point has a NUL byte")?;
    let mut flags = current_flags(&path).with_context(|| format!("{}", dir.display()))?;
    let live = live_options(dir)?;
    for o in options.iter().flat_map(|l| l.split(',')).map(str::trim) {
        apply_remount_option(&mut flags, o, &live)?;
    }
    // SAFETY: path is a valid C string; NULL source, type and data are allowed for
    // MS_REMOUNT.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            flags | libc::MS_REMOUNT,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("remounting {}", dir.display()));
    }
    Ok(())
}

/// The options the LynxFS mount at `dir` has now, its own and its superblock's, as
/// /proc/self/mountinfo lists them.
fn live_options(dir: &Path) -> Result<Vec<String>> {
    let mp = dir
        .canonicalize()
        .with_context(|| format!("{}", dir.display()))?;
    let want = mp.to_string_lossy();
    let m = mounts()
        .into_iter()
        .rev()
        .find(|m| m.mountpoint == want)
        .with_context(|| format!("remount: {} is not a mount point", mp.display()))?;
    if !is_lynxfs_type(&m.fstype) {
        bail!(
            "remount: {} is not a LynxFS mount (type {})",
            mp.display(),
            m.fstype
        );
    }
    Ok(m.options.into_iter().chain(m.super_options).collect())
}

/// Is `o` what the mount has now (`live`, from [`live_options`])? The atime modes are
/// read from the flags mountinfo shows: none of them means strictatime.
fn is_current(o: &str, live: &[String]) -> bool {
    let has = |x: &str| live.iter().any(|l| l == x);
    match o {
        "strictatime" => !has("relatime") && !has("noatime"),
        // `atime` is relatime for LynxFS (MountOptions::apply).
        "atime" => has("relatime"),
        _ => has(o),
    }
}

/// The mount flags of the mount at `path` now.
fn current_flags(path: &std::ffi::CStr) -> Result<libc::c_ulong> {
    // SAFETY: a zeroed statvfs is a valid out-buffer.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: path is a valid C string and st a valid out-buffer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(REMOUNT_FLAGS
        .iter()
        .filter(|(st_flag, _)| st.f_flag & st_flag != 0)
        .fold(0, |f, (_, ms)| f | ms))
}

/// One remount option applied to the kernel flags; `live` is what the mount has now.
fn apply_remount_option(flags: &mut libc::c_ulong, o: &str, live: &[String]) -> Result<()> {
    let (set, clear) = match o {
        "" | "remount" | "defaults" => (0, 0),
        _ if o.starts_with("x-") => (0, 0),
        "ro" => (libc::MS_RDONLY, 0),
        "rw" => (0, libc::MS_RDONLY),
        "nosuid" => (libc::MS_NOSUID, 0),
        "suid" => (0, libc::MS_NOSUID),
        "nodev" => (libc::MS_NODEV, 0),
        "dev" => (0, libc::MS_NODEV),
        "noexec" => (libc::MS_NOEXEC, 0),
        "exec" => (0, libc::MS_NOEXEC),
        "nodiratime" => (libc::MS_NODIRATIME, 0),
        "diratime" => (0, libc::MS_NODIRATIME),
        "lazytime" => (libc::MS_LAZYTIME, 0),
        "nolazytime" => (0, libc::MS_LAZYTIME),
        _ if is_current(o, live) => (0, 0),
        _ => bail!(
            "remount: option {o:?} cannot change on a live mount (ro, rw, suid, nosuid, \
             dev, nodev, exec, noexec, nodiratime, lazytime can; the atime mode and the \
             daemon's options need a new mount; the mount has {})",
            live.join(",")
        ),
    };
    *flags = (*flags | set) & !clear;
    Ok(())
}
