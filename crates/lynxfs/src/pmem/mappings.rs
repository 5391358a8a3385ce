//! Every range of addresses the engine maps (the pool, the runtime region, its own
//! bookkeeping), where it places them, and their seal.
//!
//! Why: under the preload library and the C API the engine lives inside a program it
//! did not write. A program that maps at a fixed address, unmaps, changes protection
//! or advises away a range it believes its own would silently replace the pool's
//! memory, and the engine would then write metadata into the program's bytes. Three
//! defences, in this order:
//! - **Placement.** File and shared mappings are placed in an area of the address
//!   space the kernel never picks by itself ([`AREA_START`]), at an offset drawn from
//!   the kernel's per-exec random bytes. Addresses a program learned from the kernel
//!   (its own earlier mappings, or its parent's, passed on across exec: the filebench
//!   case) lie near the top of the address space, far from it, so the collision does
//!   not happen. `MAP_FIXED_NOREPLACE` makes a taken address fall back to the next
//!   slot, then to the kernel's choice.
//! - **The registry** ([`overlapping`]): the preload checks every C library call that
//!   places, moves, removes or changes a mapping at an address the program chose,
//!   and refuses one that touches an engine mapping.
//! - **The seal** ([`seal_all`], Linux 6.10's `mseal`): once a preloaded process is
//!   attached, the kernel itself refuses `MAP_FIXED`, `munmap`, `mremap` and
//!   `mprotect` over the engine's mappings, also from raw system calls.
//! - **The key** ([`super::keys`]): on CPUs with protection keys, a stray store of
//!   the program into an engine mapping faults instead of landing.
//!
//! The registry is a fixed table of atomic words, read without a lock (the preload
//! checks it on every `munmap`). A mapping is registered just after `mmap` returns: a
//! second thread's fixed mapping in that instant is not caught by the registry
//! (placement makes it land elsewhere in practice).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What an engine mapping holds, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The pool file (or an in-memory pool).
    Pool,
    /// Runtime state shared by the attached processes.
    Runtime,
    /// The engine's private bookkeeping (the fresh-page bitmap).
    Private,
}

impl Kind {
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Pool => "the pool",
            Kind::Runtime => "the pool's runtime state",
            Kind::Private => "the pool engine's memory",
        }
    }

    fn code(self) -> usize {
        match self {
            Kind::Pool => 1,
            Kind::Runtime => 2,
            Kind::Private => 3,
        }
    }

    fn of(code: usize) -> Option<Kind> {
        match code {
            1 => Some(Kind::Pool),
            2 => Some(Kind::Runtime),
            3 => Some(Kind::Private),
            _ => None,
        }
    }
}

/// Registry slots. A process maps a pool and a handful of runtime regions; tests
/// and checkers may hold more at once: a mapping that finds no slot is simply not
/// guarded (it still works).
const SLOTS: usize = 128;

/// One slot: `start` is 0 when free, `kind` is 0 while being filled or emptied.
struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    kind: AtomicUsize,
    sealed: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    kind: AtomicUsize::new(0),
    sealed: AtomicBool::new(false),
};
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
/// One past the highest slot ever used: readers scan no further.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// The lowest start and highest end ever registered: most calls a program makes
/// lie outside, and are answered without a scan.
static LOWEST: AtomicUsize = AtomicUsize::new(usize::MAX);
static HIGHEST: AtomicUsize = AtomicUsize::new(0);
/// A start address no mapping has: marks a slot taken but not yet filled.
const CLAIMED: usize = usize::MAX;

/// A registered mapping; dropping it removes the entry (before the unmap).
#[derive(Debug)]
pub struct Registered {
    slot: Option<usize>,
}

impl Registered {
    /// Nothing registered (a mapping that found no free slot).
    pub const NONE: Registered = Registered { slot: None };
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            let s = &TABLE[i];
            s.kind.store(0, Ordering::Release);
            s.end.store(0, Ordering::Release);
            s.sealed.store(false, Ordering::Relaxed);
            s.start.store(0, Ordering::Release);
        }
    }
}

/// Register `[base, base + len)`, a fresh read-write mapping, as the engine's, and
/// put it under the engine's protection key when the process has one ([`super::keys`]).
pub fn register(base: *const u8, len: usize, kind: Kind) -> Registered {
    let start = base as usize;
    if len == 0 {
        return Registered::NONE;
    }
    super::keys::apply(base.cast_mut(), len);
    for (i, s) in TABLE.iter().enumerate() {
        if s.start
            .compare_exchange(0, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        HIGH.fetch_max(i + 1, Ordering::AcqRel);
        LOWEST.fetch_min(start, Ordering::AcqRel);
        HIGHEST.fetch_max(start + len, Ordering::AcqRel);
        s.end.store(start + len, Ordering::Release);
        s.kind.store(kind.code(), Ordering::Release);
        s.start.store(start, Ordering::Release);
        return Registered { slot: Some(i) };
    }
    Registered::NONE
}

/// An engine mapping that `[addr, addr + len)` touches: its kind and range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overlap {
    pub kind: Kind,
    pub start: usize,
    pub len: usize,
}

