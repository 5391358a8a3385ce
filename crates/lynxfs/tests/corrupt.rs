//! Corruption: named, byte-level damage to a seed pool at known structures, and a
//! bounded fuzz of random damage. For every case, open must either refuse the pool
//! with a pool error or succeed; then fsck (after recovery at open, or after a forced
//! repair) must find the pool consistent, across a clean close and reopen. Never a
//! panic, a hang or an out-of-bounds access: each case runs under `catch_unwind` in a
//! thread watched with a timeout.
//!
//! Each case runs twice: on a pool closed cleanly (trusted at open: no walk, so fsck
//! must detect the damage and `repair` fix it) and on the same bytes with the clean
//! flag cleared (recovery runs at open).
//!
//! `LYNXFS_LONG=1` runs many more fuzz iterations.

use std::path::Path;
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

use lynxfs::format::superblock::SB_LEN;
use lynxfs::format::{dentry, dirlog, extents, inode, journal, Layout, Superblock, BLOCK};
use lynxfs::fsck;
use lynxfs::pmem::PmemBackend;
use lynxfs::{Access, Cred, Error, Fs, MkfsOptions, Pool};

const POOL_SIZE: u64 = 4 << 20;
/// A generous bound for one case; a case that takes longer is a hang.
const WATCHDOG: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------- the seed pool

struct Seed {
    img: Vec<u8>,
    l: Layout,
    ino: std::collections::HashMap<&'static str, u64>,
}

fn w64(img: &mut [u8], off: u64, v: u64) {
    img[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
}
fn r64(img: &[u8], off: u64) -> u64 {
    u64::from_le_bytes(img[off as usize..off as usize + 8].try_into().unwrap())
}

/// The superblock in force (the valid copy with the higher generation).
fn superblock(img: &[u8]) -> Option<Superblock> {
    [0u64, BLOCK]
        .iter()
        .filter_map(|&o| {
            Superblock::decode(img[o as usize..o as usize + SB_LEN].try_into().unwrap()).ok()
        })
        .max_by_key(|s| s.generation)
}

fn seed() -> &'static Seed {
    static SEED: OnceLock<Seed> = OnceLock::new();
    SEED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("seed.pool");
        let mut o = MkfsOptions::new(POOL_SIZE);
        o.lanes = 2;
        Pool::mkfs(&p, &o, PmemBackend::default()).unwrap();
        let fs = Fs::new(Pool::open(&p, Access::ReadWrite, PmemBackend::default()).unwrap());
        let s = fs.session(Cred::root());
        s.mkdir("/d1", 0o755).unwrap();
        s.mkdir("/d1/d2", 0o755).unwrap();
        s.mkdir("/d3", 0o700).unwrap();
        let put = |path: &str, pieces: &[(u64, usize)]| {
            let fd = s.create(path, 0o644).unwrap();
            for (i, &(off, len)) in pieces.iter().enumerate() {
                let data: Vec<u8> = (0..len).map(|j| (i * 7 + j) as u8).collect();
                fs.pwrite(fd, &data, off).unwrap();
            }
            fs.close_fd(fd).unwrap();
        };
        put("/a", &[(0, 5000)]);
        put("/d3/e", &[(0, 10)]);
        put("/d1/d2/f", &[(0, 10000)]);
        // Six separated blocks: more than 4 extents, so a one-node tree.
        let frag: Vec<(u64, usize)> = (0..6).map(|i| (i * 2 * BLOCK, 100)).collect();
        put("/frag", &frag);
        // 300 separated blocks: a tree of depth 1 (a root over two leaves).
        let sparse: Vec<(u64, usize)> = (0..300).map(|i| (i * 2 * BLOCK, 64)).collect();
        put("/sparse", &sparse);
        s.symlink("/d1/d2/f", "/ln").unwrap();
        s.link("/a", "/d1/hl").unwrap();
        s.setxattr("/a", "user.x", b"value-x", 0).unwrap();
        s.setxattr("/d1", "user.y", b"value-y", 0).unwrap();
        let mut ino = std::collections::HashMap::new();
        for p in [
            "/d1", "/d1/d2", "/d3", "/a", "/d1/d2/f", "/frag", "/sparse", "/ln",
        ] {
            ino.insert(p, s.lstat(p).unwrap().ino);
        }
        drop(s);
        fs.close().unwrap();
        drop(fs);
        let img = std::fs::read(&p).unwrap();
        let l = superblock(&img).unwrap().layout;
        let seed = Seed { img, l, ino };
        // The seed itself must be clean.
        let pool = Pool::open_image(&seed.img, PmemBackend::default()).unwrap();
        let rep = fsck::check(&pool);
        assert!(rep.is_clean(), "seed pool: {:?}", rep.problems);
        assert!(seed_map_kind(&seed, "/sparse") == (1, 1));
        assert!(seed_map_kind(&seed, "/frag") == (1, 0));
        pool.crash();
        seed
    })
}

fn seed_map_kind(s: &Seed, path: &str) -> (u8, u16) {
    let w = r64(&s.img, s.l.inode_addr(s.ino[path]) + inode::MAP);
    let m = inode::MapWord::decode(w).unwrap();
    (m.kind, m.count)
}

/// One entry of a directory as the image holds it.
#[derive(Clone, Debug)]
struct Ent {
    slot: u64,
    dentry: u64,
    name: Vec<u8>,
}

