//! Benchmark suites comparing LynxFS with kernel file systems (issue 7).
//!
//! A file system under test is a [`Target`]: path-based metadata calls and
//! handle-based data calls. [`DirTarget`] drives a kernel file system through system
//! calls on a directory; [`TmpfsTarget`] and [`Ext4Target`] mount a fresh one first.
//! [`run_suite`] runs a suite over several targets in one process, interleaving them
//! operation by operation so that machine noise lands on all of them alike, prints a
//! table and optionally writes the [`Report`] as JSON.
//!
//! Suites:
//! - `syscalls`: mean µs per create, stat (1, 2, 3 levels deep), rename, unlink,
//!   mkdir and rmdir over [`Options::files`] names in one directory (DirectFS, Table II).
//! - `data`: MB/s of 4 KiB sequential and random reads and writes, 64 KiB and 1 MiB
//!   writes and 4 KiB appends over a file of [`Options::file_size`] bytes, next to a
//!   `memcpy` column (the same bytes copied between DRAM buffers) as the ceiling.
//!   With a LynxFS column, the notes add a create-scaling figure (one thread against
//!   two creating in one directory) for every target.
//! - `mdtest`: files/s of create, stat, rename and remove by 1 to
//!   [`Options::max_threads`] threads in one shared directory; with
//!   [`Options::processes`] N, by 1 and N threads against 1 and N processes.
//! - `smallfiles`: files/s writing then reading [`Options::files`] files of 1–32 KiB.
//! - `apps` (Table III): seconds for `tar -xf`, `du -s`, `find -name '*.c'` (cold and
//!   warm), `gzip -r` and `rm -rf` on the Linux source tree; real programs on kernel
//!   targets, the same work through the library on `lib`; ratios to tmpfs.
//! - `personalities`: ops/s of Filebench-like varmail, fileserver, webserver,
//!   createfiles and listdirs over the [`Target`] trait.
//! - `ablation` (LynxFS only, no targets): `syscalls` and `mdtest` on LynxFS with and
//!   without its DRAM index (a tiny index budget), and the engine switches the other
//!   ablations need.
//! - `hybrid` (issue 28): fsync-heavy work, FSMAC's file-append, `syscalls`, 1 MiB
//!   sequential I/O with cold reads, on a hybrid pool against ext4 on the same disk
//!   (`ext4-disk`) and an all-PM pool.
//! - `hybrid-fsync` (issue 43): the disk's own flush, fs_mark-style create+fsync at
//!   several sizes, FSMAC's file-append, an fsync of a committed file while another
//!   is written, and varmail at
//!   1, 4 and 16 threads, on a hybrid pool against ext4 on the same disk.
//! - `statall` (issue 27): µs per file to stat every file of a generated
//!   [`Options::files`]-file tree 8 directories deep by its full path (cold and warm).
//! - `rename` (issue 27, ADAM's Fig. 6): µs per rename of a hot directory of 1 to
//!   10,000 children, and of a file; a PNG of the curves.
//! - `filetest` (issue 27, ADAM's filetest and dirtest): µs per create, unlink, mkdir
//!   and rmdir of [`Options::files`] names in one directory.
//! - `recovery` (LynxFS only, no targets): first attach (clean open), first lookup
//!   (index load), a second process's attach (and apart, its prefaulting of the
//!   shared state) and open after a crash of a pool with one directory of
//!   [`Options::files`] entries, and the shared memory the index takes per entry.
//! - `start` (issue 44, no targets): ms per process started under the preload library
//!   in each placement (parent attached or not, working directory in the pool, a 1 MiB
//!   program in the pool), [`Options::files`] in a row from one shell, beside plain.
//!
//! Targets: [`LibTarget`] (the engine in process, `lib`), [`TmpfsTarget`],
//! [`Ext4Target`], [`DirTarget`] and [`FuseNullTarget`] (the FUSE floor), and
//! [`PreloadTarget`] (unmodified programs through `liblynxfs_preload.so`, in child
//! processes: see [`run_suite_with_preload`]). When a
//! LynxFS column is present, the notes say where it stands against the issues' goals.
//!
//! Nothing here calls fsync: tmpfs has nothing to sync, so the kernel columns measure
//! page-cache speed (ext4 included), which is the bound a PM file system competes with.

