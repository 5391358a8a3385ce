//! The reference model: an in-memory POSIX file system with Linux's semantics and
//! errnos, for a caller who is root. It is deliberately naive (a tree of maps, whole
//! files as byte vectors) so that it is easy to check by reading against the Linux
//! sources (`fs/namei.c`: `do_renameat2`, `do_linkat`, `open_last_lookups`,
//! `do_unlinkat`, `do_rmdir`; `mm/shmem.c` for fallocate) and against tmpfs itself
//! (the host oracle in `tests/model.rs`).

use std::collections::BTreeMap;

use super::{Kind, St, Target, R};

pub const ROOT: u64 = 1;
const SYMLOOP_MAX: u32 = 40;

#[derive(Clone, Debug)]
enum Body {
    File(Vec<u8>),
    Dir {
        entries: BTreeMap<String, u64>,
        parent: u64,
    },
    Link(String),
}

#[derive(Clone, Debug)]
struct Node {
    body: Body,
    perm: u32,
    xattrs: BTreeMap<String, Vec<u8>>,
}

/// How a path ends after its parent is resolved.
enum Last {
    Name(String),
    /// "/", "." or a path of only slashes and dots: the parent itself.
    Itself,
    DotDot,
}

struct Walk {
    parent: u64,
    last: Last,
}

#[derive(Clone, Debug)]
pub struct Model {
    nodes: BTreeMap<u64, Node>,
    next: u64,
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

impl Model {
    pub fn new() -> Model {
        let root = Node {
            body: Body::Dir {
                entries: BTreeMap::new(),
                parent: ROOT,
            },
            perm: 0o755,
            xattrs: BTreeMap::new(),
        };
        Model {
            nodes: BTreeMap::from([(ROOT, root)]),
            next: ROOT + 1,
        }
    }

    fn node(&self, ino: u64) -> &Node {
        &self.nodes[&ino]
    }

    fn node_mut(&mut self, ino: u64) -> &mut Node {
        self.nodes.get_mut(&ino).expect("live node")
    }

    fn kind(&self, ino: u64) -> Kind {
        match self.node(ino).body {
            Body::File(_) => Kind::File,
            Body::Dir { .. } => Kind::Dir,
            Body::Link(_) => Kind::Symlink,
        }
    }

    fn is_dir(&self, ino: u64) -> bool {
        self.kind(ino) == Kind::Dir
    }

    fn entries(&self, dir: u64) -> &BTreeMap<String, u64> {
        match &self.node(dir).body {
            Body::Dir { entries, .. } => entries,
            _ => panic!("{dir} is not a directory"),
        }
    }

    fn entries_mut(&mut self, dir: u64) -> &mut BTreeMap<String, u64> {
        match &mut self.node_mut(dir).body {
            Body::Dir { entries, .. } => entries,
            _ => panic!("{dir} is not a directory"),
        }
    }

    fn parent_of(&self, dir: u64) -> u64 {
        match self.node(dir).body {
            Body::Dir { parent, .. } => parent,
            _ => panic!("{dir} is not a directory"),
        }
    }

    fn set_parent(&mut self, dir: u64, new: u64) {
        if let Body::Dir { parent, .. } = &mut self.node_mut(dir).body {
            *parent = new;
        }
    }

    fn child(&self, dir: u64, name: &str) -> Option<u64> {
        self.entries(dir).get(name).copied()
    }

