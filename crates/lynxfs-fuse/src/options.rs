//! The `-o` mount options: one table that [`crate::mount::MountOptions::apply`] parses
//! through and that the documentation (`mount.lynxfs(8)`, `lynxfs mount --help`) is
//! generated from, so an option cannot be accepted without being documented, nor
//! documented without being accepted.

/// What an option does to [`crate::mount::MountOptions`]: `apply` matches on it
/// exhaustively.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    EntryTimeout,
    AttrTimeout,
    Threads,
    Backend,
    Data,
    Commit,
    AllowOther,
    DefaultPermissions,
    DaemonPermissions,
    Writeback,
    IoUring,
    ReadOnly,
    ReadWrite,
    NoSuid,
    Suid,
    NoDev,
    Dev,
    NoExec,
    Exec,
    NoAtime,
    RelAtime,
    StrictAtime,
    /// Accepted and shown on the mount as given (honoured as the file system stands).
    PassedOn,
    Sync,
    Async,
    DirSync,
    /// mount(8) and fstab options that mean nothing to the file system.
    Ignored,
}

/// One `-o` option.
#[derive(Clone, Copy, Debug)]
pub struct OptionSpec {
    pub name: &'static str,
    /// The value it takes (`name=VALUE`), as the documentation spells it; `None` for a
    /// flag.
    pub value: Option<&'static str>,
    pub effect: Effect,
    /// One paragraph for the manual and `--help`.
    pub help: &'static str,
}

const fn flag(name: &'static str, effect: Effect, help: &'static str) -> OptionSpec {
    OptionSpec {
        name,
        value: None,
        effect,
        help,
    }
}

const fn valued(
    name: &'static str,
    value: &'static str,
    effect: Effect,
    help: &'static str,
) -> OptionSpec {
    OptionSpec {
        name,
        value: Some(value),
        effect,
        help,
    }
}

/// Every option `-o` accepts, in the order the manual lists them.
pub const OPTIONS: &[OptionSpec] = &[
    valued(
        "entry_timeout",
        "SECONDS",
        Effect::EntryTimeout,
        "How long the kernel may cache a name (default 60; 0: not at all). Cached names, \
         attributes and pages are dropped at once when another process changes the pool.",
    ),
    valued(
        "attr_timeout",
        "SECONDS",
        Effect::AttrTimeout,
        "How long the kernel may cache attributes (default 60; 0: not at all).",
    ),
    valued(
        "threads",
        "N",
        Effect::Threads,
        "FUSE worker threads, 1 to 256 (default 2), each with its own /dev/fuse descriptor.",
    ),
    valued(
        "backend",
        "pmem|msync",
        Effect::Backend,
        "Durability backend: pmem (cache-line flushes: DAX persistent memory, or tmpfs \
         standing in) or msync (a pool on an ordinary disk file system); default: chosen \
         by where the pool lives.",
    ),
    valued(
        "data",
        "atomic|inplace",
        Effect::Data,
        "This mount's data mode (default: the pool's, see lynxfs mkfs --data): atomic \
         writes are all or nothing after a crash; inplace overwrites go in place, faster, \
         and a torn one may mix old and new bytes.",
    ),
    valued(
        "commit",
        "SECONDS",
        Effect::Commit,
        "A hybrid pool's commit interval (default 5): writes return once their bytes are \
         in the page cache and are durable at fsync, fdatasync, sync, O_SYNC and O_DSYNC \
         writes, unmount, or at the latest this many seconds later (1 to 86400). No \
         effect on other pools, whose writes are durable when they return.",
    ),
    flag(
        "allow_other",
        Effect::AllowOther,
        "Let users other than the mounter in (implies default_permissions; a user other \
         than root needs user_allow_other in /etc/fuse.conf).",
    ),
    flag(
        "default_permissions",
        Effect::DefaultPermissions,
        "Have the kernel check permissions too.",
    ),
    flag(
        "daemon_permissions",
        Effect::DaemonPermissions,
        "The daemon alone checks permissions, and the kernel caches no names \
         (entry_timeout=0); refused with allow_other and default_permissions.",
    ),
    flag(
        "writeback",
        Effect::Writeback,
        "The kernel's writeback cache (off by default): faster small writes, but writes \
         are then durable only at fsync or close, not when write returns.",
    ),
    valued(
        "io_uring",
        "on|off|auto",
        Effect::IoUring,
        "FUSE requests over io_uring, one queue per CPU, served on the CPU that made them \
         (Linux 6.14+, with /sys/module/fuse/parameters/enable_uring = Y). auto (the \
         default) uses it when the kernel offers it; on requires it (if the parameter is \
         N, root's mount switches it on and says so, anyone else gets an error); off keeps \
         the classic /dev/fuse loop. lynxfs info MOUNTPOINT says which one the daemon uses.",
    ),
    flag(
        "ro",
        Effect::ReadOnly,
        "Read-only: the pool is mapped privately and never changed.",
    ),
    flag("rw", Effect::ReadWrite, "Read-write (the default)."),
    flag(
        "nosuid",
        Effect::NoSuid,
        "Ignore set-user-ID and set-group-ID bits. Root's mount of a pool only root can \
         write is suid,dev by default; any other mount is nosuid,nodev.",
    ),
    flag(
        "suid",
        Effect::Suid,
        "Honour set-user-ID and set-group-ID bits.",
    ),
    flag("nodev", Effect::NoDev, "Do not interpret device files."),
    flag("dev", Effect::Dev, "Interpret device files."),
    flag(
        "noexec",
        Effect::NoExec,
        "Do not let programs be executed from the mount.",
    ),
    flag(
        "exec",
        Effect::Exec,
        "Let programs be executed (the default).",
    ),
    flag(
        "noatime",
        Effect::NoAtime,
        "Reads never update the access time.",
    ),
    flag("atime", Effect::RelAtime, "The same as relatime."),
    flag(
        "relatime",
        Effect::RelAtime,
        "Reads update the access time when it is older than the modification or change \
         time, or a day old (the default).",
    ),
    flag(
        "strictatime",
        Effect::StrictAtime,
        "Every read updates the access time.",
    ),
    flag(
        "nodiratime",
        Effect::PassedOn,
        "Accepted: a directory's access time is never updated by reading it anyway.",
    ),
    flag("diratime", Effect::PassedOn, "Accepted (see nodiratime)."),
    flag(
        "lazytime",
        Effect::PassedOn,
        "Accepted: times are durable as soon as they are stored anyway.",
    ),
    flag("nolazytime", Effect::PassedOn, "Accepted (see lazytime)."),
    flag(
        "sync",
        Effect::Sync,
        "Passed to the kernel as a synchronous mount.",
    ),
    flag(
        "async",
        Effect::Async,
        "Passed to the kernel (the default).",
    ),
    flag(
        "dirsync",
        Effect::DirSync,
        "Passed to the kernel: directory changes are synchronous.",
    ),
    flag(
        "defaults",
        Effect::Ignored,
        "fstab's placeholder: the defaults above.",
    ),
    flag(
        "auto",
        Effect::Ignored,
        "For mount(8) and fstab: mounted by mount -a (the default).",
    ),
    flag(
        "noauto",
        Effect::Ignored,
        "For mount(8) and fstab: not mounted by mount -a nor at boot.",
    ),
    flag(
        "user",
        Effect::Ignored,
        "For mount(8) and fstab: an ordinary user may mount it.",
    ),
    flag(
        "nouser",
        Effect::Ignored,
        "For mount(8) and fstab (the default).",
    ),
    flag(
        "users",
        Effect::Ignored,
        "For mount(8) and fstab: any user may mount and unmount it.",
    ),
    flag(
        "_netdev",
        Effect::Ignored,
        "For mount(8) and systemd: mounted once the network is up.",
    ),
    flag(
        "nofail",
        Effect::Ignored,
        "For mount(8) and systemd: a pool that does not exist is skipped without an error \
         (mount.lynxfs), and a mount that fails does not fail the boot.",
    ),
];