impl Seed {
    fn iaddr(&self, path: &str) -> u64 {
        self.l.inode_addr(self.ino[path])
    }
    fn pages(&self, img: &[u8], dir: u64) -> Vec<u64> {
        let mut out = Vec::new();
        let mut p = r64(img, self.l.inode_addr(dir) + inode::DIR_LOG);
        while p != 0 && out.len() < 64 {
            out.push(p);
            p = r64(img, p + dirlog::NEXT);
        }
        out
    }
    fn entries(&self, img: &[u8], dir: u64) -> Vec<Ent> {
        let mut out = Vec::new();
        for page in self.pages(img, dir) {
            for i in 0..dirlog::SLOTS_PER_PAGE {
                let slot = dirlog::slot_addr(page, i);
                let d = r64(img, slot);
                if d == 0 {
                    continue;
                }
                let (len, _) = dentry::split_name_len(r64(img, d + dentry::NAME_LEN));
                out.push(Ent {
                    slot,
                    dentry: d,
                    name: img[(d + dentry::NAME) as usize..(d + dentry::NAME) as usize + len]
                        .to_vec(),
                });
            }
        }
        out
    }
    /// The entry `name` in the directory at `dir_path` ("/" for the root).
    fn ent(&self, dir_path: &str, name: &str) -> Ent {
        let dir = if dir_path == "/" {
            1
        } else {
            self.ino[dir_path]
        };
        self.entries(&self.img, dir)
            .into_iter()
            .find(|e| e.name == name.as_bytes())
            .unwrap_or_else(|| panic!("no {name} in {dir_path}"))
    }
    /// An empty slot of directory `dir`'s first page.
    fn free_slot(&self, dir: u64) -> u64 {
        let page = self.pages(&self.img, dir)[0];
        (0..dirlog::SLOTS_PER_PAGE)
            .map(|i| dirlog::slot_addr(page, i))
            .find(|&s| r64(&self.img, s) == 0)
            .unwrap()
    }
    /// A dentry id no directory uses.
    fn free_dentry(&self) -> u64 {
        self.l.dentry_addr(self.l.total_dentries() - 3)
    }
    /// The first extent of an inline-mapped file.
    fn extent0(&self, path: &str) -> inode::Extent {
        let at = self.iaddr(path);
        let m = inode::MapWord::decode(r64(&self.img, at + inode::MAP)).unwrap();
        let off = (at + m.area_off()) as usize;
        inode::Extent::decode(&self.img[off..off + 16])
    }
    fn extent0_addr(&self, path: &str) -> u64 {
        let at = self.iaddr(path);
        let m = inode::MapWord::decode(r64(&self.img, at + inode::MAP)).unwrap();
        at + m.area_off()
    }
    /// The root node of a tree-mapped file.
    fn tree_root(&self, path: &str) -> u64 {
        r64(&self.img, self.extent0_addr(path))
    }
    fn block_addr(&self, b: u64) -> u64 {
        self.l.block_addr(b)
    }
}

/// Write a dentry body at `d` (valid), as the engine would.
fn put_dentry(img: &mut [u8], d: u64, ino: u64, parent: u64, slot: u64, name: &[u8], dtype: u8) {
    w64(img, d + dentry::INO, ino);
    w64(img, d + dentry::PARENT, parent);
    w64(
        img,
        d + dentry::NAME_LEN,
        name.len() as u64 | (dtype as u64) << 16,
    );
    w64(img, d + dentry::SLOT, slot);
    img[(d + dentry::NAME) as usize..(d + dentry::NAME) as usize + name.len()]
        .copy_from_slice(name);
    w64(img, d + dentry::STATE, dentry::VALID | 12345);
}

/// Rewrite one superblock copy (by offset) with `f` applied, CRC recomputed.
fn edit_sb(img: &mut [u8], off: u64, f: impl FnOnce(&mut Superblock)) {
    let mut s =
        Superblock::decode(img[off as usize..off as usize + SB_LEN].try_into().unwrap()).unwrap();
    f(&mut s);
    img[off as usize..off as usize + SB_LEN].copy_from_slice(&s.encode());
}

/// Set a raw field of a superblock copy and recompute its CRC.
fn sb_raw(img: &mut [u8], off: u64, field: usize, v: u64) {
    let o = off as usize;
    img[o + field..o + field + 8].copy_from_slice(&v.to_le_bytes());
    let crc = crc32c::crc32c(&img[o..o + SB_LEN - 4]);
    img[o + SB_LEN - 4..o + SB_LEN].copy_from_slice(&crc.to_le_bytes());
}

fn write_journal(
    img: &mut [u8],
    l: &Layout,
    lane: u32,
    seq: u64,
    entries: &[(u64, u64)],
    crc_ok: bool,
) {
    let base = l.journal_addr(lane);
    let mut crc = journal::record_crc(seq, entries);
    if !crc_ok {
        crc ^= 0x5a5a;
    }
    w64(img, base + journal::SEQ, seq);
    w64(
        img,
        base + journal::COUNT_CRC,
        entries.len() as u64 | (crc as u64) << 32,
    );
    let enc = journal::encode_entries(entries);
    let e = (base + journal::ENTRIES) as usize;
    img[e..e + enc.len()].copy_from_slice(&enc);
    w64(img, base + journal::COMMIT, seq);
}

fn flip(img: &mut [u8], off: u64, bit: u32) {
    img[off as usize] ^= 1 << bit;
}

/// The offset of the first bitmap word at `base` (of `n` bits) with a used bit outside
/// `reserved` (bits of word 0 that are always in use).
fn first_used_word(img: &[u8], base: u64, n: u64, reserved: u64) -> u64 {
    (0..n.div_ceil(64))
        .map(|k| (k, r64(img, base + k * 8)))
        .find(|&(k, w)| if k == 0 { w & !reserved != 0 } else { w != 0 })
        .map(|(k, _)| base + k * 8)
        .expect("a used entry")
}

fn zero(img: &mut [u8], off: u64, len: usize) {
    img[off as usize..off as usize + len].fill(0);
}

// ---------------------------------------------------------------- the cases

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    /// Open must refuse the pool.
    Refuse,
    /// Open succeeds and the damage is found (by the superblock check or fsck).
    Detect,
    /// Either (the damage may heal at open, or the pool is refused).
    Any,
}

type Corrupt = fn(&mut Vec<u8>, &Seed);