/// The first engine mapping that `[addr, addr + len)` touches, if any. A range that
/// wraps around the address space touches everything above `addr`.
pub fn overlapping(addr: usize, len: usize) -> Option<Overlap> {
    let end = addr.saturating_add(len.max(1));
    if end <= LOWEST.load(Ordering::Acquire) || addr >= HIGHEST.load(Ordering::Acquire) {
        return None;
    }
    let high = HIGH.load(Ordering::Acquire);
    TABLE[..high].iter().find_map(|s| {
        let start = s.start.load(Ordering::Acquire);
        if start == 0 || start == CLAIMED {
            return None;
        }
        let kind = Kind::of(s.kind.load(Ordering::Acquire))?;
        let stop = s.end.load(Ordering::Acquire);
        (addr < stop && start < end).then_some(Overlap {
            kind,
            start,
            len: stop - start,
        })
    })
}

/// Every engine mapping now registered.
pub fn all() -> Vec<Overlap> {
    let high = HIGH.load(Ordering::Acquire);
    TABLE[..high]
        .iter()
        .filter_map(|s| {
            let start = s.start.load(Ordering::Acquire);
            let kind = Kind::of(s.kind.load(Ordering::Acquire))?;
            let stop = s.end.load(Ordering::Acquire);
            (start != 0 && start != CLAIMED && stop > start).then_some(Overlap {
                kind,
                start,
                len: stop - start,
            })
        })
        .collect()
}

/// How sealing went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seal {
    /// Every registered mapping is sealed (this many were newly sealed).
    Sealed(usize),
    /// The kernel has no `mseal` (before Linux 6.10): the registry alone guards.
    Unsupported,
}

/// Seal every registered mapping (`mseal`): from now on the kernel refuses to unmap,
/// move, replace or reprotect them, for the rest of the process's life. Only for a
/// process that keeps its pool attached until it exits (the preload library): a
/// sealed mapping cannot be unmapped when its owner is dropped (its addresses stay
/// taken). Mappings registered later are not sealed.
pub fn seal_all() -> Seal {
    let mut n = 0;
    for m in all() {
        let Some(i) = slot_of(m.start) else { continue };
        if TABLE[i].sealed.load(Ordering::Acquire) {
            continue;
        }
        // SAFETY: mseal changes no memory; it only forbids later changes to the
        // mapping's layout and protection. The range is an engine mapping this
        // process keeps until exit (the caller's contract above).
        let r = unsafe { libc::syscall(SYS_MSEAL, m.start, m.len, 0) };
        if r != 0 {
            let e = std::io::Error::last_os_error().raw_os_error();
            if e == Some(libc::ENOSYS) || (n == 0 && e == Some(libc::EINVAL)) {
                return Seal::Unsupported;
            }
            continue;
        }
        TABLE[i].sealed.store(true, Ordering::Release);
        n += 1;
    }
    Seal::Sealed(n)
}

/// Whether the engine mapping starting at `start` is sealed.
pub fn is_sealed(start: usize) -> bool {
    slot_of(start).is_some_and(|i| TABLE[i].sealed.load(Ordering::Acquire))
}

fn slot_of(start: usize) -> Option<usize> {
    let high = HIGH.load(Ordering::Acquire);
    (0..high).find(|&i| TABLE[i].start.load(Ordering::Acquire) == start)
}

/// `madvise` of the engine's own mapping, as a raw system call: the preload's
/// `madvise`, which the engine's own calls would reach otherwise (the library is
/// first in the process's symbol order), refuses advice over engine mappings.
///
/// # Safety
/// As `madvise`: the range is the caller's own mapping, and the advice is one the
/// caller's accesses allow.
pub unsafe fn advise_own(addr: *mut u8, len: usize, advice: libc::c_int) -> libc::c_int {
    // SAFETY: as this function's contract.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as libc::c_int }
}

/// `munmap` of the engine's own mapping, as a raw system call (see [`advise_own`]).
///
/// # Safety
/// As `munmap`: nothing refers to the range any more.
pub unsafe fn unmap_own(addr: *mut u8, len: usize) -> libc::c_int {
    // SAFETY: as this function's contract.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as libc::c_int }
}

/// `mseal(2)` on x86_64 and aarch64 (the libc crate has no constant for it yet).
const SYS_MSEAL: libc::c_long = 462;

/// Where engine mappings go: 32 TiB up, below every address the kernel hands out by
/// itself on x86_64 and aarch64 with 47/48-bit user space (executables near 0 or
/// 0x55.., their heap after them; libraries, stacks and the kernel's own mmap
/// choices within a few TiB under the top at 128 TiB).
const AREA_START: usize = 0x2000_0000_0000;
/// The random offset's span (8 TiB) and the area's length (16 TiB).
const AREA_SPREAD: usize = 0x0800_0000_0000;
const AREA_LEN: usize = 0x1000_0000_0000;
const MB2: usize = 2 << 20;
const GB1: usize = 1 << 30;

