//! The `personalities` suite: workloads modelled on Filebench's personalities, run
//! through the [`Target`] trait so that every target (the library included) runs the
//! same operations. Operations per second, counted as Filebench counts them (every
//! flowop: open, read whole file, append, fsync, close, delete, stat, listdir).
//!
//! Parameters are Filebench's (`workloads/*.f`): file counts, mean directory width,
//! mean file size (gamma distributed, shape 1.5, as Filebench's `cvar` sizes), I/O size
//! 1 MiB for whole-file reads and writes, mean append 16 KiB (appends are uniform in
//! 1 B..16 KiB, as `appendfilerand`), 80 % of the files preallocated. What is scaled
//! down for a 2-core machine is in [`SPECS`] and the report's notes: fewer files for
//! fileserver, createfiles and listdirs, two rows per personality (2 threads and
//! [`Options::max_threads`], webserver Filebench's 100 from 32 on: see
//! [`thread_counts`]) instead of Filebench's 16 to 100, and a fixed number of flow iterations
//! ([`Options::files`] in all, shared by the threads) instead of 60 s.
//!
//! Each thread owns every T-th file of the fileset (Filebench's threads share one
//! fileset and pick at random among all files; partitioning keeps the bookkeeping
//! lock-free and the choices still random within a thread's share).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::Context;

use crate::data::splitmix;
use crate::mdtest::timed_parallel;
use crate::target::pwrite_all;
use crate::{progress_bar, Handle, Measured, OpenFlags, Options, Row, Target};

/// The I/O size of whole-file reads and writes (Filebench's `iosize=1m`).
const IOSIZE: usize = 1 << 20;
/// Appends are uniform in 1..=this (Filebench's `meanappendsize=16k` as `iosize` of
/// `appendfilerand`).
const APPEND: u64 = 16 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Varmail,
    Fileserver,
    Webserver,
    Createfiles,
    Listdirs,
    Mongo,
}

/// One personality: Filebench's parameters and what this suite uses.
struct Spec {
    name: &'static str,
    flow: Flow,
    /// Filebench's `nfiles`.
    fb_files: usize,
    /// What this suite creates.
    files: usize,
    /// `meandirwidth`.
    width: usize,
    /// Mean file size in bytes (`filesize`).
    mean_size: u64,
    /// Filebench's `nthreads`.
    fb_threads: usize,
    /// Percentage of the fileset created before the clock starts (`prealloc=80`).
    prealloc: u64,
}

const SPECS: &[Spec] = &[
    Spec {
        name: "varmail",
        flow: Flow::Varmail,
        fb_files: 1000,
        files: 1000,
        width: 1_000_000,
        mean_size: 16 << 10,
        fb_threads: 16,
        prealloc: 80,
    },
    Spec {
        name: "fileserver",
        flow: Flow::Fileserver,
        fb_files: 10_000,
        files: 2000,
        width: 20,
        mean_size: 128 << 10,
        fb_threads: 50,
        prealloc: 80,
    },
    Spec {
        name: "webserver",
        flow: Flow::Webserver,
        fb_files: 1000,
        files: 1000,
        width: 20,
        mean_size: 16 << 10,
        fb_threads: 100,
        prealloc: 80,
    },
    Spec {
        name: "createfiles",
        flow: Flow::Createfiles,
        fb_files: 50_000,
        files: 10_000,
        width: 100,
        mean_size: 16 << 10,
        fb_threads: 16,
        prealloc: 0,
    },
    Spec {
        name: "listdirs",
        flow: Flow::Listdirs,
        fb_files: 50_000,
        files: 10_000,
        width: 5,
        mean_size: 0,
        fb_threads: 16,
        prealloc: 100,
    },
    // Two filesets of `fb_files` each (`postset`, `postsetdel`): the first half of
    // `files` is postset, the second postsetdel. The run ends when postsetdel is empty
    // (Filebench's `mode quit firstdone`).
    Spec {
        name: "mongo",
        flow: Flow::Mongo,
        fb_files: 1000,
        files: 2000,
        width: 20,
        mean_size: 16 << 10,
        fb_threads: 1,
        prealloc: 100,
    },
];

