//! Replaying a recorded persistence log over a base image, and the crash images it
//! allows.
//!
//! The model is per 8-byte unit (8-aligned). A store changes the program's view
//! (`current`). A flush remembers the unit's value at that moment; the next fence *of
//! the same thread* makes that remembered value durable (a fence orders only its own
//! thread's flushes). Until then the cache may write the line back at any moment, so a
//! crash leaves every durable value, and each unit stored to since its durable point
//! holds its durable value, its latest value, or any value it held in between (a value
//! flushed and then overwritten before the fence, or simply evicted): any combination
//! of those per-unit choices is a crash image.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::thread::ThreadId;

use lynxfs::pmem::{Event, Tagged};

pub const UNIT: u64 = 8;

/// A deterministic random source (splitmix64): the test needs no crate for this.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
    /// Uniform in `0..n` (n > 0); the tiny bias of the modulo does not matter here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The fingerprint contribution of one unit holding one value. An image's fingerprint
/// is the XOR of its units' contributions, so changing a unit updates it in O(1).
fn unit_print(unit: u64, val: [u8; 8]) -> u64 {
    mix(unit.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ mix(u64::from_le_bytes(val) ^ 0x5151))
}

/// One unit whose media value is not settled at a crash point.
#[derive(Clone, Debug)]
pub struct InFlight {
    pub unit: u64,
    pub durable: [u8; 8],
    pub latest: [u8; 8],
    /// Values held in between, neither durable nor latest, in program order.
    pub mid: Vec<[u8; 8]>,
}

/// Which value a unit holds in a crash image: `DURABLE`, `LATEST` or `MID + k` for
/// `mid[k]`.
pub type Choice = u8;
pub const DURABLE: Choice = 0;
pub const LATEST: Choice = 1;
pub const MID: Choice = 2;

impl InFlight {
    pub fn off(&self) -> u64 {
        self.unit * UNIT
    }
    /// How many values the unit may hold.
    pub fn options(&self) -> usize {
        2 + self.mid.len()
    }
    pub fn value(&self, c: Choice) -> [u8; 8] {
        match c {
            DURABLE => self.durable,
            LATEST => self.latest,
            m => self.mid[(m - MID) as usize],
        }
    }
}

pub struct Replay {
    durable: Vec<u8>,
    current: Vec<u8>,
    /// Per thread: units flushed since its last fence, with the value at the flush
    /// and the store sequence number the flush saw.
    flushed: HashMap<ThreadId, HashMap<u64, ([u8; 8], u64)>>,
    /// Units stored to since their durable point: each store's (sequence number,
    /// value after it), in program order.
    pending: BTreeMap<u64, Vec<(u64, [u8; 8])>>,
    seq: u64,
    print: u64,
}

impl Replay {
    pub fn new(base: Vec<u8>) -> Replay {
        assert_eq!(
            base.len() as u64 % UNIT,
            0,
            "pool length is a multiple of 8"
        );
        let print = base
            .chunks_exact(UNIT as usize)
            .enumerate()
            .fold(0u64, |h, (u, c)| {
                h ^ unit_print(u as u64, c.try_into().expect("8"))
            });
        Replay {
            current: base.clone(),
            durable: base,
            flushed: HashMap::new(),
            pending: BTreeMap::new(),
            seq: 0,
            print,
        }
    }

    fn unit_val(img: &[u8], unit: u64) -> [u8; 8] {
        let o = (unit * UNIT) as usize;
        img[o..o + UNIT as usize].try_into().expect("8")
    }

    /// The units `[off, off+len)` touches.
    fn units(off: u64, len: u64) -> std::ops::Range<u64> {
        if len == 0 {
            return 0..0;
        }
        off / UNIT..(off + len).div_ceil(UNIT)
    }

