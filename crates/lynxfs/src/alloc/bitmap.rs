//! Per-lane bitmaps in shared memory: the core of the block and id allocators.
//!
//! Lane `l` owns the ids `[l * per, l * per + len_l)` (the last lane may own more), one
//! bit each, 1 = free. Each lane's bitmap starts on its own cache line, and each lane
//! has a control line of its own holding its search hint (a word index) and its free
//! count, so threads working in different lanes share no line. Everything is an atomic
//! word of a [`Span`], addressed by index, and changed only by single atomic
//! read-modify-writes (no locks): a process killed at any instruction leaves at worst
//! some bits claimed and unused or a count off, which the rebuild from the pool
//! recomputes. The hints and counts only steer searches; the bits alone decide.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::runtime::Span;

/// Words per cache line.
const LINE: usize = 8;
/// Control line slots: where the lane's next search starts (a word index: the lowest
/// word that may hold a free bit, since a free moves it back, so the lowest free bits
/// go first: ids keep their tables dense, and a block freed is the next one taken,
/// its page already mapped and cached, where a next fit would walk into pages never
/// touched, a page fault each on first use), the lane's free count (a wrapping
/// two's-complement counter: a free and a claim racing may take it below zero for a
/// moment), and where searches for runs of several bits start: past the last run
/// taken, back to a run freed lower, so they neither rescan the lane's low,
/// fragmented words for every run nor walk past runs just freed; and where searches
/// from the top start (the highest word that may hold a free bit, since a free moves
/// it up): metadata blocks are taken from there, so they gather at the lane's top,
/// away from file data filling it from the bottom (see [`LaneBits::take_top`]).
const HINT: usize = 0;
const FREE: usize = 1;
const RUNS: usize = 2;
const TOP: usize = 3;

pub(super) struct LaneBits {
    span: Span,
    /// The ids each lane may hand out (a lane's bits below its start stay used).
    owned: Vec<Range<u64>>,
    per: u64,
    /// Words of each lane's bitmap, a whole number of cache lines.
    stride: usize,
}

impl LaneBits {
    /// Bytes of span needed for lanes owning `owned`, lane `l` based at `l * per`.
    pub fn bytes(owned: &[Range<u64>], per: u64) -> usize {
        let stride = Self::stride_for(owned, per);
        owned.len() * (LINE + stride) * 8
    }

    fn stride_for(owned: &[Range<u64>], per: u64) -> usize {
        let longest = (0..owned.len())
            .map(|l| owned[l].end.saturating_sub(l as u64 * per))
            .max()
            .unwrap_or(0);
        (longest.div_ceil(64) as usize).div_ceil(LINE) * LINE
    }

    /// Lay the bitmaps over `span` (whatever it held), every owned id for which `used`
    /// is false free.
    pub fn build(
        span: Span,
        owned: Vec<Range<u64>>,
        per: u64,
        used: impl Fn(u64) -> bool,
    ) -> LaneBits {
        let me = Self::attach(span, owned, per);
        for l in 0..me.owned.len() {
            me.fill_lane(l, &used);
        }
        me
    }

    /// Use bitmaps another process (or `build`) laid over `span`.
    pub fn attach(span: Span, owned: Vec<Range<u64>>, per: u64) -> LaneBits {
        assert!(
            !owned.is_empty() && (0..owned.len()).all(|l| owned[l].start >= l as u64 * per),
            "allocator lanes must be based at lane * per"
        );
        let need = Self::bytes(&owned, per);
        assert!(
            span.bytes() >= need,
            "allocator span too small: {} bytes, {need} needed",
            span.bytes()
        );
        LaneBits {
            stride: Self::stride_for(&owned, per),
            span,
            owned,
            per: per.max(1),
        }
    }

