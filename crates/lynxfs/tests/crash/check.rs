//! The checker: run a workload on a recording pool, replay its log over the starting
//! image, and judge every crash image against the states captured at operation
//! boundaries.

use std::collections::{BTreeMap, HashMap};

use lynxfs::format::Layout;
use lynxfs::pmem::{Event, RecordingBackend};
use lynxfs::{Fs, MkfsOptions};

use super::ops::{setup, Ctx, Op};
use super::replay::{subsets, InFlight, Replay, Rng};
use super::state::{capture, examine, invariants, State};

#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Enumerate every subset up to this many in-flight units.
    pub exhaustive_max: usize,
    /// Subsets tried beyond "none" and "all" above that.
    pub samples: usize,
    pub seed: u64,
}

impl Config {
    /// The default run, or the long one with `LYNXFS_LONG=1`.
    pub fn from_env() -> Config {
        let long = std::env::var("LYNXFS_LONG").is_ok_and(|v| v == "1");
        Config {
            exhaustive_max: 12,
            samples: if long { 2000 } else { 1000 },
            seed: 0x1f5_c0de,
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
    pub violations: u64,
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
            let e = self.per_op.entry(k).or_default();
            e.workloads += v.workloads;
            e.points += v.points;
            e.images += v.images;
            e.opened += v.opened;
            e.violations += v.violations;
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

    pub fn table(&self, title: &str) -> String {
        let mut s = format!(
            "\n== crash checker: {title} ==\n{:<26} {:>9} {:>7} {:>9} {:>9} {:>10}\n",
            "operation", "workloads", "points", "images", "opened", "violations"
        );
        let mut tot = OpStats::default();
        for (k, v) in &self.per_op {
            s += &format!(
                "{:<26} {:>9} {:>7} {:>9} {:>9} {:>10}\n",
                k, v.workloads, v.points, v.images, v.opened, v.violations
            );
            tot.workloads += v.workloads;
            tot.points += v.points;
            tot.images += v.images;
            tot.opened += v.opened;
            tot.violations += v.violations;
        }
        s += &format!(
            "{:<26} {:>9} {:>7} {:>9} {:>9} {:>10}\n",
            "TOTAL", tot.workloads, tot.points, tot.images, tot.opened, tot.violations
        );
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

fn describe_subset(l: &Layout, fl: &[InFlight], s: &[bool]) -> String {
    let on = s.iter().filter(|&&x| x).count();
    let (word, pick) = if on <= fl.len() - on {
        ("reached the media", true)
    } else {
        ("did NOT reach the media", false)
    };
    let list: Vec<String> = fl
        .iter()
        .zip(s)
        .filter(|(_, &x)| x == pick)
        .take(8)
        .map(|(f, _)| region(l, f.off()))
        .collect();
    let more = if fl.iter().zip(s).filter(|(_, &x)| x == pick).count() > 8 {
        " ..."
    } else {
        ""
    };
    format!(
        "{on} of {} in-flight units reached the media; {word}: {}{more}",
        fl.len(),
        list.join(" ")
    )
}

/// A fresh in-memory pool holding the starting tree, with its recorder.
pub fn fresh() -> (Fs<RecordingBackend>, RecordingBackend) {
    let rec = RecordingBackend::new();
    let mut o = MkfsOptions::new(POOL);
    o.lanes = 1;
    let fs = Fs::in_memory(&o, rec.clone()).expect("in-memory pool");
    (fs, rec)
}

/// Run `steps` after the standard setup and check every crash image they allow.
///
/// Crash points of the steps before `from` are not judged (a sequence's first step
/// from the same start is the single-operation workload, already checked).
pub fn run_workload(name: &str, steps: &[(Op, usize)], from: usize, cfg: &Config) -> Stats {
    let mut stats = Stats::default();
    let (fs, rec) = fresh();
    let layout = fs.pool().layout;
    let c = Ctx::new(&fs);
    setup(&c);
    let s0 = capture(&fs).expect("capture after setup");
    invariants(&fs, &s0).expect("invariants after setup");
    let base = fs.pool().pm.snapshot();
    rec.take();
    let mut states = vec![s0];
    let mut events: Vec<Vec<Event>> = Vec::new();
    for (k, &(op, i)) in steps.iter().enumerate() {
        let r = (op.run)(&c, i);
        events.push(rec.take());
        let st = capture(&fs).expect("capture of the live file system");
        assert!(rec.is_empty(), "reading the state wrote to the pool");
        if r.is_err() && !st.same(&states[k], true) {
            stats.violation(Violation {
                workload: name.into(),
                step: k,
                op: op.name,
                point: "live run".into(),
                subset: "-".into(),
                what: format!(
                    "the call failed ({:?}) but changed the state: {}",
                    r,
                    st.diff(&states[k])
                ),
            });
        }
        states.push(st);
    }
    for &(op, _) in &steps[from..] {
        stats.per_op.entry(op.name).or_default().workloads += 1;
    }
    let times = steps.iter().all(|(o, _)| o.times);
    let mut rp = Replay::new(base);
    let mut cache: HashMap<u64, Result<State, String>> = HashMap::new();
    let mut rng = Rng::new(
        cfg.seed
            ^ name
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64)),
    );
    let mut judge = |rp: &mut Replay,
                     stats: &mut Stats,
                     k: usize,
                     op: &'static str,
                     point: String,
                     window: &[usize]| {
        let fl = rp.in_flight();
        let subs = subsets(fl.len(), cfg.exhaustive_max, cfg.samples, &mut rng);
        let e = stats.per_op.entry(op).or_default();
        e.points += 1;
        e.images += subs.len() as u64;
        for s in &subs {
            let print = rp.print_with(&fl, s);
            let outcome = cache.entry(print).or_insert_with(|| {
                let e = stats.per_op.entry(op).or_default();
                e.opened += 1;
                // The clean close and reopen doubles the cost of an image (mapping a
                // pool is what costs): do it for "none", "all" and every 8th image.
                let ends = s.iter().all(|&x| x) || s.iter().all(|&x| !x);
                let reopen = ends || e.opened.is_multiple_of(8);
                rp.with_image(&fl, s, |img| examine(img, reopen))
            });
            let what = match outcome {
                Ok(st) if window.iter().any(|&w| st.same(&states[w], times)) => continue,
                Ok(st) => window
                    .iter()
                    .map(|&w| {
                        format!(
                            "state is not the one after {w} step(s): {}",
                            st.diff(&states[w])
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n  "),
                Err(e) => e.clone(),
            };
            stats.violation(Violation {
                workload: name.into(),
                step: k,
                op,
                point: point.clone(),
                subset: describe_subset(&layout, &fl, s),
                what,
            });
        }
    };
    for (k, &(op, _)) in steps.iter().enumerate() {
        if k < from {
            events[k].iter().for_each(|ev| rp.apply(ev));
            continue;
        }
        judge(&mut rp, &mut stats, k, op.name, "start".into(), &[k, k + 1]);
        let mut fences = 0;
        for (j, ev) in events[k].iter().enumerate() {
            if *ev == Event::Fence {
                let point = format!("before fence {fences} (event {j} of {})", events[k].len());
                judge(&mut rp, &mut stats, k, op.name, point, &[k, k + 1]);
                fences += 1;
            }
            rp.apply(ev);
        }
        // The call has returned: it must be durable.
        let point = format!("after the call returned ({fences} fences)");
        judge(&mut rp, &mut stats, k, op.name, point, &[k + 1]);
    }
    drop(c);
    stats
}
