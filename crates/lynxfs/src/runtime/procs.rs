//! The runtime header's live part and the process table: which processes are attached
//! (pid plus the tick they registered at, since pids are reused), how many operations
//! each has in flight, which inodes each holds open, and the state word that tells
//! every process whether the runtime is usable or being rebuilt after a death
//! (docs/FORMAT.md, "Runtime state: header and process table").

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lock::{Interrupted, Watch};
use super::Region;
use crate::error::{Error, Result};

/// Bytes of the header page at the start of the region (identity and state words).
pub const HEADER_BYTES: usize = 4096;
/// Processes that may be attached at once.
pub const MAX_PROCS: u32 = 128;
/// The slot of a process that is attached but not in the table yet: a fork child
/// that inherited no reference of its parent's takes a slot at its first operation
/// (docs/CONSISTENCY.md, "open / close by several processes").
pub const NO_SLOT: u32 = u32::MAX;
/// The most entries an open table has: distinct inodes one process may hold open or
/// held. A FUSE daemon holds every inode the kernel caches (a tree walk of a large
/// source tree reaches 100,000 and more), hence a million for a pool that has them.
pub const MAX_OPEN_ENTRIES: usize = 1 << 20;
/// Entries of an open table's page (tables are whole pages, so each can be reserved
/// and given back alone).
const PAGE_ENTRIES: usize = super::region::PAGE / 8;

/// Entries of each open table for a pool of `inodes` inode numbers: a process cannot
/// hold more distinct inodes than the pool has, so a small pool's tables are small.
pub fn open_entries_for(inodes: u64) -> usize {
    let want = inodes.min(MAX_OPEN_ENTRIES as u64) as usize;
    want.next_multiple_of(PAGE_ENTRIES).max(PAGE_ENTRIES)
}

/// A slot's table word when its table is kept (see [`Procs::register`]).
const TABLE_KEPT: u64 = 1;

/// The state word: zero in a fresh file, so a file whose builder died stays BUILDING.
pub const BUILDING: u32 = 0;
/// Built and usable.
pub const READY: u32 = 1;
/// A process died: operations unwind and the runtime is rebuilt from the pool.
pub const REPAIRING: u32 = 2;

/// Header words owned by this module (the identity words before them are attach's).
const STATE_OFF: usize = 64;
const REPAIRER_OFF: usize = 68;
const GENERATION_OFF: usize = 72;
/// The process table: one cache line per slot (its identity word).
const PROCS_OFF: usize = HEADER_BYTES;
const SLOT_BYTES: usize = 64;

/// Each slot's operation counters: several, each on its own cache line, so threads of
/// one process count their operations without taking a line from each other (a
/// thread always uses the same one); a slot's operations in flight are their sum.
const OPS_OFF: usize = PROCS_OFF + MAX_PROCS as usize * SLOT_BYTES;
const OPS_LINES: usize = 8;
const LINE: usize = 64;

/// The open tables, one per slot, of one word per entry, after everything else (they
/// are the part reserved slot by slot, see [`open_tables`]).
const OPEN_OFF: usize = OPS_OFF + MAX_PROCS as usize * OPS_LINES * LINE;

/// Bytes of the region used by the header, the process table, the operation counters
/// and the open tables of `open_entries` entries; the rest of the runtime state is
/// carved after them.
pub const fn bytes_needed(open_entries: usize) -> usize {
    OPEN_OFF + MAX_PROCS as usize * open_entries * 8
}

/// Where the open tables lie in the region. Unlike everything else (reserved whole
/// when the file is made), a table's pages are reserved when a process takes its slot
/// and given back when the slot is freed: only attached processes' tables take memory.
pub fn open_tables(open_entries: usize) -> std::ops::Range<usize> {
    OPEN_OFF..bytes_needed(open_entries)
}

/// Refuse open tables of `open_entries` entries (whole pages, at most
/// [`MAX_OPEN_ENTRIES`]) in a region of `len` bytes that cannot hold them.
pub fn check_shape(len: usize, open_entries: usize) -> Result<()> {
    if open_entries == 0
        || !open_entries.is_multiple_of(PAGE_ENTRIES)
        || open_entries > MAX_OPEN_ENTRIES
    {
        return Err(Error::Invalid(format!(
            "open tables of {open_entries} entries (whole pages of {PAGE_ENTRIES}, at most \
             {MAX_OPEN_ENTRIES})"
        )));
    }
    if len < bytes_needed(open_entries) {
        return Err(Error::Invalid(format!(
            "a runtime region of {len} bytes is smaller than its header and process table \
             ({})",
            bytes_needed(open_entries)
        )));
    }
    Ok(())
}

/// The counter line of the calling thread (threads are spread over the lines in the
/// order they first count an operation).
fn own_line() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static LINE_OF: Cell<Option<usize>> = const { Cell::new(None) };
    }
    LINE_OF.with(|l| match l.get() {
        Some(i) => i,
        None => {
            let i = NEXT.fetch_add(1, Ordering::Relaxed) % OPS_LINES;
            l.set(Some(i));
            i
        }
    })
}

