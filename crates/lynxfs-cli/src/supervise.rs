//! Running a program as a child so that, to whoever started us, it looks as if we had
//! exec'd it: its exit code is ours, a signal that killed it kills us, and a signal a
//! process sends us reaches it. `lynxfs run` uses this to stay attached to the pool
//! while the program runs, and to detach before its caller sees it end.
//!
//! Forwarded: SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM and SIGWINCH,
//! when a process sent them (`kill`, `timeout`). Not forwarded: the same signals sent
//! by the kernel (a terminal's ^C, ^\, a hangup, a resize), which it sends to the whole
//! foreground process group, the child included; we wait them out, as time(1) does.
//! Stop signals stop us as they would any process; SIGKILL leaves the child running,
//! orphaned, as it would any parent's child.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};

/// The signals passed on to the child.
const FORWARDED: [libc::c_int; 8] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGWINCH,
];

/// The child's process id once it runs (0 before): read by the signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);

/// Passes a signal a process sent us on to the child; one from the kernel reached the
/// child's process group already (or was about us alone: a hangup of a terminal the
/// child shares is sent to it too).
extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // si_code > 0: sent by the kernel (SI_KERNEL, a terminal); <= 0: by a process.
    if code > 0 {
        return;
    }
    let pid = CHILD.load(Ordering::Acquire);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe and takes plain integers.
        unsafe { libc::kill(pid, sig) };
    }
}

/// A signal set holding the forwarded signals.
fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initializes the set before sigaddset reads it; both only
    // write the set passed to them.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        for s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

fn set_mask(how: libc::c_int, set: &libc::sigset_t) {
    // SAFETY: `set` is an initialized signal set; the old mask is not asked for.
    unsafe { libc::pthread_sigmask(how, set, std::ptr::null_mut()) };
}

fn install_handlers() -> io::Result<()> {
    for sig in FORWARDED {
        // SAFETY: `act` is fully initialized (zeroed, then the handler, an empty mask
        // and flags set); `forward` has the SA_SIGINFO signature and only calls
        // async-signal-safe functions and atomics.
        let r = unsafe {
            let mut act = std::mem::zeroed::<libc::sigaction>();
            act.sa_sigaction = forward as extern "C" fn(_, _, _) as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut())
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Starts `cmd` with the forwarding in place. The signals are blocked from before the
/// handlers exist until the child's id is known, so none sent meanwhile is lost (a
/// blocked one is delivered, and forwarded, at the unblocking). The child unblocks them
/// before its exec (std passes the mask on), which gives it default actions for them.
pub fn spawn(cmd: &mut Command) -> io::Result<Child> {
    let set = forwarded_set();
    set_mask(libc::SIG_BLOCK, &set);
    // SAFETY: the hook runs in the forked child before exec and only calls
    // pthread_sigmask, which is async-signal-safe, on a set copied into the closure.
    unsafe {
        cmd.pre_exec(move || {
            set_mask(libc::SIG_UNBLOCK, &set);
            Ok(())
        });
    }
    let spawned = install_handlers().and_then(|()| cmd.spawn());
    if let Ok(child) = &spawned {
        CHILD.store(child.id() as i32, Ordering::Release);
    }
    set_mask(libc::SIG_UNBLOCK, &set);
    spawned
}

/// Ends this process as the child ended: with its exit code, or killed by the signal
/// that killed it (without a core dump of our own).
pub fn end_as(status: ExitStatus) -> ! {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain system calls on integers and an initialized struct; after
        // them this process ends.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(sig, libc::SIG_DFL);
            let mut set = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(sig);
        }
        // A signal whose default is not to end the process (never one that killed it).
        std::process::exit(128 + sig);
    }
    std::process::exit(status.code().unwrap_or(1))
}
