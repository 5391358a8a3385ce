//! The calls of the model tests as a [`Target`], so that the reference model
//! (`reference.rs`) can check them: LynxFS through an `Fs`, the operations, whole-tree
//! snapshots and their differences, and random operations on a process's own names.
//! Shared by `tests/model.rs` and `tests/multiprocess.rs` (each uses part of it).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs};

pub type R<T> = Result<T, i32>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

/// What stat reports that the model knows (`ino` only identifies, within one target).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct St {
    pub kind: Kind,
    pub perm: u32,
    pub size: u64,
    pub nlink: u64,
    pub ino: u64,
}

/// The calls under test, on absolute paths, as root.
pub trait Target {
    fn mkdir(&mut self, p: &str, mode: u32) -> R<()>;
    /// open(2) with O_CREAT (and `flags`), then close.
    fn create(&mut self, p: &str, flags: i32, mode: u32) -> R<()>;
    fn unlink(&mut self, p: &str) -> R<()>;
    fn rmdir(&mut self, p: &str) -> R<()>;
    fn rename(&mut self, from: &str, to: &str, flags: u32) -> R<()>;
    fn link(&mut self, old: &str, new: &str) -> R<()>;
    fn symlink(&mut self, target: &str, p: &str) -> R<()>;
    fn readlink(&mut self, p: &str) -> R<String>;
    fn stat(&mut self, p: &str, follow: bool) -> R<St>;
    /// open(O_WRONLY), pwrite, close.
    fn pwrite(&mut self, p: &str, off: u64, data: &[u8]) -> R<usize>;
    /// open(O_RDONLY), pread until `len` bytes or the end, close.
    fn pread(&mut self, p: &str, off: u64, len: usize) -> R<Vec<u8>>;
    fn truncate(&mut self, p: &str, len: u64) -> R<()>;
    /// open(O_WRONLY), fallocate, close.
    fn fallocate(&mut self, p: &str, mode: i32, off: u64, len: u64) -> R<()>;
    fn setxattr(&mut self, p: &str, name: &str, value: &[u8], flags: i32) -> R<()>;
    fn getxattr(&mut self, p: &str, name: &str) -> R<Vec<u8>>;
    /// Sorted.
    fn listxattr(&mut self, p: &str) -> R<Vec<String>>;
    fn removexattr(&mut self, p: &str, name: &str) -> R<()>;
    fn chmod(&mut self, p: &str, mode: u32) -> R<()>;
    /// Entries but "." and "..", in the target's order, with their d_type.
    fn readdir(&mut self, p: &str) -> R<Vec<(String, Kind)>>;
    /// Close and reopen (after a crash when `crash`); the state must not change.
    fn remount(&mut self, _crash: bool) -> R<()> {
        Ok(())
    }
}