fn cases() -> Vec<(&'static str, Expect, Corrupt)> {
    use Expect::*;
    vec![
        // ---- superblocks (A: generation 2, clean 0; B: generation 3, clean 1)
        ("sb_a_magic_bit", Detect, |i, _| flip(i, 0, 0)),
        ("sb_a_crc_bit", Detect, |i, _| flip(i, 253, 3)),
        ("sb_a_zeroed", Detect, |i, _| zero(i, 0, SB_LEN)),
        ("sb_b_generation_bit", Detect, |i, _| flip(i, BLOCK + 24, 0)),
        ("sb_b_zeroed", Detect, |i, _| zero(i, BLOCK, SB_LEN)),
        ("sb_b_lanes_bit", Detect, |i, _| flip(i, BLOCK + 40, 1)),
        ("sb_both_zeroed", Refuse, |i, _| {
            zero(i, 0, SB_LEN);
            zero(i, BLOCK, SB_LEN)
        }),
        ("sb_both_bit_flips", Refuse, |i, _| {
            flip(i, 30, 2);
            flip(i, BLOCK + 60, 5)
        }),
        ("sb_b_clean_flag_7_crc_ok", Detect, |i, _| {
            sb_raw(i, BLOCK, 72, 7)
        }),
        ("sb_b_version_2_crc_ok", Refuse, |i, _| {
            let o = BLOCK as usize + 8;
            i[o..o + 4].copy_from_slice(&2u32.to_le_bytes());
            sb_raw(i, BLOCK, 152, 1)
        }),
        ("sb_b_offsets_wrong_crc_ok", Detect, |i, _| {
            sb_raw(i, BLOCK, 120, 4096 * 9)
        }),
        ("sb_a_other_pool_newer", Detect, |i, _| {
            edit_sb(i, 0, |s| {
                s.generation = 98;
                s.uuid = [9; 16];
            })
        }),
        ("sb_b_pool_size_past_file", Refuse, |i, _| {
            // Both copies claim a larger pool than the file (and a geometry that fits).
            for off in [0, BLOCK] {
                edit_sb(i, off, |s| {
                    s.geo.pool_size = POOL_SIZE * 2;
                    s.layout = Layout::compute(s.geo).unwrap();
                })
            }
        }),
        // ---- the root inode
        ("root_ino_word_zero", Any, |i, s| {
            w64(i, s.l.inode_addr(1) + inode::INO, 0)
        }),
        ("root_mode_regular", Any, |i, s| {
            w64(
                i,
                s.l.inode_addr(1) + inode::MODE,
                (libc::S_IFREG | 0o644) as u64,
            )
        }),
        ("root_map_word_garbage", Detect, |i, s| {
            w64(i, s.l.inode_addr(1) + inode::MAP, 0xdead_beef_0000_0707)
        }),
        ("root_dir_log_out_of_range", Detect, |i, s| {
            w64(i, s.l.inode_addr(1) + inode::DIR_LOG, POOL_SIZE * 3)
        }),
        ("root_nlink_wrong", Detect, |i, s| {
            w64(i, s.l.inode_addr(1) + inode::NLINK, 17)
        }),
        ("root_xattr_garbage", Detect, |i, s| {
            w64(i, s.l.inode_addr(1) + inode::XATTR, 0x1234_5677)
        }),
        ("root_inode_zeroed", Any, |i, s| {
            zero(i, s.l.inode_addr(1), 256)
        }),
        // ---- other inodes
        ("file_ino_word_bit", Detect, |i, s| {
            flip(i, s.iaddr("/a") + inode::INO, 3)
        }),
        ("file_ino_word_zero", Detect, |i, s| {
            w64(i, s.iaddr("/d1/d2/f") + inode::INO, 0)
        }),
        ("file_mode_no_type", Detect, |i, s| {
            w64(i, s.iaddr("/a") + inode::MODE, 0o644)
        }),
        ("file_mode_high_bits", Detect, |i, s| {
            w64(
                i,
                s.iaddr("/d1/d2/f") + inode::MODE,
                1 << 40 | (libc::S_IFREG | 0o644) as u64,
            )
        }),
        ("dir_mode_regular", Detect, |i, s| {
            w64(
                i,
                s.iaddr("/d1") + inode::MODE,
                (libc::S_IFREG | 0o755) as u64,
            )
        }),
        ("file_map_word_bad_area", Detect, |i, s| {
            w64(i, s.iaddr("/a") + inode::MAP, 3)
        }),
        ("file_map_word_count_5", Detect, |i, s| {
            w64(i, s.iaddr("/a") + inode::MAP, 5 << 16)
        }),
        ("file_extent_out_of_range", Detect, |i, s| {
            let at = s.extent0_addr("/a");
            w64(i, at + 8, s.l.data_blocks + 5)
        }),
        ("file_extent_len_huge", Detect, |i, s| {
            let at = s.extent0_addr("/d1/d2/f");
            i[(at + 4) as usize..(at + 8) as usize].copy_from_slice(&u32::MAX.to_le_bytes());
        }),
        ("file_extent_len_zero", Detect, |i, s| {
            let at = s.extent0_addr("/a");
            i[(at + 4) as usize..(at + 8) as usize].copy_from_slice(&0u32.to_le_bytes());
        }),
        ("tree_root_not_a_block", Detect, |i, s| {
            let at = s.extent0_addr("/frag");
            w64(i, at, s.l.data_off + 7 * 8)
        }),
        ("tree_root_depth_5", Detect, |i, s| {
            let w = r64(i, s.iaddr("/sparse") + inode::MAP);
            w64(
                i,
                s.iaddr("/sparse") + inode::MAP,
                w & !0xffff_0000 | 5 << 16,
            )
        }),
        ("tree_node_count_huge", Detect, |i, s| {
            let n = s.tree_root("/frag");
            w64(i, n, 60_000)
        }),
        ("tree_node_depth_wrong", Detect, |i, s| {
            let n = s.tree_root("/frag");
            w64(i, n, 6 | 3 << 32)
        }),
        ("tree_node_zeroed", Detect, |i, s| {
            let n = s.tree_root("/sparse");
            zero(i, n, BLOCK as usize)
        }),
        ("tree_child_points_to_root", Detect, |i, s| {
            let n = s.tree_root("/sparse");
            w64(i, n + extents::NODE_HEADER + 8, n)
        }),
        ("tree_fan_out_to_one_leaf", Detect, |i, s| {
            // Every entry of the root names the first leaf: each node must be read once.
            let n = s.tree_root("/sparse");
            let leaf = r64(i, n + extents::NODE_HEADER + 8);
            w64(i, n, 255 | 1 << 32);
            for e in 0..255u64 {
                let at = n + extents::NODE_HEADER + e * 16;
                w64(i, at, 0);
                w64(i, at + 8, leaf);
            }
        }),
        ("tree_leaf_extents_unsorted", Detect, |i, s| {
            let n = s.tree_root("/frag");
            let e0 = n + extents::NODE_HEADER;
            let (a, b) = (r64(i, e0), r64(i, e0 + 16));
            w64(i, e0, b);
            w64(i, e0 + 16, a);
        }),
        ("extent_shared_by_two_files", Detect, |i, s| {
            let f = s.extent0("/d1/d2/f");
            w64(i, s.extent0_addr("/a") + 8, f.pblk)
        }),
        ("xattr_pointer_out_of_range", Detect, |i, s| {
            w64(i, s.iaddr("/a") + inode::XATTR, 12345)
        }),
        ("xattr_pointer_into_file_data", Detect, |i, s| {
            let f = s.extent0("/d1/d2/f");
            w64(i, s.iaddr("/a") + inode::XATTR, s.block_addr(f.pblk))
        }),
        ("xattr_block_garbage", Detect, |i, s| {
            let x = r64(i, s.iaddr("/d1") + inode::XATTR);
            w64(i, x, 9999)
        }),
        ("file_nlink_wrong", Detect, |i, s| {
            w64(i, s.iaddr("/a") + inode::NLINK, 7)
        }),
        ("dir_nlink_wrong", Detect, |i, s| {
            w64(i, s.iaddr("/d1") + inode::NLINK, 1)
        }),
        ("dir_back_pointer_garbage", Detect, |i, s| {
            w64(i, s.iaddr("/d1/d2") + inode::DENTRY, s.l.dentry_off + 8)
        }),
        ("free_inode_stamped_in_use", Detect, |i, s| {
            let ino = s.l.total_inodes() - 2;
            w64(i, s.l.inode_addr(ino) + inode::INO, ino);
            w64(
                i,
                s.l.inode_addr(ino) + inode::MODE,
                (libc::S_IFREG | 0o600) as u64,
            );
        }),
        ("inode_table_run_zeroed", Detect, |i, s| {
            // Four inodes from the first file's on (1 KiB of the table).
            let first = s.ino.values().copied().min().unwrap();
            zero(i, s.l.inode_addr(first), 1024)
        }),
        // ---- dentries
        ("dentry_valid_bit_cleared", Detect, |i, s| {
            let e = s.ent("/", "d3");
            w64(i, e.dentry + dentry::STATE, 0)
        }),
        ("dentry_names_freed_inode", Detect, |i, s| {
            let e = s.ent("/d1", "hl");
            w64(i, e.dentry + dentry::INO, s.l.total_inodes() - 5)
        }),
        ("dentry_ino_out_of_range", Detect, |i, s| {
            let e = s.ent("/", "frag");
            w64(i, e.dentry + dentry::INO, u64::MAX - 3)
        }),
        ("dentry_names_root", Detect, |i, s| {
            let e = s.ent("/d1", "hl");
            w64(i, e.dentry + dentry::INO, 1)
        }),
        ("dentry_parent_wrong", Detect, |i, s| {
            let e = s.ent("/", "a");
            w64(i, e.dentry + dentry::PARENT, s.ino["/d3"])
        }),
        ("dentry_slot_wrong", Detect, |i, s| {
            let e = s.ent("/", "ln");
            w64(i, e.dentry + dentry::SLOT, e.slot + 8)
        }),
        ("dentry_name_len_zero", Detect, |i, s| {
            let e = s.ent("/d1/d2", "f");
            w64(i, e.dentry + dentry::NAME_LEN, 8 << 16)
        }),
        ("dentry_name_len_300", Detect, |i, s| {
            let e = s.ent("/", "sparse");
            w64(i, e.dentry + dentry::NAME_LEN, 300 | 8 << 16)
        }),
        ("dentry_name_with_slash", Detect, |i, s| {
            let e = s.ent("/", "frag");
            i[(e.dentry + dentry::NAME + 1) as usize] = b'/';
        }),
        ("dentry_name_with_nul", Detect, |i, s| {
            let e = s.ent("/", "sparse");
            i[(e.dentry + dentry::NAME + 2) as usize] = 0;
        }),
        ("dentry_duplicate_name", Detect, |i, s| {
            let e = s.ent("/", "d3");
            i[(e.dentry + dentry::NAME) as usize..(e.dentry + dentry::NAME + 2) as usize]
                .copy_from_slice(b"d1");
        }),
        ("dentry_type_wrong", Detect, |i, s| {
            let e = s.ent("/", "a");
            w64(i, e.dentry + dentry::NAME_LEN, 1 | 4 << 16)
        }),
        ("dentry_zeroed", Detect, |i, s| {
            let e = s.ent("/d1", "d2");
            zero(i, e.dentry, 320)
        }),
        ("free_dentry_marked_valid", Detect, |i, s| {
            let d = s.free_dentry();
            put_dentry(i, d, s.ino["/a"], 1, 0, b"ghost", 8)
        }),
        // ---- directory log pages
        ("log_page_owner_wrong", Detect, |i, s| {
            let p = s.pages(&s.img, 1)[0];
            w64(i, p + dirlog::OWNER, 99)
        }),
        ("log_next_out_of_range", Detect, |i, s| {
            let p = s.pages(&s.img, s.ino["/d1"])[0];
            w64(i, p + dirlog::NEXT, 0xdead_0000)
        }),
        ("log_next_is_itself", Detect, |i, s| {
            let p = s.pages(&s.img, 1)[0];
            w64(i, p + dirlog::NEXT, p)
        }),
        ("log_next_mid_block", Detect, |i, s| {
            let p = s.pages(&s.img, 1)[0];
            w64(i, p + dirlog::NEXT, p + 64)
        }),
        ("log_page_shared_by_two_dirs", Detect, |i, s| {
            let p = s.pages(&s.img, 1)[0];
            w64(i, s.iaddr("/d3") + inode::DIR_LOG, p)
        }),
        ("log_slot_out_of_range", Detect, |i, s| {
            let slot = s.free_slot(1);
            w64(i, slot, POOL_SIZE + 4096)
        }),
        ("log_slot_mid_dentry", Detect, |i, s| {
            let slot = s.free_slot(1);
            let e = s.ent("/", "a");
            w64(i, slot, e.dentry + 8)
        }),
        ("log_slot_dentry_zero", Detect, |i, s| {
            let slot = s.free_slot(s.ino["/d1"]);
            w64(i, slot, s.l.dentry_off)
        }),
        ("log_two_slots_one_dentry", Detect, |i, s| {
            let slot = s.free_slot(1);
            let e = s.ent("/", "a");
            w64(i, slot, e.dentry)
        }),
        ("log_page_zeroed", Detect, |i, s| {
            let p = s.pages(&s.img, s.ino["/d1"])[0];
            zero(i, p, BLOCK as usize)
        }),
        ("dir_linked_into_two_parents", Detect, |i, s| {
            let slot = s.free_slot(s.ino["/d3"]);
            let d = s.free_dentry();
            put_dentry(i, d, s.ino["/d1/d2"], s.ino["/d3"], slot, b"again", 4);
            w64(i, slot, d);
        }),
        ("dir_cycle_through_ancestor", Detect, |i, s| {
            let d2 = s.ino["/d1/d2"];
            let slot = s.free_slot(d2);
            let d = s.free_dentry();
            put_dentry(i, d, s.ino["/d1"], d2, slot, b"up", 4);
            w64(i, slot, d);
        }),
        ("dir_cycle_cut_off_from_root", Detect, |i, s| {
            // d1 leaves the root and hangs under its own child d2.
            let e = s.ent("/", "d1");
            w64(i, e.slot, 0);
            let d2 = s.ino["/d1/d2"];
            let slot = s.free_slot(d2);
            w64(i, e.dentry + dentry::PARENT, d2);
            w64(i, e.dentry + dentry::SLOT, slot);
            w64(i, slot, e.dentry);
        }),
        // ---- journals
        ("journal_torn_bad_crc", Detect, |i, s| {
            let at = s.iaddr("/a") + inode::NLINK;
            write_journal(i, &s.l, 0, 5, &[(at, 99)], false)
        }),
        ("journal_commit_garbage", Detect, |i, s| {
            let base = s.l.journal_addr(1);
            w64(i, base + journal::COMMIT, 0x0123_4567_89ab_cdef);
            for k in 1..40 {
                w64(i, base + 8 * k, 0x5555_5555_5555_5555u64.wrapping_mul(k));
            }
        }),
        ("journal_count_huge", Detect, |i, s| {
            let base = s.l.journal_addr(0);
            w64(i, base + journal::SEQ, 3);
            w64(i, base + journal::COUNT_CRC, 0xffff_ffff);
            w64(i, base + journal::COMMIT, 3);
        }),
        ("journal_targets_superblock", Detect, |i, s| {
            write_journal(i, &s.l, 1, 9, &[(0, 0), (BLOCK, 0)], true)
        }),
        ("journal_valid_record_left", Detect, |i, s| {
            // A committed, intact record on a "clean" pool: replay sets a link count
            // that recovery then recounts.
            let at = s.iaddr("/frag") + inode::NLINK;
            write_journal(i, &s.l, 0, 2, &[(at, 40)], true)
        }),
        // ---- the saved allocator state (clean pools)
        ("bitmap_used_blocks_free", Detect, |i, s| {
            // The first bitmap word with a used block in it (which lane's blocks the
            // seed used depends on the CPU it ran on).
            let (b, _, _) = s.l.state_bitmaps();
            let words = s.l.data_blocks.div_ceil(64);
            let w = (0..words)
                .map(|k| b + k * 8)
                .find(|&o| r64(i, o) != 0)
                .expect("a used block");
            zero(i, w, 8)
        }),
        ("bitmap_used_inodes_free", Detect, |i, s| {
            // Inodes 0 and 1 (the root) count as used whatever the bitmap says, so
            // clear the first word holding any other used inode.
            let (_, ib, _) = s.l.state_bitmaps();
            let w = first_used_word(i, ib, s.l.total_inodes(), 0b11);
            zero(i, w, 8)
        }),
        ("bitmap_used_dentries_free", Detect, |i, s| {
            let (_, _, d) = s.l.state_bitmaps();
            let w = first_used_word(i, d, s.l.total_dentries(), 0b1);
            zero(i, w, 8)
        }),
        ("bitmap_free_blocks_used", Detect, |i, s| {
            let (b, _, _) = s.l.state_bitmaps();
            let w = (s.l.data_blocks / 64 - 1) * 8;
            w64(i, b + w, u64::MAX)
        }),
        ("bitmap_all_ones", Detect, |i, s| {
            let (b, _, _) = s.l.state_bitmaps();
            let len = s.l.state_len as usize;
            i[b as usize..b as usize + len].fill(0xff);
        }),
    ]
}

