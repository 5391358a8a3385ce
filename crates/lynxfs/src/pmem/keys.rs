//! Memory protection keys over the engine's mappings: a stray store of the host
//! program into the pool faults instead of corrupting it.
//!
//! Why: under the preload library and the C API the engine shares its address space
//! with a program it did not write. On CPUs with protection keys (x86 `pku`: Intel
//! since Skylake-SP, AMD since Zen 3) every engine mapping ([`super::mappings`])
//! carries one key, and a thread may touch memory under that key only while it is
//! inside the engine. Outside, the key's rights are "no access", the kernel's own
//! default for a key in every thread, so threads the program made before the key
//! existed, or makes later, are shut out without being visited. Inside, an [`Open`]
//! guard saves the thread's rights (the `PKRU` register), clears the key's two bits,
//! and writes the saved value back when dropped: on every return and error path, on
//! unwinding, and for a signal handler's nested entry (the kernel gives a handler
//! the default rights and restores the interrupted thread's at `sigreturn`).
//!
//! What this is not: a security boundary. `WRPKRU` is an unprivileged instruction,
//! and `/proc/self/mem`, `process_vm_writev` and ptrace ignore keys. It catches
//! accidents: a wild pointer, a buffer overrun into the pool, a use after free of
//! an address the pool took over. Code the engine calls that the program may have
//! replaced (its `malloc`) runs with the key open.
//!
//! Switched on per process by the front end that hosts foreign code ([`enable`]);
//! the engine's own threads open the key for their whole life ([`open_thread`]).

use std::sync::atomic::{AtomicI32, Ordering};

/// The process's engine key, or one of the `NO_*` values below.
static KEY: AtomicI32 = AtomicI32::new(NOT_ASKED);
const NOT_ASKED: i32 = -1;
const UNSUPPORTED: i32 = -2;
const NO_FREE_KEY: i32 = -3;

/// Whether the engine's memory is under a protection key in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// Engine mappings carry this key; threads reach them only inside the engine.
    On(i32),
    /// Not asked for in this process (a mount's daemon, the command-line tool).
    Off,
    /// The CPU or kernel has no protection keys.
    Unsupported,
    /// Every key was taken (some language runtimes use them): no protection.
    NoFreeKey,
}

impl Protection {
    pub fn describe(self) -> String {
        match self {
            Protection::On(k) => format!("on (protection key {k})"),
            Protection::Off => "off".into(),
            Protection::Unsupported => {
                "unavailable (no protection keys on this CPU or kernel)".into()
            }
            Protection::NoFreeKey => "unavailable (every protection key is taken)".into(),
        }
    }
}

/// This process's protection.
pub fn status() -> Protection {
    match KEY.load(Ordering::Acquire) {
        k if k >= 0 => Protection::On(k),
        UNSUPPORTED => Protection::Unsupported,
        NO_FREE_KEY => Protection::NoFreeKey,
        _ => Protection::Off,
    }
}

/// Whether this CPU and kernel offer protection keys (a key is allocated and freed
/// to find out; nothing is protected).
pub fn supported() -> bool {
    if let Protection::On(_) = status() {
        return true;
    }
    // SAFETY: pkey_alloc and pkey_free change no memory; the key is freed at once.
    unsafe {
        let k = libc::syscall(libc::SYS_pkey_alloc, 0, 0);
        if k < 0 {
            return false;
        }
        libc::syscall(libc::SYS_pkey_free, k);
    }
    cfg!(target_arch = "x86_64")
}

/// Put the engine's memory under a protection key for the rest of the process's
/// life: every mapping registered now and later. The calling thread keeps access
/// until the [`Open`] it is inside (if any) ends; other threads have none outside
/// the engine. Call before the first pool is opened and before the process starts
/// threads that may enter the engine (the preload calls it while the library loads).
/// Idempotent.
pub fn enable() -> Protection {
    if KEY.load(Ordering::Acquire) != NOT_ASKED {
        return status();
    }
    if !cfg!(target_arch = "x86_64") {
        KEY.store(UNSUPPORTED, Ordering::Release);
        return status();
    }
    let k = pkru::alloc_key();
    if k < 0 {
        let why = if k == -(libc::ENOSPC as isize) {
            NO_FREE_KEY
        } else {
            UNSUPPORTED
        };
        KEY.store(why, Ordering::Release);
        return status();
    }
    let k = k as i32;
    if KEY
        .compare_exchange(NOT_ASKED, k, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // Another thread won: give ours back.
        // SAFETY: frees the key just allocated, which nothing uses.
        unsafe { libc::syscall(libc::SYS_pkey_free, k) };
        return status();
    }
    for m in super::mappings::all() {
        apply(m.start as *mut u8, m.len);
    }
    status()
}

/// Whether `k` is the engine's key (a program must not free or reuse it).
pub fn is_engine_key(k: i32) -> bool {
    k >= 0 && KEY.load(Ordering::Acquire) == k
}

/// Put `[base, base + len)`, a read-write engine mapping, under the key (nothing when
/// protection is off). A mapping that cannot take it (sealed already) stays as it was.
pub(super) fn apply(base: *mut u8, len: usize) {
    let k = KEY.load(Ordering::Acquire);
    if k < 0 || len == 0 {
        return;
    }
    pkru::put_under_key(base, len, k);
}