    fn fill_lane(&self, l: usize, used: &impl Fn(u64) -> bool) {
        let base = self.base(l);
        let owned = &self.owned[l];
        let mut free = 0u64;
        let mut hint = None;
        let mut top = 0;
        let words = &self.span.words()[self.bits_at(l)..self.bits_at(l) + self.stride];
        for (i, word) in words.iter().enumerate() {
            let mut w = 0u64;
            for b in 0..64 {
                let id = base + (i * 64 + b) as u64;
                if owned.contains(&id) && !used(id) {
                    w |= 1 << b;
                }
            }
            if w != 0 && hint.is_none() {
                hint = Some(i);
            }
            if w != 0 {
                top = i;
            }
            free += w.count_ones() as u64;
            word.store(w, Ordering::Relaxed);
        }
        let ctl = self.ctl(l);
        ctl.iter().for_each(|c| c.store(0, Ordering::Relaxed));
        ctl[HINT].store(hint.unwrap_or(0) as u64, Ordering::Relaxed);
        ctl[RUNS].store(hint.unwrap_or(0) as u64, Ordering::Relaxed);
        ctl[TOP].store(top as u64, Ordering::Relaxed);
        ctl[FREE].store(free, Ordering::Release);
    }

    pub fn lanes(&self) -> usize {
        self.owned.len()
    }
    /// One past the highest id.
    pub fn end(&self) -> u64 {
        self.owned.last().map_or(0, |r| r.end)
    }
    pub fn lane_of(&self, id: u64) -> usize {
        ((id / self.per) as usize).min(self.owned.len() - 1)
    }
    fn base(&self, l: usize) -> u64 {
        l as u64 * self.per
    }
    fn ctl(&self, l: usize) -> &[AtomicU64] {
        &self.span.words()[l * LINE..(l + 1) * LINE]
    }
    fn bits_at(&self, l: usize) -> usize {
        self.owned.len() * LINE + l * self.stride
    }
    /// Lane `l`'s bitmap words (those holding owned ids).
    fn bits(&self, l: usize) -> &[AtomicU64] {
        self.lane(l).1
    }
    /// Lane `l`'s control line and bitmap words, from one look at the span's words
    /// (each look costs its bounds checks: an id's claim or free wants both).
    #[inline]
    fn lane(&self, l: usize) -> (&[AtomicU64], &[AtomicU64]) {
        let all = self.span.words();
        let n = (self.owned[l].end - self.base(l)).div_ceil(64) as usize;
        let at = self.bits_at(l);
        (&all[l * LINE..(l + 1) * LINE], &all[at..at + n])
    }

    /// Lane `l`'s free count (a hint: exact only when nothing is in flight).
    pub fn lane_free(&self, l: usize) -> i64 {
        self.ctl(l)[FREE].load(Ordering::Relaxed) as i64
    }
    /// Sum of the lanes' free counts.
    pub fn free_total(&self) -> u64 {
        (0..self.lanes())
            .map(|l| self.lane_free(l))
            .sum::<i64>()
            .max(0) as u64
    }

    /// Claim one free id of lane `l`, searching from its hint; `None` if it has none.
    pub fn take_one(&self, l: usize) -> Option<u64> {
        let (ctl, bits) = self.lane(l);
        let raw = ctl[HINT].load(Ordering::Relaxed);
        let h = (raw as usize).min(bits.len());
        for i in (h..bits.len()).chain(0..h) {
            let mut w = bits[i].load(Ordering::Relaxed);
            while w != 0 {
                let m = 1u64 << w.trailing_zeros();
                let old = bits[i].fetch_and(!m, Ordering::AcqRel);
                if old & m != 0 {
                    // A word left empty sends the next search past it.
                    let next = if old & !m == 0 { i + 1 } else { i };
                    Self::claimed_in(ctl, (HINT, raw), next, 1);
                    return Some(self.base(l) + i as u64 * 64 + m.trailing_zeros() as u64);
                }
                w = old & !m; // taken under us; try the word's other free bits
            }
        }
        None
    }

