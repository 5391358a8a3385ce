//! Mounting a pool: options with mount(8)-style names, a foreground mount that serves
//! until unmounted or signalled, a two-step variant for daemons (mount, then serve in
//! a forked child), and a background mount for tests.
//!
//! However the session ends (`umount`, `fusermount3 -u`, SIGTERM/SIGINT/SIGHUP in
//! the foreground, dropping a [`LynxMount`]), the pool is closed cleanly
//! ([`lynxfs::Fs::close`], from the adapter's `destroy`, after every worker stopped).
//! A pool may be mounted more than once (each daemon is one more attached process,
//! and each forwards the others' changes to its kernel as invalidations); a mount
//! right after `umount(8)` attaches beside the previous daemon while it detaches.

use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context};
use fuser::{BackgroundSession, Config, MountOption, Session, SessionACL};
use lynxfs::pmem::{Backend, MsyncBackend, PmemBackend};
use lynxfs::{Access, Atime, Fs, Pool, Progress, Quiet};
use nix::sys::signal::{SigSet, Signal};

use crate::adapter::LynxFuse;
use crate::kmount::{self, OwnMount, Unmounted};
use crate::options::{self, Effect};

/// Which durability backend to open the pool with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// Cache-line flushes and sfence: DAX persistent memory, or tmpfs standing in.
    Pmem,
    /// msync of touched pages: a pool on an ordinary disk file system.
    Msync,
}

impl BackendChoice {
    /// pmem where flushes suffice (DAX, or a file on tmpfs), else msync
    /// ([`lynxfs::pmem::flushes_suffice`]).
    pub fn auto(pool: &Path) -> BackendChoice {
        if lynxfs::pmem::flushes_suffice(pool) {
            BackendChoice::Pmem
        } else {
            BackendChoice::Msync
        }
    }
}

/// Mount options; [`MountOptions::parse`] reads them in `-o` syntax.
#[derive(Clone, Debug, PartialEq)]
pub struct MountOptions {
    /// How long the kernel may cache a name (`entry_timeout=`, seconds); 0 = off.
    pub entry_timeout: Duration,
    /// How long the kernel may cache attributes (`attr_timeout=`, seconds); 0 = off.
    pub attr_timeout: Duration,
    /// Let users other than the mounter in (`allow_other`).
    pub allow_other: bool,
    /// Have the kernel check permissions too (`default_permissions`); implied by
    /// `allow_other`.
    pub default_permissions: bool,
    /// The daemon alone checks permissions (`daemon_permissions`): the kernel is not
    /// told about ACLs (FUSE_POSIX_ACL would turn its own checks on) and caches no
    /// names (entry_timeout=0: it would reuse a cached name without asking, so a
    /// directory that lost its x bit would still be walked through). Refused with
    /// `allow_other` and `default_permissions`.
    pub daemon_permissions: bool,
    /// FUSE worker threads (`threads=`), each with its own /dev/fuse fd.
    pub threads: usize,
    /// Mount read-only (`ro`); the pool is then mapped privately and never changed.
    pub read_only: bool,
    /// `backend=pmem|msync`; `None` picks by where the pool lives.
    pub backend: Option<BackendChoice>,
    /// The kernel's writeback cache (`writeback`): small writes are gathered in the
    /// kernel's pages and sent later, so a write is durable only at fsync or close.
    pub writeback: bool,
    /// FUSE over io_uring (`io_uring=on|off|auto`); see [`IoUringMode`].
    pub io_uring: IoUringMode,
    /// When reads update atime (`noatime`, `relatime`, `strictatime`; the kernel
    /// leaves atime of FUSE files to the daemon).
    pub atime: Atime,
    /// Other kernel mount flags passed along (nosuid, nodev, noexec, noatime, ...).
    pub extra: Vec<MountOption>,
    /// `data=atomic|inplace`: this mount's data mode; `None` keeps the pool's.
    pub data: Option<lynxfs::DataMode>,
    /// `commit=`: a hybrid pool's commit interval (`None`: the engine's 5 s).
    pub commit: Option<Duration>,
    /// Not an `-o` option: append the daemon's own time per request type to this
    /// file when the session ends ([`crate::times`]); `None` takes it from
    /// `LYNXFS_FUSE_TIMES`, if set.
    pub times_file: Option<std::path::PathBuf>,
}