    fn alloc(&mut self, body: Body, perm: u32) -> u64 {
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                body,
                perm,
                xattrs: BTreeMap::new(),
            },
        );
        ino
    }

    /// Links to `ino`: a directory has "." and its entry in its parent (2) plus one
    /// ".." per subdirectory; anything else one per name.
    fn nlink(&self, ino: u64) -> u64 {
        if self.is_dir(ino) {
            let subdirs = self
                .entries(ino)
                .values()
                .filter(|&&c| self.is_dir(c))
                .count();
            return 2 + subdirs as u64;
        }
        self.nodes
            .values()
            .filter_map(|n| match &n.body {
                Body::Dir { entries, .. } => Some(entries.values().filter(|&&c| c == ino).count()),
                _ => None,
            })
            .sum::<usize>() as u64
    }

    /// Forget `ino` once no name refers to it (nothing keeps files open across steps).
    fn collect(&mut self, ino: u64) {
        let named = self.nodes.values().any(|n| match &n.body {
            Body::Dir { entries, .. } => entries.values().any(|&c| c == ino),
            _ => false,
        });
        if !named && ino != ROOT {
            self.nodes.remove(&ino);
        }
    }

    // ---- path resolution (Linux's link_path_walk) ----

    fn walk(&self, start: u64, path: &str, links: &mut u32) -> R<Walk> {
        if path.is_empty() {
            return Err(libc::ENOENT);
        }
        let mut cur = if path.starts_with('/') { ROOT } else { start };
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let Some((last, middle)) = comps.split_last() else {
            return Ok(Walk {
                parent: cur,
                last: Last::Itself,
            });
        };
        for c in middle {
            cur = self.step(cur, c, links)?;
        }
        let last = match *last {
            "." => Last::Itself,
            ".." => Last::DotDot,
            n => Last::Name(n.to_string()),
        };
        Ok(Walk { parent: cur, last })
    }

    /// One middle component: it must lead (through symlinks) to a directory.
    fn step(&self, cur: u64, comp: &str, links: &mut u32) -> R<u64> {
        match comp {
            "." => Ok(cur),
            ".." => Ok(self.parent_of(cur)),
            name => {
                let ino = self.child(cur, name).ok_or(libc::ENOENT)?;
                let ino = self.follow(ino, cur, links)?;
                if self.is_dir(ino) {
                    Ok(ino)
                } else {
                    Err(libc::ENOTDIR)
                }
            }
        }
    }

    fn last_ino(&self, w: &Walk) -> R<u64> {
        match &w.last {
            Last::Name(n) => self.child(w.parent, n).ok_or(libc::ENOENT),
            Last::Itself => Ok(w.parent),
            Last::DotDot => Ok(self.parent_of(w.parent)),
        }
    }

    /// Follow `ino` (found in directory `dir`) while it is a symlink.
    fn follow(&self, mut ino: u64, mut dir: u64, links: &mut u32) -> R<u64> {
        while let Body::Link(target) = &self.node(ino).body {
            *links += 1;
            if *links > SYMLOOP_MAX {
                return Err(libc::ELOOP);
            }
            let w = self.walk(dir, target, links)?;
            ino = self.last_ino(&w)?;
            dir = w.parent;
        }
        Ok(ino)
    }

    fn resolve(&self, path: &str, follow: bool) -> R<u64> {
        let mut links = 0;
        let w = self.walk(ROOT, path, &mut links)?;
        let ino = self.last_ino(&w)?;
        if follow {
            self.follow(ino, w.parent, &mut links)
        } else {
            Ok(ino)
        }
    }

    /// open(2) with O_CREAT, as `open_last_lookups` does it: an existing symlink is
    /// followed (unless O_EXCL) and the create repeated at its target, so a dangling
    /// symlink creates its target.
    fn open_create(
        &mut self,
        start: u64,
        path: &str,
        flags: i32,
        mode: u32,
        links: &mut u32,
    ) -> R<u64> {
        let w = self.walk(start, path, links)?;
        // "." or "..": do_open's checks, O_EXCL first.
        let Last::Name(name) = w.last else {
            return Err(if flags & libc::O_EXCL != 0 {
                libc::EEXIST
            } else {
                libc::EISDIR
            });
        };
        let Some(ino) = self.child(w.parent, &name) else {
            let ino = self.alloc(Body::File(Vec::new()), mode & 0o7777);
            self.entries_mut(w.parent).insert(name, ino);
            return Ok(ino);
        };
        if flags & libc::O_EXCL != 0 {
            return Err(libc::EEXIST);
        }
        match &self.node(ino).body {
            Body::Link(target) => {
                *links += 1;
                if *links > SYMLOOP_MAX {
                    return Err(libc::ELOOP);
                }
                let target = target.clone();
                self.open_create(w.parent, &target, flags, mode, links)
            }
            Body::Dir { .. } => Err(libc::EISDIR),
            Body::File(_) => {
                if flags & libc::O_TRUNC != 0 {
                    self.node_mut(ino).body = Body::File(Vec::new());
                }
                Ok(ino)
            }
        }
    }

    /// An existing file opened for writing (open without O_CREAT).
    fn file_for_write(&self, path: &str) -> R<u64> {
        let ino = self.resolve(path, true)?;
        if self.is_dir(ino) {
            return Err(libc::EISDIR);
        }
        Ok(ino)
    }

    fn contents_mut(&mut self, ino: u64) -> &mut Vec<u8> {
        match &mut self.node_mut(ino).body {
            Body::File(c) => c,
            _ => panic!("{ino} is not a file"),
        }
    }

    /// Is `anc` a proper ancestor of directory `dir`? If so, the child of `anc` on the
    /// way down to `dir` (the "trap" of Linux's `lock_rename`).
    fn trap(&self, anc: u64, dir: u64) -> Option<u64> {
        let mut cur = dir;
        while cur != ROOT {
            let up = self.parent_of(cur);
            if up == anc {
                return Some(cur);
            }
            cur = up;
        }
        None
    }

    fn remove_entry(&mut self, dir: u64, name: &str) {
        let ino = self.entries_mut(dir).remove(name).expect("entry to remove");
        self.collect(ino);
    }
}