mod ablation;
mod apps;
mod cold;
mod data;
mod dir;
mod filetest;
mod fuse_target;
mod goals;
mod hybrid;
mod lib_target;
mod machine;
mod mdtest;
mod mount;
mod page;
mod personalities;
mod plot;
mod preload;
mod private;
mod recovery;
mod rename;
mod report;
mod smallfiles;
mod stamp;
mod start;
mod statall;
mod syscalls;
mod target;
mod workers;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

pub use dir::DirTarget;
pub use fuse_target::{FuseNullTarget, FuseTarget};
pub use hybrid::{DiskDirTarget, HybridTarget, DISK_NAME, HYBRID_NAME};
pub use lib_target::{AttachTimes, LibTarget, LIB_NAME};
pub use machine::Machine;
pub use mount::{Ext4Target, TmpfsTarget, SHM};
pub use page::{
    command_problems, intro_of, read_reports, read_skipped, render as render_page, stamp_problems,
    Loaded, GENERATED_MARK, PAGE_COMMAND, SKIPPED_FILE,
};
pub use plot::draw as draw_figure;
pub use preload::{PreloadLaunch, PreloadTarget, HYBRID_PRELOAD_NAME, PRELOAD_NAME};
pub use recovery::{runtime_file_bytes, runtime_mapping_rss};
pub use report::{format_ratio, format_value, median, Report, Row};
pub use stamp::{command_line, Commit, COMMIT_VAR, LAUNCHER_VAR};
pub use target::{Handle, OpenFlags, Stat, Target};
pub use workers::{worker_main, WorkerCommand};

/// The suites [`run_suite`] knows.
pub const SUITES: &[&str] = &[
    "syscalls",
    "data",
    "mdtest",
    "smallfiles",
    "recovery",
    "apps",
    "personalities",
    "ablation",
    "hybrid",
    "hybrid-fsync",
    "statall",
    "rename",
    "filetest",
    "start",
];

/// The suites that take no targets (they make their own LynxFS pool).
pub const TARGETLESS_SUITES: &[&str] = &["recovery", "ablation", "start"];

/// How a suite runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct Options {
    /// How many files: `syscalls` times each operation over this many names,
    /// `mdtest` shares them among its threads, `smallfiles` writes this many and
    /// `recovery` puts this many in its directory.
    pub files: usize,
    /// `data`: the file's size in bytes; a positive multiple of 1 MiB.
    pub file_size: u64,
    /// How many times each suite's sequence runs; the table shows the median.
    pub rounds: usize,
    /// Seed of the random offsets (the same order for every target).
    pub seed: u64,
    /// Draw a progress bar on stderr (indicatif hides it when stderr is not a tty).
    pub progress: bool,
    /// `mdtest`: the largest thread count (it runs 1, 2, .. up to this);
    /// `personalities`: the most threads a personality runs.
    pub max_threads: usize,
    /// `apps`: the tarball to extract (`.tar`, or `.tar.xz` decompressed once into
    /// `/dev/shm/lynxfs-bench-UID`); `None`: `/usr/src/linux-source-*.tar.xz`, else a generated tree
    /// of [`Options::files`] files.
    pub tree: Option<std::path::PathBuf>,
    /// `mdtest`: also run the work split over this many worker processes attached to
    /// the `lib` target's pool (0: threads only); needs [`Options::worker`].
    pub processes: usize,
    /// Add the project's goals for this suite and whether the run meets them to the
    /// notes (`--goals`, for developers; a user's table carries no verdicts).
    pub goals: bool,
    /// How to start a worker process ([`worker_main`]): `mdtest` with
    /// [`Options::processes`] and `recovery`'s second attach need one.
    #[serde(skip)]
    pub worker: Option<WorkerCommand>,
    /// `start`: the preload library whose process start it measures.
    pub library: Option<std::path::PathBuf>,
    /// The command line the report records ([`command_line`]); `None` from a program
    /// other than `lynxfs-bench` (a test).
    #[serde(skip)]
    pub command: Option<String>,
    /// `personalities`: a file (a tracing instance's `trace_marker`) to write
    /// `fusefloor start ROW on TARGET` and `fusefloor end ROW on TARGET ops=N` to
    /// around each timed phase (`--mark`, for scripts/fusefloor.sh).
    #[serde(skip)]
    pub mark: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            files: 10_000,
            file_size: 64 << 20,
            rounds: 1,
            seed: 0x4c79_6e78,
            progress: true,
            max_threads: 8,
            tree: None,
            processes: 0,
            goals: false,
            worker: None,
            library: None,
            command: None,
            mark: None,
        }
    }
}