pub fn kind_of(mode: u32) -> Kind {
    match mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

pub fn kind_of_dtype(t: u8) -> Kind {
    match t {
        libc::DT_REG => Kind::File,
        libc::DT_DIR => Kind::Dir,
        libc::DT_LNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

// ---------------------------------------------------------------------------------
// LynxFS as a target.

pub type LFs = Fs<PmemBackend>;

pub fn e<T>(r: lynxfs::Result<T>) -> R<T> {
    r.map_err(|e| e.errno())
}

/// The calls on a shared `Fs`.
#[derive(Clone, Copy)]
pub struct FsRef<'a>(pub &'a LFs);

impl FsRef<'_> {
    fn with_fd<T>(&self, p: &str, flags: i32, f: impl FnOnce(u64) -> R<T>) -> R<T> {
        let s = self.0.session(Cred::root());
        let fd = e(s.open(p, flags, 0))?;
        let r = f(fd);
        e(self.0.close_fd(fd))?;
        r
    }
}

impl Target for FsRef<'_> {
    fn mkdir(&mut self, p: &str, mode: u32) -> R<()> {
        e(self.0.session(Cred::root()).mkdir(p, mode))
    }
    fn create(&mut self, p: &str, flags: i32, mode: u32) -> R<()> {
        let fd = e(self.0.session(Cred::root()).open(p, flags, mode))?;
        e(self.0.close_fd(fd))
    }
    fn unlink(&mut self, p: &str) -> R<()> {
        e(self.0.session(Cred::root()).unlink(p))
    }
    fn rmdir(&mut self, p: &str) -> R<()> {
        e(self.0.session(Cred::root()).rmdir(p))
    }
    fn rename(&mut self, from: &str, to: &str, flags: u32) -> R<()> {
        e(self.0.session(Cred::root()).rename(from, to, flags))
    }
    fn link(&mut self, old: &str, new: &str) -> R<()> {
        e(self.0.session(Cred::root()).link(old, new))
    }
    fn symlink(&mut self, target: &str, p: &str) -> R<()> {
        e(self.0.session(Cred::root()).symlink(target, p))
    }
    fn readlink(&mut self, p: &str) -> R<String> {
        let t = e(self.0.session(Cred::root()).readlink(p))?;
        Ok(String::from_utf8(t).expect("targets are UTF-8"))
    }
    fn stat(&mut self, p: &str, follow: bool) -> R<St> {
        let s = self.0.session(Cred::root());
        let st = e(if follow { s.stat(p) } else { s.lstat(p) })?;
        Ok(St {
            kind: kind_of(st.mode),
            perm: st.mode & 0o7777,
            size: if kind_of(st.mode) == Kind::Dir {
                0
            } else {
                st.size
            },
            nlink: st.nlink,
            ino: st.ino,
        })
    }
    fn pwrite(&mut self, p: &str, off: u64, data: &[u8]) -> R<usize> {
        let fs = self.0;
        self.with_fd(p, libc::O_WRONLY, |fd| e(fs.pwrite(fd, data, off)))
    }
    fn pread(&mut self, p: &str, off: u64, len: usize) -> R<Vec<u8>> {
        let fs = self.0;
        self.with_fd(p, libc::O_RDONLY, |fd| {
            let mut buf = vec![0u8; len];
            let mut done = 0;
            // At least one call, so that a read of 0 bytes reaches the file system.
            loop {
                let n = e(fs.pread(fd, &mut buf[done..], off + done as u64))?;
                done += n;
                if n == 0 || done == len {
                    break;
                }
            }
            buf.truncate(done);
            Ok(buf)
        })
    }
    fn truncate(&mut self, p: &str, len: u64) -> R<()> {
        e(self.0.session(Cred::root()).truncate(p, len))
    }
    fn fallocate(&mut self, p: &str, mode: i32, off: u64, len: u64) -> R<()> {
        let fs = self.0;
        self.with_fd(p, libc::O_WRONLY, |fd| e(fs.fallocate(fd, mode, off, len)))
    }
    fn setxattr(&mut self, p: &str, name: &str, value: &[u8], flags: i32) -> R<()> {
        e(self.0.session(Cred::root()).setxattr(p, name, value, flags))
    }
    fn getxattr(&mut self, p: &str, name: &str) -> R<Vec<u8>> {
        e(self.0.session(Cred::root()).getxattr(p, name))
    }
    fn listxattr(&mut self, p: &str) -> R<Vec<String>> {
        let names = e(self.0.session(Cred::root()).listxattr(p))?;
        let mut v: Vec<String> = names
            .into_iter()
            .map(|n| String::from_utf8(n).expect("UTF-8 names"))
            .collect();
        v.sort();
        Ok(v)
    }
    fn removexattr(&mut self, p: &str, name: &str) -> R<()> {
        e(self.0.session(Cred::root()).removexattr(p, name))
    }
    fn chmod(&mut self, p: &str, mode: u32) -> R<()> {
        e(self.0.session(Cred::root()).chmod(p, mode))
    }
    fn readdir(&mut self, p: &str) -> R<Vec<(String, Kind)>> {
        let list = e(self.0.session(Cred::root()).readdir(p))?;
        Ok(list
            .into_iter()
            .filter(|d| d.name != b"." && d.name != b"..")
            .map(|d| {
                let n = String::from_utf8(d.name).expect("UTF-8 names");
                (n, kind_of_dtype(d.dtype))
            })
            .collect())
    }
}

// ---------------------------------------------------------------------------------
// Operations.

#[derive(Clone, Debug)]
pub enum Op {
    Mkdir(String, u32),
    Create(String, i32, u32),
    Unlink(String),
    Rmdir(String),
    Rename(String, String, u32),
    Link(String, String),
    Symlink(String, String),
    Readlink(String),
    Stat(String, bool),
    /// Path, offset, length, fill seed.
    Pwrite(String, u64, usize, u8),
    Pread(String, u64, usize),
    Truncate(String, u64),
    Fallocate(String, i32, u64, u64),
    SetXattr(String, String, Vec<u8>, i32),
    GetXattr(String, String),
    ListXattr(String),
    RemoveXattr(String, String),
    Chmod(String, u32),
    Readdir(String),
    Remount,
    Crash,
}

/// The result of one call, comparable across targets.
#[derive(Debug, PartialEq, Eq)]
pub enum Out {
    Unit,
    Bytes(Vec<u8>),
    Text(String),
    Names(Vec<String>),
    /// Kind, permission bits, size, link count.
    Stat(Kind, u32, u64, u64),
    Entries(Vec<(String, Kind)>),
    Count(usize),
}

/// Bytes that differ from block to block and from write to write.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(seed as u32 * 7 + 1) as u8
        })
        .collect()
}

