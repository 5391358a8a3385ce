//! The crash-state checker (issues 5 and 11).
//!
//! Each workload builds a small tree on an in-memory pool with the recording backend,
//! snapshots the image, then runs one operation (or a pair, or a triple) while every
//! store, flush and fence is logged with its thread. Replaying the log over the
//! snapshot gives the crash images: at the start of each operation, just before every
//! fence and after the call returns, the durable image plus, for each 8-byte unit
//! stored to since it was last durable, its durable value, its latest value or any
//! value it held in between (a fence makes durable only its own thread's flushes).
//! Every combination is tried up to 4,096 of them, else "none", "all" and at least
//! 1,000 more, with each in-between value alone and with all else latest. Each image is
//! opened (recovery runs) and must show the state before or after the operation in
//! flight, with every earlier operation included (after a call returns, only the state
//! after it is allowed); recovery and `fsck::check` must report no problems; link
//! counts, block ownership and the allocators must agree with the names found; and
//! (for "none", "all" and every 8th image, as mapping a pool is what an image costs) a
//! clean close and reopen must show the same state again.
//!
//! Recovery is crashed too: of the images whose recovery wrote more than the
//! superblock, a seeded uniform sample per workload (6; 12 per thread pair) has its
//! recovery log replayed the same way; each image a crash during recovery can leave is
//! recovered again and must give exactly the state of the uninterrupted recovery.
//!
//! `two_threads_two_lanes` runs pairs of operations on two threads pinned to two lanes
//! of a two-lane pool, interleaved at fence granularity by a deterministic schedule
//! (see `crash/threads.rs`); each crash image must show each operation done or not,
//! and done once its call returned; both done is where that schedule ended, which
//! must be one of the two serial orders' results.
//!
//! POSIX ACLs (`crash/ops.rs`): setting an extended access ACL (the mode's group bits
//! follow the mask) and a minimal one (only the mode changes, the stored ACL goes),
//! removing it, chmod of a file with an extended ACL (the mask changes), setting and
//! removing a default ACL, and a create and a mkdir inheriting one. The state compared
//! includes every attribute (the ACLs among them) and the mode, so an image with the
//! mode of one state and the ACL of the other is a violation
//! (`checker_catches_a_torn_acl_and_mode`).
//!
//! Run: `cargo test -p lynxfs --profile ci --test crash -- --nocapture` (prints one
//! table per test: per operation type, the workloads, crash points, images judged,
//! distinct images opened, images using an in-between value, images whose recovery was
//! crashed, the images those crashes left, and violations); 138 s of wall time in a
//! clean clone's `./lynx test` on the 2-core VM (c8cfc05), most of it opening images:
//! mapping a copy of the pool, recovery (on the calling thread for so small a pool),
//! fsck and the state capture.
//! `LYNXFS_LONG=1` samples 2,000 choices per crash point, pairs every operation with
//! every other, runs 200 triples and crashes the recovery of every image whose recovery
//! does work (hours). `LYNXFS_CRASH_ONLY=name` limits the single-operation test to the
//! workloads whose name contains `name`.
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

#[path = "crash/threads.rs"]
mod threads;

use std::thread::ThreadId;

use check::{long, run_workload, Config, Judge, Stats};
use lynxfs::data::xattr;
use lynxfs::format::inode;
use lynxfs::meta::acl::{Acl, MASK};
use lynxfs::pmem::{Event, Tagged};
use ops::{all_ops, find, Op, ACL_ACCESS, ACL_DEFAULT, ACL_PAIRS, PAIR_SET};
use replay::{choices, subsets, InFlight, Replay, Rng, DURABLE, LATEST, MID};
use threads::{run_concurrent, Part};

/// Operations that only mean something after "unlink-open"; they run in its sequence.
const ORPHAN_STEPS: &[&str] = &["unlink-open", "write-orphan", "close-orphan"];

