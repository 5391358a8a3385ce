//! Calls that place, move, remove or change a mapping at an address the program
//! chooses. Each is checked against the engine's own mappings (the pool, its runtime
//! state, the engine's bookkeeping: `lynxfs::pmem::mappings`) and refused with EPERM
//! when it touches one, with a line on stderr naming the pool. EPERM is what the
//! kernel answers for a sealed mapping (`mseal`), which the engine's mappings are in
//! an attached process: the same call made as a raw system call gets the same
//! answer. A plain `MAP_FIXED` never fails in the kernel otherwise, so no errno is
//! the kernel's there; a program that checks for `MAP_FAILED` stops with a clear
//! error instead of losing the pool's files.
//!
//! `mmap` and `munmap` themselves live with the pool's file mappings
//! (`super::io`, `super::shared_map`) and call [`refused`] first.

use libc::{c_int, c_void, size_t};

use crate::real;

/// Whether `[addr, addr + len)` touches an engine mapping; if so the call named
/// `call` is refused: errno EPERM and a line on stderr.
pub fn refused(call: &str, addr: *const c_void, len: size_t) -> bool {
    let Some(o) = lynxfs::pmem::mappings::overlapping(addr as usize, len) else {
        return false;
    };
    let pool = crate::state::config()
        .map_or_else(String::new, |c| format!(" {}", c.pool.to_string_lossy()));
    real::say(&format!(
        "{call} of {:#x}..{:#x} would change {}{pool} mapped at {:#x}..{:#x}: refused (EPERM)",
        addr as usize,
        (addr as usize).saturating_add(len),
        o.kind.describe(),
        o.start,
        o.start + o.len,
    ));
    crate::route::set_errno(libc::EPERM);
    true
}

/// Whether `pkey` is the engine's protection key (`lynxfs::pmem::keys`); if so the
/// call named `call` is refused: errno EINVAL, which the kernel answers for a key
/// the caller did not allocate (the program did not), and a line on stderr. A
/// program that frees the engine's key, sets its rights or puts its own memory
/// under it would undo the protection of the pool or fault in its own memory.
pub fn key_refused(call: &str, pkey: c_int) -> bool {
    if !lynxfs::pmem::keys::is_engine_key(pkey) {
        return false;
    }
    real::say(&format!(
        "{call} of protection key {pkey}, the pool engine's: refused (EINVAL)"
    ));
    crate::route::set_errno(libc::EINVAL);
    true
}

#[no_mangle]
pub unsafe extern "C" fn pkey_free(pkey: c_int) -> c_int {
    if key_refused("pkey_free", pkey) {
        return -1;
    }
    // SAFETY: the C library's pkey_free with the caller's argument.
    unsafe { real::pkey_free(pkey) }
}

#[no_mangle]
pub unsafe extern "C" fn pkey_set(pkey: c_int, rights: libc::c_uint) -> c_int {
    if key_refused("pkey_set", pkey) {
        return -1;
    }
    // SAFETY: the C library's pkey_set with the caller's arguments.
    unsafe { real::pkey_set(pkey, rights) }
}

#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    if refused("mprotect", addr, len) {
        return -1;
    }
    // SAFETY: the C library's mprotect with the caller's arguments.
    unsafe { real::mprotect(addr, len, prot) }
}

#[no_mangle]
pub unsafe extern "C" fn pkey_mprotect(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    pkey: c_int,
) -> c_int {
    if refused("pkey_mprotect", addr, len) || key_refused("pkey_mprotect", pkey) {
        return -1;
    }
    // SAFETY: the C library's pkey_mprotect with the caller's arguments.
    unsafe { real::pkey_mprotect(addr, len, prot, pkey) }
}

