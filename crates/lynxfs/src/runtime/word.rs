//! The atomic words of the lock-free protocols (the index's publish and remove of a
//! name, the fork gate), behind a trait a model checker can stand in for.
//!
//! Why: the engine's words live in mapped memory (the runtime region) and are
//! `std` atomics there, which a model checker cannot see. The protocols are written
//! once, generic over [`Word`]; the engine instantiates them with `std`'s atomics
//! (each call inlines to the same instruction as before), and their model tests with
//! loom's (docs/CONSISTENCY.md, "Model-checked protocols"), so the code checked is
//! the code that runs.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// An atomic word: the operations the protocols use, with `std`'s signatures.
pub trait Word {
    type Value: Copy + Eq;
    fn load(&self, order: Ordering) -> Self::Value;
    fn store(&self, value: Self::Value, order: Ordering);
    fn compare_exchange(
        &self,
        current: Self::Value,
        new: Self::Value,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Self::Value, Self::Value>;
}

/// An atomic type as a [`Word`]: each method is the atomic's own.
macro_rules! word_impl {
    ($atomic:ty, $value:ty) => {
        impl Word for $atomic {
            type Value = $value;
            #[inline(always)]
            fn load(&self, order: Ordering) -> $value {
                <$atomic>::load(self, order)
            }
            #[inline(always)]
            fn store(&self, value: $value, order: Ordering) {
                <$atomic>::store(self, value, order)
            }
            #[inline(always)]
            fn compare_exchange(
                &self,
                current: $value,
                new: $value,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$value, $value> {
                <$atomic>::compare_exchange(self, current, new, success, failure)
            }
        }
    };
}

word_impl!(AtomicU32, u32);
word_impl!(AtomicU64, u64);

// The model tests' words: loom's atomics, whose every access is a point where loom
// may switch threads and whose values it tracks per thread.
#[cfg(test)]
word_impl!(loom::sync::atomic::AtomicU32, u32);
#[cfg(test)]
word_impl!(loom::sync::atomic::AtomicU64, u64);
