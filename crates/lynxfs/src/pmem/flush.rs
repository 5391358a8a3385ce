//! The CPU's cache-line write-back instructions, picked once from CPUID.
//!
//! `clwb` keeps the line in cache (cheapest for data read again soon), `clflushopt`
//! evicts it but is weakly ordered, `clflush` is the strongly ordered fallback every
//! x86-64 CPU has. All three are made durable by the `sfence` in [`sfence`].

use std::sync::OnceLock;

pub const CACHE_LINE: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushInstr {
    Clwb,
    Clflushopt,
    Clflush,
}

impl FlushInstr {
    pub fn name(self) -> &'static str {
        match self {
            FlushInstr::Clwb => "clwb",
            FlushInstr::Clflushopt => "clflushopt",
            FlushInstr::Clflush => "clflush",
        }
    }
}

/// The best flush instruction this CPU offers, detected on first use.
pub fn detected() -> FlushInstr {
    static PICK: OnceLock<FlushInstr> = OnceLock::new();
    *PICK.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> FlushInstr {
    // Leaf 0 reports the highest leaf; leaf 7 holds the flush feature bits.
    let max_leaf = std::arch::x86_64::__cpuid(0).eax;
    if max_leaf < 7 {
        return FlushInstr::Clflush;
    }
    let ebx = std::arch::x86_64::__cpuid_count(7, 0).ebx;
    if ebx & (1 << 24) != 0 {
        FlushInstr::Clwb
    } else if ebx & (1 << 23) != 0 {
        FlushInstr::Clflushopt
    } else {
        FlushInstr::Clflush
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> FlushInstr {
    FlushInstr::Clflush
}

/// Write back every cache line overlapping `[addr, addr + len)`.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn flush_range(instr: FlushInstr, addr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = addr as usize & !(CACHE_LINE - 1);
    let end = addr as usize + len;
    let mut line = start;
    while line < end {
        let p = line as *const u8;
        // SAFETY: `p` lies in a cache line that overlaps the caller's mapped range, so
        // it is a mapped address; the flush instructions only write back the line and
        // neither read nor change its contents as seen by the program. `clwb` and
        // `clflushopt` are only emitted when CPUID reported them.
        unsafe {
            match instr {
                FlushInstr::Clwb => {
                    std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
                }
                FlushInstr::Clflushopt => std::arch::asm!(
                    "clflushopt [{0}]",
                    in(reg) p,
                    options(nostack, preserves_flags)
                ),
                FlushInstr::Clflush => std::arch::x86_64::_mm_clflush(p),
            }
        }
        line += CACHE_LINE;
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub fn flush_range(_: FlushInstr, _: *const u8, _: usize) {}

/// Order all earlier flushes before any later store.
#[inline]
pub fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and no requirement beyond SSE, which x86-64 has.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}
