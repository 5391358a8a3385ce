//! The starting tree every workload builds, and the operations the checker runs.

use std::collections::HashMap;
use std::sync::Mutex;

use lynxfs::meta::acl::{GROUP, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ};
use lynxfs::pmem::RecordingBackend;
use lynxfs::{Cred, Fd, Fs, Session, TimeSet, Timestamp};

pub type TestFs = Fs<RecordingBackend>;

/// A live file system and the handles operations leave open.
pub struct Ctx<'a> {
    pub fs: &'a TestFs,
    pub fds: Mutex<HashMap<&'static str, Fd>>,
}

impl<'a> Ctx<'a> {
    pub fn new(fs: &'a TestFs) -> Ctx<'a> {
        Ctx {
            fs,
            fds: Mutex::new(HashMap::new()),
        }
    }
    pub fn s(&self) -> Session<'a, RecordingBackend> {
        self.fs.session(Cred::root())
    }
}

/// Deterministic file contents.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

const B: u64 = 4096;

fn put(c: &Ctx, path: &str, off: u64, data: &[u8]) -> lynxfs::Result<()> {
    let s = c.s();
    let fd = s.open(path, libc::O_CREAT | libc::O_RDWR, 0o644)?;
    let r = c.fs.pwrite(fd, data, off).map(drop);
    c.fs.close_fd(fd)?;
    r
}

pub const ACL_ACCESS: &str = "system.posix_acl_access";
pub const ACL_DEFAULT: &str = "system.posix_acl_default";
const NO_ID: u32 = u32::MAX;

