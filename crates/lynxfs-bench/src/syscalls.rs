//! The `syscalls` suite: metadata operations over many names in one directory, one
//! thread, as in the DirectFS paper's Table II.
//!
//! Layout on each target: a chain `d1/d2/.../d16`, with the timed files in `d1` and, for
//! the deeper stats and opens, as many files in `d1/d2`, `d1/d2/d3`, the eighth level
//! and the sixteenth (issue 27: a deep path should cost what a shallow one does). Every
//! operation is timed as one loop over all names, and the table shows that loop's time
//! divided by the count.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};

use crate::{progress_bar, Grid, Measured, OpenFlags, Options, Row, Target};

/// The suite's top directory in each target's root.
const TOP: &str = "d1";

/// How deep the chain of directories goes.
const DEEPEST: usize = 16;

/// Every path the suite touches, built before any clock starts.
struct Names {
    /// `d1`, `d1/d2`, ... `d1/.../d16`, parents first.
    dirs: Vec<PathBuf>,
    depth1: Vec<PathBuf>,
    depth2: Vec<PathBuf>,
    depth3: Vec<PathBuf>,
    depth8: Vec<PathBuf>,
    depth16: Vec<PathBuf>,
    renamed: Vec<PathBuf>,
    subdirs: Vec<PathBuf>,
}

impl Names {
    fn new(n: usize) -> Self {
        let mut dirs = vec![PathBuf::from(TOP)];
        for level in 2..=DEEPEST {
            dirs.push(dirs[level - 2].join(format!("d{level}")));
        }
        let files =
            |dir: &Path, prefix: &str| (0..n).map(|i| dir.join(format!("{prefix}{i}"))).collect();
        Self {
            depth1: files(&dirs[0], "f"),
            depth2: files(&dirs[1], "f"),
            depth3: files(&dirs[2], "f"),
            depth8: files(&dirs[7], "f"),
            depth16: files(&dirs[DEEPEST - 1], "f"),
            renamed: files(&dirs[0], "r"),
            subdirs: files(&dirs[0], "m"),
            dirs,
        }
    }

    /// The files below `d1` that setup makes and teardown removes.
    fn fixed(&self) -> impl Iterator<Item = &PathBuf> {
        self.depth2
            .iter()
            .chain(&self.depth3)
            .chain(&self.depth8)
            .chain(&self.depth16)
    }
}

/// One step of the sequence: timed ones become table rows.
struct Step {
    op: &'static str,
    timed: bool,
    /// Drop every target's caches before the step ([`crate::cold::chill_all`]).
    cold: bool,
    run: fn(&dyn Target, &Names) -> io::Result<()>,
}

/// The sequence, in order; each step leaves the state the next one needs.
const STEPS: &[Step] = &[
    Step {
        op: "setup",
        timed: false,
        cold: false,
        run: setup,
    },
    Step {
        op: "create",
        timed: true,
        cold: false,
        run: |t, n| each(&n.depth1, |p| t.create(p)),
    },
    Step {
        op: "stat (depth 1, cold)",
        timed: true,
        cold: true,
        run: |t, n| each(&n.depth1, |p| t.stat(p).map(drop)),
    },
    Step {
        op: "stat (depth 1)",
        timed: true,
        cold: false,
        run: |t, n| each(&n.depth1, |p| t.stat(p).map(drop)),
    },
    Step {
        op: "stat (depth 2, cold)",
        timed: true,
        cold: true,
        run: |t, n| each(&n.depth2, |p| t.stat(p).map(drop)),
    },
    Step {
        op: "stat (depth 2)",
        timed: true,
        cold: false,
        run: |t, n| each(&n.depth2, |p| t.stat(p).map(drop)),
    },
    Step {
        op: "stat (depth 3, cold)",
        timed: true,
        cold: true,
        run: |t, n| each(&n.depth3, |p| t.stat(p).map(drop)),
    },
    Step {
        op: "stat (depth 3)",
        timed: true,
        cold: false,
        run: |t, n| each(&n.depth3, |p| t.stat(p).map(drop)),
    },
    Step {
        op: "warm up (depth 8 and 16)",
        timed: false,
        cold: false,
        run: |t, n| {
            each(&n.depth8, |p| t.stat(p).map(drop))
                .and_then(|()| each(&n.depth16, |p| t.stat(p).map(drop)))
        },
    },
    Step {
        op: "stat (depth 8)",
        timed: true,
        cold: false,
        run: |t, n| each(&n.depth8, |p| t.stat(p).map(drop)),
    },
    Step {
        op: "stat (depth 16)",
        timed: true,
        cold: false,
        run: |t, n| each(&n.depth16, |p| t.stat(p).map(drop)),
    },
    Step {
        op: "open+close (depth 1)",
        timed: true,
        cold: false,
        run: |t, n| each(&n.depth1, |p| open_close(t, p)),
    },
    Step {
        op: "open+close (depth 8)",
        timed: true,
        cold: false,
        run: |t, n| each(&n.depth8, |p| open_close(t, p)),
    },
    Step {
        op: "open+close (depth 16)",
        timed: true,
        cold: false,
        run: |t, n| each(&n.depth16, |p| open_close(t, p)),
    },
    Step {
        op: "rename",
        timed: true,
        cold: false,
        run: |t, n| pairs(&n.depth1, &n.renamed, |a, b| t.rename(a, b)),
    },
    Step {
        op: "unlink",
        timed: true,
        cold: false,
        run: |t, n| each(&n.renamed, |p| t.unlink(p)),
    },
    Step {
        op: "mkdir",
        timed: true,
        cold: false,
        run: |t, n| each(&n.subdirs, |p| t.mkdir(p)),
    },
    Step {
        op: "rmdir",
        timed: true,
        cold: false,
        run: |t, n| each(&n.subdirs, |p| t.rmdir(p)),
    },
    Step {
        op: "teardown",
        timed: false,
        cold: false,
        run: teardown,
    },
];

