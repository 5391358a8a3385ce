//! The `rename` suite: ADAM's rename experiment (its Fig. 6). A directory with 1, 10,
//! 100, 1,000 and 10,000 children (up to [`Options::files`]) is made hot by lookups of
//! its children, then renamed; the table shows µs per directory rename next to a file
//! rename in the same parent, per target. With areas, renaming a directory that is
//! not an area root re-keys its descendants (cost grows with the children); evolution
//! makes a hot directory an area root, whose rename touches none of them (flat). The
//! `lib-areas`, `lib-noevolution` and `lib-noareas` targets are the paper's three
//! curves; the PNG draws them against the children count.
//!
//! Layout: `rn/dir` with its children `rn/dir/cI` and `rn/file`; each is renamed to
//! `rn/dir.moved` / `rn/file.moved` and back, [`RENAMES`] renames per round, back to
//! back.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use lynxfs::meta::areas::Thresholds;

use anyhow::{bail, Context};

use crate::{progress_bar, Measured, Options, Row, Target};

/// The suite's top directory in each target's root.
const TOP: &str = "rn";
/// The children counts of the experiment (those up to `--files` are run).
const SIZES: &[usize] = &[1, 10, 100, 1_000, 10_000];
/// Lookups of every child that make the directory hot before it is first renamed.
const HOT_LOOKUPS: usize = 4;
/// Renames timed per size and round (there and back again, alternately).
const RENAMES: usize = 20;

/// The row of a directory with `n` children.
fn dir_row(n: usize) -> String {
    if n == 1 {
        "dir of 1 child".into()
    } else {
        format!("dir of {n} children")
    }
}

/// The row of the file rename.
pub(crate) const FILE_ROW: &str = "file";

/// The children count of a directory row, for the figure's x axis.
pub(crate) fn children_of(row: &str) -> Option<usize> {
    let rest = row.strip_prefix("dir of ")?;
    rest.split(' ').next()?.parse().ok()
}

/// The paths of one size, built before any clock starts.
struct Names {
    top: PathBuf,
    dir: PathBuf,
    moved: PathBuf,
    children: Vec<PathBuf>,
    moved_children: Vec<PathBuf>,
    file: PathBuf,
    file_moved: PathBuf,
}

impl Names {
    fn new(n: usize) -> Self {
        let top = PathBuf::from(TOP);
        let dir = top.join("dir");
        let moved = top.join("dir.moved");
        let children = (0..n).map(|i| dir.join(format!("c{i}"))).collect();
        let moved_children = (0..n).map(|i| moved.join(format!("c{i}"))).collect();
        Self {
            file: top.join("file"),
            file_moved: top.join("file.moved"),
            top,
            dir,
            moved,
            children,
            moved_children,
        }
    }
}

fn named(p: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

fn stat_all(t: &dyn Target, paths: &[PathBuf]) -> io::Result<()> {
    for p in paths {
        t.stat(p).map_err(|e| named(p, e))?;
    }
    Ok(())
}

fn setup(t: &dyn Target, n: &Names) -> io::Result<()> {
    t.mkdir(&n.top).map_err(|e| named(&n.top, e))?;
    t.mkdir(&n.dir).map_err(|e| named(&n.dir, e))?;
    for c in &n.children {
        t.create(c).map_err(|e| named(c, e))?;
    }
    t.create(&n.file).map_err(|e| named(&n.file, e))?;
    for _ in 0..HOT_LOOKUPS {
        stat_all(t, &n.children)?;
    }
    Ok(())
}

/// Removes what [`setup`] made, wherever the renames left it; ignores what is missing
/// (also the clean-up after a failure).
fn scrub(t: &dyn Target, n: &Names) {
    for c in n.children.iter().chain(&n.moved_children) {
        let _ = t.unlink(c);
    }
    let _ = t.unlink(&n.file);
    let _ = t.unlink(&n.file_moved);
    let _ = t.rmdir(&n.dir);
    let _ = t.rmdir(&n.moved);
    let _ = t.rmdir(&n.top);
}

/// Renames `a` to `b` and back, [`RENAMES`] renames in all, back to back (lookups
/// between them would leave the renames' cache lines cold in proportion to the
/// children, on every file system alike): µs per rename.
fn time_renames(t: &dyn Target, a: &Path, b: &Path) -> io::Result<f64> {
    let start = Instant::now();
    for i in 0..RENAMES {
        let (from, to) = if i % 2 == 0 { (a, b) } else { (b, a) };
        t.rename(from, to).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{} -> {}: {e}", from.display(), to.display()),
            )
        })?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / RENAMES as f64)
}

