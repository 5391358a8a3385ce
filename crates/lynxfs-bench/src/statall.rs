//! The `statall` suite: stat every file of a tree by its full path, what `git status`
//! and `make` do (issue 27). The tree is generated: [`Options::files`] files (50,000 by
//! default) spread evenly over a binary tree of directories [`DEPTH`] levels deep (255
//! directories), visited depth first in name order as a git index lists them. Each
//! pass is one loop over every path, timed whole; the table shows µs per file. The
//! cold pass follows a drop of every target's caches ([`crate::cold::chill_all`]), the
//! warm one runs right after.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};

use crate::{progress_bar, Grid, Measured, Options, Target};

/// The suite's top directory in each target's root.
const TOP: &str = "st";
/// Directory levels, the top included: the deepest files are this many directories
/// down.
pub(crate) const DEPTH: usize = 8;

/// The tree: directories parents first, files in depth-first name order.
struct Tree {
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
}

impl Tree {
    fn new(files: usize) -> Self {
        let mut dirs = Vec::new();
        collect_dirs(PathBuf::from(TOP), 1, &mut dirs);
        // Directory i holds files i, i + dirs, i + 2 * dirs, ...
        let per: Vec<Vec<PathBuf>> = dirs
            .iter()
            .enumerate()
            .map(|(d, dir)| {
                (d..files)
                    .step_by(dirs.len())
                    .map(|i| dir.join(format!("f{i}")))
                    .collect()
            })
            .collect();
        Self {
            files: per.into_iter().flatten().collect(),
            dirs,
        }
    }
}

/// `dir` and, below level [`DEPTH`], its two subdirectories' trees, depth first.
fn collect_dirs(dir: PathBuf, level: usize, out: &mut Vec<PathBuf>) {
    out.push(dir.clone());
    if level < DEPTH {
        for name in ["a", "b"] {
            collect_dirs(dir.join(name), level + 1, out);
        }
    }
}

fn each(paths: &[PathBuf], mut f: impl FnMut(&Path) -> io::Result<()>) -> io::Result<()> {
    for p in paths {
        f(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
    }
    Ok(())
}

fn setup(t: &dyn Target, tree: &Tree) -> io::Result<()> {
    each(&tree.dirs, |p| t.mkdir(p))?;
    each(&tree.files, |p| t.create(p))
}

/// Removes the tree, ignoring what is missing (also after a failure).
fn scrub(t: &dyn Target, tree: &Tree) {
    for p in &tree.files {
        let _ = t.unlink(p);
    }
    for p in tree.dirs.iter().rev() {
        let _ = t.rmdir(p);
    }
}

const ROWS: &[&str] = &["stat every file (cold)", "stat every file (warm)"];

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
    let tree = Tree::new(opts.files);
    let result = measure(targets, names, opts, &tree);
    targets.iter().for_each(|t| scrub(t.as_ref(), &tree));
    let (grid, mut notes) = result?;
    notes.push(format!(
        "{} files in {} directories, {DEPTH} levels deep; every file stat'ed by its full \
         path (depth-first name order); cold: after sync, drop_caches and, on lib, the \
         LynxFS index evicted; warm: the same loop again right after; tmpfs cannot drop \
         its tree",
        tree.files.len(),
        tree.dirs.len()
    ));
    Ok(Measured {
        unit: "us/file",
        higher_is_better: false,
        columns: names.to_vec(),
        rows: grid.into_rows(),
        notes,
        baseline: crate::tmpfs_column(names),
    })
}

fn measure(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
    tree: &Tree,
) -> anyhow::Result<(Grid, Vec<String>)> {
    let mut grid = Grid::new(ROWS.to_vec(), targets.len());
    let mut cold_notes = std::collections::BTreeSet::new();
    let bar = progress_bar(
        opts,
        "statall",
        targets.len() * (1 + opts.rounds * ROWS.len()),
    );
    for (t, name) in targets.iter().zip(names) {
        bar.set_message(format!("making the tree on {name}"));
        setup(t.as_ref(), tree).with_context(|| format!("statall: the tree on {name}"))?;
        bar.inc(1);
    }
    for _ in 0..opts.rounds {
        for (row, op) in ROWS.iter().enumerate() {
            if row == 0 {
                if let Err(why) = crate::cold::chill_all(targets) {
                    cold_notes.insert(why);
                }
            }
            for (col, (t, name)) in targets.iter().zip(names).enumerate() {
                bar.set_message(format!("{op} on {name}"));
                let start = Instant::now();
                each(&tree.files, |p| t.stat(p).map(drop))
                    .with_context(|| format!("statall: {op} on {name}"))?;
                grid.push(
                    row,
                    col,
                    start.elapsed().as_secs_f64() * 1e6 / tree.files.len() as f64,
                );
                bar.inc(1);
            }
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
    fn the_tree_is_eight_levels_and_holds_every_file_once() {
        let tree = Tree::new(1000);
        assert_eq!(tree.dirs.len(), 255);
        assert_eq!(tree.files.len(), 1000);
        let deepest = tree.files.iter().map(|f| f.components().count()).max();
        assert_eq!(deepest, Some(DEPTH + 1));
        let mut unique = tree.files.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 1000);
    }

    #[test]
    fn both_rows_and_nothing_left() {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let opts = Options {
            files: 300,
            progress: false,
            ..Options::default()
        };
        let report = crate::run_suite("statall", &targets, &opts, None).unwrap();
        let ops: Vec<&str> = report.rows.iter().map(|r| r.op.as_str()).collect();
        assert_eq!(ops, ROWS);
        assert!(report.rows.iter().all(|r| r.values[0] > 0.0));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
