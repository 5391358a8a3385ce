//! The open-file table: every handle's open file kept inline in a slot of a table that
//! grows by chunks and never moves, so an open and a close allocate nothing once the
//! table has as many slots as files are open at once, and take no lock (a lock held
//! across a fork by another thread would also stop the child).
//!
//! A handle number names a slot and the slot's generation (`generation << 32 | slot`):
//! the number of a closed handle stays EBADF after its slot is reused.
//!
//! Why a close never frees an open file under a reader: a reader pins the slot (one
//! more in the count of the slot's state word, taken only while the slot is open in
//! the handle's generation) before it looks at the open file, and unpins it after. A
//! close clears the open bit, after which nothing pins the slot anew, and the open file
//! is dropped (and the slot made free) only by whoever takes the count to zero with the
//! open bit clear: the last reader, or the close itself.
//!
//! dup: the new handle's slot names the first handle's slot, which it keeps pinned
//! until the new slot is freed, so the open file outlives whichever handle closes first.

use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::error::{errno, Result};

use super::open::OpenFile;
use super::Fd;

/// The state word: the generation above bit 32, then whether the slot is open (its
/// handle valid), then the pins (readers, the close under way, dup'd handles).
const GEN_SHIFT: u32 = 32;
const OPEN: u64 = 1 << 31;
const PINS: u64 = OPEN - 1;

/// Slots in the first chunk; each further chunk doubles the table.
const FIRST_SHIFT: u32 = 6;
/// Chunks: 64 x (2^25 - 1) slots in all, under 2^31 (and [`NONE`]).
const CHUNKS: usize = 25;
const CAPACITY: u64 = (1 << FIRST_SHIFT) * ((1 << CHUNKS) - 1);

/// No slot (the end of a free list).
const NONE: u32 = u32::MAX;

/// Free lists: threads closing and opening at once mostly write their own list's
/// cache line (issue 16: creates that scale).
const SHARDS: usize = 8;

/// What a slot holds while it is open or pinned.
enum Entry {
    File(OpenFile),
    /// A dup'd handle: the open file it shares and the slot that holds it (pinned by
    /// this one).
    Dup {
        home: u32,
        file: *const OpenFile,
    },
}

struct Slot {
    state: AtomicU64,
    /// The next free slot while this one is on a free list.
    next: AtomicU32,
    /// Set while the state is open or pinned; only the one who took the slot from a
    /// free list writes it, only the one who freed it drops it.
    entry: UnsafeCell<MaybeUninit<Entry>>,
}

impl Slot {
    fn fresh() -> Slot {
        Slot {
            state: AtomicU64::new(1 << GEN_SHIFT),
            next: AtomicU32::new(NONE),
            entry: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

/// A free list's head: its first slot and a count of changes (so a pop that read a
/// slot's `next` before that slot left and came back fails its exchange).
#[repr(align(128))]
struct Head(AtomicU64);

thread_local! {
    /// This thread's free list (`usize::MAX`: not chosen yet).
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn my_shard() -> usize {
    SHARD.with(|s| {
        let mut v = s.get();
        if v == usize::MAX {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            v = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(v);
        }
        v
    })
}

/// The table of open files of one `Fs`.
pub(super) struct OpenFiles {
    chunks: [AtomicPtr<Slot>; CHUNKS],
    /// Slots ever taken into use (some maybe in a chunk not installed yet).
    grown: AtomicU64,
    heads: [Head; SHARDS],
}

// SAFETY: a slot's entry is written only by the thread that took the slot from a free
// list (nobody else can reach it until its state says open, stored with Release), read
// by threads that pinned it (Acquire), and dropped only by the one that took its pins
// to zero after the close: see the module's comment. `OpenFile` is Send and Sync.
unsafe impl Sync for OpenFiles {}
// SAFETY: as above; the table owns its chunks and their entries.
unsafe impl Send for OpenFiles {}

/// Where slot `i` is: its chunk and its place in it.
#[inline]
fn place(i: u32) -> (usize, usize) {
    let j = i as u64 + (1 << FIRST_SHIFT);
    let k = (63 - j.leading_zeros() - FIRST_SHIFT) as usize;
    (k, (j - ((1 << FIRST_SHIFT) << k)) as usize)
}

fn chunk_len(k: usize) -> usize {
    (1 << FIRST_SHIFT) << k
}

/// An open file lent by the table: its slot stays pinned until this is dropped.
pub(super) struct FileRef<'t> {
    files: &'t OpenFiles,
    /// The slot pinned (the handle's own).
    pinned: u32,
    /// The slot the open file is in (the first handle's, for a dup'd one).
    home: u32,
    file: &'t OpenFile,
}

impl std::ops::Deref for FileRef<'_> {
    type Target = OpenFile;
    #[inline]
    fn deref(&self) -> &OpenFile {
        self.file
    }
}

impl Drop for FileRef<'_> {
    fn drop(&mut self) {
        self.files.unpin(self.pinned);
    }
}

impl OpenFiles {
    pub(super) fn new() -> OpenFiles {
        OpenFiles {
            chunks: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            grown: AtomicU64::new(0),
            heads: std::array::from_fn(|_| Head(AtomicU64::new(NONE as u64))),
        }
    }

