//! Choosing the durability backend for a pool file.

use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// Cache-line flushes and sfence: DAX persistent memory, or tmpfs standing in.
    Pmem,
    /// msync of touched pages: a pool on an ordinary disk file system.
    Msync,
}

impl BackendKind {
    /// The user's choice, else pmem where flushes suffice (DAX, or a file on tmpfs),
    /// else msync ([`lynxfs::pmem::flushes_suffice`]).
    pub fn pick(choice: Option<BackendKind>, pool: &Path) -> BackendKind {
        choice.unwrap_or_else(|| {
            if lynxfs::pmem::flushes_suffice(pool) {
                BackendKind::Pmem
            } else {
                BackendKind::Msync
            }
        })
    }
}
