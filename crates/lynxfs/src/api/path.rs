//! Path resolution: absolute or relative to a directory, `.` and `..`, symlinks
//! followed up to 40 times (then ELOOP), Linux's limits on names and paths.

use crate::error::{errno, Result};
use crate::format::ROOT_INO;
use crate::meta::{is_dir, perm, Cred, Namespace};
use crate::pmem::Backend;

/// Longest path accepted, as Linux's PATH_MAX (which counts the NUL).
pub const PATH_MAX: usize = 4096;
pub const SYMLOOP_MAX: u32 = 40;

fn is_symlink(mode: u32) -> bool {
    mode & libc::S_IFMT == libc::S_IFLNK
}

/// Where resolution ended: the final inode, or the parent and last name.
pub struct Walked {
    pub parent: u64,
    pub name: Vec<u8>,
    /// The path ended in '/', so the last component must be a directory.
    pub trailing_slash: bool,
}

pub(crate) fn check_path(path: &[u8]) -> Result<()> {
    if path.is_empty() {
        return Err(errno::ENOENT);
    }
    if path.len() >= PATH_MAX {
        return Err(errno::ENAMETOOLONG);
    }
    if path.contains(&0) {
        return Err(errno::EINVAL);
    }
    Ok(())
}

/// Resolve `path` from `base` to its final inode, following a final symlink when
/// `follow` is set.
pub fn resolve<B: Backend>(
    ns: &Namespace<B>,
    base: u64,
    path: &[u8],
    follow: bool,
    cred: &Cred,
) -> Result<u64> {
    resolve_last(ns, base, path, follow, cred).map(|r| r.ino)
}

/// Where a path led: the inode, and the directory and name of the last lookup that
/// found it (none when the path ended at a directory itself, like "/" or "a/..").
pub struct Resolved {
    pub ino: u64,
    pub last: Option<(u64, Vec<u8>)>,
}

/// [`resolve`], telling also through which name the inode was found last.
pub fn resolve_last<B: Backend>(
    ns: &Namespace<B>,
    base: u64,
    path: &[u8],
    follow: bool,
    cred: &Cred,
) -> Result<Resolved> {
    let mut links = 0;
    let w = walk_parent(ns, base, path, cred, &mut links)?;
    let found = found_at(ns, w.parent, w.name, cred)?;
    finish(
        ns,
        found,
        follow || w.trailing_slash,
        w.trailing_slash,
        cred,
        &mut links,
    )
}

/// Looks `name` up in `parent` (the parent itself for an empty name).
fn found_at<B: Backend>(
    ns: &Namespace<B>,
    parent: u64,
    name: Vec<u8>,
    cred: &Cred,
) -> Result<Resolved> {
    if name.is_empty() {
        return Ok(Resolved {
            ino: parent,
            last: None,
        });
    }
    let ino = ns.lookup(parent, &name, cred)?;
    Ok(Resolved {
        ino,
        last: Some((parent, name)),
    })
}

fn finish<B: Backend>(
    ns: &Namespace<B>,
    mut r: Resolved,
    follow: bool,
    want_dir: bool,
    cred: &Cred,
    links: &mut u32,
) -> Result<Resolved> {
    while follow && is_symlink(ns.mode(r.ino)) {
        *links += 1;
        if *links > SYMLOOP_MAX {
            return Err(errno::ELOOP);
        }
        let target = ns.readlink(r.ino)?;
        // A relative target starts in the directory that holds the link.
        let from = r.last.as_ref().map_or(r.ino, |(dir, _)| *dir);
        let w = walk_parent(ns, from, &target, cred, links)?;
        r = found_at(ns, w.parent, w.name, cred)?;
    }
    if want_dir && !is_dir(ns.mode(r.ino)) {
        return Err(errno::ENOTDIR);
    }
    Ok(r)
}

/// Resolve every component but the last; return the parent and the last name
/// (empty when the path names a directory itself, like "/" or "a/..").
pub fn walk_parent<B: Backend>(
    ns: &Namespace<B>,
    base: u64,
    path: &[u8],
    cred: &Cred,
    links: &mut u32,
) -> Result<Walked> {
    check_path(path)?;
    let mut cur = if path[0] == b'/' { ROOT_INO } else { base };
    let trailing_slash = path.ends_with(b"/");
    let mut comps = path
        .split(|&c| c == b'/')
        .filter(|c| !c.is_empty())
        .peekable();
    while let Some(c) = comps.next() {
        if comps.peek().is_some() {
            cur = step(ns, cur, c, cred, links)?;
            continue;
        }
        // The last component: the caller's operation checks the parent itself.
        return match c {
            b"." => Ok(Walked {
                parent: cur,
                name: Vec::new(),
                trailing_slash,
            }),
            b".." => {
                ns.dir(cur)?;
                ns.may(cur, cred, perm::X)?;
                Ok(Walked {
                    parent: ns.parent_of(cur),
                    name: Vec::new(),
                    trailing_slash,
                })
            }
            name if name.len() > crate::format::dentry::NAME_MAX => Err(errno::ENAMETOOLONG),
            name => Ok(Walked {
                parent: cur,
                name: name.to_vec(),
                trailing_slash,
            }),
        };
    }
    Ok(Walked {
        parent: cur,
        name: Vec::new(),
        trailing_slash,
    })
}

/// One component in the middle of a path: must end at a directory.
fn step<B: Backend>(
    ns: &Namespace<B>,
    cur: u64,
    comp: &[u8],
    cred: &Cred,
    links: &mut u32,
) -> Result<u64> {
    if comp.len() > crate::format::dentry::NAME_MAX {
        return Err(errno::ENAMETOOLONG);
    }
    let next = ns.lookup(cur, comp, cred)?;
    if !is_symlink(ns.mode(next)) {
        // The common case, without the name copy a symlink's resolution needs.
        return if is_dir(ns.mode(next)) {
            Ok(next)
        } else {
            Err(errno::ENOTDIR)
        };
    }
    let found = Resolved {
        ino: next,
        last: Some((cur, comp.to_vec())),
    };
    finish(ns, found, true, true, cred, links).map(|r| r.ino)
}