    /// Slot `i`, if its chunk is in place.
    #[inline]
    fn slot(&self, i: u32) -> Option<&Slot> {
        let (k, at) = place(i);
        let base = self.chunks.get(k)?.load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: chunk `k` holds `chunk_len(k)` slots (`at` is below it by `place`)
        // and is freed only with the table.
        Some(unsafe { &*base.add(at) })
    }

    /// Slot `i`, which the caller knows is in place (taken, pinned or on a list).
    #[inline]
    fn slot_in_use(&self, i: u32) -> &Slot {
        let (k, at) = place(i);
        let base = self.chunks[k].load(Ordering::Acquire);
        // SAFETY: a slot is used only after its chunk was installed (in `grow`), and
        // chunks are freed only with the table; `at` is within the chunk.
        unsafe { &*base.add(at) }
    }

    /// A new handle on the open file `make` makes (in its slot, once it has one);
    /// ENFILE when the table is full.
    #[inline]
    pub(super) fn insert(&self, make: impl FnOnce() -> OpenFile) -> Result<Fd> {
        self.insert_entry(|| Entry::File(make()))
    }

    #[inline]
    fn insert_entry(&self, make: impl FnOnce() -> Entry) -> Result<Fd> {
        let i = match self.pop() {
            Some(i) => i,
            None => self.grow()?,
        };
        let slot = self.slot_in_use(i);
        // SAFETY: slot `i` came off a free list (or was never used): no handle names
        // it, no pin is on it, so this thread alone reaches the entry until the store
        // below makes it open.
        unsafe { (*slot.entry.get()).write(make()) };
        let generation = slot.state.load(Ordering::Relaxed) >> GEN_SHIFT;
        slot.state
            .store(generation << GEN_SHIFT | OPEN, Ordering::Release);
        Ok(generation << GEN_SHIFT | i as u64)
    }

    /// The open file of handle `fd`, pinned; EBADF if `fd` is not an open handle.
    #[inline]
    pub(super) fn get(&self, fd: Fd) -> Result<FileRef<'_>> {
        self.pin(fd, false)
    }

