//! The `mdtest` suite: N threads (1 up to [`Options::max_threads`]) working in one
//! shared directory, as mdtest's "shared directory" mode: every thread creates its own
//! files there, then stats, renames and removes them. The table shows files/s (all
//! threads together) for each phase and thread count.
//!
//! With [`Options::processes`] N, the same work is split over N worker processes
//! (each attached to the `lib` target's pool, see [`crate::workers`]) next to N
//! threads of this process: one column each, at 1 and at N.
//!
//! Also the create-scaling figure of the `syscalls` suite ([`create_scaling`]): one
//! thread against two creating in one directory.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::workers::{monotonic_ns, Workers};
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

/// Runs phase `op` over the names of thread `i` of `n` sharing `total` files in
/// [`DIR`], as a worker process does; returns its start and end on the shared
/// monotonic clock, in ns.
pub(crate) fn run_phase_of(
    t: &dyn Target,
    op: &str,
    total: usize,
    n: usize,
    i: usize,
) -> anyhow::Result<(u64, u64)> {
    let Some(phase) = PHASES.iter().find(|p| p.op == op) else {
        bail!("unknown phase {op:?}");
    };
    if i >= n {
        bail!("thread {i} of {n}");
    }
    let names = plan(Path::new(DIR), total, n).swap_remove(i);
    let start = monotonic_ns();
    (phase.run)(t, &names)?;
    Ok((start, monotonic_ns()))
}

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
    if opts.processes > 0 {
        return run_processes(targets, names, opts);
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

/// The counts the processes mode compares: 1, and N when it is more.
fn process_counts(n: usize) -> Vec<usize> {
    if n > 1 {
        vec![1, n]
    } else {
        vec![1]
    }
}

/// `mdtest` with [`Options::processes`] N on one `lib` target: every phase at 1 and N,
/// by threads of this process (first column) and by worker processes attached to the
/// same pool (second column), alternating per round.
fn run_processes(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
) -> anyhow::Result<Measured> {
    let [t] = targets else {
        bail!("mdtest --processes takes one target, lib");
    };
    let Some(lib) = t.as_lib() else {
        bail!("mdtest --processes needs the lib target (a LynxFS pool to attach)");
    };
    let Some(cmd) = &opts.worker else {
        bail!("mdtest --processes needs a worker command");
    };
    check_free(targets, names, DIR)?;
    let counts = process_counts(opts.processes);
    let mut workers = Workers::spawn(cmd, opts.processes)?;
    let pool = lib.pool_path().display().to_string();
    workers
        .all(|_| format!("attach {pool}"), "ready")
        .context("mdtest: attaching the workers")?;
    let mut labels = Vec::new();
    for &n in &counts {
        for p in PHASES {
            labels.push(&*Box::leak(format!("{} x{n}", p.op).into_boxed_str()));
        }
    }
    let mut grid = Grid::new(labels, 2);
    let bar = progress_bar(
        opts,
        "mdtest",
        opts.rounds * counts.len() * 2 * PHASES.len(),
    );
    for _ in 0..opts.rounds {
        for (ci, &n) in counts.iter().enumerate() {
            let plan = plan(Path::new(DIR), opts.files, n);
            let total = (plan.len() * plan[0].files.len()) as f64;
            for col in 0..2 {
                t.mkdir(Path::new(DIR))
                    .with_context(|| format!("mdtest: mkdir {DIR}"))?;
                for (pi, phase) in PHASES.iter().enumerate() {
                    bar.set_message(format!("{} x{n}", phase.op));
                    let secs = if col == 0 {
                        timed_parallel(t.as_ref(), &plan, phase.run).map_err(anyhow::Error::from)
                    } else {
                        timed_processes(&mut workers, phase.op, opts.files, n)
                    };
                    let secs = match secs {
                        Ok(s) => s,
                        Err(e) => {
                            scrub(t.as_ref(), &plan);
                            let how = ["threads", "processes"][col];
                            return Err(e)
                                .with_context(|| format!("mdtest: {} x{n} {how}", phase.op));
                        }
                    };
                    grid.push(ci * PHASES.len() + pi, col, total / secs);
                    bar.inc(1);
                }
                t.rmdir(Path::new(DIR))
                    .with_context(|| format!("mdtest: rmdir {DIR}"))?;
            }
        }
    }
    bar.finish_and_clear();
    workers.quit().context("mdtest: stopping the workers")?;
    let rows = grid.into_rows();
    let n = opts.processes;
    let mut notes = vec![format!(
        "xN: N threads of one process (column {name} threads) or N processes attached to one pool (column {name} processes), in one shared directory, {} files in all",
        opts.files,
        name = names[0]
    )];
    if opts.goals {
        notes.extend(process_goal_notes(&rows, n));
    }
    Ok(Measured {
        unit: "files/s",
        higher_is_better: true,
        columns: vec![
            format!("{} threads", names[0]),
            format!("{} processes", names[0]),
        ],
        rows,
        notes,
        baseline: None,
    })
}

/// The goals: per operation, N processes within 1.2x of N threads; creating in
/// one directory, N processes at least 1.5x one.
fn process_goal_notes(rows: &[crate::Row], n: usize) -> Vec<String> {
    let met = |ok: bool| if ok { "met" } else { "MISSED" };
    let row = |op: String| rows.iter().find(|r| r.op == op);
    let mut out = Vec::new();
    for p in PHASES {
        if let Some(r) = row(format!("{} x{n}", p.op)) {
            let x = r.values[0] / r.values[1];
            out.push(format!(
                "goal {} x{n}: threads/processes {x:.2} (<= 1.2: {})",
                p.op,
                met(x <= 1.2)
            ));
        }
    }
    if let (true, Some(one), Some(many)) =
        (n > 1, row("create x1".into()), row(format!("create x{n}")))
    {
        let x = many.values[1] / one.values[1];
        out.push(format!(
            "goal create scaling: {n} processes {x:.2}x one process in one directory (>= 1.5: {})",
            met(x >= 1.5)
        ));
    }
    out
}

/// Runs phase `op` in the first `n` workers, released together, and returns the
/// seconds from the first one's start to the last one's end.
fn timed_processes(workers: &mut Workers, op: &str, total: usize, n: usize) -> anyhow::Result<f64> {
    let spans = workers.first(n, |i| format!("{op} {total} {n} {i}"), "done")?;
    let start = spans.iter().filter_map(|s| s.first()).min();
    let end = spans.iter().filter_map(|s| s.get(1)).max();
    match (start, end) {
        (Some(a), Some(b)) if b >= a => Ok((b - a) as f64 / 1e9),
        _ => bail!("workers replied no span: {spans:?}"),
    }
}

/// One thread against two creating in one directory ([`create_scaling`]): files/s
/// (medians over the rounds) and the CPU time each create took on its thread, in µs
/// (medians too). The CPU time does not depend on whether other programs leave both
/// CPUs free, which files/s does; more CPU per create with two threads is what they
/// share (cache lines moving between CPUs, waiting on each other).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scaling {
    pub one: f64,
    pub two: f64,
    pub cpu_one: f64,
    pub cpu_two: f64,
}

