//! Directory gates and entry counts, kept per lane.
//!
//! Every change of a directory's entries holds its gate shared; rmdir, a rename over
//! it and eviction hold it alone. A create used to take and give back the shared hold
//! in the directory's cachelet word and count its entry there too, so two CPUs
//! creating in one directory wrote the same line four times per create (issue 16,
//! "creates that scale"). Here both are counted per lane instead: lane `k` keeps one
//! record per inode in an array of its own, so a CPU writes only its lane's lines. The
//! cachelet's gate word keeps only the writer (and its waiters), which creates read.
//!
//! A record is 16 bytes: the shared holds taken in this lane (32 bits), the removals
//! this lane made since it last asked for a compaction check (32 bits, `meta::compact`),
//! then this lane's part of the entry count (64 bits, wrapping: a lane's part goes
//! below zero when it removes more than it added). The parts add up to the directory's entries;
//! the sum is exact while the gate is held alone (no change is under way), which is
//! when rmdir and a rename over a directory read it.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::format::Layout;
use crate::runtime::lock::{self, CountedGuard, Interrupted, Watch, WriteGuard};
use crate::runtime::Span;

use super::cachelet::Cachelet;

/// Lanes kept apart at most (more lanes share these by lane number modulo).
const MAX_GATE_LANES: u64 = 8;
/// Bytes per inode per lane.
const RECORD: usize = 16;

/// Every directory's per-lane shared holds and entry counts.
pub struct Gates {
    span: Span,
    lanes: u64,
    inodes: u64,
    /// The first record's first word: `span`'s memory, mapped (and never moved) for
    /// as long as `span`, hence `self`, lives (a record is found on every create's
    /// path twice: an add and a bounds check, not two views of the whole span).
    base: NonNull<AtomicU64>,
}

// SAFETY: `base` points into `span`'s shared memory, only ever accessed through
// atomic types (as `Span` itself is Send and Sync for).
unsafe impl Send for Gates {}
// SAFETY: as for Send.
unsafe impl Sync for Gates {}

/// A shared hold of a directory's gate.
pub type Shared<'a> = CountedGuard<'a>;

impl Gates {
    fn lanes_for(l: &Layout) -> u64 {
        u64::from(l.lanes()).clamp(1, MAX_GATE_LANES)
    }

    /// Region bytes for a pool with this layout.
    pub fn bytes_needed(l: &Layout) -> usize {
        (Self::lanes_for(l) * l.total_inodes()) as usize * RECORD
    }

    /// The records in `span` (zeroed memory: no holds, no entries).
    pub fn new(span: Span, l: &Layout) -> Gates {
        assert!(span.bytes() >= Self::bytes_needed(l));
        let base = NonNull::from(span.words()).cast();
        Gates {
            span,
            lanes: Self::lanes_for(l),
            inodes: l.total_inodes(),
            base,
        }
    }

    /// Forget every hold and count (a repair, once no operation is in flight).
    pub fn clear(&self) {
        self.span.zero();
    }

    /// Lane `lane`'s record of `ino`: its holds and its part of the entry count.
    fn record(&self, lane: u64, ino: u64) -> (&AtomicU32, &AtomicU64) {
        assert!(ino < self.inodes, "inode {ino} out of range");
        let r = ((lane % self.lanes) * self.inodes + ino) as usize;
        // SAFETY: record `r` lies inside the span (`lane % lanes < lanes`, `ino <
        // inodes`, and `new` checked the span holds `lanes * inodes` records); the
        // memory is mapped, 16-aligned per record, for as long as `&self` lives, and
        // only accessed atomically: its first 4 bytes as a 32-bit word, bytes 8..16
        // as a 64-bit word, as `Span::u32s` and `Span::words` view them.
        unsafe {
            let rec = self.base.as_ptr().add(r * RECORD / 8);
            (&*rec.cast::<AtomicU32>(), &*rec.add(1))
        }
    }

