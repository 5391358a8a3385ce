//! Progress of the pool's long operations (recovery, fsck), told to whoever asked for
//! them. The engine only counts; drawing (the CLI's progress bars) is the caller's.

/// Receives progress reports; calls may come from several threads at once.
pub trait Progress: Sync {
    /// A new phase begins, of `total` units when that is known beforehand.
    fn phase(&self, what: &'static str, total: Option<u64>);
    /// `n` more units of the current phase are done.
    fn advance(&self, n: u64);
}

/// The receiver that ignores everything (library callers, tests).
pub struct Quiet;

impl Progress for Quiet {
    fn phase(&self, _: &'static str, _: Option<u64>) {}
    fn advance(&self, _: u64) {}
}