impl Target for Model {
    fn mkdir(&mut self, p: &str, mode: u32) -> R<()> {
        let w = self.walk(ROOT, p, &mut 0)?;
        let Last::Name(name) = w.last else {
            return Err(libc::EEXIST);
        };
        if self.child(w.parent, &name).is_some() {
            return Err(libc::EEXIST);
        }
        // vfs_mkdir keeps only the permission and sticky bits; a set-group-ID parent
        // passes its bit on to a new directory (inode_init_owner).
        let inherit = self.node(w.parent).perm & libc::S_ISGID;
        let body = Body::Dir {
            entries: BTreeMap::new(),
            parent: w.parent,
        };
        let ino = self.alloc(body, mode & 0o1777 | inherit);
        self.entries_mut(w.parent).insert(name, ino);
        Ok(())
    }

    fn create(&mut self, p: &str, flags: i32, mode: u32) -> R<()> {
        self.open_create(ROOT, p, flags, mode, &mut 0).map(drop)
    }

    fn unlink(&mut self, p: &str) -> R<()> {
        let w = self.walk(ROOT, p, &mut 0)?;
        let Last::Name(name) = w.last else {
            return Err(libc::EISDIR);
        };
        let ino = self.child(w.parent, &name).ok_or(libc::ENOENT)?;
        if self.is_dir(ino) {
            return Err(libc::EISDIR);
        }
        self.remove_entry(w.parent, &name);
        Ok(())
    }

    fn rmdir(&mut self, p: &str) -> R<()> {
        let w = self.walk(ROOT, p, &mut 0)?;
        let name = match w.last {
            Last::Name(n) => n,
            Last::DotDot => return Err(libc::ENOTEMPTY),
            Last::Itself if p.split('/').all(|c| c.is_empty()) => return Err(libc::EBUSY),
            Last::Itself => return Err(libc::EINVAL),
        };
        let ino = self.child(w.parent, &name).ok_or(libc::ENOENT)?;
        if !self.is_dir(ino) {
            return Err(libc::ENOTDIR);
        }
        if !self.entries(ino).is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.remove_entry(w.parent, &name);
        Ok(())
    }

