//! The checker: run a workload on a recording pool, replay its log over the starting
//! image, and judge every crash image against the states captured at operation
//! boundaries.

use std::collections::{BTreeMap, HashMap, HashSet};

use lynxfs::format::Layout;
use lynxfs::pmem::{Event, RecordingBackend, Tagged};
use lynxfs::{DataMode, Fs, MkfsOptions};

use super::ops::{setup, Ctx, Op};
use super::replay::{choices, Choice, InFlight, Replay, Rng, DURABLE, MID};
use super::state::{capture, examine, invariants, State};

#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Enumerate every subset up to this many in-flight units.
    pub exhaustive_max: usize,
    /// Subsets tried beyond "none" and "all" above that.
    pub samples: usize,
    pub seed: u64,
    /// Crash images per workload whose recovery is itself crashed (at every fence of
    /// recovery, with up to `2^6` in-flight choices each, else 24 sampled).
    pub recrash_images: usize,
    /// The pool's data mode, and so the promise a write in flight is judged by:
    /// atomic, the state before or after; inplace, also any mix of their bytes with
    /// the metadata of one of them (`State::torn_between`).
    pub data: DataMode,
    /// The pool's size and inode count (`None`: mkfs's default), when a workload needs
    /// more than [`POOL`] holds (a directory of over a thousand names).
    pub pool: (u64, Option<u64>),
}

impl Config {
    /// The default run, or the long one with `LYNXFS_LONG=1`.
    pub fn from_env() -> Config {
        let long = std::env::var("LYNXFS_LONG").is_ok_and(|v| v == "1");
        Config {
            exhaustive_max: 12,
            samples: if long { 2000 } else { 1000 },
            seed: 0x1f5_c0de,
            recrash_images: if long { usize::MAX } else { 6 },
            data: DataMode::Atomic,
            pool: (POOL, None),
        }
    }
}

pub fn long() -> bool {
    std::env::var("LYNXFS_LONG").is_ok_and(|v| v == "1")
}

pub const POOL: u64 = 1 << 20;

#[derive(Clone, Debug, Default)]
pub struct OpStats {
    pub workloads: u64,
    pub points: u64,
    /// Crash images judged (a (crash point, subset) pair each).
    pub images: u64,
    /// Distinct images opened and examined (the rest were the same bytes again).
    pub opened: u64,
    /// Images with some unit at an in-between value (neither durable nor latest).
    pub mid: u64,
    /// Crash images whose recovery was crashed and run again.
    pub recrashed: u64,
    /// Images left by a crash during recovery, recovered again and compared.
    pub rec_images: u64,
    pub violations: u64,
    /// The persistence cost of one run of the operation (its first workload's, one
    /// thread): stores, flushed cache lines, fences.
    pub cost: Option<Cost>,
}

/// What one run of an operation asked of the persistence layer, from the recording
/// backend's log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    pub stores: u64,
    /// Distinct 64-byte lines per flush, summed over the flushes.
    pub lines: u64,
    pub fences: u64,
}

impl Cost {
    /// Count `log`'s stores, flushed lines and fences.
    pub fn of(log: &[Tagged]) -> Cost {
        let mut c = Cost::default();
        for t in log {
            match t.event {
                Event::Store { .. } => c.stores += 1,
                Event::Flush { off, len } if len > 0 => {
                    c.lines += (off + len).div_ceil(64) - off / 64;
                }
                Event::Flush { .. } => {}
                Event::Fence => c.fences += 1,
                // Pools here keep their data in the pool; a data device's writes are
                // judged by tests/hybrid.rs.
                Event::DeviceWrite { .. } | Event::DeviceSync => {}
            }
        }
        c
    }
}

impl OpStats {
    fn add(&mut self, v: &OpStats) {
        self.workloads += v.workloads;
        self.points += v.points;
        self.images += v.images;
        self.opened += v.opened;
        self.mid += v.mid;
        self.recrashed += v.recrashed;
        self.rec_images += v.rec_images;
        self.violations += v.violations;
        self.cost = self.cost.or(v.cost);
    }
    fn row(&self, name: &str) -> String {
        let cost = match self.cost {
            Some(c) => format!("{:>7} {:>6} {:>7}", c.stores, c.lines, c.fences),
            None => format!("{:>7} {:>6} {:>7}", "-", "-", "-"),
        };
        format!(
            "{:<26} {:>9} {:>7} {:>9} {:>9} {:>7} {:>9} {:>9} {:>10} {cost}\n",
            name,
            self.workloads,
            self.points,
            self.images,
            self.opened,
            self.mid,
            self.recrashed,
            self.rec_images,
            self.violations
        )
    }
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub workload: String,
    pub step: usize,
    pub op: &'static str,
    pub point: String,
    pub subset: String,
    pub what: String,
}

