//! The crash-state checker (issue 5).
//!
//! Each workload builds a small tree on an in-memory pool with the recording backend,
//! snapshots the image, then runs one operation (or a pair, or a triple) while every
//! store, flush and fence is logged. Replaying the log over the snapshot gives the
//! crash images: at the start of each operation, just before every fence and after the
//! call returns, the durable image plus any subset of the 8-byte units written but not
//! yet durable (all subsets up to 12 such units, else "none", "all" and at least 1,000
//! more). Each image is opened (recovery runs) and must show the state before or after
//! the operation in flight, with every earlier operation included (after a call
//! returns, only the state after it is allowed); recovery and `fsck::check` must report
//! no problems; link counts, block ownership and the allocators must agree with the
//! names found; and (for "none", "all" and every 8th image, as mapping a pool is what
//! an image costs) a clean close and reopen must show the same state again.
//!
//! Run: `cargo test -p lynxfs --profile ci --test crash -- --nocapture` (prints one
//! table per test: per operation type, the workloads, crash points, images judged,
//! distinct images opened and violations); about two to three minutes of CPU.
//! `LYNXFS_LONG=1` samples 2,000 subsets per crash point, pairs every operation with
//! every other and runs 200 triples (an hour or more). `LYNXFS_CRASH_ONLY=name` limits
//! the single-operation test to the workloads whose name contains `name`.
//!
//! Pairs and triples start from the same tree as the single-operation workloads, so
//! their first step's crash points are those already checked alone; only the later
//! steps are judged there.

#[path = "crash/check.rs"]
mod check;
#[path = "crash/ops.rs"]
mod ops;
#[path = "crash/replay.rs"]
mod replay;
#[path = "crash/state.rs"]
mod state;

use check::{long, run_workload, Config, Stats};
use lynxfs::pmem::Event;
use ops::{all_ops, find, Op, PAIR_SET};
use replay::{subsets, Replay, Rng};

/// Operations that only mean something after "unlink-open"; they run in its sequence.
const ORPHAN_STEPS: &[&str] = &["unlink-open", "write-orphan", "close-orphan"];

fn finish(title: &str, stats: &Stats) {
    eprintln!("{}", stats.table(title));
    if stats.total_violations > 0 {
        panic!(
            "{} violation(s); the first:\n{}",
            stats.total_violations,
            stats.report(5)
        );
    }
}

#[test]
fn every_operation_alone() {
    let cfg = Config::from_env();
    let ops = all_ops();
    let mut stats = Stats::default();
    // LYNXFS_CRASH_ONLY=name runs only the workloads whose name contains `name`.
    let only = std::env::var("LYNXFS_CRASH_ONLY").unwrap_or_default();
    for op in ops
        .iter()
        .filter(|o| !ORPHAN_STEPS[1..].contains(&o.name) && o.name.contains(&only))
    {
        stats.merge(run_workload(op.name, &[(*op, 0)], 0, &cfg));
    }
    let orphan: Vec<(Op, usize)> = ORPHAN_STEPS.iter().map(|n| (find(&ops, n), 0)).collect();
    if "orphan lifecycle".contains(&only) {
        stats.merge(run_workload("orphan lifecycle", &orphan, 0, &cfg));
    }
    finish("every operation alone", &stats);
}

#[test]
fn pairs() {
    let cfg = Config::from_env();
    let ops = all_ops();
    let set: Vec<Op> = if long() {
        ops.clone()
    } else {
        PAIR_SET.iter().map(|n| find(&ops, n)).collect()
    };
    let mut stats = Stats::default();
    for a in &set {
        for b in &set {
            let name = format!("{} ; {}", a.name, b.name);
            stats.merge(run_workload(&name, &[(*a, 0), (*b, 1)], 1, &cfg));
        }
    }
    finish("pairs", &stats);
}

