//! The visible state of a file system, read through the engine's public calls, and the
//! invariants a recovered pool must meet.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use lynxfs::format::{dirlog, extents, inode, ROOT_INO};
use lynxfs::pmem::{Backend, RecordingBackend, Tagged};
use lynxfs::{Cred, Fs, Pool, Timestamp};

/// One name (or the root) and what it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub path: String,
    pub ino: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u64,
    pub size: u64,
    pub rdev: u64,
    /// File bytes, or a symlink's target; empty for anything else.
    pub data: Vec<u8>,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub atime: Timestamp,
    pub mtime: Timestamp,
}

/// Every node, in path order (root first).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct State {
    pub nodes: Vec<Node>,
}

fn kind(mode: u32) -> u32 {
    mode & libc::S_IFMT
}

impl State {
    /// Equal, ignoring times unless `times` (ctime is never compared).
    pub fn same(&self, other: &State, times: bool) -> bool {
        self.nodes.len() == other.nodes.len()
            && self.nodes.iter().zip(&other.nodes).all(|(a, b)| {
                let strip = |n: &Node| Node {
                    atime: Timestamp::default(),
                    mtime: Timestamp::default(),
                    data: Vec::new(),
                    ..n.clone()
                };
                a.data == b.data
                    && (!times || (a.atime, a.mtime) == (b.atime, b.mtime))
                    && strip(a) == strip(b)
            })
    }

    /// What the inplace data mode allows while a write is in flight from `a` to `b`:
    /// the same nodes, each with the metadata (times too, if `times`) of `a` or of
    /// `b`, and data as long as that one's, every byte of which is the byte `a` or `b`
    /// has there.
    pub fn torn_between(&self, a: &State, b: &State, times: bool) -> bool {
        let n = self.nodes.len();
        n == a.nodes.len()
            && n == b.nodes.len()
            && (0..n).all(|i| {
                let (x, na, nb) = (&self.nodes[i], &a.nodes[i], &b.nodes[i]);
                let meta = |n: &Node| Node {
                    data: Vec::new(),
                    atime: if times { n.atime } else { Default::default() },
                    mtime: if times { n.mtime } else { Default::default() },
                    ..n.clone()
                };
                let of = |m: &Node| meta(x) == meta(m) && x.data.len() == m.data.len();
                (of(na) || of(nb))
                    && x.data
                        .iter()
                        .enumerate()
                        .all(|(j, &v)| na.data.get(j) == Some(&v) || nb.data.get(j) == Some(&v))
            })
    }

    /// The same state with each inode number replaced by the position (in path order)
    /// of the first name of that inode: which names share an inode stays, which
    /// number the allocator handed out goes (with two threads it depends on the order).
    pub fn relabeled(&self) -> State {
        let mut first: HashMap<u64, u64> = HashMap::new();
        let mut out = self.clone();
        for (i, n) in out.nodes.iter_mut().enumerate() {
            n.ino = *first.entry(n.ino).or_insert(i as u64);
        }
        out
    }

    /// A short description of how `self` differs from `other`.
    pub fn diff(&self, other: &State) -> String {
        let a: BTreeMap<&str, &Node> = self.nodes.iter().map(|n| (n.path.as_str(), n)).collect();
        let b: BTreeMap<&str, &Node> = other.nodes.iter().map(|n| (n.path.as_str(), n)).collect();
        let mut out = String::new();
        for (p, n) in &a {
            match b.get(p) {
                None => {
                    let _ = write!(out, "[+{p} ino {}] ", n.ino);
                }
                Some(m) if *m != *n => {
                    let _ = write!(out, "[{p}: {}] ", node_diff(n, m));
                }
                _ => {}
            }
        }
        for p in b.keys().filter(|p| !a.contains_key(*p)) {
            let _ = write!(out, "[-{p}] ");
        }
        if out.is_empty() {
            out.push_str("(times only)");
        }
        out
    }
}

fn node_diff(n: &Node, m: &Node) -> String {
    let mut s = Vec::new();
    macro_rules! f {
        ($($x:ident),*) => {$(
            if n.$x != m.$x { s.push(format!("{} {:?} vs {:?}", stringify!($x), n.$x, m.$x)); }
        )*};
    }
    f!(ino, uid, gid, nlink, size, rdev, atime, mtime);
    if n.mode != m.mode {
        s.push(format!("mode {:o} vs {:o}", n.mode, m.mode));
    }
    if n.xattrs != m.xattrs {
        s.push(xattr_diff(&n.xattrs, &m.xattrs));
    }
    if n.data != m.data {
        let at = n
            .data
            .iter()
            .zip(&m.data)
            .position(|(x, y)| x != y)
            .unwrap_or(n.data.len().min(m.data.len()));
        s.push(format!(
            "data differs from byte {at} (len {} vs {})",
            n.data.len(),
            m.data.len()
        ));
    }
    s.join(", ")
}