#[derive(Default)]
pub struct Stats {
    pub per_op: BTreeMap<&'static str, OpStats>,
    pub violations: Vec<Violation>,
    pub total_violations: u64,
}

impl Stats {
    pub fn merge(&mut self, o: Stats) {
        for (k, v) in o.per_op {
            self.per_op.entry(k).or_default().add(&v);
        }
        self.total_violations += o.total_violations;
        self.violations.extend(o.violations);
    }

    fn violation(&mut self, v: Violation) {
        self.per_op.entry(v.op).or_default().violations += 1;
        self.total_violations += 1;
        if self.violations.len() < 50 {
            self.violations.push(v);
        }
    }

    /// Everything summed.
    pub fn total(&self) -> OpStats {
        let mut tot = OpStats::default();
        self.per_op.values().for_each(|v| tot.add(v));
        // Costs are per operation: a sum of them would mean nothing.
        tot.cost = None;
        tot
    }

    pub fn table(&self, title: &str) -> String {
        let mut s = format!(
            "\n== crash checker: {title} ==\n{:<26} {:>9} {:>7} {:>9} {:>9} {:>7} {:>9} {:>9} {:>10} {:>7} {:>6} {:>7}\n",
            "operation", "workloads", "points", "images", "opened", "mid", "recrashed", "rec-imgs",
            "violations", "stores", "lines", "fences"
        );
        for (k, v) in &self.per_op {
            s += &v.row(k);
        }
        s += &self.total().row("TOTAL");
        s
    }

    pub fn report(&self, first: usize) -> String {
        let mut kinds: BTreeMap<(String, &str, String), usize> = BTreeMap::new();
        for v in &self.violations {
            let what: String = v.what.chars().take(90).collect();
            *kinds.entry((v.workload.clone(), v.op, what)).or_default() += 1;
        }
        let mut s = String::from("kinds (of the first 50 kept):\n");
        for ((w, op, what), n) in &kinds {
            s += &format!("  {n:>3} x [{w}] {op}: {what}\n");
        }
        for v in self.violations.iter().take(first) {
            s += &format!(
                "VIOLATION in [{}] step {} ({}) at {}\n  subset: {}\n  {}\n",
                v.workload, v.step, v.op, v.point, v.subset, v.what
            );
        }
        s
    }
}

/// Name the pool region at `off` (for reports).
pub fn region(l: &Layout, off: u64) -> String {
    const INODE_FIELDS: [&str; 16] = [
        "ino", "mode", "owner", "nlink", "size", "atime", "mtime", "ctime", "btime", "gen",
        "dentry", "nv_ptr", "xattr", "rdev", "map", "dir_log",
    ];
    if off < l.journal_off {
        format!("superblock+{off}")
    } else if off < l.state_off {
        let j = off - l.journal_off;
        format!("journal{}+{}", j / 16384, j % 16384)
    } else if off < l.inode_off {
        format!("saved-state+{}", off - l.state_off)
    } else if off < l.dentry_off {
        let (ino, f) = ((off - l.inode_off) / 256, (off - l.inode_off) % 256);
        let name = match f / 8 {
            i @ 0..=15 => INODE_FIELDS[i as usize].to_string(),
            16..=23 => format!("areaA+{}", f - 128),
            _ => format!("areaB+{}", f - 192),
        };
        format!("inode{ino}.{name}")
    } else if off < l.data_off {
        let (id, f) = ((off - l.dentry_off) / 320, (off - l.dentry_off) % 320);
        format!("dentry{id}+{f}")
    } else {
        let (b, f) = ((off - l.data_off) / 4096, (off - l.data_off) % 4096);
        format!("block{b}+{f}")
    }
}

