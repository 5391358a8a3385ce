//! The `recovery` suite (LynxFS only): pools holding one directory of 10^4, 10^5, ...
//! up to [`Options::files`] entries (one column each), and the times that depend on
//! its size:
//!
//! - **first attach (clean open)**: `Fs::open` of the cleanly closed pool by the first
//!   process, which builds the shared runtime state from the pool (goal <= 50 ms at 1M
//!   files);
//! - **first lookup**: the first `stat` in the big directory after that, which reads
//!   the directory's log into the shared index (goal <= 150 ms at 1M);
//! - **first attach + first lookup**: the two together, what a clean open plus the
//!   first lookup cost before issue 12 (goal: within 1.5x of that, measured with the
//!   older binary: docs/DESIGN-NOTES.md);
//! - **second attach**: `Fs::open` by another process (a worker, see
//!   [`crate::workers`]) while this one holds the pool attached (goal <= 5 ms);
//! - **second attach's populate**: that worker's prefaulting of the shared state's
//!   mapping (`Pool::populate`) after its attach, timed apart: a benchmark worker does
//!   it before its first round, a process under the preload in the background after
//!   its first call, so it is no part of the attach (no goal);
//! - **open after crash**: `Fs::open` after `crash_in_place`, which runs recovery
//!   (journal replay and the namespace walk; goal <= 1 s at 1M).
//!
//! The notes add the DRAM per indexed entry: measured as the growth of this
//! process's resident pages of the shared runtime mapping across the first lookup,
//! over the entries it indexed (the runtime file's memory is reserved whole when it
//! is made, so its allocated pages do not grow), next to the index's own estimate (`Index::dram_bytes`, what
//! `lynxfs info` prints); the index lives in shared memory, not in this process's
//! heap. Also the create and close rates.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};

use crate::lib_target::{fresh_pool_path, to_io, LIB_NAME};
use crate::workers::{WorkerCommand, Workers};
use crate::{median, progress_bar, Grid, Measured, Options};

/// The big directory, under the pool's root.
const DIR: &str = "big";

/// The rows, in order.
const ROWS: [&str; 6] = [
    "first attach (clean open)",
    "first lookup (index load)",
    "first attach + first lookup",
    "second attach (another process)",
    "second attach's populate",
    "open after crash",
];

/// Goals at one million files, in ms, per row of [`ROWS`]; NaN: no goal of its own
/// (first attach plus lookup: 1.5x the old clean open plus lookup, relative to another
/// binary, and 150 ms in issue 44; populate: none).
const GOALS_MS: [f64; 6] = [50.0, 150.0, f64::NAN, 5.0, f64::NAN, 1000.0];

/// A pool big enough for `files` files in one directory, with room to spare.
fn mkfs_options(files: usize) -> MkfsOptions {
    let files = files as u64;
    let mut opts = MkfsOptions::new((files * 1100).max(256 << 20).next_multiple_of(1 << 20));
    opts.inodes = Some(files + files / 16 + 4096);
    opts
}

/// Bytes of the shared runtime state now: the runtime file's allocated pages (all of
/// it but the open tables of free process slots: docs/FORMAT.md, section 12.1). `None` for a pool
/// with private state (in memory) or when the file cannot be looked at.
pub fn runtime_file_bytes<B: lynxfs::pmem::Backend>(fs: &Fs<B>) -> Option<u64> {
    fs.pool().attachment()?.region().allocated_bytes()
}

/// This process's resident bytes of the runtime file's mapping (`Rss` of its entry in
/// `/proc/self/smaps`): the pages of the shared state it has touched.
pub fn runtime_mapping_rss<B: lynxfs::pmem::Backend>(fs: &Fs<B>) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let region = fs.pool().attachment()?.region();
    let fd = region.file()?.as_raw_fd();
    let path = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    mapping_rss(&smaps, &path.to_string_lossy())
}

/// The summed `Rss` of the mappings of `path` in an smaps text, in bytes.
fn mapping_rss(smaps: &str, path: &str) -> Option<u64> {
    let mut inside = false;
    let mut total = None;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            // A mapping's header: address range, perms, offset, dev, inode, path.
            inside = words.nth(4) == Some(path);
        } else if inside && first == "Rss:" {
            let kb: u64 = words.next()?.parse().ok()?;
            *total.get_or_insert(0) += kb * 1024;
        }
    }
    total
}

fn name(buf: &mut String, i: usize) -> &str {
    use std::fmt::Write as _;
    buf.clear();
    let _ = write!(buf, "{DIR}/f{i}");
    buf
}

