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
    /// The user's choice, else pmem on DAX or tmpfs, else msync.
    pub fn pick(choice: Option<BackendKind>, pool: &Path) -> BackendKind {
        choice.unwrap_or_else(|| {
            let dax = std::fs::File::open(pool)
                .map(|f| lynxfs::pmem::dax_supported(&f))
                .unwrap_or(false);
            if dax || lynxfs::pmem::on_tmpfs(pool) {
                BackendKind::Pmem
            } else {
                BackendKind::Msync
            }
        })
    }
}