/// The suite's directory in each target's root.
const ROOT: &str = "personality";

/// A file size from a gamma distribution of shape 1.5 and the given mean (Filebench's
/// `cvar-gamma` default), at most 8 times the mean; 0 for a mean of 0.
pub(crate) fn gamma_size(rng: &mut u64, mean: u64) -> u64 {
    if mean == 0 {
        return 0;
    }
    let u = |rng: &mut u64| ((splitmix(rng) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    // Gamma(1.5, θ) = θ (Exp(1) + Gamma(0.5, 1)), and Gamma(0.5, 1) = Z²/2.
    let e = -u(rng).ln();
    let z = (-2.0 * u(rng).ln()).sqrt() * (std::f64::consts::TAU * u(rng)).cos();
    let theta = mean as f64 / 1.5;
    ((theta * (e + z * z / 2.0)) as u64).clamp(1, 8 * mean)
}

fn uniform(rng: &mut u64, lo: u64, hi: u64) -> u64 {
    lo + splitmix(rng) % (hi - lo + 1)
}

/// The fileset: directories (parents first) and files, Filebench-style: leaf
/// directories of `width` files under a tree of directories `width` wide.
struct Fileset {
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
    log: PathBuf,
}

impl Fileset {
    fn new(root: &Path, files: usize, width: usize) -> Self {
        let width = width.max(2);
        let leaves = files.div_ceil(width).max(1);
        let mut depth = 0;
        let mut span = 1usize;
        while span < leaves {
            span = span.saturating_mul(width);
            depth += 1;
        }
        let mut dirs = vec![root.to_path_buf()];
        let mut leaf_paths = Vec::with_capacity(leaves);
        for leaf in 0..leaves {
            let mut p = root.to_path_buf();
            let mut rest = leaf;
            let mut digits = vec![0; depth];
            for d in digits.iter_mut().rev() {
                *d = rest % width;
                rest /= width;
            }
            for (level, d) in digits.iter().enumerate() {
                p.push(format!("d{d}"));
                // A directory is new when every deeper digit is 0.
                if digits[level + 1..].iter().all(|&x| x == 0) {
                    dirs.push(p.clone());
                }
            }
            leaf_paths.push(p);
        }
        let files = (0..files)
            .map(|i| leaf_paths[i / width].join(format!("f{i}")))
            .collect();
        Self {
            dirs,
            files,
            log: root.join("log"),
        }
    }
}

/// One thread's share of the fileset and its random stream.
struct Worker {
    rng: u64,
    present: Vec<usize>,
    absent: Vec<usize>,
    /// mongo's `postsetdel` files still to delete.
    doomed: Vec<usize>,
    /// Bytes in each file this thread owns (indexed by file number).
    sizes: Vec<u64>,
    log: Option<Handle>,
    ops: u64,
    flows: usize,
}

fn take(list: &mut Vec<usize>, rng: &mut u64) -> Option<usize> {
    if list.is_empty() {
        return None;
    }
    let k = (splitmix(rng) % list.len() as u64) as usize;
    Some(list.swap_remove(k))
}

fn peek(list: &[usize], rng: &mut u64) -> Option<usize> {
    if list.is_empty() {
        return None;
    }
    Some(list[(splitmix(rng) % list.len() as u64) as usize])
}

fn named<T>(p: &Path, r: io::Result<T>) -> io::Result<T> {
    r.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
}

const CREATE: OpenFlags = OpenFlags {
    read: true,
    write: true,
    create: true,
    exclusive: true,
    truncate: false,
};

/// Writes `size` bytes from 0 in `IOSIZE` pieces.
fn write_whole(t: &dyn Target, h: Handle, size: u64, src: &[u8]) -> io::Result<()> {
    let mut off = 0;
    while off < size {
        let n = (size - off).min(IOSIZE as u64) as usize;
        pwrite_all(t, h, &src[..n], off)?;
        off += n as u64;
    }
    Ok(())
}

/// Reads until end of file in `IOSIZE` pieces; returns the bytes read.
fn read_whole(t: &dyn Target, h: Handle, buf: &mut [u8]) -> io::Result<u64> {
    let mut off = 0;
    loop {
        let n = t.pread(h, buf, off)?;
        if n == 0 {
            return Ok(off);
        }
        off += n as u64;
    }
}

struct Ctx<'a> {
    set: &'a Fileset,
    spec: &'a Spec,
    src: &'a [u8],
    log_end: &'a AtomicU64,
}

/// Appends a random amount (1..=16 KiB) at the end of file `i`.
fn append(t: &dyn Target, h: Handle, w: &mut Worker, i: usize, c: &Ctx<'_>) -> io::Result<()> {
    let n = uniform(&mut w.rng, 1, APPEND);
    pwrite_all(t, h, &c.src[..n as usize], w.sizes[i])?;
    w.sizes[i] += n;
    Ok(())
}

/// Opens a random present file, appends to it and closes it (3 flowops).
fn append_random(t: &dyn Target, w: &mut Worker, c: &Ctx<'_>) -> io::Result<()> {
    if let Some(i) = peek(&w.present, &mut w.rng) {
        let p = &c.set.files[i];
        let h = named(p, t.open(p, OpenFlags::READ_WRITE))?;
        append(t, h, w, i, c)?;
        t.close(h)?;
        w.ops += 3;
    }
    Ok(())
}

/// Opens a random present file, reads it whole and closes it (3 flowops).
fn read_random(t: &dyn Target, w: &mut Worker, c: &Ctx<'_>, buf: &mut [u8]) -> io::Result<()> {
    if let Some(i) = peek(&w.present, &mut w.rng) {
        let p = &c.set.files[i];
        let h = named(p, t.open(p, OpenFlags::READ))?;
        read_whole(t, h, buf)?;
        t.close(h)?;
        w.ops += 3;
    }
    Ok(())
}

/// One iteration of the personality's flow; returns false when there is nothing left
/// to do (createfiles with a full fileset).
fn flow(t: &dyn Target, w: &mut Worker, c: &Ctx<'_>, buf: &mut [u8]) -> io::Result<bool> {
    let files = &c.set.files;
    match c.spec.flow {
        Flow::Varmail => {
            if let Some(i) = take(&mut w.present, &mut w.rng) {
                named(&files[i], t.unlink(&files[i]))?;
                w.absent.push(i);
                w.ops += 1;
            }
            if let Some(i) = take(&mut w.absent, &mut w.rng) {
                let p = &files[i];
                let h = named(p, t.open(p, CREATE))?;
                w.sizes[i] = 0;
                w.present.push(i);
                append(t, h, w, i, c)?;
                t.fsync(h)?;
                t.close(h)?;
                w.ops += 4;
            }
            if let Some(i) = peek(&w.present, &mut w.rng) {
                let p = &files[i];
                let h = named(p, t.open(p, OpenFlags::READ_WRITE))?;
                read_whole(t, h, buf)?;
                append(t, h, w, i, c)?;
                t.fsync(h)?;
                t.close(h)?;
                w.ops += 5;
            }
            read_random(t, w, c, buf)?;
        }
        Flow::Fileserver => {
            if let Some(i) = take(&mut w.absent, &mut w.rng) {
                let p = &files[i];
                let h = named(p, t.open(p, CREATE))?;
                let size = gamma_size(&mut w.rng, c.spec.mean_size);
                write_whole(t, h, size, c.src)?;
                w.sizes[i] = size;
                w.present.push(i);
                t.close(h)?;
                w.ops += 3;
            }
            append_random(t, w, c)?;
            read_random(t, w, c, buf)?;
            if let Some(i) = take(&mut w.present, &mut w.rng) {
                named(&files[i], t.unlink(&files[i]))?;
                w.absent.push(i);
                w.ops += 1;
            }
            if let Some(i) = peek(&w.present, &mut w.rng) {
                named(&files[i], t.stat(&files[i]))?;
                w.ops += 1;
            }
        }
        Flow::Webserver => {
            for _ in 0..10 {
                read_random(t, w, c, buf)?;
            }
            if let Some(h) = w.log {
                let n = uniform(&mut w.rng, 1, APPEND);
                let off = c.log_end.fetch_add(n, Ordering::Relaxed);
                pwrite_all(t, h, &c.src[..n as usize], off)?;
                w.ops += 1;
            }
        }
        Flow::Createfiles => {
            let Some(i) = take(&mut w.absent, &mut w.rng) else {
                return Ok(false);
            };
            let p = &files[i];
            let h = named(p, t.open(p, CREATE))?;
            let size = gamma_size(&mut w.rng, c.spec.mean_size);
            write_whole(t, h, size, c.src)?;
            w.sizes[i] = size;
            w.present.push(i);
            t.close(h)?;
            w.ops += 3;
        }
        Flow::Listdirs => {
            let k = (splitmix(&mut w.rng) % c.set.dirs.len() as u64) as usize;
            let d = &c.set.dirs[k];
            named(d, t.readdir(d))?;
            w.ops += 1;
        }
        Flow::Mongo => {
            let Some(j) = take(&mut w.doomed, &mut w.rng) else {
                return Ok(false);
            };
            append_random(t, w, c)?;
            read_random(t, w, c, buf)?;
            named(&files[j], t.unlink(&files[j]))?;
            w.ops += 1;
        }
    }
    Ok(true)
}

/// Creates the directories, the log and the preallocated files; returns the workers.
fn setup(
    t: &dyn Target,
    set: &Fileset,
    spec: &Spec,
    threads: usize,
    flows: usize,
    seed: u64,
    src: &[u8],
) -> io::Result<Vec<Mutex<Worker>>> {
    for d in &set.dirs {
        named(d, t.mkdir(d))?;
    }
    let mut rng = seed;
    let mut workers: Vec<Worker> = (0..threads)
        .map(|k| Worker {
            rng: seed ^ (k as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            present: Vec::new(),
            absent: Vec::new(),
            doomed: Vec::new(),
            sizes: vec![0; set.files.len()],
            log: None,
            ops: 0,
            flows: flows / threads + usize::from(k < flows % threads),
        })
        .collect();
    for (i, p) in set.files.iter().enumerate() {
        let w = &mut workers[i % threads];
        if uniform(&mut rng, 1, 100) <= spec.prealloc {
            let h = named(p, t.open(p, CREATE))?;
            let size = gamma_size(&mut rng, spec.mean_size);
            let r = write_whole(t, h, size, src);
            named(p, r.and(t.close(h)))?;
            w.sizes[i] = size;
            if spec.flow == Flow::Mongo && i >= set.files.len() / 2 {
                w.doomed.push(i);
            } else {
                w.present.push(i);
            }
        } else {
            w.absent.push(i);
        }
    }
    if spec.flow == Flow::Webserver {
        let h = named(&set.log, t.open(&set.log, OpenFlags::CREATE_TRUNCATE))?;
        t.close(h)?;
        for w in &mut workers {
            w.log = Some(named(&set.log, t.open(&set.log, OpenFlags::READ_WRITE))?);
        }
    }
    Ok(workers.into_iter().map(Mutex::new).collect())
}

/// Checks (untimed) that every file a worker believes present has the size it wrote:
/// a target that loses appends must not pass for a fast one.
fn verify(t: &dyn Target, set: &Fileset, workers: &[Mutex<Worker>]) -> anyhow::Result<()> {
    for w in workers {
        let w = w.lock().unwrap_or_else(|p| p.into_inner());
        for &i in &w.present {
            let size = t.stat(&set.files[i])?.size;
            anyhow::ensure!(
                size == w.sizes[i],
                "{}: size {size}, expected {}",
                set.files[i].display(),
                w.sizes[i]
            );
        }
    }
    Ok(())
}

/// Removes everything the personality made, ignoring what is already gone.
fn teardown(t: &dyn Target, set: &Fileset, workers: &[Mutex<Worker>]) -> io::Result<()> {
    for w in workers {
        let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = w.log.take() {
            t.close(h)?;
        }
    }
    for p in set.files.iter().chain([&set.log]) {
        match t.unlink(p) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            r => named(p, r)?,
        }
    }
    for d in set.dirs.iter().rev() {
        named(d, t.rmdir(d))?;
    }
    Ok(())
}

/// Runs one personality on one target: setup, timed flows, verify, teardown. Ops/s.
fn measure(t: &dyn Target, spec: &Spec, threads: usize, opts: &Options) -> anyhow::Result<f64> {
    let set = Fileset::new(Path::new(ROOT), spec.files, spec.width);
    let src: Vec<u8> = (0..IOSIZE).map(|i| (i % 251) as u8).collect();
    let flows = if matches!(spec.flow, Flow::Createfiles | Flow::Mongo) {
        usize::MAX / 2
    } else {
        opts.files
    };
    let workers = match setup(t, &set, spec, threads, flows, opts.seed, &src) {
        Ok(w) => w,
        Err(e) => {
            let _ = teardown(t, &set, &[]);
            return Err(e).context("setup");
        }
    };
    let log_end = AtomicU64::new(0);
    let ctx = Ctx {
        set: &set,
        spec,
        src: &src,
        log_end: &log_end,
    };
    let label = format!("{} on {}", row_name(spec, threads), t.name());
    mark(opts, &format!("start {label}"));
    let timed = timed_parallel(t, &workers, |t, w| {
        let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
        let mut buf = vec![0u8; IOSIZE];
        for _ in 0..w.flows {
            if !flow(t, &mut w, &ctx, &mut buf)? {
                break;
            }
        }
        Ok(())
    });
    let ops: u64 = workers
        .iter()
        .map(|w| w.lock().unwrap_or_else(|p| p.into_inner()).ops)
        .sum();
    mark(opts, &format!("end {label} ops={ops}"));
    let checked = timed
        .map_err(anyhow::Error::from)
        .and_then(|secs| verify(t, &set, &workers).map(|()| secs));
    let removed = teardown(t, &set, &workers).context("teardown");
    let secs = checked?;
    removed?;
    Ok(ops as f64 / secs)
}

/// Writes `fusefloor WHAT` to [`Options::mark`], if set. A failed write is reported
/// and the run goes on: the marks only split a trace.
fn mark(opts: &Options, what: &str) {
    if let Some(path) = &opts.mark {
        if let Err(e) = std::fs::write(path, format!("fusefloor {what}\n")) {
            eprintln!("lynxfs-bench: writing the mark to {}: {e}", path.display());
        }
    }
}

/// varmail alone on one target with `threads` threads, [`Options::files`] flows (the
/// `hybrid-fsync` suite's mail server at several thread counts). Ops/s.
pub(crate) fn varmail(t: &dyn Target, threads: usize, opts: &Options) -> anyhow::Result<f64> {
    let spec = SPECS
        .iter()
        .find(|s| s.flow == Flow::Varmail)
        .expect("varmail is one of the personalities");
    measure(t, spec, threads, opts)
}

/// The thread counts a personality runs with: 2 (Filebench's counts scaled to the
/// machine's cores, as the suite ran before) and `--max-threads`, the count that shows
/// how waits behave with many more threads than CPUs. webserver's second count is
/// Filebench's own 100 once `--max-threads` is 32 or more.
fn thread_counts(spec: &Spec, max: usize) -> Vec<usize> {
    let max = max.max(1);
    let high = if spec.flow == Flow::Webserver && max >= 32 {
        max.max(spec.fb_threads)
    } else {
        max
    };
    let mut counts = vec![2.min(max), high];
    counts.dedup();
    counts
}

/// A row's name: the personality and its thread count.
fn row_name(spec: &Spec, threads: usize) -> String {
    format!("{} {threads}t", spec.name)
}

/// The rows: one per personality and thread count, each the median of every round but
/// the first; with more than one round, the first round's values follow in rows of
/// their own (`... round 1`), so a first-round stall neither hides in the median nor
/// skews it.
fn rows(names: Vec<String>, cells: Vec<Vec<Vec<f64>>>) -> Vec<Row> {
    let mut later = Vec::with_capacity(names.len());
    let mut first = Vec::new();
    for (name, columns) in names.into_iter().zip(cells) {
        if columns.iter().all(|c| c.len() > 1) {
            let (heads, tails): (Vec<_>, Vec<_>) = columns
                .into_iter()
                .map(|mut c| {
                    let tail = c.split_off(1);
                    (c, tail)
                })
                .unzip();
            first.push(Row::from_rounds(format!("{name} round 1"), heads));
            later.push(Row::from_rounds(name, tails));
        } else {
            later.push(Row::from_rounds(name, columns));
        }
    }
    later.extend(first);
    later
}

pub(crate) fn run(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
) -> anyhow::Result<Measured> {
    crate::mdtest::check_free(targets, names, ROOT)?;
    let runs: Vec<(&Spec, usize)> = SPECS
        .iter()
        .flat_map(|s| {
            thread_counts(s, opts.max_threads)
                .into_iter()
                .map(move |n| (s, n))
        })
        .collect();
    let mut cells = vec![vec![Vec::new(); targets.len()]; runs.len()];
    let bar = progress_bar(
        opts,
        "personalities",
        opts.rounds * runs.len() * targets.len(),
    );
    let mut notes = Vec::new();
    for _ in 0..opts.rounds {
        for (row, &(spec, threads)) in runs.iter().enumerate() {
            for (col, (t, name)) in targets.iter().zip(names).enumerate() {
                bar.set_message(format!("{} on {name}", row_name(spec, threads)));
                bar.inc(1);
                let v = measure(t.as_ref(), spec, threads, opts).unwrap_or_else(|e| {
                    notes.push(format!(
                        "{} failed on {name}: {e:#}",
                        row_name(spec, threads)
                    ));
                    f64::NAN
                });
                cells[row][col].push(v);
            }
        }
    }
    bar.finish_and_clear();
    for s in SPECS {
        let threads = thread_counts(s, opts.max_threads)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" and ");
        let flows = match s.flow {
            Flow::Createfiles => "until the fileset is full".to_string(),
            Flow::Mongo => "until postsetdel is empty".to_string(),
            _ => format!("{} flow iterations", opts.files),
        };
        let files = if s.flow == Flow::Mongo {
            format!("2 x {} files (postset, postsetdel)", s.files / 2)
        } else {
            format!("{} files", s.files)
        };
        notes.push(format!(
            "{}: {files} (Filebench nfiles {}), dir width {}, mean size {} KiB, {threads} \
             threads (Filebench {}), {}% preallocated, {flows}",
            s.name,
            s.fb_files,
            s.width,
            s.mean_size >> 10,
            s.fb_threads,
            s.prealloc
        ));
    }
    notes.push(
        "ops = Filebench flowops (open, read whole file, write whole file, append, fsync, \
         close, delete, stat, listdir); whole-file I/O in 1 MiB pieces, appends 1 B..16 KiB; \
         varmail fsyncs as Filebench's does"
            .into(),
    );
    if opts.rounds > 1 {
        notes.push(format!(
            "each row is the median of rounds 2-{} (each round runs every row on every \
             target in turn); the rows `... round 1` are the first round alone",
            opts.rounds
        ));
    }
    Ok(Measured {
        unit: "ops/s",
        higher_is_better: true,
        columns: names.to_vec(),
        rows: rows(runs.iter().map(|&(s, n)| row_name(s, n)).collect(), cells),
        notes,
        baseline: crate::tmpfs_column(names),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DirTarget, LibTarget};

    #[test]
    fn gamma_sizes_have_the_asked_mean() {
        let mut rng = 9;
        let n = 20_000;
        let sum: u64 = (0..n).map(|_| gamma_size(&mut rng, 16 << 10)).sum();
        let mean = sum as f64 / n as f64;
        assert!((mean / 16384.0 - 1.0).abs() < 0.05, "mean {mean}");
        assert_eq!(gamma_size(&mut rng, 0), 0);
    }

    #[test]
    fn fileset_tree_has_width_files_per_leaf_and_parents_first() {
        let set = Fileset::new(Path::new("r"), 50, 5);
        assert_eq!(set.files.len(), 50);
        // 10 leaves of 5 files under a tree 5 wide: root, d0 and d1 at depth 1, then
        // 10 leaves at depth 2.
        assert_eq!(set.dirs.len(), 1 + 2 + 10);
        assert_eq!(set.files[0], Path::new("r/d0/d0/f0"));
        assert_eq!(set.files[49], Path::new("r/d1/d4/f49"));
        for (i, d) in set.dirs.iter().enumerate() {
            if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
                assert!(set.dirs[..i].iter().any(|x| x == parent), "{}", d.display());
            }
        }
        let flat = Fileset::new(Path::new("r"), 10, 1_000_000);
        assert_eq!(flat.dirs, [PathBuf::from("r")]);
        assert_eq!(flat.files[3], Path::new("r/f3"));
    }

    #[test]
    fn each_personality_runs_with_2_threads_and_the_most() {
        let web = SPECS.iter().find(|s| s.flow == Flow::Webserver).unwrap();
        assert_eq!(thread_counts(&SPECS[0], 32), [2, 32]);
        assert_eq!(thread_counts(&SPECS[0], 2), [2]);
        assert_eq!(thread_counts(&SPECS[0], 1), [1]);
        assert_eq!(thread_counts(web, 8), [2, 8]);
        assert_eq!(thread_counts(web, 32), [2, 100]);
        assert_eq!(thread_counts(web, 200), [2, 200]);
    }

    #[test]
    fn the_first_round_is_a_row_of_its_own() {
        let cells = vec![vec![vec![9.0, 1.0, 2.0, 3.0], vec![8.0, 4.0, 5.0, 6.0]]];
        let r = rows(vec!["varmail 2t".into()], cells);
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].op.as_str(), r[0].values.clone()),
            ("varmail 2t", vec![2.0, 5.0])
        );
        assert_eq!(
            (r[1].op.as_str(), r[1].values.clone()),
            ("varmail 2t round 1", vec![9.0, 8.0])
        );
        let one = rows(vec!["x 2t".into()], vec![vec![vec![7.0]]]);
        assert_eq!((one.len(), one[0].values.clone()), (1, vec![7.0]));
    }

    #[test]
    fn every_personality_runs_verifies_and_cleans_up_on_lib_and_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let lib = LibTarget::create(&{
            let mut o = lynxfs::MkfsOptions::new(1 << 30);
            o.inodes = Some(1 << 15);
            o
        })
        .unwrap();
        let targets: Vec<Box<dyn Target>> = vec![
            Box::new(lib),
            Box::new(DirTarget::new(dir.path(), "tmp").unwrap()),
        ];
        let opts = Options {
            files: 40,
            max_threads: 2,
            progress: false,
            ..Options::default()
        };
        let r = crate::run_suite("personalities", &targets, &opts, None).unwrap();
        assert!(
            !r.notes.iter().any(|n| n.contains("failed")),
            "{:?}",
            r.notes
        );
        assert_eq!(r.rows.len(), SPECS.len());
        assert!(r.rows.iter().all(|row| row.values.iter().all(|v| *v > 0.0)));
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
        assert!(targets[0].readdir(Path::new("")).unwrap().is_empty());
    }
}
