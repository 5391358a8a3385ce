//! Our own FUSE mounts: mounting (`mount(2)` as root, `fusermount3` otherwise),
//! remembering which mount is ours, and unmounting only that one.
//!
//! `fuser` 0.18 unmounts by path whenever a session ends, and its "still mounted?"
//! check always says yes (it counts `POLLERR`, the sign of a dead connection, as
//! mounted). So after `umount DIR` the daemon unmounted DIR a second time, removing
//! whatever was mounted under LynxFS, and a signal unmounted whatever had been
//! mounted over it. Here the mount is made by us and handed to `fuser` as a bare
//! `/dev/fuse` descriptor ([`Session::from_fd`]): `fuser` never unmounts, and we
//! unmount only after checking that the mount at the path is still ours.
//!
//! # Identity
//! Right after mounting, the mount at the (canonical) mount point is ours; we record
//! its mount ID (the never-reused 64-bit one where the kernel has it, Linux 6.8+) and
//! its device number. A FUSE superblock's device is an anonymous one (major 0) whose
//! minor is the connection's number: no other file system has it while our
//! connection lives. Before unmounting, the path's mount ID and device must both
//! still match and our connection must still be alive (`/dev/fuse` not `POLLERR`);
//! otherwise the kernel has already unmounted ours and nothing is done. Linux has no
//! unmount by descriptor, so one window remains: a mount placed over ours between the
//! check and `umount2` (microseconds) would be the one unmounted.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use fuser::{BackgroundSession, Config, Filesystem, MountOption, Session, SessionACL};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};

/// How long an unmount retries a busy mount before detaching it lazily: long enough
/// for a descriptor copied into a process that is about to `exec` to go away.
pub const BUSY_PATIENCE: Duration = Duration::from_secs(2);

/// Which mount: what `statx` says of the mount point right after we mounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    mnt_id: u64,
    dev_major: u32,
    dev_minor: u32,
}

/// A FUSE mount made by this process (see the module documentation).
#[derive(Debug)]
pub struct OwnMount {
    mountpoint: PathBuf,
    id: Identity,
    /// A duplicate of the session's `/dev/fuse` descriptor, polled to learn whether
    /// the connection (and so our superblock) still lives.
    device: OwnedFd,
    /// Mounted through `fusermount3` (not root): unmount through it too.
    via_fusermount: bool,
}

/// What [`OwnMount::unmount`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// Unmounted now; the session ends once the kernel has told the daemon.
    Now,
    /// It stayed busy: detached lazily. The session ends, and the pool is closed,
    /// when the last process using the file system lets go.
    Lazily,
    /// The kernel had already unmounted (or detached) it: nothing was done.
    AlreadyGone,
    /// Something else is mounted over it: nothing was done (unmount that first).
    Covered,
}

/// Mounts at `mountpoint` a FUSE file system described by `config` (its
/// `mount_options`, `acl`, `n_threads`, `clone_fd`) and returns the session, ready to
/// serve (the kernel's INIT answered), with the mount it serves.
pub fn session<FS: Filesystem>(
    fs: FS,
    mountpoint: &Path,
    config: &Config,
) -> anyhow::Result<(Session<FS>, OwnMount)> {
    let mountpoint = mountpoint
        .canonicalize()
        .with_context(|| format!("{}", mountpoint.display()))?;
    let (fd, via_fusermount) = mount_fd(&mountpoint, &config.mount_options, config.acl)?;
    let device = fd
        .try_clone()
        .context("duplicating the /dev/fuse descriptor")?;
    let id = match identity_at(&mountpoint) {
        Ok(id) if id.dev_major == 0 => id,
        Ok(_) => bail!("{}: the new mount is not there", mountpoint.display()),
        Err(e) => return Err(e).context(format!("statx {}", mountpoint.display())),
    };
    let mount = OwnMount {
        mountpoint,
        id,
        device,
        via_fusermount,
    };
    match Session::from_fd(fs, fd, config.acl, config.clone()) {
        Ok(s) => Ok((s, mount)),
        Err(e) => {
            let _ = mount.unmount();
            Err(anyhow::Error::new(e).context("FUSE handshake"))
        }
    }
}

/// Mounts and returns the `/dev/fuse` descriptor; true if through `fusermount3`.
fn mount_fd(
    mountpoint: &Path,
    options: &[MountOption],
    acl: SessionACL,
) -> anyhow::Result<(OwnedFd, bool)> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .context("opening /dev/fuse")?;
    match mount_syscall(&dev, mountpoint, options, acl) {
        Ok(()) => Ok((dev.into(), false)),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            drop(dev);
            Ok((mount_fusermount(mountpoint, options, acl)?, true))
        }
        Err(e) => Err(e).with_context(|| format!("mount {}", mountpoint.display())),
    }
}

