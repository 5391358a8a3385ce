//! Per-lane redo journals: the commit mechanism for an operation that must change more
//! than one 8-byte word at once (rename, multi-word setattr, a data write's map swap).
//!
//! Protocol: write the record (entries, count, CRC) and fence; store the commit word
//! (= the record's sequence number) and fence: the commit point; apply each word and
//! fence; clear the commit word and fence, so a later replay can never roll back words
//! that changed after this operation. Stores the caller flushed before `commit` are
//! covered by the record's fence (fences order all of a thread's earlier flushes).

use parking_lot::Mutex;

use crate::error::{errno, Result};
use crate::format::journal::{self as fmt, COMMIT, COUNT_CRC, ENTRIES, SEQ};
use crate::format::Layout;
use crate::pmem::{Backend, Durable, Pm};

pub struct Journals {
    /// Each lane's next sequence number; holding the lock owns the lane's journal.
    lanes: Vec<Mutex<u64>>,
}

impl Journals {
    pub fn new(lanes: u32) -> Self {
        Journals {
            lanes: (0..lanes).map(|_| Mutex::new(1)).collect(),
        }
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
        let (lane, mut seq) = self.lock(lane);
        let base = l.journal_addr(lane);
        let s = *seq;
        *seq += 1;
        let encoded = fmt::encode_entries(entries);
        let crc = fmt::record_crc_encoded(s, &encoded);
        let mut rec = pm.batch();
        rec.write_u64(base + SEQ, s)
            .write_u64(base + COUNT_CRC, entries.len() as u64 | (crc as u64) << 32)
            .write(base + ENTRIES, &encoded);
        let recorded = rec.persist();
        let committed = pm.commit_u64(base + COMMIT, s, recorded);
        let applied = apply(pm, entries, committed);
        let mut clear = pm.batch();
        clear.write_u64(base + COMMIT, 0);
        let cleared = clear.persist();
        Ok(applied.and(cleared))
    }

    fn lock(&self, lane: u32) -> (u32, parking_lot::MutexGuard<'_, u64>) {
        let n = self.lanes.len() as u32;
        for i in 0..n {
            let l = (lane + i) % n;
            if let Some(g) = self.lanes[l as usize].try_lock() {
                return (l, g);
            }
        }
        let l = lane % n;
        (l, self.lanes[l as usize].lock())
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