/// Whether the kernel's FUSE requests come over io_uring (one queue per CPU, served
/// on the CPU that made the request) or the classic `/dev/fuse` loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoUringMode {
    /// io_uring when the kernel offers it (the `fuse` module's `enable_uring`
    /// parameter is on and INIT offers the flag); `/dev/fuse` otherwise.
    Auto,
    /// io_uring or no mount. If `enable_uring` is off, root switches it on (and says
    /// so on stderr); anyone else gets an error naming the parameter.
    On,
    /// The classic `/dev/fuse` loop.
    Off,
}

/// The `fuse` module parameter that lets FUSE connections use io_uring.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether the kernel lets FUSE use io_uring now (`enable_uring` is `Y`).
pub fn uring_enabled() -> bool {
    std::fs::read_to_string(ENABLE_URING).is_ok_and(|v| v.trim() == "Y")
}

/// For `io_uring=on`: makes sure `enable_uring` is on, switching it on as root.
fn require_uring_enabled() -> anyhow::Result<()> {
    if uring_enabled() {
        return Ok(());
    }
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "io_uring=on: FUSE over io_uring is switched off ({ENABLE_URING} is not Y); \
             root can switch it on (echo Y > {ENABLE_URING}), or mount with io_uring=auto"
        );
    }
    std::fs::write(ENABLE_URING, "Y").with_context(|| {
        format!("io_uring=on: switching FUSE over io_uring on ({ENABLE_URING}); does this kernel have it (6.14+)?")
    })?;
    eprintln!("lynxfs: io_uring=on: switched FUSE over io_uring on ({ENABLE_URING} = Y)");
    Ok(())
}

/// The default entry and attribute timeouts: long, because the kernel's cached names,
/// attributes and pages are invalidated at once whenever the pool changes other than
/// through the mount (the daemon forwards the pool's change notices), so the
/// timeouts only bound how long the kernel keeps what is still true.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            entry_timeout: DEFAULT_TIMEOUT,
            attr_timeout: DEFAULT_TIMEOUT,
            allow_other: false,
            default_permissions: false,
            daemon_permissions: false,
            threads: 2,
            read_only: false,
            backend: None,
            writeback: false,
            io_uring: IoUringMode::Auto,
            atime: Atime::default(),
            extra: Vec::new(),
            data: None,
            commit: None,
            times_file: None,
        }
    }
}

fn seconds(key: &str, v: &str) -> anyhow::Result<Duration> {
    let s: f64 = v
        .parse()
        .with_context(|| format!("{key}={v}: not a number of seconds"))?;
    if !s.is_finite() || !(0.0..=1e9).contains(&s) {
        bail!("{key}={v}: must be between 0 and 1e9 seconds");
    }
    Ok(Duration::from_secs_f64(s))
}

impl MountOptions {
    /// Parses a comma-separated option list (`-o` syntax) on top of the defaults.
    pub fn parse(list: &str) -> anyhow::Result<MountOptions> {
        let mut o = MountOptions::default();
        o.apply(list)?;
        Ok(o)
    }

