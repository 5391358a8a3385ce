//! The `smallfiles` suite: write [`Options::files`] files of 1 to 32 KiB each (create,
//! write, close), then read them all back (open, read, close), in one directory. The
//! sizes are drawn from the seed, the same for every target. Files/s; the notes give
//! the mean size, so MB/s follows.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};

use crate::data::splitmix;
use crate::target::{pread_exact, pwrite_all};
use crate::{progress_bar, Grid, Measured, OpenFlags, Options, Target};

/// The suite's directory in each target's root.
const DIR: &str = "smallfiles";
const MIN: usize = 1 << 10;
const MAX: usize = 32 << 10;

struct Plan {
    paths: Vec<PathBuf>,
    sizes: Vec<usize>,
    /// Every file's content is a prefix of this, shifted by the file's index so that
    /// two files do not hold the same bytes.
    src: Vec<u8>,
}

impl Plan {
    fn new(files: usize, seed: u64) -> Self {
        let mut state = seed;
        let sizes = (0..files)
            .map(|_| MIN + (splitmix(&mut state) % (MAX - MIN + 1) as u64) as usize)
            .collect();
        Self {
            paths: (0..files)
                .map(|i| Path::new(DIR).join(format!("s{i}")))
                .collect(),
            sizes,
            src: (0..MAX + 256).map(|i| (i % 253) as u8 + 1).collect(),
        }
    }

    fn content(&self, i: usize) -> &[u8] {
        let shift = i % 256;
        &self.src[shift..shift + self.sizes[i]]
    }

    fn mean_kib(&self) -> f64 {
        self.sizes.iter().sum::<usize>() as f64 / self.sizes.len() as f64 / 1024.0
    }
}

fn named<T>(p: &Path, r: io::Result<T>) -> io::Result<T> {
    r.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
}

fn write_all(t: &dyn Target, plan: &Plan) -> io::Result<()> {
    let create = OpenFlags {
        exclusive: true,
        ..OpenFlags::CREATE_TRUNCATE
    };
    for (i, p) in plan.paths.iter().enumerate() {
        let h = named(p, t.open(p, create))?;
        let w = pwrite_all(t, h, plan.content(i), 0);
        named(p, w.and(t.close(h)))?;
    }
    Ok(())
}

fn read_all(t: &dyn Target, plan: &Plan, buf: &mut [u8]) -> io::Result<()> {
    for (i, p) in plan.paths.iter().enumerate() {
        let h = named(p, t.open(p, OpenFlags::READ))?;
        let r = pread_exact(t, h, &mut buf[..plan.sizes[i]], 0);
        named(p, r.and(t.close(h)))?;
    }
    Ok(())
}

/// Reads every file back and compares (untimed): a target that loses data must not
/// pass for a fast one. Also checks that each file has exactly its size.
fn verify(t: &dyn Target, plan: &Plan, buf: &mut [u8]) -> anyhow::Result<()> {
    for (i, p) in plan.paths.iter().enumerate() {
        let size = t.stat(p)?.size;
        if size != plan.sizes[i] as u64 {
            bail!("{}: size {size}, wrote {}", p.display(), plan.sizes[i]);
        }
        let h = t.open(p, OpenFlags::READ)?;
        let r = pread_exact(t, h, &mut buf[..plan.sizes[i]], 0);
        t.close(h)?;
        r?;
        if buf[..plan.sizes[i]] != *plan.content(i) {
            bail!(
                "{}: read back different bytes than were written",
                p.display()
            );
        }
    }
    Ok(())
}

fn remove_all(t: &dyn Target, plan: &Plan) -> io::Result<()> {
    for p in &plan.paths {
        named(p, t.unlink(p))?;
    }
    t.rmdir(Path::new(DIR))
}

fn scrub(t: &dyn Target, plan: &Plan) {
    for p in &plan.paths {
        let _ = t.unlink(p);
    }
    let _ = t.rmdir(Path::new(DIR));
}

