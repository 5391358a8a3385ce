//! Locks in shared memory: one 32-bit word each, waited on with futexes (not the
//! private kind: the word is shared between processes). They record no owner. A
//! process killed while holding one leaves it held; waiters therefore wait in short
//! slices and between slices ask a [`Watch`] whether something died, in which case
//! the runtime is being repaired and the wait ends with [`Interrupted`]: the
//! operation unwinds (dropping what it holds) and is retried after the repair, which
//! rebuilds every lock word along with the rest of the runtime state.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The runtime is being repaired: the operation must unwind and be retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted;

impl From<Interrupted> for crate::error::Error {
    fn from(_: Interrupted) -> Self {
        crate::error::errno::ERESTART
    }
}

/// Asked by a waiter between slices of a long wait.
pub trait Watch: Sync {
    /// `Err` if the runtime is (now) under repair; may look for dead processes.
    fn check(&self) -> Result<(), Interrupted>;
}

/// A watch for state only this process uses: nothing can die under it.
pub struct Alone;
impl Watch for Alone {
    fn check(&self) -> Result<(), Interrupted> {
        Ok(())
    }
}

/// How long one slice of a wait lasts before the waiter checks the watch.
const SLICE: Duration = Duration::from_millis(10);
/// Spins before sleeping: most holds last well under a microsecond.
const SPINS: u32 = 64;

/// Sleep on `word` (shared between processes) while it holds `expect`, at most
/// `timeout`.
pub(crate) fn futex_wait(word: &AtomicU32, expect: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the 4-byte word we borrow (valid for the call) and
    // sleeps only while it still holds `expect`; the timespec outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expect,
            &ts as *const libc::timespec,
        );
    }
}

/// Wake every sleeper on `word`.
pub(crate) fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the word's address as a key; it reads no memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// One step of a wait on `word`: spin a little, then sleep (one slice) while it holds
/// `seen`, then ask the watch.
fn sleep_on(
    word: &AtomicU32,
    seen: u32,
    spins: &mut u32,
    watch: &dyn Watch,
) -> Result<(), Interrupted> {
    if *spins < SPINS {
        *spins += 1;
        std::hint::spin_loop();
        return Ok(());
    }
    futex_wait(word, seen, SLICE);
    watch.check()
}

const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// A mutual-exclusion lock on a shared word (0 free, 1 held, 2 held with waiters).
pub struct MutexGuard<'a> {
    word: &'a AtomicU32,
}

/// Take the lock in `word`.
pub fn lock<'a>(word: &'a AtomicU32, watch: &dyn Watch) -> Result<MutexGuard<'a>, Interrupted> {
    if word
        .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        return Ok(MutexGuard { word });
    }
    let mut spins = 0;
    loop {
        let s = word.load(Ordering::Relaxed);
        if s == 0 {
            if word
                .compare_exchange(0, CONTENDED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(MutexGuard { word });
            }
            continue;
        }
        if s == LOCKED
            && word
                .compare_exchange(LOCKED, CONTENDED, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        sleep_on(word, CONTENDED, &mut spins, watch)?;
    }
}

/// Take the lock in `word` if it is free now.
pub fn try_lock(word: &AtomicU32) -> Option<MutexGuard<'_>> {
    word.compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
        .ok()
        .map(|_| MutexGuard { word })
}

impl Drop for MutexGuard<'_> {
    fn drop(&mut self) {
        if self.word.swap(0, Ordering::Release) == CONTENDED {
            futex_wake_all(self.word);
        }
    }
}

const WRITER: u32 = 1 << 31;
const WAITING: u32 = 1 << 30;
/// Held for update: excludes writers and other updaters, not readers (see [`update`]).
const UPDATER: u32 = 1 << 29;
/// How many exclusive holds ended, modulo 2^13 (bits 16-28): a reader that takes no
/// hold ([`stamp`], [`unchanged`]) sees that a writer came and went during its reads.
const CHANGES: u32 = ((1 << 13) - 1) << 16;
/// One more exclusive hold ended.
const CHANGE: u32 = 1 << 16;
/// Readers holding the lock shared (bits 0-15).
const READERS: u32 = CHANGE - 1;

/// A reader-writer lock word was seen held as `s`: mark it waited on, then wait one
/// step (a failed mark just means the word changed: the caller looks again).
fn wait_turn(
    word: &AtomicU32,
    s: u32,
    spins: &mut u32,
    watch: &dyn Watch,
) -> Result<(), Interrupted> {
    if s & WAITING == 0
        && word
            .compare_exchange(s, s | WAITING, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return Ok(());
    }
    sleep_on(word, s | WAITING, spins, watch)
}