    /// Applies a comma-separated option list to these options.
    pub fn apply(&mut self, list: &str) -> anyhow::Result<()> {
        for opt in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, val) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let need = || val.with_context(|| format!("option {key} needs a value ({key}=...)"));
            let Some(spec) = options::lookup(key) else {
                if val.is_some() && key.starts_with("x-") {
                    continue;
                }
                bail!(
                    "unknown mount option {opt:?} (known: {}, x-NAME=VALUE)",
                    options::known()
                );
            };
            match spec.effect {
                Effect::EntryTimeout => self.entry_timeout = seconds(key, need()?)?,
                Effect::AttrTimeout => self.attr_timeout = seconds(key, need()?)?,
                Effect::Threads => {
                    let v = need()?;
                    let n: usize = v
                        .parse()
                        .with_context(|| format!("threads={v}: not a number"))?;
                    if !(1..=256).contains(&n) {
                        bail!("threads={v}: must be 1 to 256");
                    }
                    self.threads = n;
                }
                Effect::Backend => {
                    self.backend = Some(match need()? {
                        "pmem" => BackendChoice::Pmem,
                        "msync" => BackendChoice::Msync,
                        other => bail!("backend={other}: must be pmem or msync"),
                    })
                }
                Effect::Data => self.data = Some(need()?.parse()?),
                Effect::Commit => {
                    let v = need()?;
                    match v.parse::<u64>() {
                        Ok(s) if (1..=86_400).contains(&s) => {
                            self.commit = Some(Duration::from_secs(s))
                        }
                        _ => bail!("commit={v}: must be 1 to 86400 seconds"),
                    }
                }
                Effect::AllowOther => self.allow_other = true,
                Effect::DefaultPermissions => self.default_permissions = true,
                Effect::DaemonPermissions => self.daemon_permissions = true,
                Effect::Writeback => self.writeback = true,
                Effect::IoUring => {
                    self.io_uring = match need()? {
                        "on" => IoUringMode::On,
                        "off" => IoUringMode::Off,
                        "auto" => IoUringMode::Auto,
                        other => bail!("io_uring={other}: must be on, off or auto"),
                    }
                }
                Effect::ReadOnly => self.read_only = true,
                Effect::ReadWrite => self.read_only = false,
                Effect::NoSuid => self.extra.push(MountOption::NoSuid),
                Effect::Suid => self.extra.push(MountOption::Suid),
                Effect::NoDev => self.extra.push(MountOption::NoDev),
                Effect::Dev => self.extra.push(MountOption::Dev),
                Effect::NoExec => self.extra.push(MountOption::NoExec),
                Effect::Exec => self.extra.push(MountOption::Exec),
                Effect::NoAtime => {
                    self.atime = Atime::Never;
                    self.extra.push(MountOption::NoAtime)
                }
                Effect::RelAtime => {
                    self.atime = Atime::Relative;
                    self.extra.push(MountOption::Atime)
                }
                Effect::StrictAtime => {
                    self.atime = Atime::Strict;
                    self.extra.push(MountOption::CUSTOM(key.to_string()))
                }
                // Directories' atime is never updated (readdir leaves it), and times
                // are durable as soon as stored: both are honoured as they stand.
                Effect::PassedOn => self.extra.push(MountOption::CUSTOM(key.to_string())),
                Effect::Sync => self.extra.push(MountOption::Sync),
                Effect::Async => self.extra.push(MountOption::Async),
                Effect::DirSync => self.extra.push(MountOption::DirSync),
                Effect::Ignored => {}
            }
        }
        self.settle_permissions()
    }

    /// `daemon_permissions` excludes the kernel's checks, and needs names uncached.
    fn settle_permissions(&mut self) -> anyhow::Result<()> {
        if !self.daemon_permissions {
            return Ok(());
        }
        if self.allow_other || self.default_permissions {
            bail!(
                "daemon_permissions cannot go with allow_other or default_permissions \
                 (they have the kernel check permissions)"
            );
        }
        self.entry_timeout = Duration::ZERO;
        Ok(())
    }

    fn config(&self, pool: &Path) -> Config {
        let mut config = Config::default();
        // The canonical path, so that tools (`lynxfs info`, `umount`) can match a
        // pool with its mount whatever path it was mounted by.
        let source = pool.canonicalize().unwrap_or_else(|_| pool.to_path_buf());
        let mut opts = vec![
            MountOption::FSName(source.display().to_string()),
            MountOption::Subtype("lynxfs".to_string()),
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
        ];
        // With other users let in, the kernel checks permissions too: a name it caches
        // for one caller is reused for the next without asking the daemon, so only the
        // kernel can apply the next caller's search and access rights to it.
        if self.default_permissions || self.allow_other {
            opts.push(MountOption::DefaultPermissions);
        }
        for e in &self.extra {
            if !opts.contains(e) {
                opts.push(e.clone());
            }
        }
        opts.extend(default_dev_suid(&opts, &source));
        config.mount_options = opts;
        if self.allow_other {
            config.acl = SessionACL::All;
        }
        config.n_threads = Some(self.threads.max(1));
        config.clone_fd = self.threads > 1;
        config.io_uring = self.io_uring != IoUringMode::Off;
        config
    }
}

/// `dev` and `suid` for root's mount of a pool only root can write, as kernel file
/// systems mount (device nodes open, set-user-ID programs run as their owner); none
/// for anyone else's mount (fusermount3 makes those nosuid,nodev) or a pool another
/// user can write, who could otherwise forge a set-user-ID-root file in it by
/// attaching to it. An explicit `[no]dev` or `[no]suid` is kept.
fn default_dev_suid(opts: &[MountOption], pool: &Path) -> Vec<MountOption> {
    use std::os::unix::fs::MetadataExt;
    let root_only = nix::unistd::geteuid().is_root()
        && std::fs::metadata(pool).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0);
    if !root_only {
        return Vec::new();
    }
    let mut add = Vec::new();
    if !opts.contains(&MountOption::Dev) && !opts.contains(&MountOption::NoDev) {
        add.push(MountOption::Dev);
    }
    if !opts.contains(&MountOption::Suid) && !opts.contains(&MountOption::NoSuid) {
        add.push(MountOption::Suid);
    }
    add
}