// ---------------------------------------------------------------- running a case

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    Refused,
    /// Opened, and fsck found nothing (damage healed at open or cut by recovery).
    Recovered,
    /// fsck found problems and `repair` fixed them.
    Repaired,
}

struct Ran {
    outcome: Outcome,
    /// What was found: superblock check, recovery at open, fsck before repair.
    found: Vec<String>,
}

fn open_file(p: &Path) -> lynxfs::Result<Pool<PmemBackend>> {
    Pool::open(p, Access::ReadWrite, PmemBackend::default())
}

/// Damage at open is fine if it is refused as a pool error naming the problem.
fn pool_error(e: &Error) -> Result<(), String> {
    match e {
        Error::Corrupt { .. }
        | Error::Foreign { .. }
        | Error::Version { .. }
        | Error::Truncated { .. }
        | Error::TooSmall { .. } => Ok(()),
        other => Err(format!("open failed with an unexpected error: {other}")),
    }
}

/// Use the repaired pool through the API: every name resolves, every file reads.
fn exercise(pool: Pool<PmemBackend>) -> Result<(), String> {
    let fs = Fs::new(pool);
    let s = fs.session(Cred::root());
    let mut stack = vec!["/".to_string()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        let list = s.readdir(&d).map_err(|e| format!("readdir {d}: {e}"))?;
        for e in list {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            seen += 1;
            if seen > 10_000 {
                return Err("the namespace does not end".into());
            }
            let p = format!(
                "{}/{}",
                d.trim_end_matches('/'),
                String::from_utf8_lossy(&e.name)
            );
            let st = s.lstat(&p).map_err(|e| format!("lstat {p}: {e}"))?;
            match st.mode & libc::S_IFMT {
                libc::S_IFDIR => stack.push(p.clone()),
                libc::S_IFREG => {
                    let fd = s
                        .open(&p, libc::O_RDONLY, 0)
                        .map_err(|e| format!("open {p}: {e}"))?;
                    let mut buf = vec![0u8; st.size.min(4 << 20) as usize];
                    fs.pread(fd, &mut buf, 0)
                        .map_err(|e| format!("read {p}: {e}"))?;
                    fs.close_fd(fd).unwrap();
                }
                libc::S_IFLNK => {
                    s.readlink(&p).map_err(|e| format!("readlink {p}: {e}"))?;
                }
                _ => {}
            }
            // listxattr follows a symlink, whose target may be gone.
            if st.mode & libc::S_IFMT != libc::S_IFLNK {
                s.listxattr(&p).map_err(|e| format!("listxattr {p}: {e}"))?;
            }
        }
    }
    // And the pool still takes new work.
    let fd = s
        .create("/after-repair", 0o644)
        .map_err(|e| format!("create: {e}"))?;
    fs.pwrite(fd, b"ok", 0).map_err(|e| format!("write: {e}"))?;
    fs.close_fd(fd).unwrap();
    fs.close().map_err(|e| e.to_string())?;
    Ok(())
}