    pub fn apply(&mut self, t: &Tagged) {
        match &t.event {
            Event::Store { off, bytes } => {
                let o = *off as usize;
                self.current[o..o + bytes.len()].copy_from_slice(bytes);
                self.seq += 1;
                for u in Self::units(*off, bytes.len() as u64) {
                    let v = Self::unit_val(&self.current, u);
                    self.pending.entry(u).or_default().push((self.seq, v));
                }
            }
            Event::Flush { off, len } => {
                let mine = self.flushed.entry(t.thread).or_default();
                for u in Self::units(*off, *len) {
                    mine.insert(u, (Self::unit_val(&self.current, u), self.seq));
                }
            }
            Event::Fence => {
                let mine = self.flushed.remove(&t.thread).unwrap_or_default();
                for (u, (v, at)) in mine {
                    let o = (u * UNIT) as usize;
                    let old = Self::unit_val(&self.durable, u);
                    if old != v {
                        self.print ^= unit_print(u, old) ^ unit_print(u, v);
                        self.durable[o..o + UNIT as usize].copy_from_slice(&v);
                    }
                    // The media now holds the flushed value or a later one.
                    if let Some(h) = self.pending.get_mut(&u) {
                        h.retain(|&(s, _)| s > at);
                        if h.iter().all(|&(_, x)| x == v) {
                            self.pending.remove(&u);
                        }
                    }
                }
            }
            // The pool's image only: a data device's writes are judged by
            // tests/hybrid.rs (these workloads have none).
            Event::DeviceWrite { .. } | Event::DeviceSync => {}
        }
    }

    /// Units whose media value is not settled, in program order of their last store.
    pub fn in_flight(&self) -> Vec<InFlight> {
        let mut v: Vec<(u64, InFlight)> = self
            .pending
            .iter()
            .filter_map(|(&u, h)| {
                let (d, l) = (
                    Self::unit_val(&self.durable, u),
                    Self::unit_val(&self.current, u),
                );
                let mut mid: Vec<[u8; 8]> = Vec::new();
                for &(_, x) in h {
                    if x != d && x != l && !mid.contains(&x) {
                        mid.push(x);
                    }
                }
                (d != l || !mid.is_empty()).then(|| {
                    let seq = h.last().map_or(0, |&(s, _)| s);
                    let f = InFlight {
                        unit: u,
                        durable: d,
                        latest: l,
                        mid,
                    };
                    (seq, f)
                })
            })
            .collect();
        v.sort_by_key(|(s, _)| *s);
        v.into_iter().map(|(_, f)| f).collect()
    }

    /// The durable image (the crash image when nothing in flight reached the media).
    pub fn durable(&self) -> &[u8] {
        &self.durable
    }

    /// The program's view: what the image is when everything reached the media.
    pub fn current(&self) -> &[u8] {
        &self.current
    }

    /// Fingerprint of the durable image with each unit of `fl` at its chosen value.
    pub fn print_with(&self, fl: &[InFlight], choice: &[Choice]) -> u64 {
        fl.iter()
            .zip(choice)
            .filter(|(_, &c)| c != DURABLE)
            .fold(self.print, |h, (f, &c)| {
                h ^ unit_print(f.unit, f.durable) ^ unit_print(f.unit, f.value(c))
            })
    }

    /// Run `f` on the crash image: the durable image with each unit of `fl` at its
    /// chosen value (built in place and undone afterwards).
    pub fn with_image<R>(
        &mut self,
        fl: &[InFlight],
        choice: &[Choice],
        f: impl FnOnce(&[u8]) -> R,
    ) -> R {
        let put = |img: &mut [u8], u: u64, v: &[u8; 8]| {
            let o = (u * UNIT) as usize;
            img[o..o + UNIT as usize].copy_from_slice(v);
        };
        for (x, &c) in fl.iter().zip(choice).filter(|(_, &c)| c != DURABLE) {
            put(&mut self.durable, x.unit, &x.value(c));
        }
        let r = f(&self.durable);
        for (x, _) in fl.iter().zip(choice).filter(|(_, &c)| c != DURABLE) {
            put(&mut self.durable, x.unit, &x.durable);
        }
        r
    }
}

