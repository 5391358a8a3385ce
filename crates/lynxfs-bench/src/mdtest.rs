//! The `mdtest` suite: N threads (1 up to [`Options::max_threads`]) working in one
//! shared directory, as mdtest's "shared directory" mode: every thread creates its own
//! files there, then stats, renames and removes them. The table shows files/s (all
//! threads together) for each phase and thread count.
//!
//! Also the create-scaling figure of the `syscalls` suite ([`create_scaling`]): one
//! thread against two creating in one directory.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::{median, progress_bar, Grid, Measured, Options, Target};

/// The shared directory in each target's root.
pub(crate) const DIR: &str = "mdtest";

/// One thread's names: its files and what they are renamed to.
struct ThreadNames {
    files: Vec<PathBuf>,
    renamed: Vec<PathBuf>,
}

/// Names for `threads` threads sharing `total` files (at least one each), in `dir`.
fn plan(dir: &Path, total: usize, threads: usize) -> Vec<ThreadNames> {
    let per = (total / threads).max(1);
    (0..threads)
        .map(|t| ThreadNames {
            files: (0..per).map(|i| dir.join(format!("t{t}.f{i}"))).collect(),
            renamed: (0..per).map(|i| dir.join(format!("t{t}.r{i}"))).collect(),
        })
        .collect()
}

/// Runs `work(target, thread's items)` on one thread per item list, all released by
/// one barrier, and returns the seconds from the first thread's start to the last
/// one's end (each thread reads the clock itself: the releasing thread may be
/// descheduled on a busy machine), or the first error.
pub(crate) fn timed_parallel<T: Sync>(
    t: &dyn Target,
    per_thread: &[T],
    work: impl Fn(&dyn Target, &T) -> io::Result<()> + Sync,
) -> io::Result<f64> {
    let barrier = Barrier::new(per_thread.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = per_thread
            .iter()
            .map(|items| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    work(t, items).map(|()| (start, Instant::now()))
                })
            })
            .collect();
        let mut span: Option<(Instant, Instant)> = None;
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok((a, b))) => {
                    span = Some(span.map_or((a, b), |(s, e)| (s.min(a), e.max(b))));
                }
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(io::Error::other("thread panicked"));
                }
            }
        }
        match (first_err, span) {
            (Some(e), _) => Err(e),
            (None, Some((a, b))) => Ok((b - a).as_secs_f64()),
            (None, None) => Ok(0.0),
        }
    })
}

fn each(paths: &[PathBuf], mut f: impl FnMut(&Path) -> io::Result<()>) -> io::Result<()> {
    for p in paths {
        f(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
    }
    Ok(())
}

/// One phase of the sequence.
struct Phase {
    op: &'static str,
    run: fn(&dyn Target, &ThreadNames) -> io::Result<()>,
}

const PHASES: &[Phase] = &[
    Phase {
        op: "create",
        run: |t, n| each(&n.files, |p| t.create(p)),
    },
    Phase {
        op: "stat",
        run: |t, n| each(&n.files, |p| t.stat(p).map(drop)),
    },
    Phase {
        op: "rename",
        run: |t, n| {
            for (a, b) in n.files.iter().zip(&n.renamed) {
                t.rename(a, b).map_err(|e| {
                    io::Error::new(e.kind(), format!("{} -> {}: {e}", a.display(), b.display()))
                })?;
            }
            Ok(())
        },
    },
    Phase {
        op: "remove",
        run: |t, n| each(&n.renamed, |p| t.unlink(p)),
    },
];

/// Row labels, `"create x1"` .. `"remove x8"`, leaked once: the grid wants `'static`.
fn labels(max_threads: usize) -> Vec<&'static str> {
    let mut out = Vec::new();
    for threads in 1..=max_threads {
        for p in PHASES {
            out.push(&*Box::leak(format!("{} x{threads}", p.op).into_boxed_str()));
        }
    }
    out
}

/// Removes whatever a failed run left in [`DIR`], ignoring errors, and [`DIR`] itself.
fn scrub(t: &dyn Target, all: &[ThreadNames]) {
    for n in all {
        for p in n.files.iter().chain(&n.renamed) {
            let _ = t.unlink(p);
        }
    }
    let _ = t.rmdir(Path::new(DIR));
}

pub(crate) fn check_free(
    targets: &[Box<dyn Target>],
    names: &[String],
    dir: &str,
) -> anyhow::Result<()> {
    for (t, name) in targets.iter().zip(names) {
        match t.stat(Path::new(dir)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(_) => bail!("target {name} already has {dir:?} in its root; use an empty directory"),
            Err(e) => return Err(e).with_context(|| format!("target {name}: stat {dir}")),
        }
    }
    Ok(())
}

