//! Path resolution: absolute or relative to a directory, `.` and `..`, symlinks
//! followed up to 40 times (then ELOOP), Linux's limits on names and paths.
//!
//! The walk goes through a [`PathIndex`]: the namespace's index answers one name in one
//! directory at a time; another index may answer a run of names at once
//! ([`PathIndex::prefix`]), the walk going on component by component where it does
//! not. Whichever answers, the rules stay here, once: search permission on every
//! directory crossed ([`answered`], and `Namespace::lookup` for a single name; an index
//! may vouch for it from a prefix-check cache, see [`Prefix::searched`]), and the exits
//! of a mounted scope (an absolute path, `..` at the root, a symlink's target).
//!
//! [`resolve_in`], [`resolve_last_in`] and [`walk_parent_in`] walk through the
//! namespace's full-path areas ([`Areas`]) when they are switched on
//! (`Mechanisms::areas`), through the namespace alone otherwise.

use crate::error::{errno, Error, Result};
use crate::format::ROOT_INO;
use crate::meta::{is_dir, perm, Cred, Namespace};
use crate::pmem::Backend;

/// What resolves names for the walk. [`Namespace`] is the component walk's index (one
/// probe per name); an index that knows whole paths (full-path areas) also answers a
/// run of leading names in one probe.
pub trait PathIndex {
    type Backend: Backend;

    /// Whether [`Self::prefix`] may answer at all: when not, the walk never asks (nor
    /// looks for where a path's last name starts), so it costs what the walk alone does.
    const ANSWERS_RUNS: bool = false;

    /// The namespace: single names, modes, symlink targets.
    fn namespace(&self) -> &Namespace<Self::Backend>;

    /// The directory that the longest leading run of `run`'s names it knows leads to
    /// from directory `dir`, and that run's length in bytes (ending at a name's end);
    /// `Ok(None)` to let the walk look names up one by one. `run` is one or more names
    /// separated by '/'s, with no '/' first or last (the path's last name is never in
    /// it: the caller's operation looks that one up). The answer may only cross names
    /// other than `.` and `..` that are directories (not symlinks), all the way to the
    /// directory it names, and must call `search` with every directory it crosses, in
    /// order (`dir` first), returning the first error `search` gives: the walk checks
    /// permission there, whoever answers. Called again after each name the walk looks
    /// up itself. `cred` is the caller's.
    #[inline]
    fn prefix(
        &self,
        _dir: u64,
        _run: &[u8],
        _cred: &Cred,
        _search: impl FnMut(u64) -> Result<()>,
    ) -> Result<Option<Prefix>> {
        Ok(None)
    }
}

/// A run of names an index answered ([`PathIndex::prefix`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// The directory the run leads to.
    pub ino: u64,
    /// The run's length in `run`'s bytes.
    pub len: usize,
    /// The index vouches that the caller's credentials may search every directory
    /// the run crosses, and did not call `search`: it learnt the run from a walk with
    /// these credentials, and forgets it when any directory is renamed, removed or
    /// changes mode, owner, ACL or flags (a prefix-check cache, Tsai et al. SOSP'15).
    pub searched: bool,
}

/// The component walk with the namespace's full-path areas in front
/// (`meta::areas`): a run of names below an area root answered in one probe.
pub struct Areas<'a, B: Backend>(pub &'a Namespace<B>);

impl<B: Backend> PathIndex for Areas<'_, B> {
    type Backend = B;
    const ANSWERS_RUNS: bool = true;
    #[inline]
    fn namespace(&self) -> &Namespace<B> {
        self.0
    }
    #[inline]
    fn prefix(
        &self,
        dir: u64,
        run: &[u8],
        cred: &Cred,
        _search: impl FnMut(u64) -> Result<()>,
    ) -> Result<Option<Prefix>> {
        let ns = self.0;
        Ok(ns
            .areas
            .answer(ns, dir, run, cred)
            .map(|(ino, len)| Prefix {
                ino,
                len,
                searched: true,
            }))
    }
}