/// The next free offset into the area (from its random start).
static CURSOR: AtomicUsize = AtomicUsize::new(0);

/// Map as `mmap(NULL, len, prot, flags, fd, off)` would, but in the engine's area
/// (see the module comment), aligned to 2 MiB, or to 1 GiB for a mapping of at least
/// 1 GiB (what DAX huge pages need). Falls back to the kernel's choice when the area
/// is taken. Returns `MAP_FAILED` as `mmap` does, with errno set.
///
/// # Safety
/// As `mmap` with a null address: `fd` and `off` are the caller's to map.
pub unsafe fn map_placed(
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    off: libc::off_t,
) -> *mut libc::c_void {
    if cfg!(target_pointer_width = "64") && len > 0 && len <= AREA_LEN / 4 {
        for _ in 0..4 {
            let at = next_place(len);
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the
            // kernel fails with EEXIST instead (and a kernel before 4.17, which does
            // not know the flag, takes the address as a hint).
            let p = unsafe {
                libc::mmap(
                    at as *mut libc::c_void,
                    len,
                    prot,
                    flags | libc::MAP_FIXED_NOREPLACE,
                    fd,
                    off,
                )
            };
            if p != libc::MAP_FAILED {
                return p;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                break;
            }
        }
    }
    // SAFETY: as this function's contract.
    unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, off) }
}

/// An address in the area for `len` bytes, aligned for its size.
fn next_place(len: usize) -> usize {
    let align = if len >= GB1 { GB1 } else { MB2 };
    let size = len.div_ceil(align) * align;
    let base = AREA_START + area_offset();
    let at = CURSOR.fetch_add(size + align, Ordering::Relaxed) % (AREA_LEN - AREA_SPREAD - size);
    (base + at).div_ceil(align) * align
}

/// The area's random offset: 1 GiB aligned within [`AREA_SPREAD`], from the 16 bytes
/// the kernel gives each new program (`AT_RANDOM`), so it differs from one exec to
/// the next, also where address randomization is off (`setarch -R`).
fn area_offset() -> usize {
    static OFFSET: AtomicUsize = AtomicUsize::new(usize::MAX);
    let got = OFFSET.load(Ordering::Relaxed);
    if got != usize::MAX {
        return got;
    }
    // SAFETY: getauxval only reads the process's auxiliary vector.
    let p = unsafe { libc::getauxval(libc::AT_RANDOM) } as *const u8;
    let r = if p.is_null() {
        0
    } else {
        let mut b = [0u8; 8];
        // SAFETY: AT_RANDOM points at 16 bytes the kernel placed on the stack at
        // exec, valid for the process's life.
        unsafe { std::ptr::copy_nonoverlapping(p.add(8), b.as_mut_ptr(), 8) };
        u64::from_ne_bytes(b) as usize
    };
    let off = (r % (AREA_SPREAD / GB1)) * GB1;
    OFFSET.store(off, Ordering::Relaxed);
    off
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_range_is_found_by_any_overlap_and_gone_once_dropped() {
        let base = 0x7100_0000_0000usize as *const u8;
        let r = register(base, 8192, Kind::Runtime);
        let start = base as usize;
        assert_eq!(overlapping(start - 4096, 4096), None, "just below");
        assert_eq!(overlapping(start + 8192, 4096), None, "just above");
        for (a, l) in [(start, 1), (start + 8191, 1), (start - 1, 2)] {
            let o = overlapping(a, l).expect("overlaps");
            assert_eq!((o.kind, o.start, o.len), (Kind::Runtime, start, 8192));
        }
        assert!(
            overlapping(0, usize::MAX).is_some(),
            "a range over everything"
        );
        drop(r);
        assert_eq!(overlapping(start, 8192), None);
    }

    #[test]
    fn placed_mappings_land_in_the_area_aligned_and_apart() {
        let len = 3 << 20;
        let flags = libc::MAP_SHARED | libc::MAP_ANONYMOUS;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: fresh anonymous mappings, unmapped below.
        let (a, b) = unsafe {
            (
                map_placed(len, prot, flags, -1, 0) as usize,
                map_placed(len, prot, flags, -1, 0) as usize,
            )
        };
        for p in [a, b] {
            assert!((AREA_START..AREA_START + AREA_LEN).contains(&p), "{p:#x}");
            assert_eq!(p % MB2, 0);
        }
        assert!(a + len <= b || b + len <= a, "apart");
        // SAFETY: the two mappings made above.
        unsafe {
            libc::munmap(a as *mut _, len);
            libc::munmap(b as *mut _, len);
        }
    }
}