/// Inside the engine: the key is open in this thread until the guard is dropped.
/// A front end takes one per call into the engine, outermost only (a guard taken
/// before [`enable`] shuts the key when it ends, which would shut out an outer guard
/// of the same thread that had it open).
#[must_use]
pub struct Open {
    restore: Restore,
}

enum Restore {
    /// The key was open already (a nested call, an engine thread).
    Nothing,
    /// Write back the thread's rights from before.
    To(u32),
    /// No key yet at entry: shut it if one appeared meanwhile (the call enabled it).
    ShutIfKeyed,
}

impl Open {
    #[inline]
    pub fn enter() -> Open {
        let k = KEY.load(Ordering::Relaxed);
        if k < 0 {
            return Open {
                restore: if k == NOT_ASKED {
                    Restore::ShutIfKeyed
                } else {
                    Restore::Nothing
                },
            };
        }
        let rights = pkru::read();
        let bits = key_bits(k);
        if rights & bits == 0 {
            return Open {
                restore: Restore::Nothing,
            };
        }
        pkru::write(rights & !bits);
        Open {
            restore: Restore::To(rights),
        }
    }
}

impl Drop for Open {
    #[inline]
    fn drop(&mut self) {
        match self.restore {
            Restore::Nothing => {}
            Restore::To(rights) => pkru::write(rights),
            Restore::ShutIfKeyed => {
                let k = KEY.load(Ordering::Acquire);
                if k >= 0 {
                    pkru::write(pkru::read() | key_bits(k));
                }
            }
        }
    }
}

/// Open the key in the calling thread for good: for the engine's own threads
/// (evolution, periodic commits), which run no program code.
pub fn open_thread() {
    let k = KEY.load(Ordering::Acquire);
    if k >= 0 {
        pkru::write(pkru::read() & !key_bits(k));
    }
}

/// Whether the calling thread may touch engine memory now (tests, assertions).
pub fn open_here() -> bool {
    let k = KEY.load(Ordering::Acquire);
    k < 0 || pkru::read() & key_bits(k) == 0
}

/// Key `k`'s two bits in PKRU: access-disable and write-disable.
fn key_bits(k: i32) -> u32 {
    0b11 << (2 * k as u32)
}

#[cfg(target_arch = "x86_64")]
mod pkru {
    /// The calling thread's PKRU.
    #[inline]
    pub fn read() -> u32 {
        let rights: u32;
        // SAFETY: RDPKRU reads a register (ECX must be 0); it is only reached once
        // a key was allocated, which proves the CPU and kernel enabled the feature.
        unsafe {
            std::arch::asm!(
                "rdpkru",
                in("ecx") 0,
                lateout("eax") rights,
                lateout("edx") _,
                options(nomem, nostack, preserves_flags)
            )
        };
        rights
    }

    /// Set the calling thread's PKRU. Not `nomem`: memory accesses must not move
    /// across it (it is a compiler barrier; the CPU orders it itself).
    #[inline]
    pub fn write(rights: u32) {
        // SAFETY: WRPKRU changes only this thread's rights to memory under keys
        // (ECX and EDX must be 0); reached only once a key was allocated, as above.
        unsafe {
            std::arch::asm!(
                "wrpkru",
                in("eax") rights,
                in("ecx") 0,
                in("edx") 0,
                options(nostack, preserves_flags)
            )
        };
    }

    /// `pkey_alloc(0, 0)` (a key, this thread's rights to it full) by the `syscall`
    /// instruction itself, as [`put_under_key`]: the C library's `syscall` may be the
    /// preload's, whose first call looks the C library's up (`dlsym`), a cost at the
    /// start of every preloaded process. The key, or minus the error number.
    pub fn alloc_key() -> isize {
        let ret: isize;
        // SAFETY: the system call allocates a key and sets this thread's rights to
        // it; it touches no memory. The kernel clobbers RCX and R11.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") libc::SYS_pkey_alloc as isize => ret,
                in("rdi") 0,
                in("rsi") 0,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack)
            )
        };
        ret
    }

    /// `pkey_mprotect(base, len, PROT_READ | PROT_WRITE, key)` by the `syscall`
    /// instruction itself: the C library's `pkey_mprotect` and `syscall` may be the
    /// preload's, which refuse the engine's key and ranges to the program.
    pub fn put_under_key(base: *mut u8, len: usize, key: i32) {
        let _ret: isize;
        // SAFETY: the system call changes only the key of `[base, base + len)`, an
        // engine mapping, keeping its protection (every engine mapping is
        // read-write); it touches no memory of ours. The kernel clobbers RCX and R11.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") libc::SYS_pkey_mprotect as isize => _ret,
                in("rdi") base,
                in("rsi") len,
                in("rdx") libc::PROT_READ | libc::PROT_WRITE,
                in("r10") key as isize,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack)
            )
        };
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod pkru {
    // No key is ever allocated on other architectures: never called.
    pub fn read() -> u32 {
        0
    }
    pub fn write(_: u32) {}
    pub fn alloc_key() -> isize {
        -(libc::ENOSYS as isize)
    }
    pub fn put_under_key(_: *mut u8, _: usize, _: i32) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_bits_cover_access_and_write_disable() {
        assert_eq!(key_bits(0), 0b11);
        assert_eq!(key_bits(1), 0b1100);
        assert_eq!(key_bits(15), 0b11 << 30);
    }
}