/// [`resolve`] through the areas when they are on.
pub fn resolve_in<B: Backend>(
    ns: &Namespace<B>,
    base: u64,
    path: &[u8],
    follow: bool,
    cred: &Cred,
    scope: Scope,
) -> Result<u64> {
    if ns.mechanisms.areas() {
        resolve(&Areas(ns), base, path, follow, cred, scope)
    } else {
        resolve(ns, base, path, follow, cred, scope)
    }
}

/// [`resolve_last`] through the areas when they are on.
pub fn resolve_last_in<B: Backend>(
    ns: &Namespace<B>,
    base: u64,
    path: &[u8],
    follow: bool,
    cred: &Cred,
    scope: Scope,
) -> Result<Resolved> {
    if ns.mechanisms.areas() {
        resolve_last(&Areas(ns), base, path, follow, cred, scope)
    } else {
        resolve_last(ns, base, path, follow, cred, scope)
    }
}

/// [`walk_parent`] through the areas when they are on.
pub fn walk_parent_in<B: Backend>(
    ns: &Namespace<B>,
    base: u64,
    path: &[u8],
    cred: &Cred,
    links: &mut u32,
    scope: Scope,
) -> Result<Walked> {
    walk_parent_ref_in(ns, base, path, cred, links, scope).map(WalkedRef::into_owned)
}

/// [`walk_parent_in`] with the last name borrowed from `path`: the create, mkdir,
/// unlink and rename paths call it, and a copy of the name cost them a heap
/// allocation each.
pub(crate) fn walk_parent_ref_in<'p, B: Backend>(
    ns: &Namespace<B>,
    base: u64,
    path: &'p [u8],
    cred: &Cred,
    links: &mut u32,
    scope: Scope,
) -> Result<WalkedRef<'p>> {
    if ns.mechanisms.areas() {
        walk_parent_ref(&Areas(ns), base, path, cred, links, scope)
    } else {
        walk_parent_ref(ns, base, path, cred, links, scope)
    }
}

/// The component walk over the namespace's (parent, name) index.
impl<B: Backend> PathIndex for Namespace<B> {
    type Backend = B;
    #[inline]
    fn namespace(&self) -> &Namespace<B> {
        self
    }
}

/// Ask `ix` for a leading run of the names in `run` from directory `dir`, checking
/// search permission on each directory it crosses: the directory reached and the
/// bytes of `run` it covered. An answer that does not account for every name it
/// covered is not used (the walk looks them up itself).
#[inline]
fn answered<I: PathIndex>(
    ix: &I,
    dir: u64,
    run: &[u8],
    cred: &Cred,
) -> Result<Option<(u64, usize)>> {
    let ns = ix.namespace();
    let mut crossed = 0usize;
    let found = ix.prefix(dir, run, cred, |d| {
        crossed += 1;
        ns.op(|| ns.may(d, cred, perm::X))
    })?;
    let Some(p) = found.filter(|p| p.len > 0 && p.len <= run.len()) else {
        return Ok(None);
    };
    let whole = p.len == run.len() || run[p.len] == b'/';
    if !whole || (!p.searched && components(&run[..p.len]).count() != crossed) {
        debug_assert!(
            false,
            "an index answered {p:?} of {run:?} crossing {crossed}"
        );
        return Ok(None);
    }
    Ok(Some((p.ino, p.len)))
}

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

/// Where the last name of `path` starts (its length if it has none).
fn last_name_start(path: &[u8]) -> usize {
    let named = trim_slashes(path);
    named
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(if named.is_empty() { path.len() } else { 0 }, |i| i + 1)
}

/// `p` without the '/'s that end it.
fn trim_slashes(p: &[u8]) -> &[u8] {
    let end = p.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    &p[..end]
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

/// [`Walked`] with the last name borrowed from the path walked.
pub(crate) struct WalkedRef<'p> {
    pub parent: u64,
    pub name: &'p [u8],
    pub trailing_slash: bool,
}

impl WalkedRef<'_> {
    fn into_owned(self) -> Walked {
        Walked {
            parent: self.parent,
            name: self.name.to_vec(),
            trailing_slash: self.trailing_slash,
        }
    }
}