/// The `system.posix_acl_*` value of an ACL with these (tag, permission, id) entries.
pub fn acl_value(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// /a's access ACL in the starting tree: a named user, mask rw (mode 0664).
fn acl_of_a() -> Vec<u8> {
    acl_value(&[
        (USER_OBJ, 6, NO_ID),
        (USER, 6, 1000),
        (GROUP_OBJ, 4, NO_ID),
        (MASK, 6, NO_ID),
        (OTHER, 4, NO_ID),
    ])
}

/// The extended access ACL set on /x (0644 with user.a): mask rw, other none, so the
/// mode becomes 0660.
pub fn acl_for_x() -> Vec<u8> {
    acl_value(&[
        (USER_OBJ, 6, NO_ID),
        (USER, 4, 1000),
        (GROUP_OBJ, 4, NO_ID),
        (GROUP, 6, 60),
        (MASK, 6, NO_ID),
        (OTHER, 0, NO_ID),
    ])
}

/// A default ACL (on /da in the starting tree, and set on /d1 by an operation).
fn default_acl() -> Vec<u8> {
    acl_value(&[
        (USER_OBJ, 7, NO_ID),
        (USER, 7, 1000),
        (GROUP_OBJ, 5, NO_ID),
        (MASK, 7, NO_ID),
        (OTHER, 5, NO_ID),
    ])
}

/// The tree every workload starts from:
///
/// ```text
/// /d1/f1 (5000 B)  /d1/e1/ (empty)  /d2/g (100 B)  /d2/hl = /h (hard link)
/// /f (3 blocks + 500 B)  /h (50 B)  /s -> f  /x (xattr user.a)  /e2/ (empty)
/// /big (blocks 0,2,4,6: four inline extents)  /tree (blocks 0,2,..,10: a tree)
/// /a (50 B, extended access ACL: mode 0664)  /da/ (empty, default ACL)
/// /xa (150 attributes: a chained attribute set)
/// /grow (16 blocks: the size from which appends reserve blocks past the end)
/// /long (blocks 0-7 in one extent, 9, 11: three extents)
/// ```
pub fn setup(c: &Ctx) {
    let s = c.s();
    s.mkdir("/d1", 0o755).unwrap();
    s.mkdir("/d2", 0o755).unwrap();
    s.mkdir("/e2", 0o755).unwrap();
    s.mkdir("/d1/e1", 0o755).unwrap();
    put(c, "/d1/f1", 0, &pattern(5000, 1)).unwrap();
    put(c, "/d2/g", 0, &pattern(100, 2)).unwrap();
    put(c, "/f", 0, &pattern(3 * B as usize + 500, 3)).unwrap();
    put(c, "/h", 0, &pattern(50, 4)).unwrap();
    s.link("/h", "/d2/hl").unwrap();
    s.symlink("f", "/s").unwrap();
    put(c, "/x", 0, b"0123456789").unwrap();
    s.setxattr("/x", "user.a", b"one", 0).unwrap();
    for i in 0..4 {
        put(c, "/big", 2 * i * B, &pattern(B as usize, 10 + i as u8)).unwrap();
    }
    for i in 0..6 {
        put(c, "/tree", 2 * i * B, &pattern(B as usize, 20 + i as u8)).unwrap();
    }
    put(c, "/a", 0, &pattern(50, 30)).unwrap();
    s.setxattr("/a", ACL_ACCESS, &acl_of_a(), 0).unwrap();
    s.mkdir("/da", 0o755).unwrap();
    s.setxattr("/da", ACL_DEFAULT, &default_acl(), 0).unwrap();
    put(c, "/grow", 0, &pattern(16 * B as usize, 40)).unwrap();
    put(c, "/long", 0, &pattern(8 * B as usize, 44)).unwrap();
    put(c, "/long", 9 * B, &pattern(B as usize, 45)).unwrap();
    put(c, "/long", 11 * B, &pattern(B as usize, 46)).unwrap();
    put(c, "/xa", 0, b"x").unwrap();
    for i in 0..150 {
        s.setxattr("/xa", format!("user.m{i:03}"), &pattern(20, i as u8), 0)
            .unwrap();
    }
}

/// One operation: a name and what it does (`i` tells instances in a sequence apart).
#[derive(Clone, Copy)]
pub struct Op {
    pub name: &'static str,
    pub run: fn(&Ctx, usize) -> lynxfs::Result<()>,
    /// Compare atime and mtime too (operations whose point is to set them).
    pub times: bool,
}

const fn op(name: &'static str, run: fn(&Ctx, usize) -> lynxfs::Result<()>) -> Op {
    Op {
        name,
        run,
        times: false,
    }
}

fn rename(c: &Ctx, a: &str, b: &str, flags: u32) -> lynxfs::Result<()> {
    c.s().rename(a, b, flags)
}

fn with_fd(
    c: &Ctx,
    path: &str,
    flags: i32,
    f: impl FnOnce(Fd) -> lynxfs::Result<()>,
) -> lynxfs::Result<()> {
    let fd = c.s().open(path, flags, 0o644)?;
    let r = f(fd);
    c.fs.close_fd(fd)?;
    r
}

/// Every operation type, each alone in a workload.
pub fn all_ops() -> Vec<Op> {
    vec![
        op("create", |c, i| {
            let fd = c.s().open(
                format!("/d1/c{i}"),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o640,
            )?;
            c.fs.close_fd(fd)
        }),
        op("mkdir", |c, i| c.s().mkdir(format!("/d1/m{i}"), 0o750)),
        op("mknod-fifo", |c, i| {
            c.s().mknod(format!("/d2/p{i}"), libc::S_IFIFO | 0o600, 0)
        }),
        op("unlink", |c, _| c.s().unlink("/d2/g")),
        op("unlink-hardlinked", |c, _| c.s().unlink("/d2/hl")),
        op("rmdir", |c, _| c.s().rmdir("/d1/e1")),
        op("link", |c, i| c.s().link("/h", format!("/d1/l{i}"))),
        // The last name of an open file goes; the handle keeps the inode alive.
        op("unlink-open", |c, _| {
            let fd = c.s().open("/d1/f1", libc::O_RDWR, 0)?;
            c.fds.lock().unwrap().insert("orphan", fd);
            c.s().unlink("/d1/f1")
        }),
        op("write-orphan", |c, _| {
            match c.fds.lock().unwrap().get("orphan") {
                Some(&fd) => c.fs.pwrite(fd, &pattern(3000, 9), 2000).map(drop),
                None => Ok(()),
            }
        }),
        // Speculative preallocation: an append that reserves blocks past the end,
        // then the last close that gives them back.
        op("write-append-reserve", |c, _| {
            with_fd(c, "/grow", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(B as usize, 41), 16 * B).map(drop)
            })
        }),
        // The same in steps, the handle kept open: the reserving append, an append
        // into the reserve (a size commit alone), the trimming close.
        op("grow-open", |c, _| {
            let fd = c.s().open("/grow", libc::O_WRONLY, 0)?;
            c.fds.lock().unwrap().insert("grow", fd);
            c.fs.pwrite(fd, &pattern(B as usize, 42), 16 * B).map(drop)
        }),
        op("append-into-reserve", |c, _| {
            match c.fds.lock().unwrap().get("grow") {
                Some(&fd) => {
                    let end = c.fs.fstat(fd)?.size;
                    c.fs.pwrite(fd, &pattern(B as usize + 10, 43), end)
                        .map(drop)
                }
                None => Ok(()),
            }
        }),
        op("close-grown", |c, _| {
            match c.fds.lock().unwrap().remove("grow") {
                Some(fd) => c.fs.close_fd(fd),
                None => Ok(()),
            }
        }),
        op("close-orphan", |c, _| {
            match c.fds.lock().unwrap().remove("orphan") {
                Some(fd) => c.fs.close_fd(fd),
                None => Ok(()),
            }
        }),
        op("symlink", |c, i| {
            c.s().symlink("../f", format!("/d1/sl{i}"))
        }),
        op("rename-same-dir", |c, _| rename(c, "/d1/f1", "/d1/f1r", 0)),
        op("rename-cross-dir", |c, _| rename(c, "/d1/f1", "/d2/f1x", 0)),
        op("rename-over-file", |c, _| rename(c, "/d1/f1", "/d2/g", 0)),
        op("rename-over-hardlink", |c, _| rename(c, "/d1/f1", "/h", 0)),
        op("rename-over-empty-dir", |c, _| {
            rename(c, "/d1/e1", "/e2", 0)
        }),
        op("rename-noreplace", |c, _| {
            rename(c, "/f", "/d1/fn", libc::RENAME_NOREPLACE)
        }),
        op("rename-noreplace-exists", |c, _| {
            rename(c, "/d2/g", "/h", libc::RENAME_NOREPLACE)
        }),
        op("rename-exchange", |c, _| {
            rename(c, "/d1/f1", "/d2/g", libc::RENAME_EXCHANGE)
        }),
        op("rename-exchange-dir-file", |c, _| {
            rename(c, "/d1/e1", "/d2/g", libc::RENAME_EXCHANGE)
        }),
        // The whiteout inode is written first; the rename's journal record names it.
        op("rename-whiteout", |c, _| {
            rename(c, "/d1/f1", "/d2/f1w", libc::RENAME_WHITEOUT)
        }),
        op("rename-whiteout-over-file", |c, _| {
            rename(c, "/d1/f1", "/d2/g", libc::RENAME_WHITEOUT)
        }),
        // An unnamed file, then a name for it: the link's commit point.
        op("tmpfile-link", |c, i| {
            let d1 = c.s().stat("/d1")?.ino;
            let fd =
                c.fs.open_tmpfile(d1, (0o640, 0), libc::O_RDWR, &lynxfs::Cred::root())?
                    .fd;
            let r = c.fs.write(fd, b"tmp").and_then(|_| {
                let ino = c.fs.fstat(fd)?.ino;
                c.fs.ns()
                    .link(ino, d1, format!("t{i}").as_bytes(), &lynxfs::Cred::root())
            });
            c.fs.close_fd(fd)?;
            r
        }),
        op("rename-dir-cross", |c, _| rename(c, "/d1/e1", "/d2/e1m", 0)),
        op("rename-dir-tree", |c, _| rename(c, "/d1", "/e2/d1m", 0)),
        op("chmod", |c, _| c.s().chmod("/f", 0o600)),
        op("chown", |c, _| c.s().chown("/f", Some(1000), Some(1001))),
        // The owner it has (tar's chown of every file): ctime alone.
        op("chown-same", |c, _| c.s().chown("/f", Some(0), Some(0))),
        Op {
            times: true,
            // tar's futimens (atime UTIME_OMIT): ctime, a fence, then the mtime word.
            ..op("utimens-mtime", |c, _| {
                c.s().utimens(
                    "/f",
                    None,
                    Some(TimeSet::At(Timestamp::from_ns(1_700_000_000_000_000_000))),
                )
            })
        },
        Op {
            times: true,
            ..op("utimens", |c, _| {
                c.s().utimens(
                    "/f",
                    Some(TimeSet::At(Timestamp::from_ns(1_000_000_000))),
                    Some(TimeSet::At(Timestamp::from_ns(2_000_000_000))),
                )
            })
        },
        Op {
            times: true,
            // Times outside 1970..2554 span a time word and the inode's high-half word.
            ..op("utimens-extended", |c, _| {
                c.s().utimens(
                    "/f",
                    Some(TimeSet::At(Timestamp {
                        sec: -315_619_200,
                        nsec: 7,
                    })),
                    Some(TimeSet::At(Timestamp {
                        sec: i64::MAX,
                        nsec: 0,
                    })),
                )
            })
        },
        op("truncate-up", |c, _| c.s().truncate("/d2/g", 10_000)),
        op("truncate-down", |c, _| c.s().truncate("/f", 100)),
        op("truncate-down-block", |c, _| c.s().truncate("/f", 2 * B)),
        op("truncate-tree", |c, _| c.s().truncate("/tree", 3 * B)),
        op("write-append", |c, _| {
            with_fd(c, "/d2/g", libc::O_WRONLY | libc::O_APPEND, |fd| {
                c.fs.write(fd, &pattern(200, 5)).map(drop)
            })
        }),
        op("write-append-block", |c, _| {
            with_fd(c, "/d1/f1", libc::O_WRONLY | libc::O_APPEND, |fd| {
                c.fs.write(fd, &pattern(5000, 6)).map(drop)
            })
        }),
        op("write-overwrite", |c, _| {
            with_fd(c, "/f", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(B as usize, 7), B).map(drop)
            })
        }),
        op("write-unaligned", |c, _| {
            with_fd(c, "/f", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(300, 8), 4000).map(drop)
            })
        }),
        op("write-past-eof", |c, _| {
            with_fd(c, "/d2/g", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(100, 9), 3 * B + 7).map(drop)
            })
        }),
        op("write-multiblock", |c, _| {
            with_fd(c, "/f", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(5 * B as usize, 10), 100).map(drop)
            })
        }),
        // A fifth extent: the inline map grows into an extent tree.
        op("write-grow-tree", |c, _| {
            with_fd(c, "/big", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(B as usize, 11), 8 * B).map(drop)
            })
        }),
        op("write-in-tree", |c, _| {
            with_fd(c, "/tree", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(2 * B as usize, 12), 3 * B + 10)
                    .map(drop)
            })
        }),
        // One block that is an extent of its own: the atomic mode swaps its block
        // pointer (in the inode's map area here, in a tree leaf below).
        op("write-swap-inline", |c, _| {
            with_fd(c, "/big", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(B as usize, 14), 2 * B).map(drop)
            })
        }),
        op("write-swap-tree", |c, _| {
            with_fd(c, "/tree", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(300, 15), 4 * B + 100).map(drop)
            })
        }),
        // One block inside a longer extent (atomic mode): the extent's window is cut
        // into single-block extents in the same commit; then a block of the window
        // is overwritten by a block-pointer swap.
        op("write-cut-window", |c, _| {
            with_fd(c, "/long", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(300, 47), 3 * B + 50).map(drop)
            })
        }),
        op("write-swap-long", |c, _| {
            with_fd(c, "/long", libc::O_WRONLY, |fd| {
                c.fs.pwrite(fd, &pattern(B as usize, 48), 6 * B).map(drop)
            })
        }),
        op("open-trunc", |c, _| {
            with_fd(c, "/d1/f1", libc::O_WRONLY | libc::O_TRUNC, |_| Ok(()))
        }),
        op("fallocate", |c, _| {
            with_fd(c, "/d2/g", libc::O_WRONLY, |fd| {
                c.fs.fallocate(fd, 0, B, 2 * B)
            })
        }),
        op("fallocate-keep-size", |c, _| {
            with_fd(c, "/d2/g", libc::O_WRONLY, |fd| {
                c.fs.fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, 0, 3 * B)
            })
        }),
        op("punch-hole", |c, _| {
            with_fd(c, "/f", libc::O_WRONLY, |fd| {
                c.fs.fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    B,
                    B,
                )
            })
        }),
        op("punch-unaligned", |c, _| {
            with_fd(c, "/f", libc::O_WRONLY, |fd| {
                c.fs.fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    100,
                    6000,
                )
            })
        }),
        op("setxattr-new", |c, i| {
            c.s()
                .setxattr("/x", format!("user.n{i}"), b"hello", libc::XATTR_CREATE)
        }),
        op("setxattr-replace", |c, _| {
            c.s().setxattr("/x", "user.a", b"two!", libc::XATTR_REPLACE)
        }),
        op("setxattr-dir", |c, i| {
            c.s().setxattr("/d1", format!("user.d{i}"), b"v", 0)
        }),
        op("removexattr", |c, _| c.s().removexattr("/x", "user.a")),
        // A large set (a log): one entry appended.
        op("setxattr-chained", |c, i| {
            c.s()
                .setxattr("/xa", format!("user.c{i}"), &pattern(300, 40), 0)
        }),
        // A log's replacement and removal: one appended entry each (issue 30, item 11).
        op("setxattr-log-replace", |c, _| {
            c.s()
                .setxattr("/xa", "user.m007", &pattern(33, 9), libc::XATTR_REPLACE)
        }),
        op("removexattr-log", |c, _| {
            c.s().removexattr("/xa", "user.m042")
        }),
        // An entry that crosses into a new data block (whose pointer goes into the
        // index block past the log's end).
        op("setxattr-log-new-block", |c, i| {
            c.s()
                .setxattr("/xa", format!("user.b{i}"), &pattern(4000, 41), 0)
        }),
        // A single-block set becomes chained: a value at Linux's 64 KiB limit.
        op("setxattr-64k", |c, i| {
            c.s()
                .setxattr("/x", format!("user.big{i}"), &pattern(65536, 50), 0)
        }),
        // POSIX ACLs: the attribute block and the mode change in one journal record.
        op("acl-access-extended", |c, _| {
            c.s().setxattr("/x", ACL_ACCESS, &acl_for_x(), 0)
        }),
        // A minimal ACL is the mode: /a's stored ACL goes, its mode becomes 0600.
        op("acl-access-minimal", |c, _| {
            let minimal = acl_value(&[
                (USER_OBJ, 6, NO_ID),
                (GROUP_OBJ, 0, NO_ID),
                (OTHER, 0, NO_ID),
            ]);
            c.s().setxattr("/a", ACL_ACCESS, &minimal, 0)
        }),
        op("acl-remove-access", |c, _| {
            c.s().removexattr("/a", ACL_ACCESS)
        }),
        // The ACL's mask takes the new group bits.
        op("chmod-acl", |c, _| c.s().chmod("/a", 0o640)),
        op("acl-default-dir", |c, _| {
            c.s().setxattr("/d1", ACL_DEFAULT, &default_acl(), 0)
        }),
        op("acl-remove-default", |c, _| {
            c.s().removexattr("/da", ACL_DEFAULT)
        }),
        // Inherited from /da's default ACL: an access ACL (and, for a directory, the
        // default), written before the create's commit point.
        op("create-inherit", |c, i| {
            let fd = c.s().open(
                format!("/da/c{i}"),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o640,
            )?;
            c.fs.close_fd(fd)
        }),
        op("mkdir-inherit", |c, i| {
            c.s().mkdir(format!("/da/m{i}"), 0o750)
        }),
    ]
}