/// A shared (read) hold of a reader-writer lock word.
pub struct ReadGuard<'a> {
    word: &'a AtomicU32,
}

/// An exclusive (write) hold of a reader-writer lock word.
pub struct WriteGuard<'a> {
    word: &'a AtomicU32,
}

/// Hold the reader-writer lock in `word` shared.
pub fn read<'a>(word: &'a AtomicU32, watch: &dyn Watch) -> Result<ReadGuard<'a>, Interrupted> {
    let mut spins = 0;
    loop {
        let s = word.load(Ordering::Relaxed);
        if s & WRITER == 0 {
            assert!(s & READERS != READERS, "too many readers of one lock");
            if word
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(ReadGuard { word });
            }
            continue;
        }
        wait_turn(word, s, &mut spins, watch)?;
    }
}

/// Hold the reader-writer lock in `word` alone.
pub fn write<'a>(word: &'a AtomicU32, watch: &dyn Watch) -> Result<WriteGuard<'a>, Interrupted> {
    let mut spins = 0;
    loop {
        let s = word.load(Ordering::Relaxed);
        if s & (WRITER | UPDATER | READERS) == 0 {
            // Keep the waiting bit: others may still sleep on the word.
            if word
                .compare_exchange_weak(s, s | WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(WriteGuard { word });
            }
            continue;
        }
        wait_turn(word, s, &mut spins, watch)?;
    }
}

/// Hold the lock in `word` alone if nobody holds it now.
pub fn try_write(word: &AtomicU32) -> Option<WriteGuard<'_>> {
    let s = word.load(Ordering::Relaxed);
    if s & (WRITER | UPDATER | READERS) != 0 {
        return None;
    }
    word.compare_exchange(s, s | WRITER, Ordering::Acquire, Ordering::Relaxed)
        .ok()
        .map(|_| WriteGuard { word })
}

/// The longest pause of a writer waiting for counted readers to leave.
const COUNTED_PAUSE: Duration = Duration::from_micros(200);

/// A shared hold of a lock whose readers are counted outside its word, each in a
/// counter of its own CPU's (see [`read_counted`]).
pub struct CountedGuard<'a> {
    count: &'a AtomicU32,
}

/// Hold the lock in `word` shared, counting the hold in `count` (one of several
/// counters, each written by one CPU, so readers on different CPUs write no common
/// line; the word itself is only read). Its writers wait for every counter to drain
/// ([`write_counted`]). As with [`read`], readers do not wait for a writer that is
/// only waiting: the writer bit is set only while a writer holds the lock.
pub fn read_counted<'a>(
    word: &AtomicU32,
    count: &'a AtomicU32,
    watch: &dyn Watch,
) -> Result<CountedGuard<'a>, Interrupted> {
    let mut spins = 0;
    loop {
        // Count first, then look (a writer sets its bit first, then looks at the
        // counters): sequentially consistent, so at least one of the two sees the
        // other.
        count.fetch_add(1, Ordering::SeqCst);
        if word.load(Ordering::SeqCst) & WRITER == 0 {
            return Ok(CountedGuard { count });
        }
        count.fetch_sub(1, Ordering::Release);
        loop {
            let s = word.load(Ordering::Relaxed);
            if s & WRITER == 0 {
                break;
            }
            wait_turn(word, s, &mut spins, watch)?;
        }
    }
}

impl Drop for CountedGuard<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Release);
    }
}

/// Hold the lock in `word` alone if no writer holds it and `drained` (every reader
/// counter of it is zero, see [`read_counted`]) holds once its writer bit is set.
pub fn try_write_counted<'a>(
    word: &'a AtomicU32,
    drained: &dyn Fn() -> bool,
) -> Option<WriteGuard<'a>> {
    let s = word.load(Ordering::Relaxed);
    if s & (WRITER | UPDATER | READERS) != 0 {
        return None;
    }
    word.compare_exchange(s, s | WRITER, Ordering::SeqCst, Ordering::Relaxed)
        .ok()?;
    let held = WriteGuard { word };
    // A reader that counted itself before the bit was set is seen here; one that
    // counts itself after sees the bit and steps back.
    if drained() {
        Some(held)
    } else {
        None
    }
}