    /// Claim the highest free id of lane `l`, searching down from its top hint (and
    /// then the words above it); `None` if it has none. Metadata blocks come from
    /// here: a directory's log pages, tree nodes and attribute blocks end up next to
    /// each other instead of between files' data, so a process walking a tree maps a
    /// few dense pages (the kernel maps a fault's neighbours with it) where it would
    /// fault once per directory.
    pub fn take_top(&self, l: usize) -> Option<u64> {
        let bits = self.bits(l);
        let raw = self.ctl(l)[TOP].load(Ordering::Relaxed);
        let h = (raw as usize).min(bits.len().checked_sub(1)?);
        for i in (0..=h).rev().chain((h + 1..bits.len()).rev()) {
            let mut w = bits[i].load(Ordering::Relaxed);
            while w != 0 {
                let b = 63 - w.leading_zeros();
                let m = 1u64 << b;
                let old = bits[i].fetch_and(!m, Ordering::AcqRel);
                if old & m != 0 {
                    // A word left empty sends the next search below it.
                    let next = if old & !m == 0 {
                        i.saturating_sub(1)
                    } else {
                        i
                    };
                    self.claimed(l, (TOP, raw), next, 1);
                    return Some(self.base(l) + i as u64 * 64 + b as u64);
                }
                w = old & !m; // taken under us; try the word's other free bits
            }
        }
        None
    }