/// A mounted pool whose session has not started serving yet: the mount is live (the
/// kernel's INIT was answered), so a daemon may detach now and serve in the child.
/// Dropped unserved, it unmounts (its own mount only) and closes the pool.
pub struct Prepared {
    inner: Option<Box<dyn Serve>>,
    mount: Option<OwnMount>,
}

trait Serve: Send {
    fn run(self: Box<Self>) -> std::io::Result<()>;
    fn spawn(self: Box<Self>) -> std::io::Result<BackgroundSession>;
}

/// A mounted session and its change-notices thread, which starts with the serving:
/// `lynxfs mount` forks to leave its terminal after mounting, and a process must
/// have one thread to fork.
struct Serving<B: Backend> {
    session: Session<LynxFuse<B>>,
    forward: crate::forward::Forward<B>,
    device: std::os::fd::OwnedFd,
    /// A hybrid pool's commit timer (`commit=`), a thread too.
    commit: (Arc<Fs<B>>, Duration),
}

impl<B: Backend> Serving<B> {
    fn start_notices(&self) -> std::io::Result<()> {
        self.commit.0.commit_every(self.commit.1);
        let device = self.device.try_clone()?;
        self.forward.start(self.session.notifier(), device)
    }
}

impl<B: Backend> Serve for Serving<B> {
    fn run(self: Box<Self>) -> std::io::Result<()> {
        self.start_notices()?;
        self.session.run()
    }
    fn spawn(self: Box<Self>) -> std::io::Result<BackgroundSession> {
        self.start_notices()?;
        self.session.spawn()
    }
}

fn session<B: Backend>(
    pool_path: &Path,
    mountpoint: &Path,
    o: &MountOptions,
    backend: B,
    progress: &dyn Progress,
) -> anyhow::Result<(Box<dyn Serve>, OwnMount)> {
    let access = if o.read_only {
        Access::ReadOnly
    } else {
        Access::ReadWrite
    };
    // The pool first: a missing, foreign or busy pool is reported before mounting.
    let pool = Pool::open_with_progress(pool_path, access, backend, progress)?;
    if let Some(mode) = o.data {
        pool.set_data_mode(mode);
    }
    // The daemon lives long: its first requests must not stall on page faults.
    pool.populate();
    let fs = Arc::new(Fs::new(pool));
    fs.set_atime(o.atime);
    let mut fuse = LynxFuse::new(fs.clone(), o.entry_timeout, o.attr_timeout, o.read_only);
    if o.daemon_permissions {
        fuse = fuse.without_kernel_acls();
    }
    if o.writeback {
        fuse = fuse.with_writeback();
    }
    let times = crate::times::TimesFile::new(o.times_file.as_deref(), mountpoint);
    let timed = times.as_ref().map(|t| t.times());
    if let Some(t) = times {
        fuse = fuse.with_request_times(t);
    }
    let notices = fuse.notices();
    let transport = fuse.transport();
    let forward = fuse.forward();
    let started = if o.io_uring == IoUringMode::On {
        require_uring_enabled()
            .and_then(|()| kmount::session(fuse, mountpoint, &o.config(pool_path)))
            .and_then(|(s, mount)| {
                if s.io_uring() {
                    return Ok((s, mount));
                }
                let _ = mount.unmount();
                bail!("io_uring=on: the kernel did not offer FUSE over io_uring at INIT")
            })
    } else {
        kmount::session(fuse, mountpoint, &o.config(pool_path))
    };
    match started {
        Ok((mut s, mount)) => {
            if let Some(t) = timed {
                s.time_requests(t);
            }
            // INIT is answered (it would narrow the window again): large reads may
            // now go in 1 MiB READs.
            if let Err(e) = crate::readahead::widen(&mount.device()) {
                eprintln!(
                    "lynxfs: widening the readahead window of {}: {e}",
                    mount.device()
                );
            }
            // Set once, here, before any request is served.
            let _ = notices.set(s.notifier());
            let _ = transport.set(s.io_uring_state());
            let device = match mount.device_fd().try_clone_to_owned() {
                Ok(d) => d,
                Err(e) => {
                    let _ = mount.unmount();
                    return Err(anyhow::Error::new(e).context("the FUSE device for notices"));
                }
            };
            let serving = Serving {
                session: s,
                forward,
                device,
                commit: (fs, o.commit.unwrap_or(lynxfs::data::txn::DEFAULT_INTERVAL)),
            };
            Ok((Box::new(serving), mount))
        }
        Err(e) => {
            // Nothing was served: close the pool cleanly before reporting.
            let _ = fs.close();
            Err(e.context(format!("mounting at {}", mountpoint.display())))
        }
    }
}

