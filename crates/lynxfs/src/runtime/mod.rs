//! The runtime state: what is not in the pool but shared by every process attached to
//! it (the metadata index, per-inode records, allocator free lists, locks), kept in
//! shared memory beside the pool (docs/FORMAT.md, "Runtime state").

pub mod attach;
pub mod attachment;
pub mod descriptions;
pub mod layout;
pub mod lock;
pub mod notices;
pub mod procs;
pub mod region;
pub mod testing;

pub use attach::{Attached, RuntimeFile, RUNTIME_VERSION};
pub use attachment::Attachment;
pub use descriptions::{DescKey, Descriptions};
pub use layout::RuntimeLayout;
pub use lock::{Interrupted, Watch};
pub use procs::{bytes_needed, Health, Procs, HEADER_BYTES};
pub use region::{Carve, Region, Span};

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
