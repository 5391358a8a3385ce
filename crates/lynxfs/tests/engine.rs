//! The engine's integration tests that need no process of their own, in one test
//! binary: each file below is a module, as it was a binary (`cargo test -p lynxfs
//! --profile ci --test engine acl::` runs one file's). One binary builds and links the
//! engine's generic code once instead of once per file. Tests that fork, change the
//! environment, signals or process-wide state (protection keys, the runtime
//! directory) stay binaries of their own (`[[test]]` in Cargo.toml).

mod common;

#[path = "acl.rs"]
mod acl;
#[path = "areas.rs"]
mod areas;
#[path = "backpointers.rs"]
mod backpointers;
#[path = "compaction.rs"]
mod compaction;
#[path = "crowd.rs"]
mod crowd;
#[path = "data.rs"]
mod data;
#[path = "device_blocks.rs"]
mod device_blocks;
#[path = "device_space.rs"]
mod device_space;
#[path = "export.rs"]
mod export;
#[path = "flags.rs"]
mod flags;
#[path = "held.rs"]
mod held;
#[path = "history.rs"]
mod history;
#[path = "killpriv.rs"]
mod killpriv;
#[path = "layers.rs"]
mod layers;
#[path = "limits.rs"]
mod limits;
#[path = "namespace.rs"]
mod namespace;
#[path = "numa.rs"]
mod numa;
#[path = "rename_atomic.rs"]
mod rename_atomic;
#[path = "reserve.rs"]
mod reserve;
#[path = "scope.rs"]
mod scope;
#[path = "store.rs"]
mod store;
#[path = "xattr_scale.rs"]
mod xattr_scale;
