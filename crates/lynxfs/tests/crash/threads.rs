//! Two operations on two threads and two lanes, interleaved at fence granularity.
//!
//! Thread A (lane 0) and thread B (lane 1) run one operation each on a two-lane pool.
//! A scheduler ([`Turns`]) lets one thread run at a time and switches only at fences:
//! a schedule is the list of which thread runs each fence-delimited segment, so every
//! run is one deterministic interleaving. If the thread whose turn it is makes no
//! progress for a while (it waits for a lock the other thread holds), the waiting
//! thread gets a segment inserted; the run is then another real interleaving, counted
//! as "forced". A watchdog fails the test if a run still hangs.
//!
//! The recorded log (each event tagged with its thread; a fence makes only its own
//! thread's flushes durable) gives crash points before every fence of either thread and
//! where either call returned. A crash image must recover to a state where each
//! operation either happened or not (before both, A only, B only, both), and where an
//! operation whose call had returned did happen. "A only" and "B only" are captured by
//! running that operation alone on the same lane from the same tree.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use lynxfs::alloc::lane;
use lynxfs::pmem::{Event, RecordingBackend, Tagged};
use parking_lot::{Condvar, Mutex};

use super::check::{fresh_pool, Config, Judge, Stats};
use super::ops::{setup, Ctx, Op};
use super::replay::{Replay, Rng};
use super::state::{capture, invariants, State};

/// Threads A and B.
const A: usize = 0;
const B: usize = 1;

thread_local! {
    /// Which scheduled thread this is (recovery's and the main thread are none).
    static WHO: Cell<Option<usize>> = const { Cell::new(None) };
}

struct TurnState {
    /// Who runs each segment; past the end, whoever has not finished (A first).
    schedule: Vec<usize>,
    pos: usize,
    done: [bool; 2],
    forced: u64,
}

impl TurnState {
    fn owner(&self) -> usize {
        match self.schedule.get(self.pos) {
            Some(&o) if !self.done[o] => o,
            _ if !self.done[A] => A,
            _ => B,
        }
    }
}

/// The fence-granular scheduler.
pub struct Turns {
    st: Mutex<TurnState>,
    cv: Condvar,
}

/// How long the thread whose turn it is may make no progress before the turn passes.
const STUCK: Duration = Duration::from_millis(300);

impl Turns {
    fn new(schedule: Vec<usize>) -> Turns {
        Turns {
            st: Mutex::new(TurnState {
                schedule,
                pos: 0,
                done: [false; 2],
                forced: 0,
            }),
            cv: Condvar::new(),
        }
    }

    /// Block until it is `me`'s turn. If the thread whose turn it is makes no progress
    /// for `STUCK`, `me` gets a segment of its own inserted here (the other thread may
    /// wait for a lock `me` holds).
    fn wait(&self, me: usize) {
        let mut st = self.st.lock();
        while st.owner() != me {
            let pos = st.pos;
            let timed_out = self.cv.wait_for(&mut st, STUCK).timed_out();
            if timed_out && st.pos == pos && st.owner() != me {
                st.schedule.insert(pos, me);
                st.forced += 1;
                self.cv.notify_all();
            }
        }
    }

    /// The fence hook: the running thread's segment ends here.
    fn fenced(&self) {
        let Some(me) = WHO.with(Cell::get) else {
            return;
        };
        {
            let mut st = self.st.lock();
            if st.owner() == me {
                st.pos += 1;
                self.cv.notify_all();
            }
        }
        self.wait(me);
    }

    fn finish(&self, me: usize) {
        let mut st = self.st.lock();
        if st.owner() == me {
            st.pos += 1;
        }
        st.done[me] = true;
        self.cv.notify_all();
    }
}

/// Marks a thread finished when dropped.
struct Finished<'a>(&'a Turns, usize);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.finish(self.1);
    }
}

/// Ends the process if a concurrent run takes longer than this (an engine deadlock):
/// the test fails instead of hanging.
const WATCHDOG: Duration = Duration::from_secs(120);

/// Kill the process unless `f` returns within `WATCHDOG`.
fn watched<R>(what: &str, f: impl FnOnce() -> R) -> R {
    let _dog = lynxfs_test_support::watchdog(what, WATCHDOG);
    f()
}

