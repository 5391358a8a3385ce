//! Open file descriptions shared by processes: what POSIX says a `dup`'d fd, a fork's
//! parent and child, and an exec'd image share (the position and the status flags),
//! kept in the runtime region so that every process attached to the pool sees one copy
//! (docs/FORMAT.md, "Open file descriptions"; docs/CONSISTENCY.md, "open / close by
//! several processes").
//!
//! A description is named by a [key](DescKey): its slot's index in the low bits and
//! the slot's generation above them, bumped each time the slot is reused, so a key kept
//! after its description was freed never reaches the next one (EBADF). Each slot counts
//! its *claims* (process images that hold it); the last release frees it.
//!
//! The table is kept across repairs of the runtime state (a description outlives a
//! death elsewhere), except its lock words: a repair runs with every live process's
//! operations drained, and every hold of a slot's lock is inside an operation, so a
//! lock word still held then was left by a dead process and is cleared.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::lock::{self, Watch};
use super::Span;
use crate::error::{errno, Error, Result};

/// The name of a shared open file description (never 0).
pub type DescKey = u64;

/// Slots in the table: open file descriptions shared at once by every process
/// attached to a pool (a full table refuses another with ENFILE).
pub const CAPACITY: usize = 1 << INDEX_BITS;
const INDEX_BITS: u32 = 16;
/// The largest generation a key holds (the next wraps to 1): keeps every key below
/// [`RESERVED`].
const GEN_MAX: u64 = (1 << (64 - INDEX_BITS)) - 2;

/// Header words: how many slots were ever used (the scan for a free one stops there),
/// where the last scan found one, and how many below that mark are free (a hint: no
/// scan while none is, so filling the table costs no scans).
const HEADER_BYTES: usize = 64;
const HIGH: usize = 0;
const HINT: usize = 1;
const FREED: usize = 2;

/// One slot: a cache line of 64-bit words.
const SLOT_WORDS: usize = 8;
/// The slot's key (0: free; [`RESERVED`] while one process sets it up).
const KEY: usize = 0;
/// The generation of the key last made in this slot.
const GEN: usize = 1;
const INO: usize = 2;
/// The open flags (low 32 bits), [`PRIVILEGED`] and [`IN_GROUP`].
const FLAGS: usize = 3;
const POS: usize = 4;
/// Word 5 as two 32-bit words: the claims, then the lock.
const CLAIMS_U32: usize = 10;
const LOCK_U32: usize = 11;

const RESERVED: u64 = u64::MAX;
/// In the flags word: the file was opened by root (its writes keep set-user-ID bits).
pub const PRIVILEGED: u64 = 1 << 32;
/// In the flags word: the opener was in the file's group (its writes keep set-group-ID
/// on a file that is not group-executable).
pub const IN_GROUP: u64 = 1 << 33;
/// The status flags F_SETFL may change; the others are fixed at open.
pub const SETTABLE: i32 =
    libc::O_APPEND | libc::O_NONBLOCK | libc::O_NOATIME | libc::O_DIRECT | libc::O_ASYNC;

/// What a description is: the file, its flags, whether root opened it and whether
/// its opener was in the file's group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Described {
    pub ino: u64,
    pub flags: i32,
    pub privileged: bool,
    pub in_group: bool,
}

/// The table of shared open file descriptions.
#[derive(Clone)]
pub struct Descriptions {
    span: Span,
}

impl Descriptions {
    /// The bytes the table takes in the runtime region.
    pub fn bytes_needed() -> usize {
        HEADER_BYTES + CAPACITY * SLOT_WORDS * 8
    }

    /// The table in `span` (zeroed when the region was made).
    pub fn new(span: Span) -> Descriptions {
        assert!(span.bytes() >= Self::bytes_needed());
        Descriptions { span }
    }

    fn header(&self) -> &[AtomicU64] {
        &self.span.words()[..HEADER_BYTES / 8]
    }