/// Which in-flight units an image took past their durable value (for reports).
fn describe_choice(l: &Layout, fl: &[InFlight], c: &[Choice]) -> String {
    let on = c.iter().filter(|&&x| x != DURABLE).count();
    let (word, pick): (&str, fn(Choice) -> bool) = if on <= fl.len() - on {
        ("reached the media", |x| x != DURABLE)
    } else {
        ("did NOT reach the media", |x| x == DURABLE)
    };
    let list = |keep: &dyn Fn(Choice) -> bool| -> String {
        let names: Vec<String> = fl
            .iter()
            .zip(c)
            .filter(|(_, &x)| keep(x))
            .map(|(f, _)| region(l, f.off()))
            .collect();
        let more = if names.len() > 8 { " ..." } else { "" };
        format!("{}{more}", names[..names.len().min(8)].join(" "))
    };
    let mid = list(&|x| x >= MID);
    let mid = if mid.is_empty() {
        String::new()
    } else {
        format!("; at an in-between value: {mid}")
    };
    format!(
        "{on} of {} in-flight units reached the media; {word}: {}{mid}",
        fl.len(),
        list(&pick)
    )
}

/// A fresh in-memory pool with `lanes` lanes holding nothing, with its recorder.
pub fn fresh_pool(lanes: u32) -> (Fs<RecordingBackend>, RecordingBackend) {
    fresh_pool_in(lanes, DataMode::Atomic)
}

/// [`fresh_pool`] made with data mode `data`.
pub fn fresh_pool_in(lanes: u32, data: DataMode) -> (Fs<RecordingBackend>, RecordingBackend) {
    fresh_pool_sized(lanes, data, (POOL, None))
}

fn fresh_pool_sized(
    lanes: u32,
    data: DataMode,
    (size, inodes): (u64, Option<u64>),
) -> (Fs<RecordingBackend>, RecordingBackend) {
    let rec = RecordingBackend::new();
    let mut o = MkfsOptions::new(size);
    o.inodes = inodes;
    o.lanes = lanes;
    o.data = data;
    let fs = Fs::in_memory(&o, rec.clone()).expect("in-memory pool");
    (fs, rec)
}

/// True when recovery's log changed more than the superblock (crashing such a
/// recovery can leave an image the crash image itself is not).
fn recovery_did_work(l: &Layout, log: &[Tagged]) -> bool {
    log.iter()
        .any(|t| matches!(t.event, Event::Store { off, .. } if off >= l.journal_off))
}

/// A crash image kept for crashing its recovery, and where it came from.
struct Kept {
    img: Vec<u8>,
    log: Vec<Tagged>,
    state: State,
    op: &'static str,
    step: usize,
    point: String,
    subset: String,
}

/// Judges one workload's crash images against the states captured at its operation
/// boundaries, remembering each distinct image's outcome.
pub struct Judge<'c> {
    name: String,
    layout: Layout,
    cfg: &'c Config,
    states: Vec<State>,
    times: bool,
    cache: HashMap<u64, Result<State, String>>,
    rng: Rng,
    /// A uniform sample (reservoir) of the images whose recovery did work.
    kept: Vec<Kept>,
    candidates: usize,
    /// Compare inode numbers only as "which names share an inode".
    relabel: bool,
    pub stats: Stats,
}

impl<'c> Judge<'c> {
    pub fn new(
        name: &str,
        layout: Layout,
        cfg: &'c Config,
        states: Vec<State>,
        times: bool,
    ) -> Self {
        let seed = name
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
        Judge {
            name: name.into(),
            layout,
            cfg,
            states,
            times,
            cache: HashMap::new(),
            rng: Rng::new(cfg.seed ^ seed),
            kept: Vec::new(),
            candidates: 0,
            relabel: false,
            stats: Stats::default(),
        }
    }