/// The calling thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Creating `files` files in a fresh directory `dir` with 1 thread and with 2, over
/// `rounds`; the directory is removed again.
pub(crate) fn create_scaling(
    t: &dyn Target,
    dir: &str,
    files: usize,
    rounds: usize,
) -> anyhow::Result<Scaling> {
    let d = Path::new(dir);
    let mut rates = [Vec::new(), Vec::new()];
    let mut cpus = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (i, threads) in [1usize, 2].into_iter().enumerate() {
            let plan = plan(d, files, threads);
            t.mkdir(d).with_context(|| format!("mkdir {dir}"))?;
            let cpu_ns = std::sync::atomic::AtomicU64::new(0);
            let timed = timed_parallel(t, &plan, |t, n| {
                let start = thread_cpu_ns();
                let done = each(&n.files, |p| t.create(p));
                let spent = thread_cpu_ns().saturating_sub(start);
                cpu_ns.fetch_add(spent, std::sync::atomic::Ordering::Relaxed);
                done
            });
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
            cpus[i].push(cpu_ns.into_inner() as f64 / 1e3 / total);
        }
    }
    Ok(Scaling {
        one: median(&rates[0]),
        two: median(&rates[1]),
        cpu_one: median(&cpus[0]),
        cpu_two: median(&cpus[1]),
    })
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
    fn processes_mode_has_threads_and_processes_columns_and_goal_notes() {
        let targets: Vec<Box<dyn Target>> = vec![Box::new(
            crate::LibTarget::create(&lynxfs::MkfsOptions::new(64 << 20)).unwrap(),
        )];
        let opts = Options {
            files: 40,
            processes: 2,
            progress: false,
            worker: Some(crate::workers::tests::test_worker()),
            goals: true,
            ..Options::default()
        };
        let report = crate::run_suite("mdtest", &targets, &opts, None).unwrap();
        assert_eq!(report.columns, ["lynxfs threads", "lynxfs processes"]);
        let ops: Vec<&str> = report.rows.iter().map(|r| r.op.as_str()).collect();
        assert_eq!(ops.len(), 8);
        assert_eq!(
            (ops[0], ops[4], ops[7]),
            ("create x1", "create x2", "remove x2")
        );
        assert!(report
            .rows
            .iter()
            .all(|r| r.values.iter().all(|v| v.is_finite() && *v > 0.0)));
        assert!(report
            .notes
            .iter()
            .any(|n| n.starts_with("goal create scaling")));
        // Everything the workers made was removed again.
        assert!(targets[0].readdir(Path::new("")).unwrap().is_empty());
    }

    #[test]
    fn processes_mode_refuses_other_targets_and_a_missing_worker() {
        let dir = tempfile::tempdir().unwrap();
        let kernel: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let opts = Options {
            processes: 2,
            progress: false,
            worker: Some(crate::workers::tests::test_worker()),
            ..Options::default()
        };
        let err = crate::run_suite("mdtest", &kernel, &opts, None).unwrap_err();
        assert!(err.to_string().contains("lib target"), "{err:#}");
        let lib: Vec<Box<dyn Target>> = vec![Box::new(
            crate::LibTarget::create(&lynxfs::MkfsOptions::new(64 << 20)).unwrap(),
        )];
        let no_worker = Options {
            worker: None,
            ..opts
        };
        let err = crate::run_suite("mdtest", &lib, &no_worker, None).unwrap_err();
        assert!(err.to_string().contains("worker command"), "{err:#}");
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
        let s = create_scaling(&t, "sc", 20, 1).unwrap();
        assert!(s.one > 0.0 && s.two > 0.0);
        assert!(s.cpu_one > 0.0 && s.cpu_two > 0.0, "{s:?}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
