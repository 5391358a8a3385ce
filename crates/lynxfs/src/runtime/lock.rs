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

/// How long one slice of a wait lasts before the waiter checks the watch. A waiter
/// is woken by the release it waits for; the slice only bounds how long a lock a dead
/// process left held goes unnoticed.
const SLICE: Duration = Duration::from_millis(10);
/// Spins before sleeping: most holds last well under a microsecond, and a spin is
/// cheaper than a sleep and a wake when the holder is running on another CPU.
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
    futex_wake(word, i32::MAX);
}

/// Wake at most `n` sleepers on `word`, the longest asleep first (the kernel queues
/// the sleepers of one word in the order they came).
fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE only uses the word's address as a key; it reads no memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n);
    }
}

/// Sleep on `word` while it holds `expect`, as one of the sleepers in `class` (a
/// futex bitset: a wake names the classes it wakes), at most [`SLICE`].
fn futex_wait_as(word: &AtomicU32, expect: u32, class: u32) {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let nanos = now.tv_nsec as u64 + SLICE.as_nanos() as u64;
    let until = libc::timespec {
        tv_sec: now.tv_sec + (nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT_BITSET reads the 4-byte word we borrow (valid for the call)
    // and sleeps only while it still holds `expect`, until the absolute monotonic
    // time `until` (which outlives the call). Not FUTEX_PRIVATE_FLAG: the word is
    // shared between processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET,
            expect,
            &until as *const libc::timespec,
            std::ptr::null::<u32>(),
            class,
        );
    }
}

/// Wake at most `n` sleepers of `class` on `word`, the longest asleep first.
fn futex_wake_as(word: &AtomicU32, class: u32, n: i32) {
    // SAFETY: FUTEX_WAKE_BITSET only uses the word's address as a key; it reads no
    // memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE_BITSET,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            class,
        );
    }
}

/// The spins a waiter that first saw the word as `s` may still make: none when
/// others already sleep on it (`asleep` is set), so that it queues behind them
/// rather than spinning to overtake them.
fn spins_for(s: u32, asleep: u32) -> u32 {
    if s & asleep == asleep {
        SPINS
    } else {
        0
    }
}

/// One more spin of a wait, if it has spun fewer than [`SPINS`] times.
fn spin(spins: &mut u32) -> bool {
    if *spins >= SPINS {
        return false;
    }
    *spins += 1;
    std::hint::spin_loop();
    true
}

/// Sleep (one slice at most) while `word` holds `seen`, then ask the watch: a wait for
/// a word that its changer bumps and wakes every sleeper of (with [`futex_wake_all`]),
/// so that all wake at once instead of in turn through a lock.
pub(crate) fn sleep_while(
    word: &AtomicU32,
    seen: u32,
    watch: &dyn Watch,
) -> Result<(), Interrupted> {
    futex_wait(word, seen, SLICE);
    watch.check()
}

/// One step of a wait on `word`: spin a little, then sleep (one slice) while it holds
/// `seen`, then ask the watch.
fn sleep_on(
    word: &AtomicU32,
    seen: u32,
    spins: &mut u32,
    watch: &dyn Watch,
) -> Result<(), Interrupted> {
    if spin(spins) {
        return Ok(());
    }
    futex_wait(word, seen, SLICE);
    // Woken by a release, it is next: it may spin again (a thread that came meanwhile
    // may have taken the lock, but holds it only briefly).
    *spins = 0;
    watch.check()
}

const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// A mutual-exclusion lock on a shared word (0 free, 1 held, 2 held with waiters).
/// A release wakes one sleeper, which takes the lock as "held with waiters" (others
/// may sleep still), so each release hands the next sleeper its turn.
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
    let mut spins = spins_for(word.load(Ordering::Relaxed), CONTENDED);
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
            futex_wake(self.word, 1);
        }
    }
}

const WRITER: u32 = 1 << 31;
/// Readers sleep on the word, waiting for the writer to leave.
const READERS_WAITING: u32 = 1 << 30;
/// Held for update: excludes writers and other updaters, not readers (see [`update`]).
const UPDATER: u32 = 1 << 29;
/// How many exclusive holds ended, modulo 2^13 (bits 16-28): a reader that takes no
/// hold ([`stamp`], [`unchanged`]) sees that a writer came and went during its reads.
const CHANGES: u32 = ((1 << 13) - 1) << 16;
/// One more exclusive hold ended.
const CHANGE: u32 = 1 << 16;
/// Writers or updaters sleep on the word, waiting for their turn.
const WRITERS_WAITING: u32 = 1 << 15;
/// Readers holding the lock shared (bits 0-14).
const READERS: u32 = WRITERS_WAITING - 1;