/// Operations on a handle "grow-open" keeps open; they run in its sequence.
const GROW_STEPS: &[&str] = &["grow-open", "append-into-reserve", "close-grown"];

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
    for op in ops.iter().filter(|o| {
        !ORPHAN_STEPS[1..].contains(&o.name)
            && !GROW_STEPS.contains(&o.name)
            && o.name.contains(&only)
    }) {
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
    let mut pairs: Vec<[Op; 2]> = set
        .iter()
        .flat_map(|&a| set.iter().map(move |&b| [a, b]))
        .collect();
    if !long() {
        pairs.extend(
            ACL_PAIRS
                .iter()
                .map(|[a, b]| [find(&ops, a), find(&ops, b)]),
        );
    }
    let mut stats = Stats::default();
    for [a, b] in pairs {
        let name = format!("{} ; {}", a.name, b.name);
        stats.merge(run_workload(&name, &[(a, 0), (b, 1)], 1, &cfg));
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

/// Two operations on two threads and two lanes, interleaved at fence granularity
/// under every nesting schedule and a few seeded shuffles (see `crash/threads.rs`).
#[test]
fn two_threads_two_lanes() {
    let cfg = Config {
        exhaustive_max: 8,
        samples: 128,
        recrash_images: if long() { usize::MAX } else { 12 },
        ..Config::from_env()
    };
    let ops = all_ops();
    let part = |name: &str, i: usize, lane: u32| Part {
        op: find(&ops, name),
        i,
        lane,
    };
    let mut stats = Stats::default();
    let (mut forced, mut runs) = (0, 0);
    for [a, b] in THREAD_PAIRS {
        let (st, f, n) = run_concurrent([part(a, 0, 0), part(b, 1, 1)], 4, &cfg);
        stats.merge(st);
        forced += f;
        runs += n;
    }
    eprintln!("two threads: {runs} schedules run, {forced} segments inserted for a thread that waited on a stuck one");
    finish("two threads, two lanes", &stats);
}

/// The operations that write file data, alone and in a few pairs, on a pool in the
/// inplace data mode, judged by its promise: each byte old or new, the size and the
/// rest of the metadata those of one state.
#[test]
fn writes_in_inplace_mode() {
    let cfg = Config {
        data: lynxfs::DataMode::Inplace,
        ..Config::from_env()
    };
    let ops = all_ops();
    let mut stats = Stats::default();
    for op in ops.iter().filter(|o| INPLACE_OPS.contains(&o.name)) {
        stats.merge(run_workload(op.name, &[(*op, 0)], 0, &cfg));
    }
    for [a, b] in INPLACE_PAIRS {
        let steps = [(find(&ops, a), 0), (find(&ops, b), 1)];
        stats.merge(run_workload(&format!("{a} then {b}"), &steps, 1, &cfg));
    }
    finish("writes, inplace data mode", &stats);
}

/// Block-pointer swaps (the atomic mode's cheap overwrite) one after another on one
/// file, then a write that rewrites its map: each later step works from the map the
/// swap left (the cached copy must have followed the swap).
/// Speculative preallocation (docs/CONSISTENCY.md, "append"): an append that
/// reserves blocks past the end, appends into the reserve (a size commit alone, the
/// first one crossing into a second reserved block), and the close that trims it, in
/// both data modes. A crash with the reserve outstanding must recover to the file's
/// size and bytes with the reserve given back (`state::invariants`).
#[test]
fn speculative_preallocation_in_sequence() {
    let ops = all_ops();
    let mut stats = Stats::default();
    for data in [lynxfs::DataMode::Atomic, lynxfs::DataMode::Inplace] {
        let cfg = Config {
            data,
            ..Config::from_env()
        };
        let mut steps: Vec<(Op, usize)> = GROW_STEPS.iter().map(|n| (find(&ops, n), 0)).collect();
        steps.insert(2, (find(&ops, "append-into-reserve"), 1));
        stats.merge(run_workload(&format!("grow ({data})"), &steps, 0, &cfg));
    }
    finish("speculative preallocation in sequence", &stats);
}

#[test]
fn block_pointer_swaps_in_sequence() {
    let ops = all_ops();
    let steps = [
        (find(&ops, "write-swap-tree"), 0),
        (find(&ops, "write-swap-tree"), 1),
        (find(&ops, "write-in-tree"), 2),
        (find(&ops, "write-swap-inline"), 3),
        (find(&ops, "write-grow-tree"), 4),
        (find(&ops, "write-cut-window"), 5),
        (find(&ops, "write-swap-long"), 6),
    ];
    let stats = run_workload("swaps", &steps, 1, &Config::from_env());
    finish("block pointer swaps in sequence", &stats);
}

/// Directory log compaction crashed at every point: a removal, then the load that
/// compacts the log, in the judged step (`ops::compaction_steps`).
#[test]
fn directory_log_compaction() {
    let steps = ops::compaction_steps();
    let cfg = Config {
        pool: (4 << 20, Some(1800)),
        ..Config::from_env()
    };
    let stats = run_workload(
        "compaction",
        &[
            (find(&steps, "compact-fill"), 0),
            (find(&steps, "compact-unlink"), 1),
        ],
        1,
        &cfg,
    );
    finish("directory log compaction", &stats);
}

/// The operations whose protocol the data mode changes, and their neighbours.
const INPLACE_OPS: &[&str] = &[
    "write-append",
    "write-append-block",
    "write-overwrite",
    "write-unaligned",
    "write-past-eof",
    "write-multiblock",
    "write-grow-tree",
    "write-in-tree",
    "write-swap-inline",
    "write-swap-tree",
    "truncate-up",
    "truncate-down",
    "fallocate",
];

const INPLACE_PAIRS: &[[&str; 2]] = &[
    ["write-overwrite", "write-unaligned"],
    ["truncate-down", "write-multiblock"],
    ["write-append", "write-overwrite"],
];

/// Pairs that touch one directory, one inode's link count, two journals, or nothing
/// in common.
const THREAD_PAIRS: &[[&str; 2]] = &[
    ["create", "create"],
    ["mkdir", "unlink"],
    ["link", "unlink-hardlinked"],
    ["rename-over-file", "setxattr-new"],
    ["write-append", "write-overwrite"],
    ["chmod", "truncate-tree"],
    ["acl-default-dir", "create"],
    ["chmod-acl", "acl-access-extended"],
];

// ---- the checker checks itself ----

fn on(thread: ThreadId, event: Event) -> Tagged {
    Tagged { thread, event }
}

fn store(t: ThreadId, off: u64, v: u64) -> Tagged {
    on(
        t,
        Event::Store {
            off,
            bytes: v.to_le_bytes().to_vec(),
        },
    )
}

fn flush(t: ThreadId, off: u64) -> Tagged {
    on(t, Event::Flush { off, len: 8 })
}

fn other_thread() -> ThreadId {
    std::thread::spawn(|| std::thread::current().id())
        .join()
        .unwrap()
}

#[test]
fn replay_durability_model() {
    let me = std::thread::current().id();
    let mut r = Replay::new(vec![0u8; 64]);
    r.apply(&store(me, 0, 1));
    r.apply(&flush(me, 0));
    r.apply(&store(me, 8, 2)); // never flushed
    assert_eq!(r.in_flight().len(), 2, "nothing is durable before a fence");
    r.apply(&on(me, Event::Fence));
    let fl = r.in_flight();
    assert_eq!(fl.len(), 1, "the flushed store became durable");
    assert_eq!(
        fl[0].unit, 1,
        "the unflushed one stays in flight across fences"
    );
    assert_eq!(r.durable()[0], 1);
    // Flushed, then stored again before the fence: the flushed value becomes durable,
    // the newer one is still in flight.
    r.apply(&store(me, 16, 3));
    r.apply(&flush(me, 16));
    r.apply(&store(me, 16, 4));
    r.apply(&on(me, Event::Fence));
    assert_eq!(r.durable()[16], 3);
    assert!(r
        .in_flight()
        .iter()
        .any(|f| f.unit == 2 && f.latest[0] == 4 && f.mid.is_empty()));
    // A partial store touches only its unit; images are built and undone in place.
    r.apply(&on(
        me,
        Event::Store {
            off: 33,
            bytes: vec![9, 9],
        },
    ));
    let fl = r.in_flight();
    let all = vec![LATEST; fl.len()];
    let print_all = r.print_with(&fl, &all);
    let img = r.with_image(&fl, &all, |img| img.to_vec());
    assert_eq!(img, r.current());
    assert_eq!(
        print_all,
        Replay::new(r.current().to_vec()).print_with(&[], &[])
    );
    assert_ne!(r.durable(), r.current(), "with_image undid its changes");
}

/// A unit flushed with one value and overwritten before the fence may hold the value
/// in between after a crash, even when its latest value equals the durable one.
#[test]
fn replay_in_between_values() {
    let me = std::thread::current().id();
    let mut r = Replay::new(vec![0u8; 64]);
    r.apply(&store(me, 0, 5));
    r.apply(&flush(me, 0));
    r.apply(&store(me, 0, 6));
    r.apply(&store(me, 0, 0));
    let fl = r.in_flight();
    assert_eq!(fl.len(), 1, "back at its durable value, still in flight");
    assert_eq!(fl[0].mid.len(), 2, "{:?}", fl[0].mid);
    assert_eq!(fl[0].value(MID)[0], 5);
    let img = r.with_image(&fl, &[MID + 1], |img| img.to_vec());
    assert_eq!(img[0], 6);
    // The fence makes the flushed 5 durable; only the later values stay possible.
    r.apply(&on(me, Event::Fence));
    assert_eq!(r.durable()[0], 5);
    let fl = r.in_flight();
    assert_eq!(
        (fl[0].latest[0], fl[0].mid.clone()),
        (0, vec![[6, 0, 0, 0, 0, 0, 0, 0]])
    );
}

/// A fence orders only its own thread's flushes.
#[test]
fn replay_fences_are_per_thread() {
    let (me, them) = (std::thread::current().id(), other_thread());
    let mut r = Replay::new(vec![0u8; 64]);
    r.apply(&store(them, 0, 7));
    r.apply(&flush(them, 0));
    r.apply(&on(me, Event::Fence));
    assert_eq!(r.durable()[0], 0, "another thread's fence");
    r.apply(&on(them, Event::Fence));
    assert_eq!(r.durable()[0], 7, "its own fence");
    assert!(r.in_flight().is_empty());
}

#[test]
fn subset_counts() {
    let mut rng = Rng::new(1);
    assert_eq!(subsets(0, 12, 1000, &mut rng).len(), 1);
    assert_eq!(subsets(12, 12, 1000, &mut rng).len(), 4096);
    let s = subsets(500, 12, 1000, &mut rng);
    assert!(s.len() >= 1000, "{} subsets", s.len());
    assert!(s.contains(&vec![false; 500]) && s.contains(&vec![true; 500]));
    // With in-between values: every combination while few, else each such value
    // alone and with everything else latest.
    let unit = |mid: usize| InFlight {
        unit: 0,
        durable: [0; 8],
        latest: [1; 8],
        mid: (0..mid).map(|k| [k as u8 + 2; 8]).collect(),
    };
    let fl = vec![unit(1), unit(0), unit(2)];
    assert_eq!(choices(&fl, 12, 1000, &mut rng).len(), 3 * 2 * 4);
    let mut many: Vec<InFlight> = (0..20).map(|_| unit(0)).collect();
    many[7] = unit(3);
    let ch = choices(&many, 12, 100, &mut rng);
    for k in 0..3 {
        for rest in [DURABLE, LATEST] {
            let mut c = vec![rest; 20];
            c[7] = MID + k;
            assert!(ch.contains(&c), "value {k} with the rest at {rest}");
        }
    }
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

/// An overwrite made in place is torn by a crash: judged by the atomic mode's promise
/// (before or after), the checker must object.
#[test]
fn checker_catches_an_in_place_overwrite_in_atomic_mode() {
    let in_place = Op {
        name: "overwrite-in-place",
        run: |c, _| {
            c.fs.pool().set_data_mode(lynxfs::DataMode::Inplace);
            let fd = c.s().open("/f", libc::O_WRONLY, 0)?;
            let r = c.fs.pwrite(fd, &ops::pattern(4096, 7), 4096).map(drop);
            c.fs.close_fd(fd)?;
            r
        },
        times: false,
    };
    let st = run_workload("in place", &[(in_place, 0)], 0, &Config::from_env());
    assert!(st.total_violations > 0, "the torn overwrite went unnoticed");
    assert!(st.violations[0].what.contains("not the one after"));
}

/// The inplace promise still has teeth: bytes that were never in the file before or
/// after the call (a first write the call then overwrites) are a violation.
#[test]
fn checker_catches_a_byte_neither_old_nor_new_in_inplace_mode() {
    let twice = Op {
        name: "write-twice",
        run: |c, _| {
            let fd = c.s().open("/f", libc::O_WRONLY, 0)?;
            c.fs.pwrite(fd, &ops::pattern(4096, 99), 4096)?;
            let r = c.fs.pwrite(fd, &ops::pattern(4096, 7), 4096).map(drop);
            c.fs.close_fd(fd)?;
            r
        },
        times: false,
    };
    let cfg = Config {
        data: lynxfs::DataMode::Inplace,
        ..Config::from_env()
    };
    let st = run_workload("twice", &[(twice, 0)], 0, &cfg);
    assert!(
        st.total_violations > 0,
        "bytes of neither state went unnoticed"
    );
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

fn size_word(c: &ops::Ctx) -> lynxfs::Result<u64> {
    let ino = c.s().stat("/d2/g")?.ino;
    Ok(c.fs.pool().layout.inode_addr(ino) + lynxfs::format::inode::SIZE)
}

/// A word flushed with a wrong value and put back before the fence can be on the media
/// after a crash: the checker must try that value.
#[test]
fn checker_catches_an_in_between_value() {
    let flicker = Op {
        name: "size-flicker",
        run: |c, _| {
            let at = size_word(c)?;
            let pm = &c.fs.pool().pm;
            let old = pm.load_u64(at);
            let mut b = pm.batch();
            b.write_u64(at, 10).write_u64(at, old);
            let _ = b.persist();
            Ok(())
        },
        times: false,
    };
    let st = run_workload("flicker", &[(flicker, 0)], 0, &Config::from_env());
    assert!(
        st.total_violations > 0,
        "the in-between value went unnoticed"
    );
    assert!(
        st.violations[0].subset.contains("in-between"),
        "{}",
        st.report(3)
    );
}

/// A flush fenced by another thread is not durable: the checker must say so.
#[test]
fn checker_catches_a_fence_on_the_wrong_thread() {
    let wrong = Op {
        name: "other-thread-flush",
        run: |c, _| {
            let at = size_word(c)?;
            let pm = &c.fs.pool().pm;
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    let mut b = pm.batch();
                    b.write_u64(at, 10);
                    b.flushed();
                });
            });
            let _ = pm.fence();
            Ok(())
        },
        times: false,
    };
    let st = run_workload("wrong", &[(wrong, 0)], 0, &Config::from_env());
    assert!(
        st.total_violations > 0,
        "the other thread's flush counted as fenced"
    );
    assert!(st.violations[0].point.contains("returned"));
}