/// Opens the pool and mounts it, without serving yet.
pub fn prepare(pool: &Path, mountpoint: &Path, o: &MountOptions) -> anyhow::Result<Prepared> {
    prepare_with_progress(pool, mountpoint, o, &Quiet)
}

/// A missing mount point and a file in its place are different mistakes.
fn check_mountpoint(mountpoint: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(mountpoint) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => bail!("{}: mount point is not a directory", mountpoint.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{}: mount point does not exist", mountpoint.display())
        }
        Err(e) => Err(e).with_context(|| format!("mount point {}", mountpoint.display())),
    }
}

/// Mounting a pool again on the directory where it is mounted would only stack a
/// second mount over the first: refused, as mount(8) refuses it for a disk.
fn check_not_mounted_there(pool: &Path, mountpoint: &Path) -> anyhow::Result<()> {
    let (Ok(pool), Ok(mp)) = (pool.canonicalize(), mountpoint.canonicalize()) else {
        return Ok(()); // the open and the mount say what is wrong
    };
    let (pool, mp) = (pool.to_string_lossy(), mp.to_string_lossy());
    let top = crate::mountinfo::mounts()
        .into_iter()
        .rev()
        .find(|m| m.mountpoint == mp);
    if top.is_some_and(|m| m.fstype.starts_with("fuse") && m.source == pool) {
        bail!("{pool} is already mounted on {mp}");
    }
    Ok(())
}

/// [`prepare`], telling `progress` how recovery goes if the pool needs it.
pub fn prepare_with_progress(
    pool: &Path,
    mountpoint: &Path,
    o: &MountOptions,
    progress: &dyn Progress,
) -> anyhow::Result<Prepared> {
    crate::check_fuse_device()?;
    check_mountpoint(mountpoint)?;
    check_not_mounted_there(pool, mountpoint)?;
    let (inner, mount) = match o.backend.unwrap_or_else(|| BackendChoice::auto(pool)) {
        BackendChoice::Pmem => session(pool, mountpoint, o, PmemBackend::default(), progress)?,
        BackendChoice::Msync => session(pool, mountpoint, o, MsyncBackend, progress)?,
    };
    Ok(Prepared {
        inner: Some(inner),
        mount: Some(mount),
    })
}

/// The signals that stop a foreground mount: SIGINT (^C), SIGTERM (kill, systemd)
/// and SIGHUP (its terminal closed). Each unmounts and closes the pool cleanly.
fn stop_signals() -> SigSet {
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGHUP);
    signals
}

/// Blocks the stop signals (SIGINT, SIGTERM, SIGHUP) in this thread and every thread
/// spawned after it, so they only ever reach `sigwait`. Call before [`prepare`]
/// (before any thread exists).
pub fn block_stop_signals() -> anyhow::Result<SigSet> {
    let signals = stop_signals();
    signals
        .thread_block()
        .context("blocking SIGINT/SIGTERM/SIGHUP")?;
    Ok(signals)
}