fn fsname(options: &[MountOption]) -> &str {
    options
        .iter()
        .find_map(|o| match o {
            MountOption::FSName(n) => Some(n.as_str()),
            _ => None,
        })
        .unwrap_or("/dev/fuse")
}

fn subtype(options: &[MountOption]) -> Option<&str> {
    options.iter().find_map(|o| match o {
        MountOption::Subtype(s) => Some(s.as_str()),
        _ => None,
    })
}

/// `mount(2)` (root): source and type are their own arguments, so a pool path with a
/// comma needs no escaping.
fn mount_syscall(
    dev: &File,
    mountpoint: &Path,
    options: &[MountOption],
    acl: SessionACL,
) -> io::Result<()> {
    let meta = std::fs::metadata(mountpoint)?;
    // SAFETY: getuid/getgid take no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={:o},user_id={uid},group_id={gid}",
        dev.as_raw_fd(),
        meta.mode(),
    );
    let mut flags = 0;
    if !options.contains(&MountOption::Suid) {
        flags |= libc::MS_NOSUID;
    }
    if !options.contains(&MountOption::Dev) {
        flags |= libc::MS_NODEV;
    }
    for o in options {
        match o {
            MountOption::RO => flags |= libc::MS_RDONLY,
            MountOption::NoSuid => flags |= libc::MS_NOSUID,
            MountOption::NoDev => flags |= libc::MS_NODEV,
            MountOption::NoExec => flags |= libc::MS_NOEXEC,
            MountOption::NoAtime => flags |= libc::MS_NOATIME,
            MountOption::Sync => flags |= libc::MS_SYNCHRONOUS,
            MountOption::DirSync => flags |= libc::MS_DIRSYNC,
            MountOption::DefaultPermissions => data.push_str(",default_permissions"),
            MountOption::CUSTOM(c) if atime_flag(c).is_some() => {
                flags |= atime_flag(c).unwrap_or(0)
            }
            MountOption::CUSTOM(_) | MountOption::AutoUnmount => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("mount option {o:?} is not supported"),
                ))
            }
            _ => {}
        }
    }
    if acl != SessionACL::Owner {
        data.push_str(",allow_other");
    }
    let fstype = match subtype(options) {
        Some(s) => format!("fuse.{s}"),
        None => "fuse".to_string(),
    };
    let cstr = |s: &[u8]| CString::new(s).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let source = cstr(fsname(options).as_bytes())?;
    let target = cstr(mountpoint.as_os_str().as_bytes())?;
    let fstype = cstr(fstype.as_bytes())?;
    let data = cstr(data.as_bytes())?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Escapes a value for `fusermount3 -o`: it splits options at commas and takes a
/// backslash as "the next character is literal".
fn escape_option_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if c == ',' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The `-o` list for `fusermount3`.
fn fusermount_options(options: &[MountOption], acl: SessionACL) -> String {
    let mut list: Vec<String> = options
        .iter()
        .map(|o| match o {
            MountOption::FSName(n) => format!("fsname={}", escape_option_value(n)),
            MountOption::Subtype(s) => format!("subtype={}", escape_option_value(s)),
            MountOption::CUSTOM(c) => c.clone(),
            MountOption::AutoUnmount => "auto_unmount".to_string(),
            MountOption::DefaultPermissions => "default_permissions".to_string(),
            MountOption::Dev => "dev".to_string(),
            MountOption::NoDev => "nodev".to_string(),
            MountOption::Suid => "suid".to_string(),
            MountOption::NoSuid => "nosuid".to_string(),
            MountOption::RO => "ro".to_string(),
            MountOption::RW => "rw".to_string(),
            MountOption::Exec => "exec".to_string(),
            MountOption::NoExec => "noexec".to_string(),
            MountOption::Atime => "atime".to_string(),
            MountOption::NoAtime => "noatime".to_string(),
            MountOption::DirSync => "dirsync".to_string(),
            MountOption::Sync => "sync".to_string(),
            MountOption::Async => "async".to_string(),
        })
        .collect();
    if acl != SessionACL::Owner {
        list.push("allow_other".to_string());
    }
    list.join(",")
}

