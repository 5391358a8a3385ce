//! The runtime state: what is not in the pool but shared by every process attached to
//! it (the metadata index, per-inode records, allocator free lists, locks), kept in
//! shared memory beside the pool (docs/FORMAT.md, "Runtime state").

pub mod attach;
pub mod lock;
pub mod procs;
pub mod region;

pub use attach::{Attached, RuntimeFile, RUNTIME_VERSION};
pub use lock::{Interrupted, Watch};
pub use procs::{bytes_needed, Health, Procs, HEADER_BYTES};
pub use region::{Carve, Region, Span};
