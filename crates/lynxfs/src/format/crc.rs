//! CRC32C (Castagnoli) of the few short buffers a create, link or rename checks (a
//! dentry's body, an inode, a journal record): the same values as the `crc32c`
//! crate, computed with one SSE4.2 instruction per 8 bytes. The crate's general
//! routine prepares for long buffers (alignment, three interleaved streams) and cost
//! about twice as many instructions on these.

/// The CRC32C of `data`, as `crc32c::crc32c(data)`: for the headers read at every
/// attach (the crate's first call asks the standard library for the CPU's features,
/// about nine CPUIDs, each a trap to the hypervisor on a VM: ~100 us per process).
#[inline]
pub fn of(data: &[u8]) -> u32 {
    append(0, data)
}

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

    /// Whether the CPU has SSE4.2 ([`crate::cpu`]: without a CPUID per process).
    #[inline]
    pub(super) fn detected() -> bool {
        crate::cpu::features().sse42
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
    fn of_is_the_crates_crc_of_a_whole_buffer() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in [0, 1, 7, 8, 9, 252, 300] {
            assert_eq!(of(&data[..len]), crc32c::crc32c(&data[..len]), "{len}");
        }
    }

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
        assert_eq!(
            sse42::detected(),
            std::arch::is_x86_feature_detected!("sse4.2")
        );
    }
}