    /// `do_renameat2` then `vfs_rename` then shmem's rename, check for check.
    fn rename(&mut self, from: &str, to: &str, flags: u32) -> R<()> {
        let (noreplace, exchange) = (
            flags & libc::RENAME_NOREPLACE != 0,
            flags & libc::RENAME_EXCHANGE != 0,
        );
        if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 || (noreplace && exchange)
        {
            return Err(libc::EINVAL);
        }
        let ws = self.walk(ROOT, from, &mut 0)?;
        let wd = self.walk(ROOT, to, &mut 0)?;
        let Last::Name(sn) = ws.last else {
            return Err(libc::EBUSY);
        };
        let Last::Name(dn) = wd.last else {
            return Err(if noreplace { libc::EEXIST } else { libc::EBUSY });
        };
        let (sp, dp) = (ws.parent, wd.parent);
        let src = self.child(sp, &sn).ok_or(libc::ENOENT)?;
        let dst = self.child(dp, &dn);
        if noreplace && dst.is_some() {
            return Err(libc::EEXIST);
        }
        if exchange && dst.is_none() {
            return Err(libc::ENOENT);
        }
        if sp != dp {
            if let Some(t) = self.trap(sp, dp) {
                if t == src {
                    return Err(libc::EINVAL);
                }
            } else if let Some(t) = self.trap(dp, sp) {
                if dst == Some(t) {
                    return Err(if exchange {
                        libc::EINVAL
                    } else {
                        libc::ENOTEMPTY
                    });
                }
            }
        }
        if dst == Some(src) {
            return Ok(());
        }
        let src_dir = self.is_dir(src);
        if let (Some(d), false) = (dst, exchange) {
            match (src_dir, self.is_dir(d)) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                (true, true) if !self.entries(d).is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
        }
        match dst {
            Some(d) if exchange => {
                self.entries_mut(sp).insert(sn, d);
                self.entries_mut(dp).insert(dn, src);
                self.set_parent(d, sp);
                self.set_parent(src, dp);
            }
            _ => {
                self.entries_mut(sp).remove(&sn);
                if let Some(d) = self.entries_mut(dp).insert(dn, src) {
                    self.collect(d);
                }
                self.set_parent(src, dp);
            }
        }
        Ok(())
    }

    fn link(&mut self, old: &str, new: &str) -> R<()> {
        let src = self.resolve(old, false)?;
        let w = self.walk(ROOT, new, &mut 0)?;
        let Last::Name(name) = w.last else {
            return Err(libc::EEXIST);
        };
        if self.child(w.parent, &name).is_some() {
            return Err(libc::EEXIST);
        }
        if self.is_dir(src) {
            return Err(libc::EPERM);
        }
        self.entries_mut(w.parent).insert(name, src);
        Ok(())
    }

    fn symlink(&mut self, target: &str, p: &str) -> R<()> {
        let w = self.walk(ROOT, p, &mut 0)?;
        let Last::Name(name) = w.last else {
            return Err(libc::EEXIST);
        };
        if self.child(w.parent, &name).is_some() {
            return Err(libc::EEXIST);
        }
        if target.is_empty() {
            return Err(libc::ENOENT);
        }
        let ino = self.alloc(Body::Link(target.to_string()), 0o777);
        self.entries_mut(w.parent).insert(name, ino);
        Ok(())
    }

    fn readlink(&mut self, p: &str) -> R<String> {
        match &self.node(self.resolve(p, false)?).body {
            Body::Link(t) => Ok(t.clone()),
            _ => Err(libc::EINVAL),
        }
    }

    fn stat(&mut self, p: &str, follow: bool) -> R<St> {
        let ino = self.resolve(p, follow)?;
        let n = self.node(ino);
        let size = match &n.body {
            Body::File(c) => c.len() as u64,
            Body::Link(t) => t.len() as u64,
            Body::Dir { .. } => 0,
        };
        Ok(St {
            kind: self.kind(ino),
            perm: n.perm,
            size,
            nlink: self.nlink(ino),
            ino,
        })
    }

