//! Change notices: a ring of records in the runtime region saying which names,
//! attributes and data changed, so a process that caches what it read (the FUSE
//! daemon, whose kernel keeps names, attributes and pages) can drop what another
//! attached process made stale.
//!
//! Writers post only while some process watches (`watchers` > 0): a pool nobody
//! mounts pays one load of a shared word per change. A writer claims a sequence number
//! (`fetch_add` on the head), fills its slot, and publishes it by storing the number
//! plus one in the slot's first word, last. Every change is posted *after* its commit
//! point, so a reader that drops a cached copy on the notice reads the new state back.
//!
//! The ring never blocks a writer. A reader more than [`RECORDS`] behind, a record
//! left unpublished (its writer died between claim and publish, or is slower than
//! [`PUBLISH_GRACE`]), or a repair of the runtime state (a writer may have died
//! between its commit and its notice) is reported as [`Change::Lost`]: the reader
//! must then drop everything it caches. Torn records are never returned: a slot is
//! read between two checks (its published number, and that no writer has claimed the
//! slot again since), as a seqlock.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Region, Runtime, Span};
use crate::format::dentry::NAME_MAX;

/// Records in the ring.
pub const RECORDS: u64 = 4096;
/// Words of a name (255 bytes, rounded up).
const NAME_WORDS: usize = NAME_MAX.div_ceil(8);
/// Words of one record: published number, kind/slot/length, parent, ino, offset,
/// length, the name.
const RECORD_WORDS: usize = 6 + NAME_WORDS;
const HEADER_BYTES: usize = 64;
/// Header words: the next number to claim, the watchers' count; the reader's sleep
/// flag is the 32-bit word after them.
const HEAD: usize = 0;
const WATCHERS: usize = 1;
const SLEEPING_U32: usize = 4;
/// How long a reader waits for a claimed record to be published before it counts
/// it lost (a writer fills a record in well under a microsecond unless preempted).
pub const PUBLISH_GRACE: Duration = Duration::from_millis(50);

const NAME: u64 = 1;
const ATTRS: u64 = 2;
const DATA: u64 = 3;

/// One change another process made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// `name` in `parent` was created, removed or renamed (from or to); `ino` is the
    /// file it named or names now (its link count or ctime changed), 0 if unknown.
    /// The parent's attributes (mtime, link count) changed too.
    Name {
        parent: u64,
        name: Vec<u8>,
        ino: u64,
    },
    /// `ino`'s attributes (mode, owner, times, extended attributes, ACLs) changed.
    Attrs { ino: u64 },
    /// `ino`'s data changed in `[off, off+len)` (`len` 0: from `off` to the end), and
    /// with it its size and times.
    Data { ino: u64, off: u64, len: u64 },
    /// Notices were missed: drop everything cached.
    Lost,
}

/// Where a process posts its changes (a disabled one for pools only it uses).
pub struct Notices {
    ring: Option<Span>,
    /// The poster's slot in the process table, so a watcher can skip its own changes
    /// (shared with the attachment: a daemon that forks takes a new slot).
    slot: Arc<AtomicU32>,
}

impl Notices {
    /// The bytes the ring takes in the runtime region.
    pub fn bytes_needed() -> usize {
        HEADER_BYTES + RECORDS as usize * RECORD_WORDS * 8
    }

    /// The ring at `range` of `region`, posted to by the process in `slot`.
    pub fn at(region: &Arc<Region>, range: std::ops::Range<usize>, slot: u32) -> Notices {
        Self::at_slot(region, range, Arc::new(AtomicU32::new(slot)))
    }

    /// [`Notices::at`], for the process whose slot the word `slot` holds now.
    pub fn at_slot(
        region: &Arc<Region>,
        range: std::ops::Range<usize>,
        slot: Arc<AtomicU32>,
    ) -> Notices {
        Notices {
            ring: Some(Span::new(region.clone(), range)),
            slot,
        }
    }

    /// Notices nobody can read: a pool no other process attaches.
    pub fn off() -> Notices {
        Notices {
            ring: None,
            slot: Arc::new(AtomicU32::new(0)),
        }
    }

    /// The ring, if some process watches it.
    fn watched(&self) -> Option<&[AtomicU64]> {
        let w = self.ring.as_ref()?.words();
        (w[WATCHERS].load(Ordering::Relaxed) > 0).then_some(w)
    }