/// One thread's part: an operation, its instance number and its lane.
#[derive(Clone, Copy)]
pub struct Part {
    pub op: Op,
    pub i: usize,
    pub lane: u32,
}

/// A fresh two-lane pool with the standard tree (built on lane 0).
fn started() -> (lynxfs::Fs<RecordingBackend>, RecordingBackend) {
    let (fs, rec) = fresh_pool(2);
    lane::pin(Some(0));
    setup(&Ctx::new(&fs));
    lane::pin(None);
    (fs, rec)
}

/// The state after `p` alone, and how many fences it made.
fn alone(p: Part) -> (State, usize) {
    let (fs, rec) = started();
    rec.take();
    lane::pin(Some(p.lane));
    let r = (p.op.run)(&Ctx::new(&fs), p.i);
    lane::pin(None);
    assert!(r.is_ok(), "{} alone failed: {r:?}", p.op.name);
    let fences = rec.take().iter().filter(|e| **e == Event::Fence).count();
    let st = capture(&fs).expect("capture");
    (st, fences)
}

/// The state after `first` then `second`, each on its own lane, one after the other.
fn serial(first: Part, second: Part) -> State {
    let (fs, _rec) = started();
    let c = Ctx::new(&fs);
    for p in [first, second] {
        lane::pin(Some(p.lane));
        let r = (p.op.run)(&c, p.i);
        lane::pin(None);
        assert!(r.is_ok(), "{} in sequence failed: {r:?}", p.op.name);
    }
    capture(&fs).expect("capture")
}

/// One concurrent run under `schedule`: the log, where each call returned (an index
/// into the log), the states before and after both, and how often the turn was forced.
struct Run {
    base: Vec<u8>,
    log: Vec<Tagged>,
    returned: [usize; 2],
    before: State,
    after: State,
    forced: u64,
    layout: lynxfs::format::Layout,
}

