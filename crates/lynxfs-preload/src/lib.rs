//! Placeholder of branch `run` (see Cargo.toml): the preload library is the lead's.