impl Options {
    fn validate(&self) -> anyhow::Result<()> {
        if self.files == 0 {
            bail!("files must be at least 1");
        }
        if self.rounds == 0 {
            bail!("rounds must be at least 1");
        }
        if self.file_size == 0 || !self.file_size.is_multiple_of(data::MAX_BLOCK) {
            bail!(
                "file size must be a positive multiple of 1 MiB, not {}",
                self.file_size
            );
        }
        Ok(())
    }
}

/// Runs `suite` (one of [`SUITES`]) on every target, prints the table to stdout, writes
/// the JSON report and a PNG figure of it into `out` if given, and returns the report.
///
/// The targets' directories must not hold the suite's names (`d1` for `syscalls`,
/// `lynxfs-bench.data` for `data`); the suites remove everything they create, also
/// when they fail.
pub fn run_suite(
    suite: &str,
    targets: &[Box<dyn Target>],
    opts: &Options,
    out: Option<&Path>,
) -> anyhow::Result<Report> {
    run_suite_with_preload(suite, targets, None, opts, out)
}

/// [`run_suite`] with a [`PreloadTarget`] as well, whose column (`preload`) comes
/// first: `apps` runs its GNU tools under the preload next to the other targets; every
/// other suite runs whole in a preloaded child process (see [`PreloadTarget`]), before
/// the in-process targets, and its numbers are merged into the table.
pub fn run_suite_with_preload(
    suite: &str,
    targets: &[Box<dyn Target>],
    preload: Option<&PreloadTarget>,
    opts: &Options,
    out: Option<&Path>,
) -> anyhow::Result<Report> {
    opts.validate()?;
    let targetless = TARGETLESS_SUITES.contains(&suite);
    if targets.is_empty() && preload.is_none() && !targetless {
        bail!("no target to benchmark");
    }
    if (!targets.is_empty() || preload.is_some()) && targetless {
        bail!("suite {suite} makes its own LynxFS pool and takes no targets");
    }
    if preload.is_some() && opts.processes > 0 {
        bail!("mdtest's worker processes attach the lib target's pool; the preload target cannot take part");
    }
    let names: Vec<String> = targets.iter().map(|t| t.name()).collect();
    let mut measured = match (suite, preload) {
        ("apps", _) => apps::run(targets, &names, preload, opts)?,
        (_, Some(p)) => {
            let child = p
                .run_suite(suite, opts)
                .with_context(|| format!("the {} target", p.label()))?;
            // Every file the personalities made was checked (size by size) and removed
            // by the child; the pool itself is checked here.
            p.check_pool(suite, suite == "personalities")?;
            let local = if targets.is_empty() {
                None
            } else {
                Some(measure(suite, targets, &names, opts)?)
            };
            preload::merge(p.label(), &child, local)
        }
        (_, None) => measure(suite, targets, &names, opts)?,
    };
    if let (Some(p), "personalities") = (preload, suite) {
        measured.notes.push(format!(
            "{}: the workloads are the bench's own driver (Rust, calling libc: open, \
             read, write, fsync, stat, getdents64, unlink), not Filebench; like Filebench's \
             personalities (one process, `instances` threads) it runs threads in one process",
            p.label()
        ));
    }
    if let Some(p) = preload {
        let device = p
            .device()
            .map(|d| format!(", data device {}", d.display()))
            .unwrap_or_default();
        measured.notes.push(format!(
            "{}: pool {}, directory {}{device} (all removed after the run)",
            p.label(),
            p.pool().display(),
            p.dir().display()
        ));
    }
    if opts.goals {
        let goals = goals::notes(suite, &measured.columns, &measured.rows);
        measured.notes.extend(goals);
    }
    let report = Report {
        suite: suite.to_string(),
        unit: measured.unit.to_string(),
        higher_is_better: measured.higher_is_better,
        columns: measured.columns,
        rows: measured.rows,
        options: opts.clone(),
        machine: Machine::detect(),
        unix_time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        notes: measured.notes,
        baseline: measured.baseline,
        command: opts.command.clone(),
        commit: Commit::detect(),
    };
    print!("{}", report.table());
    if let Some(dir) = out {
        let path = report.write_json(dir)?;
        println!("wrote {}", path.display());
        match plot::draw(&report, dir) {
            Ok(png) => println!("wrote {}", png.display()),
            Err(e) => eprintln!("note: no figure for {suite}: {e:#}"),
        }
    }
    Ok(report)
}

