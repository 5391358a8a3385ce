//! File data at the edges: a full pool, and space that must come back.

mod common;

use common::{errno, fs};
use lynxfs::Cred;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

#[test]
fn filling_the_pool_gives_enospc_and_leaves_it_usable() {
    let fs = fs(8 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    let chunk = vec![0x5au8; 64 * 1024];
    let mut files = Vec::new();
    let mut written = 0u64;
    'fill: for i in 0.. {
        let path = format!("/d/f{i}");
        let fd = match s.open(&path, CREAT, 0o644) {
            Ok(fd) => fd,
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC);
                break;
            }
        };
        files.push(path);
        for _ in 0..16 {
            match fs.write(fd, &chunk) {
                Ok(n) => written += n as u64,
                Err(e) => {
                    assert_eq!(e.errno(), libc::ENOSPC, "a full pool says ENOSPC");
                    fs.close_fd(fd).unwrap();
                    break 'fill;
                }
            }
        }
        fs.close_fd(fd).unwrap();
    }
    assert!(written > 4 << 20, "only {written} bytes fit");
    // A failed write changed nothing: every file reads back whole.
    let mut buf = vec![0u8; 1 << 20];
    for p in &files {
        let fd = s.open(p, libc::O_RDONLY, 0).unwrap();
        let n = fs.read(fd, &mut buf).unwrap();
        assert!(buf[..n].iter().all(|&b| b == 0x5a), "{p} damaged");
        assert_eq!(n as u64 % chunk.len() as u64, 0, "{p} holds a torn write");
        fs.close_fd(fd).unwrap();
    }
    assert_eq!(
        errno(s.mkdir("/d/more", 0o755).and_then(|_| {
            // The directory may still fit in an existing log page; a data write cannot.
            let fd = s.open("/d/more/x", CREAT, 0o644)?;
            let r = fs.write(fd, &vec![1u8; 1 << 20]);
            fs.close_fd(fd)?;
            r.map(drop)
        })),
        libc::ENOSPC
    );
    // Remove one file: the space comes back and writes work again.
    s.unlink(&files[0]).unwrap();
    let fd = s.open("/d/again", CREAT, 0o644).unwrap();
    fs.write(fd, &chunk).unwrap();
    fs.close_fd(fd).unwrap();
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(rep.is_clean(), "{:?}", rep.problems);
}

#[test]
fn writing_and_deleting_the_capacity_several_times_returns_every_block() {
    let fs = fs(8 << 20);
    let s = fs.session(Cred::root());
    s.mkdir("/warm", 0o755).unwrap(); // the root's log page
    let free0 = fs.pool().alloc.blocks.free_count();
    let inodes0 = fs.pool().alloc.inodes.free_count();
    let chunk = vec![7u8; 256 * 1024];
    let mut total = 0u64;
    for round in 0..4 {
        let mut names = Vec::new();
        'fill: for i in 0.. {
            let p = format!("/r{round}-{i}");
            let fd = match s.open(&p, CREAT, 0o644) {
                Ok(fd) => fd,
                Err(_) => break,
            };
            names.push(p);
            loop {
                match fs.write(fd, &chunk) {
                    Ok(n) => total += n as u64,
                    Err(e) => {
                        assert_eq!(e.errno(), libc::ENOSPC);
                        fs.close_fd(fd).unwrap();
                        break 'fill;
                    }
                }
                if i % 3 == 0 {
                    break; // some small files too
                }
            }
            // Truncate and punch on the way, so those paths give blocks back as well.
            if i % 5 == 1 {
                fs.ftruncate(fd, 100_000).unwrap();
                fs.fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    0,
                    40_000,
                )
                .unwrap();
            }
            fs.close_fd(fd).unwrap();
        }
        for p in names {
            s.unlink(&p).unwrap();
        }
        assert_eq!(
            fs.pool().alloc.blocks.free_count(),
            free0,
            "round {round}: blocks leaked"
        );
        assert_eq!(
            fs.pool().alloc.inodes.free_count(),
            inodes0,
            "round {round}: inodes leaked"
        );
    }
    let capacity = free0 * 4096;
    assert!(
        total > 3 * capacity,
        "wrote {total} bytes, capacity {capacity}"
    );
    let rep = lynxfs::fsck::check(fs.pool());
    assert!(rep.is_clean(), "{:?}", rep.problems);
}

#[test]
fn fallocate_that_grows_the_file_shows_zeros_past_the_old_end() {
    // Found by fsx through the mount: truncate down into a block, then fallocate past
    // the new end within allocated blocks; the bytes between must read as zeros.
    let fs = fs(8 << 20);
    let s = fs.session(Cred::root());
    let fd = s.open("/f", CREAT, 0o644).unwrap();
    fs.pwrite(fd, &[0x84u8; 8192], 0).unwrap();
    fs.ftruncate(fd, 4096 + 100).unwrap();
    fs.fallocate(fd, 0, 4096 + 50, 1000).unwrap();
    let mut buf = vec![0xffu8; 950];
    assert_eq!(fs.pread(fd, &mut buf, 4096 + 100).unwrap(), 950);
    assert!(buf.iter().all(|&b| b == 0), "stale bytes exposed");
    fs.close_fd(fd).unwrap();
}