/// A recovery step whose interruption a second recovery does not repair (here: a
/// word set to a wrong value, fenced, then set back) must be caught by crashing
/// recovery at its fences.
#[test]
fn checker_catches_a_recovery_that_is_not_rerunnable() {
    let (fs, _rec) = check::fresh_pool(1);
    let c = ops::Ctx::new(&fs);
    ops::setup(&c);
    let at = size_word(&c).unwrap();
    let img = fs.pool().pm.snapshot();
    drop(c);
    fs.pool().crash_in_place();
    let (st, mut log) = state::examine(&img, false).unwrap();
    let me = std::thread::current().id();
    let old = u64::from_le_bytes(img[at as usize..at as usize + 8].try_into().unwrap());
    let detour = [
        store(me, at, 10),
        flush(me, at),
        on(me, Event::Fence),
        store(me, at, old),
        flush(me, at),
        on(me, Event::Fence),
    ];
    log.splice(0..0, detour);
    let cfg = Config::from_env();
    let mut j = Judge::new("detour", fs.pool().layout, &cfg, vec![st.clone()], false);
    j.check_recovery(&img, log, &st);
    let stats = j.crash_recoveries();
    assert!(stats.total_violations > 0, "the detour went unnoticed");
    assert!(stats.violations[0].what.contains("recovery run again"));
}

