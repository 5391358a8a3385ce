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
//! Three more pools each run with one switch of `Namespace::mechanisms` off: the inode
//! quick path (lookups read the inode number from the dentry in the pool), lock-free
//! creation (a per-directory lock around create, link, unlink and rename), and reuse
//! of dead log slots. [`MISSING`] says what cannot be switched off.

use anyhow::Context;

use crate::{mdtest, syscalls, LibTarget, Measured, Options, Row, Target};

/// Index entries the ablated pool may keep.
pub const TINY_BUDGET: usize = 64;

/// What the engine cannot switch off (yet), carried in the report's notes.
pub const MISSING: &[&str] = &[
    "GC in DirectFS's sense (background reclaim of dead dentries and log pages) does not \
     exist in LynxFS: dentries come back at unlink, slots are reused at once; the \
     `no slot reuse` column turns that reuse off instead",
];

pub(crate) fn run(opts: &Options) -> anyhow::Result<Measured> {
    let full = LibTarget::create_default().context("setting up a LynxFS pool")?;
    let cold = LibTarget::create_default()
        .context("setting up a LynxFS pool")?
        .with_label(format!("lynxfs index={TINY_BUDGET}"));
    cold.fs().ns().set_index_budget(TINY_BUDGET);
    // One pool per mechanism taken away (Namespace::mechanisms).
    let ablated = |label: &str, off: &dyn Fn(&lynxfs::meta::mechanisms::Mechanisms)| {
        LibTarget::create_default()
            .context("setting up a LynxFS pool")
            .map(|t| {
                off(&t.fs().ns().mechanisms);
                t.with_label(label.to_string())
            })
    };
    let no_quick = ablated("lynxfs no quick path", &|m| m.set_quick_path(false))?;
    let dir_lock = ablated("lynxfs dir lock", &|m| m.set_lock_free(false))?;
    let no_reuse = ablated("lynxfs no slot reuse", &|m| m.set_slot_reuse(false))?;
    let targets: Vec<Box<dyn Target>> = vec![
        Box::new(full),
        Box::new(cold),
        Box::new(no_quick),
        Box::new(dir_lock),
        Box::new(no_reuse),
    ];
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
