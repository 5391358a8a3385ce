//! Protection keys (`lynxfs::pmem::keys`): the engine's memory is reachable only
//! inside an `Open` guard or an engine thread; a store from outside faults. One test
//! in its own binary: the key, once enabled, covers the whole process.

mod common;

use lynxfs::pmem::keys::{self, Open, Protection};
use lynxfs::pmem::mappings::{self, Kind};
use lynxfs::Cred;

#[test]
fn the_key_is_open_inside_the_engine_only() {
    if !keys::supported() {
        eprintln!("skipped: this CPU or kernel has no memory protection keys (pku)");
        return;
    }
    // A guard taken before the key existed shuts it when it ends (the preload's
    // load-time guard, inside which the key is made).
    let before = Open::enter();
    let Protection::On(_) = keys::enable() else {
        panic!("a key was free a moment ago: {:?}", keys::status());
    };
    assert!(
        keys::open_here(),
        "the enabling thread keeps access for now"
    );
    drop(before);
    assert!(!keys::open_here(), "shut once the outer guard ends");

    // Nested guards: the inner one leaves the key as it found it.
    {
        let _outer = Open::enter();
        assert!(keys::open_here());
        {
            let _inner = Open::enter();
            assert!(keys::open_here());
        }
        assert!(
            keys::open_here(),
            "the inner guard did not shut the outer's key"
        );
    }
    assert!(!keys::open_here());

    // A pool made now is under the key and works inside guards, from any thread.
    let fs = {
        let _in = Open::enter();
        let fs = common::fs(16 << 20);
        let s = fs.session(Cred::root());
        let fd = s.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        fs.pwrite(fd, b"kept", 0).unwrap();
        fs.close_fd(fd).unwrap();
        drop(s);
        fs
    };
    let pool = mappings::all()
        .into_iter()
        .find(|m| m.kind == Kind::Pool)
        .expect("the pool is registered");
    std::thread::scope(|t| {
        t.spawn(|| {
            assert!(!keys::open_here(), "a new thread starts shut out");
            let _in = Open::enter();
            let s = fs.session(Cred::root());
            assert_eq!(s.stat("/f").unwrap().size, 4);
        });
    });

    // A store from outside the engine faults (in a child, which the fault kills).
    // SAFETY: the child only stores a byte and exits; it calls nothing that could
    // wait on a lock another thread of this process held at fork.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork");
    if child == 0 {
        // SAFETY: a store into the pool's mapping, which is meant to fault.
        unsafe {
            std::ptr::write_volatile((pool.start + 4096) as *mut u8, b'X');
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
        "a stray store into the pool was not stopped (status {status:#x})"
    );
    let inside = Open::enter();
    let s = fs.session(Cred::root());
    assert_eq!(s.stat("/f").unwrap().size, 4, "the pool still answers");
    // Closing the pool writes to it too: inside.
    drop(s);
    drop(fs);
    drop(inside);
}
