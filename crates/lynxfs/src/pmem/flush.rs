//! The CPU's cache-line write-back instructions, picked once from CPUID.
//!
//! `clwb` keeps the line in cache (cheapest for data read again soon), `clflushopt`
//! evicts it but is weakly ordered, `clflush` is the strongly ordered fallback every
//! x86-64 CPU has. All three are made durable by the `sfence` in [`sfence`].

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

/// The best flush instruction this CPU offers (`crate::cpu` learns it once).
pub fn detected() -> FlushInstr {
    detect()
}

#[cfg(target_arch = "x86_64")]
fn detect() -> FlushInstr {
    let f = crate::cpu::features();
    if f.clwb {
        FlushInstr::Clwb
    } else if f.clflushopt {
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

/// Copies into the pool of at least this many bytes write their whole cache lines with
/// non-temporal stores (see [`stream_lines`]); shorter ones are cached stores and
/// flushes, which keep small, soon re-read metadata in cache. On this project's VM
/// (AMD EPYC, pool in /dev/shm) streaming with one `sfence` beat `memcpy` + `clwb` +
/// `sfence` from 64 bytes up (1.7x at 256 B, 2x at 4 KiB, 3-4x at 64 KiB:
/// `scripts/ntcopy.c`, docs/DESIGN-NOTES.md); 256 keeps single-line metadata cached.
pub const STREAM_MIN: usize = 256;

/// Split a copy of `len` bytes to `addr` into a head up to the first cache-line
/// boundary, whole lines, and a tail: `(head, lines)` in bytes.
#[inline]
pub fn line_split(addr: *const u8, len: usize) -> (usize, usize) {
    let head = (CACHE_LINE - addr as usize % CACHE_LINE) % CACHE_LINE;
    let head = head.min(len);
    (head, (len - head) / CACHE_LINE * CACHE_LINE)
}

/// Copy `src` (whole cache lines) to the line-aligned `dst` with non-temporal stores,
/// which bypass the cache: the data is on its way to memory without a read for
/// ownership or a flush, and the next [`sfence`] makes it durable.
///
/// # Safety
/// `dst` is 64-aligned and valid for `src.len()` bytes of writes, `src.len()` is a
/// multiple of 64, and no Rust reference covers `dst`'s range.
#[cfg(target_arch = "x86_64")]
#[inline]
pub unsafe fn stream_lines(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    debug_assert!(
        (dst as usize).is_multiple_of(CACHE_LINE) && src.len().is_multiple_of(CACHE_LINE)
    );
    if avx_detected() {
        // SAFETY: CPUID reported AVX; the caller's contract is this function's.
        return unsafe { stream_lines_avx(dst, src) };
    }
    let mut i = 0;
    while i < src.len() {
        // SAFETY: `i + 16 <= src.len()` (lengths are whole lines), so the unaligned load
        // reads inside `src`; `dst + i` is 16-aligned (dst is line-aligned) and inside
        // the caller's writable range. SSE2 is part of x86-64.
        unsafe {
            let v = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm_stream_si128(dst.add(i) as *mut __m128i, v);
        }
        i += 16;
    }
}

/// [`stream_lines`] with 32-byte AVX stores (half the instructions of SSE2).
///
/// # Safety
/// As [`stream_lines`], on a CPU with AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn stream_lines_avx(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};
    let mut i = 0;
    while i < src.len() {
        // SAFETY: as in `stream_lines`, with 32-byte steps: `dst + i` is 32-aligned and
        // `i + 32 <= src.len()`.
        unsafe {
            let v = _mm256_loadu_si256(src.as_ptr().add(i) as *const __m256i);
            _mm256_stream_si256(dst.add(i) as *mut __m256i, v);
        }
        i += 32;
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn avx_detected() -> bool {
    crate::cpu::features().avx
}

/// The portable fallback: plain stores (the caller's flush-free contract then relies on
/// no cache to flush, as on the architectures without `clwb`, where flushing is a no-op).
///
/// # Safety
/// As on x86-64.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub unsafe fn stream_lines(dst: *mut u8, src: &[u8]) {
    // SAFETY: the caller guarantees `dst` is valid for `src.len()` bytes, not aliased.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
}
