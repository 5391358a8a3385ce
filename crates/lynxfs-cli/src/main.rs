//! `lynxfs`: make, inspect and use LynxFS pools.

mod backend;
mod bench;
mod demo;
mod export;
mod fsck;
mod generate;
mod info;
mod mkfs;
mod mount;
mod progress;
mod run;
mod size;
mod supervise;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{FromArgMatches, Parser, Subcommand};

use backend::BackendKind;

/// The default pool: in /dev/shm (memory that outlives the process) where it exists.
pub const DEFAULT_POOL: &str = "/dev/shm/lynxfs.pool";

#[derive(Parser)]
#[command(
    name = "lynxfs",
    version,
    about = "LynxFS: a file system for persistent memory, in user space"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a pool file (mode 0600, its space reserved), or format a block device
    /// (with --force). A failed mkfs leaves the path as it was.
    Mkfs {
        /// Pool size, e.g. 1G, 512M, 65536 (bytes); default: 1G for a file, the whole
        /// device for a block device.
        #[arg(long, value_parser = size::parse)]
        size: Option<u64>,
        /// Lanes (per-CPU partitions), 1 to 256; default: one per CPU.
        #[arg(long)]
        lanes: Option<u32>,
        /// Number of inodes; default: one per 8 KiB of pool.
        #[arg(long)]
        inodes: Option<u64>,
        /// NUMA nodes the pool spans: each gets its own contiguous part of the inode and
        /// dentry tables and of the data area, and threads allocate on their CPU's node
        /// first (docs/FORMAT.md, section 2.7); the lanes must be a multiple of it.
        /// Default: the machine's node count (/sys/devices/system/node).
        #[arg(long)]
        nodes: Option<u32>,
        /// Replace an existing pool file of yours, or format a block device.
        #[arg(long)]
        force: bool,
        /// Durability backend: pmem or msync (default: pmem on DAX or tmpfs, else msync).
        #[arg(long)]
        backend: Option<BackendKind>,
        /// Data mode: atomic (a write is all or nothing after a crash) or inplace
        /// (overwrites go in place: faster, a torn one may mix old and new bytes);
        /// `-o data=` overrides it per mount (docs/CONSISTENCY.md).
        #[arg(long, default_value = "atomic")]
        data: lynxfs::DataMode,
        /// Owner of the root directory, as numeric UID:GID (default: yours), like
        /// mke2fs's root_owner.
        #[arg(long, value_name = "UID:GID", value_parser = mkfs::parse_owner)]
        root_owner: Option<(u32, u32)>,
        /// Percent of the blocks, inodes and dentries held back for root, 0 to 50, as
        /// ext4's reserved blocks: when users have filled the pool, root can still
        /// write (df shows the rest as available).
        #[arg(long, value_name = "PERCENT", default_value_t = lynxfs::pool::DEFAULT_RESERVED_PERCENT)]
        reserved: u32,
        /// A hybrid pool: metadata in the pool, file data on this block device or file
        /// (created if missing; an existing one only with --force). The device's header
        /// names the pool; the pool records the device's path (docs/FORMAT.md).
        #[arg(long, value_name = "DEVICE_OR_FILE")]
        data_device: Option<PathBuf>,
        /// The data device's size (its header's megabyte, the file data, and an export
        /// area as large as the pool): default, a block device's whole size; for a
        /// file, 8 times the pool size (a sparse file: it takes disk space as data is
        /// written). The pool may be much smaller than the device.
        #[arg(long, value_name = "SIZE", value_parser = size::parse, requires = "data_device")]
        device_size: Option<u64>,
        /// Pool file or block device.
        pool: PathBuf,
    },
    /// Make the default pool and run a short workload on it, printing what it measured.
    /// Refuses a path where something already is, unless --force; removes the pool it
    /// made when done.
    Demo {
        /// Format POOL even if something is there (as mkfs --force: only a file of
        /// yours, never through a symlink); it is then kept afterwards.
        #[arg(long)]
        force: bool,
        #[arg(long, default_value = "256M", value_parser = size::parse)]
        size: u64,
        #[arg(default_value = DEFAULT_POOL)]
        pool: PathBuf,
    },
    /// Describe a pool: format, size, lanes, mapping, space used and free; for a mounted
    /// pool (give the pool or the mount point), the DRAM of its index and cachelets.
    /// Given a hybrid pool's data device, describes the device and the pool its newest
    /// export holds (read-only, a stale export included).
    Info {
        /// Durability backend: pmem or msync (default: pmem on DAX or tmpfs, else msync).
        #[arg(long)]
        backend: Option<BackendKind>,
        /// Print one JSON object (schema: docs/JSON.md) instead of text.
        #[arg(long)]
        json: bool,
        pool: PathBuf,
    },
    /// Check a pool; with --repair, fix it. Exit code: 0 clean, 1 errors corrected,
    /// 4 errors left uncorrected, 8 operational error. Given a hybrid pool's data
    /// device, checks the pool its export holds (read-only); a stale export (its pool
    /// opened read-write since) is refused unless --stale.
    Fsck {
        /// Fix what is found (forces the recovery walk).
        #[arg(long)]
        repair: bool,
        /// For a data device: check its export even if stale (the pool was opened
        /// read-write after it was made, so it may name blocks since reused).
        #[arg(long)]
        stale: bool,
        /// Durability backend: pmem or msync (default: pmem on DAX or tmpfs, else msync).
        #[arg(long)]
        backend: Option<BackendKind>,
        /// Print one JSON object (schema: docs/JSON.md) instead of text.
        #[arg(long)]
        json: bool,
        pool: PathBuf,
    },
    /// Run a benchmark suite and print its table (syscalls, data, mdtest, smallfiles,
    /// recovery, apps, personalities, ablation, statall, rename, filetest, start).
    Bench(bench::BenchArgs),
    /// Mount a pool with FUSE. Given a hybrid pool's data device instead, serves the
    /// device alone, without persistent memory: its export is imported into a pool in
    /// /dev/shm, which is exported back to the device when a read-write mount ends. A
    /// stale export (its pool opened read-write since) is refused unless --stale -o ro.
    ///
    /// Without -f, returns once the mount is ready and serves from the background.
    /// `lynxfs mount --help` lists the -o options, as mount.lynxfs(8) does.
    Mount {
        /// Stay in the foreground (serve until unmounted, SIGINT or SIGTERM).
        #[arg(short = 'f')]
        foreground: bool,
        /// Mount options, comma-separated; may be given more than once.
        #[arg(short = 'o')]
        options: Vec<String>,
        /// For a data device: serve its export even if stale, read-only (-o ro): to
        /// copy files out when the pool is lost; they may show other files' bytes.
        #[arg(long)]
        stale: bool,
        pool: PathBuf,
        mountpoint: PathBuf,
    },
    /// Unmount a LynxFS mount and wait until its pool is closed (and, for a data
    /// device mounted without persistent memory, exported back to it).
    Umount {
        /// Then export a hybrid pool's metadata to its data device (`lynxfs export`).
        #[arg(long)]
        export: bool,
        mountpoint: PathBuf,
    },
    /// Write a hybrid pool's metadata to the export area of its data device, so the
    /// device alone is a complete LynxFS (`lynxfs import`, or `lynxfs mount DEVICE`). The
    /// pool must not be in use. A crash during an export leaves the previous one.
    Export {
        /// Durability backend: pmem or msync (default: pmem on DAX or tmpfs, else msync).
        #[arg(long)]
        backend: Option<BackendKind>,
        pool: PathBuf,
    },
    /// Rebuild a pool from the export on a data device (after `lynxfs export`): on
    /// another machine, or after the persistent memory was lost. NEWPOOL must not exist;
    /// it records DEVICE as its data device.
    Import {
        device: PathBuf,
        #[arg(value_name = "NEWPOOL")]
        pool: PathBuf,
    },
    /// Run a program with the preload library (liblynxfs_preload.so), which serves its
    /// calls on paths under DIR from POOL in the program's own threads, at library
    /// speed, and passes every other path and fd to the kernel.
    ///
    /// DIR defaults to POOL's FUSE mount point, so the same names work with and without
    /// the preload; POOL defaults to the pool mounted at DIR. The pool is attached
    /// before CMD runs; any problem is an error with exit code 1, a command that cannot
    /// be found exits 127. CMD runs as a child while the pool stays attached (its
    /// processes then share the runtime state instead of each building it), and the
    /// pool is detached when CMD ends; then lynxfs run ends as CMD did (its exit code,
    /// or the signal that killed it). SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1,
    /// SIGUSR2, SIGALRM and SIGWINCH sent to lynxfs run by a process reach CMD. The
    /// library is looked for in $LYNXFS_PRELOAD_LIB, next to this executable, then in
    /// ../lib/lynxfs/.
    ///
    /// Programs the preload cannot see into (static binaries, Go programs, setuid and
    /// setgid programs, for which ld.so ignores LD_PRELOAD) reach the pool only through
    /// the FUSE mount, when there is one at DIR.
    #[command(verbatim_doc_comment)]
    Run {
        /// The pool file (default: the pool mounted at --at DIR).
        #[arg(long)]
        pool: Option<PathBuf>,
        /// The directory whose paths the pool serves (default: POOL's mount point).
        #[arg(long, value_name = "DIR")]
        at: Option<PathBuf>,
        /// The command and its arguments.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD"
        )]
        cmd: Vec<OsString>,
    },
    /// Write the manual pages or print a shell's completion script (for installers).
    #[command(hide = true)]
    Generate(generate::Args),
}