    /// `name` in `parent` changed (see [`Change::Name`]).
    pub fn name(&self, parent: u64, name: &[u8], ino: u64) {
        if let Some(w) = self.watched() {
            self.post(w, NAME, [parent, ino, 0, 0], name);
        }
    }

    /// `ino`'s attributes changed.
    pub fn attrs(&self, ino: u64) {
        if let Some(w) = self.watched() {
            self.post(w, ATTRS, [0, ino, 0, 0], &[]);
        }
    }

    /// `ino`'s data changed in `[off, off+len)` (0: to the end).
    pub fn data(&self, ino: u64, off: u64, len: u64) {
        if let Some(w) = self.watched() {
            self.post(w, DATA, [0, ino, off, len], &[]);
        }
    }

    fn post(&self, w: &[AtomicU64], kind: u64, fields: [u64; 4], name: &[u8]) {
        let n = w[HEAD].fetch_add(1, Ordering::SeqCst);
        let rec = record(w, n);
        let len = name.len().min(NAME_MAX);
        rec[1].store(
            kind | u64::from(self.slot.load(Ordering::Relaxed)) << 8 | (len as u64) << 16,
            Ordering::Release,
        );
        for (i, f) in fields.into_iter().enumerate() {
            rec[2 + i].store(f, Ordering::Release);
        }
        for (i, chunk) in name[..len].chunks(8).enumerate() {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            rec[6 + i].store(u64::from_le_bytes(b), Ordering::Release);
        }
        rec[0].store(n + 1, Ordering::Release);
        wake_reader(self.ring.as_ref().expect("watched"));
    }

    /// How many changes have been posted so far (0 for a disabled ring): a watcher
    /// whose [`Watcher::position`] is at least this has read every change whose call
    /// returned before this was loaded (each is claimed after its commit).
    pub fn posted(&self) -> u64 {
        self.ring
            .as_ref()
            .map_or(0, |r| r.words()[HEAD].load(Ordering::SeqCst))
    }

    /// Start watching: from now on every process posts its changes, and the returned
    /// [`Watcher`] reads those of every other process. `None` for a disabled ring.
    pub fn watch(&self, rt: Arc<dyn Runtime>) -> Option<Watcher> {
        let ring = self.ring.clone()?;
        let w = ring.words();
        w[WATCHERS].fetch_add(1, Ordering::SeqCst);
        let next = w[HEAD].load(Ordering::SeqCst);
        let generation = rt.generation();
        Some(Watcher {
            ring,
            own: self.slot.clone(),
            next,
            rt,
            generation,
        })
    }
}

/// Record `n`'s words.
fn record(w: &[AtomicU64], n: u64) -> &[AtomicU64] {
    let at = HEADER_BYTES / 8 + (n % RECORDS) as usize * RECORD_WORDS;
    &w[at..at + RECORD_WORDS]
}

fn sleeping(ring: &Span) -> &AtomicU32 {
    &ring.u32s()[SLEEPING_U32]
}

/// Wake the reader if it sleeps. Dekker with [`Watcher::sleep`]: the head was bumped
/// (SeqCst) before this load, and the reader sets the flag (SeqCst) before it looks at
/// the head, so either it sees the new record or this sees it asleep.
fn wake_reader(ring: &Span) {
    let s = sleeping(ring);
    if s.load(Ordering::SeqCst) != 0 && s.swap(0, Ordering::SeqCst) != 0 {
        super::lock::futex_wake_all(s);
    }
}

/// One process's view of the ring: reads other processes' changes in order.
/// Dropping it stops the watching.
pub struct Watcher {
    ring: Span,
    own: Arc<AtomicU32>,
    /// The next record to read.
    next: u64,
    rt: Arc<dyn Runtime>,
    /// The runtime's repair count when last looked at.
    generation: u64,
}

enum Read {
    Got(Option<Change>),
    NotYet,
    Lost,
}

impl Watcher {
    /// The number of the next change to read: every change numbered below it has been
    /// returned by [`Watcher::changes`] (or was this process's own).
    pub fn position(&self) -> u64 {
        self.next
    }

