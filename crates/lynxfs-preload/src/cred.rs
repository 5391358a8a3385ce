//! The calling thread's credentials, as the kernel checks them: its fs uid, fs gid,
//! supplementary groups and effective capabilities. The kernel keeps these per thread:
//! glibc applies the setuid family and setgroups to every thread of the process, but
//! not setfsuid and setfsgid, and a raw system call (`syscall(SYS_setresuid, ...)`)
//! changes only the thread that makes it.
//!
//! Reading them costs four system calls, so each thread keeps a copy, read again only
//! after a change this library sees: the C library's calls that change them for every
//! thread ([`all_changed`], calls/ids.rs), and those that change only the calling
//! thread (setfsuid, setfsgid, capset, and `syscall()` with a credential call's
//! number: [`this_thread_changed`]). Not seen: a change by a system call that bypasses
//! the C library (inline `syscall` instructions, as Go's runtime makes), and glibc's
//! internal calls that skip its exported functions; a thread then keeps being checked
//! with its previous credentials until a change this library sees.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

use libc::c_long;
use lynxfs::Cred;

/// Bumped when every thread's credentials may have changed (and when the process
/// attaches): each thread reads its own again at its next call.
static GENERATION: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The generation this thread's copy was read at, times two, plus one when its
    /// credentials differ from its process's sessions' (the copy is then in `OWN`;
    /// most threads' do not, and pay no copy per call). 0: none, or stale. One
    /// thread-local for the check every call makes.
    static SEEN: Cell<u64> = const { Cell::new(0) };
    static OWN: RefCell<Option<Cred>> = const { RefCell::new(None) };
    /// Bumped by each change of this thread's own credentials (for `ACCESS`).
    static LOCAL: Cell<u64> = const { Cell::new(0) };
    /// The credentials access() checks with, and the (generation, local change) they
    /// were read at.
    static ACCESS: RefCell<Option<((u64, u64), Cred)>> = const { RefCell::new(None) };
}

/// Every thread's credentials may have changed.
pub fn all_changed() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// The calling thread's credentials may have changed.
pub fn this_thread_changed() {
    let _ = SEEN.try_with(|s| s.set(0));
    let _ = LOCAL.try_with(|l| l.set(l.get().wrapping_add(1)));
}

/// The credentials access() and faccessat() without AT_EACCESS check with (Linux's
/// `access_override_creds`): the calling thread's real uid and gid, its groups, and
/// its permitted capabilities when the real uid is 0 (none otherwise).
pub fn for_access() -> Cred {
    let key = (
        GENERATION.load(Ordering::Acquire),
        LOCAL.try_with(Cell::get).unwrap_or(0),
    );
    let cached = ACCESS.try_with(|a| {
        let a = a.try_borrow().ok()?;
        a.as_ref()
            .filter(|(k, _)| *k == key)
            .map(|(_, c)| c.clone())
    });
    if let Ok(Some(c)) = cached {
        return c;
    }
    let c = read_for_access();
    let _ = ACCESS.try_with(|a| {
        if let Ok(mut a) = a.try_borrow_mut() {
            *a = Some((key, c.clone()));
        }
    });
    c
}

fn read_for_access() -> Cred {
    let (mut ruid, mut euid, mut suid) = (0, 0, 0);
    let (mut rgid, mut egid, mut sgid) = (0, 0, 0);
    // SAFETY: each writes three ids through pointers to our locals.
    unsafe {
        libc::getresuid(&mut ruid, &mut euid, &mut suid);
        libc::getresgid(&mut rgid, &mut egid, &mut sgid);
    }
    let mut cred = Cred::user(ruid, rgid);
    cred.groups = groups();
    cred.caps = match caps() {
        Some((_, permitted)) if ruid == 0 => permitted,
        None if ruid == 0 => cred.caps,
        _ => 0,
    };
    cred
}

/// The calling thread's credentials where they differ from `session` (the
/// credentials its process's pool sessions hold); `None` when they are the same, or
/// once this thread's locals are gone (calls from exit handlers, checked as the
/// process).
pub fn differing(session: &Cred) -> Option<Cred> {
    let now = GENERATION.load(Ordering::Acquire);
    let seen = SEEN.try_with(Cell::get).ok()?;
    let differs = if seen >> 1 == now {
        seen & 1 != 0
    } else {
        let mine = read();
        let differs = mine != *session;
        OWN.try_with(|o| *o.borrow_mut() = differs.then_some(mine))
            .ok()?;
        SEEN.try_with(|s| s.set(now << 1 | u64::from(differs)))
            .ok()?;
        differs
    };
    if !differs {
        return None;
    }
    OWN.try_with(|o| o.borrow().clone()).ok().flatten()
}

/// The calling thread's credentials now, from the kernel.
pub fn read() -> Cred {
    let uid = id_query(libc::SYS_setfsuid);
    let gid = id_query(libc::SYS_setfsgid);
    let mut cred = Cred::user(uid, gid);
    cred.groups = groups();
    if let Some((effective, _)) = caps() {
        cred.caps = effective;
    }
    cred
}

/// setfsuid(-1) or setfsgid(-1): an invalid id changes nothing, and the call answers
/// the thread's fs uid (fs gid), for which there is no getter.
fn id_query(n: c_long) -> u32 {
    // SAFETY: the raw system call with one integer argument; an invalid id only
    // returns the current one.
    unsafe { crate::real::syscall(n, u32::MAX as c_long, 0, 0, 0, 0, 0) as u32 }
}

/// The thread's supplementary groups (getgroups is the thread's, in the kernel).
fn groups() -> Vec<u32> {
    let mut groups = vec![0; 64];
    loop {
        // SAFETY: `groups` has room for the number of entries passed.
        let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
        if n >= 0 {
            groups.truncate(n as usize);
            return groups;
        }
        // SAFETY: a size of 0 with a NULL list only asks for the number of groups.
        let need = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        if need <= 0 || need as usize <= groups.len() {
            return Vec::new();
        }
        groups.resize(need as usize, 0);
    }
}

/// linux/capability.h's structures for capget, version 3 (64 capabilities in two
/// words).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// The thread's effective and permitted capabilities (pid 0 is the calling thread);
/// `None` if the kernel will not say (the default for the uid is kept then).
fn caps() -> Option<(u64, u64)> {
    let mut h = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut d = [CapData::default(); 2];
    // SAFETY: capget with a version-3 header and room for its two data words.
    let r = unsafe {
        crate::real::syscall(
            libc::SYS_capget,
            (&mut h as *mut CapHeader) as c_long,
            d.as_mut_ptr() as c_long,
            0,
            0,
            0,
            0,
        )
    };
    let both = |lo: u32, hi: u32| u64::from(lo) | u64::from(hi) << 32;
    (r == 0).then(|| {
        (
            both(d[0].effective, d[1].effective),
            both(d[0].permitted, d[1].permitted),
        )
    })
}

/// Whether system call `n` changes the calling thread's credentials.
pub fn changes_credentials(n: c_long) -> bool {
    matches!(
        n,
        libc::SYS_setuid
            | libc::SYS_setgid
            | libc::SYS_setreuid
            | libc::SYS_setregid
            | libc::SYS_setresuid
            | libc::SYS_setresgid
            | libc::SYS_setfsuid
            | libc::SYS_setfsgid
            | libc::SYS_setgroups
            | libc::SYS_capset
    )
}
