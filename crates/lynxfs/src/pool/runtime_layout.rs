//! Where each part of the runtime state lives in the region, computed from the pool's
//! layout alone, so every attacher agrees. Each part states its own size; they are
//! summed here, in the pool, the lowest layer that knows them all (the pool attaches
//! the region before anything above it runs).

use std::ops::Range;

use crate::alloc::Allocators;
use crate::format::Layout;
use crate::log::Journals;
use crate::meta::shared::Parts;
use crate::runtime::attach::Shape;
use crate::runtime::descriptions::Descriptions;
use crate::runtime::notices::Notices;
use crate::runtime::{procs, Carve};

#[derive(Clone, Debug)]
pub struct RuntimeLayout {
    /// The allocators' bitmaps and counters.
    pub alloc: Range<usize>,
    /// The journals' lane locks and sequence numbers.
    pub journals: Range<usize>,
    /// A hybrid pool's transactions (`log::undo`; unused in other pools).
    pub txn: Range<usize>,
    /// The namespace's parts (see `meta::shared::Parts`).
    pub namespace: Vec<Range<usize>>,
    /// The change notices' ring (kept across repairs: its watchers stay registered).
    pub notices: Range<usize>,
    /// The shared open file descriptions (kept across repairs: they outlive a death
    /// elsewhere; only their lock words are reset).
    pub descriptions: Range<usize>,
    /// Everything a repair rebuilds (all but the header, process and open tables, the
    /// notices and the descriptions).
    pub rebuilt: Range<usize>,
    /// The region's size.
    pub total: usize,
    /// Entries of each process's open table.
    pub open_entries: usize,
}

impl RuntimeLayout {
    pub fn compute(l: &Layout) -> RuntimeLayout {
        let mut c = Carve::default();
        let open_entries = procs::open_entries_for(l.total_inodes());
        c.take(procs::bytes_needed(open_entries));
        let alloc = c.take(Allocators::bytes_needed(l));
        let journals = c.take(Journals::bytes_needed(l.lanes()));
        let txn = c.take(crate::log::undo::Txn::BYTES);
        let namespace = Parts::carve(&mut c, l);
        let notices = c.take(Notices::bytes_needed());
        let descriptions = c.take(Descriptions::bytes_needed());
        let total = c.total();
        RuntimeLayout {
            rebuilt: alloc.start..notices.start,
            notices,
            descriptions,
            alloc,
            journals,
            txn,
            namespace,
            total,
            open_entries,
        }
    }

    /// What attaching needs to know of the layout.
    pub fn shape(&self) -> Shape {
        Shape {
            bytes: self.total,
            open_entries: self.open_entries,
        }
    }
}