    /// `c`'s directory's gate, held shared, counted in `lane`.
    pub fn shared<'a>(
        &'a self,
        c: Cachelet<'_>,
        lane: u32,
        w: &dyn Watch,
    ) -> Result<Shared<'a>, Interrupted> {
        let (holds, _) = self.record(u64::from(lane), c.ino);
        lock::read_counted(c.gate_word(), holds, w)
    }

    /// `c`'s directory's gate, held alone: no change of its entries is under way.
    pub fn alone<'a>(&self, c: Cachelet<'a>, w: &dyn Watch) -> Result<WriteGuard<'a>, Interrupted> {
        lock::write_counted(c.gate_word(), &|| self.drained(c.ino), w)
    }

    /// [`Gates::alone`] if nobody holds the gate now.
    pub fn try_alone<'a>(&self, c: Cachelet<'a>) -> Option<WriteGuard<'a>> {
        lock::try_write_counted(c.gate_word(), &|| self.drained(c.ino))
    }

    /// No lane has a shared hold of `ino`'s gate.
    fn drained(&self, ino: u64) -> bool {
        (0..self.lanes).all(|k| self.record(k, ino).0.load(Ordering::SeqCst) == 0)
    }

    /// `ino`'s live entries (exact while its gate is held alone).
    pub fn entries(&self, ino: u64) -> u64 {
        (0..self.lanes)
            .map(|k| self.record(k, ino).1.load(Ordering::Acquire))
            .fold(0, u64::wrapping_add)
    }

    /// One entry more in `ino` (a committed create, link or rename into it).
    pub fn add_entry(&self, ino: u64, lane: u32) {
        self.record(u64::from(lane), ino)
            .1
            .fetch_add(1, Ordering::AcqRel);
    }

    /// One entry less in `ino` (a committed removal or rename out of it).
    pub fn remove_entry(&self, ino: u64, lane: u32) {
        self.record(u64::from(lane), ino)
            .1
            .fetch_sub(1, Ordering::AcqRel);
    }

    /// One more removal in `ino` counted in `lane`; true (and the count starts over)
    /// once it reaches `every`, when the caller checks the log for compaction. The word
    /// is in the record line `remove_entry` has just written. A lane whose
    /// counts race (two threads in one lane) may check early or late: it is a hint.
    pub fn removal_due(&self, ino: u64, lane: u32, every: u32) -> bool {
        let w = self.removals(ino, lane);
        if (w.fetch_add(1, Ordering::AcqRel) as i32).wrapping_add(1) < every as i32 {
            return false;
        }
        w.store(0, Ordering::Release);
        true
    }

    /// Put `ino`'s next check in `lane` off by `extra` more removals (a long log's
    /// check walks its chain: its cost is spread over more removals).
    pub fn delay_check(&self, ino: u64, lane: u32, extra: u32) {
        let extra = extra.min(i32::MAX as u32) as i32;
        self.removals(ino, lane)
            .store(extra.wrapping_neg() as u32, Ordering::Release);
    }

    fn removals(&self, ino: u64, lane: u32) -> &AtomicU32 {
        let (holds, _) = self.record(u64::from(lane), ino);
        // SAFETY: the record's bytes 4..8, right after its holds word (see `record`):
        // inside the record, 4-aligned, only ever accessed atomically as this word.
        unsafe { &*(holds as *const AtomicU32).add(1) }
    }

    /// `ino` has `n` entries (its log was just read; no change is under way).
    pub fn set_entries(&self, ino: u64, n: u64) {
        for k in 0..self.lanes {
            self.record(k, ino)
                .1
                .store(if k == 0 { n } else { 0 }, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Geometry;
    use crate::meta::cachelet::Cachelets;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn parts() -> (Layout, Cachelets, Gates) {
        let l = Layout::compute(Geometry::for_size(16 << 20, 4, None)).unwrap();
        let c = Cachelets::new(Span::anonymous(Cachelets::bytes_needed(&l)).unwrap(), &l);
        let g = Gates::new(Span::anonymous(Gates::bytes_needed(&l)).unwrap(), &l);
        (l, c, g)
    }

    #[test]
    fn entry_counts_add_up_across_lanes() {
        let (_, _, g) = parts();
        g.set_entries(7, 3);
        g.add_entry(7, 1);
        g.remove_entry(7, 2);
        g.remove_entry(7, 2);
        g.add_entry(8, 0);
        assert_eq!((g.entries(7), g.entries(8)), (2, 1));
        g.set_entries(7, 0);
        assert_eq!(g.entries(7), 0);
    }

    #[test]
    fn a_removal_check_falls_due_every_n_removals_per_lane() {
        let (_, _, g) = parts();
        let due = |lane| (0..9).filter(|_| g.removal_due(7, lane, 3)).count();
        assert_eq!(due(0), 3);
        assert_eq!(due(1), 3);
        g.remove_entry(7, 0);
        assert_eq!(g.entries(7), u64::MAX, "the count beside it is untouched");
        assert!(!g.removal_due(7, 0, 2) && g.removal_due(7, 0, 2));
        g.delay_check(7, 1, 3);
        assert_eq!((0..6).filter(|_| g.removal_due(7, 1, 2)).count(), 1);
    }

    #[test]
    fn shared_holds_in_any_lane_keep_the_gate_from_being_held_alone() {
        let (_, c, g) = parts();
        let d = c.get(5);
        let a = g.shared(d, 0, &lock::Alone).unwrap();
        let b = g.shared(d, 3, &lock::Alone).unwrap();
        assert!(g.try_alone(d).is_none());
        drop(a);
        assert!(g.try_alone(d).is_none(), "lane 3 still holds it");
        drop(b);
        let alone = g.try_alone(d).expect("nobody holds it");
        assert!(g.try_alone(d).is_none(), "held alone once");
        assert!(g.try_alone(c.get(6)).is_some(), "another directory's gate");
        drop(alone);
        assert!(g.try_alone(d).is_some());
    }

    /// Readers come and go in two lanes while writers take the gate alone: a writer
    /// never sees a reader inside, and a reader never sees a writer inside.
    #[test]
    fn readers_and_writers_exclude_each_other() {
        let (_, c, g) = parts();
        let (c, g) = (Arc::new(c), Arc::new(g));
        let inside = Arc::new(AtomicU32::new(0));
        let writing = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for lane in 0..2u32 {
            let (c, g, inside, writing) = (c.clone(), g.clone(), inside.clone(), writing.clone());
            threads.push(std::thread::spawn(move || {
                for _ in 0..20_000 {
                    let _s = g.shared(c.get(9), lane, &lock::Alone).unwrap();
                    inside.fetch_add(1, Ordering::SeqCst);
                    assert!(!writing.load(Ordering::SeqCst), "a writer is inside");
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            }));
        }
        for _ in 0..2 {
            let (c, g, inside, writing) = (c.clone(), g.clone(), inside.clone(), writing.clone());
            threads.push(std::thread::spawn(move || {
                for _ in 0..2_000 {
                    let _a = g.alone(c.get(9), &lock::Alone).unwrap();
                    assert!(!writing.swap(true, Ordering::SeqCst), "two writers inside");
                    assert_eq!(inside.load(Ordering::SeqCst), 0, "a reader is inside");
                    writing.store(false, Ordering::SeqCst);
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
    }

    /// A [`Watch`] that says when a writer has begun to wait: `write_counted` asks
    /// it only after finding readers inside.
    struct Waited(std::sync::mpsc::SyncSender<()>);
    impl Watch for Waited {
        fn check(&self) -> Result<(), Interrupted> {
            let _ = self.0.try_send(());
            Ok(())
        }
    }

    /// A reader holding the gate may take it shared again while a writer waits (a
    /// rename within one directory enters it twice): the waiting writer does not
    /// hold new readers up, and gets the gate once they have all left.
    #[test]
    fn a_waiting_writer_lets_readers_in() {
        use std::sync::mpsc;
        use std::time::Duration;
        let _w = lynxfs_test_support::watchdog(
            "a_waiting_writer_lets_readers_in",
            Duration::from_secs(60),
        );
        let (_, c, g) = parts();
        let (c, g) = (Arc::new(c), Arc::new(g));
        let first = g.shared(c.get(4), 0, &lock::Alone).unwrap();
        let (waiting_tx, waiting) = mpsc::sync_channel(1);
        let (held_tx, held) = mpsc::channel();
        let writer = {
            let (c, g) = (c.clone(), g.clone());
            std::thread::spawn(move || {
                let alone = g.alone(c.get(4), &Waited(waiting_tx)).unwrap();
                held_tx.send(()).unwrap();
                drop(alone);
            })
        };
        waiting
            .recv_timeout(Duration::from_secs(30))
            .expect("the writer waits for the reader inside");
        // The second reader comes once the writer waits, on a thread of its own so
        // that a reader held up fails the test instead of hanging it.
        let (entered_tx, entered) = mpsc::channel();
        let (leave, leave_rx) = mpsc::channel::<()>();
        let reader = {
            let (c, g) = (c.clone(), g.clone());
            std::thread::spawn(move || {
                let second = g.shared(c.get(4), 1, &lock::Alone).unwrap();
                entered_tx.send(()).unwrap();
                let _ = leave_rx.recv();
                drop(second);
            })
        };
        entered
            .recv_timeout(Duration::from_secs(30))
            .expect("a waiting writer held a new reader up");
        assert!(
            held.try_recv().is_err(),
            "the writer got in beside two readers"
        );
        drop(first);
        assert!(
            held.try_recv().is_err(),
            "the writer got in beside a reader"
        );
        leave.send(()).unwrap();
        reader.join().unwrap();
        held.recv_timeout(Duration::from_secs(30))
            .expect("the writer gets the gate once the readers have left");
        writer.join().unwrap();
    }
}
