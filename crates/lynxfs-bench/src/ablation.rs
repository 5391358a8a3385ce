//! The `ablation` suite: LynxFS against itself with one mechanism taken away, to show
//! what each mechanism buys. Without engine switches, one mechanism can be taken away
//! today: the DRAM index, by a budget of [`TINY_BUDGET`] entries
//! (`Namespace::set_index_budget`), so that directories are evicted and reloaded from
//! their logs (cold lookups). The `syscalls` and `mdtest` (1 and 2 threads) suites run
//! on both pools, interleaved as usual; every row is in µs per operation (mdtest's
//! files/s turned into µs per file), so lower is better throughout. Keep the file
//! count small (the CLI's default is 1000): with the tiny budget every lookup in a
//! second directory reloads the first, so a stat costs O(entries).
//!
//! The other ablations need engine switches; [`MISSING`] lists them and the report
//! carries the list in its notes.

use anyhow::Context;

use crate::{mdtest, syscalls, LibTarget, Measured, Options, Row, Target};

/// Index entries the ablated pool may keep.
pub const TINY_BUDGET: usize = 64;

/// Engine switches the other ablations need (none exists yet).
pub const MISSING: &[&str] = &[
    "inode quick path off: resolve every inode through the inode table walk instead of \
     the address computed from the inode number (an Fs/Namespace option, e.g. \
     MkfsOptions or Fs::set_quick_inode(false))",
    "GC off: no reclaim of dead directory-log entries or blocks while running (e.g. \
     Fs::set_gc(false)), to measure its cost on create/unlink churn",
    "directory lock instead of lock-free creation: take the directory's gate exclusively \
     for create/unlink/rename (e.g. Namespace::set_dir_lock(true)), to measure what the \
     lock-free insert buys in mdtest's shared directory",
];

pub(crate) fn run(opts: &Options) -> anyhow::Result<Measured> {
    let full = LibTarget::create_default().context("setting up a LynxFS pool")?;
    let cold = LibTarget::create_default()
        .context("setting up a LynxFS pool")?
        .with_label(format!("lynxfs index={TINY_BUDGET}"));
    cold.fs().ns().set_index_budget(TINY_BUDGET);
    let targets: Vec<Box<dyn Target>> = vec![Box::new(full), Box::new(cold)];
    let names: Vec<String> = targets.iter().map(|t| t.name()).collect();
    let baseline = Some(names[0].clone());
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let sys = syscalls::run(&targets, &names, opts)?;
    rows.extend(sys.rows.into_iter().map(|r| Row {
        op: format!("syscalls {}", r.op),
        ..r
    }));
    let md_opts = Options {
        max_threads: opts.max_threads.min(2),
        ..opts.clone()
    };
    let md = mdtest::run(&targets, &names, &md_opts)?;
    let per_op = |v: &f64| 1e6 / v;
    rows.extend(md.rows.into_iter().map(|r| {
        Row {
            op: format!("mdtest {}", r.op),
            values: r.values.iter().map(per_op).collect(),
            rounds: r
                .rounds
                .iter()
                .map(|c| c.iter().map(per_op).collect())
                .collect(),
        }
    }));
    notes.push(format!(
        "lynxfs index={TINY_BUDGET}: the same engine with an index budget of {TINY_BUDGET} \
         entries, so directories are evicted and reloaded from their logs; mdtest rows are \
         1e6 / (files/s)"
    ));
    notes.extend(
        MISSING
            .iter()
            .map(|m| format!("not measured, needs an engine switch: {m}")),
    );
    Ok(Measured {
        unit: "us/op",
        higher_is_better: false,
        columns: names,
        rows,
        notes,
        baseline,
    })
}
