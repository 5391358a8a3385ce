//! "Cold" runs: what a target caches is dropped before the clock starts. For kernel
//! file systems, the kernel's page, dentry and inode caches (tmpfs cannot drop its
//! tree: its cold is nearly warm); for the library, LynxFS's DRAM index as well. A FUSE
//! mount's daemon keeps its index (only a remount would drop it).

use crate::Target;

/// Drops the kernel's page, dentry and inode caches (needs root); the error says why
/// not.
pub(crate) fn drop_kernel_caches() -> Result<(), String> {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").map_err(|e| {
        format!("cannot drop the kernel's caches ({e}): cold = warm on kernel targets")
    })
}

/// Makes every target cold at once, before a cold step times them one after the
/// other: the kernel's caches (dropped once: dropping them is global, so doing it per
/// target would also chill the targets already measured, whose next, warm, step would
/// then be cold again) and, on the library, the index. The error says what could not
/// be dropped.
pub(crate) fn chill_all(targets: &[Box<dyn Target>]) -> Result<(), String> {
    for t in targets {
        if let Some(lib) = t.as_lib() {
            lib.fs().ns().drop_index();
        }
    }
    drop_kernel_caches()
}