/// Opens (attaches) the pool, timed.
fn open(path: &Path) -> anyhow::Result<(Fs<PmemBackend>, f64)> {
    let start = Instant::now();
    let fs = Fs::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok((fs, start.elapsed().as_secs_f64() * 1e3))
}

/// Checks that the first and last files are there, as regular files.
fn check_files(fs: &Fs<PmemBackend>, files: usize) -> anyhow::Result<()> {
    let s = fs.session(Cred::root());
    let mut buf = String::new();
    for i in [0, files / 2, files - 1] {
        let st = s
            .lstat(name(&mut buf, i))
            .map_err(to_io)
            .with_context(|| format!("stat {buf}"))?;
        if st.mode & libc::S_IFMT != libc::S_IFREG {
            bail!("{buf} is not a regular file");
        }
    }
    Ok(())
}

pub(crate) fn run(opts: &Options) -> anyhow::Result<Measured> {
    run_at(&fresh_pool_path()?, opts)
}

/// The directory sizes measured: powers of ten from 10^4 up to `files`, and `files`
/// itself (alone when it is below 10^4).
fn sizes(files: usize) -> Vec<usize> {
    let mut out: Vec<usize> = std::iter::successors(Some(10_000usize), |n| n.checked_mul(10))
        .take_while(|&n| n < files)
        .collect();
    out.push(files);
    out
}

/// [`run`] with the pool file at `path`, which is removed afterwards.
fn run_at(path: &Path, opts: &Options) -> anyhow::Result<Measured> {
    let result = run_sizes(path, opts);
    let _ = std::fs::remove_file(path);
    result
}

/// What one directory size gave.
struct SizeResult {
    /// Per row of [`ROWS`], every round, in ms.
    ms: [Vec<f64>; 6],
    notes: Vec<String>,
}

fn run_sizes(path: &Path, opts: &Options) -> anyhow::Result<Measured> {
    let sizes = sizes(opts.files);
    let Some(worker) = &opts.worker else {
        bail!("the recovery suite needs a worker command (for the second attach)");
    };
    let steps = sizes.iter().map(|n| n + opts.rounds * 3).sum();
    let bar = progress_bar(opts, "recovery", steps);
    let mut grid = Grid::new(ROWS.to_vec(), sizes.len() + 1);
    let mut notes = Vec::new();
    for (col, &files) in sizes.iter().enumerate() {
        let r = run_on(path, files, opts, worker, &bar)?;
        for (row, values) in r.ms.iter().enumerate() {
            for v in values {
                grid.push(row, col, *v);
            }
        }
        notes.extend(r.notes);
    }
    bar.finish_and_clear();
    for (row, goal) in GOALS_MS.iter().enumerate() {
        for _ in 0..opts.rounds {
            grid.push(row, sizes.len(), *goal);
        }
    }
    notes.push(
        "goal column: the issues' goals at 1,000,000 files, to compare with the 1000000 \
         column (first attach + first lookup: within 1.5x of a clean open plus first \
         lookup before issue 12, which only the older binary measures)"
            .into(),
    );
    let mut columns: Vec<String> = sizes.iter().map(|n| format!("{LIB_NAME} {n}")).collect();
    columns.push("goal".into());
    Ok(Measured {
        unit: "ms",
        higher_is_better: false,
        columns,
        rows: grid.into_rows(),
        notes,
        baseline: None,
    })
}

