//! What `tar -xf` asks of the library for each regular file, repeated N times: create,
//! a few appends in the pieces GNU tar writes (up to its 10 KiB record, the first one
//! short), futimens with an explicit mtime, fchown to the owner it already has, fchmod,
//! close. `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='*tar_extract*measured*'` counts its instructions per file apart
//! from the set-up; without valgrind it prints the time per file.
//! Usage: `tar_extract N` (sizes cycle through 1 to 28 KiB, mean about 14 KiB).
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Session, SetAttr, TimeSet, Timestamp};

/// tar's record: the archive is read, and the file written, in pieces this long.
const RECORD: usize = 10240;

/// The pieces a file of `size` bytes starting at byte `at` of tar's record is
/// written in.
fn pieces(size: usize, at: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut left, mut room) = (size, RECORD - at % RECORD);
    while left > 0 {
        let n = left.min(room);
        out.push(n);
        left -= n;
        room = RECORD;
    }
    out
}

/// One file as tar extracts it.
fn extract(fs: &Fs, s: &Session<'_, PmemBackend>, path: &str, sizes: &[usize], buf: &[u8]) {
    let fd = s
        .open(
            path,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY,
            0o600,
        )
        .unwrap();
    for &n in sizes {
        fs.write(fd, &buf[..n]).unwrap();
    }
    let ino = fs.fd_ino(fd).unwrap();
    let cred = Cred::root();
    let set = |a: SetAttr| fs.ns().set_attrs(ino, &a, &cred).unwrap();
    set(SetAttr {
        mtime: Some(TimeSet::At(Timestamp::from_ns(1_700_000_000_000_000_000))),
        ..Default::default()
    });
    set(SetAttr {
        uid: Some(0),
        gid: Some(0),
        ..Default::default()
    });
    set(SetAttr {
        mode: Some(0o644),
        ..Default::default()
    });
    fs.close_fd(fd).unwrap();
}

/// The only code callgrind counts (`--toggle-collect=*measured*`).
#[inline(never)]
fn measured(fs: &Fs, s: &Session<'_, PmemBackend>, files: &[(String, Vec<usize>)], buf: &[u8]) {
    for (path, sizes) in files {
        extract(fs, s, path, sizes, buf);
    }
}

fn main() {
    let n: usize = match std::env::args().nth(1).and_then(|a| a.parse().ok()) {
        Some(n) => n,
        None => {
            eprintln!("usage: tar_extract N");
            std::process::exit(2);
        }
    };
    let mut o = MkfsOptions::new(1 << 30);
    o.lanes = 2;
    let fs = Fs::in_memory(&o, PmemBackend::default()).expect("pool");
    let s = fs.session(Cred::root());
    s.mkdir("/d", 0o755).unwrap();
    let mut at = 0;
    let files: Vec<(String, Vec<usize>)> = (0..n)
        .map(|i| {
            let size = 1024 + (i * 7919) % (27 * 1024);
            let p = pieces(size, at);
            at += size.next_multiple_of(512) + 512;
            (format!("/d/f{i}"), p)
        })
        .collect();
    let buf = vec![b'x'; RECORD];
    let t = std::time::Instant::now();
    measured(&fs, &s, &files, &buf);
    let per = t.elapsed().as_nanos() as f64 / n as f64;
    println!("{n} files, {per:.0} ns per file");
}