/// An identity word packs a pid (22 bits: Linux's PID_MAX_LIMIT) and the clock tick
/// since boot at which the process took its first slot (42 bits), so one CAS claims a
/// slot whole. The process started at or before that tick, and any later process with
/// its pid started after it (it died after registering), so the tick tells them apart
/// as a start time would; unlike the start time, a process knows it without reading
/// `/proc/self/stat` (10 to 25 us, at every attach of every short-lived program).
const PID_BITS: u32 = 22;
const TICK_BITS: u32 = 64 - PID_BITS;

/// An open-table word packs an inode number (44 bits) and a count (20 bits); zero is
/// an empty entry, and an entry whose count drops to zero becomes empty again.
const COUNT_BITS: u32 = 20;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;
/// The largest inode number an open table can hold.
pub const MAX_OPEN_INO: u64 = (1 << (64 - COUNT_BITS)) - 1;

/// The process table and state words of one runtime region.
#[derive(Clone)]
pub struct Procs {
    region: Arc<Region>,
    /// Entries of each open table.
    entries: usize,
    /// The pages of its own open table this process has written (shared by every
    /// clone in the process), so that freeing its slot zeroes only those.
    touched: Arc<Touched>,
}

/// Which pages of one slot's open table this process wrote since it took the slot.
struct Touched {
    /// The slot + 1 (0: none) whose table the bits describe.
    slot: AtomicU32,
    pages: Box<[AtomicU64]>,
}

