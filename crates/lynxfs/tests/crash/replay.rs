//! Replaying a recorded persistence log over a base image, and the crash images it
//! allows.
//!
//! The model is per 8-byte unit (8-aligned). A store changes the program's view
//! (`current`). A flush remembers the unit's value at that moment; the next fence makes
//! that remembered value durable. A crash just before a fence (or at any other crash
//! point) leaves every durable value, and each unit written but not yet durable either
//! keeps its durable value or takes its latest value: any subset of the in-flight
//! units may have reached the media.

use std::collections::{BTreeMap, HashMap};

use lynxfs::pmem::Event;

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

/// One unit written but not yet durable at a crash point.
#[derive(Clone, Debug)]
pub struct InFlight {
    pub unit: u64,
    pub durable: [u8; 8],
    pub latest: [u8; 8],
}

impl InFlight {
    pub fn off(&self) -> u64 {
        self.unit * UNIT
    }
}

pub struct Replay {
    durable: Vec<u8>,
    current: Vec<u8>,
    /// Units flushed since the last fence, with the value they had at the flush.
    flushed: HashMap<u64, [u8; 8]>,
    /// Units stored to whose current value may differ from the durable one, with the
    /// sequence number of their last store (program order).
    touched: BTreeMap<u64, u64>,
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
            touched: BTreeMap::new(),
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

    pub fn apply(&mut self, ev: &Event) {
        match ev {
            Event::Store { off, bytes } => {
                let o = *off as usize;
                self.current[o..o + bytes.len()].copy_from_slice(bytes);
                self.seq += 1;
                for u in Self::units(*off, bytes.len() as u64) {
                    self.touched.insert(u, self.seq);
                }
            }
            Event::Flush { off, len } => {
                for u in Self::units(*off, *len) {
                    let v = Self::unit_val(&self.current, u);
                    self.flushed.insert(u, v);
                }
            }
            Event::Fence => {
                for (u, v) in std::mem::take(&mut self.flushed) {
                    let o = (u * UNIT) as usize;
                    let old = Self::unit_val(&self.durable, u);
                    if old != v {
                        self.print ^= unit_print(u, old) ^ unit_print(u, v);
                        self.durable[o..o + UNIT as usize].copy_from_slice(&v);
                    }
                }
                let (cur, dur) = (&self.current, &self.durable);
                self.touched
                    .retain(|&u, _| Self::unit_val(cur, u) != Self::unit_val(dur, u));
            }
        }
    }

    /// Units whose latest value is not durable, in program order of their last store.
    pub fn in_flight(&self) -> Vec<InFlight> {
        let mut v: Vec<(u64, InFlight)> = self
            .touched
            .iter()
            .filter_map(|(&u, &seq)| {
                let (d, l) = (
                    Self::unit_val(&self.durable, u),
                    Self::unit_val(&self.current, u),
                );
                (d != l).then_some((
                    seq,
                    InFlight {
                        unit: u,
                        durable: d,
                        latest: l,
                    },
                ))
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

    /// Fingerprint of the durable image with the units of `subset` at their latest.
    pub fn print_with(&self, fl: &[InFlight], subset: &[bool]) -> u64 {
        fl.iter()
            .zip(subset)
            .filter(|(_, &s)| s)
            .fold(self.print, |h, (f, _)| {
                h ^ unit_print(f.unit, f.durable) ^ unit_print(f.unit, f.latest)
            })
    }

    /// Run `f` on the crash image: the durable image with the units of `subset` at
    /// their latest values (built in place and undone afterwards).
    pub fn with_image<R>(
        &mut self,
        fl: &[InFlight],
        subset: &[bool],
        f: impl FnOnce(&[u8]) -> R,
    ) -> R {
        let put = |img: &mut [u8], u: u64, v: &[u8; 8]| {
            let o = (u * UNIT) as usize;
            img[o..o + UNIT as usize].copy_from_slice(v);
        };
        for (x, _) in fl.iter().zip(subset).filter(|(_, &s)| s) {
            put(&mut self.durable, x.unit, &x.latest);
        }
        let r = f(&self.durable);
        for (x, _) in fl.iter().zip(subset).filter(|(_, &s)| s) {
            put(&mut self.durable, x.unit, &x.durable);
        }
        r
    }
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