pub(crate) fn run(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
) -> anyhow::Result<Measured> {
    crate::mdtest::check_free(targets, names, DIR)?;
    let plan = Plan::new(opts.files, opts.seed);
    let mut buf = vec![0u8; MAX];
    let mut grid = Grid::new(vec!["write", "read"], targets.len());
    let bar = progress_bar(opts, "smallfiles", opts.rounds * 2 * targets.len());
    for _ in 0..opts.rounds {
        let r = round(targets, names, &plan, &mut buf, &mut grid, &bar);
        if r.is_err() {
            targets.iter().for_each(|t| scrub(t.as_ref(), &plan));
        }
        r?;
    }
    bar.finish_and_clear();
    Ok(Measured {
        unit: "files/s",
        higher_is_better: true,
        columns: names.to_vec(),
        rows: grid.into_rows(),
        notes: vec![format!(
            "write = create+write+close, read = open+read+close; {} files of {}..{} KiB, \
             mean {:.1} KiB (MB/s = files/s x {:.4})",
            opts.files,
            MIN >> 10,
            MAX >> 10,
            plan.mean_kib(),
            plan.mean_kib() * 1024.0 / 1e6
        )],
        baseline: crate::tmpfs_column(names),
    })
}

fn round(
    targets: &[Box<dyn Target>],
    names: &[String],
    plan: &Plan,
    buf: &mut [u8],
    grid: &mut Grid,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    for (t, name) in targets.iter().zip(names) {
        t.mkdir(Path::new(DIR))
            .with_context(|| format!("smallfiles: mkdir on {name}"))?;
    }
    let n = plan.paths.len() as f64;
    for (col, (t, name)) in targets.iter().zip(names).enumerate() {
        bar.set_message(format!("write on {name}"));
        let start = Instant::now();
        write_all(t.as_ref(), plan).with_context(|| format!("smallfiles: write on {name}"))?;
        grid.push(0, col, n / start.elapsed().as_secs_f64());
        bar.inc(1);
    }
    for (col, (t, name)) in targets.iter().zip(names).enumerate() {
        bar.set_message(format!("read on {name}"));
        let start = Instant::now();
        read_all(t.as_ref(), plan, buf).with_context(|| format!("smallfiles: read on {name}"))?;
        grid.push(1, col, n / start.elapsed().as_secs_f64());
        bar.inc(1);
    }
    for (t, name) in targets.iter().zip(names) {
        verify(t.as_ref(), plan, buf).with_context(|| format!("smallfiles: verify on {name}"))?;
        remove_all(t.as_ref(), plan).with_context(|| format!("smallfiles: clean-up on {name}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DirTarget;

    #[test]
    fn sizes_span_1_to_32_kib_and_are_the_same_for_a_seed() {
        let a = Plan::new(2000, 3);
        assert!(a.sizes.iter().all(|&s| (MIN..=MAX).contains(&s)));
        assert!(a.sizes.iter().any(|&s| s < 4 << 10) && a.sizes.iter().any(|&s| s > 28 << 10));
        assert_eq!(a.sizes, Plan::new(2000, 3).sizes);
        assert_ne!(
            a.content(0),
            a.content(1)[..a.sizes[0].min(a.sizes[1])].as_ref()
        );
    }

    #[test]
    fn writes_reads_verifies_and_removes() {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let opts = Options {
            files: 30,
            progress: false,
            ..Options::default()
        };
        let report = crate::run_suite("smallfiles", &targets, &opts, None).unwrap();
        assert_eq!(report.rows.len(), 2);
        assert!(report.rows.iter().all(|r| r.values[0] > 0.0));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn verify_catches_a_wrong_byte() {
        let dir = tempfile::tempdir().unwrap();
        let t = DirTarget::new(dir.path(), "tmp").unwrap();
        let plan = Plan::new(3, 1);
        t.mkdir(Path::new(DIR)).unwrap();
        write_all(&t, &plan).unwrap();
        let mut buf = vec![0u8; MAX];
        verify(&t, &plan, &mut buf).unwrap();
        let victim = dir.path().join(DIR).join("s1");
        let mut bytes = std::fs::read(&victim).unwrap();
        bytes[7] ^= 0xff;
        std::fs::write(&victim, bytes).unwrap();
        assert!(verify(&t, &plan, &mut buf).is_err());
    }
}