/// The state after `op` runs (instance 0) on the starting tree, live (no crash).
fn state_after(op: Op) -> state::State {
    let (fs, _rec) = check::fresh_pool(1);
    let c = ops::Ctx::new(&fs);
    ops::setup(&c);
    (op.run)(&c, 0).unwrap_or_else(|e| panic!("{}: {e}", op.name));
    let st = state::capture(&fs).unwrap();
    drop(c);
    fs.pool().crash_in_place();
    st
}

fn node<'s>(st: &'s state::State, path: &str) -> &'s state::Node {
    st.nodes
        .iter()
        .find(|n| n.path == path)
        .unwrap_or_else(|| panic!("no {path}"))
}

fn xattr_of(n: &state::Node, name: &str) -> Option<Vec<u8>> {
    n.xattrs
        .iter()
        .find(|(k, _)| k == name.as_bytes())
        .map(|(_, v)| v.clone())
}

/// The ACL workloads change what they are meant to (a workload that did nothing would
/// pass the checker without testing anything): the mode follows the access ACL's
/// mask, a minimal ACL is not stored, chmod sets the mask, creates inherit.
#[test]
fn acl_operations_do_what_they_say() {
    let ops = all_ops();
    let after = |name: &str| state_after(find(&ops, name));
    let perms = |n: &state::Node| n.mode & 0o7777;
    let start = state_after(Op {
        name: "nothing",
        run: |_, _| Ok(()),
        times: false,
    });
    let a0 = node(&start, "/a");
    assert_eq!(perms(a0), 0o664);
    assert!(xattr_of(a0, ACL_ACCESS).is_some());
    assert!(xattr_of(node(&start, "/da"), ACL_DEFAULT).is_some());

    let st = after("acl-access-extended");
    let x = node(&st, "/x");
    assert_eq!(perms(x), 0o660, "the group bits are the mask");
    assert_eq!(xattr_of(x, ACL_ACCESS), Some(ops::acl_for_x()));
    assert!(xattr_of(x, "user.a").is_some(), "the other attribute stays");

    let st = after("acl-access-minimal");
    let a = node(&st, "/a");
    assert_eq!((perms(a), xattr_of(a, ACL_ACCESS)), (0o600, None));

    let st = after("acl-remove-access");
    let a = node(&st, "/a");
    assert_eq!((perms(a), xattr_of(a, ACL_ACCESS)), (0o664, None));

    let st = after("chmod-acl");
    let a = node(&st, "/a");
    assert_eq!(perms(a), 0o640);
    let acl = Acl::parse(&xattr_of(a, ACL_ACCESS).unwrap())
        .unwrap()
        .unwrap();
    let mask = acl.entries().iter().find(|e| e.tag == MASK).unwrap();
    assert_eq!(mask.perm, 4, "the mask took the group bits");

    let st = after("acl-default-dir");
    assert!(xattr_of(node(&st, "/d1"), ACL_DEFAULT).is_some());
    let st = after("acl-remove-default");
    assert!(xattr_of(node(&st, "/da"), ACL_DEFAULT).is_none());

    let st = after("create-inherit");
    let f = node(&st, "/da/c0");
    assert_eq!(perms(f), 0o640);
    assert!(xattr_of(f, ACL_ACCESS).is_some() && xattr_of(f, ACL_DEFAULT).is_none());
    let st = after("mkdir-inherit");
    let d = node(&st, "/da/m0");
    assert_eq!(perms(d), 0o750);
    assert!(xattr_of(d, ACL_ACCESS).is_some() && xattr_of(d, ACL_DEFAULT).is_some());
}