/// Runs a suite on the in-process targets.
fn measure(
    suite: &str,
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
) -> anyhow::Result<Measured> {
    Ok(match suite {
        "syscalls" => syscalls::run(targets, names, opts)?,
        "data" => data::run(targets, names, opts)?,
        "mdtest" => mdtest::run(targets, names, opts)?,
        "smallfiles" => smallfiles::run(targets, names, opts)?,
        "recovery" => recovery::run(opts)?,
        "apps" => apps::run(targets, names, None, opts)?,
        "personalities" => personalities::run(targets, names, opts)?,
        "ablation" => ablation::run(opts)?,
        "hybrid" => hybrid::run(targets, names, opts)?,
        "hybrid-fsync" => hybrid::run_fsync(targets, names, opts)?,
        "statall" => statall::run(targets, names, opts)?,
        "rename" => rename::run(targets, names, opts)?,
        "filetest" => filetest::run(targets, names, opts)?,
        "start" => start::run(opts)?,
        _ => bail!(
            "unknown suite {suite:?}; the suites are {}",
            SUITES.join(", ")
        ),
    })
}

/// Opens a target from a command-line spec: `lib` (LynxFS in process on a fresh pool
/// in `/dev/shm`, the engine's default switches), `lib-inplace` (the same, the pool in
/// the inplace data mode), `lib-areas`, `lib-noevolution` and `lib-noareas` (areas
/// and their evolution on, areas on without evolution, areas off: issue 27), `tmpfs` (a fresh tmpfs mount), `shm` (a fresh directory in
/// `/dev/shm`), `ext4` (a loop-mounted ext4 image in `/dev/shm`), `fuse-null` (the
/// FUSE floor), `fuse` (a fresh LynxFS pool in `/dev/shm` mounted through FUSE with
/// [`FuseTarget::OPTIONS`]: `lynxfs mount`'s defaults), `fuse-nocache` (the same with
/// [`FuseTarget::NOCACHE_OPTIONS`]: kernel name and attribute caches off, /dev/fuse), `fuse-dev`
/// ([`FuseTarget::DEV_OPTIONS`]: the defaults over /dev/fuse, not io_uring) or `dir=PATH` (an existing
/// directory, labelled with its path).
pub fn open_target(spec: &str) -> anyhow::Result<Box<dyn Target>> {
    let target: Box<dyn Target> = match spec {
        "lib" => Box::new(LibTarget::create_default().context("setting up a LynxFS pool")?),
        "lib-inplace" => Box::new(
            LibTarget::create_in(lynxfs::DataMode::Inplace)
                .context("setting up a LynxFS pool")?
                .with_label(format!("{LIB_NAME}-inplace")),
        ),
        "lib-areas" => Box::new(lib_with_areas(true, true)?),
        "lib-noevolution" => Box::new(lib_with_areas(true, false)?),
        "lib-noareas" => Box::new(lib_with_areas(false, false)?),
        "fuse-null" => Box::new(FuseNullTarget::mount().context("setting up fuse-null")?),
        "fuse" => Box::new(FuseTarget::mount().context("mounting a LynxFS pool through FUSE")?),
        "fuse-nocache" => {
            Box::new(FuseTarget::mount_nocache().context("mounting a LynxFS pool through FUSE")?)
        }
        "fuse-dev" => {
            Box::new(FuseTarget::mount_dev().context("mounting a LynxFS pool through FUSE")?)
        }
        "tmpfs" => Box::new(TmpfsTarget::mount().context("setting up tmpfs")?),
        PRELOAD_NAME | HYBRID_PRELOAD_NAME => bail!(
            "the {spec} target needs the lynxfs executable and liblynxfs_preload.so: \
             open it with PreloadTarget::create (`lynxfs-bench` does)"
        ),
        "shm" => Box::new(
            TmpfsTarget::shm_dir("shm-dir", None).context("setting up a /dev/shm directory")?,
        ),
        "ext4" => Box::new(Ext4Target::mount_default().context("setting up ext4")?),
        DISK_NAME => {
            Box::new(DiskDirTarget::create().context("setting up a directory on the disk")?)
        }
        HYBRID_NAME => Box::new(HybridTarget::create().context("setting up a hybrid pool")?),
        "hybrid-fuse" => Box::new(
            FuseTarget::mount_hybrid().context("mounting a hybrid LynxFS pool through FUSE")?,
        ),
        "lib-1g" => Box::new(hybrid::small_lib().context("setting up a LynxFS pool")?),
        _ => match spec.strip_prefix("dir=") {
            Some(path) => {
                Box::new(DirTarget::new(path, path).with_context(|| format!("target {spec}"))?)
            }
            None => {
                bail!("unknown target {spec:?}; use lib, lib-1g, lib-inplace, lib-areas, lib-noevolution, lib-noareas, hybrid, hybrid-fuse, hybrid-preload, preload, tmpfs, shm, ext4, ext4-disk, fuse, fuse-dev, fuse-nocache, fuse-null or dir=PATH")
            }
        },
    };
    Ok(target)
}

