//! Path resolution: absolute or relative to a directory, `.` and `..`, symlinks
//! followed up to 40 times (then ELOOP), Linux's limits on names and paths.

use crate::error::{errno, Error, Result};
use crate::format::ROOT_INO;
use crate::meta::{is_dir, Cred, Namespace};
use crate::pmem::Backend;

/// Longest path accepted, as Linux's PATH_MAX (which counts the NUL).
pub const PATH_MAX: usize = 4096;
pub const SYMLOOP_MAX: u32 = 40;

/// What "/" and ".." at the top of the pool mean.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// The pool is the whole tree: "/" is its root, and ".." at the root stays there
    /// (the library API, the FUSE adapter).
    #[default]
    Pool,
    /// The pool is mounted inside a bigger tree (the preload library): a path that
    /// leaves it (".." at its root, an absolute path or symlink target) fails with
    /// [`Error::Outside`], naming the rest of the path for the caller to resolve.
    Mounted,
}

/// The path `head` followed by what was left of the path being walked.
fn outside(head: &[u8], rest: &[u8]) -> Error {
    let mut p = head.to_vec();
    p.extend_from_slice(rest);
    Error::Outside(p)
}

/// A component led outside the pool: the rest of the path follows it there.
fn beyond(e: Error, rest: &[u8]) -> Error {
    match e {
        Error::Outside(p) => outside(&p, rest),
        e => e,
    }
}

/// The non-empty components of `path`, each with what follows it.
fn components(path: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < path.len() && path[i] == b'/' {
            i += 1;
        }
        if i == path.len() {
            return None;
        }
        let start = i;
        while i < path.len() && path[i] != b'/' {
            i += 1;
        }
        Some((&path[start..i], &path[i..]))
    })
}

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
    scope: Scope,
) -> Result<u64> {
    resolve_last(ns, base, path, follow, cred, scope).map(|r| r.ino)
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
    scope: Scope,
) -> Result<Resolved> {
    let mut links = 0;
    let w = walk_parent(ns, base, path, cred, &mut links, scope)?;
    let found = found_at(ns, w.parent, w.name, cred)?;
    let rest: &[u8] = if w.trailing_slash { b"/" } else { b"" };
    finish(
        ns,
        found,
        follow || w.trailing_slash,
        w.trailing_slash,
        cred,
        &mut links,
        scope,
    )
    .map_err(|e| beyond(e, rest))
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
    scope: Scope,
) -> Result<Resolved> {
    while follow && is_symlink(ns.mode(r.ino)) {
        *links += 1;
        if *links > SYMLOOP_MAX {
            return Err(errno::ELOOP);
        }
        let target = ns.readlink(r.ino)?;
        // A relative target starts in the directory that holds the link.
        let from = r.last.as_ref().map_or(r.ino, |(dir, _)| *dir);
        let w = walk_parent(ns, from, &target, cred, links, scope)?;
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
    scope: Scope,
) -> Result<Walked> {
    check_path(path)?;
    let absolute = path[0] == b'/';
    if absolute && scope == Scope::Mounted {
        return Err(Error::Outside(path.to_vec()));
    }
    let mut cur = if absolute { ROOT_INO } else { base };
    let trailing_slash = path.ends_with(b"/");
    let mut comps = components(path).peekable();
    while let Some((c, rest)) = comps.next() {
        if c == b".." && cur == ROOT_INO && scope == Scope::Mounted {
            return Err(outside(c, rest));
        }
        if comps.peek().is_some() {
            cur = step(ns, cur, c, cred, links, scope).map_err(|e| beyond(e, rest))?;
            continue;
        }
        // The last component: the caller's operation checks the parent itself.
        return match c {
            b"." => Ok(Walked {
                parent: cur,
                name: Vec::new(),
                trailing_slash,
            }),
            b".." => Ok(Walked {
                parent: ns.lookup(cur, c, cred)?,
                name: Vec::new(),
                trailing_slash,
            }),
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
    scope: Scope,
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
    finish(ns, found, true, true, cred, links, scope).map(|r| r.ino)
}
