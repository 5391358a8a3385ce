//! CRC32C (Castagnoli) of the few short buffers a create, link or rename checks (a
//! dentry's body, an inode, a journal record): the same values as the `crc32c`
//! crate, computed with one SSE4.2 instruction per 8 bytes. The crate's general
//! routine prepares for long buffers (alignment, three interleaved streams) and cost
//! about twice as many instructions on these.

/// `crc` extended by `data`, as `crc32c::crc32c_append(crc, data)`.
#[inline]
pub fn append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if sse42::detected() {
        // SAFETY: the CPU has SSE4.2, checked just above.
        return unsafe { sse42::append(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

/// `crc` extended by the little-endian bytes of each word of `words`.
#[inline]
pub fn append_words(crc: u32, words: &[u64]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if sse42::detected() {
        // SAFETY: the CPU has SSE4.2, checked just above.
        return unsafe { sse42::append_words(crc, words) };
    }
    let mut c = crc;
    for w in words {
        c = crc32c::crc32c_append(c, &w.to_le_bytes());
    }
    c
}

#[cfg(target_arch = "x86_64")]
mod sse42 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    use std::sync::atomic::{AtomicU8, Ordering};

    /// Whether the CPU has SSE4.2, learned once per process. Not with
    /// `is_x86_feature_detected`, whose first call runs about nine CPUID instructions:
    /// under a hypervisor each one exits to it (11 us apiece on the project's VM), and
    /// a process started under the preload paid them at attach, reading the
    /// superblocks. glibc's loader has read CPUID leaf 1 already and hands it out
    /// (`__x86_get_cpuid_feature_leaf`, glibc 2.33 on); without it, one CPUID.
    #[inline]
    pub(super) fn detected() -> bool {
        const UNKNOWN: u8 = 0;
        const NO: u8 = 1;
        const YES: u8 = 2;
        static HAS: AtomicU8 = AtomicU8::new(UNKNOWN);
        match HAS.load(Ordering::Relaxed) {
            UNKNOWN => {
                let has = leaf1_ecx() & (1 << 20) != 0;
                HAS.store(if has { YES } else { NO }, Ordering::Relaxed);
                has
            }
            v => v == YES,
        }
    }

    /// ECX of CPUID leaf 1 (SSE4.2 is bit 20).
    #[cold]
    fn leaf1_ecx() -> u32 {
        from_glibc().unwrap_or_else(|| std::arch::x86_64::__cpuid(1).ecx)
    }

    /// ECX of CPUID leaf 1 as glibc's loader read it, if this glibc says.
    pub(super) fn from_glibc() -> Option<u32> {
        /// glibc's `struct cpuid_feature`: the leaf's EAX, EBX, ECX, EDX as the CPU
        /// reported them, then the bits the system lets programs use.
        #[repr(C)]
        struct CpuidFeature {
            cpuid: [u32; 4],
            active: [u32; 4],
        }
        type Leaf = unsafe extern "C" fn(u32) -> *const CpuidFeature;
        // SAFETY: dlsym with a NUL-terminated name; a null answer is handled.
        let f =
            unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__x86_get_cpuid_feature_leaf".as_ptr()) };
        if f.is_null() {
            return None;
        }
        // SAFETY: glibc's function of that name has this signature (sys/platform/x86.h).
        let leaf: Leaf = unsafe { std::mem::transmute::<*mut libc::c_void, Leaf>(f) };
        // SAFETY: index 0 (CPUID_INDEX_1) is a leaf every such glibc has.
        let p = unsafe { leaf(0) };
        // SAFETY: a non-null answer points into glibc's table, which lives as long as
        // the process.
        (!p.is_null()).then(|| unsafe { (*p).cpuid[2] })
    }

    #[target_feature(enable = "sse4.2")]
    pub(super) fn append(crc: u32, data: &[u8]) -> u32 {
        let mut c = u64::from(!crc);
        let mut chunks = data.chunks_exact(8);
        for w in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            c = _mm_crc32_u64(c, u64::from_le_bytes(b));
        }
        let mut c = c as u32;
        for &b in chunks.remainder() {
            c = _mm_crc32_u8(c, b);
        }
        !c
    }

    #[target_feature(enable = "sse4.2")]
    pub(super) fn append_words(crc: u32, words: &[u64]) -> u32 {
        let mut c = u64::from(!crc);
        for &w in words {
            c = _mm_crc32_u64(c, w);
        }
        !(c as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_values_as_the_crc32c_crate() {
        let data: Vec<u8> = (0..600u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..9 {
            for len in 0..(data.len() - start) {
                let d = &data[start..start + len];
                for seed in [0, 0xdead_beef] {
                    assert_eq!(
                        append(seed, d),
                        crc32c::crc32c_append(seed, d),
                        "{start} {len}"
                    );
                }
            }
        }
        let words = [1u64, u64::MAX, 0x0123_4567_89ab_cdef, 0];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(append_words(7, &words), crc32c::crc32c_append(7, &bytes));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sse42_is_detected_as_the_standard_library_does() {
        let std_says = std::arch::is_x86_feature_detected!("sse4.2");
        assert_eq!(sse42::detected(), std_says);
        // glibc 2.33 and later (the project's) answers without a CPUID.
        let ecx = sse42::from_glibc().expect("glibc hands out CPUID leaf 1");
        assert_eq!(ecx & (1 << 20) != 0, std_says);
    }
}
