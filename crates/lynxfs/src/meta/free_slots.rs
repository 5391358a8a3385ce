//! Freed directory slots waiting for reuse: a shared pool of nodes in the runtime
//! region and each directory's stack of them (its head in the directory's cachelet).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::format::Layout;
use crate::runtime::Span;

use super::cachelet::Cachelet;

/// The shared pool of freed-slot nodes and each directory's stack of them. A node is
/// two words: the slot's address and the next node (index + 1, 0 ends the stack). Stack
/// heads carry a tag bumped by every change, so a node popped and pushed again between
/// another popper's read and its compare-and-swap cannot fool it (ABA).
pub struct FreeSlots {
    span: Span,
    nodes: u64,
    /// `span`'s words, mapped (and never moved) for as long as `span`, hence `self`,
    /// lives: a push or pop looks at three nodes, and two views of the whole span per
    /// node (each with its checks) cost more than the stack operations.
    base: NonNull<AtomicU64>,
    len: usize,
}

// SAFETY: `base` points into `span`'s shared memory, only ever accessed through
// atomic types (as `Span` itself is Send and Sync for).
unsafe impl Send for FreeSlots {}
// SAFETY: as for Send.
unsafe impl Sync for FreeSlots {}

/// Words before the nodes: the free-node stack head and the never-used node counter.
const FREE_HEAD: usize = 0;
const BUMP: usize = 8;
const NODES_AT: usize = 16;

fn pack(tag: u64, node: u64) -> u64 {
    tag << 32 | node
}

impl FreeSlots {
    /// Region bytes: one node per dentry the pool can hold.
    pub fn bytes_needed(l: &Layout) -> usize {
        (NODES_AT + 2 * l.total_dentries() as usize) * 8
    }

    pub fn new(span: Span, l: &Layout) -> FreeSlots {
        assert!(span.bytes() >= Self::bytes_needed(l));
        let words = span.words();
        let (base, len) = (NonNull::from(words).cast(), words.len());
        FreeSlots {
            span,
            nodes: l.total_dentries(),
            base,
            len,
        }
    }

    /// Forget every stack (a repair rebuilds them as directories load again).
    pub fn clear(&self) {
        self.span.zero();
    }

    fn w(&self) -> &[AtomicU64] {
        // SAFETY: `base` and `len` are `span.words()` as `new` found them: memory
        // mapped and 8-aligned for as long as `&self` lives, only accessed atomically.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast_const(), self.len) }
    }

    fn node(&self, n: u64) -> (&AtomicU64, &AtomicU64) {
        let at = NODES_AT + 2 * (n as usize - 1);
        let w = self.w();
        (&w[at], &w[at + 1])
    }

    /// Push node `n` on the stack whose head is `head`.
    fn push_node(&self, head: &AtomicU64, n: u64) {
        let mut h = head.load(Ordering::Acquire);
        loop {
            self.node(n).1.store(h & 0xffff_ffff, Ordering::Relaxed);
            match head.compare_exchange(
                h,
                pack((h >> 32) + 1, n),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(now) => h = now,
            }
        }
    }

    /// Pop a node off the stack whose head is `head`.
    fn pop_node(&self, head: &AtomicU64) -> Option<u64> {
        let mut h = head.load(Ordering::Acquire);
        loop {
            let n = h & 0xffff_ffff;
            if n == 0 || n > self.nodes {
                return None;
            }
            let next = self.node(n).1.load(Ordering::Relaxed) & 0xffff_ffff;
            match head.compare_exchange(
                h,
                pack((h >> 32) + 1, next),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(n),
                Err(now) => h = now,
            }
        }
    }

    fn new_node(&self) -> Option<u64> {
        if let Some(n) = self.pop_node(&self.w()[FREE_HEAD]) {
            return Some(n);
        }
        let n = self.w()[BUMP].fetch_add(1, Ordering::AcqRel) + 1;
        (n <= self.nodes).then_some(n)
    }

    /// Keep `slot` of directory `c` for reuse (dropped if no node is left).
    pub fn push(&self, c: Cachelet<'_>, slot: u64) {
        if let Some(n) = self.new_node() {
            self.node(n).0.store(slot, Ordering::Relaxed);
            self.push_node(c.free_head(), n);
        }
    }

    /// A freed slot of directory `c`, if any.
    pub fn pop(&self, c: Cachelet<'_>) -> Option<u64> {
        let n = self.pop_node(c.free_head())?;
        let slot = self.node(n).0.load(Ordering::Relaxed);
        self.push_node(&self.w()[FREE_HEAD], n);
        Some(slot)
    }
}
