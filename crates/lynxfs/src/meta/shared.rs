//! The namespace's part of the shared runtime region: where each piece lives, and the
//! namespace-wide locks.

use std::io;
use std::sync::Arc;

use crate::format::Layout;
use crate::runtime::lock::{self, Interrupted, MutexGuard, Watch};
use crate::runtime::{Carve, Region, Span};

use super::cachelet::Cachelets;
use super::free_slots::FreeSlots;
use super::gate::Gates;
use super::index::Index;

/// Stripes of the lock that serializes creates per directory when lock-free creation
/// is switched off (ablation).
const SERIAL_STRIPES: usize = 64;
const RENAME: usize = 0;
const SERIAL: usize = 1;
const LOCK_WORDS: usize = SERIAL + SERIAL_STRIPES;

/// The spans the namespace keeps its runtime state in.
pub struct Parts {
    pub index: Span,
    pub cachelets: Span,
    pub free_slots: Span,
    pub locks: Span,
    pub gates: Span,
    pub area_epoch: Span,
}

impl Parts {
    /// Lay out the namespace's parts after what `carve` has handed out already.
    pub fn carve(carve: &mut Carve, l: &Layout) -> Vec<std::ops::Range<usize>> {
        vec![
            carve.take(Index::bytes_needed(l)),
            carve.take(Cachelets::bytes_needed(l)),
            carve.take(FreeSlots::bytes_needed(l)),
            carve.take(LOCK_WORDS * 4),
            carve.take(Gates::bytes_needed(l)),
            carve.take(super::area_epoch::BYTES),
        ]
    }

    /// The parts at `ranges` (from [`Parts::carve`]) of `region`.
    pub fn at(region: &Arc<Region>, ranges: &[std::ops::Range<usize>]) -> Parts {
        let span = |i: usize| Span::new(region.clone(), ranges[i].clone());
        Parts {
            index: span(0),
            cachelets: span(1),
            free_slots: span(2),
            locks: span(3),
            gates: span(4),
            area_epoch: span(5),
        }
    }

    /// The parts in fresh memory of this process's own (a pool nobody else attaches).
    pub fn private(l: &Layout) -> io::Result<Parts> {
        let mut carve = Carve::default();
        let ranges = Self::carve(&mut carve, l);
        let region = Arc::new(Region::anonymous(carve.total())?);
        Ok(Self::at(&region, &ranges))
    }
}

/// Namespace-wide locks.
pub struct Locks {
    span: Span,
}

impl Locks {
    pub fn new(span: Span) -> Locks {
        assert!(span.bytes() >= LOCK_WORDS * 4);
        Locks { span }
    }

    /// Release every lock (a repair, once no operation is in flight).
    pub fn clear(&self) {
        self.span.zero();
    }

    /// Renames that could move a directory serialize here (as Linux's
    /// `s_vfs_rename_mutex` does), so the ancestor check sees a stable tree.
    pub fn rename(&self, w: &dyn Watch) -> Result<MutexGuard<'_>, Interrupted> {
        lock::lock(&self.span.u32s()[RENAME], w)
    }

    /// The directory lock used only when lock-free creation is switched off.
    pub fn serial(&self, dir: u64, w: &dyn Watch) -> Result<MutexGuard<'_>, Interrupted> {
        lock::lock(&self.span.u32s()[SERIAL + dir as usize % SERIAL_STRIPES], w)
    }
}