/// Hold the lock in `word` alone (see [`try_write_counted`]). While readers are
/// inside, the writer bit is let go between attempts, so new readers are never held
/// up by a waiting writer (a reader inside may wait for another shared hold of the
/// same lock without deadlock, as with [`read`]).
pub fn write_counted<'a>(
    word: &'a AtomicU32,
    drained: &dyn Fn() -> bool,
    watch: &dyn Watch,
) -> Result<WriteGuard<'a>, Interrupted> {
    let mut spins = 0;
    let mut pause = Duration::from_micros(20);
    loop {
        if let Some(held) = try_write_counted(word, drained) {
            return Ok(held);
        }
        let s = word.load(Ordering::Relaxed);
        if s & WRITER != 0 {
            wait_turn(word, s, &mut spins, watch)?;
        } else if spins < SPINS {
            spins += 1;
            std::hint::spin_loop();
        } else {
            // Readers leave without waking anyone: look again after a pause, short
            // enough that a writer meets a moment with no reader inside even while
            // readers keep coming.
            std::thread::sleep(pause);
            pause = (pause * 2).min(COUNTED_PAUSE);
            watch.check()?;
        }
    }
}

/// A hold for update of a reader-writer lock word: readers still come and go; it
/// becomes an exclusive hold with [`UpdateGuard::upgrade`].
pub struct UpdateGuard<'a> {
    word: &'a AtomicU32,
}

/// Hold the reader-writer lock in `word` for update: alone among writers and
/// updaters, beside readers. For a change that prepares what no reader can see yet
/// and needs the lock alone only to publish it.
pub fn update<'a>(word: &'a AtomicU32, watch: &dyn Watch) -> Result<UpdateGuard<'a>, Interrupted> {
    let mut spins = 0;
    loop {
        let s = word.load(Ordering::Relaxed);
        if s & (WRITER | UPDATER) == 0 {
            if word
                .compare_exchange_weak(s, s | UPDATER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(UpdateGuard { word });
            }
            continue;
        }
        wait_turn(word, s, &mut spins, watch)?;
    }
}

impl<'a> UpdateGuard<'a> {
    /// Hold the lock alone: new readers wait from now on (the writer bit is set at
    /// once), and this waits for the readers inside to leave. Interrupted by a
    /// repair, it lets go of the lock (the readers' counts stay).
    pub fn upgrade(self, watch: &dyn Watch) -> Result<WriteGuard<'a>, Interrupted> {
        let word = self.word;
        std::mem::forget(self);
        word.fetch_or(WRITER, Ordering::Acquire);
        let mut spins = 0;
        loop {
            let s = word.load(Ordering::Acquire);
            if s & READERS == 0 {
                word.fetch_and(!UPDATER, Ordering::Relaxed);
                return Ok(WriteGuard { word });
            }
            if let Err(e) = wait_turn(word, s, &mut spins, watch) {
                if word.fetch_and(!(WRITER | UPDATER), Ordering::Release) & WAITING != 0 {
                    futex_wake_all(word);
                }
                return Err(e);
            }
        }
    }
}