fn run(parts: [Part; 2], schedule: Vec<usize>) -> Run {
    let (fs, rec) = started();
    let before = capture(&fs).expect("capture after setup");
    invariants(&fs, &before).expect("invariants after setup");
    let base = fs.pool().pm.snapshot();
    rec.take();
    let turns = Arc::new(Turns::new(schedule));
    let hook = turns.clone();
    rec.set_fence_hook(Some(Arc::new(move || hook.fenced())));
    let c = Ctx::new(&fs);
    let returned: Vec<usize> = std::thread::scope(|sc| {
        let hs: Vec<_> = parts
            .iter()
            .enumerate()
            .map(|(me, p)| {
                let (c, rec, turns) = (&c, &rec, &turns);
                sc.spawn(move || {
                    lane::pin(Some(p.lane));
                    WHO.with(|w| w.set(Some(me)));
                    // Finished even if the operation panics, so the other thread
                    // is not left waiting for its turn.
                    let _done = Finished(turns, me);
                    turns.wait(me);
                    let r = (p.op.run)(c, p.i);
                    let at = rec.len();
                    assert!(r.is_ok(), "{} failed: {r:?}", p.op.name);
                    at
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("op thread"))
            .collect()
    });
    rec.set_fence_hook(None);
    let log = rec.take_tagged();
    let after = capture(&fs).expect("capture after both");
    invariants(&fs, &after).expect("invariants after both");
    let forced = turns.st.lock().forced;
    Run {
        layout: fs.pool().layout,
        base,
        log,
        returned: [returned[0], returned[1]],
        before,
        after,
        forced,
    }
}

/// The schedules tried for segment counts `na` and `nb`: one thread's first `k`
/// segments, then all of the other, then the rest (for every `k`, both ways round),
/// and `random` seeded shuffles.
pub fn schedules(na: usize, nb: usize, random: usize, rng: &mut Rng) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let nest = |outer: usize, n_out: usize, n_in: usize, k: usize| -> Vec<usize> {
        let inner = 1 - outer;
        let mut s = vec![outer; k];
        s.extend(std::iter::repeat_n(inner, n_in));
        s.extend(std::iter::repeat_n(outer, n_out - k));
        s
    };
    for k in 0..=na {
        out.push(nest(A, na, nb, k));
    }
    for k in 1..nb {
        out.push(nest(B, nb, na, k));
    }
    for _ in 0..random {
        let mut s: Vec<usize> = std::iter::repeat_n(A, na)
            .chain(std::iter::repeat_n(B, nb))
            .collect();
        for i in (1..s.len()).rev() {
            s.swap(i, rng.below(i as u64 + 1) as usize);
        }
        out.push(s);
    }
    out.sort();
    out.dedup();
    out
}

/// Which of the four states (0 before both, 1 A only, 2 B only, 3 both) a crash may
/// show, given which calls had returned.
fn window(a_returned: bool, b_returned: bool) -> Vec<usize> {
    (0..4)
        .filter(|&s| (s & 1 == 1 || !a_returned) && (s & 2 == 2 || !b_returned))
        .collect()
}

/// Check every crash image of `parts` run concurrently under each schedule. Returns
/// the stats, how often a turn was forced and how many schedules ran.
pub fn run_concurrent(parts: [Part; 2], random: usize, cfg: &Config) -> (Stats, u64, usize) {
    let name: &'static str =
        Box::leak(format!("{} || {}", parts[A].op.name, parts[B].op.name).into_boxed_str());
    let (sa, fa) = alone(parts[A]);
    let (sb, fb) = alone(parts[B]);
    // Where both may end: A's effect then B's, or B's then A's (the same state when
    // the two commute; a create after a default ACL was set inherits it, before not).
    let orders = [
        serial(parts[A], parts[B]).relabeled(),
        serial(parts[B], parts[A]).relabeled(),
    ];
    let mut rng = Rng::new(cfg.seed ^ name.len() as u64);
    let scheds = schedules(fa + 1, fb + 1, random, &mut rng);
    let n = scheds.len();
    let mut judge: Option<Judge> = None;
    let mut forced = 0;
    for schedule in scheds {
        let r = watched(name, || run(parts, schedule.clone()));
        forced += r.forced;
        let sched: String = schedule
            .iter()
            .map(|&t| if t == A { 'A' } else { 'B' })
            .collect();
        // One judge for all schedules: the states differ only in times, which are not
        // compared, and in inode numbers, compared only as names sharing an inode, and
        // "both" is this schedule's end, which must be one of the two serial orders'.
        let j = judge.get_or_insert_with(|| {
            let states = vec![r.before.clone(), sa.clone(), sb.clone(), r.after.clone()];
            let mut j = Judge::new(name, r.layout, cfg, states, false);
            j.compare_inodes_by_names();
            j
        });
        j.stats.per_op.entry(name).or_default().workloads += 1;
        let before = r.before.relabeled();
        if !j.state(0).same(&before, false) {
            let what = format!(
                "schedule {sched} starts elsewhere: {}",
                before.diff(j.state(0))
            );
            j.violation(0, name, "live run".into(), "-".into(), what);
        }
        let after = r.after.relabeled();
        if !orders.iter().any(|o| o.same(&after, false)) {
            let what = format!(
                "schedule {sched} ends in neither serial order's state: {}",
                after.diff(&orders[0])
            );
            j.violation(0, name, "live run".into(), "-".into(), what);
        }
        j.set_state(3, &r.after);
        let mut rp = Replay::new(r.base);
        let mut fences = 0;
        for (k, ev) in r.log.iter().enumerate() {
            let ret = [k >= r.returned[A], k >= r.returned[B]];
            if ev.event == Event::Fence {
                let point = format!("schedule {sched}, before fence {fences} (event {k})");
                j.point(&mut rp, 0, name, point, &window(ret[A], ret[B]));
                fences += 1;
            } else if k == r.returned[A] || k == r.returned[B] {
                let point = format!("schedule {sched}, a call returned (event {k})");
                j.point(&mut rp, 0, name, point, &window(ret[A], ret[B]));
            }
            rp.apply(ev);
        }
        let point = format!("schedule {sched}, both calls returned");
        j.point(&mut rp, 0, name, point, &[3]);
    }
    let stats = judge.map(Judge::crash_recoveries).unwrap_or_default();
    (stats, forced, n)
}