    /// Judge every image the replay allows now: each must recover to one of the
    /// states `window` names.
    pub fn point(
        &mut self,
        rp: &mut Replay,
        step: usize,
        op: &'static str,
        point: String,
        window: &[usize],
    ) {
        let fl = rp.in_flight();
        let chs = choices(
            &fl,
            self.cfg.exhaustive_max,
            self.cfg.samples,
            &mut self.rng,
        );
        let e = self.stats.per_op.entry(op).or_default();
        e.points += 1;
        e.images += chs.len() as u64;
        e.mid += chs.iter().filter(|c| c.iter().any(|&x| x >= MID)).count() as u64;
        for c in &chs {
            let print = rp.print_with(&fl, c);
            if !self.cache.contains_key(&print) {
                let e = self.stats.per_op.entry(op).or_default();
                e.opened += 1;
                // The clean close and reopen doubles the cost of an image (mapping a
                // pool is what costs): do it for "none", "all" and every 8th image.
                let ends = c.iter().all(|&x| x == DURABLE) || c.iter().all(|&x| x != DURABLE);
                let reopen = ends || e.opened.is_multiple_of(8);
                let outcome = rp.with_image(&fl, c, |img| {
                    examine(img, reopen).map(|(st, log)| {
                        if recovery_did_work(&self.layout, &log) {
                            let subset = describe_choice(&self.layout, &fl, c);
                            self.keep(img, log, &st, op, step, &point, subset);
                        }
                        st
                    })
                });
                self.cache.insert(print, outcome);
            }
            let what = match &self.cache[&print] {
                Ok(st) => {
                    let st = if self.relabel {
                        st.relabeled()
                    } else {
                        st.clone()
                    };
                    if window.iter().any(|&w| st.same(&self.states[w], self.times)) {
                        continue;
                    }
                    if let ([a, b], DataMode::Inplace) = (window, self.cfg.data) {
                        let (a, b) = (&self.states[*a], &self.states[*b]);
                        if st.torn_between(a, b, self.times) {
                            continue;
                        }
                    }
                    window
                        .iter()
                        .map(|&w| {
                            format!(
                                "state is not the one after {w} step(s): {}",
                                st.diff(&self.states[w])
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n  ")
                }
                Err(e) => e.clone(),
            };
            let subset = describe_choice(&self.layout, &fl, c);
            self.violation(step, op, point.clone(), subset, what);
        }
    }

    /// From now on, judge states by which names share an inode, not by the numbers
    /// (two threads' allocations depend on their order).
    pub fn compare_inodes_by_names(&mut self) {
        self.relabel = true;
        self.states = self.states.iter().map(State::relabeled).collect();
    }

    /// Judge against `st` as the `k`th state from now on (relabeled like the others).
    pub fn set_state(&mut self, k: usize, st: &State) {
        self.states[k] = if self.relabel {
            st.relabeled()
        } else {
            st.clone()
        };
    }

    /// The `k`th captured state.
    pub fn state(&self, k: usize) -> &State {
        &self.states[k]
    }

    pub fn violation(
        &mut self,
        step: usize,
        op: &'static str,
        point: String,
        subset: String,
        what: String,
    ) {
        self.stats.violation(Violation {
            workload: self.name.clone(),
            step,
            op,
            point,
            subset,
            what,
        });
    }

    /// Reservoir sampling: each image whose recovery did work is equally likely to be
    /// among the `recrash_images` kept.
    #[allow(clippy::too_many_arguments)]
    fn keep(
        &mut self,
        img: &[u8],
        log: Vec<Tagged>,
        st: &State,
        op: &'static str,
        step: usize,
        point: &str,
        subset: String,
    ) {
        self.candidates += 1;
        let slot = if self.kept.len() < self.cfg.recrash_images {
            self.kept.len()
        } else {
            self.rng.below(self.candidates as u64) as usize
        };
        if slot >= self.cfg.recrash_images {
            return;
        }
        let k = Kept {
            img: img.to_vec(),
            log,
            state: st.clone(),
            op,
            step,
            point: point.into(),
            subset,
        };
        if slot == self.kept.len() {
            self.kept.push(k);
        } else {
            self.kept[slot] = k;
        }
    }

    /// Crash the recovery of `img` (which `log` recorded and which gave `state`) too,
    /// whatever the sampling kept.
    pub fn check_recovery(&mut self, img: &[u8], log: Vec<Tagged>, state: &State) {
        self.kept.push(Kept {
            img: img.to_vec(),
            log,
            state: state.clone(),
            op: "given",
            step: 0,
            point: "given image".into(),
            subset: "-".into(),
        });
    }

    /// Crash the recovery of every kept image at each of its fences (and once it has
    /// returned), recover that image again and require exactly the state the
    /// uninterrupted recovery gave.
    pub fn crash_recoveries(mut self) -> Stats {
        for k in std::mem::take(&mut self.kept) {
            self.stats.per_op.entry(k.op).or_default().recrashed += 1;
            let mut rp = Replay::new(k.img.clone());
            let mut seen: HashSet<u64> = HashSet::from([rp.print_with(&[], &[])]);
            let mut fences = 0;
            for ev in &k.log {
                if ev.event == Event::Fence {
                    let at = format!("before recovery fence {fences} of {}", k.log.len());
                    self.recovery_point(&mut rp, &mut seen, &k, at);
                    fences += 1;
                }
                rp.apply(ev);
            }
            self.recovery_point(&mut rp, &mut seen, &k, "after recovery returned".into());
        }
        self.stats
    }

    fn recovery_point(&mut self, rp: &mut Replay, seen: &mut HashSet<u64>, k: &Kept, at: String) {
        let fl = rp.in_flight();
        for c in choices(&fl, 6, 24, &mut self.rng) {
            if !seen.insert(rp.print_with(&fl, &c)) {
                continue;
            }
            self.stats.per_op.entry(k.op).or_default().rec_images += 1;
            let what = match rp.with_image(&fl, &c, |img| examine(img, false)) {
                Ok((st, _)) if st.same(&k.state, true) => continue,
                Ok((st, _)) => format!(
                    "recovery run again gives another state than the uninterrupted one: {}",
                    st.diff(&k.state)
                ),
                Err(e) => format!("recovery run again: {e}"),
            };
            let point = format!("{}; recovery crashed {at}", k.point);
            let subset = format!(
                "{}; in recovery: {}",
                k.subset,
                describe_choice(&self.layout, &fl, &c)
            );
            self.violation(k.step, k.op, point, subset, what);
        }
    }
}

/// Run `steps` after the standard setup and check every crash image they allow.
///
/// Crash points of the steps before `from` are not judged (a sequence's first step
/// from the same start is the single-operation workload, already checked).
pub fn run_workload(name: &str, steps: &[(Op, usize)], from: usize, cfg: &Config) -> Stats {
    let (fs, rec) = fresh_pool_sized(1, cfg.data, cfg.pool);
    let layout = fs.pool().layout;
    let c = Ctx::new(&fs);
    setup(&c);
    let s0 = capture(&fs).expect("capture after setup");
    invariants(&fs, &s0).expect("invariants after setup");
    let base = fs.pool().pm.snapshot();
    rec.take();
    let mut states = vec![s0];
    let mut events: Vec<Vec<Tagged>> = Vec::new();
    let mut live = Vec::new();
    for (k, &(op, i)) in steps.iter().enumerate() {
        let r = (op.run)(&c, i);
        events.push(rec.take_tagged());
        let st = capture(&fs).expect("capture of the live file system");
        assert!(rec.is_empty(), "reading the state wrote to the pool");
        if r.is_err() && !st.same(&states[k], true) {
            live.push((
                k,
                op.name,
                format!(
                    "the call failed ({:?}) but changed the state: {}",
                    r,
                    st.diff(&states[k])
                ),
            ));
        }
        states.push(st);
    }
    drop(c);
    let times = steps.iter().all(|(o, _)| o.times);
    let mut j = Judge::new(name, layout, cfg, states, times);
    for (k, op, what) in live {
        j.violation(k, op, "live run".into(), "-".into(), what);
    }
    for (k, &(op, _)) in steps.iter().enumerate().skip(from) {
        let e = j.stats.per_op.entry(op.name).or_default();
        e.workloads += 1;
        e.cost = e.cost.or(Some(Cost::of(&events[k])));
    }
    let mut rp = Replay::new(base);
    for (k, &(op, _)) in steps.iter().enumerate() {
        if k < from {
            events[k].iter().for_each(|ev| rp.apply(ev));
            continue;
        }
        j.point(&mut rp, k, op.name, "start".into(), &[k, k + 1]);
        let mut fences = 0;
        for (n, ev) in events[k].iter().enumerate() {
            if ev.event == Event::Fence {
                let point = format!("before fence {fences} (event {n} of {})", events[k].len());
                j.point(&mut rp, k, op.name, point, &[k, k + 1]);
                fences += 1;
            }
            rp.apply(ev);
        }
        // The call has returned: it must be durable.
        let point = format!("after the call returned ({fences} fences)");
        j.point(&mut rp, k, op.name, point, &[k + 1]);
    }
    j.crash_recoveries()
}