/// Mounts through the setuid `fusermount3`, which sends the `/dev/fuse` descriptor
/// back over a socket (the `_FUSE_COMMFD` protocol).
fn mount_fusermount(
    mountpoint: &Path,
    options: &[MountOption],
    acl: SessionACL,
) -> anyhow::Result<OwnedFd> {
    let (ours, theirs) = UnixStream::pair().context("socketpair")?;
    let their_fd = theirs.as_raw_fd();
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-o")
        .arg(fusermount_options(options, acl))
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", their_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: the closure only calls fcntl, which is async-signal-safe, on a
    // descriptor that stays open until after the spawn; it lets that one socket
    // (and no other descriptor) survive the exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(their_fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .context("running fusermount3 (install the fuse3 package)")?;
    drop(theirs);
    let received = receive_fd(&ours);
    drop(ours);
    let out = child
        .wait_with_output()
        .context("waiting for fusermount3")?;
    match received {
        Ok(fd) if out.status.success() => Ok(fd),
        _ => bail!(
            "fusermount3 failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}

/// Receives one descriptor sent with SCM_RIGHTS.
fn receive_fd(sock: &UnixStream) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(std::os::fd::RawFd);
    let msg = loop {
        match recvmsg::<UnixAddr>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r?,
        }
    };
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            if let Some(&fd) = fds.first() {
                // SAFETY: the kernel just installed this descriptor in our table for
                // us alone; nothing else owns it.
                return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "fusermount3 sent no descriptor",
    ))
}

/// The identity of the topmost mount at `path`, without asking any FUSE daemon
/// (`AT_STATX_DONT_SYNC`: the attributes the kernel has; the mount ID and device are
/// the kernel's own, never the daemon's).
fn identity_at(path: &Path) -> io::Result<Identity> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: statx is plain data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: c is NUL-terminated and stx a writable statx buffer.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT | libc::AT_STATX_DONT_SYNC,
            libc::STATX_MNT_ID_UNIQUE,
            &mut stx,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if stx.stx_mask & (libc::STATX_MNT_ID_UNIQUE | libc::STATX_MNT_ID) == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel reports no mount ID (Linux 5.8 or later needed)",
        ));
    }
    Ok(Identity {
        mnt_id: stx.stx_mnt_id,
        dev_major: stx.stx_dev_major,
        dev_minor: stx.stx_dev_minor,
    })
}

/// Where the mount at `path` stands relative to ours.
#[derive(Debug, PartialEq, Eq)]
enum State {
    Ours,
    Gone,
    Covered,
}