/// On LynxFS with evolution on, one evolution round now (what its background thread
/// does every 5 s), so the renames find the hot directory's state acted on: the
/// directories it made area roots (splits and inherits).
fn evolve(t: &dyn Target) -> u64 {
    match t.as_lib() {
        Some(l) if l.fs().ns().mechanisms.evolution() => {
            let round = l.fs().ns().areas.evolve(&Thresholds::default());
            round.splits + round.inherits
        }
        _ => 0,
    }
}

/// One size on one target: (directory rename, file rename) in µs, and the new area
/// roots an evolution round made before the renames.
fn one(t: &dyn Target, n: &Names) -> io::Result<(f64, f64, u64)> {
    setup(t, n)?;
    let roots = evolve(t);
    let dir = time_renames(t, &n.dir, &n.moved)?;
    let file = time_renames(t, &n.file, &n.file_moved)?;
    Ok((dir, file, roots))
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
    let sizes: Vec<usize> = SIZES.iter().copied().filter(|&s| s <= opts.files).collect();
    let cols = targets.len();
    // [size][column][round], and the file renames of every size and round per column.
    let mut dirs = vec![vec![Vec::new(); cols]; sizes.len()];
    let mut files = vec![Vec::new(); cols];
    // Area roots made by the evolution rounds, per column and size (last round).
    let mut roots = vec![vec![0; sizes.len()]; cols];
    let bar = progress_bar(opts, "rename", opts.rounds * sizes.len() * cols);
    for _ in 0..opts.rounds {
        for (s, &size) in sizes.iter().enumerate() {
            let paths = Names::new(size);
            for (c, (t, name)) in targets.iter().zip(names).enumerate() {
                bar.set_message(format!("{} on {name}", dir_row(size)));
                let r = one(t.as_ref(), &paths);
                scrub(t.as_ref(), &paths);
                let (d, f, made) =
                    r.with_context(|| format!("rename: {} on {name}", dir_row(size)))?;
                roots[c][s] = made;
                dirs[s][c].push(d);
                files[c].push(f);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    let mut rows: Vec<Row> = sizes
        .iter()
        .zip(dirs)
        .map(|(&n, r)| Row::from_rounds(dir_row(n), r))
        .collect();
    rows.push(Row::from_rounds(FILE_ROW, files));
    let mut notes = vec![format!(
        "each directory is made hot by {HOT_LOOKUPS} lookups of every child, then renamed \
         and back, {RENAMES} renames per round back to back; the file row renames one file \
         in the same parent as often, after every size; on LynxFS with evolution on, one \
         evolution round (default thresholds) runs between the lookups and the renames"
    )];
    for (c, name) in names.iter().enumerate() {
        if roots[c].iter().any(|&r| r > 0) {
            notes.push(format!(
                "{name}: area roots the evolution round made (splits + inherits), per size: {:?}",
                sizes.iter().zip(&roots[c]).collect::<Vec<_>>()
            ));
        }
    }
    Ok(Measured {
        unit: "us/rename",
        higher_is_better: false,
        columns: names.to_vec(),
        rows,
        notes,
        baseline: crate::tmpfs_column(names),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DirTarget;

    #[test]
    fn every_size_up_to_files_and_the_file_row_and_nothing_left() {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let opts = Options {
            files: 100,
            progress: false,
            ..Options::default()
        };
        let report = crate::run_suite("rename", &targets, &opts, None).unwrap();
        let ops: Vec<&str> = report.rows.iter().map(|r| r.op.as_str()).collect();
        assert_eq!(
            ops,
            [
                "dir of 1 child",
                "dir of 10 children",
                "dir of 100 children",
                "file"
            ]
        );
        assert_eq!(children_of(ops[2]), Some(100));
        assert_eq!(children_of("file"), None);
        for row in &report.rows {
            assert!(
                row.values[0].is_finite() && row.values[0] > 0.0,
                "{}",
                row.op
            );
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn refuses_a_root_that_already_has_rn() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(TOP)).unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let opts = Options {
            files: 10,
            progress: false,
            ..Options::default()
        };
        let err = crate::run_suite("rename", &targets, &opts, None).unwrap_err();
        assert!(err.to_string().contains("already has"), "{err:#}");
        assert!(dir.path().join(TOP).is_dir());
    }
}