    fn pwrite(&mut self, p: &str, off: u64, data: &[u8]) -> R<usize> {
        let ino = self.file_for_write(p)?;
        if data.is_empty() {
            return Ok(0);
        }
        let c = self.contents_mut(ino);
        let end = off as usize + data.len();
        if c.len() < end {
            c.resize(end, 0);
        }
        c[off as usize..end].copy_from_slice(data);
        Ok(data.len())
    }

    fn pread(&mut self, p: &str, off: u64, len: usize) -> R<Vec<u8>> {
        let ino = self.resolve(p, true)?;
        match &self.node(ino).body {
            Body::File(c) => {
                let from = (off as usize).min(c.len());
                let to = (from + len).min(c.len());
                Ok(c[from..to].to_vec())
            }
            _ => Err(libc::EISDIR),
        }
    }

    fn truncate(&mut self, p: &str, len: u64) -> R<()> {
        let ino = self.resolve(p, true)?;
        if self.is_dir(ino) {
            return Err(libc::EISDIR);
        }
        self.contents_mut(ino).resize(len as usize, 0);
        Ok(())
    }

    fn fallocate(&mut self, p: &str, mode: i32, off: u64, len: u64) -> R<()> {
        let ino = self.file_for_write(p)?;
        if len == 0 {
            return Err(libc::EINVAL);
        }
        let c = self.contents_mut(ino);
        let end = (off + len) as usize;
        match mode {
            0 => {
                if c.len() < end {
                    c.resize(end, 0);
                }
            }
            libc::FALLOC_FL_KEEP_SIZE => {}
            m if m == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE => {
                let to = end.min(c.len());
                let from = (off as usize).min(to);
                c[from..to].fill(0);
            }
            _ => return Err(libc::EOPNOTSUPP),
        }
        Ok(())
    }

    fn setxattr(&mut self, p: &str, name: &str, value: &[u8], flags: i32) -> R<()> {
        let ino = self.resolve(p, true)?;
        let x = &mut self.node_mut(ino).xattrs;
        let exists = x.contains_key(name);
        if flags & libc::XATTR_CREATE != 0 && exists {
            return Err(libc::EEXIST);
        }
        if flags & libc::XATTR_REPLACE != 0 && !exists {
            return Err(libc::ENODATA);
        }
        x.insert(name.to_string(), value.to_vec());
        Ok(())
    }

    fn getxattr(&mut self, p: &str, name: &str) -> R<Vec<u8>> {
        let ino = self.resolve(p, true)?;
        self.node(ino)
            .xattrs
            .get(name)
            .cloned()
            .ok_or(libc::ENODATA)
    }

    fn listxattr(&mut self, p: &str) -> R<Vec<String>> {
        let ino = self.resolve(p, true)?;
        Ok(self.node(ino).xattrs.keys().cloned().collect())
    }

    fn removexattr(&mut self, p: &str, name: &str) -> R<()> {
        let ino = self.resolve(p, true)?;
        self.node_mut(ino)
            .xattrs
            .remove(name)
            .map(drop)
            .ok_or(libc::ENODATA)
    }

    fn chmod(&mut self, p: &str, mode: u32) -> R<()> {
        let ino = self.resolve(p, true)?;
        self.node_mut(ino).perm = mode & 0o7777;
        Ok(())
    }

    fn readdir(&mut self, p: &str) -> R<Vec<(String, Kind)>> {
        let ino = self.resolve(p, true)?;
        if !self.is_dir(ino) {
            return Err(libc::ENOTDIR);
        }
        Ok(self
            .entries(ino)
            .iter()
            .map(|(n, &c)| (n.clone(), self.kind(c)))
            .collect())
    }
}
