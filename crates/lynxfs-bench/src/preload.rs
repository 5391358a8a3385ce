//! [`PreloadTarget`]: LynxFS reached by unmodified programs through
//! `liblynxfs_preload.so`, the way `lynxfs run` runs them (issue 13).
//!
//! Nothing of this target runs in the benchmark's own process: a suite runs in a child,
//! the `lynxfs-bench` executable started again as `lynxfs-bench SUITE --target dir=D` with the
//! preload library in `LD_PRELOAD`, so the suite's libc calls (Rust's `std::fs` and the
//! [`crate::DirTarget`]'s `*at` calls) on paths under D are served by the library in
//! the calling thread. The child writes its report to a file outside D; the parent reads
//! it and shows it as the `preload` column. The `apps` suite instead runs the GNU tools
//! under the preload ([`PreloadTarget::command`]).
//!
//! The environment is the one `lynxfs run --pool P --at D` sets before it execs its
//! command (`LD_PRELOAD`, `LYNXFS_POOL`, `LYNXFS_AT`), set here directly so that a
//! program's time is its own and not also that of `lynxfs run`'s checks.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use serde::Deserialize;

use crate::hybrid::fresh_device_path;
use crate::lib_target::{fresh_pool_path, to_io, PoolFile};
use crate::{HybridTarget, LibTarget, Options, Row};

/// The label of the preload column.
pub const PRELOAD_NAME: &str = "preload";
/// The label of the preload column on a hybrid pool (file data on a device on the disk,
/// as the `hybrid` target's).
pub const HYBRID_PRELOAD_NAME: &str = "hybrid-preload";

/// What a preloaded program needs: the `lynxfs-bench` executable (which runs the
/// suites in the child) and the preload library.
#[derive(Clone, Debug)]
pub struct PreloadLaunch {
    /// The `lynxfs-bench` executable: `lynxfs-bench SUITE ...` runs a suite.
    pub bench: PathBuf,
    /// `liblynxfs_preload.so`, an absolute path without spaces or colons.
    pub library: PathBuf,
}

/// A fresh pool (the size and inodes of [`LibTarget::create_default`], or a hybrid
/// pool as [`crate::HybridTarget`]'s) answering for an empty temporary directory D; the
/// pool, its device and D are removed when the target is dropped.
pub struct PreloadTarget {
    /// The pool kept attached for the target's life, as a mount's daemon keeps it:
    /// the shared runtime state (the index of loaded directories among it) outlives
    /// each preloaded program, instead of being built again by every one. Dropped
    /// before the pool file goes.
    _keeper: lynxfs::Fs,
    launch: PreloadLaunch,
    /// D, canonical (the preload compares paths with it byte by byte).
    dir: PathBuf,
    _dir_guard: tempfile::TempDir,
    pool: PoolFile,
    /// A hybrid pool's data device, removed after the pool.
    device: Option<PoolFile>,
    /// The column's label: [`PRELOAD_NAME`] or [`HYBRID_PRELOAD_NAME`].
    label: &'static str,
}

impl PreloadTarget {
    /// Makes the pool and D; the executable and the library must exist.
    pub fn create(launch: PreloadLaunch) -> anyhow::Result<Self> {
        let mut opts = MkfsOptions::new(LibTarget::DEFAULT_SIZE);
        opts.inodes = Some(LibTarget::DEFAULT_INODES);
        Self::with_pool(launch, opts, None, PRELOAD_NAME)
    }

    /// [`Self::create`] on a hybrid pool: the size and inodes of
    /// [`crate::HybridTarget`], its file data on a fresh device file on the disk
    /// (`hybrid-preload`: the FSMAC suites' preload column).
    pub fn create_hybrid(launch: PreloadLaunch) -> anyhow::Result<Self> {
        let device = PoolFile(fresh_device_path().context("naming a data device")?);
        let mut opts = MkfsOptions::new(HybridTarget::SIZE);
        opts.inodes = Some(HybridTarget::INODES);
        opts.data_device = Some(device.0.clone());
        Self::with_pool(launch, opts, Some(device), HYBRID_PRELOAD_NAME)
    }

    fn with_pool(
        launch: PreloadLaunch,
        opts: MkfsOptions,
        device: Option<PoolFile>,
        label: &'static str,
    ) -> anyhow::Result<Self> {
        for (what, p) in [("executable", &launch.bench), ("library", &launch.library)] {
            if !p.is_file() {
                bail!("the preload target's {what} {} is not a file", p.display());
            }
        }
        let path = fresh_pool_path().context("making a pool file")?;
        let pool = PoolFile(path);
        Pool::mkfs(&pool.0, &opts, PmemBackend::default())
            .with_context(|| format!("mkfs {}", pool.0.display()))?;
        let guard = tempfile::Builder::new()
            .prefix("lynxfs-preload.")
            .tempdir()
            .context("making the preload target's directory")?;
        let dir = guard.path().canonicalize()?;
        let keeper =
            lynxfs::Fs::open(&pool.0).with_context(|| format!("attaching {}", pool.0.display()))?;
        Ok(Self {
            _keeper: keeper,
            launch,
            dir,
            _dir_guard: guard,
            pool,
            device,
            label,
        })
    }