    /// Handle `fd` is closed: its number is EBADF from now on. The open file is lent
    /// for the close's own work, and dropped when that and every reader are done.
    #[inline]
    pub(super) fn remove(&self, fd: Fd) -> Result<FileRef<'_>> {
        self.pin(fd, true)
    }

    /// Pin `fd`'s slot (and close it, if `close`).
    #[inline]
    fn pin(&self, fd: Fd, close: bool) -> Result<FileRef<'_>> {
        let i = fd as u32;
        let slot = self.slot(i).ok_or(errno::EBADF)?;
        let mut s = slot.state.load(Ordering::Relaxed);
        loop {
            if s >> GEN_SHIFT != fd >> GEN_SHIFT || s & OPEN == 0 {
                return Err(errno::EBADF);
            }
            // Pins never reach the open bit: each is a live reader or handle.
            let new = if close { (s & !OPEN) + 1 } else { s + 1 };
            match slot
                .state
                .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        // SAFETY: pinned while open: the entry was written before the state said open
        // (Release; read here with Acquire) and stays until the pin is dropped.
        let (home, file) = match unsafe { (*slot.entry.get()).assume_init_ref() } {
            Entry::File(f) => (i, f),
            // SAFETY: the dup'd slot pins `home` until it is freed itself, which this
            // pin prevents: the file there stays.
            Entry::Dup { home, file } => (*home, unsafe { &**file }),
        };
        Ok(FileRef {
            files: self,
            pinned: i,
            home,
            file,
        })
    }

    /// A new handle on the open file `f` lends (the table's half of dup).
    pub(super) fn dup(&self, f: &FileRef<'_>) -> Result<Fd> {
        // The new slot's pin on the home slot; `f`'s pin keeps it up meanwhile.
        self.slot_in_use(f.home)
            .state
            .fetch_add(1, Ordering::Relaxed);
        let (home, file) = (f.home, f.file as *const OpenFile);
        self.insert_entry(|| Entry::Dup { home, file })
            .inspect_err(|_| {
                self.unpin(f.home);
            })
    }

    #[inline]
    fn unpin(&self, i: u32) {
        let slot = self.slot_in_use(i);
        let before = slot.state.fetch_sub(1, Ordering::Release);
        if before & (OPEN | PINS) == 1 {
            // Every other pin's use of the entry happens before its drop (as Arc's
            // drop does).
            fence(Ordering::Acquire);
            self.free(i, before >> GEN_SHIFT);
        }
    }

    /// Drop slot `i`'s entry and put it on a free list under the next generation.
    #[inline(never)]
    fn free(&self, i: u32, generation: u64) {
        let slot = self.slot_in_use(i);
        // SAFETY: closed with no pin left: nothing else reaches the entry, and nothing
        // can pin the slot again (pins need the open bit).
        let home = match unsafe { (*slot.entry.get()).assume_init_ref() } {
            Entry::Dup { home, .. } => Some(*home),
            Entry::File(_) => None,
        };
        // SAFETY: as above; the entry is set (it was open) and dropped once, here.
        unsafe { (*slot.entry.get()).assume_init_drop() };
        // Generation 0 is skipped, so no handle number is below 2^32.
        let next = match (generation + 1) & (u32::MAX as u64) {
            0 => 1,
            g => g,
        };
        slot.state.store(next << GEN_SHIFT, Ordering::Release);
        self.push(i);
        if let Some(home) = home {
            self.unpin(home);
        }
    }

    fn push(&self, i: u32) {
        let head = &self.heads[my_shard()].0;
        let slot = self.slot_in_use(i);
        let mut h = head.load(Ordering::Relaxed);
        loop {
            slot.next.store(h as u32, Ordering::Relaxed);
            let new = (h >> 32).wrapping_add(1) << 32 | i as u64;
            match head.compare_exchange_weak(h, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => h = now,
            }
        }
    }

    /// A free slot, from this thread's list first.
    fn pop(&self) -> Option<u32> {
        let mine = my_shard();
        (0..SHARDS).find_map(|k| self.pop_from(&self.heads[(mine + k) % SHARDS].0))
    }

    fn pop_from(&self, head: &AtomicU64) -> Option<u32> {
        let mut h = head.load(Ordering::Acquire);
        loop {
            let i = h as u32;
            if i == NONE {
                return None;
            }
            // May be stale if `i` was popped meanwhile: the count in `h` then fails
            // the exchange.
            let next = self.slot_in_use(i).next.load(Ordering::Relaxed);
            let new = (h >> 32).wrapping_add(1) << 32 | next as u64;
            match head.compare_exchange_weak(h, new, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return Some(i),
                Err(now) => h = now,
            }
        }
    }

    /// A slot never used before, its chunk installed.
    fn grow(&self) -> Result<u32> {
        let i = self.grown.fetch_add(1, Ordering::Relaxed);
        if i >= CAPACITY {
            return Err(crate::error::Error::Errno(libc::ENFILE));
        }
        let i = i as u32;
        let (k, _) = place(i);
        if self.chunks[k].load(Ordering::Acquire).is_null() {
            let fresh: Box<[Slot]> = (0..chunk_len(k)).map(|_| Slot::fresh()).collect();
            let raw = Box::into_raw(fresh) as *mut Slot;
            let installed = self.chunks[k].compare_exchange(
                std::ptr::null_mut(),
                raw,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if installed.is_err() {
                // SAFETY: `raw` came from the box just made, of `chunk_len(k)` slots,
                // and was not installed: nobody else has it.
                drop(unsafe {
                    Box::from_raw(std::ptr::slice_from_raw_parts_mut(raw, chunk_len(k)))
                });
            }
        }
        Ok(i)
    }

    /// The numbers of the handles open now (for a clean close and a fork).
    /// The inode of every open file, once per open file however many handles share
    /// it (each open file holds one open reference).
    pub(super) fn open_inodes(&self) -> Vec<u64> {
        // By the slot the open file is in: a dup'd handle may outlive the first.
        let mut homes = std::collections::BTreeMap::new();
        for fd in self.open_fds() {
            if let Ok(f) = self.get(fd) {
                homes.insert(f.home, f.ino);
            }
        }
        homes.into_values().collect()
    }

    pub(super) fn open_fds(&self) -> Vec<Fd> {
        let grown = self.grown.load(Ordering::Acquire).min(CAPACITY) as u32;
        (0..grown)
            .filter_map(|i| {
                let s = self.slot(i)?.state.load(Ordering::Acquire);
                (s & OPEN != 0).then_some(s >> GEN_SHIFT << GEN_SHIFT | i as u64)
            })
            .collect()
    }
}