/// Options named `x-NAME=VALUE` are for other programs (systemd's `x-systemd.*`,
/// mount(8)'s `x-mount.*`) and are ignored; as the manual says it.
pub const X_OPTIONS_HELP: &str = "Options x-NAME=VALUE are for other programs (systemd's \
     x-systemd.*, mount(8)'s x-mount.*) and are ignored.";

/// The option called `name`.
pub fn lookup(name: &str) -> Option<&'static OptionSpec> {
    OPTIONS.iter().find(|o| o.name == name)
}

impl OptionSpec {
    /// `name` or `name=VALUE`, as the manual heads it.
    pub fn synopsis(&self) -> String {
        match self.value {
            Some(v) => format!("{}={v}", self.name),
            None => self.name.to_string(),
        }
    }
}

/// Every option's synopsis, comma-separated (for an error naming what is known).
pub fn known() -> String {
    OPTIONS
        .iter()
        .map(OptionSpec::synopsis)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The table as plain text: one option per paragraph (for `--help`).
pub fn as_text() -> String {
    let mut s = String::new();
    for o in OPTIONS {
        s.push_str(&format!("  {}\n          {}\n", o.synopsis(), o.help));
    }
    s.push_str(&format!("  x-NAME=VALUE\n          {X_OPTIONS_HELP}\n"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_option_parses() {
        for (i, o) in OPTIONS.iter().enumerate() {
            assert!(
                OPTIONS[..i].iter().all(|p| p.name != o.name),
                "{} twice",
                o.name
            );
            let sample = match o.value {
                None => o.name.to_string(),
                Some(v) => {
                    let first = v.split('|').next().unwrap();
                    let v = match first {
                        "SECONDS" | "N" => "1",
                        other => other,
                    };
                    format!("{}={v}", o.name)
                }
            };
            crate::mount::MountOptions::parse(&sample)
                .unwrap_or_else(|e| panic!("{sample}: {e:#}"));
        }
    }
}