pub fn apply(op: &Op, t: &mut dyn Target) -> R<Out> {
    use Out::*;
    Ok(match op {
        Op::Mkdir(p, m) => t.mkdir(p, *m).map(|_| Unit)?,
        Op::Create(p, f, m) => t.create(p, *f, *m).map(|_| Unit)?,
        Op::Unlink(p) => t.unlink(p).map(|_| Unit)?,
        Op::Rmdir(p) => t.rmdir(p).map(|_| Unit)?,
        Op::Rename(a, b, f) => t.rename(a, b, *f).map(|_| Unit)?,
        Op::Link(a, b) => t.link(a, b).map(|_| Unit)?,
        Op::Symlink(tg, p) => t.symlink(tg, p).map(|_| Unit)?,
        Op::Readlink(p) => Text(t.readlink(p)?),
        Op::Stat(p, follow) => {
            let s = t.stat(p, *follow)?;
            Stat(s.kind, s.perm, s.size, s.nlink)
        }
        Op::Pwrite(p, off, len, seed) => Count(t.pwrite(p, *off, &pattern(*len, *seed))?),
        Op::Pread(p, off, len) => Bytes(t.pread(p, *off, *len)?),
        Op::Truncate(p, len) => t.truncate(p, *len).map(|_| Unit)?,
        Op::Fallocate(p, m, off, len) => t.fallocate(p, *m, *off, *len).map(|_| Unit)?,
        Op::SetXattr(p, n, v, f) => t.setxattr(p, n, v, *f).map(|_| Unit)?,
        Op::GetXattr(p, n) => Bytes(t.getxattr(p, n)?),
        Op::ListXattr(p) => Names(t.listxattr(p)?),
        Op::RemoveXattr(p, n) => t.removexattr(p, n).map(|_| Unit)?,
        Op::Chmod(p, m) => t.chmod(p, *m).map(|_| Unit)?,
        Op::Readdir(p) => {
            let mut v = t.readdir(p)?;
            v.sort();
            Entries(v)
        }
        Op::Remount => t.remount(false).map(|_| Unit)?,
        Op::Crash => t.remount(true).map(|_| Unit)?,
    })
}

// ---------------------------------------------------------------------------------
// Whole state.

/// One path's visible state. `same_as` is the first path (in walk order) naming the
/// same inode, which captures hard links without comparing inode numbers.
#[derive(Debug, PartialEq, Eq)]
pub struct Node {
    kind: Kind,
    perm: u32,
    size: u64,
    nlink: u64,
    same_as: String,
    data: Vec<u8>,
    target: String,
    xattrs: BTreeMap<String, Vec<u8>>,
}

pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Walk the whole tree from "/" without following symlinks. Also checks readdir's
/// own invariants: each name once, its d_type that of lstat, a directory's link count
/// 2 + its subdirectories.
pub fn snapshot(t: &mut dyn Target) -> Result<BTreeMap<String, Node>, String> {
    let mut out = BTreeMap::new();
    let mut seen: BTreeMap<u64, String> = BTreeMap::new();
    let mut todo = vec!["/".to_string()];
    while let Some(p) = todo.pop() {
        let st = t
            .stat(&p, false)
            .map_err(|e| format!("lstat {p}: errno {e}"))?;
        let same_as = seen.entry(st.ino).or_insert_with(|| p.clone()).clone();
        let mut node = Node {
            kind: st.kind,
            perm: st.perm,
            size: st.size,
            nlink: st.nlink,
            same_as,
            data: Vec::new(),
            target: String::new(),
            xattrs: BTreeMap::new(),
        };
        match st.kind {
            Kind::File => {
                node.data = t
                    .pread(&p, 0, st.size as usize + 1)
                    .map_err(|e| format!("read {p}: errno {e}"))?;
            }
            Kind::Symlink => {
                node.target = t.readlink(&p).map_err(|e| format!("readlink {p}: {e}"))?;
            }
            Kind::Dir => {
                let list = t.readdir(&p).map_err(|e| format!("readdir {p}: {e}"))?;
                let names: BTreeSet<&String> = list.iter().map(|(n, _)| n).collect();
                if names.len() != list.len() {
                    return Err(format!("readdir {p} lists a name twice: {list:?}"));
                }
                let mut subdirs = 0;
                for (name, dtype) in &list {
                    let child = join(&p, name);
                    let cst = t
                        .stat(&child, false)
                        .map_err(|e| format!("lstat {child} (listed): errno {e}"))?;
                    if cst.kind != *dtype {
                        return Err(format!("{child}: d_type {dtype:?}, lstat {:?}", cst.kind));
                    }
                    subdirs += (cst.kind == Kind::Dir) as u64;
                    todo.push(child);
                }
                if st.nlink != 2 + subdirs {
                    return Err(format!("{p}: nlink {} with {subdirs} subdirs", st.nlink));
                }
            }
            Kind::Other => {}
        }
        if matches!(st.kind, Kind::File | Kind::Dir) {
            for name in t.listxattr(&p).map_err(|e| format!("listxattr {p}: {e}"))? {
                let v = t
                    .getxattr(&p, &name)
                    .map_err(|e| format!("getxattr {p} {name}: {e}"))?;
                node.xattrs.insert(name, v);
            }
        }
        out.insert(p, node);
    }
    // Walk order differs between targets, so name hard-link groups by their least path.
    let mut least: BTreeMap<String, String> = BTreeMap::new();
    for (p, n) in &out {
        least.entry(n.same_as.clone()).or_insert_with(|| p.clone());
    }
    for n in out.values_mut() {
        n.same_as = least[&n.same_as].clone();
    }
    Ok(out)
}