/// An ACL change that publishes the attribute block and the mode with two fences
/// instead of one journal record ends where the real one does, but a crash between
/// them leaves the new ACL with the old mode: the checker must flag that state.
#[test]
fn checker_catches_a_torn_acl_and_mode() {
    let torn = Op {
        name: "acl-then-mode",
        run: |c, _| {
            let pool = c.fs.pool();
            let ino = c.s().stat("/x")?.ino;
            let mut attrs = xattr::load(pool, ino)?;
            xattr::put(&mut attrs, ACL_ACCESS.as_bytes(), &ops::acl_for_x(), 0)?;
            xattr::store_with(pool, ino, 0, &attrs, &[])?;
            let at = pool.layout.inode_addr(ino) + inode::MODE;
            let mode = (pool.pm.load_u64(at) & !0o777) | 0o660;
            let mut b = pool.pm.batch();
            b.write_u64(at, mode);
            let _ = b.persist();
            Ok(())
        },
        times: false,
    };
    let real = find(&all_ops(), "acl-access-extended");
    assert!(
        state_after(torn).same(&state_after(real), false),
        "the torn operation must end where the real one does"
    );
    let st = run_workload("torn acl", &[(torn, 0)], 0, &Config::from_env());
    assert!(
        st.total_violations > 0,
        "the torn ACL update went unnoticed"
    );
    let what = &st.violations[0].what;
    assert!(
        what.contains("mode") && what.contains("xattr system.posix_acl_access"),
        "{}",
        st.report(3)
    );
}