impl Touched {
    fn new(pages: usize) -> Touched {
        Touched {
            slot: AtomicU32::new(0),
            pages: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// From now on the bits describe `slot`'s table, none written yet.
    fn start(&self, slot: u32) {
        for w in self.pages.iter() {
            w.store(0, Ordering::Relaxed);
        }
        self.slot.store(slot + 1, Ordering::Release);
    }

    fn mark(&self, page: usize) {
        let (w, bit) = (&self.pages[page / 64], 1 << (page % 64));
        if w.load(Ordering::Relaxed) & bit == 0 {
            w.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// The pages written in `slot`'s table, if the bits describe it (forgotten).
    fn take(&self, slot: u32) -> Option<Vec<usize>> {
        if self
            .slot
            .compare_exchange(slot + 1, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let mut v = Vec::new();
        for (i, w) in self.pages.iter().enumerate() {
            let mut bits = w.swap(0, Ordering::Relaxed);
            while bits != 0 {
                v.push(i * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
        Some(v)
    }
}

/// Slots still busy (live, with operations in flight) when a quiescence wait ran out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy(pub Vec<u32>);

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "processes in slots {:?} still have operations in flight",
            self.0
        )
    }
}

/// One operation in flight in a slot: counted from `enter_op` until dropped.
pub struct Op<'a> {
    count: &'a AtomicU64,
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Release);
    }
}

impl Procs {
    /// A view of `region`'s header and process table, whose open tables have
    /// `open_entries` entries (see [`open_entries_for`]).
    pub fn new(region: Arc<Region>, open_entries: usize) -> Result<Procs> {
        check_shape(region.len(), open_entries)?;
        Ok(Procs {
            region,
            entries: open_entries,
            touched: Arc::new(Touched::new(open_entries / PAGE_ENTRIES)),
        })
    }

    /// Entries of each open table.
    pub fn open_entries(&self) -> usize {
        self.entries
    }

    /// Byte offset of slot `slot`'s open table.
    fn table_off(&self, slot: u32) -> usize {
        OPEN_OFF + slot as usize * self.table_bytes()
    }
    fn table_bytes(&self) -> usize {
        self.entries * 8
    }

    fn state_word(&self) -> &AtomicU32 {
        &self.region.u32s(STATE_OFF, 1)[0]
    }
    fn repairer_word(&self) -> &AtomicU32 {
        &self.region.u32s(REPAIRER_OFF, 1)[0]
    }
    fn generation_word(&self) -> &AtomicU64 {
        &self.region.words(GENERATION_OFF, 1)[0]
    }
    fn identity(&self, slot: u32) -> &AtomicU64 {
        &self.slot_words(slot)[0]
    }
    /// [`TABLE_KEPT`] when the slot's open table has its memory reserved and holds
    /// only zeros (a free slot whose last process detached), else 0.
    fn table_word(&self, slot: u32) -> &AtomicU64 {
        &self.slot_words(slot)[1]
    }
    /// Operation counter `line` of `slot`.
    fn ops(&self, slot: u32, line: usize) -> &AtomicU64 {
        assert!(
            slot < MAX_PROCS && line < OPS_LINES,
            "counter {slot}/{line}"
        );
        &self
            .region
            .words(OPS_OFF + (slot as usize * OPS_LINES + line) * LINE, 1)[0]
    }
    fn slot_words(&self, slot: u32) -> &[AtomicU64] {
        assert!(slot < MAX_PROCS, "process slot {slot} out of range");
        self.region.words(PROCS_OFF + slot as usize * SLOT_BYTES, 2)
    }
    fn open_table(&self, slot: u32) -> &[AtomicU64] {
        assert!(slot < MAX_PROCS, "process slot {slot} out of range");
        self.region.words(self.table_off(slot), self.entries)
    }

    /// BUILDING, READY or REPAIRING.
    pub fn state(&self) -> u32 {
        self.state_word().load(Ordering::SeqCst)
    }

    /// The runtime is built: operations may run.
    pub fn set_ready(&self) {
        self.state_word().store(READY, Ordering::SeqCst);
    }

    /// How many times the runtime was built in this file (1 after the first build).
    pub fn generation(&self) -> u64 {
        self.generation_word().load(Ordering::SeqCst)
    }

    /// Set the generation (the attacher that creates the file sets 1).
    pub(super) fn set_generation(&self, g: u64) {
        self.generation_word().store(g, Ordering::SeqCst);
    }

    /// Mark the runtime under repair (from READY). True if this call changed it.
    pub fn begin_repair(&self) -> bool {
        self.state_word()
            .compare_exchange(READY, REPAIRING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Become the one process that rebuilds the runtime, unless a live one already
    /// is (a repairer that died is replaced) or no repair is under way. True if `me`
    /// is now the repairer.
    pub fn claim_repair(&self, me: u32) -> bool {
        let w = self.repairer_word();
        loop {
            let cur = w.load(Ordering::SeqCst);
            if cur == me + 1 {
                return true;
            }
            if cur != 0 && self.alive(cur - 1) {
                return false;
            }
            if w.compare_exchange(cur, me + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                break;
            }
        }
        // The caller saw REPAIRING before its claim, but the repair may have ended
        // since (`end_repair` lets operations run before it frees the claim): a
        // rebuild now would clear the state under running operations.
        if self.state() == REPAIRING {
            return true;
        }
        let _ = w.compare_exchange(me + 1, 0, Ordering::SeqCst, Ordering::SeqCst);
        false
    }

    /// The rebuild is done: record its generation, let operations run again, and
    /// only then release the repair claim (see [`Procs::claim_repair`]).
    pub fn end_repair(&self, new_generation: u64) {
        self.generation_word()
            .store(new_generation, Ordering::SeqCst);
        self.state_word().store(READY, Ordering::SeqCst);
        self.repairer_word().store(0, Ordering::SeqCst);
    }

    /// Claim a free slot for this process with its open table's memory reserved, so
    /// that no store to it can find the runtime directory full (a fault there would
    /// kill the process): a table kept by the slot's last process is taken as it is,
    /// else it is reserved now. EUSERS when every slot is taken; the reservation's
    /// error (ENOSPC when the directory is full) when it fails, the slot given back.
    pub fn register(&self) -> Result<u32> {
        let me = own_identity()?;
        let slot = (0..MAX_PROCS)
            .find(|&s| {
                self.identity(s)
                    .compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            })
            .ok_or(Error::Errno(libc::EUSERS))?;
        if self.table_word(slot).load(Ordering::SeqCst) != TABLE_KEPT {
            if let Err(e) = self
                .region
                .reserve(self.table_off(slot), self.table_bytes())
            {
                self.identity(slot).store(0, Ordering::SeqCst);
                return Err(Error::Errno(e.raw_os_error().unwrap_or(libc::EIO)));
            }
            self.table_word(slot).store(TABLE_KEPT, Ordering::SeqCst);
        }
        self.touched.start(slot);
        Ok(slot)
    }

    /// Bytes of memory a process reserves when it registers (its open table).
    pub fn reserved_per_process(&self) -> usize {
        self.table_bytes()
    }

    /// Give `slot` up (its open table and counter cleared first, so a free slot is
    /// always clean). Nothing for [`NO_SLOT`].
    pub fn unregister(&self, slot: u32) {
        if slot == NO_SLOT {
            return;
        }
        self.clear_slot(slot);
        self.identity(slot).store(0, Ordering::SeqCst);
    }

    fn clear_slot(&self, slot: u32) {
        let at = self.table_off(slot);
        match self.touched.take(slot) {
            // This process's own slot: zero the pages it wrote and keep the table's
            // memory for the slot's next process, which then needs no `fallocate`
            // of up to 8 MiB at attach nor this `MADV_REMOVE` at detach (most of a
            // short program's cost of attaching, docs/DESIGN-NOTES.md).
            Some(pages) if self.table_word(slot).load(Ordering::SeqCst) == TABLE_KEPT => {
                for p in pages {
                    self.region
                        .clear(at + p * super::region::PAGE, super::region::PAGE);
                }
            }
            // Another process's (a dead one's, a fork's parent's): which pages it
            // wrote is unknown, so the table's pages are given back (the next
            // process in the slot reserves them again) rather than every word written.
            _ => {
                self.table_word(slot).store(0, Ordering::SeqCst);
                self.region.discard(at, self.table_bytes());
            }
        }
        for l in 0..OPS_LINES {
            self.ops(slot, l).store(0, Ordering::SeqCst);
        }
    }

    /// This process is a fork of the one registered in `old` (a daemon that detached
    /// from its terminal): take a slot of its own with the same open table, and free
    /// `old`, whose process is about to exit.
    pub fn adopt(&self, old: u32) -> Result<u32> {
        let new = self.register()?;
        for (ino, n) in self.opens_of(old) {
            for _ in 0..n {
                self.open_inc(new, ino)?;
            }
        }
        self.unregister(old);
        Ok(new)
    }

    /// The slots other than `me` registered to this very process (its pid, registered
    /// since it started): those of the images it was before an exec, which never
    /// detached (each image registered at its own tick).
    pub fn same_process(&self, me: u32) -> Result<Vec<u32>> {
        let pid = std::process::id();
        let (_, start) = own_stat(pid)?;
        Ok((0..MAX_PROCS)
            .filter(|&s| s != me)
            .filter(|&s| {
                let id = self.identity(s).load(Ordering::SeqCst);
                id != 0 && id_pid(id) == pid && registered_since(id, start)
            })
            .collect())
    }

    /// Whether a process is registered in `slot` and still running (its pid, started
    /// no later than it registered, and not a zombie: a zombie has released its
    /// locks).
    pub fn alive(&self, slot: u32) -> bool {
        let id = self.identity(slot).load(Ordering::SeqCst);
        id != 0 && identity_running(id)
    }

    /// Slots registered to processes that are gone.
    pub fn dead_slots(&self) -> Vec<u32> {
        (0..MAX_PROCS)
            .filter(|&s| self.identity(s).load(Ordering::SeqCst) != 0 && !self.alive(s))
            .collect()
    }

    /// Free a dead process's slot, dropping its open table. Only the repairer calls
    /// this (two reapers of one slot could clear a newcomer's table). False if the
    /// slot is free or its process is alive.
    pub fn reap(&self, slot: u32) -> bool {
        let id = self.identity(slot).load(Ordering::SeqCst);
        if id == 0 || identity_running(id) {
            return false;
        }
        self.clear_slot(slot);
        self.identity(slot)
            .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Start an operation in `slot`: one atomic increment, then a look at the state
    /// word. Together with `begin_repair` followed by `wait_quiescent` (both sides
    /// sequentially consistent), either the operation sees REPAIRING and backs out,
    /// or the repairer sees its count and waits for it.
    pub fn enter_op(&self, slot: u32) -> Result<Op<'_>, Interrupted> {
        let count = self.ops(slot, own_line());
        count.fetch_add(1, Ordering::SeqCst);
        let op = Op { count };
        if self.state() == REPAIRING {
            return Err(Interrupted);
        }
        Ok(op)
    }

    /// End an operation counted by [`Procs::enter_op`] whose guard was not kept (the
    /// engine counts across calls, see `runtime::Runtime`).
    /// Must run on the thread that entered it (the counter line is the thread's).
    pub fn leave_op(&self, slot: u32) {
        self.ops(slot, own_line()).fetch_sub(1, Ordering::Release);
    }

    /// Operations in flight in `slot` (none in [`NO_SLOT`]).
    pub fn ops_in_flight(&self, slot: u32) -> u64 {
        if slot == NO_SLOT {
            return 0;
        }
        (0..OPS_LINES)
            .map(|l| self.ops(slot, l).load(Ordering::SeqCst))
            .fold(0, u64::wrapping_add)
    }

    /// Wait until no other live slot has an operation in flight (a process that dies
    /// meanwhile counts as quiescent). Returns how many slots are live, `me` included.
    pub fn wait_quiescent(&self, me: u32, deadline: Instant) -> Result<usize, Busy> {
        let mut pause = Duration::from_micros(50);
        loop {
            let busy: Vec<u32> = (0..MAX_PROCS)
                .filter(|&s| s != me && self.ops_in_flight(s) != 0 && self.alive(s))
                .collect();
            if busy.is_empty() {
                return Ok((0..MAX_PROCS).filter(|&s| self.alive(s)).count());
            }
            if Instant::now() >= deadline {
                return Err(Busy(busy));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(2));
        }
    }

    /// Count one more open of `ino` by the process in `slot` (which alone writes its
    /// table; its threads may race). ENFILE when the table is full.
    pub fn open_inc(&self, slot: u32, ino: u64) -> Result<()> {
        check_ino(ino)?;
        let table = self.open_table(slot);
        for i in probe(ino, self.entries) {
            let e = &table[i];
            let mut w = e.load(Ordering::Acquire);
            loop {
                if w == 0 {
                    self.touched.mark(i / PAGE_ENTRIES);
                }
                let take = w == 0 || (w >> COUNT_BITS == ino && w & COUNT_MAX < COUNT_MAX);
                if !take {
                    break;
                }
                let new = if w == 0 { ino << COUNT_BITS | 1 } else { w + 1 };
                match e.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Ok(()),
                    Err(now) => w = now,
                }
            }
        }
        Err(Error::Errno(libc::ENFILE))
    }

    /// Count one open of `ino` by the process in `slot` closed. EINVAL if the table
    /// holds no open of it (a caller's bookkeeping error).
    pub fn open_dec(&self, slot: u32, ino: u64) -> Result<()> {
        check_ino(ino)?;
        let table = self.open_table(slot);
        for i in probe(ino, self.entries) {
            let e = &table[i];
            let mut w = e.load(Ordering::Acquire);
            while w != 0 && w >> COUNT_BITS == ino {
                // The last count empties the entry for reuse.
                let new = if w & COUNT_MAX == 1 { 0 } else { w - 1 };
                match e.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Ok(()),
                    Err(now) => w = now,
                }
            }
        }
        Err(Error::Invalid(format!(
            "inode {ino} is not open in process slot {slot}"
        )))
    }

    /// Every inode the process in `slot` holds open, with its count, by inode.
    pub fn opens_of(&self, slot: u32) -> Vec<(u64, u64)> {
        let mut m = BTreeMap::new();
        // A free slot's table has no memory behind it (reading it would give it some,
        // and could fault in a full directory): only pages in memory can hold entries.
        let at = self.table_off(slot);
        let resident = self.region.resident(at, self.table_bytes());
        let table = self.open_table(slot);
        let page = crate::runtime::region::PAGE;
        // Page p of `resident` starts `lead` bytes before the table (if it is not
        // page-aligned); its words are those whose bytes fall in it.
        let lead = at % page;
        let in_memory = resident
            .iter()
            .enumerate()
            .filter(|(_, &r)| r)
            .flat_map(|(p, _)| {
                let start = (p * page).saturating_sub(lead).div_ceil(8);
                let end = (((p + 1) * page).saturating_sub(lead) / 8).min(table.len());
                &table[start.min(end)..end]
            });
        for e in in_memory {
            let w = e.load(Ordering::Acquire);
            if w != 0 {
                *m.entry(w >> COUNT_BITS).or_insert(0) += w & COUNT_MAX;
            }
        }
        m.into_iter().collect()
    }
}

fn check_ino(ino: u64) -> Result<()> {
    if ino == 0 || ino > MAX_OPEN_INO {
        return Err(Error::Invalid(format!(
            "inode {ino} cannot be recorded in an open table"
        )));
    }
    Ok(())
}

/// Every index of an open table, starting at `ino`'s home. Entries are interchangeable
/// counts (an inode may have several), so no probe chain has to stay intact: a search
/// goes on past empty entries, and an emptied entry is simply free again.
///
/// The home is the inode number itself (modulo the table), not a hash of it: a thread
/// creates and opens inodes from its own allocation lane, numbered one after another,
/// so its entries share cache lines and pages instead of landing each on a random
/// line of a table of up to 8 MiB (a cache and TLB miss, and at first a page fault, per open,
/// which two threads opening at once paid over each other; issue 16). Threads on
/// other lanes use other parts of the table. Only this process's calls probe its
/// table (a repair reads it whole), so the home may change between versions.
fn probe(ino: u64, entries: usize) -> impl Iterator<Item = usize> {
    let home = (ino % entries as u64) as usize;
    (0..entries).map(move |k| (home + k) % entries)
}

/// This process's identity word, once made (a fork child, another pid, makes its own).
static OWN: std::sync::Mutex<(u32, u64)> = std::sync::Mutex::new((0, 0));

/// This process's identity word: its pid and the tick of its first registration.
fn own_identity() -> Result<u64> {
    let pid = std::process::id();
    let mut own = OWN.lock().unwrap_or_else(|p| p.into_inner());
    if own.0 != pid {
        *own = (pid, make_identity(pid, boot_tick()?)?);
    }
    Ok(own.1)
}

/// This process's identity word if it was made already.
fn known_own_identity() -> Option<u64> {
    let own = OWN.lock().unwrap_or_else(|p| p.into_inner());
    (own.0 == std::process::id()).then_some(own.1)
}

fn make_identity(pid: u32, tick: u64) -> Result<u64> {
    if pid >= 1 << PID_BITS || tick >= 1 << TICK_BITS {
        return Err(Error::Invalid(format!(
            "process {pid} (at tick {tick}) does not fit a process-table slot"
        )));
    }
    Ok(tick << PID_BITS | u64::from(pid))
}

fn id_pid(id: u64) -> u32 {
    (id & ((1 << PID_BITS) - 1)) as u32
}

/// Whether identity `id` was registered no earlier than the tick `start` (the start
/// time of the process now holding its pid): by that process, not an earlier one.
fn registered_since(id: u64, start: u64) -> bool {
    start <= id >> PID_BITS
}

/// Now, in clock ticks since boot, as `/proc/PID/stat` counts a start time: the
/// boot-time clock (which counts suspend, as the start time does) in whole ticks of
/// `sysconf(_SC_CLK_TCK)`, rounded down as the kernel rounds the start time, so a
/// process's start is never after any tick read while it runs.
fn boot_tick() -> Result<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only it.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    // SAFETY: sysconf reads a constant of the C library (from the auxiliary vector).
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if r != 0 || ts.tv_sec < 0 || hz <= 0 {
        return Err(Error::Invalid("cannot read the boot-time clock".into()));
    }
    let ns = ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128;
    Ok((ns * hz as u128 / 1_000_000_000) as u64)
}

/// This process's state letter and start time.
fn own_stat(pid: u32) -> Result<(u8, u64)> {
    proc_stat(pid)
        .ok_or_else(|| Error::Invalid(format!("cannot read /proc/{pid}/stat (is /proc mounted?)")))
}

/// Whether the process an identity word names is running.
fn identity_running(id: u64) -> bool {
    // This very process (a look at every slot meets its own): no /proc read.
    if known_own_identity() == Some(id) {
        return true;
    }
    match proc_stat(id_pid(id)) {
        Some((state, start)) => registered_since(id, start) && state != b'Z' && state != b'X',
        None => false,
    }
}

/// A process's state letter and start time (field 22 of /proc/PID/stat, clock ticks
/// since boot), or None if there is no such process.
fn proc_stat(pid: u32) -> Option<(u8, u64)> {
    // One read into a buffer the line fits (a 64-byte name at most, 52 numbers):
    // procfs makes the whole line for every read, and `fs::read` asks in pieces
    // from 32 bytes up (seven system calls, the line made six times, at each attach).
    use std::io::Read;
    let mut f = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut buf = [0u8; 2048];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if buf[n - 1] == b'\n' {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let text = &buf[..n];
    // The command name (field 2) is in parentheses and may hold anything, ')' too.
    let after = &text[text.iter().rposition(|&b| b == b')')? + 1..];
    let mut fields = after
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?; // field 3
    let start = fields.nth(22 - 4)?; // field 22
    Some((state, std::str::from_utf8(start).ok()?.parse().ok()?))
}

/// The [`Watch`] of an attached process: interrupts waits while the runtime is under
/// repair, and (at most every [`SCAN_EVERY`] per process) looks for dead processes,
/// starting a repair when it finds one.
pub struct Health {
    procs: Procs,
    base: Instant,
    /// Nanoseconds after `base` of the last scan (shared by this process's threads).
    last_scan: AtomicU64,
}

/// How often one process looks for dead ones while waiting.
pub const SCAN_EVERY: Duration = Duration::from_millis(10);

impl Health {
    pub fn new(procs: Procs) -> Health {
        // The base lies a whole period back, so the first look is due at once (a
        // process attaching finds a death nobody waited on, see `Attachment::new`).
        let now = Instant::now();
        Health {
            procs,
            base: now.checked_sub(SCAN_EVERY).unwrap_or(now),
            last_scan: AtomicU64::new(0),
        }
    }

    /// Whether this thread should scan now: the last scan is old enough and no other
    /// thread of the process claimed this one.
    fn due(&self) -> bool {
        let now = self.base.elapsed().as_nanos() as u64;
        let last = self.last_scan.load(Ordering::Relaxed);
        now >= last + SCAN_EVERY.as_nanos() as u64
            && self
                .last_scan
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

impl Watch for Health {
    fn check(&self) -> Result<(), Interrupted> {
        if self.procs.state() == REPAIRING {
            return Err(Interrupted);
        }
        if !self.due() || self.procs.dead_slots().is_empty() {
            return Ok(());
        }
        self.procs.begin_repair();
        Err(Interrupted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn procs() -> Procs {
        procs_of(MAX_OPEN_ENTRIES)
    }

    fn procs_of(entries: usize) -> Procs {
        let region = Region::anonymous(bytes_needed(entries)).unwrap();
        Procs::new(Arc::new(region), entries).unwrap()
    }

    #[test]
    fn open_tables_are_sized_by_the_pools_inodes_in_whole_pages() {
        assert_eq!(open_entries_for(0), PAGE_ENTRIES);
        assert_eq!(open_entries_for(8192), 8192);
        assert_eq!(open_entries_for(8193), 8192 + PAGE_ENTRIES);
        assert_eq!(open_entries_for(u64::MAX), MAX_OPEN_ENTRIES);
        let region = || Arc::new(Region::anonymous(bytes_needed(1024)).unwrap());
        assert!(Procs::new(region(), 1000).is_err(), "not whole pages");
        assert!(Procs::new(region(), 2048).is_err(), "past the region");
    }

    /// A thread opening the inodes of its lane, numbered one after another, uses one
    /// stretch of its open table (a page per 512 inodes), not a line and a page
    /// per inode (issue 16). (Counted by the entries' homes: pages resident would
    /// depend on the machine's huge page setting.)
    #[test]
    fn consecutive_inodes_share_the_open_tables_lines() {
        let homes: Vec<usize> = (70_000..70_512)
            .map(|i| probe(i, MAX_OPEN_ENTRIES).next().unwrap())
            .collect();
        let lines: std::collections::BTreeSet<usize> = homes.iter().map(|h| h / 8).collect();
        assert!(lines.len() <= 65, "512 inodes on {} lines", lines.len());
        let p = procs();
        let s = p.register().unwrap();
        for ino in 70_000..70_512 {
            p.open_inc(s, ino).unwrap();
        }
        assert_eq!(p.opens_of(s).len(), 512);
        for ino in 70_000..70_512 {
            p.open_dec(s, ino).unwrap();
        }
        assert!(p.opens_of(s).is_empty());
    }

    #[test]
    fn open_tables_count_per_inode_and_empty_on_last_close() {
        let p = procs();
        let s = p.register().unwrap();
        p.open_inc(s, 5).unwrap();
        p.open_inc(s, 5).unwrap();
        p.open_inc(s, MAX_OPEN_INO).unwrap();
        assert_eq!(p.opens_of(s), vec![(5, 2), (MAX_OPEN_INO, 1)]);
        p.open_dec(s, 5).unwrap();
        p.open_dec(s, 5).unwrap();
        assert!(p.open_dec(s, 5).is_err(), "closing more than opened");
        assert_eq!(p.opens_of(s), vec![(MAX_OPEN_INO, 1)]);
        assert!(p.open_inc(s, 0).is_err());
        assert!(p.open_inc(s, MAX_OPEN_INO + 1).is_err());
        let other = p.register().unwrap();
        assert_ne!(s, other);
        assert!(p.opens_of(other).is_empty(), "tables are per slot");
    }

    /// A process freeing its own slot zeroes the pages of its table it wrote and
    /// keeps the table's memory for the slot's next process (which then reserves
    /// nothing); a slot freed by another process (a reaped one) gives it back.
    #[test]
    fn a_freed_slot_keeps_its_table_zeroed_unless_reaped() {
        let p = procs_of(4 * PAGE_ENTRIES);
        let s = p.register().unwrap();
        assert_eq!(p.table_word(s).load(Ordering::SeqCst), TABLE_KEPT);
        for ino in [3, 700, 1500] {
            p.open_inc(s, ino).unwrap();
        }
        p.unregister(s);
        assert_eq!(p.table_word(s).load(Ordering::SeqCst), TABLE_KEPT);
        assert!(p
            .open_table(s)
            .iter()
            .all(|w| w.load(Ordering::SeqCst) == 0));
        let again = p.register().unwrap();
        assert_eq!(again, s, "the lowest free slot");
        assert!(p.opens_of(again).is_empty());
        p.open_inc(again, 9).unwrap();
        // Another process's slot (here: one this process's view no longer owns).
        let other = Procs::new(p.region.clone(), p.entries).unwrap();
        other.unregister(again);
        assert_eq!(p.table_word(again).load(Ordering::SeqCst), 0);
        assert!(p
            .open_table(again)
            .iter()
            .all(|w| w.load(Ordering::SeqCst) == 0));
    }

    #[test]
    fn a_full_open_table_says_enfile_and_frees_on_close() {
        const N: usize = 4 * PAGE_ENTRIES;
        let p = procs_of(N);
        let s = p.register().unwrap();
        for ino in 1..=N as u64 {
            p.open_inc(s, ino).unwrap();
        }
        assert_eq!(
            p.open_inc(s, N as u64 + 1).unwrap_err().errno(),
            libc::ENFILE
        );
        p.open_inc(s, 7).unwrap(); // one more of an inode already in: still counted
        p.open_dec(s, 9).unwrap();
        p.open_inc(s, N as u64 + 1).unwrap();
        assert_eq!(p.opens_of(s).len(), N);
    }

    #[test]
    fn racing_threads_keep_exact_counts() {
        let p = procs();
        let s = p.register().unwrap();
        std::thread::scope(|sc| {
            for t in 0..4u64 {
                let p = &p;
                sc.spawn(move || {
                    for i in 0..20_000u64 {
                        let ino = 1 + (i % 50);
                        p.open_inc(s, ino).unwrap();
                        if i % 3 != 0 || t == 0 {
                            p.open_dec(s, ino).unwrap();
                        }
                    }
                });
            }
        });
        let total: u64 = p.opens_of(s).iter().map(|&(_, c)| c).sum();
        // Threads 1..3 keep every third open: 6667 each.
        assert_eq!(total, 3 * 6667);
    }

    #[test]
    fn ops_back_out_under_repair_and_reap_frees_only_dead_slots() {
        let p = procs();
        p.set_ready();
        let me = p.register().unwrap();
        assert!(p.alive(me));
        assert!(!p.reap(me), "a live slot is not reaped");
        let op = p.enter_op(me).unwrap();
        assert_eq!(p.ops_in_flight(me), 1);
        assert!(p.begin_repair());
        assert!(p.enter_op(me).is_err(), "no new operation during repair");
        assert_eq!(p.ops_in_flight(me), 1);
        drop(op);
        assert_eq!(p.wait_quiescent(me, Instant::now()), Ok(1));
        // A slot naming a process that is gone (pid 0 never names a user process).
        let ghost = p.register().unwrap();
        p.identity(ghost).store(1 << PID_BITS, Ordering::SeqCst);
        p.open_inc(ghost, 3).unwrap();
        p.ops(ghost, 3).store(2, Ordering::SeqCst);
        assert_eq!(p.dead_slots(), vec![ghost]);
        assert_eq!(
            p.wait_quiescent(me, Instant::now()),
            Ok(1),
            "the dead are quiescent"
        );
        assert!(p.claim_repair(me));
        assert!(p.reap(ghost));
        assert!(p.opens_of(ghost).is_empty());
        p.end_repair(2);
        assert_eq!((p.state(), p.generation()), (READY, 2));
        assert!(p.dead_slots().is_empty());
    }

    /// A process that saw REPAIRING, then lost the time slice while the repairer
    /// finished, must not take the freed claim and rebuild the runtime state under
    /// the operations that run again (they would lose what they allocated meanwhile).
    #[test]
    fn a_claim_after_the_repair_ended_is_refused() {
        let p = procs();
        p.set_ready();
        let (a, b) = (p.register().unwrap(), p.register().unwrap());
        assert!(p.begin_repair());
        assert!(p.claim_repair(a));
        assert!(!p.claim_repair(b), "one repairer at a time");
        p.end_repair(2);
        assert!(!p.claim_repair(b), "no repair is under way");
        assert!(p.begin_repair(), "the refused claim is not left held");
        assert!(p.claim_repair(b));
    }

    /// A process attaching while a dead one is in the table starts the repair at its
    /// first look (`Attachment::new` looks once), not only 10 ms later.
    #[test]
    fn a_new_health_looks_at_once() {
        let p = procs();
        p.set_ready();
        let ghost = p.register().unwrap();
        p.identity(ghost).store(1 << PID_BITS, Ordering::SeqCst);
        assert_eq!(Health::new(p.clone()).check(), Err(Interrupted));
        assert_eq!(p.state(), REPAIRING);
    }

    #[test]
    fn health_interrupts_after_a_death_is_seen() {
        let p = procs();
        p.set_ready();
        let h = Health::new(p.clone());
        assert_eq!(h.check(), Ok(()));
        let ghost = p.register().unwrap();
        p.identity(ghost).store(1 << PID_BITS, Ordering::SeqCst);
        std::thread::sleep(SCAN_EVERY * 2);
        assert_eq!(h.check(), Err(Interrupted));
        assert_eq!(p.state(), REPAIRING);
        assert_eq!(h.check(), Err(Interrupted), "until the repair ends");
    }

    /// A slot is its process's when registered at or after the process's start (the
    /// tick of registration, not the start time itself), and a slot of the same pid
    /// registered before the start is an earlier process's (the pid was reused).
    #[test]
    fn a_slot_is_alive_from_its_process_start_on() {
        let pid = std::process::id();
        let (_, start) = proc_stat(pid).unwrap();
        let id = |tick| make_identity(pid, tick).unwrap();
        assert!(identity_running(id(start)));
        assert!(
            identity_running(id(start + 5)),
            "registered after its start"
        );
        assert!(!identity_running(id(start - 1)), "an earlier process's pid");
        let own = own_identity().unwrap() >> PID_BITS;
        assert!(own >= start && own <= boot_tick().unwrap());
        let p = procs();
        let me = p.register().unwrap();
        let earlier_image = p.register().unwrap();
        p.identity(earlier_image)
            .store(id(start + 1), Ordering::SeqCst);
        let reused = p.register().unwrap();
        p.identity(reused).store(id(start - 1), Ordering::SeqCst);
        assert_eq!(p.same_process(me).unwrap(), vec![earlier_image]);
    }

    #[test]
    fn own_stat_parses() {
        let (state, start) = proc_stat(std::process::id()).unwrap();
        assert_ne!(state, b'Z');
        assert!(start > 0);
        assert!(identity_running(own_identity().unwrap()));
    }
}
