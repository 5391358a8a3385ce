//! `NullFs`: the "FUSE floor", an in-memory file system with no persistence at all.
//!
//! It exists to measure what the FUSE interface itself costs (kernel round trip,
//! `/dev/fuse` read/write, request decoding) so that LynxFS's real adapter can be
//! compared against it. Everything is kept as cheap as possible: one hash map from
//! inode number to node, directories as hash maps from name to inode, file data in a
//! `Vec<u8>`, and one mutex around the lot.
//!
//! The core operations live on [`Tree`] and return `Result<_, Errno>`, so they can be
//! unit-tested without a kernel; the `Filesystem` impl only locks, calls and replies.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// Largest file we accept. Bounds `Vec` growth so a write at a huge offset or a huge
/// truncate returns `EFBIG` instead of aborting the process on allocation failure.
pub const MAX_FILE_SIZE: u64 = 1 << 30;

/// Longest name we accept (the usual Linux `NAME_MAX`).
const NAME_MAX: usize = 255;

/// Block size reported by `stat` and `statfs`.
const BLOCK_SIZE: u32 = 4096;

/// Inode numbers are never reused, so every inode can have generation 0.
const GENERATION: Generation = Generation(0);

/// Every open gets the same handle: all per-file state lives on the inode.
const NO_HANDLE: FileHandle = FileHandle(0);

/// Readdir cookies 1 and 2 are "." and ".."; real entries start after them.
const FIRST_ENTRY_COOKIE: u64 = 3;

/// One directory entry: the inode it names and its stable readdir cookie.
#[derive(Debug, Clone, Copy)]
struct Entry {
    ino: u64,
    cookie: u64,
}

/// A directory's contents.
///
/// Entries are looked up by name (hash map) but listed by cookie (ordered map), so a
/// readdir that resumes at an offset neither skips nor repeats entries when others
/// were removed in between (as `rm -rf` and `std::fs::remove_dir_all` do).
#[derive(Debug)]
struct Dir {
    parent: u64,
    by_name: HashMap<OsString, Entry>,
    by_cookie: BTreeMap<u64, OsString>,
    next_cookie: u64,
}

impl Dir {
    fn new(parent: u64) -> Self {
        Dir {
            parent,
            by_name: HashMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_ENTRY_COOKIE,
        }
    }

    fn get(&self, name: &OsStr) -> Option<u64> {
        self.by_name.get(name).map(|e| e.ino)
    }

    fn insert(&mut self, name: &OsStr, ino: u64) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        if let Some(old) = self.by_name.insert(name.to_owned(), Entry { ino, cookie }) {
            self.by_cookie.remove(&old.cookie);
        }
        self.by_cookie.insert(cookie, name.to_owned());
    }

    fn remove(&mut self, name: &OsStr) -> Option<u64> {
        let entry = self.by_name.remove(name)?;
        self.by_cookie.remove(&entry.cookie);
        Some(entry.ino)
    }

    fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[derive(Debug)]
enum Content {
    File(Vec<u8>),
    Dir(Dir),
}

#[derive(Debug)]
struct Node {
    attr: FileAttr,
    content: Content,
    /// Open file handles. An unlinked file stays readable until its last close.
    open_count: u64,
}

/// The attribute changes `setattr` may carry; `None` means "leave alone".
#[derive(Debug, Default, Clone, Copy)]
pub struct AttrChanges {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
}

/// Who is creating a node: the request's credentials, used as the new owner.
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// One entry as listed by readdir: (cookie of this entry, inode, kind, name).
pub type DirListing = Vec<(u64, u64, FileType, OsString)>;

/// The whole file system state. All operations are plain methods returning `Errno`
/// on failure, independent of FUSE replies.
#[derive(Debug)]
pub struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

impl Default for Tree {
    fn default() -> Self {
        Self::new()
    }
}