impl Drop for OpenFiles {
    fn drop(&mut self) {
        for (k, c) in self.chunks.iter_mut().enumerate() {
            let base = *c.get_mut();
            if base.is_null() {
                continue;
            }
            // SAFETY: installed by `grow` from a box of `chunk_len(k)` slots; the
            // table is going, with every pin (`&mut self`).
            let mut chunk =
                unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, chunk_len(k))) };
            for slot in chunk.iter_mut() {
                if *slot.state.get_mut() & (OPEN | PINS) != 0 {
                    // SAFETY: open or pinned (by a dup'd handle): the entry is set.
                    unsafe { slot.entry.get_mut().assume_init_drop() };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

    use parking_lot::Mutex;

    use super::*;

    fn file(ino: u64) -> OpenFile {
        OpenFile {
            ino,
            flags: AtomicI32::new(0),
            pos: Mutex::new(0),
            desc: AtomicU64::new(0),
            handles: AtomicU32::new(1),
            map: Default::default(),
            privileged: false,
            in_group: false,
            atime: Default::default(),
        }
    }

    fn ebadf<T>(r: Result<T>) -> bool {
        matches!(r, Err(e) if e.errno() == libc::EBADF)
    }

    #[test]
    fn places_cover_the_chunks_in_order() {
        assert_eq!(place(0), (0, 0));
        assert_eq!(place(63), (0, 63));
        assert_eq!(place(64), (1, 0));
        assert_eq!(place(191), (1, 127));
        assert_eq!(place(192), (2, 0));
        assert_eq!(
            place((CAPACITY - 1) as u32),
            (CHUNKS - 1, chunk_len(CHUNKS - 1) - 1)
        );
    }

    #[test]
    fn a_closed_slot_is_reused_under_a_new_number() {
        let t = OpenFiles::new();
        let a = t.insert(|| file(10)).unwrap();
        assert!(a >> GEN_SHIFT != 0, "no number below 2^32");
        drop(t.remove(a).unwrap());
        let b = t.insert(|| file(11)).unwrap();
        assert_eq!(b as u32, a as u32, "the slot is reused");
        assert_ne!(b, a);
        assert!(ebadf(t.get(a)));
        assert_eq!(t.get(b).unwrap().ino, 11);
        assert_eq!(t.open_fds(), vec![b]);
    }

    #[test]
    fn closed_and_unknown_numbers_are_ebadf() {
        let t = OpenFiles::new();
        assert!(ebadf(t.get(3)));
        let a = t.insert(|| file(1)).unwrap();
        assert!(ebadf(t.get(a + 1)));
        assert!(ebadf(t.get(a ^ (1 << 40))));
        assert!(ebadf(t.get(u64::MAX)));
        drop(t.remove(a).unwrap());
        assert!(ebadf(t.get(a)));
        assert!(ebadf(t.remove(a)));
        assert!(t.open_fds().is_empty());
    }

    #[test]
    fn a_reader_keeps_a_closed_file_until_it_is_done() {
        let t = OpenFiles::new();
        let a = t.insert(|| file(7)).unwrap();
        let reader = t.get(a).unwrap();
        drop(t.remove(a).unwrap());
        assert!(ebadf(t.get(a)));
        // Still pinned: a new open takes another slot.
        let b = t.insert(|| file(8)).unwrap();
        assert_ne!(b as u32, a as u32);
        assert_eq!(reader.ino, 7);
        drop(reader);
        let c = t.insert(|| file(9)).unwrap();
        assert_eq!(c as u32, a as u32, "freed by the last reader");
    }

    #[test]
    fn a_dup_outlives_the_handle_it_came_from() {
        let t = OpenFiles::new();
        let a = t.insert(|| file(5)).unwrap();
        let d = t.dup(&t.get(a).unwrap()).unwrap();
        let dd = t.dup(&t.get(d).unwrap()).unwrap();
        assert!(std::ptr::eq(&*t.get(a).unwrap(), &*t.get(dd).unwrap()));
        drop(t.remove(a).unwrap());
        assert!(ebadf(t.get(a)));
        assert_eq!(t.get(d).unwrap().ino, 5);
        // The first slot is still the file's home: not reused.
        let x = t.insert(|| file(6)).unwrap();
        assert!(![d as u32, dd as u32].contains(&(x as u32)) && x as u32 != a as u32);
        drop(t.remove(d).unwrap());
        assert_eq!(t.get(dd).unwrap().ino, 5);
        drop(t.remove(dd).unwrap());
        assert_eq!(t.open_fds(), vec![x]);
        // All three slots are free again.
        let again: Vec<u32> = (0..3)
            .map(|i| t.insert(|| file(i)).unwrap() as u32)
            .collect();
        let mut want = vec![a as u32, d as u32, dd as u32];
        let mut got = again.clone();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want);
    }

    #[test]
    fn the_table_grows_past_its_first_chunks() {
        let t = OpenFiles::new();
        let fds: Vec<Fd> = (0..1000).map(|i| t.insert(|| file(i)).unwrap()).collect();
        for (i, &fd) in fds.iter().enumerate() {
            assert_eq!(t.get(fd).unwrap().ino, i as u64);
        }
        assert_eq!(t.open_fds().len(), 1000);
    }

    /// Threads open, dup and close while others read through handles the first ones
    /// may be closing: a read either fails with EBADF or sees the file it named.
    #[test]
    fn concurrent_opens_closes_and_reads() {
        const ROUNDS: u64 = 100_000;
        let t = OpenFiles::new();
        let shown: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        std::thread::scope(|s| {
            for w in 0..2u64 {
                let (t, shown) = (&t, &shown);
                s.spawn(move || {
                    for r in 0..ROUNDS {
                        let ino = w << 40 | r;
                        let fd = t.insert(|| file(ino)).unwrap();
                        // The file names its own handle, for the readers to check.
                        *t.get(fd).unwrap().pos.lock() = fd;
                        let dup = (r % 3 == 0).then(|| t.dup(&t.get(fd).unwrap()).unwrap());
                        shown[(w * 2 + r % 2) as usize].store(fd, Ordering::Release);
                        drop(t.remove(fd).unwrap());
                        if let Some(d) = dup {
                            assert_eq!(t.get(d).unwrap().ino, ino);
                            drop(t.remove(d).unwrap());
                        }
                    }
                });
            }
            for _ in 0..2 {
                let (t, shown) = (&t, &shown);
                s.spawn(move || {
                    for r in 0..ROUNDS * 2 {
                        let fd = shown[(r % 4) as usize].load(Ordering::Acquire);
                        if let Ok(f) = t.get(fd) {
                            let named = *f.pos.lock();
                            assert_eq!(named, fd, "a reused slot was read");
                        }
                    }
                });
            }
        });
        assert!(t.open_fds().is_empty());
    }
}
