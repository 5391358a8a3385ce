//! What the CPU offers (SSE4.2 for CRCs, AVX for streaming copies, the cache-line
//! flush instructions), learned once per process without CPUID instructions where
//! glibc has them already. Under a hypervisor each CPUID exits to it (11 µs apiece on
//! the project's VM), and `is_x86_feature_detected`'s first call runs about nine: a
//! process started under the preload paid them at attach. glibc's loader read the
//! leaves at start and hands them out (`__x86_get_cpuid_feature_leaf`, glibc 2.33
//! on, `sys/platform/x86.h`); without it, the few CPUIDs needed. And how many CPUs
//! the process may use.

use std::sync::OnceLock;

/// The features LynxFS chooses code by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// The CRC32 instruction (CPUID leaf 1, ECX bit 20).
    pub sse42: bool,
    /// 256-bit vector stores, with the system's consent (leaf 1, ECX bit 28, usable
    /// only where the kernel saves the registers: glibc's "active" bit).
    pub avx: bool,
    /// `clflushopt` (leaf 7, EBX bit 23).
    pub clflushopt: bool,
    /// `clwb` (leaf 7, EBX bit 24).
    pub clwb: bool,
}

/// This CPU's features, learned on first use.
pub fn features() -> Features {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    *FEATURES.get_or_init(|| from_glibc().unwrap_or_else(from_cpuid))
}

/// The CPUs this process may run on (its affinity and cgroup quota), learned once:
/// `available_parallelism` reads cgroup files on every call.
pub fn count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(target_arch = "x86_64")]
fn from_glibc() -> Option<Features> {
    /// glibc's `struct cpuid_feature`: the leaf's EAX, EBX, ECX, EDX as the CPU
    /// reported them, then the bits the system lets programs use.
    #[repr(C)]
    struct CpuidFeature {
        cpuid: [u32; 4],
        active: [u32; 4],
    }
    type Leaf = unsafe extern "C" fn(u32) -> *const CpuidFeature;
    // glibc's `enum cpuid_index`.
    const INDEX_1: u32 = 0;
    const INDEX_7: u32 = 1;
    // SAFETY: dlsym with a NUL-terminated name; a null answer is handled.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__x86_get_cpuid_feature_leaf".as_ptr()) };
    if f.is_null() {
        return None;
    }
    // SAFETY: glibc's function of that name has this signature (sys/platform/x86.h).
    let leaf: Leaf = unsafe { std::mem::transmute::<*mut libc::c_void, Leaf>(f) };
    // SAFETY: glibc answers every index, a table of zeros for one it does not know;
    // a non-null answer points into a table that lives as long as the process.
    let read = |index| unsafe { leaf(index).as_ref() };
    let (l1, l7) = (read(INDEX_1)?, read(INDEX_7)?);
    Some(Features {
        sse42: l1.cpuid[2] & (1 << 20) != 0,
        avx: l1.active[2] & (1 << 28) != 0,
        clflushopt: l7.cpuid[1] & (1 << 23) != 0,
        clwb: l7.cpuid[1] & (1 << 24) != 0,
    })
}

#[cfg(target_arch = "x86_64")]
fn from_cpuid() -> Features {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // Leaf 0 reports the highest leaf.
    let max_leaf = __cpuid(0).eax;
    let ecx1 = __cpuid(1).ecx;
    let ebx7 = if max_leaf >= 7 {
        __cpuid_count(7, 0).ebx
    } else {
        0
    };
    Features {
        sse42: ecx1 & (1 << 20) != 0,
        // The system's consent (XSAVE of the registers) is the standard library's
        // to check.
        avx: std::arch::is_x86_feature_detected!("avx"),
        clflushopt: ebx7 & (1 << 23) != 0,
        clwb: ebx7 & (1 << 24) != 0,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn from_glibc() -> Option<Features> {
    None
}

#[cfg(not(target_arch = "x86_64"))]
fn from_cpuid() -> Features {
    Features::default()
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn glibc_and_cpuid_agree_with_the_standard_library() {
        // glibc 2.33 and later (the project's) answers without a CPUID.
        let glibc = from_glibc().expect("glibc hands out its CPUID table");
        assert_eq!(glibc, from_cpuid());
        assert_eq!(glibc.sse42, std::arch::is_x86_feature_detected!("sse4.2"));
        assert_eq!(glibc.avx, std::arch::is_x86_feature_detected!("avx"));
        assert_eq!(features(), glibc);
    }
}