impl Drop for UpdateGuard<'_> {
    fn drop(&mut self) {
        let before = self.word.fetch_and(!UPDATER, Ordering::Release);
        if before & WAITING != 0 {
            self.word.fetch_and(!WAITING, Ordering::Relaxed);
            futex_wake_all(self.word);
        }
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        let before = self.word.fetch_sub(1, Ordering::Release);
        if before & READERS == 1 && before & WAITING != 0 {
            self.word.fetch_and(!WAITING, Ordering::Relaxed);
            futex_wake_all(self.word);
        }
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        // Counts the hold (for readers without a hold, see [`unchanged`]); clears the
        // writer and waiting bits (no reader or updater is inside: the word is ours).
        let mut s = self.word.load(Ordering::Relaxed);
        loop {
            let next = (s & CHANGES).wrapping_add(CHANGE) & CHANGES;
            match self
                .word
                .compare_exchange_weak(s, next, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        if s & WAITING != 0 {
            futex_wake_all(self.word);
        }
    }
}

/// The reader-writer lock in `word` for a reader that takes no hold (a sequence
/// lock): `None` while it is held alone, else a stamp for [`unchanged`]. Readers and
/// updaters beside it are allowed, as beside a shared hold.
#[inline]
pub fn stamp(word: &AtomicU32) -> Option<u32> {
    let s = word.load(Ordering::Acquire);
    (s & WRITER == 0).then_some(s & CHANGES)
}

/// After reads begun at `stamp` (see [`stamp`]): true if no exclusive hold of the lock
/// began since, so the reads saw what a shared hold would have seen. A hold that began
/// either still sets the writer bit or, ended, has changed the count (it would have to
/// end 8,192 times during the reads to hide).
#[inline]
pub fn unchanged(word: &AtomicU32, stamp: u32) -> bool {
    // Orders the caller's reads before the second look at the word (loads are not
    // reordered with each other on x86; this keeps the compiler from doing it).
    std::sync::atomic::fence(Ordering::Acquire);
    let s = word.load(Ordering::Relaxed);
    s & WRITER == 0 && s & CHANGES == stamp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Interrupts every wait once `dead` is set (a stand-in for a dead holder).
    struct Flag(std::sync::atomic::AtomicBool);
    impl Watch for Flag {
        fn check(&self) -> Result<(), Interrupted> {
            if self.0.load(Ordering::SeqCst) {
                Err(Interrupted)
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn mutex_excludes_across_threads() {
        let word = Arc::new(AtomicU32::new(0));
        let count = Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let (word, count) = (word.clone(), count.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let _g = lock(&word, &Alone).unwrap();
                        // A non-atomic read-modify-write: lost updates show a broken lock.
                        let v = count.load(Ordering::Relaxed);
                        count.store(v + 1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(count.load(Ordering::Relaxed), 80_000);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn rwlock_writers_exclude_readers_and_each_other() {
        let word = Arc::new(AtomicU32::new(0));
        let pair = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let (word, pair) = (word.clone(), pair.clone());
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        if t % 2 == 0 {
                            let _w = write(&word, &Alone).unwrap();
                            pair.0.store(i, Ordering::Relaxed);
                            pair.1.store(i, Ordering::Relaxed);
                        } else {
                            let _r = read(&word, &Alone).unwrap();
                            let a = pair.0.load(Ordering::Relaxed);
                            let b = pair.1.load(Ordering::Relaxed);
                            assert_eq!(a, b, "a reader saw a half-done write");
                        }
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(word.load(Ordering::Relaxed) & !CHANGES, 0);
    }

    #[test]
    fn an_update_hold_lets_readers_in_and_upgrades_once_they_leave() {
        let word = AtomicU32::new(0);
        let upd = update(&word, &Alone).unwrap();
        assert!(try_write(&word).is_none(), "a writer beside an updater");
        let r = read(&word, &Alone).unwrap();
        std::thread::scope(|sc| {
            let up = sc.spawn(|| upd.upgrade(&Alone).unwrap());
            std::thread::sleep(Duration::from_millis(50));
            assert!(!up.is_finished(), "upgraded with a reader inside");
            drop(r);
            let w = up.join().unwrap();
            assert_eq!(word.load(Ordering::Relaxed) & (READERS | UPDATER), 0);
            drop(w);
        });
        assert_eq!(word.load(Ordering::Relaxed), CHANGE, "one hold ended");
        assert!(try_write(&word).is_some());
    }

    #[test]
    fn a_stamp_sees_every_exclusive_hold_that_began_after_it() {
        let word = AtomicU32::new(0);
        let s = stamp(&word).unwrap();
        assert!(unchanged(&word, s), "nothing happened");
        // Readers and updaters beside the stamp are what a shared hold allows.
        drop(read(&word, &Alone).unwrap());
        drop(update(&word, &Alone).unwrap());
        assert!(unchanged(&word, s));
        let w = write(&word, &Alone).unwrap();
        assert!(!unchanged(&word, s), "a writer holds it now");
        assert_eq!(stamp(&word), None, "no stamp while held alone");
        drop(w);
        assert!(!unchanged(&word, s), "a writer came and went");
        let s = stamp(&word).unwrap();
        let u = update(&word, &Alone).unwrap();
        drop(u.upgrade(&Alone).unwrap());
        assert!(!unchanged(&word, s), "an upgraded update came and went");
        // The count wraps without touching the other bits.
        let s = stamp(&word).unwrap();
        for _ in 0..(CHANGES >> 16) {
            drop(write(&word, &Alone).unwrap());
        }
        assert!(!unchanged(&word, s));
        drop(write(&word, &Alone).unwrap());
        assert!(unchanged(&word, s), "8,192 holds hide (documented)");
        assert_eq!(word.load(Ordering::Relaxed) & !CHANGES, 0);
    }

    #[test]
    fn a_lock_left_held_ends_the_wait_once_the_watch_says_so() {
        let word = AtomicU32::new(0);
        // Held and never released, as by a killed process.
        std::mem::forget(lock(&word, &Alone).unwrap());
        let watch = Flag(false.into());
        std::thread::scope(|s| {
            let h = s.spawn(|| lock(&word, &watch).map(|_| ()));
            std::thread::sleep(Duration::from_millis(50));
            watch.0.store(true, Ordering::SeqCst);
            assert_eq!(h.join().unwrap(), Err(Interrupted));
        });
        let rw = AtomicU32::new(0);
        std::mem::forget(write(&rw, &Alone).unwrap());
        assert_eq!(read(&rw, &watch).map(|_| ()), Err(Interrupted));
        assert!(try_write(&rw).is_none());
    }
}