pub fn diff(a: &BTreeMap<String, Node>, b: &BTreeMap<String, Node>) -> String {
    let mut s = String::new();
    for p in a.keys().chain(b.keys()).collect::<BTreeSet<_>>() {
        match (a.get(p), b.get(p)) {
            (Some(x), Some(y)) if x == y => {}
            (x, y) => {
                let brief = |n: Option<&Node>| {
                    n.map(|n| {
                        format!(
                            "{:?} perm {:o} size {} nlink {} same_as {} target {:?} xattrs {:?} data {}",
                            n.kind,
                            n.perm,
                            n.size,
                            n.nlink,
                            n.same_as,
                            n.target,
                            n.xattrs,
                            first_diff_hint(&n.data)
                        )
                    })
                };
                s += &format!(
                    "  {p}:\n    model:  {:?}\n    target: {:?}\n",
                    brief(x),
                    brief(y)
                );
                if let (Some(x), Some(y)) = (x, y) {
                    if let Some(i) =
                        (0..x.data.len().min(y.data.len())).find(|&i| x.data[i] != y.data[i])
                    {
                        s += &format!(
                            "    first differing byte at {i}: {} vs {}\n",
                            x.data[i], y.data[i]
                        );
                    }
                }
            }
        }
    }
    s
}

pub fn first_diff_hint(d: &[u8]) -> String {
    format!("{} bytes", d.len())
}

/// xorshift64*: enough randomness for picking operations, and reproducible per seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

/// Random calls of every kind the model test knows, on `names` only (each process
/// has its own), in /d: paths /d/N and /d/N/N, symlinks to own names.
pub fn own_ops(seed: u64, names: &[String], n: usize) -> Vec<Op> {
    const XNAMES: [&str; 3] = ["user.x", "user.y", "user.a_much_longer_attribute_name"];
    let mut r = Rng(seed | 1);
    let path = |r: &mut Rng| -> String {
        if r.below(4) == 0 {
            format!("/d/{}/{}", r.pick(names), r.pick(names))
        } else {
            format!("/d/{}", r.pick(names))
        }
    };
    (0..n)
        .map(|_| {
            let (a, b) = (path(&mut r), path(&mut r));
            let x = r.pick(&XNAMES).to_string();
            match r.below(22) {
                0 | 1 => {
                    let f = *r.pick(&[0, libc::O_EXCL, libc::O_TRUNC]);
                    Op::Create(a, f | libc::O_CREAT | libc::O_WRONLY, 0o644)
                }
                2 => Op::Unlink(a),
                3 => Op::Mkdir(a, *r.pick(&[0o755, 0o700])),
                4 => Op::Rmdir(a),
                5 | 6 => {
                    let f = *r.pick(&[0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE]);
                    Op::Rename(a, b, f)
                }
                7 => Op::Link(a, b),
                8 => Op::Symlink(r.pick(names).clone(), a),
                9 => Op::Readlink(a),
                10 => Op::Stat(a, r.below(2) == 0),
                11 | 12 => Op::Pwrite(
                    a,
                    r.below(10_000),
                    r.below(6000) as usize,
                    r.below(256) as u8,
                ),
                13 => Op::Pread(a, r.below(9000), r.below(9000) as usize),
                14 => Op::Truncate(a, r.below(9000)),
                15 => {
                    let m = *r.pick(&[
                        0,
                        libc::FALLOC_FL_KEEP_SIZE,
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    ]);
                    Op::Fallocate(a, m, r.below(9000), 1 + r.below(9000))
                }
                16 => {
                    let f = *r.pick(&[0, libc::XATTR_CREATE, libc::XATTR_REPLACE]);
                    Op::SetXattr(a, x, vec![r.below(256) as u8; r.below(40) as usize], f)
                }
                17 => Op::GetXattr(a, x),
                18 => Op::ListXattr(a),
                19 => Op::RemoveXattr(a, x),
                20 => Op::Chmod(a, *r.pick(&[0o644, 0o600, 0o755, 0o4755])),
                _ => Op::Readdir(a),
            }
        })
        .collect()
}