/// A LynxFS pool with ADAM's areas and their evolution switched as asked, labelled
/// `lynxfs areas`, `lynxfs areas, no evolution` or `lynxfs no areas`.
fn lib_with_areas(areas: bool, evolution: bool) -> anyhow::Result<LibTarget> {
    let t = LibTarget::create_default().context("setting up a LynxFS pool")?;
    let m = &t.fs().ns().mechanisms;
    m.set_areas(areas);
    m.set_evolution(evolution);
    let label = match (areas, evolution) {
        (false, _) => "no areas",
        (true, true) => "areas",
        (true, false) => "areas, no evolution",
    };
    Ok(t.with_label(format!("{LIB_NAME} {label}")))
}

/// The tmpfs column (`tmpfs`, or its `tmpfs(shm-dir)` fallback), which suites that
/// compare targets take their ratios against when it is there.
pub(crate) fn tmpfs_column(names: &[String]) -> Option<String> {
    names.iter().find(|n| n.starts_with("tmpfs")).cloned()
}

/// What a suite hands back to [`run_suite`].
pub(crate) struct Measured {
    unit: &'static str,
    higher_is_better: bool,
    columns: Vec<String>,
    rows: Vec<Row>,
    notes: Vec<String>,
    /// The column ratios are taken against (see [`Report::baseline`]).
    baseline: Option<String>,
}

/// Values collected as `[op][column][round]`, filled in whatever order the suite runs.
pub(crate) struct Grid {
    ops: Vec<&'static str>,
    cells: Vec<Vec<Vec<f64>>>,
}

impl Grid {
    pub(crate) fn new(ops: Vec<&'static str>, columns: usize) -> Self {
        let cells = vec![vec![Vec::new(); columns]; ops.len()];
        Self { ops, cells }
    }

    pub(crate) fn push(&mut self, op: usize, column: usize, value: f64) {
        self.cells[op][column].push(value);
    }

    pub(crate) fn into_rows(self) -> Vec<Row> {
        self.ops
            .into_iter()
            .zip(self.cells)
            .map(|(op, c)| Row::from_rounds(op, c))
            .collect()
    }
}

/// A bar of `steps` (operation, column) measurements, or a hidden one.
pub(crate) fn progress_bar(opts: &Options, suite: &str, steps: usize) -> ProgressBar {
    if !opts.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps as u64).with_prefix(suite.to_string());
    if let Ok(style) =
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