/// Opens a file read-only and closes it again.
fn open_close(t: &dyn Target, p: &Path) -> io::Result<()> {
    t.close(t.open(p, OpenFlags::READ)?)
}

/// Calls `f` on every path, stopping at the first error and naming its path.
fn each(paths: &[PathBuf], mut f: impl FnMut(&Path) -> io::Result<()>) -> io::Result<()> {
    for p in paths {
        f(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
    }
    Ok(())
}

/// Calls `f` on each `(from[i], to[i])`.
fn pairs(
    from: &[PathBuf],
    to: &[PathBuf],
    mut f: impl FnMut(&Path, &Path) -> io::Result<()>,
) -> io::Result<()> {
    for (a, b) in from.iter().zip(to) {
        f(a, b).map_err(|e| {
            io::Error::new(e.kind(), format!("{} -> {}: {e}", a.display(), b.display()))
        })?;
    }
    Ok(())
}

fn setup(t: &dyn Target, n: &Names) -> io::Result<()> {
    each(&n.dirs, |p| t.mkdir(p))?;
    for p in n.fixed() {
        t.create(p)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
    }
    Ok(())
}

fn teardown(t: &dyn Target, n: &Names) -> io::Result<()> {
    for p in n.fixed() {
        t.unlink(p)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
    }
    each(&n.dirs.iter().rev().cloned().collect::<Vec<_>>(), |p| {
        t.rmdir(p)
    })
}

/// After a failure: removes whatever the suite may have left, ignoring errors (most
/// names will not exist), so the target's directory is as it was.
fn scrub(t: &dyn Target, n: &Names) {
    for p in n.depth1.iter().chain(&n.renamed).chain(n.fixed()) {
        let _ = t.unlink(p);
    }
    for p in n.subdirs.iter().chain(n.dirs.iter().rev()) {
        let _ = t.rmdir(p);
    }
}

/// Refuses to start on a target whose root already has [`TOP`]: the suite would fail
/// half-way, and its clean-up would then delete files it did not create.
fn check_free(targets: &[Box<dyn Target>], names: &[String]) -> anyhow::Result<()> {
    for (t, name) in targets.iter().zip(names) {
        match t.stat(Path::new(TOP)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(_) => bail!("target {name} already has {TOP:?} in its root; use an empty directory"),
            Err(e) => return Err(e).with_context(|| format!("target {name}: stat {TOP}")),
        }
    }
    Ok(())
}

pub(crate) fn run(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
) -> anyhow::Result<Measured> {
    check_free(targets, names)?;
    let paths = Names::new(opts.files);
    let result = run_rounds(targets, names, opts, &paths);
    if result.is_err() {
        targets.iter().for_each(|t| scrub(t.as_ref(), &paths));
    }
    let (grid, mut notes) = result?;
    notes.push(
        "cold: before each cold stat step, the kernel's caches are dropped (sync; echo 3 > \
         /proc/sys/vm/drop_caches) and on lib the LynxFS index is evicted (drop_index), so \
         the loop's first stat reloads the directory; then each target's loop runs in turn; \
         fuse's daemon keeps its index; tmpfs cannot drop its tree; warm: the same loop \
         again right after"
            .into(),
    );
    for (t, name) in targets.iter().zip(names) {
        let sc = crate::mdtest::create_scaling(t.as_ref(), TOP, opts.files, opts.rounds)
            .with_context(|| format!("syscalls: create scaling on {name}"))?;
        notes.push(format!(
            "create scaling on {name}, one shared directory: 1 thread {:.0} files/s, \
             2 threads {:.0} files/s, {:.2}x; CPU per create {:.2} us with 1 thread, \
             {:.2} us with 2",
            sc.one,
            sc.two,
            sc.two / sc.one,
            sc.cpu_one,
            sc.cpu_two
        ));
        // A verdict is for developers (--goals); a user's table carries none.
        if opts.goals && name == crate::lib_target::LIB_NAME {
            notes.push(crate::goals::create_scaling_note(sc.two / sc.one));
        }
    }
    let rows = grid.into_rows();
    notes.extend(first_round_notes(&rows, names));
    Ok(Measured {
        unit: "us/op",
        higher_is_better: false,
        columns: names.to_vec(),
        rows,
        notes,
        baseline: crate::tmpfs_column(names),
    })
}

/// The rows whose first round shows a fresh pool's first touch (issue 29: within
/// 1.1x of the later rounds).
const FIRST_TOUCH_ROWS: [&str; 4] = ["create", "mkdir", "rename", "unlink"];

/// Per target, each [`FIRST_TOUCH_ROWS`] row's first round (the targets are fresh
/// then) against the median of the later rounds; nothing with a single round.
fn first_round_notes(rows: &[Row], names: &[String]) -> Vec<String> {
    let mut notes = Vec::new();
    for (col, name) in names.iter().enumerate() {
        let ratios: Vec<String> = rows
            .iter()
            .filter(|r| FIRST_TOUCH_ROWS.contains(&r.op.as_str()))
            .filter_map(|r| {
                let rounds = r.rounds.get(col)?;
                let (first, later) = rounds.split_first()?;
                (!later.is_empty())
                    .then(|| format!("{} {:.2}x", r.op, first / crate::report::median(later)))
            })
            .collect();
        if !ratios.is_empty() {
            notes.push(format!(
                "first round on {name} (a fresh pool or directory) against the later \
                 rounds' median: {} (goal for lib: <= 1.1x)",
                ratios.join(", ")
            ));
        }
    }
    notes
}

/// Runs [`STEPS`] `opts.rounds` times, each step on every target before the next step.
fn run_rounds(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
    paths: &Names,
) -> anyhow::Result<(Grid, Vec<String>)> {
    let timed: Vec<&Step> = STEPS.iter().filter(|s| s.timed).collect();
    let mut cold_notes = std::collections::BTreeSet::new();
    let mut grid = Grid::new(timed.iter().map(|s| s.op).collect(), targets.len());
    let bar = progress_bar(opts, "syscalls", opts.rounds * STEPS.len() * targets.len());
    for _ in 0..opts.rounds {
        let mut row = 0;
        for step in STEPS {
            if step.cold {
                if let Err(why) = crate::cold::chill_all(targets) {
                    cold_notes.insert(why);
                }
            }
            for (col, (t, name)) in targets.iter().zip(names).enumerate() {
                bar.set_message(format!("{} on {name}", step.op));
                let start = Instant::now();
                (step.run)(t.as_ref(), paths)
                    .with_context(|| format!("syscalls: {} on {name}", step.op))?;
                let secs = start.elapsed().as_secs_f64();
                if step.timed {
                    grid.push(row, col, secs * 1e6 / opts.files as f64);
                }
                bar.inc(1);
            }
            row += usize::from(step.timed);
        }
    }
    bar.finish_and_clear();
    Ok((grid, cold_notes.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DirTarget;

    #[test]
    fn the_first_round_is_compared_with_the_later_ones() {
        let rows = vec![
            Row::from_rounds("create", vec![vec![3.0, 2.0, 2.0], vec![5.0]]),
            Row::from_rounds("stat (depth 1)", vec![vec![9.0, 1.0, 1.0], vec![1.0]]),
        ];
        let names = ["lib".to_string(), "tmpfs".to_string()];
        let notes = first_round_notes(&rows, &names);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("on lib") && notes[0].contains("create 1.50x"));
        assert!(!notes[0].contains("stat"), "only the first-touch rows");
    }

    fn quick(files: usize) -> Options {
        Options {
            files,
            progress: false,
            ..Options::default()
        }
    }

    #[test]
    fn every_op_is_finite_and_positive_and_the_directory_is_left_empty() {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let opts = Options {
            rounds: 2,
            ..quick(50)
        };
        let report = crate::run_suite("syscalls", &targets, &opts, None).unwrap();
        let ops: Vec<&str> = report.rows.iter().map(|r| r.op.as_str()).collect();
        assert_eq!(
            ops,
            [
                "create",
                "stat (depth 1, cold)",
                "stat (depth 1)",
                "stat (depth 2, cold)",
                "stat (depth 2)",
                "stat (depth 3, cold)",
                "stat (depth 3)",
                "stat (depth 8)",
                "stat (depth 16)",
                "open+close (depth 1)",
                "open+close (depth 8)",
                "open+close (depth 16)",
                "rename",
                "unlink",
                "mkdir",
                "rmdir"
            ]
        );
        for row in &report.rows {
            assert_eq!(row.rounds[0].len(), 2, "{}", row.op);
            assert!(
                row.values[0].is_finite() && row.values[0] > 0.0,
                "{}: {}",
                row.op,
                row.values[0]
            );
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn refuses_a_root_that_already_has_d1_and_leaves_it_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(TOP)).unwrap();
        std::fs::write(dir.path().join(TOP).join("f0"), b"keep").unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let err = crate::run_suite("syscalls", &targets, &quick(5), None).unwrap_err();
        assert!(err.to_string().contains("already has"), "{err:#}");
        assert_eq!(
            std::fs::read(dir.path().join(TOP).join("f0")).unwrap(),
            b"keep"
        );
    }

    #[test]
    fn a_failure_half_way_cleans_up() {
        // Creates fail outside d1/d2, so setup succeeds and the timed create fails
        // with files and directories already made.
        struct NoCreate(DirTarget);
        impl Target for NoCreate {
            fn name(&self) -> String {
                "nocreate".into()
            }
            fn create(&self, p: &Path) -> io::Result<()> {
                if p.starts_with("d1/d2") {
                    self.0.create(p)
                } else {
                    Err(io::Error::from_raw_os_error(libc::ENOSPC))
                }
            }
            fn stat(&self, p: &Path) -> io::Result<crate::Stat> {
                self.0.stat(p)
            }
            fn unlink(&self, p: &Path) -> io::Result<()> {
                self.0.unlink(p)
            }
            fn mkdir(&self, p: &Path) -> io::Result<()> {
                self.0.mkdir(p)
            }
            fn rmdir(&self, p: &Path) -> io::Result<()> {
                self.0.rmdir(p)
            }
            fn rename(&self, a: &Path, b: &Path) -> io::Result<()> {
                self.0.rename(a, b)
            }
            fn open(&self, p: &Path, f: crate::OpenFlags) -> io::Result<crate::Handle> {
                self.0.open(p, f)
            }
            fn pwrite(&self, h: crate::Handle, b: &[u8], o: u64) -> io::Result<usize> {
                self.0.pwrite(h, b, o)
            }
            fn pread(&self, h: crate::Handle, b: &mut [u8], o: u64) -> io::Result<usize> {
                self.0.pread(h, b, o)
            }
            fn close(&self, h: crate::Handle) -> io::Result<()> {
                self.0.close(h)
            }
            fn readdir(&self, p: &Path) -> io::Result<Vec<std::ffi::OsString>> {
                self.0.readdir(p)
            }
            fn fsync(&self, h: crate::Handle) -> io::Result<()> {
                self.0.fsync(h)
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(NoCreate(DirTarget::new(dir.path(), "t").unwrap()))];
        let err = crate::run_suite("syscalls", &targets, &quick(5), None).unwrap_err();
        assert!(format!("{err:#}").contains("create on nocreate"), "{err:#}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
