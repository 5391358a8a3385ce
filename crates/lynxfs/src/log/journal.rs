//! Per-lane redo journals: the commit mechanism for an operation that must change more
//! than one 8-byte word at once (rename, multi-word setattr, a data write's map swap).
//!
//! Protocol: write the record (entries, count, CRC) and fence; store the commit word
//! (= the record's sequence number) and fence: the commit point; apply each word and
//! fence; clear the commit word and fence, so a later replay can never roll back words
//! that changed after this operation. Stores the caller flushed before `commit` are
//! covered by the record's fence (fences order all of a thread's earlier flushes).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{errno, Result};
use crate::format::journal::{self as fmt, COMMIT, COUNT_CRC, ENTRIES, SEQ};
use crate::format::Layout;
use crate::pmem::{Backend, Durable, Pm};
use crate::runtime::lock::{self, MutexGuard};
use crate::runtime::{Span, Watch};

/// Bytes of runtime state per lane: its lock word and sequence counter, on a cache line
/// of their own.
const LANE_BYTES: usize = 64;
/// Records of at most this many words (every rename's) are encoded on the stack.
const SMALL_RECORD: usize = 16;

/// The lanes' journals. Which process uses a lane's journal now, and the lane's next
/// sequence number, are runtime state shared by every process attached to the pool:
/// two processes on one CPU must not write one journal at once.
pub struct Journals {
    /// Keeps the mapping `base` points into alive.
    _span: Span,
    lanes: u32,
    /// Ends a wait for a lane whose holder died (the repair replays its journal).
    watch: Arc<dyn Watch + Send + Sync>,
    /// `span`'s first word, mapped (and never moved) for as long as `span`, hence
    /// `self`, lives: a lane's words found by an add, not two views of the span.
    base: NonNull<AtomicU64>,
}

// SAFETY: `base` points into `span`'s shared memory, only ever accessed through
// atomic types (as `Span` itself is Send and Sync for).
unsafe impl Send for Journals {}
// SAFETY: as for Send.
unsafe impl Sync for Journals {}

impl Journals {
    /// Region bytes for `lanes` lanes.
    pub fn bytes_needed(lanes: u32) -> usize {
        lanes as usize * LANE_BYTES
    }

    /// The journals' runtime state in `span` (zeroed memory: every lane free).
    pub fn new(span: Span, lanes: u32, watch: Arc<dyn Watch + Send + Sync>) -> Self {
        assert!(span.bytes() >= Self::bytes_needed(lanes));
        let base = NonNull::from(span.words()).cast();
        Journals {
            _span: span,
            lanes,
            watch,
            base,
        }
    }

    /// Lane `lane`'s line: its lock word (the first 4 bytes) and sequence counter
    /// (the second 8-byte word).
    fn lane_words(&self, lane: u32) -> (&AtomicU32, &AtomicU64) {
        assert!(lane < self.lanes, "journal lane {lane} out of range");
        // SAFETY: lane `lane`'s 64 bytes lie inside the span (`lane < lanes`, and
        // `new` checked `bytes_needed(lanes)`), mapped and 64-aligned for as long as
        // `&self` lives and only accessed atomically: bytes 0..4 as a 32-bit word,
        // 8..16 as a 64-bit one, as `Span::u32s` and `Span::words` view them.
        unsafe {
            let line = self.base.as_ptr().add(lane as usize * LANE_BYTES / 8);
            (&*line.cast::<AtomicU32>(), &*line.add(1))
        }
    }

    fn lock_word(&self, lane: u32) -> &AtomicU32 {
        self.lane_words(lane).0
    }

    fn seq_word(&self, lane: u32) -> &AtomicU64 {
        self.lane_words(lane).1
    }