/// One directory of `files` entries in a fresh pool at `path`: populate, close, then
/// per round a clean open, the first lookup and an open after a crash.
fn run_on(
    path: &Path,
    files: usize,
    opts: &Options,
    worker: &WorkerCommand,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<SizeResult> {
    // Each size gets a fresh pool at the same path: the previous size's goes first.
    let _ = std::fs::remove_file(path);
    Pool::mkfs(path, &mkfs_options(files), PmemBackend::default())
        .with_context(|| format!("mkfs {}", path.display()))?;
    let (fs, _) = open(path)?;
    let mut notes = Vec::new();
    {
        let s = fs.session(Cred::root());
        s.mkdir(DIR, 0o755).map_err(to_io).context("mkdir")?;
        let mut buf = String::new();
        bar.set_message(format!("creating {files} files"));
        let start = Instant::now();
        for i in 0..files {
            s.mknod(name(&mut buf, i), libc::S_IFREG | 0o644, 0)
                .map_err(to_io)
                .with_context(|| format!("create {buf}"))?;
            if i % 4096 == 0 {
                bar.inc(4096.min(files - i) as u64);
            }
        }
        let secs = start.elapsed().as_secs_f64();
        notes.push(format!(
            "{files} files: populated with {files} creates (mknod) in one directory in \
             {secs:.2} s, {:.0} files/s",
            files as f64 / secs
        ));
    }
    let start = Instant::now();
    fs.close().context("clean close")?;
    drop(fs);
    notes.push(format!(
        "{files} files: clean close (allocator bitmaps saved) {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    ));

    let mut ms: [Vec<f64>; 6] = Default::default();
    let mut dram = Dram::default();
    let mut recovered = None;
    for _ in 0..opts.rounds {
        bar.set_message(format!("{files} files: first attach"));
        let (fs, t) = open(path)?;
        if !fs.pool().was_clean {
            bail!("the pool was not clean after a clean close");
        }
        ms[0].push(t);
        bar.inc(1);

        bar.set_message(format!("{files} files: first lookup"));
        let before = runtime_mapping_rss(&fs);
        let idx0 = fs.ns().index.len();
        let start = Instant::now();
        fs.session(Cred::root())
            .lstat("big/f0")
            .map_err(to_io)
            .context("first lookup")?;
        let lookup = start.elapsed().as_secs_f64() * 1e3;
        ms[1].push(lookup);
        ms[2].push(t + lookup);
        let after = runtime_mapping_rss(&fs);
        let idx1 = fs.ns().index.len();
        let indexed = idx1.saturating_sub(idx0);
        if indexed < files {
            bail!("the first lookup indexed {indexed} entries, expected at least {files}");
        }
        dram.record(&fs, before, after, indexed);
        check_files(&fs, files)?;

        bar.set_message(format!("{files} files: second attach"));
        let (attach, populate) = second_attach(worker, path)?;
        ms[3].push(attach);
        ms[4].push(populate);
        bar.inc(1);

        bar.set_message(format!("{files} files: open after crash"));
        fs.pool().crash_in_place();
        drop(fs);
        let (fs, t) = open(path)?;
        let Some(rep) = fs.pool().recovery.clone() else {
            bail!("opening after crash_in_place did not run recovery");
        };
        ms[5].push(t);
        check_files(&fs, files)?;
        recovered = Some(rep.files);
        fs.close().context("clean close after recovery")?;
        bar.inc(1);
    }
    notes.extend(dram.notes(files));
    if let Some(n) = recovered {
        notes.push(format!("{files} files: recovery walked {n} files"));
    }
    Ok(SizeResult { ms, notes })
}

/// A second process's attach of the pool at `path`, which this one holds attached: a
/// worker times its own `Fs::open`, then its `Pool::populate`, in ms.
fn second_attach(worker: &WorkerCommand, path: &Path) -> anyhow::Result<(f64, f64)> {
    let mut w = Workers::spawn(worker, 1)?;
    let pool = path.display();
    let ready = w
        .all(|_| format!("attach {pool}"), "ready")
        .context("second attach")?;
    w.quit().context("second attach: detaching")?;
    match ready.first().map(Vec::as_slice) {
        Some(&[attach, populate]) => Ok((attach as f64 / 1e6, populate as f64 / 1e6)),
        r => bail!("the worker replied {r:?}, not an attach and a populate time"),
    }
}

/// DRAM per indexed entry over the rounds: measured, and estimated.
#[derive(Default)]
struct Dram {
    /// Growth of this process's resident pages of the runtime mapping, per entry.
    mapped: Vec<f64>,
    /// `Index::dram_bytes` over the entries.
    estimate: Vec<f64>,
    /// The whole runtime file's allocated bytes, per indexed entry.
    whole: Vec<f64>,
}

impl Dram {
    /// One round: the mapping's resident bytes `before` and `after` the first lookup
    /// that indexed `indexed` entries.
    fn record<B: lynxfs::pmem::Backend>(
        &mut self,
        fs: &Fs<B>,
        before: Option<u64>,
        after: Option<u64>,
        indexed: usize,
    ) {
        self.mapped.extend(
            before
                .zip(after)
                .map(|(a, b)| b.saturating_sub(a) as f64 / indexed as f64),
        );
        self.whole
            .extend(runtime_file_bytes(fs).map(|b| b as f64 / fs.ns().index.len().max(1) as f64));
        let index = &fs.ns().index;
        self.estimate
            .push(index.dram_bytes() as f64 / index.len().max(1) as f64);
    }

    fn notes(&self, files: usize) -> Vec<String> {
        let m = |v: &Vec<f64>| {
            if v.is_empty() {
                "n/a".to_string()
            } else {
                format!("{:.0} B", median(v))
            }
        };
        vec![format!(
            "{files} files: DRAM per indexed entry (shared memory; goal <= 64 B): {} \
             estimated (Index::dram_bytes, as `lynxfs info` prints), {} measured (growth \
             of this process's Rss of the runtime mapping across the first lookup); the whole \
             runtime file is {} per indexed entry; names are {} bytes on average",
            m(&self.estimate),
            m(&self.mapped),
            m(&self.whole),
            mean_name_len(files),
        )]
    }
}

fn mean_name_len(files: usize) -> f64 {
    let total: usize = (0..files).map(|i| 1 + i.max(1).ilog10() as usize + 1).sum();
    total as f64 / files.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::tests::test_worker;

    #[test]
    fn small_pool_measures_every_row_and_removes_its_file() {
        let opts = Options {
            files: 2000,
            progress: false,
            worker: Some(test_worker()),
            ..Options::default()
        };
        let path = fresh_pool_path().unwrap();
        let m = run_at(&path, &opts).unwrap();
        assert_eq!(m.columns, ["lynxfs 2000", "goal"]);
        assert_eq!(m.rows.len(), 6);
        assert!(m.rows.iter().all(|r| r.values[0] > 0.0));
        let (attach, lookup, both) = (&m.rows[0], &m.rows[1], &m.rows[2]);
        assert!((both.values[0] - attach.values[0] - lookup.values[0]).abs() < 1e-9);
        let dram = m
            .notes
            .iter()
            .find(|n| n.contains("DRAM per indexed entry"));
        // Every figure was measured: the pool's runtime state is a file in /dev/shm.
        assert!(!dram.unwrap().contains("n/a"), "{dram:?}");
        assert!(
            m.notes
                .iter()
                .any(|n| n.contains("2000 files: recovery walked 2000 files")),
            "{:?}",
            m.notes
        );
        assert!(!path.exists(), "the pool file was left behind");
    }

    #[test]
    fn two_sizes_get_a_column_each() {
        let opts = Options {
            files: 12_000,
            progress: false,
            worker: Some(test_worker()),
            ..Options::default()
        };
        let path = fresh_pool_path().unwrap();
        let m = run_at(&path, &opts).unwrap();
        assert_eq!(m.columns, ["lynxfs 10000", "lynxfs 12000", "goal"]);
        assert!(m
            .rows
            .iter()
            .all(|r| r.values[0] > 0.0 && r.values[1] > 0.0));
        assert!(
            m.notes
                .iter()
                .any(|n| n.contains("12000 files: recovery walked 12000 files")),
            "{:?}",
            m.notes
        );
        assert!(!path.exists(), "the pool file was left behind");
    }

    #[test]
    fn the_suite_runs_without_targets() {
        let opts = Options {
            files: 100,
            progress: false,
            worker: Some(test_worker()),
            ..Options::default()
        };
        let report = crate::run_suite("recovery", &[], &opts, None).unwrap();
        assert_eq!(report.rows[3].op, "second attach (another process)");
        assert_eq!(report.rows[5].op, "open after crash");
        let no_worker = Options {
            worker: None,
            ..opts
        };
        let err = crate::run_suite("recovery", &[], &no_worker, None).unwrap_err();
        assert!(err.to_string().contains("worker command"), "{err:#}");
    }

    #[test]
    fn sizes_are_powers_of_ten_up_to_the_count() {
        assert_eq!(sizes(100), [100]);
        assert_eq!(sizes(10_000), [10_000]);
        assert_eq!(sizes(250_000), [10_000, 100_000, 250_000]);
        assert_eq!(sizes(1_000_000), [10_000, 100_000, 1_000_000]);
    }

    #[test]
    fn mapping_rss_sums_the_entries_of_one_path() {
        let smaps = "7f00-7f10 rw-s 00000000 00:1a 42 /dev/shm/x.run\nSize: 64 kB\nRss: 8 kB\n\
                     7f10-7f20 rw-p 00000000 00:00 0 \nRss: 100 kB\n\
                     7f20-7f30 rw-s 00000000 00:1a 42 /dev/shm/x.run\nRss: 4 kB\n";
        assert_eq!(mapping_rss(smaps, "/dev/shm/x.run"), Some(12 * 1024));
        assert_eq!(mapping_rss(smaps, "/dev/shm/y.run"), None);
    }

    #[test]
    fn name_lengths() {
        assert_eq!(mean_name_len(1), 2.0); // "f0"
        assert_eq!(mean_name_len(10), 2.0); // f0..f9
        assert_eq!(mean_name_len(20), 2.5); // + f10..f19
    }
}
