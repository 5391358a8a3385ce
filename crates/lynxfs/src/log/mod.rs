//! Logs, journals and recovery: commit points that span several words, and the walk
//! that turns whatever a crash left into a consistent pool.

pub mod cwon;
pub mod journal;
pub mod recovery;
pub mod undo;

pub use journal::Journals;
pub use recovery::{recover, recover_keeping, RecoveryReport};
