//! The caller of a FUSE request as the engine sees it: the uid and gid the request
//! carries, and the supplementary groups from `/proc/<pid>/status` (FUSE does not
//! send them), read only when a call was refused without them, so the common case
//! costs no `/proc` read.

use fuser::{Errno, Request};
use lynxfs::Cred;

use crate::adapter::errno;

/// Runs `f` with the caller's credentials. A refusal (EACCES, EPERM) for a caller
/// other than root is retried once with the supplementary groups read from /proc:
/// the engine checks permissions before it changes anything, so a refused call had no
/// effect and may be repeated.
pub(crate) fn as_caller<T>(
    req: &Request,
    mut f: impl FnMut(&Cred) -> lynxfs::Result<T>,
) -> Result<T, Errno> {
    let mut cred = Cred::user(req.uid(), req.gid());
    match f(&cred) {
        Err(e) if cred.uid != 0 && matches!(e.errno(), libc::EACCES | libc::EPERM) => {
            cred.groups = groups_of(req.pid());
            if cred.groups.is_empty() {
                return Err(errno(&e));
            }
            f(&cred).map_err(|e| errno(&e))
        }
        r => r.map_err(|e| errno(&e)),
    }
}

/// The caller's full credentials, groups included (for calls whose result, not only
/// whose permission, depends on the groups).
pub(crate) fn full_cred(req: &Request) -> Cred {
    let mut cred = Cred::user(req.uid(), req.gid());
    if cred.uid != 0 {
        cred.groups = groups_of(req.pid());
    }
    cred
}

/// The supplementary groups of process (or thread) `pid`, from the "Groups:" line of
/// `/proc/<pid>/status`; empty when it cannot be read (the process is gone, or the
/// request came from the kernel itself with pid 0).
fn groups_of(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}
