//! The `filetest` suite: ADAM's two write micro-benchmarks (its Table 3 and Fig. 4),
//! single-threaded. *filetest* creates [`Options::files`] files in one directory and
//! then unlinks them all; *dirtest* does the same with mkdir and rmdir. The table
//! shows µs per operation, each loop timed whole; the `lib-areas` and `lib-noareas`
//! targets compare LynxFS with and without areas (issue 27: no slower with them).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};

use crate::{progress_bar, Grid, Measured, Options, Target};

/// The suite's directory in each target's root.
const TOP: &str = "ft";

/// One operation on one path.
type Op = fn(&dyn Target, &Path) -> io::Result<()>;

/// The timed loops, in order: each leaves the state the next needs.
const OPS: &[(&str, Op)] = &[
    ("create (filetest)", |t, p| t.create(p)),
    ("unlink (filetest)", |t, p| t.unlink(p)),
    ("mkdir (dirtest)", |t, p| t.mkdir(p)),
    ("rmdir (dirtest)", |t, p| t.rmdir(p)),
];

fn each(paths: &[PathBuf], f: Op, t: &dyn Target) -> io::Result<()> {
    for p in paths {
        f(t, p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
    }
    Ok(())
}

/// Removes whatever a failed run left, ignoring what is missing.
fn scrub(t: &dyn Target, names: &[PathBuf]) {
    for p in names {
        let _ = t.unlink(p);
        let _ = t.rmdir(p);
    }
    let _ = t.rmdir(Path::new(TOP));
}

pub(crate) fn run(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
) -> anyhow::Result<Measured> {
    for (t, name) in targets.iter().zip(names) {
        match t.stat(Path::new(TOP)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(_) => bail!("target {name} already has {TOP:?} in its root; use an empty directory"),
            Err(e) => return Err(e).with_context(|| format!("target {name}: stat {TOP}")),
        }
    }
    let paths: Vec<PathBuf> = (0..opts.files)
        .map(|i| Path::new(TOP).join(format!("n{i}")))
        .collect();
    let result = measure(targets, names, opts, &paths);
    if result.is_err() {
        targets.iter().for_each(|t| scrub(t.as_ref(), &paths));
    }
    Ok(Measured {
        unit: "us/op",
        higher_is_better: false,
        columns: names.to_vec(),
        rows: result?.into_rows(),
        notes: vec![format!(
            "one thread, {} names in one directory; each loop timed whole (ADAM averages \
             five runs: use --rounds 5)",
            opts.files
        )],
        baseline: crate::tmpfs_column(names),
    })
}

/// Every round: the directory made, then each loop on every target in turn.
fn measure(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
    paths: &[PathBuf],
) -> anyhow::Result<Grid> {
    let mut grid = Grid::new(OPS.iter().map(|o| o.0).collect(), targets.len());
    let bar = progress_bar(opts, "filetest", opts.rounds * OPS.len() * targets.len());
    let top = Path::new(TOP);
    for _ in 0..opts.rounds {
        for (t, name) in targets.iter().zip(names) {
            t.mkdir(top)
                .with_context(|| format!("filetest: mkdir {TOP} on {name}"))?;
        }
        for (row, &(op, f)) in OPS.iter().enumerate() {
            for (col, (t, name)) in targets.iter().zip(names).enumerate() {
                bar.set_message(format!("{op} on {name}"));
                let start = Instant::now();
                each(paths, f, t.as_ref()).with_context(|| format!("filetest: {op} on {name}"))?;
                grid.push(
                    row,
                    col,
                    start.elapsed().as_secs_f64() * 1e6 / paths.len() as f64,
                );
                bar.inc(1);
            }
        }
        for (t, name) in targets.iter().zip(names) {
            t.rmdir(top)
                .with_context(|| format!("filetest: rmdir {TOP} on {name}"))?;
        }
    }
    bar.finish_and_clear();
    Ok(grid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DirTarget;

    #[test]
    fn four_rows_and_the_directory_left_empty() {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let opts = Options {
            files: 30,
            rounds: 2,
            progress: false,
            ..Options::default()
        };
        let report = crate::run_suite("filetest", &targets, &opts, None).unwrap();
        let ops: Vec<&str> = report.rows.iter().map(|r| r.op.as_str()).collect();
        assert_eq!(
            ops,
            [
                "create (filetest)",
                "unlink (filetest)",
                "mkdir (dirtest)",
                "rmdir (dirtest)"
            ]
        );
        for row in &report.rows {
            assert_eq!(row.rounds[0].len(), 2, "{}", row.op);
            assert!(
                row.values[0].is_finite() && row.values[0] > 0.0,
                "{}",
                row.op
            );
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