impl Tree {
    /// A tree holding only the root directory (inode 1, mode 0755, owned by root).
    pub fn new() -> Self {
        let root_ino = INodeNo::ROOT.0;
        let mut attr = new_attr(
            root_ino,
            FileType::Directory,
            0o755,
            Owner { uid: 0, gid: 0 },
        );
        attr.nlink = 2;
        let root = Node {
            attr,
            content: Content::Dir(Dir::new(root_ino)),
            open_count: 0,
        };
        Tree {
            nodes: HashMap::from([(root_ino, root)]),
            next_ino: root_ino + 1,
        }
    }

    fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes.get(&ino).ok_or(Errno::ENOENT)
    }

    fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn dir(&self, ino: u64) -> Result<&Dir, Errno> {
        match &self.node(ino)?.content {
            Content::Dir(dir) => Ok(dir),
            Content::File(_) => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut Dir, Errno> {
        match &mut self.node_mut(ino)?.content {
            Content::Dir(dir) => Ok(dir),
            Content::File(_) => Err(Errno::ENOTDIR),
        }
    }

    fn file_mut(&mut self, ino: u64) -> Result<&mut Vec<u8>, Errno> {
        match &mut self.node_mut(ino)?.content {
            Content::File(data) => Ok(data),
            Content::Dir(_) => Err(Errno::EISDIR),
        }
    }

    pub fn getattr(&self, ino: u64) -> Result<FileAttr, Errno> {
        Ok(self.node(ino)?.attr)
    }

    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        let ino = self.dir(parent)?.get(name).ok_or(Errno::ENOENT)?;
        self.getattr(ino)
    }

    /// Creates a regular file or a directory named `name` in `parent`.
    pub fn create_node(
        &mut self,
        parent: u64,
        name: &OsStr,
        kind: FileType,
        perm: u16,
        owner: Owner,
    ) -> Result<FileAttr, Errno> {
        check_name(name)?;
        if self.dir(parent)?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let mut attr = new_attr(ino, kind, perm, owner);
        let content = match kind {
            FileType::Directory => {
                attr.nlink = 2;
                Content::Dir(Dir::new(parent))
            }
            _ => Content::File(Vec::new()),
        };
        self.nodes.insert(
            ino,
            Node {
                attr,
                content,
                open_count: 0,
            },
        );
        self.dir_mut(parent)?.insert(name, ino);
        let is_dir = kind == FileType::Directory;
        self.touch_parent(parent, if is_dir { 1 } else { 0 });
        Ok(attr)
    }

    /// Updates a directory's times after its entries changed, and its link count
    /// when a subdirectory (whose ".." points at it) came or went.
    fn touch_parent(&mut self, parent: u64, subdir_delta: i32) {
        if let Some(node) = self.nodes.get_mut(&parent) {
            let now = SystemTime::now();
            node.attr.mtime = now;
            node.attr.ctime = now;
            node.attr.nlink = node.attr.nlink.saturating_add_signed(subdir_delta);
        }
    }

    pub fn setattr(&mut self, ino: u64, changes: &AttrChanges) -> Result<FileAttr, Errno> {
        if let Some(size) = changes.size {
            self.truncate(ino, size)?;
        }
        let now = SystemTime::now();
        let attr = &mut self.node_mut(ino)?.attr;
        if let Some(mode) = changes.mode {
            attr.perm = perm_bits(mode);
        }
        if let Some(uid) = changes.uid {
            attr.uid = uid;
        }
        if let Some(gid) = changes.gid {
            attr.gid = gid;
        }
        if let Some(atime) = changes.atime {
            attr.atime = resolve_time(atime, now);
        }
        if let Some(mtime) = changes.mtime {
            attr.mtime = resolve_time(mtime, now);
        }
        attr.ctime = now;
        Ok(*attr)
    }

    fn truncate(&mut self, ino: u64, size: u64) -> Result<(), Errno> {
        let len = checked_len(size)?;
        let data = self.file_mut(ino)?;
        data.resize(len, 0);
        let now = SystemTime::now();
        let attr = &mut self.node_mut(ino)?.attr;
        set_size(attr, size);
        attr.mtime = now;
        Ok(())
    }

    pub fn open(&mut self, ino: u64) -> Result<(), Errno> {
        let node = self.node_mut(ino)?;
        node.open_count += 1;
        Ok(())
    }

    /// Drops one open handle, freeing the node if it was the last reference.
    pub fn release(&mut self, ino: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.open_count = node.open_count.saturating_sub(1);
            self.free_if_unreferenced(ino);
        }
    }

    fn free_if_unreferenced(&mut self, ino: u64) {
        let unreferenced = self
            .nodes
            .get(&ino)
            .is_some_and(|n| n.attr.nlink == 0 && n.open_count == 0);
        if unreferenced {
            self.nodes.remove(&ino);
        }
    }

    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<&[u8], Errno> {
        let data = match &self.node(ino)?.content {
            Content::File(data) => data,
            Content::Dir(_) => return Err(Errno::EISDIR),
        };
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let end = start.saturating_add(size as usize).min(data.len());
        Ok(&data[start..end])
    }

    pub fn write(&mut self, ino: u64, offset: u64, bytes: &[u8]) -> Result<u32, Errno> {
        let written = u32::try_from(bytes.len()).map_err(|_| Errno::EINVAL)?;
        let end = offset.checked_add(u64::from(written)).ok_or(Errno::EFBIG)?;
        let end_len = checked_len(end)?;
        let start = checked_len(offset)?;
        let data = self.file_mut(ino)?;
        if data.len() < end_len {
            data.resize(end_len, 0);
        }
        data[start..end_len].copy_from_slice(bytes);
        let new_size = data.len() as u64;
        let now = SystemTime::now();
        let attr = &mut self.node_mut(ino)?.attr;
        set_size(attr, new_size);
        attr.mtime = now;
        attr.ctime = now;
        Ok(written)
    }

    pub fn unlink(&mut self, parent: u64, name: &OsStr) -> Result<(), Errno> {
        let ino = self.dir(parent)?.get(name).ok_or(Errno::ENOENT)?;
        if self.node(ino)?.attr.kind == FileType::Directory {
            return Err(Errno::EISDIR);
        }
        self.dir_mut(parent)?.remove(name);
        self.touch_parent(parent, 0);
        self.drop_link(ino);
        Ok(())
    }

    pub fn rmdir(&mut self, parent: u64, name: &OsStr) -> Result<(), Errno> {
        let ino = self.dir(parent)?.get(name).ok_or(Errno::ENOENT)?;
        if !self.dir(ino)?.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        self.dir_mut(parent)?.remove(name);
        self.touch_parent(parent, -1);
        // A directory has no open-count bookkeeping of its own worth keeping: drop it.
        self.nodes.remove(&ino);
        Ok(())
    }

    /// Removes one name of `ino`; the node goes away once no name and no handle is left.
    fn drop_link(&mut self, ino: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.attr.nlink = node.attr.nlink.saturating_sub(1);
            node.attr.ctime = SystemTime::now();
        }
        self.free_if_unreferenced(ino);
    }

    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            return Err(Errno::EINVAL);
        }
        check_name(new_name)?;
        let ino = self.dir(parent)?.get(name).ok_or(Errno::ENOENT)?;
        self.dir(new_parent)?;
        let moving_dir = self.node(ino)?.attr.kind == FileType::Directory;
        if moving_dir && self.is_ancestor_or_self(ino, new_parent) {
            return Err(Errno::EINVAL);
        }
        if let Some(target) = self.dir(new_parent)?.get(new_name) {
            if target == ino {
                // Renaming a name onto itself (or a hard link of itself) is a no-op.
                return Ok(());
            }
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            self.remove_rename_target(new_parent, new_name, target, moving_dir)?;
        }
        self.dir_mut(parent)?.remove(name);
        self.dir_mut(new_parent)?.insert(new_name, ino);
        if moving_dir {
            self.dir_mut(ino)?.parent = new_parent;
        }
        let subdir_delta = if moving_dir { 1 } else { 0 };
        self.touch_parent(parent, -subdir_delta);
        self.touch_parent(new_parent, subdir_delta);
        self.node_mut(ino)?.attr.ctime = SystemTime::now();
        Ok(())
    }

    /// Checks that `target` may be replaced by a rename and removes it.
    fn remove_rename_target(
        &mut self,
        dir: u64,
        name: &OsStr,
        target: u64,
        moving_dir: bool,
    ) -> Result<(), Errno> {
        let target_is_dir = self.node(target)?.attr.kind == FileType::Directory;
        match (moving_dir, target_is_dir) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            (true, true) if !self.dir(target)?.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        if target_is_dir {
            self.rmdir(dir, name)
        } else {
            self.unlink(dir, name)
        }
    }

    /// Whether `ancestor` is `ino` or one of its ancestors (walking ".." to the root).
    fn is_ancestor_or_self(&self, ancestor: u64, mut ino: u64) -> bool {
        loop {
            if ino == ancestor {
                return true;
            }
            match self.dir(ino) {
                Ok(dir) if dir.parent != ino => ino = dir.parent,
                _ => return false,
            }
        }
    }

    /// Creates a symbolic link `name` in `parent` pointing at `target` (kept as the
    /// node's bytes, so its size is the target's length, as `lstat` reports).
    pub fn symlink(
        &mut self,
        parent: u64,
        name: &OsStr,
        target: &[u8],
        owner: Owner,
    ) -> Result<FileAttr, Errno> {
        let attr = self.create_node(parent, name, FileType::Symlink, 0o777, owner)?;
        let ino = attr.ino.0;
        *self.file_mut(ino)? = target.to_vec();
        let node = self.node_mut(ino)?;
        set_size(&mut node.attr, target.len() as u64);
        Ok(node.attr)
    }

    /// The target of symbolic link `ino`.
    pub fn readlink(&self, ino: u64) -> Result<&[u8], Errno> {
        let node = self.node(ino)?;
        match &node.content {
            Content::File(target) if node.attr.kind == FileType::Symlink => Ok(target),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Lists `ino` starting after cookie `offset` (0 = from the beginning).
    pub fn readdir(&self, ino: u64, offset: u64) -> Result<DirListing, Errno> {
        let dir = self.dir(ino)?;
        let dots = [(1, ino, "."), (2, dir.parent, "..")];
        let mut out: DirListing = dots
            .into_iter()
            .filter(|(cookie, _, _)| *cookie > offset)
            .map(|(cookie, ino, name)| (cookie, ino, FileType::Directory, name.into()))
            .collect();
        let start = offset.saturating_add(1).max(FIRST_ENTRY_COOKIE);
        for (&cookie, name) in dir.by_cookie.range(start..) {
            if let Some(entry) = dir.by_name.get(name) {
                let kind = self
                    .node(entry.ino)
                    .map_or(FileType::RegularFile, |n| n.attr.kind);
                out.push((cookie, entry.ino, kind, name.clone()));
            }
        }
        Ok(out)
    }

    /// (total bytes of file data, number of inodes)
    pub fn usage(&self) -> (u64, u64) {
        let bytes = self.nodes.values().map(|n| n.attr.size).sum();
        (bytes, self.nodes.len() as u64)
    }
}

fn new_attr(ino: u64, kind: FileType, perm: u16, owner: Owner) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: 1,
        uid: owner.uid,
        gid: owner.gid,
        rdev: 0,
        blksize: BLOCK_SIZE,
        flags: 0,
    }
}

