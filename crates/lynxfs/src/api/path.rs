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
    let mut links = 0;
    let w = walk_parent(ns, base, path, cred, &mut links)?;
    let ino = match w.name.as_slice() {
        b"" => w.parent,
        name => ns.lookup(w.parent, name, cred)?,
    };
    finish(
        ns,
        ino,
        w.parent,
        follow || w.trailing_slash,
        w.trailing_slash,
        cred,
        &mut links,
    )
}

fn finish<B: Backend>(
    ns: &Namespace<B>,
    mut ino: u64,
    mut parent: u64,
    follow: bool,
    want_dir: bool,
    cred: &Cred,
    links: &mut u32,
) -> Result<u64> {
    while follow && is_symlink(ns.mode(ino)) {
        *links += 1;
        if *links > SYMLOOP_MAX {
            return Err(errno::ELOOP);
        }
        let target = ns.readlink(ino)?;
        let w = walk_parent(ns, parent, &target, cred, links)?;
        ino = match w.name.as_slice() {
            b"" => w.parent,
            name => ns.lookup(w.parent, name, cred)?,
        };
        parent = w.parent;
    }
    if want_dir && !is_dir(ns.mode(ino)) {
        return Err(errno::ENOTDIR);
    }
    Ok(ino)
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
    finish(ns, next, cur, true, true, cred, links)
}
