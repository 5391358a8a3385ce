//! FSYNC of a hybrid pool answered from threads of its own (issue 43).
//!
//! A hybrid pool's fsync is a group commit: it waits for the device's flush, and every
//! fsync that arrives while a flush runs joins the next one
//! (`lynxfs::data::txn`). Served on the daemon's request threads (two by default),
//! a mount could hold at most that many fsyncs in one commit, and while they waited
//! no other request of any process was read. Here a request thread queues the FSYNC
//! and goes back to reading requests; a committer thread runs the engine's fsync and
//! answers. Committers are started as fsyncs wait for one, up to [`MAX_COMMITTERS`],
//! and stay for the next; an FSYNC that finds them all busy waits in the queue.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;

use fuser::{Errno, ReplyEmpty};
use lynxfs::pmem::Backend;
use lynxfs::Fs;

/// Committer threads at most: as many fsyncs as this can share one device flush
/// (more than varmail's 64 threads need; each idle one is a sleeping thread).
pub(crate) const MAX_COMMITTERS: usize = 64;

/// The committers of one mount.
pub(crate) struct Committers<B: Backend> {
    /// Weak: an idle committer must not keep the pool open after the session ends.
    fs: Weak<Fs<B>>,
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

#[derive(Default)]
struct Queue {
    /// FSYNCs waiting for a committer: the file handle and the reply.
    waiting: VecDeque<(u64, ReplyEmpty)>,
    /// Committers waiting for an FSYNC.
    idle: usize,
    /// Committers started.
    started: usize,
    /// The session ended: committers answer what is queued, then stop.
    ending: bool,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<B: Backend> Committers<B> {
    pub(crate) fn new(fs: &Arc<Fs<B>>) -> Self {
        Committers {
            fs: Arc::downgrade(fs),
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                wake: Condvar::new(),
            }),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Commit what file handle `fh` has pending and answer `reply`, from a committer.
    pub(crate) fn fsync(&self, fh: u64, reply: ReplyEmpty) {
        let mut q = self.shared.queue();
        if q.ending {
            drop(q);
            return reply.error(Errno::EIO);
        }
        q.waiting.push_back((fh, reply));
        if q.idle >= q.waiting.len() || q.started >= MAX_COMMITTERS {
            drop(q);
            self.shared.wake.notify_one();
            return;
        }
        q.started += 1;
        drop(q);
        self.start();
    }

    fn start(&self) {
        let (fs, shared) = (self.fs.clone(), self.shared.clone());
        let spawned = std::thread::Builder::new()
            .name("lynxfs-commit".into())
            .spawn(move || commit_loop(&fs, &shared));
        match spawned {
            Ok(t) => self
                .threads
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(t),
            Err(e) => {
                // No thread: the FSYNCs queued are answered by a committer already
                // running, or here, failed, if there is none.
                eprintln!("lynxfs: starting a commit thread: {e}");
                let mut q = self.shared.queue();
                q.started -= 1;
                if q.started == 0 {
                    let failed: Vec<_> = q.waiting.drain(..).collect();
                    drop(q);
                    failed.into_iter().for_each(|(_, r)| r.error(Errno::EAGAIN));
                }
            }
        }
    }

    /// The session ended: answer every queued FSYNC, then stop the committers and
    /// wait for them, before the pool is closed.
    pub(crate) fn end(&self) {
        self.shared.queue().ending = true;
        self.shared.wake.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl<B: Backend> Drop for Committers<B> {
    fn drop(&mut self) {
        self.end();
    }
}

/// A committer: take a queued FSYNC, commit, answer; sleep while none is queued.
fn commit_loop<B: Backend>(fs: &Weak<Fs<B>>, shared: &Shared) {
    loop {
        let mut q = shared.queue();
        let (fh, reply) = loop {
            if let Some(job) = q.waiting.pop_front() {
                break job;
            }
            if q.ending {
                return;
            }
            q.idle += 1;
            q = shared.wake.wait(q).unwrap_or_else(|p| p.into_inner());
            q.idle -= 1;
        };
        drop(q);
        match fs.upgrade().map(|fs| fs.fsync(fh)) {
            Some(Ok(())) => reply.ok(),
            Some(Err(e)) => reply.error(crate::adapter::errno(&e)),
            None => reply.error(Errno::EIO),
        }
    }
}