impl OwnMount {
    /// The canonical mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The session's `/dev/fuse` descriptor (a duplicate), for notices `fuser` cannot
    /// send.
    pub fn device_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.device.as_fd()
    }

    /// The mount's device number as `major:minor`, as /proc/self/mountinfo shows it.
    pub fn device(&self) -> String {
        format!("{}:{}", self.id.dev_major, self.id.dev_minor)
    }

    /// Is the FUSE connection alive? After the kernel unmounted the last mount of
    /// our superblock it aborts the connection, and `/dev/fuse` polls `POLLERR`.
    pub fn connected(&self) -> bool {
        loop {
            let mut fds = [PollFd::new(self.device.as_fd(), PollFlags::empty())];
            match poll(&mut fds, PollTimeout::ZERO) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return false,
                Ok(_) => {
                    let revents = fds[0].revents().unwrap_or(PollFlags::empty());
                    return !revents.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL);
                }
            }
        }
    }

    fn state(&self) -> State {
        if !self.connected() {
            return State::Gone;
        }
        if identity_at(&self.mountpoint).ok() == Some(self.id) {
            return State::Ours;
        }
        // Still attached somewhere (its device is listed)? Then something hides it.
        let dev = self.device();
        if crate::mountinfo::mounts().iter().any(|m| m.device == dev) {
            State::Covered
        } else {
            State::Gone
        }
    }

    /// Is the connection alive while no mount of it is left in this process's mount
    /// namespace? Then copies in other namespaces hold it, or processes still use a
    /// lazily detached mount.
    pub fn gone_from_here_but_alive(&self) -> bool {
        let dev = self.device();
        self.connected() && !crate::mountinfo::mounts().iter().any(|m| m.device == dev)
    }

    /// Detaches lazily the copies of this mount that other mount namespaces hold
    /// (`unshare -m`, a service's PrivateTmp: each took a copy of every mount, and the
    /// file system lives while one is left), so that once our own mount is gone the
    /// session ends as soon as nobody uses the file system. Needs the right to enter
    /// those namespaces (root). Returns one line per namespace saying what was done.
    pub fn detach_copies(&self) -> Vec<String> {
        let dev = (self.id.dev_major, self.id.dev_minor);
        crate::mountinfo::copies_elsewhere(&self.device())
            .into_iter()
            .map(|c| {
                let at = c.mountpoints.join(", ");
                let whose = format!("the mount namespace of pid {} ({})", c.pid, c.command);
                match detach_in_namespace(c.pid, c.mountpoints, dev) {
                    Ok(()) => format!("detached the copy at {at} in {whose}"),
                    Err(e) => format!("cannot detach the copy at {at} in {whose}: {e}"),
                }
            })
            .collect()
    }

    /// Unmounts this mount, and only it: if the kernel already unmounted it, or
    /// something is mounted over it, nothing is done. A busy mount is retried for
    /// [`BUSY_PATIENCE`], then detached lazily.
    pub fn unmount(&self) -> anyhow::Result<Unmounted> {
        let start = Instant::now();
        loop {
            match self.state() {
                State::Gone => return Ok(Unmounted::AlreadyGone),
                State::Covered => return Ok(Unmounted::Covered),
                State::Ours => {}
            }
            let lazy = start.elapsed() >= BUSY_PATIENCE;
            match self.unmount_top(lazy) {
                Ok(()) if lazy => return Ok(Unmounted::Lazily),
                Ok(()) => return Ok(Unmounted::Now),
                // Busy, or unmounted by someone else meanwhile (EINVAL: not a mount
                // point any more): look again, for a bounded time.
                Err(e)
                    if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EINVAL))
                        && start.elapsed() < 2 * BUSY_PATIENCE =>
                {
                    thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("unmounting {}", self.mountpoint.display()))
                }
            }
        }
    }

    /// Unmounts the topmost mount at the mount point (just checked to be ours).
    fn unmount_top(&self, lazy: bool) -> io::Result<()> {
        if self.via_fusermount {
            return fusermount_unmount(&self.mountpoint, lazy);
        }
        let c = CString::new(self.mountpoint.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let flags = libc::UMOUNT_NOFOLLOW | if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: c is a NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// In the mount namespace of process `pid`, detaches (`umount -l`) each of
/// `mountpoints` that is still a mount of device `dev` (checked there, just before).
/// Runs on a thread of its own: entering a mount namespace needs a thread that
/// shares no root and working directory with the others.
fn detach_in_namespace(pid: u32, mountpoints: Vec<String>, dev: (u32, u32)) -> io::Result<()> {
    let entered =
        thread::Builder::new()
            .name("ns-detach".to_string())
            .spawn(move || -> io::Result<()> {
                let ns = File::open(format!("/proc/{pid}/ns/mnt"))?;
                // SAFETY: unshare(CLONE_FS) gives this thread its own root and cwd and
                // touches nothing else; setns takes an open namespace descriptor.
                unsafe {
                    if libc::unshare(libc::CLONE_FS) != 0
                        || libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
                for mp in mountpoints.iter().rev() {
                    let path = Path::new(mp);
                    let ours =
                        identity_at(path).is_ok_and(|id| (id.dev_major, id.dev_minor) == dev);
                    if !ours {
                        continue;
                    }
                    let c = CString::new(path.as_os_str().as_bytes())
                        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
                    // SAFETY: c is a NUL-terminated path.
                    if unsafe {
                        libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW)
                    } != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            })?;
    entered
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// Unmounts `mount` (see [`OwnMount::unmount`]) and waits for the session served
/// from the background to end. After a lazy detach that is when the last process
/// using the file system lets go.
pub fn unmount_and_join(mount: &OwnMount, session: BackgroundSession) -> anyhow::Result<()> {
    if mount.unmount()? == Unmounted::Covered {
        bail!(
            "{}: another file system is mounted over it; not unmounted",
            mount.mountpoint().display()
        );
    }
    session_ended(session.join())
        .with_context(|| format!("the session of {}", mount.mountpoint().display()))
}

/// What a session's end means: `ECONNABORTED` from a worker is the kernel ending the
/// connection while that worker was taking a request (the last user of a lazily
/// detached mount closing a file as the mount goes). The session has ended all the
/// same, and `fuser` called `destroy` (which closes the pool) before returning.
pub fn session_ended(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
        r => r,
    }
}

/// `fusermount3 -u [-z] -- DIR` (it checks itself that DIR is the user's FUSE mount).
fn fusermount_unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd
        .arg("--")
        .arg(OsStr::new(mountpoint))
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr);
    if msg.contains("busy") {
        return Err(io::Error::from_raw_os_error(libc::EBUSY));
    }
    Err(io::Error::other(format!("fusermount3 -u: {}", msg.trim())))
}

/// The kernel flag of an atime option the daemon honours (`MountOptions::atime`);
/// with no flag of its own (`diratime`, `nolazytime`), 0.
fn atime_flag(option: &str) -> Option<libc::c_ulong> {
    match option {
        "strictatime" => Some(libc::MS_STRICTATIME),
        "nodiratime" => Some(libc::MS_NODIRATIME),
        "lazytime" => Some(libc::MS_LAZYTIME),
        "diratime" | "nolazytime" => Some(0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusermount_options_escape_commas_and_backslashes() {
        let o = [
            MountOption::FSName(r"/dev/shm/a,b\c".to_string()),
            MountOption::Subtype("lynxfs".to_string()),
            MountOption::RO,
        ];
        assert_eq!(
            fusermount_options(&o, SessionACL::All),
            r"fsname=/dev/shm/a\,b\\c,subtype=lynxfs,ro,allow_other"
        );
    }
}