fn set_size(attr: &mut FileAttr, size: u64) {
    attr.size = size;
    attr.blocks = size.div_ceil(512);
}

fn perm_bits(mode: u32) -> u16 {
    // The mask keeps only the 12 permission bits, which always fit in u16.
    (mode & 0o7777) as u16
}

fn resolve_time(t: TimeOrNow, now: SystemTime) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => now,
    }
}

/// A file length as `usize`, or `EFBIG` past [`MAX_FILE_SIZE`].
fn checked_len(size: u64) -> Result<usize, Errno> {
    if size > MAX_FILE_SIZE {
        return Err(Errno::EFBIG);
    }
    usize::try_from(size).map_err(|_| Errno::EFBIG)
}

fn check_name(name: &OsStr) -> Result<(), Errno> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

/// The file type a `mknod`/`create` mode asks for; only regular files are supported.
fn regular_file_mode(mode: u32) -> Result<(), Errno> {
    let fmt = mode & libc::S_IFMT;
    if fmt == 0 || fmt == libc::S_IFREG {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

/// The FUSE file system: a [`Tree`] behind a mutex, plus the cache TTL to hand the
/// kernel with every entry and attribute reply.
#[derive(Debug)]
pub struct NullFs {
    ttl: Duration,
    tree: Mutex<Tree>,
}

impl NullFs {
    /// `ttl` is how long the kernel may cache entries and attributes; the benchmark
    /// uses zero, so every path walk and `stat` reaches this process.
    pub fn new(ttl: Duration) -> Self {
        NullFs {
            ttl,
            tree: Mutex::new(Tree::new()),
        }
    }

    fn tree(&self) -> MutexGuard<'_, Tree> {
        // A panic while holding the lock cannot leave the maps half-updated in a way
        // that matters for a scratch file system, so keep serving instead of failing.
        self.tree
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn reply_entry(&self, result: Result<FileAttr, Errno>, reply: ReplyEntry) {
        match result {
            Ok(attr) => reply.entry(&self.ttl, &attr, GENERATION),
            Err(e) => reply.error(e),
        }
    }

    fn reply_attr(&self, result: Result<FileAttr, Errno>, reply: ReplyAttr) {
        match result {
            Ok(attr) => reply.attr(&self.ttl, &attr),
            Err(e) => reply.error(e),
        }
    }
}

fn reply_empty(result: Result<(), Errno>, reply: ReplyEmpty) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn reply_open(result: Result<(), Errno>, reply: ReplyOpen) {
    match result {
        Ok(()) => reply.opened(NO_HANDLE, FopenFlags::empty()),
        Err(e) => reply.error(e),
    }
}

fn owner_of(req: &Request) -> Owner {
    Owner {
        uid: req.uid(),
        gid: req.gid(),
    }
}

/// Applies the umask the kernel passed along (it does not apply it itself for FUSE).
fn perm_with_umask(mode: u32, umask: u32) -> u16 {
    perm_bits(mode & !umask)
}

impl Filesystem for NullFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let result = self.tree().lookup(parent.0, name);
        self.reply_entry(result, reply);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let result = self.tree().getattr(ino.0);
        self.reply_attr(result, reply);
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let changes = AttrChanges {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        let result = self.tree().setattr(ino.0, &changes);
        self.reply_attr(result, reply);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let result = regular_file_mode(mode).and_then(|()| {
            let perm = perm_with_umask(mode, umask);
            self.tree()
                .create_node(parent.0, name, FileType::RegularFile, perm, owner_of(req))
        });
        self.reply_entry(result, reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let result = regular_file_mode(mode).and_then(|()| {
            let perm = perm_with_umask(mode, umask);
            let mut tree = self.tree();
            let attr =
                tree.create_node(parent.0, name, FileType::RegularFile, perm, owner_of(req))?;
            tree.open(attr.ino.0)?;
            Ok(attr)
        });
        match result {
            Ok(attr) => reply.created(&self.ttl, &attr, GENERATION, NO_HANDLE, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let perm = perm_with_umask(mode, umask);
        let result =
            self.tree()
                .create_node(parent.0, name, FileType::Directory, perm, owner_of(req));
        self.reply_entry(result, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        use std::os::unix::ffi::OsStrExt;
        let target = target.as_os_str().as_bytes();
        let result = self
            .tree()
            .symlink(parent.0, link_name, target, owner_of(req));
        self.reply_entry(result, reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.tree().readlink(ino.0) {
            Ok(target) => reply.data(target),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(self.tree().unlink(parent.0, name), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(self.tree().rmdir(parent.0, name), reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = self
            .tree()
            .rename(parent.0, name, newparent.0, newname, flags);
        reply_empty(result, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let result = {
            let mut tree = self.tree();
            match tree.getattr(ino.0) {
                Ok(attr) if attr.kind == FileType::Directory => Err(Errno::EISDIR),
                Ok(_) => tree.open(ino.0),
                Err(e) => Err(e),
            }
        };
        reply_open(result, reply);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let tree = self.tree();
        match tree.read(ino.0, offset, size) {
            Ok(bytes) => reply.data(bytes),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.tree().write(ino.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing is buffered; without this, every close(2) would log ENOSYS.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Memory only: there is nothing to make durable.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.tree().release(ino.0);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let result = self.tree().dir(ino.0).map(|_| ());
        reply_open(result, reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listing = match self.tree().readdir(ino.0, offset) {
            Ok(listing) => listing,
            Err(e) => return reply.error(e),
        };
        for (cookie, ino, kind, name) in listing {
            // `add` returns true when the kernel's buffer is full; the kernel will ask
            // again starting after the last cookie it received.
            if reply.add(INodeNo(ino), cookie, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Report a large, mostly free device so tools like `df` and `cp` are content.
        const TOTAL_BLOCKS: u64 = 1 << 28;
        const TOTAL_FILES: u64 = 1 << 32;
        let (bytes, files) = self.tree().usage();
        let used_blocks = bytes.div_ceil(u64::from(BLOCK_SIZE));
        let free_blocks = TOTAL_BLOCKS.saturating_sub(used_blocks);
        let free_files = TOTAL_FILES.saturating_sub(files);
        reply.statfs(
            TOTAL_BLOCKS,
            free_blocks,
            free_blocks,
            TOTAL_FILES,
            free_files,
            BLOCK_SIZE,
            NAME_MAX as u32,
            BLOCK_SIZE,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: u64 = 1;
    const ME: Owner = Owner { uid: 0, gid: 0 };

    fn name(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    fn mkfile(t: &mut Tree, parent: u64, n: &str) -> u64 {
        t.create_node(parent, name(n), FileType::RegularFile, 0o644, ME)
            .map(|a| a.ino.0)
            .unwrap()
    }

    fn mkdir(t: &mut Tree, parent: u64, n: &str) -> u64 {
        t.create_node(parent, name(n), FileType::Directory, 0o755, ME)
            .map(|a| a.ino.0)
            .unwrap()
    }

    #[test]
    fn create_lookup_and_errnos() {
        let mut t = Tree::new();
        let f = mkfile(&mut t, ROOT, "f");
        assert_eq!(t.lookup(ROOT, name("f")).unwrap().ino.0, f);
        assert_eq!(t.lookup(ROOT, name("x")), Err(Errno::ENOENT));
        let again = t.create_node(ROOT, name("f"), FileType::RegularFile, 0o644, ME);
        assert_eq!(again, Err(Errno::EEXIST));
        assert_eq!(t.lookup(f, name("x")), Err(Errno::ENOTDIR));
        assert_eq!(t.rmdir(ROOT, name("f")), Err(Errno::ENOTDIR));
        let d = mkdir(&mut t, ROOT, "d");
        assert_eq!(t.unlink(ROOT, name("d")), Err(Errno::EISDIR));
        assert_eq!(t.getattr(ROOT).unwrap().nlink, 3);
        mkfile(&mut t, d, "inner");
        assert_eq!(t.rmdir(ROOT, name("d")), Err(Errno::ENOTEMPTY));
    }

    #[test]
    fn write_read_truncate() {
        let mut t = Tree::new();
        let f = mkfile(&mut t, ROOT, "f");
        assert_eq!(t.write(f, 2, b"abc"), Ok(3));
        assert_eq!(t.read(f, 0, 100).unwrap(), b"\0\0abc");
        assert_eq!(t.read(f, 100, 10).unwrap(), b"");
        assert_eq!(t.read(f, u64::MAX, u32::MAX).unwrap(), b"");
        assert_eq!(t.write(f, u64::MAX, b"x"), Err(Errno::EFBIG));
        assert_eq!(t.write(f, MAX_FILE_SIZE, b"x"), Err(Errno::EFBIG));
        let shrink = AttrChanges {
            size: Some(1),
            ..Default::default()
        };
        assert_eq!(t.setattr(f, &shrink).unwrap().size, 1);
        let huge = AttrChanges {
            size: Some(u64::MAX),
            ..Default::default()
        };
        assert_eq!(t.setattr(f, &huge), Err(Errno::EFBIG));
        assert_eq!(t.setattr(ROOT, &shrink), Err(Errno::EISDIR));
    }

    #[test]
    fn unlinked_file_lives_until_release() {
        let mut t = Tree::new();
        let f = mkfile(&mut t, ROOT, "f");
        t.open(f).unwrap();
        t.unlink(ROOT, name("f")).unwrap();
        assert!(t.getattr(f).is_ok());
        t.release(f);
        assert_eq!(t.getattr(f), Err(Errno::ENOENT));
    }

    #[test]
    fn rename_rules() {
        let mut t = Tree::new();
        let a = mkdir(&mut t, ROOT, "a");
        let b = mkdir(&mut t, a, "b");
        mkfile(&mut t, ROOT, "f");
        let none = RenameFlags::empty();
        assert_eq!(
            t.rename(ROOT, name("a"), b, name("a"), none),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            t.rename(ROOT, name("f"), ROOT, name("a"), none),
            Err(Errno::EISDIR)
        );
        assert_eq!(
            t.rename(a, name("b"), ROOT, name("f"), none),
            Err(Errno::ENOTDIR)
        );
        mkdir(&mut t, ROOT, "c");
        assert_eq!(
            t.rename(ROOT, name("c"), ROOT, name("a"), none),
            Err(Errno::ENOTEMPTY)
        );
        let noreplace = RenameFlags::RENAME_NOREPLACE;
        mkfile(&mut t, ROOT, "g");
        assert_eq!(
            t.rename(ROOT, name("f"), ROOT, name("g"), noreplace),
            Err(Errno::EEXIST)
        );
        t.rename(ROOT, name("f"), ROOT, name("g"), none).unwrap();
        assert_eq!(t.lookup(ROOT, name("f")), Err(Errno::ENOENT));
        t.rename(a, name("b"), ROOT, name("b"), none).unwrap();
        assert_eq!(t.dir(b).unwrap().parent, ROOT);
        assert_eq!(t.getattr(a).unwrap().nlink, 2);
    }

    #[test]
    fn symlinks_keep_their_target() {
        let mut t = Tree::new();
        let owner = Owner { uid: 0, gid: 0 };
        let attr = t.symlink(ROOT, name("l"), b"some/target", owner).unwrap();
        assert_eq!(attr.kind, FileType::Symlink);
        assert_eq!(attr.size, 11);
        assert_eq!(t.readlink(attr.ino.0).unwrap(), b"some/target");
        assert_eq!(t.lookup(ROOT, name("l")).unwrap().ino, attr.ino);
        let f = mkfile(&mut t, ROOT, "f");
        assert_eq!(t.readlink(f), Err(Errno::EINVAL));
        assert_eq!(
            t.symlink(ROOT, name("l"), b"x", owner).unwrap_err(),
            Errno::EEXIST
        );
    }

    #[test]
    fn readdir_resumes_after_removals() {
        let mut t = Tree::new();
        for i in 0..5 {
            mkfile(&mut t, ROOT, &format!("f{i}"));
        }
        let first = t.readdir(ROOT, 0).unwrap();
        assert_eq!(first.len(), 7);
        let resume_after = first[3].0; // ".", "..", f0, f1
        t.unlink(ROOT, name("f0")).unwrap();
        t.unlink(ROOT, name("f1")).unwrap();
        let rest: Vec<_> = t.readdir(ROOT, resume_after).unwrap();
        let names: Vec<_> = rest.iter().map(|e| e.3.clone()).collect();
        assert_eq!(names, ["f2", "f3", "f4"]);
    }
}