    /// Atomically set every `(address, value)` word, using `lane`'s journal (or a free
    /// one if that is busy). Returns once the change is durable.
    pub fn commit<B: Backend>(
        &self,
        pm: &Pm<B>,
        l: &Layout,
        lane: u32,
        entries: &[(u64, u64)],
    ) -> Result<Durable> {
        if entries.len() > fmt::MAX_ENTRIES {
            return Err(errno::E2BIG);
        }
        debug_assert!(entries.iter().all(|&(a, _)| l.journal_target_ok(a, 8)));
        let (lane, _held) = self.lock(lane)?;
        let base = l.journal_addr(lane);
        // Numbers start at 1 (0 means "no record"), also after a repair zeroed them.
        let s = self.seq_word(lane).fetch_add(1, Ordering::Relaxed) + 1;
        let mut small = [0u8; SMALL_RECORD * fmt::ENTRY_LEN as usize];
        let large;
        let encoded = if entries.len() <= SMALL_RECORD {
            fmt::encode_entries_into(entries, &mut small)
        } else {
            large = fmt::encode_entries(entries);
            &large[..]
        };
        let crc = fmt::record_crc_encoded(s, encoded);
        let mut rec = pm.batch();
        rec.write_u64(base + SEQ, s)
            .write_u64(base + COUNT_CRC, entries.len() as u64 | (crc as u64) << 32)
            .write(base + ENTRIES, encoded);
        let recorded = rec.persist();
        let committed = pm.commit_u64(base + COMMIT, s, recorded);
        let applied = apply(pm, entries, committed);
        let mut clear = pm.batch();
        clear.write_u64(base + COMMIT, 0);
        let cleared = clear.persist();
        Ok(applied.and(cleared))
    }

    /// A free lane, preferring `lane`; waits for `lane` if all are busy. A busy lane
    /// may be held by a process that died: the watch looks (at most every few
    /// milliseconds) and a wait ends with the repair.
    fn lock(&self, lane: u32) -> Result<(u32, MutexGuard<'_>)> {
        let n = self.lanes;
        for i in 0..n {
            let l = (lane + i) % n;
            if let Some(g) = lock::try_lock(self.lock_word(l)) {
                return Ok((l, g));
            }
            self.watch.check()?;
        }
        let l = lane % n;
        Ok((l, lock::lock(self.lock_word(l), &*self.watch)?))
    }
}

fn apply<B: Backend>(pm: &Pm<B>, entries: &[(u64, u64)], _committed: Durable) -> Durable {
    let mut b = pm.batch();
    for &(a, v) in entries {
        b.write_u64(a, v);
    }
    b.persist()
}

/// What recovery found in one lane's journal.
#[derive(Debug, PartialEq, Eq)]
pub enum Replay {
    Empty,
    Replayed(usize),
    /// A commit word with no intact record behind it: the operation never committed.
    Torn,
}

/// Replay `lane`'s journal if it holds a committed, intact record, then clear it.
pub fn replay<B: Backend>(pm: &Pm<B>, l: &Layout, lane: u32) -> Replay {
    let base = l.journal_addr(lane);
    let commit = pm.load_u64(base + COMMIT);
    if commit == 0 {
        return Replay::Empty;
    }
    let outcome = match read_record(pm, l, base) {
        Some((seq, entries)) if seq == commit => {
            let n = entries.len();
            let done = apply(pm, &entries, pm.fence());
            drop(done);
            Replay::Replayed(n)
        }
        _ => Replay::Torn,
    };
    let mut b = pm.batch();
    b.write_u64(base + COMMIT, 0);
    let _cleared = b.persist();
    outcome
}

fn read_record<B: Backend>(pm: &Pm<B>, l: &Layout, base: u64) -> Option<(u64, Vec<(u64, u64)>)> {
    let seq = pm.load_u64(base + SEQ);
    let cc = pm.load_u64(base + COUNT_CRC);
    let (count, crc) = (cc as u32 as usize, (cc >> 32) as u32);
    if count > fmt::MAX_ENTRIES {
        return None;
    }
    let raw = pm.read_vec(base + ENTRIES, count * fmt::ENTRY_LEN as usize);
    let entries: Vec<(u64, u64)> = raw
        .chunks_exact(16)
        .map(|c| {
            (
                u64::from_le_bytes(c[0..8].try_into().expect("8")),
                u64::from_le_bytes(c[8..16].try_into().expect("8")),
            )
        })
        .collect();
    let ok = fmt::record_crc_encoded(seq, &raw) == crc
        && entries.iter().all(|&(a, _)| l.journal_target_ok(a, 8));
    ok.then_some((seq, entries))
}