/// Handles every stop signal for the life of the process, on a thread of its own:
/// each one unmounts `mount` (and only it); a busy mount is retried, then detached
/// lazily, and so are copies of it in other mount namespaces, so the session ends
/// (and the pool is closed) when its last user goes. A mount hidden under another
/// one is left alone and reported.
pub fn unmount_on_signals(
    signals: SigSet,
    mount: Arc<OwnMount>,
    who: &'static str,
) -> anyhow::Result<()> {
    thread::Builder::new()
        .name("signal-wait".to_string())
        .spawn(move || loop {
            let sig = match signals.wait() {
                Ok(sig) => sig,
                Err(e) => {
                    eprintln!("{who}: waiting for signals: {e}");
                    return;
                }
            };
            let mp = mount.mountpoint().display();
            eprintln!("{who}: {sig}, unmounting {mp}");
            match mount.unmount() {
                Ok(Unmounted::Now) => {}
                Ok(Unmounted::Lazily) => eprintln!(
                    "{who}: {mp} is busy: detached it; the pool is closed when the last \
                     process using it lets go"
                ),
                Ok(Unmounted::AlreadyGone) => eprintln!(
                    "{who}: {mp} is already unmounted; the pool is closed when the last \
                     process using it lets go"
                ),
                Ok(Unmounted::Covered) => eprintln!(
                    "{who}: another file system is mounted over {mp}: not unmounting; \
                     unmount that one, then signal again"
                ),
                Err(e) => eprintln!("{who}: {e:#}"),
            }
            if mount.gone_from_here_but_alive() {
                for line in mount.detach_copies() {
                    eprintln!("{who}: {line}");
                }
            }
        })
        .context("spawning the signal thread")?;
    Ok(())
}

/// Watches this process's mount table, on a thread of its own: once `mount` has left
/// it (`umount DIR`, `lynxfs umount`) while its file system lives on in copies that
/// other mount namespaces took (`unshare -m`, a service's PrivateTmp), those copies
/// are detached too, as the unmount meant the pool to be let go; processes still
/// using files there keep them until they close them. Ends with the connection.
pub fn follow_unmount_into_namespaces(
    mount: Arc<OwnMount>,
    who: &'static str,
) -> anyhow::Result<()> {
    let table = std::fs::File::open("/proc/self/mountinfo").context("/proc/self/mountinfo")?;
    thread::Builder::new()
        .name("mount-watch".to_string())
        .spawn(move || {
            use std::os::fd::AsFd;
            let mut tried: Vec<String> = Vec::new();
            loop {
                // A change of this namespace's mount table wakes the poll (POLLPRI);
                // the timeout only bounds how late the end of the connection is seen.
                let mut fds = [nix::poll::PollFd::new(
                    table.as_fd(),
                    nix::poll::PollFlags::POLLPRI,
                )];
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16));
                if !mount.gone_from_here_but_alive() {
                    if mount.connected() {
                        continue;
                    }
                    return;
                }
                for line in mount.detach_copies() {
                    // A copy that cannot be detached is reported once, not every second.
                    if !tried.contains(&line) {
                        eprintln!(
                            "{who}: {} is unmounted: {line}",
                            mount.mountpoint().display()
                        );
                        tried.push(line);
                    }
                }
            }
        })
        .context("spawning the mount watch thread")?;
    Ok(())
}

impl Prepared {
    pub fn mountpoint(&self) -> &Path {
        self.mount.as_ref().expect("mounted").mountpoint()
    }

    fn take(&mut self) -> (Box<dyn Serve>, OwnMount) {
        let inner = self.inner.take().expect("served once");
        let mount = self.mount.take().expect("served once");
        (inner, mount)
    }

    /// Serves until unmounted (`umount`, `fusermount3 -u`) or, with `signals`, until
    /// one of them unmounts it ([`unmount_on_signals`]). The pool is closed cleanly
    /// before this returns. Once the session has ended nothing is unmounted: the
    /// kernel already did, and the path may now show another file system.
    pub fn run(mut self, signals: Option<SigSet>) -> anyhow::Result<()> {
        let (inner, mount) = self.take();
        let mount = Arc::new(mount);
        follow_unmount_into_namespaces(mount.clone(), "lynxfs")?;
        if let Some(signals) = signals {
            unmount_on_signals(signals, mount, "lynxfs")?;
        }
        kmount::session_ended(inner.run()).context("FUSE session")
    }

    /// Serves from background threads (tests).
    pub fn spawn(mut self) -> anyhow::Result<LynxMount> {
        let (inner, mount) = self.take();
        let session = match inner.spawn() {
            Ok(s) => s,
            Err(e) => {
                let _ = mount.unmount();
                return Err(anyhow::Error::new(e).context("spawning the FUSE session thread"));
            }
        };
        Ok(LynxMount {
            mount,
            session: Some(session),
        })
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // Never served: unmount first (nobody answers the kernel, but an unmount of a
        // FUSE file system needs no answer), then the session's drop closes the pool.
        if let Some(mount) = self.mount.take() {
            if let Err(e) = mount.unmount() {
                eprintln!("lynxfs-fuse: {e:#}");
            }
        }
    }
}