/// Write `img` to a pool file, open, check, repair, close, reopen, check.
fn run_image(img: &[u8], dir: &Path) -> Result<Ran, String> {
    let p = dir.join("case.pool");
    std::fs::write(&p, img).unwrap();
    let a: &[u8; SB_LEN] = img[..SB_LEN].try_into().unwrap();
    let b: &[u8; SB_LEN] = img[BLOCK as usize..BLOCK as usize + SB_LEN]
        .try_into()
        .unwrap();
    let mut found = fsck::check_superblock_bytes(a, b);
    let mut pool = match open_file(&p) {
        Ok(p) => p,
        Err(e) => {
            pool_error(&e)?;
            found.push(format!("refused: {e}"));
            return Ok(Ran {
                outcome: Outcome::Refused,
                found,
            });
        }
    };
    if let Some(r) = &pool.recovery {
        found.extend(r.problems.iter().cloned());
        if r.journals_torn > 0 {
            found.push(format!("{} torn journal(s)", r.journals_torn));
        }
    }
    let first = fsck::check(&pool);
    found.extend(first.problems.iter().cloned());
    let outcome = if first.is_clean() {
        Outcome::Recovered
    } else {
        let rep = fsck::repair(&mut pool).map_err(|e| format!("repair failed: {e}"))?;
        let again = fsck::check(&pool);
        if !again.is_clean() {
            return Err(format!(
                "problems left after repair: {:?} (fixes: {:?})",
                again.problems, rep.fixes
            ));
        }
        Outcome::Repaired
    };
    pool.close().map_err(|e| e.to_string())?;
    drop(pool);
    // The repair is durable: a clean reopen finds a consistent pool.
    let sb = fsck::check_file_superblocks(&p).unwrap();
    if !sb.is_empty() {
        return Err(format!("superblocks after close: {sb:?}"));
    }
    let pool = open_file(&p).map_err(|e| format!("reopen after repair: {e}"))?;
    let last = fsck::check(&pool);
    if !last.is_clean() {
        return Err(format!("problems after reopen: {:?}", last.problems));
    }
    exercise(pool)?;
    let pool = open_file(&p).map_err(|e| format!("reopen after use: {e}"))?;
    let last = fsck::check(&pool);
    if !last.is_clean() {
        return Err(format!("problems after use: {:?}", last.problems));
    }
    Ok(Ran { outcome, found })
}