/// The futex classes of a reader-writer word's sleepers: a release wakes every
/// sleeping reader (they can all go in) but one sleeping writer or updater (only one
/// can), so a release does not wake a crowd that all but one of must sleep again.
const AS_READER: u32 = 1;
const AS_WRITER: u32 = 2;
/// The one updater that upgrades, waiting for the readers inside to leave.
const AS_UPGRADER: u32 = 4;

/// A writer or updater that has slept takes the lock marked "writers waiting": the
/// release that woke it woke no other, and others may still sleep.
fn taken_by(s: u32, slept: bool) -> u32 {
    if slept {
        s | WRITERS_WAITING
    } else {
        s
    }
}

/// Wake who waits for a release of a hold whose word was `s` (its waiting bits
/// already cleared from the word): every reader, one writer or updater.
fn wake_after(word: &AtomicU32, s: u32) {
    if s & READERS_WAITING != 0 {
        futex_wake_as(word, AS_READER, i32::MAX);
    }
    if s & WRITERS_WAITING != 0 {
        futex_wake_as(word, AS_WRITER, 1);
    }
}

/// A reader-writer lock word was seen held as `s` by a reader that must wait: spin a
/// little, then mark readers waiting and sleep one step (a failed mark just means the
/// word changed: the caller looks again).
fn wait_as_reader(
    word: &AtomicU32,
    s: u32,
    spins: &mut u32,
    watch: &dyn Watch,
) -> Result<(), Interrupted> {
    wait_marked(word, s, READERS_WAITING, AS_READER, spins, watch).map(drop)
}

/// [`wait_as_reader`] for a writer or updater; sets `slept` once it has slept.
fn wait_as_writer(
    word: &AtomicU32,
    s: u32,
    spins: &mut u32,
    slept: &mut bool,
    watch: &dyn Watch,
) -> Result<(), Interrupted> {
    if wait_marked(word, s, WRITERS_WAITING, AS_WRITER, spins, watch)? {
        *slept = true;
    }
    Ok(())
}

/// One step of a wait on a reader-writer word seen as `s`: spin, or mark the word with
/// `mark` and sleep as one of `class`; true if it slept. A waiter that finds others of
/// its kind asleep already does not spin: it queues behind them rather than spinning
/// to overtake them. Woken, it is next, and may spin again.
fn wait_marked(
    word: &AtomicU32,
    s: u32,
    mark: u32,
    class: u32,
    spins: &mut u32,
    watch: &dyn Watch,
) -> Result<bool, Interrupted> {
    if *spins == 0 && s & mark != 0 {
        *spins = SPINS;
    }
    if spin(spins) {
        return Ok(false);
    }
    if s & mark == 0
        && word
            .compare_exchange(s, s | mark, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return Ok(false);
    }
    futex_wait_as(word, s | mark, class);
    // Not 0: a woken waiter spins even if others of its kind still sleep.
    *spins = 1;
    watch.check().map(|()| true)
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
        wait_as_reader(word, s, &mut spins, watch)?;
    }
}

/// Hold the reader-writer lock in `word` alone.
pub fn write<'a>(word: &'a AtomicU32, watch: &dyn Watch) -> Result<WriteGuard<'a>, Interrupted> {
    let (mut spins, mut slept) = (0, false);
    loop {
        let s = word.load(Ordering::Relaxed);
        if s & (WRITER | UPDATER | READERS) == 0 {
            // Keep the waiting bits: others may still sleep on the word.
            let held = taken_by(s, slept) | WRITER;
            if word
                .compare_exchange_weak(s, held, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(WriteGuard { word });
            }
            continue;
        }
        wait_as_writer(word, s, &mut spins, &mut slept, watch)?;
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
            wait_as_reader(word, s, &mut spins, watch)?;
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
    take_counted(word, drained, false)
}