pub(crate) fn run(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
) -> anyhow::Result<Measured> {
    if opts.max_threads == 0 {
        bail!("max threads must be at least 1");
    }
    check_free(targets, names, DIR)?;
    let dir = Path::new(DIR);
    let plans: Vec<Vec<ThreadNames>> = (1..=opts.max_threads)
        .map(|n| plan(dir, opts.files, n))
        .collect();
    let mut grid = Grid::new(labels(opts.max_threads), targets.len());
    let steps = opts.rounds * plans.len() * PHASES.len() * targets.len();
    let bar = progress_bar(opts, "mdtest", steps);
    for _ in 0..opts.rounds {
        for (ti, plan) in plans.iter().enumerate() {
            for (t, name) in targets.iter().zip(names) {
                t.mkdir(dir)
                    .with_context(|| format!("mdtest: mkdir {DIR} on {name}"))?;
            }
            let total = plan.iter().map(|n| n.files.len()).sum::<usize>() as f64;
            for (pi, phase) in PHASES.iter().enumerate() {
                for (col, (t, name)) in targets.iter().zip(names).enumerate() {
                    bar.set_message(format!("{} x{} on {name}", phase.op, ti + 1));
                    let secs = match timed_parallel(t.as_ref(), plan, phase.run) {
                        Ok(s) => s,
                        Err(e) => {
                            targets.iter().for_each(|t| scrub(t.as_ref(), plan));
                            return Err(e).with_context(|| {
                                format!("mdtest: {} with {} threads on {name}", phase.op, ti + 1)
                            });
                        }
                    };
                    grid.push(ti * PHASES.len() + pi, col, total / secs);
                    bar.inc(1);
                }
            }
            for (t, name) in targets.iter().zip(names) {
                t.rmdir(dir)
                    .with_context(|| format!("mdtest: rmdir {DIR} on {name}"))?;
            }
        }
    }
    bar.finish_and_clear();
    let per = |n: usize| (opts.files / n).max(1);
    Ok(Measured {
        unit: "files/s",
        higher_is_better: true,
        columns: names.to_vec(),
        rows: grid.into_rows(),
        notes: vec![format!(
            "xN: N threads in one shared directory, {} files in all ({} per thread at x1, {} at x{})",
            opts.files,
            per(1),
            per(opts.max_threads),
            opts.max_threads
        )],
        baseline: crate::tmpfs_column(names),
    })
}

/// Files/s creating `files` files in a fresh directory `dir` with 1 thread and with 2,
/// as medians over `rounds`; the directory is removed again.
pub(crate) fn create_scaling(
    t: &dyn Target,
    dir: &str,
    files: usize,
    rounds: usize,
) -> anyhow::Result<(f64, f64)> {
    let d = Path::new(dir);
    let mut rates = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (i, threads) in [1usize, 2].into_iter().enumerate() {
            let plan = plan(d, files, threads);
            t.mkdir(d).with_context(|| format!("mkdir {dir}"))?;
            let timed = timed_parallel(t, &plan, |t, n| each(&n.files, |p| t.create(p)));
            let total = plan.iter().map(|n| n.files.len()).sum::<usize>() as f64;
            let cleaned = plan
                .iter()
                .try_for_each(|n| each(&n.files, |p| t.unlink(p)))
                .and_then(|()| t.rmdir(d));
            let secs = match timed {
                Ok(s) => s,
                Err(e) => {
                    scrub(t, &plan);
                    let _ = t.rmdir(d);
                    return Err(e).context("create scaling");
                }
            };
            cleaned.context("create scaling: clean-up")?;
            rates[i].push(total / secs);
        }
    }
    Ok((median(&rates[0]), median(&rates[1])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DirTarget;

    #[test]
    fn every_phase_and_thread_count_has_a_rate_and_the_root_is_left_empty() {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let opts = Options {
            files: 40,
            max_threads: 3,
            progress: false,
            ..Options::default()
        };
        let report = crate::run_suite("mdtest", &targets, &opts, None).unwrap();
        let ops: Vec<&str> = report.rows.iter().map(|r| r.op.as_str()).collect();
        assert_eq!(ops.len(), 12);
        assert_eq!(
            &ops[..5],
            [
                "create x1",
                "stat x1",
                "rename x1",
                "remove x1",
                "create x2"
            ]
        );
        assert!(report
            .rows
            .iter()
            .all(|r| r.values[0].is_finite() && r.values[0] > 0.0));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn threads_really_share_the_directory() {
        // While a parallel phase runs, every thread's files are in the one directory.
        let dir = tempfile::tempdir().unwrap();
        let t = DirTarget::new(dir.path(), "tmp").unwrap();
        let plan = plan(Path::new(DIR), 10, 2);
        t.mkdir(Path::new(DIR)).unwrap();
        timed_parallel(&t, &plan, |t, n| each(&n.files, |p| t.create(p))).unwrap();
        let mut seen: Vec<String> = std::fs::read_dir(dir.path().join(DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        seen.sort();
        assert_eq!(seen.len(), 10);
        assert!(seen.iter().filter(|n| n.starts_with("t0.")).count() == 5);
        assert!(seen.iter().filter(|n| n.starts_with("t1.")).count() == 5);
    }

    #[test]
    fn a_failing_thread_fails_the_phase() {
        let dir = tempfile::tempdir().unwrap();
        let t = DirTarget::new(dir.path(), "tmp").unwrap();
        // No directory: every create fails with ENOENT.
        let plan = plan(Path::new(DIR), 4, 2);
        let err = timed_parallel(&t, &plan, |t, n| each(&n.files, |p| t.create(p))).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn create_scaling_measures_both_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let t = DirTarget::new(dir.path(), "tmp").unwrap();
        let (one, two) = create_scaling(&t, "sc", 20, 1).unwrap();
        assert!(one > 0.0 && two > 0.0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
