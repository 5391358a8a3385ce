//! The FUSE adapter over the engine (issue 6).