/// The operations paired with each other by default: one of each kind of commit
/// (dentry valid bit, journal record, single inode word, size word, xattr word, an
/// attribute block published with the mode in a journal record), in one directory
/// and across directories. Cost is what limits the set: each image means mapping and
/// recovering a pool.
pub const PAIR_SET: &[&str] = &[
    "create",
    "unlink",
    "rmdir",
    "rename-over-file",
    "rename-exchange",
    "chmod",
    "write-append",
    "setxattr-new",
    "acl-access-extended",
];

/// Pairs beyond `PAIR_SET` where an ACL operation meets one that reads or rewrites
/// what it wrote: a create inheriting (or no longer inheriting) a default ACL just
/// set (or removed), a chmod and an ACL change of one file, in both orders.
pub const ACL_PAIRS: &[[&str; 2]] = &[
    ["acl-default-dir", "create"],
    ["acl-default-dir", "mkdir"],
    ["acl-remove-default", "create-inherit"],
    ["chmod-acl", "acl-access-minimal"],
    ["acl-access-minimal", "chmod-acl"],
    ["chmod-acl", "acl-remove-access"],
];

/// Directory log compaction (`meta::compact`), in two steps: "compact-fill" (not
/// judged: over a thousand operations) leaves /cd with four log pages: k0 alone in
/// the first, the second empty, the third full, k1512 alone in the fourth (no removal
/// check fell on the removal that emptied the second); "compact-unlink" removes k1512,
/// then the directory is evicted and looked up again: the load finds the log worth
/// compacting, and the second and the (now empty) last pages leave the chain, the
/// third keeping its readdir positions.
pub fn compaction_steps() -> Vec<Op> {
    vec![
        op("compact-fill", |c, _| {
            let s = c.s();
            s.mkdir("/cd", 0o755)?;
            for i in 0..1513 {
                c.fs.close_fd(s.create(format!("/cd/k{i}"), 0o644)?)?;
            }
            for i in 1..1008 {
                s.unlink(format!("/cd/k{i}"))?;
            }
            Ok(())
        }),
        op("compact-unlink", |c, _| {
            let pages = || c.s().stat("/cd").map(|st| st.blocks);
            let before = pages()?;
            c.s().unlink("/cd/k1512")?;
            c.fs.ns().drop_index();
            c.s().stat("/cd/k0")?;
            assert_eq!(pages()?, before / 2, "two of its four pages went");
            Ok(())
        }),
    ]
}

pub fn find(ops: &[Op], name: &str) -> Op {
    *ops.iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no op {name}"))
}