/// Run `f` in a thread under catch_unwind, failing if it panics or outlives the watchdog.
fn guarded<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(r);
        })
        .unwrap();
    match rx.recv_timeout(WATCHDOG) {
        Ok(Ok(r)) => r,
        Ok(Err(p)) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("PANIC: {msg}"))
        }
        Err(_) => Err(format!("HANG: no result within {WATCHDOG:?}")),
    }
}

/// The same bytes with the clean flag cleared in the superblock in force.
fn unclean(img: &[u8]) -> Option<Vec<u8>> {
    let sb = superblock(img)?;
    if !sb.clean {
        return None;
    }
    let mut i = img.to_vec();
    edit_sb(&mut i, sb.home(), |s| s.clean = false);
    Some(i)
}

#[test]
fn named_corruptions() {
    let s = seed();
    let all = cases();
    assert!(all.len() >= 50, "{} cases", all.len());
    let mut names = std::collections::HashSet::new();
    let mut failures = Vec::new();
    let mut table = Vec::new();
    for (name, expect, corrupt) in all {
        assert!(names.insert(name), "duplicate case name {name}");
        let mut img = s.img.clone();
        corrupt(&mut img, s);
        assert!(img != s.img, "{name}: changed nothing");
        let variants: Vec<(&str, Vec<u8>)> = match unclean(&img) {
            Some(u) => vec![("clean", img), ("unclean", u)],
            None => vec![("as-is", img)],
        };
        for (variant, img) in variants {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().to_path_buf();
            let r = guarded(name, move || run_image(&img, &path));
            drop(dir);
            let row = match r {
                Err(e) => {
                    failures.push(format!("{name} ({variant}): {e}"));
                    (name, variant, "FAILED".to_string(), e)
                }
                Ok(ran) => {
                    let ok = match expect {
                        Expect::Refuse => ran.outcome == Outcome::Refused,
                        // Detection is required of a pool trusted at open; with the
                        // clean flag off, recovery may cut the damage silently.
                        Expect::Detect => {
                            ran.outcome != Outcome::Refused
                                && (variant == "unclean" || !ran.found.is_empty())
                        }
                        Expect::Any => true,
                    };
                    if !ok {
                        failures.push(format!(
                            "{name} ({variant}): expected {expect:?}, got {:?}, found {:?}",
                            ran.outcome, ran.found
                        ));
                    }
                    let first = ran.found.first().cloned().unwrap_or_default();
                    (
                        name,
                        variant,
                        format!("{:?}", ran.outcome).to_lowercase(),
                        format!("{} problem(s): {first}", ran.found.len()),
                    )
                }
            };
            table.push(row);
        }
    }
    println!(
        "{:<32} {:<8} {:<10} problems found",
        "case", "pool", "outcome"
    );
    for (n, v, o, p) in &table {
        let p: String = p.chars().take(110).collect();
        println!("{n:<32} {v:<8} {o:<10} {p}");
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------- fuzz

/// splitmix64: a small, fixed-seed generator (no dependency on an RNG crate's API).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Open an in-memory image, check, repair, and check the repaired image reopened.
fn fuzz_one(img: Vec<u8>) -> Result<&'static str, String> {
    let mut pool = match Pool::open_image(&img, PmemBackend::default()) {
        Ok(p) => p,
        Err(e) => {
            pool_error(&e)?;
            return Ok("refused");
        }
    };
    let first = fsck::check(&pool);
    let what = if first.is_clean() {
        "recovered"
    } else {
        fsck::repair(&mut pool).map_err(|e| format!("repair failed: {e}"))?;
        let again = fsck::check(&pool);
        if !again.is_clean() {
            return Err(format!("after repair: {:?}", again.problems));
        }
        "repaired"
    };
    pool.close().map_err(|e| e.to_string())?;
    let snap = pool.pm.snapshot();
    pool.crash();
    let pool =
        Pool::open_image(&snap, PmemBackend::default()).map_err(|e| format!("reopen: {e}"))?;
    let last = fsck::check(&pool);
    if !last.is_clean() {
        return Err(format!("after reopen: {:?}", last.problems));
    }
    pool.crash();
    Ok(what)
}

#[test]
fn fuzz_random_damage() {
    let s = seed();
    let long = std::env::var("LYNXFS_LONG").is_ok_and(|v| v == "1");
    let iters = if long { 5000 } else { 200 };
    let l = s.l;
    // Where the metadata is: superblocks, journals, saved state, the used part of the
    // inode and dentry tables, and every used data block's first bytes (log pages,
    // tree nodes, xattr blocks, file data).
    let (bb, _, _) = l.state_bitmaps();
    let mut used_blocks = Vec::new();
    for b in 0..l.data_blocks {
        if r64(&s.img, bb + (b / 64) * 8) & 1 << (b % 64) != 0 {
            used_blocks.push(b);
        }
    }
    let regions: Vec<(u64, u64)> = vec![
        (0, SB_LEN as u64),
        (BLOCK, SB_LEN as u64),
        (l.journal_off, 256),
        (l.journal_addr(1), 256),
        (l.state_off, l.state_len),
        (l.inode_off, 256 * 24),
        (l.dentry_off, 320 * 24),
    ];
    let mut rng = Rng(0x1ab5_f5c4_2026);
    let mut counts = std::collections::BTreeMap::new();
    let mut failures = Vec::new();
    for it in 0..iters {
        let mut img = s.img.clone();
        let n = 1 + rng.below(4);
        let mut how = Vec::new();
        for _ in 0..n {
            let (start, len) = if rng.below(3) == 0 && !used_blocks.is_empty() {
                let b = used_blocks[rng.below(used_blocks.len() as u64) as usize];
                (l.block_addr(b), 256)
            } else {
                regions[rng.below(regions.len() as u64) as usize]
            };
            let off = start + rng.below(len);
            match rng.below(3) {
                0 => {
                    let bit = rng.below(8) as u32;
                    flip(&mut img, off, bit);
                    how.push(format!("flip {off:#x}.{bit}"));
                }
                1 => {
                    let k = (1 + rng.below(64)).min(POOL_SIZE - off) as usize;
                    zero(&mut img, off, k);
                    how.push(format!("zero {off:#x}+{k}"));
                }
                _ => {
                    let k = (1 + rng.below(16)).min(POOL_SIZE - off) as usize;
                    for x in &mut img[off as usize..off as usize + k] {
                        *x = rng.next() as u8;
                    }
                    how.push(format!("random {off:#x}+{k}"));
                }
            }
        }
        if rng.below(2) == 0 {
            if let Some(u) = unclean(&img) {
                img = u;
                how.push("unclean".into());
            }
        }
        match guarded("fuzz", move || fuzz_one(img)) {
            Ok(what) => *counts.entry(what).or_insert(0) += 1,
            Err(e) => failures.push(format!("iteration {it} ({}): {e}", how.join(", "))),
        }
    }
    println!("fuzz: {iters} iterations: {counts:?}");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------- CWON (issue 16)

/// A pool left unclean right after creates (fresh dentries: nothing changed their
/// inodes since), a create changed later (settled) and a hard link, for the damage a
/// create under one fence can leave (docs/CONSISTENCY.md, "create").
struct Torn {
    img: Vec<u8>,
    l: Layout,
    ino: std::collections::HashMap<&'static str, u64>,
}

/// The names of [`torn_seed`]; `/dir/h2` is a second name of `/h`.
const TORN_NAMES: [&str; 8] = [
    "/dir", "/dir/f", "/g", "/ln", "/empty", "/chm", "/h", "/dir/h2",
];

fn torn_seed() -> &'static Torn {
    static SEED: OnceLock<Torn> = OnceLock::new();
    SEED.get_or_init(|| {
        let mut o = MkfsOptions::new(POOL_SIZE);
        o.lanes = 2;
        let fs = Fs::in_memory(&o, PmemBackend::default()).unwrap();
        let s = fs.session(Cred::root());
        s.mkdir("/dir", 0o755).unwrap();
        for p in ["/dir/f", "/g", "/chm", "/h"] {
            let fd = s.create(p, 0o644).unwrap();
            fs.close_fd(fd).unwrap();
        }
        s.symlink("/dir/f", "/ln").unwrap();
        s.mkdir("/empty", 0o700).unwrap();
        s.chmod("/chm", 0o600).unwrap();
        s.link("/h", "/dir/h2").unwrap();
        let ino = TORN_NAMES
            .iter()
            .map(|&p| (p, s.lstat(p).unwrap().ino))
            .collect();
        drop(s);
        // Still open: the image is that of a crash (clean flag off).
        let img = fs.pool().pm.snapshot();
        let l = fs.pool().layout;
        fs.pool().crash_in_place();
        Torn { img, l, ino }
    })
}

impl Torn {
    fn iaddr(&self, path: &str) -> u64 {
        self.l.inode_addr(self.ino[path])
    }
    /// The dentry a file's back pointer names (its first name).
    fn dentry(&self, path: &str) -> u64 {
        r64(&self.img, self.iaddr(path) + inode::DENTRY)
    }
    /// The dentry of `/dir/h2` (not the one `/h`'s back pointer names).
    fn link_dentry(&self, img: &[u8]) -> u64 {
        let dir = self.ino["/dir"];
        let page = r64(img, self.l.inode_addr(dir) + inode::DIR_LOG);
        (0..dirlog::SLOTS_PER_PAGE)
            .map(|i| r64(img, dirlog::slot_addr(page, i)))
            .find(|&d| {
                d != 0 && {
                    let (len, _) = dentry::split_name_len(r64(img, d + dentry::NAME_LEN));
                    img[(d + dentry::NAME) as usize..(d + dentry::NAME) as usize + len] == *b"h2"
                }
            })
            .expect("the dentry of /dir/h2")
    }
}

/// Recover `img` (it is unclean), require fsck to find it consistent, and return the
/// names of [`TORN_NAMES`] still there.
fn recovered_names(img: &[u8]) -> Result<Vec<&'static str>, String> {
    let pool = Pool::open_image(img, PmemBackend::default()).map_err(|e| e.to_string())?;
    let rep = fsck::check(&pool);
    if !rep.is_clean() {
        return Err(format!("fsck after recovery: {:?}", rep.problems));
    }
    let fs = Fs::new(pool);
    let s = fs.session(Cred::root());
    let names = TORN_NAMES
        .into_iter()
        .filter(|p| s.lstat(p).is_ok())
        .collect();
    drop(s);
    fs.pool().crash_in_place();
    Ok(names)
}