    /// The changes other processes made since the last call, waiting up to `timeout`
    /// for the first. Empty when none came in time, or when only this process's own
    /// came (they moved [`Watcher::position`], which the caller may publish at once).
    pub fn changes(&mut self, timeout: Duration) -> Vec<Change> {
        let deadline = Instant::now() + timeout;
        let from = self.next;
        loop {
            let out = self.drain();
            if !out.is_empty() || self.next != from || Instant::now() >= deadline {
                return out;
            }
            self.sleep(deadline);
        }
    }

    /// Everything published since the last read (a [`Change::Lost`] once for any gap).
    fn drain(&mut self) -> Vec<Change> {
        let mut out = Vec::new();
        let g = self.rt.generation();
        if g != self.generation {
            self.generation = g;
            out.push(Change::Lost);
        }
        let head = self.words()[HEAD].load(Ordering::SeqCst);
        if head.saturating_sub(self.next) > RECORDS {
            self.next = head;
            lose(&mut out);
        }
        let mut unpublished_since: Option<Instant> = None;
        while self.next < head {
            match self.read(self.next) {
                Read::Got(c) => {
                    out.extend(c);
                    self.next += 1;
                    unpublished_since = None;
                }
                Read::Lost => {
                    lose(&mut out);
                    self.next += 1;
                }
                Read::NotYet => {
                    let since = *unpublished_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= PUBLISH_GRACE {
                        lose(&mut out);
                        self.next += 1;
                    } else {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
            }
        }
        out
    }

    fn words(&self) -> &[AtomicU64] {
        self.ring.words()
    }

    /// Record `n`, if published and not overwritten while read; `Got(None)` for a
    /// change of this process's own.
    fn read(&self, n: u64) -> Read {
        let w = self.words();
        let rec = record(w, n);
        let seq = rec[0].load(Ordering::Acquire);
        if seq < n + 1 {
            return Read::NotYet;
        }
        if seq > n + 1 {
            return Read::Lost;
        }
        let meta = rec[1].load(Ordering::Acquire);
        let f: Vec<u64> = rec[2..6]
            .iter()
            .map(|x| x.load(Ordering::Acquire))
            .collect();
        let len = ((meta >> 16) as usize).min(NAME_MAX);
        let mut name = Vec::with_capacity(len);
        for word in &rec[6..6 + len.div_ceil(8)] {
            name.extend_from_slice(&word.load(Ordering::Acquire).to_le_bytes());
        }
        name.truncate(len);
        // Every field was loaded with Acquire: had one come from a writer that
        // claimed this slot again (record n + RECORDS), its claim would show here.
        fence(Ordering::SeqCst);
        if rec[0].load(Ordering::Acquire) != n + 1 || w[HEAD].load(Ordering::SeqCst) > n + RECORDS {
            return Read::Lost;
        }
        if (meta >> 8) as u8 as u32 == self.own.load(Ordering::Relaxed) {
            return Read::Got(None);
        }
        let change = match meta & 0xff {
            NAME => Change::Name {
                parent: f[0],
                name,
                ino: f[1],
            },
            ATTRS => Change::Attrs { ino: f[1] },
            DATA => Change::Data {
                ino: f[1],
                off: f[2],
                len: f[3],
            },
            // A kind no writer posts: the slot holds garbage, so something was missed.
            _ => return Read::Lost,
        };
        Read::Got(Some(change))
    }

    /// Sleep until a record is posted or `deadline` passes.
    fn sleep(&self, deadline: Instant) {
        let s = sleeping(&self.ring);
        s.store(1, Ordering::SeqCst);
        if self.words()[HEAD].load(Ordering::SeqCst) == self.next {
            let left = deadline.saturating_duration_since(Instant::now());
            super::lock::futex_wait(s, 1, left);
        }
        s.store(0, Ordering::SeqCst);
    }
}

/// Report a gap once per batch.
fn lose(out: &mut Vec<Change>) {
    if out.last() != Some(&Change::Lost) {
        out.push(Change::Lost);
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.words()[WATCHERS].fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Private;

    fn ring() -> (Arc<Region>, std::ops::Range<usize>) {
        let n = Notices::bytes_needed();
        (Arc::new(Region::anonymous(n).unwrap()), 0..n)
    }

    #[test]
    fn nothing_is_posted_while_nobody_watches() {
        let (r, at) = ring();
        let a = Notices::at(&r, at.clone(), 1);
        a.attrs(5);
        assert_eq!(r.words(0, 1)[HEAD].load(Ordering::Relaxed), 0);
        let b = Notices::at(&r, at, 2);
        let mut w = b.watch(Arc::new(Private)).unwrap();
        a.attrs(6);
        assert_eq!(w.changes(Duration::ZERO), vec![Change::Attrs { ino: 6 }]);
        drop(w);
        a.attrs(7);
        assert_eq!(r.words(0, 1)[HEAD].load(Ordering::Relaxed), 1);
        assert!(Notices::off().watch(Arc::new(Private)).is_none());
    }

    #[test]
    fn others_changes_arrive_in_order_and_own_are_skipped() {
        let (r, at) = ring();
        let other = Notices::at(&r, at.clone(), 3);
        let me = Notices::at(&r, at, 4);
        let mut w = me.watch(Arc::new(Private)).unwrap();
        let long = vec![b'x'; 255];
        other.name(1, b"a", 9);
        me.attrs(9);
        other.name(2, &long, 0);
        other.data(9, 4096, 10);
        assert_eq!(
            w.changes(Duration::ZERO),
            vec![
                Change::Name {
                    parent: 1,
                    name: b"a".to_vec(),
                    ino: 9
                },
                Change::Name {
                    parent: 2,
                    name: long,
                    ino: 0
                },
                Change::Data {
                    ino: 9,
                    off: 4096,
                    len: 10
                },
            ]
        );
        assert!(w.changes(Duration::from_millis(1)).is_empty());
    }

    /// A watcher that read only its own process's changes returns at once (not at the
    /// timeout), its position past every change posted: the FUSE daemon publishes
    /// that position to decide whether an open may keep the kernel's pages.
    #[test]
    fn own_changes_move_the_position_at_once() {
        let (r, at) = ring();
        let other = Notices::at(&r, at.clone(), 3);
        let me = Notices::at(&r, at, 4);
        let mut w = me.watch(Arc::new(Private)).unwrap();
        assert_eq!(w.position(), me.posted());
        me.attrs(9);
        me.data(9, 0, 0);
        assert_eq!(me.posted(), w.position() + 2);
        let start = Instant::now();
        assert!(w.changes(Duration::from_secs(10)).is_empty());
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "waited for the timeout"
        );
        assert_eq!(w.position(), me.posted());
        other.attrs(5);
        assert_eq!(w.changes(Duration::ZERO), vec![Change::Attrs { ino: 5 }]);
        assert_eq!(w.position(), other.posted());
        assert_eq!(Notices::off().posted(), 0);
    }

    #[test]
    fn a_reader_lapped_is_told_it_lost_changes() {
        let (r, at) = ring();
        let other = Notices::at(&r, at.clone(), 3);
        let mut w = Notices::at(&r, at, 4).watch(Arc::new(Private)).unwrap();
        for i in 0..RECORDS + 10 {
            other.attrs(i);
        }
        let got = w.changes(Duration::ZERO);
        assert_eq!(got, vec![Change::Lost]);
        other.attrs(1);
        assert_eq!(w.changes(Duration::ZERO), vec![Change::Attrs { ino: 1 }]);
    }

    #[test]
    fn a_record_never_published_is_lost_after_the_grace() {
        let (r, at) = ring();
        let other = Notices::at(&r, at.clone(), 3);
        let mut w = Notices::at(&r, at, 4).watch(Arc::new(Private)).unwrap();
        // A writer that claimed a number and died before publishing it.
        r.words(0, 1)[HEAD].fetch_add(1, Ordering::SeqCst);
        other.attrs(2);
        let t = Instant::now();
        let got = w.changes(Duration::ZERO);
        assert!(t.elapsed() >= PUBLISH_GRACE);
        assert_eq!(got, vec![Change::Lost, Change::Attrs { ino: 2 }]);
    }

    #[test]
    fn a_sleeping_reader_is_woken_by_a_post() {
        let (r, at) = ring();
        let other = Notices::at(&r, at.clone(), 3);
        let mut w = Notices::at(&r, at, 4).watch(Arc::new(Private)).unwrap();
        let t = Instant::now();
        let poster = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.attrs(8);
        });
        let got = w.changes(Duration::from_secs(10));
        poster.join().unwrap();
        assert_eq!(got, vec![Change::Attrs { ino: 8 }]);
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