/// Mounts `pool` at `mountpoint` and serves in the foreground until it is unmounted
/// or a stop signal arrives; the pool is closed cleanly before this returns.
pub fn mount(pool: &Path, mountpoint: &Path, o: &MountOptions) -> anyhow::Result<()> {
    let signals = block_stop_signals()?;
    prepare(pool, mountpoint, o)?.run(Some(signals))
}

/// Mounts `pool` and serves it from background threads; dropping the result (or
/// [`LynxMount::unmount`]) unmounts and closes the pool.
pub fn mount_background(
    pool: &Path,
    mountpoint: &Path,
    o: &MountOptions,
) -> anyhow::Result<LynxMount> {
    prepare(pool, mountpoint, o)?.spawn()
}

/// A pool mounted by [`mount_background`].
#[derive(Debug)]
pub struct LynxMount {
    mount: OwnMount,
    session: Option<BackgroundSession>,
}

impl LynxMount {
    pub fn mountpoint(&self) -> &Path {
        self.mount.mountpoint()
    }

    /// Unmounts, waits for the session to end and the pool to be closed.
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

impl Drop for LynxMount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            eprintln!("lynxfs-fuse: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options() {
        let o = MountOptions::parse("").unwrap();
        assert_eq!(o, MountOptions::default());
        assert_eq!(o.threads, 2);
        assert_eq!(o.attr_timeout, DEFAULT_TIMEOUT);
        assert!(!o.writeback);
        assert!(MountOptions::parse("writeback").unwrap().writeback);
        assert_eq!(o.io_uring, IoUringMode::Auto);
        for (opt, mode) in [
            ("io_uring=on", IoUringMode::On),
            ("io_uring=off", IoUringMode::Off),
            ("io_uring=auto", IoUringMode::Auto),
        ] {
            assert_eq!(MountOptions::parse(opt).unwrap().io_uring, mode);
        }
        let o = MountOptions::parse(
            "entry_timeout=0,attr_timeout=0.5,allow_other,default_permissions,threads=4,ro,backend=msync,nosuid,defaults",
        )
        .unwrap();
        assert_eq!(o.entry_timeout, Duration::ZERO);
        assert_eq!(o.attr_timeout, Duration::from_millis(500));
        assert!(o.allow_other && o.default_permissions && o.read_only);
        assert_eq!(o.threads, 4);
        assert_eq!(o.backend, Some(BackendChoice::Msync));
        assert_eq!(o.extra, vec![MountOption::NoSuid]);
    }

    #[test]
    fn bad_options_are_clear_errors() {
        for (bad, says) in [
            ("threads=0", "threads=0"),
            ("threads=x", "not a number"),
            ("attr_timeout=-1", "between"),
            ("entry_timeout=nan", "between"),
            ("entry_timeout", "needs a value"),
            ("backend=disk", "pmem or msync"),
            ("io_uring=yes", "on, off or auto"),
            ("io_uring", "needs a value"),
            ("data=fast", "atomic or inplace"),
            ("frobnicate", "unknown mount option"),
            ("daemon_permissions,allow_other", "cannot go with"),
            ("default_permissions,daemon_permissions", "cannot go with"),
        ] {
            let e = MountOptions::parse(bad).unwrap_err();
            assert!(format!("{e:#}").contains(says), "{bad}: {e:#}");
        }
    }

    #[test]
    fn daemon_permissions_caches_no_names() {
        let o = MountOptions::parse("entry_timeout=5,daemon_permissions").unwrap();
        assert!(o.daemon_permissions);
        assert_eq!(o.entry_timeout, Duration::ZERO);
        assert_eq!(o.attr_timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn data_mode_is_a_mount_option() {
        assert_eq!(MountOptions::parse("rw").unwrap().data, None);
        let o = MountOptions::parse("data=inplace").unwrap();
        assert_eq!(o.data, Some(lynxfs::DataMode::Inplace));
        let o = MountOptions::parse("data=atomic").unwrap();
        assert_eq!(o.data, Some(lynxfs::DataMode::Atomic));
    }

    #[test]
    fn commit_interval_is_a_mount_option() {
        assert_eq!(MountOptions::parse("rw").unwrap().commit, None);
        let o = MountOptions::parse("commit=2").unwrap();
        assert_eq!(o.commit, Some(Duration::from_secs(2)));
        assert!(MountOptions::parse("commit=0").is_err());
        assert!(MountOptions::parse("commit=x").is_err());
    }
}
