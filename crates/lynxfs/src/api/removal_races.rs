//! A name whose removal has passed its commit point is gone for readers (an open
//! or a stat says ENOENT) a moment before its index entry leaves the index. A
//! create, a link or `RENAME_NOREPLACE` of the name in that moment said EEXIST,
//! which no order of the calls explains (issue 42, found by the history checker
//! across processes: a preempted unlink left the moment open for 20 ms). Here
//! the call runs on another thread while the unlink stands at that point; it must
//! wait for the entry to leave and then succeed.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Result;
use crate::pmem::PmemBackend;
use crate::runtime::testing::{on_race, races_left};
use crate::{Cred, Fs, MkfsOptions};

type LFs = Fs<PmemBackend>;

/// How long the unlink stands at its point while the call runs: before the fix
/// the call answered (EEXIST) well within it.
const STAND: Duration = Duration::from_millis(300);

fn fs() -> Arc<LFs> {
    let mut o = MkfsOptions::new(16 << 20);
    o.lanes = 1;
    Arc::new(Fs::in_memory(&o, PmemBackend::default()).unwrap())
}

fn touch(fs: &LFs, path: &str) {
    let s = fs.session(Cred::root());
    let fd = s.open(path, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    fs.close_fd(fd).unwrap();
}

/// The thread making the call: whether it answered while the unlink stood.
type Caller = (bool, JoinHandle<Result<()>>);

/// `call` on another thread while an unlink of `/lock` stands past its commit
/// point: whether it answered while the unlink stood, and its answer.
fn beside_a_committed_unlink(
    call: impl FnOnce(&LFs) -> Result<()> + Send + 'static,
) -> (bool, Result<()>) {
    // A call that never stops waiting would hang the test: fail it instead.
    let _dog =
        lynxfs_test_support::watchdog("a call beside a committed unlink", Duration::from_secs(60));
    let fs = fs();
    touch(&fs, "/lock");
    touch(&fs, "/other");
    let caller: Arc<Mutex<Option<Caller>>> = Arc::default();
    let (f, slot) = (fs.clone(), caller.clone());
    on_race("remove.committed", move || {
        let gone = f.session(Cred::root()).stat("/lock").map(drop);
        assert_eq!(gone.map_err(|e| e.errno()), Err(libc::ENOENT));
        let (tx, rx) = mpsc::channel();
        let g = f.clone();
        let t = std::thread::spawn(move || {
            let r = call(&g);
            let _ = tx.send(());
            r
        });
        let answered = rx.recv_timeout(STAND).is_ok();
        *slot.lock().unwrap() = Some((answered, t));
    });
    fs.session(Cred::root()).unlink("/lock").unwrap();
    assert!(races_left().is_empty(), "not raced: {:?}", races_left());
    let (answered, t) = caller.lock().unwrap().take().unwrap();
    (answered, t.join().unwrap())
}

fn root(fs: &LFs) -> crate::Session<'_, PmemBackend> {
    fs.session(Cred::root())
}

#[test]
fn an_exclusive_create_waits_for_a_committed_unlink() {
    let (answered, r) = beside_a_committed_unlink(|fs| {
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
        fs.close_fd(root(fs).open("/lock", flags, 0o644)?)
    });
    assert_eq!((answered, r.map_err(|e| e.errno())), (false, Ok(())));
}

#[test]
fn a_mkdir_waits_for_a_committed_unlink() {
    let (answered, r) = beside_a_committed_unlink(|fs| root(fs).mkdir("/lock", 0o755));
    assert_eq!((answered, r.map_err(|e| e.errno())), (false, Ok(())));
}

#[test]
fn a_link_waits_for_a_committed_unlink() {
    let (answered, r) = beside_a_committed_unlink(|fs| root(fs).link("/other", "/lock"));
    assert_eq!((answered, r.map_err(|e| e.errno())), (false, Ok(())));
}

#[test]
fn a_rename_noreplace_waits_for_a_committed_unlink() {
    let (answered, r) =
        beside_a_committed_unlink(|fs| root(fs).rename("/other", "/lock", libc::RENAME_NOREPLACE));
    assert_eq!((answered, r.map_err(|e| e.errno())), (false, Ok(())));
}