    /// Claim `id` if it is free.
    pub fn take(&self, id: u64) -> bool {
        let l = self.lane_of(id);
        if !self.owned[l].contains(&id) {
            return false;
        }
        let i = id - self.base(l);
        let m = 1u64 << (i % 64);
        let old = self.bits(l)[(i / 64) as usize].fetch_and(!m, Ordering::AcqRel);
        if old & m == 0 {
            return false;
        }
        self.ctl(l)[FREE].fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Claim a run of lane `l`: the first (from the hint) free run of at least `need`
    /// bits, or when `any`, the first free run, whatever its length; at most `need`
    /// bits of it. Returns `(first id, length)`.
    pub fn take_run(&self, l: usize, need: u64, any: bool) -> Option<(u64, u64)> {
        let bits = self.bits(l);
        let slot = if need > 1 && !any { RUNS } else { HINT };
        loop {
            let raw = self.ctl(l)[slot].load(Ordering::Relaxed);
            let h = (raw as usize).min(bits.len());
            let found = find_run(&bits[h..], need, any)
                .map(|(s, n)| extend_back(bits, s + h as u64 * 64, n))
                .or_else(|| (h > 0).then(|| find_run(bits, need, any)).flatten());
            let (s, n) = found?;
            let take = n.min(need);
            if claim(bits, s, s + take) {
                let next = ((s + take) / 64) as usize;
                let next = if next >= bits.len() { 0 } else { next };
                self.claimed(l, (slot, raw), next, take);
                return Some((self.base(l) + s, take));
            }
            // Part of the run was claimed under us (and ours given back): look again.
        }
    }

    /// Account for `n` bits claimed in lane `l`, moving the hint in control slot
    /// `slot` from `raw` to `next` unless someone moved it meanwhile.
    fn claimed(&self, l: usize, (slot, raw): (usize, u64), next: usize, n: u64) {
        Self::claimed_in(self.ctl(l), (slot, raw), next, n);
    }

    /// [`Self::claimed`] with the lane's control line `ctl` at hand.
    fn claimed_in(ctl: &[AtomicU64], (slot, raw): (usize, u64), next: usize, n: u64) {
        ctl[FREE].fetch_sub(n, Ordering::Relaxed);
        if next as u64 != raw {
            let _ =
                ctl[slot].compare_exchange(raw, next as u64, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Bits from `word` on were freed (`run`: several together), so searches may
    /// start there again.
    fn freed_at(&self, l: usize, (word, last): (u64, u64), run: bool) {
        Self::freed_in(self.ctl(l), (word, last), run);
    }

    /// [`Self::freed_at`] with the lane's control line `ctl` at hand.
    fn freed_in(ctl: &[AtomicU64], (word, last): (u64, u64), run: bool) {
        for slot in [HINT, RUNS].into_iter().take(if run { 2 } else { 1 }) {
            if word < ctl[slot].load(Ordering::Relaxed) {
                ctl[slot].fetch_min(word, Ordering::Relaxed);
            }
        }
        if last > ctl[TOP].load(Ordering::Relaxed) {
            ctl[TOP].fetch_max(last, Ordering::Relaxed);
        }
    }

    /// Free one id (the fast path of [`Self::put`]); false if it was not in use.
    pub fn put_one(&self, id: u64) -> bool {
        let l = self.lane_of(id);
        if !self.owned[l].contains(&id) {
            return false;
        }
        let i = id - self.base(l);
        let m = 1u64 << (i % 64);
        let word = i / 64;
        let (ctl, bits) = self.lane(l);
        let old = bits[word as usize].fetch_or(m, Ordering::AcqRel);
        if old & m != 0 {
            return false;
        }
        ctl[FREE].fetch_add(1, Ordering::Relaxed);
        Self::freed_in(ctl, (word, word), false);
        true
    }

    /// Free the ids `ids` (any lanes); returns how many were in use (the others,
    /// already free or not owned by any lane, are left alone).
    pub fn put(&self, ids: Range<u64>) -> u64 {
        let mut freed = 0;
        let mut s = ids.start;
        while s < ids.end {
            let l = self.lane_of(s);
            let lane_end = if l + 1 == self.lanes() {
                ids.end
            } else {
                self.base(l + 1).min(ids.end)
            };
            freed += self.put_in_lane(
                l,
                s.max(self.owned[l].start)..lane_end.min(self.owned[l].end),
            );
            s = lane_end;
        }
        freed
    }

    fn put_in_lane(&self, l: usize, ids: Range<u64>) -> u64 {
        if ids.is_empty() {
            return 0;
        }
        let base = self.base(l);
        let freed = release(self.bits(l), ids.start - base, ids.end - base);
        self.ctl(l)[FREE].fetch_add(freed, Ordering::Relaxed);
        let words = ((ids.start - base) / 64, (ids.end - 1 - base) / 64);
        self.freed_at(l, words, ids.end - ids.start > 1);
        freed
    }

    /// One bit per id, set when the id is in use (ids no lane owns count as used).
    pub fn used_bitmap(&self) -> Vec<u64> {
        let mut out = vec![u64::MAX; self.end().div_ceil(64) as usize];
        for l in 0..self.lanes() {
            for (i, word) in self.bits(l).iter().enumerate() {
                let mut w = word.load(Ordering::Acquire);
                while w != 0 {
                    let id = self.base(l) + i as u64 * 64 + w.trailing_zeros() as u64;
                    out[(id / 64) as usize] &= !(1 << (id % 64));
                    w &= w - 1;
                }
            }
        }
        out
    }
}

/// Bits `lo..hi` of a word (`lo < hi <= 64`).
fn mask(lo: u64, hi: u64) -> u64 {
    let upto = if hi == 64 { u64::MAX } else { (1 << hi) - 1 };
    upto & !((1u64 << lo) - 1)
}

/// Call `f(word index, mask)` for each word of the bit range `[s, e)`.
fn each_word(s: u64, e: u64, mut f: impl FnMut(usize, u64) -> bool) -> bool {
    let mut pos = s;
    while pos < e {
        let w = pos / 64;
        let hi = (e - w * 64).min(64);
        if !f(w as usize, mask(pos % 64, hi)) {
            return false;
        }
        pos = w * 64 + hi;
    }
    true
}

/// Claim bits `[s, e)` (all free a moment ago), word by word. If one was taken under
/// us, give back every bit this call took and return false.
fn claim(bits: &[AtomicU64], s: u64, e: u64) -> bool {
    let mut done = s;
    let ok = each_word(s, e, |i, m| {
        let old = bits[i].fetch_and(!m, Ordering::AcqRel);
        if old & m != m {
            bits[i].fetch_or(old & m, Ordering::AcqRel);
            return false;
        }
        done = (i as u64 * 64 + 64).min(e);
        true
    });
    if !ok {
        release(bits, s, done);
    }
    ok
}

/// Set bits `[s, e)` free; returns how many were not free already.
fn release(bits: &[AtomicU64], s: u64, e: u64) -> u64 {
    let mut freed = 0;
    each_word(s, e, |i, m| {
        let old = bits[i].fetch_or(m, Ordering::AcqRel);
        debug_assert!(old & m == 0, "double free in word {i}: {:#x}", old & m);
        freed += (!old & m).count_ones() as u64;
        true
    });
    freed
}

/// The run `(s, n)` grown down over the free bits just before it (a search from the
/// hint starts at a word boundary, which may cut a free run in two).
fn extend_back(bits: &[AtomicU64], mut s: u64, mut n: u64) -> (u64, u64) {
    if !s.is_multiple_of(64) {
        return (s, n);
    }
    while s > 0 {
        let below = bits[(s / 64 - 1) as usize]
            .load(Ordering::Relaxed)
            .leading_ones() as u64;
        s -= below;
        n += below;
        if below < 64 {
            break;
        }
    }
    (s, n)
}

/// In `bits`, the first run of free bits reaching `need` bits, or when `any`, the
/// first free run at all: `(first bit, length)`; the length may exceed `need`.
fn find_run(bits: &[AtomicU64], need: u64, any: bool) -> Option<(u64, u64)> {
    let (mut start, mut run) = (0u64, 0u64);
    for (i, word) in bits.iter().enumerate() {
        let w = word.load(Ordering::Relaxed);
        let base = i as u64 * 64;
        if w == u64::MAX {
            if run == 0 {
                start = base;
            }
            run += 64;
        } else {
            let mut b = 0u64;
            while b < 64 {
                let rest = w >> b;
                if rest & 1 == 0 {
                    // A used bit ends the run in progress.
                    if any && run > 0 {
                        return Some((start, run));
                    }
                    run = 0;
                    if rest == 0 {
                        break;
                    }
                    b += rest.trailing_zeros() as u64;
                    continue;
                }
                let ones = ((!rest).trailing_zeros() as u64).min(64 - b);
                if run == 0 {
                    start = base + b;
                }
                run += ones;
                b += ones;
                if run >= need {
                    return Some((start, run));
                }
            }
        }
        if run >= need {
            return Some((start, run));
        }
    }
    (any && run > 0).then_some((start, run))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(v: &[u64]) -> Vec<AtomicU64> {
        v.iter().map(|&w| AtomicU64::new(w)).collect()
    }

    #[test]
    fn runs_are_found_across_words() {
        let b = words(&[0xF000_0000_0000_0000, u64::MAX, 0x3, 0b1110]);
        assert_eq!(find_run(&b, 70, false), Some((60, 70)));
        assert_eq!(find_run(&b, 3, false), Some((60, 4)));
        assert_eq!(find_run(&b, 71, false), None);
        assert_eq!(find_run(&b, 71, true), Some((60, 70)));
        let b = words(&[0b1110, 0]);
        assert_eq!(find_run(&b, 2, false), Some((1, 3)), "the whole run");
        assert_eq!(find_run(&b, 5, true), Some((1, 3)));
        assert_eq!(find_run(&words(&[0, 0]), 1, true), None);
    }

    #[test]
    fn claim_rolls_back_on_conflict() {
        let b = words(&[u64::MAX, !(1 << 5)]);
        assert!(!claim(&b, 10, 64 + 10), "bit 69 is taken");
        assert_eq!(
            b[0].load(Ordering::Relaxed),
            u64::MAX,
            "first word given back"
        );
        assert_eq!(b[1].load(Ordering::Relaxed), !(1 << 5));
        assert!(claim(&b, 10, 64 + 5));
        assert_eq!(b[0].load(Ordering::Relaxed), mask(0, 10));
        assert_eq!(release(&b, 10, 64), 54);
    }
}