#[test]
fn random_triples() {
    let cfg = Config::from_env();
    let ops = all_ops();
    let mut rng = Rng::new(cfg.seed ^ 0x7419);
    let n = if long() { 200 } else { 16 };
    let mut stats = Stats::default();
    for _ in 0..n {
        let steps: Vec<(Op, usize)> = (0..3)
            .map(|i| (ops[rng.below(ops.len() as u64) as usize], i))
            .collect();
        let name = steps
            .iter()
            .map(|(o, _)| o.name)
            .collect::<Vec<_>>()
            .join(" ; ");
        stats.merge(run_workload(&name, &steps, 1, &cfg));
    }
    finish("random triples", &stats);
}

// ---- the checker checks itself ----

fn store(off: u64, v: u64) -> Event {
    Event::Store {
        off,
        bytes: v.to_le_bytes().to_vec(),
    }
}

#[test]
fn replay_durability_model() {
    let mut r = Replay::new(vec![0u8; 64]);
    r.apply(&store(0, 1));
    r.apply(&Event::Flush { off: 0, len: 8 });
    r.apply(&store(8, 2)); // never flushed
    assert_eq!(r.in_flight().len(), 2, "nothing is durable before a fence");
    r.apply(&Event::Fence);
    let fl = r.in_flight();
    assert_eq!(fl.len(), 1, "the flushed store became durable");
    assert_eq!(
        fl[0].unit, 1,
        "the unflushed one stays in flight across fences"
    );
    assert_eq!(r.durable()[0], 1);
    // Flushed, then stored again before the fence: the flushed value becomes durable,
    // the newer one is still in flight.
    r.apply(&store(16, 3));
    r.apply(&Event::Flush { off: 16, len: 8 });
    r.apply(&store(16, 4));
    r.apply(&Event::Fence);
    assert_eq!(r.durable()[16], 3);
    assert!(r
        .in_flight()
        .iter()
        .any(|f| f.unit == 2 && f.latest[0] == 4));
    // A partial store touches only its unit; subsets are built and undone in place.
    r.apply(&Event::Store {
        off: 33,
        bytes: vec![9, 9],
    });
    let fl = r.in_flight();
    let all = vec![true; fl.len()];
    let print_all = r.print_with(&fl, &all);
    let img = r.with_image(&fl, &all, |img| img.to_vec());
    assert_eq!(img, r.current());
    assert_eq!(
        print_all,
        Replay::new(r.current().to_vec()).print_with(&[], &[])
    );
    assert_ne!(r.durable(), r.current(), "with_image undid its changes");
}

#[test]
fn subset_counts() {
    let mut rng = Rng::new(1);
    assert_eq!(subsets(0, 12, 1000, &mut rng).len(), 1);
    assert_eq!(subsets(12, 12, 1000, &mut rng).len(), 4096);
    let s = subsets(500, 12, 1000, &mut rng);
    assert!(s.len() >= 1000, "{} subsets", s.len());
    assert!(s.contains(&vec![false; 500]) && s.contains(&vec![true; 500]));
}

/// A "rename" made of a link and an unlink is not atomic: the checker must see the
/// state with both names.
#[test]
fn checker_catches_a_non_atomic_step() {
    let torn = Op {
        name: "link+unlink",
        run: |c, _| {
            c.s().link("/d2/g", "/d1/moved")?;
            c.s().unlink("/d2/g")
        },
        times: false,
    };
    let st = run_workload("torn", &[(torn, 0)], 0, &Config::from_env());
    assert!(st.total_violations > 0, "the torn step went unnoticed");
    assert!(st.violations[0].what.contains("not the one after"));
}

/// A change left flushed but not fenced when the call returns breaks synchronous
/// durability: the checker must say so.
#[test]
fn checker_catches_a_missing_fence() {
    let lazy = Op {
        name: "unfenced-size",
        run: |c, _| {
            let pool = c.fs.pool();
            let ino = c.s().stat("/d2/g")?.ino;
            let at = pool.layout.inode_addr(ino) + lynxfs::format::inode::SIZE;
            let mut b = pool.pm.batch();
            b.write_u64(at, 10);
            b.flushed();
            Ok(())
        },
        times: false,
    };
    let st = run_workload("lazy", &[(lazy, 0)], 0, &Config::from_env());
    assert!(st.total_violations > 0, "the missing fence went unnoticed");
    assert!(st.violations[0].point.contains("returned"));
}