    /// The column's label.
    pub fn label(&self) -> &'static str {
        self.label
    }

    /// A hybrid pool's data device.
    pub fn device(&self) -> Option<&Path> {
        self.device.as_ref().map(|d| d.0.as_path())
    }

    /// D: the directory whose paths the pool serves.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pool file.
    pub fn pool(&self) -> &Path {
        &self.pool.0
    }

    /// `program` to be run under the preload, in D (its working directory in the pool).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("LD_PRELOAD", &self.launch.library)
            .env("LYNXFS_POOL", self.pool())
            .env("LYNXFS_AT", &self.dir)
            .current_dir(&self.dir);
        c
    }

    /// Evicts the pool's DRAM index (shared by every attached process).
    pub(crate) fn drop_index(&self) -> io::Result<()> {
        self._keeper.ns().drop_index();
        Ok(())
    }

    /// The names in the pool's root, read through the engine (not through the
    /// preload, so a check does not trust what it checks).
    pub(crate) fn root_names(&self) -> io::Result<Vec<Vec<u8>>> {
        let lib = LibTarget::attach(self.pool())?;
        let names = lib
            .root_session()
            .readdir(".")
            .map_err(to_io)?
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n != b"." && n != b"..")
            .collect();
        Ok(names)
    }

    /// After a preloaded run, with no preloaded process left: the pool must pass
    /// `fsck`, and, for a suite that removes what it made (`empty_after`), hold no
    /// name in D any more. A damaged pool fails the run loudly instead of passing for
    /// a fast one (the pool-safety issue: programs that remapped the pool's memory
    /// lost files silently).
    pub(crate) fn check_pool(&self, suite: &str, empty_after: bool) -> anyhow::Result<()> {
        let report = lynxfs::fsck::check(self._keeper.pool());
        if !report.problems.is_empty() {
            bail!(
                "the {} target's pool is damaged after `{suite}` ({} problems): {}",
                self.label,
                report.problems.len(),
                report.problems.join("; ")
            );
        }
        if empty_after {
            let left = self.root_names()?;
            if !left.is_empty() {
                bail!(
                    "the {} target's pool holds {} names after `{suite}` removed \
                     everything it made (first: {})",
                    self.label,
                    left.len(),
                    String::from_utf8_lossy(&left[0])
                );
            }
        }
        Ok(())
    }

    /// Runs `suite` in a preloaded child on `--target dir=D` with `opts`' sizes and
    /// returns its single column.
    pub(crate) fn run_suite(&self, suite: &str, opts: &Options) -> anyhow::Result<ChildReport> {
        let out = tempfile::Builder::new()
            .prefix("lynxfs-preload-report.")
            .tempdir()
            .context("making a directory for the child's report")?;
        let report = out.path().join("report.json");
        let mut cmd = self.command(&self.launch.bench);
        // One process runs the whole suite: its first round must not pay a fault per
        // create (liblynxfs_preload's `state::ENV_POPULATE`). The `apps` tools, short
        // processes each, do not populate.
        cmd.env("LYNXFS_POPULATE", "1");
        cmd.arg(suite)
            .arg("--target")
            .arg(format!("dir={}", self.dir.display()))
            .args(child_args(opts))
            .arg("--child-report")
            .arg(&report)
            .stdin(Stdio::null());
        let output = cmd
            .output()
            .with_context(|| format!("starting {}", self.launch.bench.display()))?;
        if !output.status.success() {
            bail!(
                "the preloaded `lynxfs-bench {suite}` failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let json = std::fs::read_to_string(&report)
            .with_context(|| format!("reading the child's report {}", report.display()))?;
        let parsed: ChildReport =
            serde_json::from_str(&json).context("parsing the child's report")?;
        if parsed.columns.len() != 1 {
            bail!(
                "the child's report has {} columns, not 1",
                parsed.columns.len()
            );
        }
        Ok(parsed)
    }
}

/// The options a child takes on its command line, as `lynxfs-bench` spells them.
fn child_args(opts: &Options) -> Vec<String> {
    vec![
        "--files".into(),
        opts.files.to_string(),
        "--rounds".into(),
        opts.rounds.to_string(),
        "--file-mib".into(),
        (opts.file_size >> 20).to_string(),
        "--max-threads".into(),
        opts.max_threads.to_string(),
    ]
}

/// The part of a child's [`crate::Report`] (its JSON) the parent uses.
#[derive(Debug, Deserialize)]
pub(crate) struct ChildReport {
    pub(crate) unit: String,
    pub(crate) higher_is_better: bool,
    pub(crate) columns: Vec<String>,
    pub(crate) rows: Vec<ChildRow>,
    pub(crate) notes: Vec<String>,
}

/// A row of a child's report; JSON has no NaN, so a failed value is `null`.
#[derive(Debug, Deserialize)]
pub(crate) struct ChildRow {
    pub(crate) op: String,
    pub(crate) rounds: Vec<Vec<Option<f64>>>,
}

impl ChildRow {
    /// The only column's rounds, `null` as NaN.
    pub(crate) fn values(&self) -> Vec<f64> {
        self.rounds
            .first()
            .map(|r| r.iter().map(|v| v.unwrap_or(f64::NAN)).collect())
            .unwrap_or_default()
    }
}

/// Puts the child's column in front of the in-process columns' rows (matched by
/// operation; a row only one side has gets NaN on the other).
pub(crate) fn merge(
    label: &str,
    child: &ChildReport,
    local: Option<crate::Measured>,
) -> crate::Measured {
    let mut notes = vec![format!(
        "{label}: the suite ran in a child process, the lynxfs-bench executable under \
         liblynxfs_preload.so (LD_PRELOAD, LYNXFS_POOL, LYNXFS_AT as `lynxfs run` sets them) \
         on --target dir=D, so each operation is a libc call the preload serves; the child \
         ran all its rounds before the in-process targets; its cold steps drop only the \
         kernel's caches (the pool's index stays warm)"
    )];
    notes.extend(
        child
            .notes
            .iter()
            .filter(|n| n.starts_with("create scaling") || n.contains("failed"))
            .map(|n| format!("{label}: {n}")),
    );
    let Some(mut m) = local else {
        return crate::Measured {
            unit: leak_unit(&child.unit),
            higher_is_better: child.higher_is_better,
            columns: vec![label.into()],
            rows: child
                .rows
                .iter()
                .map(|r| Row::from_rounds(r.op.clone(), vec![r.values()]))
                .collect(),
            notes,
            baseline: None,
        };
    };
    m.columns.insert(0, label.into());
    for row in &mut m.rows {
        let mine = child
            .rows
            .iter()
            .find(|c| c.op == row.op)
            .map_or_else(|| vec![f64::NAN], ChildRow::values);
        row.rounds.insert(0, mine);
        *row = Row::from_rounds(row.op.clone(), std::mem::take(&mut row.rounds));
    }
    notes.append(&mut m.notes);
    m.notes = notes;
    m
}

/// A child's unit as the `&'static str` [`crate::Measured`] holds: one of the units the
/// suites use (anything else is a bug in the child, shown as is).
fn leak_unit(unit: &str) -> &'static str {
    const UNITS: &[&str] = &["us/op", "MB/s", "files/s", "ops/s", "s", "ms"];
    UNITS.iter().find(|u| **u == unit).copied().unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(rows: &[(&str, Option<f64>)]) -> ChildReport {
        ChildReport {
            unit: "us/op".into(),
            higher_is_better: false,
            columns: vec!["dir=/x".into()],
            rows: rows
                .iter()
                .map(|&(op, v)| ChildRow {
                    op: op.into(),
                    rounds: vec![vec![v]],
                })
                .collect(),
            notes: vec![],
        }
    }

    #[test]
    fn merge_puts_the_child_first_and_matches_rows_by_name() {
        let local = crate::Measured {
            unit: "us/op",
            higher_is_better: false,
            columns: vec!["tmpfs".into()],
            rows: vec![
                Row::from_rounds("create", vec![vec![4.0]]),
                Row::from_rounds("stat", vec![vec![2.0]]),
            ],
            notes: vec!["local".into()],
            baseline: Some("tmpfs".into()),
        };
        let m = merge(
            PRELOAD_NAME,
            &child(&[("stat", Some(1.0)), ("create", None)]),
            Some(local),
        );
        assert_eq!(m.columns, ["preload", "tmpfs"]);
        assert!(m.rows[0].values[0].is_nan());
        assert_eq!(m.rows[0].values[1], 4.0);
        assert_eq!(m.rows[1].values, [1.0, 2.0]);
        assert_eq!(m.baseline.as_deref(), Some("tmpfs"));
        assert!(m.notes.last().is_some_and(|n| n == "local"));
    }

    #[test]
    fn merge_without_local_targets_is_the_child_alone() {
        let m = merge(HYBRID_PRELOAD_NAME, &child(&[("create", Some(3.0))]), None);
        assert_eq!(m.columns, ["hybrid-preload"]);
        assert_eq!(m.unit, "us/op");
        assert_eq!(m.rows[0].values, [3.0]);
    }

    #[test]
    fn a_missing_library_is_refused_before_any_pool_is_made() {
        let err = PreloadTarget::create(PreloadLaunch {
            bench: PathBuf::from("/bin/sh"),
            library: PathBuf::from("/nonexistent/liblynxfs_preload.so"),
        })
        .err()
        .unwrap();
        assert!(err.to_string().contains("library"), "{err:#}");
    }
}
