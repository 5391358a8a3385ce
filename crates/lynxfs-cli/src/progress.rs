//! Progress bars on standard error for the engine's long operations (recovery at
//! mount, fsck), drawn by `indicatif`, which hides them when stderr is not a terminal.
//!
//! No steady tick: a ticking bar runs a thread, and `mount` may only fork (detach)
//! while the process has one thread. The bar redraws as work is reported instead.

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

/// A [`lynxfs::Progress`] drawn as one bar per phase.
pub struct Bar {
    bar: Mutex<Option<ProgressBar>>,
}

impl Bar {
    pub fn new() -> Self {
        Bar {
            bar: Mutex::new(None),
        }
    }

    /// Removes the last phase's bar from the terminal.
    pub fn finish(&self) {
        if let Some(b) = self.lock().take() {
            b.finish_and_clear();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<ProgressBar>> {
        self.bar.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.finish();
    }
}

impl lynxfs::Progress for Bar {
    fn phase(&self, what: &'static str, total: Option<u64>) {
        let mut slot = self.lock();
        if let Some(b) = slot.take() {
            b.finish_and_clear();
        }
        let (bar, template) = match total {
            Some(n) => (
                ProgressBar::new(n),
                "{msg} [{bar:30}] {human_pos}/{human_len} ({elapsed})",
            ),
            None => (ProgressBar::no_length(), "{msg}: {human_pos} ({elapsed})"),
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(what);
        *slot = Some(bar);
    }

    fn advance(&self, n: u64) {
        if let Some(b) = self.lock().as_ref() {
            b.inc(n);
        }
    }
}
