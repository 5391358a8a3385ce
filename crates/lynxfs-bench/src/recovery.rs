//! The `recovery` suite (LynxFS only): pools holding one directory of 10^4, 10^5, ...
//! up to [`Options::files`] entries (one column each), and the times that depend on
//! its size:
//!
//! - **clean open**: `Fs::open` of the cleanly closed pool (goal ≤ 50 ms at 1M files);
//! - **first lookup**: the first `stat` in the big directory after that open, which
//!   reads the directory's log into the index (goal ≤ 150 ms at 1M);
//! - **open after crash**: `Fs::open` after `crash_in_place`, which runs recovery
//!   (journal replay and the namespace walk; goal ≤ 1 s at 1M).
//!
//! The notes add the DRAM the index takes per entry (growth of the process's
//! anonymous resident memory across the first lookup, over the entries it indexed;
//! the pool mapping is shared memory and not counted) next to the estimate `lynxfs
//! info` prints for a mounted pool, and the create and close rates.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};

use crate::lib_target::{fresh_pool_path, to_io, LIB_NAME};
use crate::{median, progress_bar, Grid, Measured, Options};

/// The big directory, under the pool's root.
const DIR: &str = "big";

/// Goals at one million files, in ms: clean open, first lookup, open after crash.
const GOALS_MS: [f64; 3] = [50.0, 150.0, 1000.0];

/// A pool big enough for `files` files in one directory, with room to spare.
fn mkfs_options(files: usize) -> MkfsOptions {
    let files = files as u64;
    let mut opts = MkfsOptions::new((files * 1100).max(256 << 20).next_multiple_of(1 << 20));
    opts.inodes = Some(files + files / 16 + 4096);
    opts
}

/// The calling process's anonymous resident memory (`RssAnon`), in bytes.
pub fn rss_anon() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Hands the heap's free memory back to the kernel, so `RssAnon` measures live data.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn name(buf: &mut String, i: usize) -> &str {
    use std::fmt::Write as _;
    buf.clear();
    let _ = write!(buf, "{DIR}/f{i}");
    buf
}

/// Opens the pool, timed. The heap is trimmed first: freeing the previous `Fs`'s
/// index leaves a million small chunks that glibc would otherwise consolidate inside
/// the open's first large allocation, charging the previous run's clean-up to it (a
/// fresh process, as a real mount is, has no such heap).
fn open(path: &Path) -> anyhow::Result<(Fs<PmemBackend>, f64)> {
    trim_heap();
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
    /// Per row (clean open, first lookup, open after crash), every round, in ms.
    ms: [Vec<f64>; 3],
    notes: Vec<String>,
}

fn run_sizes(path: &Path, opts: &Options) -> anyhow::Result<Measured> {
    let sizes = sizes(opts.files);
    let steps = sizes.iter().map(|n| n + opts.rounds * 3).sum();
    let bar = progress_bar(opts, "recovery", steps);
    let mut grid = Grid::new(
        vec![
            "clean open",
            "first lookup (index load)",
            "open after crash",
        ],
        sizes.len() + 1,
    );
    let mut notes = Vec::new();
    for (col, &files) in sizes.iter().enumerate() {
        let r = run_on(path, files, opts, &bar)?;
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
        "goal column: the issue's goals at 1,000,000 files, to compare with the 1000000 column"
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

    let mut ms: [Vec<f64>; 3] = Default::default();
    let mut dram = Vec::new();
    let mut estimate = Vec::new();
    let mut recovered = None;
    for _ in 0..opts.rounds {
        bar.set_message(format!("{files} files: clean open"));
        let (fs, t) = open(path)?;
        if !fs.pool().was_clean {
            bail!("the pool was not clean after a clean close");
        }
        ms[0].push(t);
        bar.inc(1);

        bar.set_message(format!("{files} files: first lookup"));
        // The index of the populating run (and of earlier rounds) was freed, but
        // malloc keeps freed memory for reuse, which would hide the new index's growth.
        trim_heap();
        let (rss0, idx0) = (rss_anon(), fs.ns().index.len());
        let start = Instant::now();
        fs.session(Cred::root())
            .lstat("big/f0")
            .map_err(to_io)
            .context("first lookup")?;
        ms[1].push(start.elapsed().as_secs_f64() * 1e3);
        let (rss1, idx1) = (rss_anon(), fs.ns().index.len());
        let indexed = idx1.saturating_sub(idx0);
        if indexed < files {
            bail!("the first lookup indexed {indexed} entries, expected at least {files}");
        }
        if let (Some(a), Some(b)) = (rss0, rss1) {
            dram.push(b.saturating_sub(a) as f64 / indexed as f64);
        }
        let usage = fs.ns().usage();
        estimate.push(usage.index_bytes as f64 / usage.index_entries.max(1) as f64);
        check_files(&fs, files)?;
        bar.inc(1);

        bar.set_message(format!("{files} files: open after crash"));
        fs.pool().crash_in_place();
        drop(fs);
        let (fs, t) = open(path)?;
        let Some(rep) = fs.pool().recovery.clone() else {
            bail!("opening after crash_in_place did not run recovery");
        };
        ms[2].push(t);
        check_files(&fs, files)?;
        recovered = Some(rep.files);
        fs.close().context("clean close after recovery")?;
        bar.inc(1);
    }
    if !dram.is_empty() {
        notes.push(format!(
            "{files} files: DRAM per indexed entry {:.0} bytes measured (growth of RssAnon \
             across the first lookup, over the {files} entries it indexed; names are {} bytes \
             on average), {:.0} bytes estimated by `lynxfs info`'s formula",
            median(&dram),
            mean_name_len(files),
            median(&estimate)
        ));
    }
    if let Some(n) = recovered {
        notes.push(format!("{files} files: recovery walked {n} files"));
    }
    Ok(SizeResult { ms, notes })
}

fn mean_name_len(files: usize) -> f64 {
    let total: usize = (0..files).map(|i| 1 + i.max(1).ilog10() as usize + 1).sum();
    total as f64 / files.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_pool_measures_every_row_and_removes_its_file() {
        let opts = Options {
            files: 2000,
            progress: false,
            ..Options::default()
        };
        let path = fresh_pool_path().unwrap();
        let m = run_at(&path, &opts).unwrap();
        assert_eq!(m.columns, ["lynxfs 2000", "goal"]);
        assert_eq!(m.rows.len(), 3);
        assert!(m.rows.iter().all(|r| r.values[0] > 0.0));
        assert!(m.notes.iter().any(|n| n.contains("DRAM per indexed entry")));
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
            ..Options::default()
        };
        let report = crate::run_suite("recovery", &[], &opts, None).unwrap();
        assert_eq!(report.rows[2].op, "open after crash");
    }

    #[test]
    fn sizes_are_powers_of_ten_up_to_the_count() {
        assert_eq!(sizes(100), [100]);
        assert_eq!(sizes(10_000), [10_000]);
        assert_eq!(sizes(250_000), [10_000, 100_000, 250_000]);
        assert_eq!(sizes(1_000_000), [10_000, 100_000, 1_000_000]);
    }

    #[test]
    fn name_lengths() {
        assert_eq!(mean_name_len(1), 2.0); // "f0"
        assert_eq!(mean_name_len(10), 2.0); // f0..f9
        assert_eq!(mean_name_len(20), 2.5); // + f10..f19
    }
}