/// Advice that changes nothing a mapping holds or who shares it: allowed over an
/// engine mapping (a program may advise a range that spans it). Any other advice
/// (`MADV_REMOVE` punches a hole in the pool file, `MADV_DONTFORK` and
/// `MADV_WIPEONFORK` take the pool from a child, `MADV_DONTNEED` and `MADV_FREE`
/// drop a private mapping's writes, `MADV_HWPOISON`, guard regions, and advice this
/// list does not know yet) is refused there.
const HARMLESS_ADVICE: [c_int; 13] = [
    libc::MADV_NORMAL,
    libc::MADV_RANDOM,
    libc::MADV_SEQUENTIAL,
    libc::MADV_WILLNEED,
    libc::MADV_DONTDUMP,
    libc::MADV_DODUMP,
    libc::MADV_HUGEPAGE,
    libc::MADV_NOHUGEPAGE,
    libc::MADV_COLD,
    libc::MADV_PAGEOUT,
    libc::MADV_POPULATE_READ,
    libc::MADV_POPULATE_WRITE,
    25, // MADV_COLLAPSE (Linux 6.1; not in the libc crate's list)
];

#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    if !HARMLESS_ADVICE.contains(&advice) && refused("madvise", addr, len) {
        return -1;
    }
    // SAFETY: the C library's madvise with the caller's arguments.
    unsafe { real::madvise(addr, len, advice) }
}

/// `mremap(old, old_len, new_len, flags, ...)`: the optional fifth argument (the new
/// address, read only with `MREMAP_FIXED`) is taken as a fixed one, which the x86_64
/// and aarch64 calling conventions allow for a variadic callee's first variadic
/// argument. Moving, growing, shrinking or copying (`MREMAP_DONTUNMAP`) an engine
/// mapping is refused, and so is a fixed target over one.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if refused("mremap", old, old_len.max(1))
        || (flags & libc::MREMAP_FIXED != 0 && refused("mremap(MREMAP_FIXED)", new_addr, new_len))
    {
        return libc::MAP_FAILED;
    }
    // SAFETY: the C library's mremap with the caller's arguments.
    unsafe { real::mremap(old, old_len, new_len, flags, new_addr) }
}

#[no_mangle]
pub unsafe extern "C" fn remap_file_pages(
    addr: *mut c_void,
    size: size_t,
    prot: c_int,
    pgoff: size_t,
    flags: c_int,
) -> c_int {
    if refused("remap_file_pages", addr, size) {
        return -1;
    }
    // SAFETY: the C library's remap_file_pages with the caller's arguments.
    unsafe { real::remap_file_pages(addr, size, prot, pgoff, flags) }
}

/// `shmat` with `SHM_REMAP` replaces what is mapped at the address (without it the
/// kernel refuses an overlap by itself): refused over an engine mapping.
#[no_mangle]
pub unsafe extern "C" fn shmat(id: c_int, addr: *const c_void, flags: c_int) -> *mut c_void {
    if flags & libc::SHM_REMAP != 0 && !addr.is_null() {
        let at = if flags & libc::SHM_RND != 0 {
            (addr as usize) & !(shmlba() - 1)
        } else {
            addr as usize
        };
        if refused("shmat(SHM_REMAP)", at as *const c_void, segment_len(id)) {
            return usize::MAX as *mut c_void;
        }
    }
    // SAFETY: the C library's shmat with the caller's arguments.
    unsafe { real::shmat(id, addr, flags) }
}

/// SysV shared memory's attach alignment: the page size on x86_64 and aarch64.
fn shmlba() -> usize {
    // SAFETY: sysconf reads a constant.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize
}

/// The size of segment `id`, or a page when it cannot be read (the kernel then
/// fails the attach itself).
fn segment_len(id: c_int) -> usize {
    let mut ds = std::mem::MaybeUninit::<libc::shmid_ds>::zeroed();
    // SAFETY: IPC_STAT fills a shmid_ds of the right type.
    if unsafe { libc::shmctl(id, libc::IPC_STAT, ds.as_mut_ptr()) } == 0 {
        // SAFETY: shmctl succeeded, so it filled `ds`.
        unsafe { ds.assume_init() }.shm_segsz.max(1)
    } else {
        1
    }
}