    fn slot(&self, index: usize) -> &[AtomicU64] {
        let at = HEADER_BYTES / 8 + index * SLOT_WORDS;
        &self.span.words()[at..at + SLOT_WORDS]
    }

    fn claims(&self, index: usize) -> &AtomicU32 {
        &self.span.u32s()[HEADER_BYTES / 4 + index * SLOT_WORDS * 2 + CLAIMS_U32]
    }

    fn lock_word(&self, index: usize) -> &AtomicU32 {
        &self.span.u32s()[HEADER_BYTES / 4 + index * SLOT_WORDS * 2 + LOCK_U32]
    }

    /// A new description of `d` at position `pos`, with one claim (the caller's).
    /// ENFILE when every slot is in use.
    pub fn create(&self, d: Described, pos: u64) -> Result<DescKey> {
        let index = self.reserve()?;
        let s = self.slot(index);
        let prev = s[GEN].load(Ordering::Relaxed);
        let gen = if prev >= GEN_MAX { 1 } else { prev + 1 };
        s[GEN].store(gen, Ordering::Relaxed);
        s[INO].store(d.ino, Ordering::Relaxed);
        let privileged = if d.privileged { PRIVILEGED } else { 0 };
        let in_group = if d.in_group { IN_GROUP } else { 0 };
        s[FLAGS].store(
            u64::from(d.flags as u32) | privileged | in_group,
            Ordering::Relaxed,
        );
        s[POS].store(pos, Ordering::Relaxed);
        self.claims(index).store(1, Ordering::Relaxed);
        let key = gen << INDEX_BITS | index as u64;
        // Published last: whoever sees the key sees the fields.
        s[KEY].store(key, Ordering::Release);
        Ok(key)
    }