/// [`try_write_counted`] by a writer that may have slept (see [`taken_by`]).
fn take_counted<'a>(
    word: &'a AtomicU32,
    drained: &dyn Fn() -> bool,
    slept: bool,
) -> Option<WriteGuard<'a>> {
    let s = word.load(Ordering::Relaxed);
    if s & (WRITER | UPDATER | READERS) != 0 {
        return None;
    }
    word.compare_exchange(
        s,
        taken_by(s, slept) | WRITER,
        Ordering::SeqCst,
        Ordering::Relaxed,
    )
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
    let (mut spins, mut slept) = (0, false);
    let mut pause = Duration::from_micros(20);
    loop {
        if let Some(held) = take_counted(word, drained, slept) {
            return Ok(held);
        }
        let s = word.load(Ordering::Relaxed);
        if s & WRITER != 0 {
            wait_as_writer(word, s, &mut spins, &mut slept, watch)?;
        } else if !spin(&mut spins) {
            // Readers leave without waking anyone (they write only their own
            // counters): look again after a pause, short enough that a writer meets
            // a moment with no reader inside even while readers keep coming. Only
            // the rare holds alone (rmdir, a rename over a directory, eviction) wait
            // here.
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
    let (mut spins, mut slept) = (0, false);
    loop {
        let s = word.load(Ordering::Relaxed);
        if s & (WRITER | UPDATER) == 0 {
            let held = taken_by(s, slept) | UPDATER;
            if word
                .compare_exchange_weak(s, held, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(UpdateGuard { word });
            }
            continue;
        }
        wait_as_writer(word, s, &mut spins, &mut slept, watch)?;
    }
}

impl<'a> UpdateGuard<'a> {
    /// Hold the lock alone: new readers wait from now on (the writer bit is set at
    /// once), and this waits for the readers inside to leave (the last one out wakes
    /// it). Interrupted by a repair, it lets go of the lock (the readers' counts stay).
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
            if spin(&mut spins) {
                continue;
            }
            // No mark: a reader that leaves last while the writer bit is set wakes
            // the upgrader (only an upgrade sets it with readers inside).
            futex_wait_as(word, s, AS_UPGRADER);
            if let Err(e) = watch.check() {
                let before = word.fetch_and(
                    !(WRITER | UPDATER | READERS_WAITING | WRITERS_WAITING),
                    Ordering::Release,
                );
                wake_after(word, before);
                return Err(e);
            }
        }
    }
}

impl Drop for UpdateGuard<'_> {
    fn drop(&mut self) {
        // Readers do not wait for an updater: only writers and updaters to wake.
        let before = self
            .word
            .fetch_and(!(UPDATER | WRITERS_WAITING), Ordering::Release);
        if before & WRITERS_WAITING != 0 {
            futex_wake_as(self.word, AS_WRITER, 1);
        }
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        let before = self.word.fetch_sub(1, Ordering::Release);
        if before & READERS != 1 {
            return;
        }
        if before & WRITER != 0 {
            futex_wake_as(self.word, AS_UPGRADER, 1);
        } else if before & (UPDATER | WRITERS_WAITING) == WRITERS_WAITING {
            // A writer waits for the readers to leave (one held up by an updater is
            // woken by the updater's release instead).
            let before = self.word.fetch_and(!WRITERS_WAITING, Ordering::Relaxed);
            if before & WRITERS_WAITING != 0 {
                futex_wake_as(self.word, AS_WRITER, 1);
            }
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
        wake_after(self.word, s);
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

    /// Far more threads than CPUs on one word, in every mode: each release wakes one
    /// sleeping writer or updater (who marks the word again for the next), so none
    /// may be left asleep: all finish, exclusion holds, and the word ends free.
    #[test]
    fn a_crowd_of_every_kind_of_holder_all_finish() {
        let _w = lynxfs_test_support::watchdog(
            "a_crowd_of_every_kind_of_holder_all_finish",
            Duration::from_secs(120),
        );
        let word = AtomicU32::new(0);
        let mutex = AtomicU32::new(0);
        let pair = (AtomicU64::new(0), AtomicU64::new(0));
        let counted = AtomicU64::new(0);
        let go = std::sync::Barrier::new(64);
        std::thread::scope(|sc| {
            for t in 0..64u64 {
                let (word, mutex, pair, counted, go) = (&word, &mutex, &pair, &counted, &go);
                sc.spawn(move || {
                    go.wait();
                    for i in 0..300u64 {
                        // Each hold gives its CPU away, so the others find the word
                        // held and go to sleep on it.
                        let hold = std::thread::yield_now;
                        match (t + i) % 4 {
                            0 => {
                                let _r = read(word, &Alone).unwrap();
                                let (a, b) = (
                                    pair.0.load(Ordering::Relaxed),
                                    pair.1.load(Ordering::Relaxed),
                                );
                                assert_eq!(a, b, "a reader saw a half-done write");
                                hold();
                            }
                            1 => {
                                let _w = write(word, &Alone).unwrap();
                                pair.0.store(t * 1000 + i, Ordering::Relaxed);
                                hold();
                                pair.1.store(t * 1000 + i, Ordering::Relaxed);
                            }
                            2 => {
                                let u = update(word, &Alone).unwrap();
                                let v = pair.0.load(Ordering::Relaxed);
                                hold();
                                let _w = u.upgrade(&Alone).unwrap();
                                pair.0.store(v + 1, Ordering::Relaxed);
                                pair.1.store(v + 1, Ordering::Relaxed);
                            }
                            _ => {
                                let _m = lock(mutex, &Alone).unwrap();
                                let v = counted.load(Ordering::Relaxed);
                                hold();
                                counted.store(v + 1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(counted.load(Ordering::Relaxed), 64 * 300 / 4);
        assert_eq!(word.load(Ordering::Relaxed) & !CHANGES, 0);
        assert_eq!(mutex.load(Ordering::Relaxed), 0);
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