fn main() -> ExitCode {
    // Installed (linked) as /sbin/mount.lynxfs, this is the helper mount(8) runs for
    // `mount -t lynxfs POOL DIR`; as /sbin/mount.fuse.lynxfs, the one it runs for a
    // live mount (type fuse.lynxfs: `mount -o remount,ro DIR`), which without it
    // falls back to mount.fuse(8), which needs `lynxfs` on the PATH and runs
    // `lynxfs SOURCE DIR -o OPTIONS`: SOURCE, the pool's absolute path, is never a
    // command.
    let args: Vec<_> = std::env::args_os().collect();
    let helper_name = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|n| n == "mount.lynxfs" || n == "mount.fuse.lynxfs");
    let fuse_form = args
        .get(1)
        .is_some_and(|a| a.as_encoded_bytes().starts_with(b"/"));
    if helper_name || fuse_form {
        return mount::helper_main(args);
    }
    let cli =
        Cli::from_arg_matches(&generate::command().get_matches()).unwrap_or_else(|e| e.exit());
    if !matches!(cli.cmd, Cmd::Mount { .. }) {
        // A report piped into `head` ends quietly, as other tools do, instead of
        // panicking on the closed pipe. Not for a mount: a daemon must not die of it.
        // SAFETY: restores the default action of one signal; no handler is involved.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lynxfs: {e:#}");
            if disconnected(&e) {
                eprintln!("lynxfs: {DISCONNECTED_HINT}");
            }
            ExitCode::from(8)
        }
    }
}

