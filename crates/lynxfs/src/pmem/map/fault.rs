//! A pool mapping whose storage goes away: the process stops with a message and exit
//! status [`FAULT_EXIT`] instead of dying by SIGBUS.
//!
//! A store or load to a mapped page that the file no longer has (the file was truncated
//! under the mapping) or that its file system cannot back (tmpfs or a disk full when a
//! hole is first touched), or a media error on DAX, raises SIGBUS. The engine cannot go
//! on from there (the access is in the middle of an operation), so the handler installed
//! here, when the faulting address lies inside a registered pool mapping, writes one line
//! to stderr naming the pool and the offset, and ends the process with `_exit`. Faults
//! elsewhere go to the handler that was there before (Rust's own, or the default action).
//!
//! Limits: the process still ends (nothing after the fault is saved; the pool is left
//! as after a crash, which recovery handles); a FUSE mount served by it is left
//! disconnected until unmounted; at most [`SLOTS`] mappings are watched at once (a
//! process with more gets the plain signal for the others).

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

/// The exit status after a fault in a pool mapping (e2fsck's "operational error").
pub const FAULT_EXIT: i32 = 8;

/// How many mappings can be watched at once.
pub const SLOTS: usize = 64;
/// How much of a pool's path the message shows.
const PATH_SHOWN: usize = 200;

const FREE: u8 = 0;
const FILLING: u8 = 1;
const LIVE: u8 = 2;

/// One watched mapping. Read by the signal handler, so only atomics.
struct Slot {
    state: AtomicU8,
    base: AtomicUsize,
    len: AtomicUsize,
    path_len: AtomicUsize,
    path: [AtomicU8; PATH_SHOWN],
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU8::new(FREE),
            base: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            path_len: AtomicUsize::new(0),
            path: [const { AtomicU8::new(0) }; PATH_SHOWN],
        }
    }
}

static WATCHED: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
static INSTALL: Once = Once::new();
/// The SIGBUS action found before ours, which faults outside pool mappings go to.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// A watched mapping; unwatched when dropped (before the mapping is unmapped).
pub struct Watch(Option<usize>);

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            WATCHED[i].state.store(FREE, Ordering::Release);
        }
    }
}

/// Watch `[base, base + len)`, the mapping of the pool at `path`.
pub fn watch(base: *mut u8, len: usize, path: &std::path::Path) -> Watch {
    use std::os::unix::ffi::OsStrExt;
    INSTALL.call_once(install);
    let Some(i) = WATCHED.iter().position(|s| {
        s.state
            .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }) else {
        return Watch(None);
    };
    let slot = &WATCHED[i];
    let bytes = path.as_os_str().as_bytes();
    let n = bytes.len().min(PATH_SHOWN);
    for (dst, &b) in slot.path.iter().zip(&bytes[..n]) {
        dst.store(b, Ordering::Relaxed);
    }
    slot.path_len.store(n, Ordering::Relaxed);
    slot.base.store(base as usize, Ordering::Relaxed);
    slot.len.store(len, Ordering::Relaxed);
    slot.state.store(LIVE, Ordering::Release);
    Watch(Some(i))
}

fn install() {
    // SAFETY: sigaction is plain data, for which all zeros is a valid value.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: with a null new action, sigaction only fills `old`, a live local.
    if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) } != 0 {
        return;
    }
    let _ = PREVIOUS.set(old);
    // SAFETY: a zeroed sigaction is a valid value to fill in; the handler has the
    // SA_SIGINFO signature and only does async-signal-safe things (atomic loads,
    // write(2), _exit, sigaction, raise, or a call to the previous handler).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
    }
}

/// The watched slot holding `addr`, if any.
fn slot_of(addr: usize) -> Option<&'static Slot> {
    WATCHED.iter().find(|s| {
        s.state.load(Ordering::Acquire) == LIVE && {
            let base = s.base.load(Ordering::Relaxed);
            addr >= base && addr - base < s.len.load(Ordering::Relaxed)
        }
    })
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // si_code > 0: raised by the kernel for a memory access, not sent by kill(2).
    if code > 0 {
        if let Some(slot) = slot_of(addr) {
            report(slot, addr - slot.base.load(Ordering::Relaxed));
            // SAFETY: _exit is async-signal-safe; nothing after the fault may run.
            unsafe { libc::_exit(FAULT_EXIT) };
        }
    }
    chain(sig, info, ctx, code);
}

/// Hand a fault that is not ours to the action that was there before.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void, code: i32) {
    let Some(prev) = PREVIOUS.get() else { return };
    let handler = prev.sa_sigaction;
    if handler == libc::SIG_IGN {
        return;
    }
    if handler == libc::SIG_DFL {
        // SAFETY: restores the default action (async-signal-safe). A fault then happens
        // again when the instruction is retried, and kills the process as it would
        // have; a signal sent by kill(2) is sent again (it is blocked until we return).
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            if code <= 0 {
                libc::raise(sig);
            }
        }
        return;
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous action was installed with SA_SIGINFO, so `handler` is a
        // function of this signature; we pass on what the kernel gave us.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: without SA_SIGINFO the previous handler takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

/// One line on stderr, built without allocating (we are in a signal handler).
fn report(slot: &Slot, offset: usize) {
    let mut path = [0u8; PATH_SHOWN];
    let n = slot.path_len.load(Ordering::Relaxed).min(PATH_SHOWN);
    for (dst, src) in path.iter_mut().zip(&slot.path[..n]) {
        *dst = src.load(Ordering::Relaxed);
    }
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut v = offset;
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for part in [
        b"lynxfs: the storage under the pool ".as_slice(),
        &path[..n],
        b" is gone at offset ",
        &digits[at..],
        b" (the file was truncated, its file system is full, or the memory failed); \
          stopping without touching it further\n",
    ] {
        // SAFETY: write(2) of a live buffer is async-signal-safe; a failed write of a
        // last message has nothing better to do.
        unsafe { libc::write(2, part.as_ptr().cast(), part.len()) };
    }
}
