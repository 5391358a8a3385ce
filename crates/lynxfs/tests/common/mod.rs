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

/// Aborts the test binary if the test holding it still runs after its limit (a wait
/// that never ends), so that nothing can hang CI; disarmed when dropped.
pub struct Watchdog(std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

pub fn watchdog(test: &'static str, limit: std::time::Duration) -> Watchdog {
    use std::sync::{Arc, Condvar, Mutex};
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let d = done.clone();
    std::thread::spawn(move || {
        let (lock, cv) = &*d;
        let end = std::time::Instant::now() + limit;
        let mut finished = lock.lock().unwrap_or_else(|e| e.into_inner());
        while !*finished {
            let Some(left) = end.checked_duration_since(std::time::Instant::now()) else {
                eprintln!("watchdog: {test} still running after {limit:?}: aborting");
                std::process::abort();
            };
            finished = cv
                .wait_timeout(finished, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        *self.0 .0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.0 .1.notify_all();
    }
}