/// What CWON recovery must make of a create whose stores did not all land, AEON's
/// damage cases as anchor: the torn create is dropped (as if it never ran), nothing
/// else is. Also: a whole fresh create survives and an old pool's dentries, which
/// carry no check word, are trusted as before.
#[test]
fn cwon_repairs_torn_creates() {
    let t = torn_seed();
    let all = |but: &[&str]| -> Vec<&'static str> {
        TORN_NAMES
            .into_iter()
            .filter(|p| !but.contains(p))
            .collect()
    };
    type Damage = fn(&mut Vec<u8>, &Torn);
    let cases: Vec<(&str, Damage, Vec<&'static str>)> = vec![
        ("nothing torn: every create survives", |_, _| {}, all(&[])),
        (
            "a fresh create whose inode's owner store did not land",
            |i, t| w64(i, t.iaddr("/g") + inode::OWNER, 0xdead_0000_beef),
            all(&["/g"]),
        ),
        (
            "a fresh create whose mode store did not land (a directory's)",
            |i, t| w64(i, t.iaddr("/empty") + inode::MODE, 0o100644),
            all(&["/empty"]),
        ),
        (
            "a fresh dentry with a bad checksum",
            |i, t| flip(i, t.dentry("/dir/f") + dentry::CHECK, 5),
            all(&["/dir/f"]),
        ),
        (
            "a valid dentry naming an inode whose back pointer names another dentry",
            |i, t| {
                let other = t.dentry("/g");
                w64(i, t.iaddr("/ln") + inode::DENTRY, other)
            },
            all(&["/ln"]),
        ),
        (
            "a valid state word that is not the dentry's own (an earlier incarnation's)",
            |i, t| w64(i, t.dentry("/g") + dentry::STATE, dentry::VALID | 12345),
            all(&["/g"]),
        ),
        (
            "a symlink whose target block did not land",
            |i, t| {
                let at = t.iaddr("/ln");
                let m = inode::MapWord::decode(r64(i, at + inode::MAP)).unwrap();
                let off = (at + m.area_off()) as usize;
                let e = inode::Extent::decode(&i[off..off + 16]);
                flip(i, t.l.block_addr(e.pblk), 1)
            },
            all(&["/ln"]),
        ),
        (
            "a link's dentry whose inode-number store did not land (it names another file)",
            |i, t| {
                let d = t.link_dentry(i);
                w64(i, d + dentry::INO, t.ino["/g"])
            },
            all(&["/dir/h2"]),
        ),
        (
            "a changed (settled) create keeps its change",
            |i, t| w64(i, t.iaddr("/chm") + inode::ATIME, 77),
            all(&[]),
        ),
        (
            "an inode whose back pointer names a free dentry (its dentry never landed)",
            |i, t| w64(i, t.dentry("/g") + dentry::STATE, 0),
            all(&["/g"]),
        ),
        (
            "an old pool (no CWON feature): dentries without check words are trusted",
            |i, t| {
                for p in TORN_NAMES {
                    let d = t.dentry(p);
                    w64(i, d + dentry::CHECK, 0);
                    w64(i, d + dentry::BORN, 0);
                }
                let d = t.link_dentry(i);
                w64(i, d + dentry::CHECK, 0);
                let sb = superblock(i).unwrap();
                edit_sb(i, sb.home(), |s| s.incompat = 0);
            },
            all(&[]),
        ),
    ];
    let mut failures = Vec::new();
    for (what, damage, want) in cases {
        let mut img = t.img.clone();
        damage(&mut img, t);
        match recovered_names(&img) {
            Ok(got) if got == want => println!("ok: {what}"),
            Ok(got) => failures.push(format!("{what}: names {got:?}, expected {want:?}")),
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Recovery settles the fresh creates it accepts: a second crash and recovery (after
/// link counts and other derived words were rewritten) keeps them.
#[test]
fn cwon_recovery_settles_what_it_keeps() {
    let t = torn_seed();
    let pool = Pool::open_image(&t.img, PmemBackend::default()).unwrap();
    let d = t.dentry("/dir/f");
    let tag = pool.pm.load_u64(d + dentry::CHECK) >> 32 << 32;
    assert_eq!(
        tag,
        lynxfs::log::cwon::SETTLED,
        "the fresh create was not settled"
    );
    let mut again = pool.pm.snapshot();
    pool.crash_in_place();
    // A link count recovery would rewrite, on a dentry recovery settled.
    w64(&mut again, t.iaddr("/dir/f") + inode::NLINK, 5);
    assert_eq!(recovered_names(&again).unwrap(), TORN_NAMES.to_vec());
}

/// The check words a create, mkdir and rename compute from what they wrote (issue 29:
/// not read back from the pool) are the ones recovery computes from the pool: each
/// new dentry is judged whole.
#[test]
fn cwon_checks_computed_from_the_bytes_written_match_the_pool() {
    use lynxfs::log::cwon::{verdict, Verdict, FRESH, SETTLED};
    let fs = Fs::in_memory(&MkfsOptions::new(16 << 20), PmemBackend::default()).unwrap();
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    let fd = s
        .open(
            "/d/a-name-longer-than-eight",
            libc::O_CREAT | libc::O_WRONLY,
            0o640,
        )
        .unwrap();
    fs.close_fd(fd).unwrap();
    s.mkdir("/d/sub", 0o700).unwrap();
    let ns = fs.ns();
    let (pm, l) = (&ns.pool.pm, &ns.pool.layout);
    assert!(ns.pool.cwon);
    let dentry_of = |p: &str| {
        let ino = s.stat(p).unwrap().ino;
        (pm.load_u64(l.inode_addr(ino) + inode::DENTRY), ino)
    };
    // "/d" was settled by the first create in it.
    let (d, ino) = dentry_of("/d");
    assert_eq!(verdict(pm, l, d, ino), Verdict::Settled);
    for p in ["/d/a-name-longer-than-eight", "/d/sub"] {
        let (d, ino) = dentry_of(p);
        assert_eq!(pm.load_u64(d + dentry::CHECK) >> 32 << 32, FRESH, "{p}");
        assert_eq!(verdict(pm, l, d, ino), Verdict::Fresh, "{p}");
    }
    s.rename("/d/a-name-longer-than-eight", "/d/b", 0).unwrap();
    let (d, ino) = dentry_of("/d/b");
    assert_eq!(pm.load_u64(d + dentry::CHECK) >> 32 << 32, SETTLED);
    assert_eq!(verdict(pm, l, d, ino), Verdict::Settled);
}

/// A directory's settle, remembered in its cachelet (`cachelet::SETTLED`, issue 29),
/// is forgotten with its number: a new directory given the number starts fresh and is
/// settled again by the first create in it.
#[test]
fn cwon_a_reused_directory_number_is_settled_again() {
    use lynxfs::log::cwon::{FRESH, SETTLED};
    let mut o = MkfsOptions::new(16 << 20);
    o.lanes = 1;
    let fs = Fs::in_memory(&o, PmemBackend::default()).unwrap();
    let s = fs.session(Cred::root());
    let ns = fs.ns();
    let (pm, l) = (&ns.pool.pm, &ns.pool.layout);
    let check_of = |ino: u64| {
        let d = pm.load_u64(l.inode_addr(ino) + inode::DENTRY);
        pm.load_u64(d + dentry::CHECK) >> 32 << 32
    };
    let mut inos = Vec::new();
    for round in 0..3 {
        s.mkdir("/d", 0o755).unwrap();
        let ino = s.stat("/d").unwrap().ino;
        assert_eq!(check_of(ino), FRESH, "round {round}");
        s.mkdir("/d/e", 0o755).unwrap();
        assert_eq!(check_of(ino), SETTLED, "round {round}");
        s.rmdir("/d/e").unwrap();
        s.rmdir("/d").unwrap();
        inos.push(ino);
    }
    assert!(
        inos.windows(2).any(|w| w[0] == w[1]),
        "no number reused: {inos:?}"
    );
}