/// What a walk of `b` would give when `a`, walked to `wa`, ends in a plain name and
/// `b` is the same leading bytes with another plain name: `b`'s parent is `wa`'s (the
/// same directories, walked as one instant). A rename within one directory walks
/// its second path no more. `None` when `b` must be walked itself.
pub(crate) fn sibling<'p>(a: &[u8], wa: &WalkedRef<'_>, b: &'p [u8]) -> Option<WalkedRef<'p>> {
    // The walk's name is the end of `a` itself (no trailing slash): no compare.
    let start = a.len().checked_sub(wa.name.len())?;
    if wa.name.is_empty()
        || wa.trailing_slash
        || !std::ptr::eq(a[start..].as_ptr(), wa.name.as_ptr())
    {
        return None;
    }
    if b.len() <= start || b.len() >= PATH_MAX || b[..start] != a[..start] {
        return None;
    }
    let name = &b[start..];
    let plain = name.len() <= crate::format::dentry::NAME_MAX
        && name != b"."
        && name != b".."
        && !name.iter().any(|&c| c == b'/' || c == 0);
    plain.then_some(WalkedRef {
        parent: wa.parent,
        name,
        trailing_slash: false,
    })
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
pub fn resolve<I: PathIndex>(
    ix: &I,
    base: u64,
    path: &[u8],
    follow: bool,
    cred: &Cred,
    scope: Scope,
) -> Result<u64> {
    let mut links = 0;
    let w = walk_parent_ref(ix, base, path, cred, &mut links, scope)?;
    // The common case without a copy of the last name: it is not a symlink to follow.
    if !w.name.is_empty() && !w.trailing_slash {
        let ns = ix.namespace();
        let ino = ns.lookup(w.parent, w.name, cred)?;
        if !follow || !is_symlink(ns.mode(ino)) {
            return Ok(ino);
        }
        let found = Resolved {
            ino,
            last: Some((w.parent, w.name.to_vec())),
        };
        return finish(ix, found, true, false, cred, &mut links, scope).map(|r| r.ino);
    }
    resolved_from(ix, w, cred, follow, &mut links, scope).map(|r| r.ino)
}

/// Where a path led: the inode, and the directory and name of the last lookup that
/// found it (none when the path ended at a directory itself, like "/" or "a/..").
pub struct Resolved {
    pub ino: u64,
    pub last: Option<(u64, Vec<u8>)>,
}

/// [`resolve`], telling also through which name the inode was found last.
pub fn resolve_last<I: PathIndex>(
    ix: &I,
    base: u64,
    path: &[u8],
    follow: bool,
    cred: &Cred,
    scope: Scope,
) -> Result<Resolved> {
    let mut links = 0;
    let w = walk_parent_ref(ix, base, path, cred, &mut links, scope)?;
    resolved_from(ix, w, cred, follow, &mut links, scope)
}

/// The rest of [`resolve_last`] once the walk reached `w`.
fn resolved_from<I: PathIndex>(
    ix: &I,
    w: WalkedRef<'_>,
    cred: &Cred,
    follow: bool,
    links: &mut u32,
    scope: Scope,
) -> Result<Resolved> {
    let found = found_at(ix.namespace(), w.parent, w.name.to_vec(), cred)?;
    let rest: &[u8] = if w.trailing_slash { b"/" } else { b"" };
    finish(
        ix,
        found,
        follow || w.trailing_slash,
        w.trailing_slash,
        cred,
        links,
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

fn finish<I: PathIndex>(
    ix: &I,
    mut r: Resolved,
    follow: bool,
    want_dir: bool,
    cred: &Cred,
    links: &mut u32,
    scope: Scope,
) -> Result<Resolved> {
    let ns = ix.namespace();
    while follow && is_symlink(ns.mode(r.ino)) {
        *links += 1;
        if *links > SYMLOOP_MAX {
            return Err(errno::ELOOP);
        }
        let target = ns.readlink(r.ino)?;
        // A relative target starts in the directory that holds the link.
        let from = r.last.as_ref().map_or(r.ino, |(dir, _)| *dir);
        let w = walk_parent(ix, from, &target, cred, links, scope)?;
        r = found_at(ns, w.parent, w.name, cred)?;
    }
    if want_dir && !is_dir(ns.mode(r.ino)) {
        return Err(errno::ENOTDIR);
    }
    Ok(r)
}

/// Resolve every component but the last; return the parent and the last name
/// (empty when the path names a directory itself, like "/" or "a/..").
pub fn walk_parent<I: PathIndex>(
    ix: &I,
    base: u64,
    path: &[u8],
    cred: &Cred,
    links: &mut u32,
    scope: Scope,
) -> Result<Walked> {
    walk_parent_ref(ix, base, path, cred, links, scope).map(WalkedRef::into_owned)
}

/// [`walk_parent`] with the last name borrowed from `path`.
fn walk_parent_ref<'p, I: PathIndex>(
    ix: &I,
    base: u64,
    path: &'p [u8],
    cred: &Cred,
    links: &mut u32,
    scope: Scope,
) -> Result<WalkedRef<'p>> {
    check_path(path)?;
    let ns = ix.namespace();
    let absolute = path[0] == b'/';
    if absolute && scope == Scope::Mounted {
        return Err(Error::Outside(path.to_vec()));
    }
    let mut cur = if absolute { ROOT_INO } else { base };
    let trailing_slash = path.ends_with(b"/");
    // Where the last name starts: an index answers runs of the names before it.
    let last = if I::ANSWERS_RUNS {
        last_name_start(path)
    } else {
        0
    };
    let mut comps = components(path).peekable();
    while let Some((c, rest)) = comps.next() {
        if c == b".." && cur == ROOT_INO && scope == Scope::Mounted {
            return Err(outside(c, rest));
        }
        if comps.peek().is_some() {
            if I::ANSWERS_RUNS {
                // From `c` up to the last name.
                let from = path.len() - rest.len() - c.len();
                if let Some((ino, len)) = answered(ix, cur, trim_slashes(&path[from..last]), cred)?
                {
                    cur = ino;
                    comps = components(&path[from + len..]).peekable();
                    continue;
                }
            }
            cur = step(ix, cur, c, cred, links, scope).map_err(|e| beyond(e, rest))?;
            continue;
        }
        // The last component: the caller's operation checks the parent itself.
        return match c {
            b"." => Ok(WalkedRef {
                parent: cur,
                name: &[],
                trailing_slash,
            }),
            b".." => Ok(WalkedRef {
                parent: ns.lookup(cur, c, cred)?,
                name: &[],
                trailing_slash,
            }),
            name if name.len() > crate::format::dentry::NAME_MAX => Err(errno::ENAMETOOLONG),
            name => Ok(WalkedRef {
                parent: cur,
                name,
                trailing_slash,
            }),
        };
    }
    Ok(WalkedRef {
        parent: cur,
        name: &[],
        trailing_slash,
    })
}

/// One component in the middle of a path: must end at a directory.
fn step<I: PathIndex>(
    ix: &I,
    cur: u64,
    comp: &[u8],
    cred: &Cred,
    links: &mut u32,
    scope: Scope,
) -> Result<u64> {
    if comp.len() > crate::format::dentry::NAME_MAX {
        return Err(errno::ENAMETOOLONG);
    }
    let ns = ix.namespace();
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
    finish(ix, found, true, true, cred, links, scope).map(|r| r.ino)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::HashMap;

    use super::*;
    use crate::api::Fs;
    use crate::pmem::PmemBackend;
    use crate::MkfsOptions;

    /// A test index standing in for full-path areas: every run of names between two
    /// directories it was shown, with the directories the run crosses, answered in one
    /// probe (the longest run it knows at the start of what it is asked); anything else
    /// it leaves to the component walk.
    struct PrefixCache<'a> {
        ns: &'a Namespace<PmemBackend>,
        known: HashMap<(u64, Vec<u8>), (u64, Vec<u64>)>,
        answers: Cell<u32>,
    }

    impl<'a> PrefixCache<'a> {
        /// Learn the directories `dirs` (paths from the root, walked as root).
        fn new(ns: &'a Namespace<PmemBackend>, dirs: &[&str]) -> Self {
            let mut known = HashMap::new();
            for d in dirs {
                let names: Vec<&[u8]> = components(d.as_bytes()).map(|(c, _)| c).collect();
                let mut inos = vec![ROOT_INO];
                for n in &names {
                    let next = ns.lookup(*inos.last().unwrap(), n, &Cred::root()).unwrap();
                    inos.push(next);
                }
                for i in 0..names.len() {
                    for j in i + 1..=names.len() {
                        let key = (inos[i], names[i..j].join(&b'/'));
                        known.insert(key, (inos[j], inos[i..j].to_vec()));
                    }
                }
            }
            PrefixCache {
                ns,
                known,
                answers: Cell::new(0),
            }
        }
    }

    impl PathIndex for PrefixCache<'_> {
        type Backend = PmemBackend;
        const ANSWERS_RUNS: bool = true;
        fn namespace(&self) -> &Namespace<PmemBackend> {
            self.ns
        }
        fn prefix(
            &self,
            dir: u64,
            run: &[u8],
            _cred: &Cred,
            mut search: impl FnMut(u64) -> Result<()>,
        ) -> Result<Option<Prefix>> {
            let ends: Vec<usize> = components(run)
                .map(|(_, rest)| run.len() - rest.len())
                .collect();
            for &len in ends.iter().rev() {
                let names: Vec<&[u8]> = components(&run[..len]).map(|(c, _)| c).collect();
                if let Some((ino, crossed)) = self.known.get(&(dir, names.join(&b'/'))) {
                    self.answers.set(self.answers.get() + 1);
                    for &d in crossed {
                        search(d)?;
                    }
                    return Ok(Some(Prefix {
                        ino: *ino,
                        len,
                        searched: false,
                    }));
                }
            }
            Ok(None)
        }
    }

    /// What a resolution gave, comparable: the inode and the last lookup, or the error.
    fn outcome<I: PathIndex>(
        ix: &I,
        path: &str,
        follow: bool,
        cred: &Cred,
        scope: Scope,
    ) -> String {
        match resolve_last(ix, ROOT_INO, path.as_bytes(), follow, cred, scope) {
            Ok(r) => format!("{} {:?}", r.ino, r.last),
            Err(e) => format!("{e:?}"),
        }
    }

    const PATHS: &[&str] = &[
        "/a/b/c/d/f",
        "a/b/c/d/f",
        "/a//b///c/d//f",
        "/a/b/c/d",
        "/a/b/c/d/",
        "/a/b/c/d/f/",
        "/a/b/c/nd/x",
        "/a/b/missing/d/f",
        "/a/b/lnk/f",
        "/a/b/lnk/../nd",
        "/a/b/c/d/../../c/./d/f",
        "/a/b/up/a/b/c",
        "/a/b/abs/d/f",
        "/a/b/secret/x/y",
        "/a/b/secret/x/y/z",
        "/../a/b",
        "a/b/c/../../../../a",
        "/a/b/c/d/f/g/h",
    ];

    fn tree() -> Fs<PmemBackend> {
        let fs = Fs::in_memory(&MkfsOptions::new(16 << 20), PmemBackend::default()).unwrap();
        let s = fs.session(Cred::root());
        for d in ["/a", "/a/b", "/a/b/c", "/a/b/c/d", "/a/b/secret"] {
            s.mkdir(d, 0o755).unwrap();
        }
        for d in ["/a/b/secret/x", "/a/b/secret/x/y"] {
            s.mkdir(d, 0o755).unwrap();
        }
        s.chmod("/a/b/secret", 0o700).unwrap();
        for f in ["/a/b/c/d/f", "/a/b/c/nd"] {
            let fd = s.create(f, 0o644).unwrap();
            fs.close_fd(fd).unwrap();
        }
        s.symlink("c/d", "/a/b/lnk").unwrap();
        s.symlink("../..", "/a/b/up").unwrap();
        s.symlink("/a/b/c", "/a/b/abs").unwrap();
        drop(s);
        fs
    }

    const DIRS: &[&str] = &["a/b/c/d", "a/b/secret/x/y"];

    /// An index that answers runs of names in one probe, falling back to the walk for
    /// the rest, resolves every path as the component walk does: the same inodes, the
    /// same errors (EACCES for a user without search permission on a middle directory
    /// the index could answer past, ENOTDIR, ENOENT, ELOOP), and the same exits from a
    /// mounted scope.
    #[test]
    fn an_index_answering_prefixes_resolves_as_the_component_walk() {
        let fs = tree();
        let ns = fs.ns();
        let cache = PrefixCache::new(ns, DIRS);
        let user = Cred::user(1000, 1000);
        for cred in [Cred::root(), user] {
            for scope in [Scope::Pool, Scope::Mounted] {
                for follow in [true, false] {
                    for p in PATHS {
                        let walk = outcome(ns, p, follow, &cred, scope);
                        let fast = outcome(&cache, p, follow, &cred, scope);
                        assert_eq!(fast, walk, "{p} as {} in {scope:?}", cred.uid);
                    }
                }
            }
        }
        assert!(
            cache.answers.get() > 50,
            "the index answered {}",
            cache.answers.get()
        );
        let denied = outcome(
            &cache,
            "/a/b/secret/x/y",
            true,
            &Cred::user(1000, 1000),
            Scope::Pool,
        );
        assert_eq!(denied, format!("{:?}", errno::EACCES));
    }

    /// A second path `sibling` answers from the first one's walk is walked to the
    /// same parent, name and trailing slash; it answers the common rename within one
    /// directory and leaves anything else to the walk.
    #[test]
    fn a_sibling_is_where_its_own_walk_leads() {
        let fs = tree();
        let ns = fs.ns();
        let long = format!("/a/b/c/{}", "n".repeat(256));
        let paths = [
            "/a/b/c/x",
            "/a/b/c/y",
            "/a/b/c/",
            "/a/b/c/.",
            "/a/b/c/..",
            "/a/b/c//y",
            "/a/b/c/y/",
            "/a/b/lnk/z",
            "/a/b/lnk/f",
            "/a/b/up/q",
            "/a/b/c/d/f",
            "x",
            "y",
            "./y",
            "/a/b/c/x/y",
            "/a/b/c/n\0",
            "/",
            &long,
        ];
        let mut used = 0;
        for a in paths {
            for b in paths {
                let mut links = 0;
                let cred = Cred::root();
                let Ok(wa) =
                    walk_parent_ref(ns, ROOT_INO, a.as_bytes(), &cred, &mut links, Scope::Pool)
                else {
                    continue;
                };
                let Some(sb) = sibling(a.as_bytes(), &wa, b.as_bytes()) else {
                    continue;
                };
                used += 1;
                let wb =
                    walk_parent_ref(ns, ROOT_INO, b.as_bytes(), &cred, &mut links, Scope::Pool)
                        .unwrap();
                assert_eq!(
                    (sb.parent, sb.name, sb.trailing_slash),
                    (wb.parent, wb.name, wb.trailing_slash),
                    "{a} then {b}"
                );
            }
        }
        let mut links = 0;
        let wa = walk_parent_ref(
            ns,
            ROOT_INO,
            b"/a/b/c/x",
            &Cred::root(),
            &mut links,
            Scope::Pool,
        )
        .unwrap();
        assert!(sibling(b"/a/b/c/x", &wa, b"/a/b/c/y").is_some());
        assert!(used >= 4, "answered {used}");
    }

    /// Search permission taken away after the index learnt a run is checked on the
    /// index's answer too: the permission is the walk's, not the index's.
    #[test]
    fn a_chmod_after_the_index_learnt_a_run_still_denies_the_search() {
        let fs = tree();
        let cache = PrefixCache::new(fs.ns(), DIRS);
        let user = Cred::user(1000, 1000);
        let before = outcome(&cache, "/a/b/c/d/f", true, &user, Scope::Pool);
        assert!(!before.contains("Errno"), "{before}");
        fs.session(Cred::root()).chmod("/a/b", 0o700).unwrap();
        let answers = cache.answers.get();
        let after = outcome(&cache, "/a/b/c/d/f", true, &user, Scope::Pool);
        assert!(cache.answers.get() > answers, "the index answered");
        assert_eq!(after, format!("{:?}", errno::EACCES));
        assert_eq!(
            after,
            outcome(fs.ns(), "/a/b/c/d/f", true, &user, Scope::Pool)
        );
    }
}