/// Which attributes differ (by name; values by length and first differing byte).
fn xattr_diff(a: &[(Vec<u8>, Vec<u8>)], b: &[(Vec<u8>, Vec<u8>)]) -> String {
    let a: BTreeMap<&[u8], &[u8]> = a.iter().map(|(n, v)| (&n[..], &v[..])).collect();
    let b: BTreeMap<&[u8], &[u8]> = b.iter().map(|(n, v)| (&n[..], &v[..])).collect();
    let show = |v: Option<&&[u8]>| match v {
        None => "absent".to_string(),
        Some(v) => format!("{} B", v.len()),
    };
    let mut names: Vec<&[u8]> = a.keys().chain(b.keys()).copied().collect();
    names.sort();
    names.dedup();
    let parts: Vec<String> = names
        .into_iter()
        .filter(|n| a.get(n) != b.get(n))
        .map(|n| {
            let (x, y) = (a.get(n), b.get(n));
            let at = match (x, y) {
                (Some(x), Some(y)) => x
                    .iter()
                    .zip(y.iter())
                    .position(|(p, q)| p != q)
                    .map(|i| format!(" (from byte {i})"))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            format!(
                "xattr {}: {} vs {}{at}",
                String::from_utf8_lossy(n),
                show(x),
                show(y)
            )
        })
        .collect();
    parts.join(", ")
}

/// Read the whole visible state of `fs`. Reads only: no store reaches the pool.
pub fn capture<B: Backend>(fs: &Fs<B>) -> Result<State, String> {
    let ns = fs.ns();
    let pool = fs.pool();
    let cred = Cred::root();
    let mut nodes = Vec::new();
    let mut stack = vec![("/".to_string(), ROOT_INO, ROOT_INO)];
    let mut dirs_seen = HashSet::new();
    while let Some((path, ino, parent)) = stack.pop() {
        let st = ns
            .getattr(ino)
            .map_err(|e| format!("{path}: getattr: {e}"))?;
        let mut data = Vec::new();
        match kind(st.mode) {
            libc::S_IFREG => {
                let mut buf = vec![0u8; st.size as usize];
                let n = lynxfs::data::read_at(pool, ino, 0, &mut buf)
                    .map_err(|e| format!("{path}: read: {e}"))?;
                if n as u64 != st.size {
                    return Err(format!("{path}: read {n} of {} bytes", st.size));
                }
                data = buf;
            }
            libc::S_IFLNK => {
                data = ns
                    .readlink(ino)
                    .map_err(|e| format!("{path}: readlink: {e}"))?;
            }
            _ => {}
        }
        let names =
            lynxfs::data::xattr::list(pool, ino).map_err(|e| format!("{path}: listxattr: {e}"))?;
        let mut xattrs = Vec::new();
        let indexes = lynxfs::data::xattr::Indexes::default();
        for n in names {
            let v = lynxfs::data::xattr::get(pool, &indexes, ino, &n)
                .map_err(|e| format!("{path}: getxattr: {e}"))?;
            xattrs.push((n, v));
        }
        xattrs.sort();
        if kind(st.mode) == libc::S_IFDIR {
            if !dirs_seen.insert(ino) {
                return Err(format!("{path}: directory {ino} reached twice"));
            }
            let mut off = 0;
            let mut children = Vec::new();
            loop {
                let batch = ns
                    .readdir(ino, off, 256, &cred)
                    .map_err(|e| format!("{path}: readdir: {e}"))?;
                let Some(last) = batch.last() else { break };
                off = last.next;
                for e in batch {
                    match e.name.as_slice() {
                        b"." => {
                            if e.ino != ino {
                                return Err(format!("{path}: '.' is {}", e.ino));
                            }
                        }
                        b".." => {
                            if e.ino != parent {
                                return Err(format!(
                                    "{path}: '..' is {}, found under {parent}",
                                    e.ino
                                ));
                            }
                        }
                        _ => children.push(e),
                    }
                }
            }
            for c in children {
                let name = String::from_utf8_lossy(&c.name).into_owned();
                let cpath = if path == "/" {
                    format!("/{name}")
                } else {
                    format!("{path}/{name}")
                };
                let cmode = ns
                    .getattr(c.ino)
                    .map_err(|e| format!("{cpath}: names inode {}: {e}", c.ino))?
                    .mode;
                if c.dtype as u32 != kind(cmode) >> 12 {
                    return Err(format!(
                        "{cpath}: entry type {} but inode mode {cmode:o}",
                        c.dtype
                    ));
                }
                stack.push((cpath, c.ino, ino));
            }
        }
        nodes.push(Node {
            path,
            ino,
            mode: st.mode,
            uid: st.uid,
            gid: st.gid,
            nlink: st.nlink,
            size: st.size,
            rdev: st.rdev,
            data,
            xattrs,
            atime: st.atime,
            mtime: st.mtime,
        });
    }
    nodes.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(State { nodes })
}

/// The blocks `ino` holds: data, tree nodes, xattr block, directory log pages.
fn blocks_of<B: Backend>(pool: &Pool<B>, ino: u64) -> Result<Vec<u64>, String> {
    let l = &pool.layout;
    let at = l.inode_addr(ino);
    let mut nodes = Vec::new();
    let ext = extents::read_map(&pool.pm, l, at, &mut nodes)
        .map_err(|e| format!("inode {ino}: map: {e}"))?;
    let mut out: Vec<u64> = ext
        .iter()
        .flat_map(|e| e.pblk..e.pblk + e.len as u64)
        .collect();
    for n in nodes {
        out.push(
            l.block_of(n)
                .ok_or(format!("inode {ino}: bad node {n:#x}"))?,
        );
    }
    let x = pool.pm.load_u64(at + inode::XATTR);
    if x != 0 {
        let set = lynxfs::data::xattr::read_set(&pool.pm, l, x)
            .map_err(|e| format!("inode {ino}: {e}"))?;
        out.extend(set.blocks);
    }
    let mut p = pool.pm.load_u64(at + inode::DIR_LOG);
    while p != 0 {
        let b = l
            .block_of(p)
            .ok_or(format!("inode {ino}: bad log page {p:#x}"))?;
        if out.len() as u64 > l.data_blocks {
            return Err(format!("inode {ino}: log page cycle"));
        }
        out.push(b);
        p = pool.pm.load_u64(p + dirlog::NEXT);
    }
    Ok(out)
}

fn bit(bits: &[u64], i: u64) -> bool {
    bits[(i / 64) as usize] >> (i % 64) & 1 == 1
}

/// Link counts, block ownership and the allocators' view, against the names found.
/// A recovered (or cleanly reopened) pool holds no speculative preallocation:
/// recovery and the last close give it back.
fn no_speculative_blocks<B: Backend>(pool: &Pool<B>, inos: &HashSet<u64>) -> Result<(), String> {
    for &ino in inos {
        let word = pool.pm.load_u64(pool.layout.inode_addr(ino) + inode::MAP);
        if inode::MapWord::decode(word).is_some_and(|w| w.spec != 0) {
            return Err(format!(
                "inode {ino}: speculative preallocation outstanding"
            ));
        }
    }
    Ok(())
}

pub fn invariants<B: Backend>(fs: &Fs<B>, st: &State) -> Result<(), String> {
    let pool = fs.pool();
    let l = &pool.layout;
    // Link counts.
    let mut names: HashMap<u64, u64> = HashMap::new();
    let mut subdirs: HashMap<u64, u64> = HashMap::new();
    let by_path: HashMap<&str, &Node> = st.nodes.iter().map(|n| (n.path.as_str(), n)).collect();
    for n in st.nodes.iter().filter(|n| n.path != "/") {
        *names.entry(n.ino).or_default() += 1;
        if kind(n.mode) == libc::S_IFDIR {
            let parent = match n.path.rfind('/') {
                Some(0) => "/",
                Some(i) => &n.path[..i],
                None => unreachable!(),
            };
            *subdirs.entry(by_path[parent].ino).or_default() += 1;
        }
    }
    for n in &st.nodes {
        let want = if kind(n.mode) == libc::S_IFDIR {
            if n.path != "/" && names[&n.ino] != 1 {
                return Err(format!(
                    "{}: directory with {} names",
                    n.path, names[&n.ino]
                ));
            }
            2 + subdirs.get(&n.ino).copied().unwrap_or(0)
        } else {
            names[&n.ino]
        };
        if n.nlink != want {
            return Err(format!("{}: nlink {} but {want} expected", n.path, n.nlink));
        }
    }
    // Blocks: each owned once, and exactly the allocator's used set.
    let inos: HashSet<u64> = st.nodes.iter().map(|n| n.ino).collect();
    no_speculative_blocks(pool, &inos)?;
    let mut owner: HashMap<u64, u64> = HashMap::new();
    for &ino in &inos {
        for b in blocks_of(pool, ino)? {
            if b >= l.data_blocks {
                return Err(format!("inode {ino}: block {b} past the data area"));
            }
            if let Some(o) = owner.insert(b, ino) {
                return Err(format!("block {b} owned by inodes {o} and {ino}"));
            }
        }
    }
    let used = pool.alloc.blocks.used_bitmap();
    for b in 0..l.data_blocks {
        if bit(&used, b) != owner.contains_key(&b) {
            return Err(format!(
                "block {b}: allocator says {}, the files say {}",
                if bit(&used, b) { "used" } else { "free" },
                match owner.get(&b) {
                    Some(o) => format!("owned by inode {o}"),
                    None => "unowned".into(),
                }
            ));
        }
    }
    if pool.alloc.blocks.free_count() + owner.len() as u64 != l.data_blocks {
        return Err(format!(
            "blocks: {} free + {} used != {} total",
            pool.alloc.blocks.free_count(),
            owner.len(),
            l.data_blocks
        ));
    }
    let iused = pool.alloc.inodes.used_bitmap();
    for i in 1..l.total_inodes() {
        if bit(&iused, i) != inos.contains(&i) {
            return Err(format!(
                "inode {i}: allocator says {}, the namespace {}",
                if bit(&iused, i) { "used" } else { "free" },
                if inos.contains(&i) {
                    "names it"
                } else {
                    "does not"
                }
            ));
        }
    }
    if pool.alloc.inodes.free_count() + inos.len() as u64 + 1 != l.total_inodes() {
        return Err("inodes: free + used != total".into());
    }
    let dentries = st.nodes.len() as u64 - 1;
    if pool.alloc.dentries.free_count() + dentries + 1 != l.total_dentries() {
        return Err(format!(
            "dentries: {} free + {dentries} names + 1 != {} total",
            pool.alloc.dentries.free_count(),
            l.total_dentries()
        ));
    }
    Ok(())
}

/// Open a crash image (recovery runs), check it and read its state; then, if
/// `reopen`, close it cleanly, open that image again and require the same state.
/// Returns the state and what recovery (and the open) stored, flushed and fenced.
pub fn examine(img: &[u8], reopen: bool) -> Result<(State, Vec<Tagged>), String> {
    let rec = RecordingBackend::new();
    let pool = Pool::open_image(img, rec.clone()).map_err(|e| format!("open: {e}"))?;
    let log = rec.take_tagged();
    match &pool.recovery {
        None => return Err("the crash image was marked clean".into()),
        Some(r) if !r.problems.is_empty() => {
            return Err(format!("recovery problems: {:?}", r.problems))
        }
        _ => {}
    }
    let rep = lynxfs::fsck::check(&pool);
    if !rep.problems.is_empty() {
        return Err(format!("fsck after recovery: {:?}", rep.problems));
    }
    let fs = Fs::new(pool);
    let st = capture(&fs).map_err(|e| format!("after recovery: {e}"))?;
    invariants(&fs, &st).map_err(|e| format!("after recovery: {e}"))?;
    if !reopen {
        fs.pool().crash_in_place();
        return Ok((st, log));
    }
    fs.close().map_err(|e| format!("close: {e}"))?;
    let img2 = fs.pool().pm.snapshot();
    drop(fs);
    let pool2 = Pool::open_image(&img2, RecordingBackend::new())
        .map_err(|e| format!("reopen after clean close: {e}"))?;
    if !pool2.was_clean {
        return Err("not clean after a clean close".into());
    }
    let rep = lynxfs::fsck::check(&pool2);
    if !rep.problems.is_empty() {
        return Err(format!("fsck after clean reopen: {:?}", rep.problems));
    }
    let fs2 = Fs::new(pool2);
    let st2 = capture(&fs2).map_err(|e| format!("after reopen: {e}"))?;
    if !st2.same(&st, true) {
        return Err(format!(
            "reopen after clean close changed the state: {}",
            st2.diff(&st)
        ));
    }
    invariants(&fs2, &st2).map_err(|e| format!("after reopen: {e}"))?;
    fs2.pool().crash_in_place();
    Ok((st, log))
}