/// Which crash images to try at one crash point, as one choice per in-flight unit.
///
/// Every combination when there are at most `2^exhaustive_max` of them. Otherwise the
/// durable/latest patterns of [`subsets`], plus, for each in-between value of each
/// unit, that value alone and that value with everything else latest, plus (at most
/// `samples` in all) sampled patterns with their "latest" units moved to a random
/// in-between value where one exists.
pub fn choices(
    fl: &[InFlight],
    exhaustive_max: usize,
    samples: usize,
    rng: &mut Rng,
) -> Vec<Vec<Choice>> {
    let n = fl.len();
    let total = fl
        .iter()
        .try_fold(1u64, |p, f| p.checked_mul(f.options() as u64))
        .filter(|&p| p <= 1 << exhaustive_max);
    if let Some(total) = total {
        return (0..total)
            .map(|mut m| {
                fl.iter()
                    .map(|f| {
                        let k = f.options() as u64;
                        let c = (m % k) as Choice;
                        m /= k;
                        c
                    })
                    .collect()
            })
            .collect();
    }
    let base: Vec<Vec<Choice>> = subsets(n, exhaustive_max, samples, rng)
        .into_iter()
        .map(|s| s.into_iter().map(Choice::from).collect())
        .collect();
    let with_mid: Vec<usize> = (0..n).filter(|&i| !fl[i].mid.is_empty()).collect();
    if with_mid.is_empty() {
        return base;
    }
    let mut seen: HashSet<Vec<Choice>> = base.iter().cloned().collect();
    let mut out = base;
    let budget = out.len() + samples;
    let mut push = |c: Vec<Choice>, out: &mut Vec<Vec<Choice>>| {
        if out.len() < budget && seen.insert(c.clone()) {
            out.push(c);
        }
    };
    for &i in &with_mid {
        for k in 0..fl[i].mid.len() {
            for rest in [DURABLE, LATEST] {
                let mut c = vec![rest; n];
                c[i] = MID + k as Choice;
                push(c, &mut out);
            }
        }
    }
    for j in 0..samples {
        let mut c = out[j % out.len()].clone();
        for &i in &with_mid {
            if c[i] == LATEST && rng.chance(1, 2) {
                c[i] = MID + rng.below(fl[i].mid.len() as u64) as Choice;
            }
        }
        push(c, &mut out);
    }
    out
}

/// Which subsets of `n` in-flight units to try: all of them up to `exhaustive_max`
/// units, else "none", "all" and `samples` more: program-order prefixes (what a
/// machine that drains its caches in order would leave), all-but-one and only-one
/// variants, and random subsets of random density.
pub fn subsets(n: usize, exhaustive_max: usize, samples: usize, rng: &mut Rng) -> Vec<Vec<bool>> {
    if n <= exhaustive_max {
        return (0..1u64 << n)
            .map(|m| (0..n).map(|i| m >> i & 1 == 1).collect())
            .collect();
    }
    let mut out = vec![vec![false; n], vec![true; n]];
    let mut seen: std::collections::HashSet<Vec<bool>> = out.iter().cloned().collect();
    let mut push = |s: Vec<bool>, out: &mut Vec<Vec<bool>>| {
        if seen.insert(s.clone()) {
            out.push(s);
        }
    };
    let quarter = samples / 4;
    // Prefixes in program order.
    for k in 0..quarter.min(n - 1) {
        let k = if n - 1 <= quarter {
            k + 1
        } else {
            1 + rng.below(n as u64 - 1) as usize
        };
        push((0..n).map(|i| i < k).collect(), &mut out);
    }
    // All but one, only one.
    for j in 0..quarter {
        let u = rng.below(n as u64) as usize;
        let all_but = j % 2 == 0;
        push((0..n).map(|i| (i == u) != all_but).collect(), &mut out);
    }
    let mut tries = 0;
    while out.len() < samples + 2 && tries < samples * 20 {
        tries += 1;
        let p = 1 + rng.below(99);
        push((0..n).map(|_| rng.chance(p, 100)).collect(), &mut out);
    }
    out
}
