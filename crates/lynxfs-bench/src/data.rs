//! The `data` suite: throughput of reads and writes on one file, next to `memcpy`
//! between two DRAM buffers as the ceiling any file system could reach.
//!
//! Every target gets the same file size, block sizes and random order. Each operation
//! covers the whole file once (random ones visit every block once, in a shuffled
//! order), so MB/s is the file size over the loop's time. The last row has two threads
//! overwrite two such files at once: MB/s is both files' size over the time.

use std::hint::black_box;
use std::io;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::target::{pread_exact, pwrite_all};
use crate::{progress_bar, Grid, Handle, Measured, OpenFlags, Options, Target};

/// The file's name in each target's root.
const FILE: &str = "lynxfs-bench.data";

/// The second thread's file in the two-thread row.
const FILE2: &str = "lynxfs-bench.data2";

/// The last row: two threads overwriting two files at once (64 KiB blocks, the whole
/// of both files), MB/s of both together; compare with "seq write 64K".
const TWO_THREADS: &str = "2 threads, 2 files";

const TWO_THREAD_BLOCK: usize = 64 << 10;

/// The largest block; the file size must be a multiple of it.
pub(crate) const MAX_BLOCK: u64 = 1 << 20;

const KIB4: usize = 4 << 10;
/// A page of memory: the alignment of a file's data in the memcpy column.
const PAGE: usize = 4 << 10;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Read,
    Write,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    Sequential,
    Random,
}

/// One timed operation over the whole file.
struct Op {
    name: &'static str,
    dir: Dir,
    order: Order,
    block: usize,
}

/// In order. The first grows the freshly truncated file, so it measures allocation;
/// the later writes overwrite blocks that exist.
const OPS: &[Op] = &[
    Op {
        name: "append 4K",
        dir: Dir::Write,
        order: Order::Sequential,
        block: KIB4,
    },
    Op {
        name: "seq write 4K",
        dir: Dir::Write,
        order: Order::Sequential,
        block: KIB4,
    },
    Op {
        name: "rand write 4K",
        dir: Dir::Write,
        order: Order::Random,
        block: KIB4,
    },
    Op {
        name: "seq write 64K",
        dir: Dir::Write,
        order: Order::Sequential,
        block: 64 << 10,
    },
    Op {
        name: "seq write 1M",
        dir: Dir::Write,
        order: Order::Sequential,
        block: 1 << 20,
    },
    Op {
        name: "seq read 4K",
        dir: Dir::Read,
        order: Order::Sequential,
        block: KIB4,
    },
    Op {
        name: "rand read 4K",
        dir: Dir::Read,
        order: Order::Random,
        block: KIB4,
    },
];

/// Buffers and offsets shared by every column, made before any clock starts.
struct Plan {
    size: u64,
    /// Source of every write: a non-zero pattern, so no file system can treat it as a
    /// hole.
    src: Vec<u8>,
    /// Offsets of the random 4 KiB operations: each block once, shuffled.
    random: Vec<u64>,
}

impl Plan {
    fn new(size: u64, seed: u64) -> Self {
        let src = (0..MAX_BLOCK as usize)
            .map(|i| (i % 251) as u8 + 1)
            .collect();
        let mut random: Vec<u64> = (0..size / KIB4 as u64).map(|b| b * KIB4 as u64).collect();
        shuffle(&mut random, seed);
        Self { size, src, random }
    }

    /// The offsets `op` visits, in order.
    fn offsets<'a>(&'a self, op: &Op) -> Box<dyn Iterator<Item = u64> + 'a> {
        match op.order {
            Order::Sequential => Box::new((0..self.size).step_by(op.block)),
            Order::Random => Box::new(self.random.iter().copied()),
        }
    }
}

