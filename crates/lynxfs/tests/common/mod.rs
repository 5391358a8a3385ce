//! Helpers shared by the integration tests.
#![allow(dead_code)]

use lynxfs::pmem::PmemBackend;
use lynxfs::{Fs, MkfsOptions};

pub fn fs(size: u64) -> Fs<PmemBackend> {
    let mut o = MkfsOptions::new(size);
    o.lanes = 2;
    Fs::in_memory(&o, PmemBackend::default()).expect("in-memory pool")
}

pub fn errno<T: std::fmt::Debug>(r: lynxfs::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.errno(),
    }
}
pub mod history_front;