    /// Take a free slot (marked RESERVED): one already used if any is free, else a
    /// fresh one.
    fn reserve(&self) -> Result<usize> {
        let h = self.header();
        loop {
            let high = h[HIGH].load(Ordering::Acquire) as usize;
            let hint = h[HINT].load(Ordering::Relaxed) as usize;
            let scan = if h[FREED].load(Ordering::Acquire) > 0 || high >= CAPACITY {
                high
            } else {
                0
            };
            for k in 0..scan {
                let i = (hint + k) % high;
                if self.slot(i)[KEY]
                    .compare_exchange(0, RESERVED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    h[HINT].store(i as u64 + 1, Ordering::Relaxed);
                    let _ = h[FREED]
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
                    return Ok(i);
                }
            }
            if high >= CAPACITY {
                return Err(Error::Errno(libc::ENFILE));
            }
            // Grow by one and take the new slot, unless a scan took it first.
            let grown = h[HIGH]
                .compare_exchange(
                    high as u64,
                    high as u64 + 1,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok();
            if grown
                && self.slot(high)[KEY]
                    .compare_exchange(0, RESERVED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Ok(high);
            }
        }
    }

    /// The slot index `key` names, if it may name one at all.
    fn index_of(key: DescKey) -> Result<usize> {
        let index = (key & ((1 << INDEX_BITS) - 1)) as usize;
        if key == 0 || key == RESERVED || index >= CAPACITY {
            return Err(errno::EBADF);
        }
        Ok(index)
    }

    /// Whether `key` names a live description now.
    pub fn is_live(&self, key: DescKey) -> bool {
        Self::index_of(key).is_ok_and(|i| self.slot(i)[KEY].load(Ordering::Acquire) == key)
    }

    /// Run `f` holding the lock of `key`'s slot, the key checked under it (EBADF for a
    /// key naming no live description). Must be called inside an operation (see the
    /// module comment).
    fn locked<T>(
        &self,
        key: DescKey,
        watch: &dyn Watch,
        f: impl FnOnce(&[AtomicU64], &AtomicU32) -> Result<T>,
    ) -> Result<T> {
        let index = Self::index_of(key)?;
        if self.slot(index)[KEY].load(Ordering::Acquire) != key {
            return Err(errno::EBADF);
        }
        let _g = lock::lock(self.lock_word(index), watch)?;
        crate::runtime::testing::stop_here("desc.lock");
        let s = self.slot(index);
        if s[KEY].load(Ordering::Acquire) != key {
            return Err(errno::EBADF);
        }
        f(s, self.claims(index))
    }

    /// What `key` describes (EBADF if nothing).
    pub fn get(&self, key: DescKey, watch: &dyn Watch) -> Result<Described> {
        self.locked(key, watch, |s, _| Ok(described(s)))
    }

    /// One more claim on `key`.
    pub fn claim(&self, key: DescKey, watch: &dyn Watch) -> Result<()> {
        self.locked(key, watch, |_, claims| {
            let n = claims.load(Ordering::Relaxed);
            if n == u32::MAX {
                return Err(Error::Invalid(format!(
                    "open file description {key:#x} has {n} claims already"
                )));
            }
            claims.store(n + 1, Ordering::Relaxed);
            Ok(())
        })
    }

    /// One claim on `key` less; the last frees the description. True if it did.
    pub fn release(&self, key: DescKey, watch: &dyn Watch) -> Result<bool> {
        self.locked(key, watch, |s, claims| {
            let n = claims.load(Ordering::Relaxed).saturating_sub(1);
            claims.store(n, Ordering::Relaxed);
            if n == 0 {
                s[KEY].store(0, Ordering::Release);
                self.header()[FREED].fetch_add(1, Ordering::AcqRel);
            }
            Ok(n == 0)
        })
    }

    /// The claims on `key` now (0 if it names no live description).
    pub fn claims_of(&self, key: DescKey) -> u32 {
        match Self::index_of(key) {
            Ok(i) if self.is_live(key) => self.claims(i).load(Ordering::Relaxed),
            _ => 0,
        }
    }

    /// `step` at `key`'s position, which it moves: one step for every process (as
    /// Linux's `f_pos_lock`), so two reads or writes never use the same position.
    pub fn at_position<T>(
        &self,
        key: DescKey,
        watch: &dyn Watch,
        step: impl FnOnce(u64) -> Result<(T, u64)>,
    ) -> Result<T> {
        self.locked(key, watch, |s, _| {
            let (t, pos) = step(s[POS].load(Ordering::Relaxed))?;
            s[POS].store(pos, Ordering::Relaxed);
            Ok(t)
        })
    }

    /// The open flags of `key` (its status flags as F_GETFL shows them).
    pub fn flags(&self, key: DescKey) -> Result<i32> {
        let index = Self::index_of(key)?;
        let s = self.slot(index);
        let f = s[FLAGS].load(Ordering::Acquire) as u32 as i32;
        if s[KEY].load(Ordering::Acquire) != key {
            return Err(errno::EBADF);
        }
        Ok(f)
    }

    /// F_SETFL: the [`SETTABLE`] bits of `flags` replace those of `key`'s.
    pub fn set_flags(&self, key: DescKey, flags: i32) -> Result<()> {
        let index = Self::index_of(key)?;
        let w = &self.slot(index)[FLAGS];
        let mut cur = w.load(Ordering::Acquire);
        loop {
            if self.slot(index)[KEY].load(Ordering::Acquire) != key {
                return Err(errno::EBADF);
            }
            let low = (cur as u32 as i32 & !SETTABLE) | (flags & SETTABLE);
            let new = (cur & !0xffff_ffff) | u64::from(low as u32);
            match w.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// A repair (every live process's operations drained): clear the lock words a dead
    /// process left held.
    pub fn unlock_all(&self) {
        let high = (self.header()[HIGH].load(Ordering::Acquire) as usize).min(CAPACITY);
        for i in 0..high {
            self.lock_word(i).store(0, Ordering::Release);
        }
    }
}

fn described(s: &[AtomicU64]) -> Described {
    let f = s[FLAGS].load(Ordering::Relaxed);
    Described {
        ino: s[INO].load(Ordering::Relaxed),
        flags: f as u32 as i32,
        privileged: f & PRIVILEGED != 0,
        in_group: f & IN_GROUP != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::lock::Alone;

    fn table() -> Descriptions {
        Descriptions::new(Span::anonymous(Descriptions::bytes_needed()).unwrap())
    }

    fn file(ino: u64) -> Described {
        Described {
            ino,
            flags: libc::O_RDWR,
            privileged: false,
            in_group: false,
        }
    }

    #[test]
    fn claims_count_and_the_last_release_frees_and_stales_the_key() {
        let t = table();
        let a = t.create(file(5), 7).unwrap();
        assert_ne!(a, 0);
        assert_eq!(t.get(a, &Alone).unwrap(), file(5));
        t.claim(a, &Alone).unwrap();
        assert_eq!(t.claims_of(a), 2);
        assert!(!t.release(a, &Alone).unwrap());
        assert!(t.release(a, &Alone).unwrap());
        assert!(!t.is_live(a));
        // The slot is reused under a new key; the old one reaches nothing.
        let b = t.create(file(6), 0).unwrap();
        assert_eq!(a & 0xffff, b & 0xffff, "same slot");
        assert_ne!(a, b);
        assert_eq!(t.get(a, &Alone).unwrap_err().errno(), libc::EBADF);
        assert_eq!(t.claim(a, &Alone).unwrap_err().errno(), libc::EBADF);
        assert_eq!(t.flags(a).unwrap_err().errno(), libc::EBADF);
        for bad in [0, u64::MAX, 12345 << 16] {
            assert_eq!(t.get(bad, &Alone).unwrap_err().errno(), libc::EBADF);
        }
        assert_eq!(t.get(b, &Alone).unwrap().ino, 6);
    }

    #[test]
    fn only_settable_flags_change() {
        let t = table();
        let k = t
            .create(
                Described {
                    ino: 3,
                    flags: libc::O_WRONLY,
                    privileged: true,
                    in_group: true,
                },
                0,
            )
            .unwrap();
        t.set_flags(k, libc::O_APPEND | libc::O_RDWR | libc::O_TRUNC)
            .unwrap();
        assert_eq!(t.flags(k).unwrap(), libc::O_WRONLY | libc::O_APPEND);
        assert!(t.get(k, &Alone).unwrap().privileged);
        assert!(t.get(k, &Alone).unwrap().in_group);
        t.set_flags(k, 0).unwrap();
        assert_eq!(t.flags(k).unwrap(), libc::O_WRONLY);
    }

    #[test]
    fn a_full_table_says_enfile_until_a_slot_is_freed() {
        let t = table();
        let keys: Vec<_> = (0..CAPACITY as u64)
            .map(|i| t.create(file(i + 1), 0).unwrap())
            .collect();
        assert_eq!(t.create(file(1), 0).unwrap_err().errno(), libc::ENFILE);
        t.release(keys[77], &Alone).unwrap();
        let k = t.create(file(9), 0).unwrap();
        assert_eq!(k & 0xffff, 77);
    }

    #[test]
    fn position_steps_from_threads_never_overlap() {
        let t = table();
        let k = t.create(file(1), 0).unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        t.at_position(k, &Alone, |p| Ok(((), p + 3))).unwrap();
                    }
                });
            }
        });
        assert_eq!(t.at_position(k, &Alone, |p| Ok((p, p))).unwrap(), 120_000);
    }

    #[test]
    fn unlock_all_frees_a_lock_left_held() {
        let t = table();
        let k = t.create(file(1), 0).unwrap();
        std::mem::forget(lock::lock(t.lock_word((k & 0xffff) as usize), &Alone).unwrap());
        assert!(lock::try_lock(t.lock_word((k & 0xffff) as usize)).is_none());
        t.unlock_all();
        t.claim(k, &Alone).unwrap();
        assert_eq!(t.claims_of(k), 2);
    }
}
