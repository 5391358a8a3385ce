//! The runtime state: what is not in the pool but shared by every process attached to
//! it (the metadata index, per-inode records, allocator free lists, locks), kept in
//! shared memory beside the pool (docs/FORMAT.md, "Runtime state").

pub mod attach;
pub mod attachment;
pub mod descriptions;
pub mod fork_gate;
pub mod lock;
pub mod notices;
pub mod procs;
pub mod region;
pub mod stand_ins;
pub mod testing;
pub mod word;

pub use attach::{Attached, RuntimeFile, Shape, RUNTIME_VERSION};
pub use attachment::Attachment;
pub use descriptions::{DescKey, Descriptions};
pub use lock::{Interrupted, Watch};
pub use procs::{bytes_needed, open_entries_for, Health, Procs, HEADER_BYTES};
pub use region::{Carve, Region, Span};

/// Moves a descriptor the engine keeps open (the pool file, the runtime file) above
/// the numbers programs use by habit: in a program's own process (the preload library,
/// the C API) the engine must not sit on fd 3, which a shell's `exec 3>file` replaces.
/// It goes near the top of the first 1024 (programs' own high numbers, like a shell's
/// 10 and 255, stay free; the kernel's fd table stays small), close-on-exec; when that
/// fails it stays where it is.
pub fn out_of_the_way(file: std::fs::File) -> std::fs::File {
    use std::os::fd::{AsRawFd, FromRawFd};
    let Some(range) = out_of_the_way_range() else {
        return file;
    };
    let floor = range.start;
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor `file` owns gives a new one or -1.
    let high = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor) };
    if high < 0 {
        return file;
    }
    // SAFETY: `high` was just made and is owned by nothing else; `file` (the low
    // number) is closed when dropped here.
    unsafe { std::fs::File::from_raw_fd(high) }
}

/// A duplicate of `file`'s descriptor at the numbers [`out_of_the_way`] moves
/// descriptors to (one `fcntl`, not a `dup` then a move).
pub fn dup_out_of_the_way(file: &std::fs::File) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let Some(range) = out_of_the_way_range() else {
        return file.try_clone();
    };
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor `file` owns gives a new one or -1.
    let high = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, range.start) };
    if high < 0 {
        return file.try_clone();
    }
    // SAFETY: `high` was just made and is owned by nothing else.
    Ok(unsafe { std::fs::File::from_raw_fd(high) })
}

/// The numbers [`out_of_the_way`] moves descriptors to (the lowest free one in the
/// range), or None when the fd limit is too low for it to move any.
pub fn out_of_the_way_range() -> Option<std::ops::Range<i32>> {
    // Asked once per process: an attach moves four descriptors, each asked here.
    static RANGE: std::sync::OnceLock<Option<std::ops::Range<i32>>> = std::sync::OnceLock::new();
    RANGE.get_or_init(fd_limit_range).clone()
}

fn fd_limit_range() -> Option<std::ops::Range<i32>> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 || lim.rlim_cur < 256 {
        return None;
    }
    let top = lim.rlim_cur.min(1024) as i32;
    Some(top - 96..top)
}

/// What the engine asks of the runtime state it works in: operations are counted (a
/// repair waits until none is in flight), waits end when a repair starts, and an
/// operation interrupted that way waits for the repair (or does it) before its retry.
pub trait Runtime: Watch + Send + Sync {
    /// Count an operation in flight; `Err` (nothing counted) while a repair runs.
    fn enter(&self) -> Result<(), Interrupted>;
    /// The operation counted by [`Runtime::enter`] is over.
    fn leave(&self);
    /// Called outside any operation after one was interrupted or refused: true if the
    /// caller is now the repairer, every live process's operations drained (it
    /// rebuilds the state, then calls [`Runtime::repaired`]); false once a repair by
    /// another is over (or none is needed).
    fn settle(&self) -> bool;
    /// The repairer has rebuilt the state: operations may go on.
    fn repaired(&self);
    /// Bumped by every repair (a process's private copies of shared state compare it).
    fn generation(&self) -> u64;
    /// Every live process's open counts, summed (what a repair must keep open).
    fn live_opens(&self) -> Vec<(u64, u64)>;
    /// This process opened (or holds) `ino` once more: recorded where a repair finds
    /// it, so the file outlives its last name while any live process has it open.
    fn opened(&self, ino: u64) -> crate::Result<()>;
    /// This process closed `ino` once.
    fn closed(&self, ino: u64);
}

/// Runtime state no other process uses (a pool in memory, tests): nothing can die
/// under it, so nothing is counted and no wait is ever interrupted.
pub struct Private;

impl Watch for Private {
    fn check(&self) -> Result<(), Interrupted> {
        Ok(())
    }
}

impl Runtime for Private {
    fn enter(&self) -> Result<(), Interrupted> {
        Ok(())
    }
    fn leave(&self) {}
    fn settle(&self) -> bool {
        false
    }
    fn repaired(&self) {}
    fn generation(&self) -> u64 {
        0
    }
    fn live_opens(&self) -> Vec<(u64, u64)> {
        Vec::new()
    }
    fn opened(&self, _: u64) -> crate::Result<()> {
        Ok(())
    }
    fn closed(&self, _: u64) {}
}