/// What to do about a mount whose daemon is gone (ENOTCONN).
pub const DISCONNECTED_HINT: &str = "a mount on the way is disconnected: its daemon is gone \
     (killed, or it crashed); `lynxfs umount DIR` (or `fusermount3 -u DIR`, or `umount -l \
     DIR`) removes the dead mount, then mount the pool again (the pool itself is safe: \
     recovery runs at its next open)";

/// Did `e` come from a mount whose daemon is gone?
pub fn disconnected(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.raw_os_error() == Some(libc::ENOTCONN))
            || c.downcast_ref::<lynxfs::Error>()
                .is_some_and(|l| l.errno() == libc::ENOTCONN)
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Mkfs {
            size,
            lanes,
            inodes,
            nodes,
            force,
            backend,
            data,
            root_owner,
            reserved,
            data_device,
            device_size,
            pool,
        } => {
            mkfs::run(&mkfs::Request {
                data_device: data_device.as_deref(),
                device_size,
                pool: &pool,
                size,
                lanes,
                inodes,
                nodes,
                force,
                backend,
                data,
                root_owner,
                reserved,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Demo { force, size, pool } => {
            demo::run(&pool, size, force)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Fsck {
            repair,
            stale,
            backend,
            json,
            pool,
        } if export::is_device(&pool) && !repair => {
            export::fsck_device(&pool, BackendKind::pick(backend, &pool), json, stale)
        }
        Cmd::Fsck { stale: true, .. } => {
            anyhow::bail!("--stale applies to a data device's export, checked without --repair")
        }
        Cmd::Fsck {
            repair,
            stale: false,
            backend,
            json,
            pool,
        } => Ok(fsck::run(
            &pool,
            repair,
            BackendKind::pick(backend, &pool),
            json,
        )),
        Cmd::Bench(args) => {
            bench::run(args)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Mount {
            foreground,
            options,
            stale,
            pool,
            mountpoint,
        } => {
            if export::is_device(&pool) {
                export::mount_device(&pool, &mountpoint, foreground, &options, stale)?;
            } else if stale {
                anyhow::bail!("--stale applies to a data device's export, not to a pool");
            } else {
                mount::mount(&pool, &mountpoint, foreground, &options)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Umount { export, mountpoint } => {
            let pool = mount::umount(&mountpoint)?;
            export::after_umount(&pool, export)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Export { backend, pool } => {
            export::export(&pool, BackendKind::pick(backend, &pool))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Import { device, pool } => {
            export::import(&device, &pool)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run { pool, at, cmd } => Ok(run::run(&run::Request {
            pool: pool.as_deref(),
            at: at.as_deref(),
            cmd: &cmd,
        })),
        Cmd::Generate(args) => {
            generate::run(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Info {
            backend,
            json,
            pool,
        } if export::is_device(&pool) => {
            export::info_device(&pool, BackendKind::pick(backend, &pool), json)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Info {
            backend,
            json,
            pool,
        } => {
            info::print(&pool, BackendKind::pick(backend, &pool), json)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