/// splitmix64: the next pseudo-random number from `state`, deterministic for a seed.
pub(crate) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fisher–Yates with [`splitmix`]: deterministic for a seed, and no dependency.
fn shuffle(v: &mut [u64], seed: u64) {
    let mut state = seed;
    for i in (1..v.len()).rev() {
        let j = (splitmix(&mut state) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// Runs `op` over the whole file on a target.
fn run_target(t: &dyn Target, h: Handle, plan: &Plan, op: &Op, buf: &mut [u8]) -> io::Result<()> {
    let src = &plan.src[..op.block];
    for off in plan.offsets(op) {
        match op.dir {
            Dir::Write => pwrite_all(t, h, src, off)?,
            Dir::Read => pread_exact(t, h, &mut buf[..op.block], off)?,
        }
    }
    Ok(())
}

/// The same bytes as [`run_target`], copied between DRAM buffers: `mem` plays the
/// file.
fn run_memcpy(mem: &mut [u8], plan: &Plan, op: &Op, buf: &mut [u8]) {
    let src = &plan.src[..op.block];
    for off in plan.offsets(op) {
        let at = off as usize..off as usize + op.block;
        match op.dir {
            Dir::Write => mem[at].copy_from_slice(src),
            Dir::Read => buf[..op.block].copy_from_slice(&mem[at]),
        }
        // Keeps the copy from being optimised away: its result is "used".
        black_box(&mut *mem);
        black_box(&mut *buf);
    }
}

/// Opens every target's file, fresh and empty, for one round.
fn open_all(
    targets: &[Box<dyn Target>],
    names: &[String],
    file: &str,
) -> anyhow::Result<Vec<Handle>> {
    let mut handles = Vec::with_capacity(targets.len());
    for (t, name) in targets.iter().zip(names) {
        match t.open(Path::new(file), OpenFlags::CREATE_TRUNCATE) {
            Ok(h) => handles.push(h),
            Err(e) => {
                // The open error is the one worth reporting.
                let _ = close_all(targets, &handles, file);
                return Err(e).with_context(|| format!("data: open {file} on {name}"));
            }
        }
    }
    Ok(handles)
}

/// Closes and removes the files of the first `handles.len()` targets, returning the
/// first error but trying every target.
fn close_all(targets: &[Box<dyn Target>], handles: &[Handle], file: &str) -> io::Result<()> {
    let mut first = Ok(());
    for (t, &h) in targets.iter().zip(handles) {
        let r = t.close(h).and_then(|()| t.unlink(Path::new(file)));
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Refuses to start if a target already has [`FILE`] or [`FILE2`]: it would be
/// truncated.
fn check_free(targets: &[Box<dyn Target>], names: &[String]) -> anyhow::Result<()> {
    for (t, name) in targets.iter().zip(names) {
        for file in [FILE, FILE2] {
            match t.stat(Path::new(file)) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Ok(_) => {
                    bail!("target {name} already has {file:?} in its root; use an empty directory")
                }
                Err(e) => return Err(e).with_context(|| format!("target {name}: stat {file}")),
            }
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
    let plan = Plan::new(opts.file_size, opts.seed);
    let mut mem_store = page_aligned_store(plan.size as usize);
    let mut mem2_store = page_aligned_store(plan.size as usize);
    let mem = page_aligned(&mut mem_store, plan.size as usize);
    let mem2 = page_aligned(&mut mem2_store, plan.size as usize);
    // Touch every page now, so the memcpy column does not pay the page faults.
    mem.fill(0xa5);
    mem2.fill(0xa5);
    let mut buf = vec![0u8; MAX_BLOCK as usize];
    let rows: Vec<&str> = OPS.iter().map(|o| o.name).chain([TWO_THREADS]).collect();
    let bar = progress_bar(opts, "data", opts.rounds * rows.len() * (targets.len() + 1));
    let mut grid = Grid::new(rows, targets.len() + 1);
    for _ in 0..opts.rounds {
        let handles = open_all(targets, names, FILE)?;
        let second = match open_all(targets, names, FILE2) {
            Ok(h) => h,
            Err(e) => {
                let _ = close_all(targets, &handles, FILE);
                return Err(e);
            }
        };
        let result = run_round(
            targets, names, &handles, &plan, mem, &mut buf, &mut grid, &bar,
        )
        .and_then(|()| {
            let files = Files {
                first: &handles,
                second: &second,
            };
            two_threads(
                targets,
                names,
                files,
                &plan,
                [&mut *mem, &mut *mem2],
                &mut grid,
                &bar,
            )
        });
        let closed = close_all(targets, &handles, FILE);
        let closed2 = close_all(targets, &second, FILE2);
        result?;
        closed
            .and(closed2)
            .context("data: closing and removing the files")?;
    }
    bar.finish_and_clear();
    let mut columns = names.to_vec();
    columns.push("memcpy".into());
    Ok(Measured {
        unit: "MB/s",
        higher_is_better: true,
        columns,
        rows: grid.into_rows(),
        notes: vec![
            "memcpy: the same bytes copied between two DRAM buffers, the file's starting on a page boundary as a file system's data does (the ceiling)".into(),
        ],
        baseline: crate::tmpfs_column(names),
    })
}

/// Room for `len` bytes starting on a page boundary (see [`page_aligned`]).
fn page_aligned_store(len: usize) -> Vec<u8> {
    vec![0u8; len + PAGE]
}

/// The `len` bytes of `store` that start on a page boundary. The memcpy column's "file" is
/// aligned as a file's data is in any file system (pool blocks, page-cache pages): on this
/// VM's CPU a copy between a page-aligned source and the read buffer (16 bytes past a page
/// start, malloc's header) runs at ~60% of a copy between two buffers of the same alignment
/// (scripts/readcopy.c), so an unaligned "file" would set a ceiling no file system meets.
fn page_aligned(store: &mut [u8], len: usize) -> &mut [u8] {
    let at = store.as_ptr().align_offset(PAGE);
    &mut store[at..at + len]
}

/// One pass over [`OPS`], each on every target and then on memcpy.
#[allow(clippy::too_many_arguments)] // the loop's state, all borrowed from `run`
fn run_round(
    targets: &[Box<dyn Target>],
    names: &[String],
    handles: &[Handle],
    plan: &Plan,
    mem: &mut [u8],
    buf: &mut [u8],
    grid: &mut Grid,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    let mb = plan.size as f64 / 1e6;
    for (row, op) in OPS.iter().enumerate() {
        for (col, ((t, name), &h)) in targets.iter().zip(names).zip(handles).enumerate() {
            bar.set_message(format!("{} on {name}", op.name));
            let start = Instant::now();
            run_target(t.as_ref(), h, plan, op, buf)
                .with_context(|| format!("data: {} on {name}", op.name))?;
            grid.push(row, col, mb / start.elapsed().as_secs_f64());
            bar.inc(1);
        }
        bar.set_message(format!("{} on memcpy", op.name));
        let start = Instant::now();
        run_memcpy(mem, plan, op, buf);
        grid.push(row, targets.len(), mb / start.elapsed().as_secs_f64());
        bar.inc(1);
    }
    verify(targets, names, handles, plan, buf)
}

/// Each target's handles on [`FILE`] and [`FILE2`].
#[derive(Clone, Copy)]
struct Files<'a> {
    first: &'a [Handle],
    second: &'a [Handle],
}

/// The [`TWO_THREADS`] row: on each target, [`FILE2`] is filled (untimed), then one
/// thread overwrites [`FILE`] while another overwrites [`FILE2`]; memcpy does the same
/// into two DRAM buffers.
#[allow(clippy::too_many_arguments)] // the round's state, as for run_round
fn two_threads(
    targets: &[Box<dyn Target>],
    names: &[String],
    files: Files<'_>,
    plan: &Plan,
    [mem, mem2]: [&mut [u8]; 2],
    grid: &mut Grid,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    let row = OPS.len();
    let mb = 2.0 * plan.size as f64 / 1e6;
    for (col, (t, name)) in targets.iter().zip(names).enumerate() {
        let (h1, h2) = (files.first[col], files.second[col]);
        bar.set_message(format!("{TWO_THREADS} on {name}"));
        seq_write(t.as_ref(), h2, plan, MAX_BLOCK as usize)
            .with_context(|| format!("data: filling {FILE2} on {name}"))?;
        let start = Instant::now();
        std::thread::scope(|s| {
            let other = s.spawn(|| seq_write(t.as_ref(), h2, plan, TWO_THREAD_BLOCK));
            let mine = seq_write(t.as_ref(), h1, plan, TWO_THREAD_BLOCK);
            mine.and(other.join().expect("the second writer panicked"))
        })
        .with_context(|| format!("data: {TWO_THREADS} on {name}"))?;
        grid.push(row, col, mb / start.elapsed().as_secs_f64());
        bar.inc(1);
    }
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| memcpy_write(mem2, plan));
        memcpy_write(mem, plan);
    });
    grid.push(row, targets.len(), mb / start.elapsed().as_secs_f64());
    bar.inc(1);
    Ok(())
}

/// The whole file written in order, `block` bytes at a time.
fn seq_write(t: &dyn Target, h: Handle, plan: &Plan, block: usize) -> io::Result<()> {
    let src = &plan.src[..block];
    (0..plan.size)
        .step_by(block)
        .try_for_each(|off| pwrite_all(t, h, src, off))
}

/// [`seq_write`]'s bytes, in [`TWO_THREAD_BLOCK`] pieces, into `mem`.
fn memcpy_write(mem: &mut [u8], plan: &Plan) {
    let src = &plan.src[..TWO_THREAD_BLOCK];
    for chunk in mem.chunks_exact_mut(TWO_THREAD_BLOCK) {
        chunk.copy_from_slice(src);
        black_box(&mut *chunk);
    }
}

/// Checks the last written block's content on every target: a target that drops
/// writes must not pass for a fast one.
fn verify(
    targets: &[Box<dyn Target>],
    names: &[String],
    handles: &[Handle],
    plan: &Plan,
    buf: &mut [u8],
) -> anyhow::Result<()> {
    let off = plan.size - MAX_BLOCK;
    for ((t, name), &h) in targets.iter().zip(names).zip(handles) {
        let block = &mut buf[..MAX_BLOCK as usize];
        pread_exact(t.as_ref(), h, block, off)
            .with_context(|| format!("data: reading back on {name}"))?;
        if *block != plan.src[..] {
            bail!("data: {name} returned different bytes than were written at offset {off}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DirTarget;

    #[test]
    fn the_memcpy_file_starts_on_a_page_boundary_and_has_the_files_length() {
        for len in [PAGE, 3 * PAGE + 5, 2 << 20] {
            let mut store = page_aligned_store(len);
            let file = page_aligned(&mut store, len);
            assert_eq!(file.as_ptr() as usize % PAGE, 0, "{len}");
            assert_eq!(file.len(), len);
        }
    }

    #[test]
    fn every_op_has_a_positive_rate_per_column_and_the_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let opts = Options {
            file_size: 2 << 20,
            progress: false,
            ..Options::default()
        };
        let report = crate::run_suite("data", &targets, &opts, None).unwrap();
        assert_eq!(report.columns, ["tmp", "memcpy"]);
        assert_eq!(report.rows.len(), OPS.len() + 1);
        assert_eq!(report.rows[OPS.len()].op, TWO_THREADS);
        for row in &report.rows {
            for v in &row.values {
                assert!(v.is_finite() && *v > 0.0, "{}: {v}", row.op);
            }
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn random_order_visits_every_block_once() {
        let plan = Plan::new(1 << 20, 7);
        let mut seen = plan.random.clone();
        seen.sort_unstable();
        let expected: Vec<u64> = (0..256).map(|b| b * KIB4 as u64).collect();
        assert_eq!(seen, expected);
        assert_ne!(plan.random, expected, "not shuffled");
    }

    #[test]
    fn rejects_a_size_that_is_not_whole_mebibytes() {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<Box<dyn Target>> =
            vec![Box::new(DirTarget::new(dir.path(), "tmp").unwrap())];
        let opts = Options {
            file_size: 4096,
            progress: false,
            ..Options::default()
        };
        assert!(crate::run_suite("data", &targets, &opts, None).is_err());
    }
}
