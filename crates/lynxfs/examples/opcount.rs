//! One metadata operation, or a 4 KiB pread, repeated N times through the library, so
//! `valgrind --tool=callgrind` can count its instructions per operation apart from the
//! set-up: `scripts/opcount.sh` collects only inside [`measured`] and divides by N.
//! Usage: `opcount OP N`, OP one of create, mkdir, stat, unlink, rename, pread; the files in a
//! directory `OPCOUNT_DEPTH` levels deep (1 by default), the engine's switches from the
//! environment (`LYNXFS_AREAS=1`).
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fd, Fs, MkfsOptions, Session};

#[derive(Clone, Copy)]
enum Op {
    Create,
    Mkdir,
    Stat,
    Unlink,
    Rename,
    Pread,
}

struct Bench<'a> {
    fs: &'a Fs,
    s: &'a Session<'a, PmemBackend>,
    names: Vec<String>,
    renamed: Vec<String>,
    file: Option<Fd>,
}

fn parse(op: &str) -> Option<Op> {
    Some(match op {
        "create" => Op::Create,
        "mkdir" => Op::Mkdir,
        "stat" => Op::Stat,
        "unlink" => Op::Unlink,
        "rename" => Op::Rename,
        "pread" => Op::Pread,
        _ => return None,
    })
}

fn create_all(b: &Bench) {
    for p in &b.names {
        let fd =
            b.s.open(p, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644)
                .unwrap();
        b.fs.close_fd(fd).unwrap();
    }
}

fn set_up(op: Op, b: &mut Bench) {
    match op {
        Op::Create | Op::Mkdir => {}
        Op::Stat | Op::Unlink | Op::Rename => create_all(b),
        Op::Pread => {
            let fd =
                b.s.open("/d/big", libc::O_CREAT | libc::O_RDWR, 0o644)
                    .unwrap();
            let chunk = vec![7u8; 1 << 20];
            for i in 0..4u64 {
                b.fs.pwrite(fd, &chunk, i << 20).unwrap();
            }
            b.file = Some(fd);
        }
    }
}

/// The only code callgrind counts (`--toggle-collect=*measured*`).
#[inline(never)]
fn measured(op: Op, b: &Bench, n: usize) {
    let mut buf = [0u8; 4096];
    for i in 0..n {
        match op {
            Op::Create => {
                let fd =
                    b.s.open(
                        &b.names[i],
                        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                        0o644,
                    )
                    .unwrap();
                b.fs.close_fd(fd).unwrap();
            }
            Op::Mkdir => b.s.mkdir(&b.names[i], 0o755).unwrap(),
            Op::Stat => {
                b.s.stat(&b.names[i]).unwrap();
            }
            Op::Unlink => b.s.unlink(&b.names[i]).unwrap(),
            Op::Rename => b.s.rename(&b.names[i], &b.renamed[i], 0).unwrap(),
            Op::Pread => {
                let off = (i as u64 % 1024) * 4096;
                b.fs.pread(b.file.unwrap(), &mut buf, off).unwrap();
            }
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().as_deref().and_then(parse);
    let n: Option<usize> = args.next().and_then(|a| a.parse().ok());
    let (Some(op), Some(n)) = (op, n) else {
        eprintln!("usage: opcount create|mkdir|stat|unlink|rename|pread N");
        std::process::exit(2);
    };
    let mut o = MkfsOptions::new(1 << 30);
    o.lanes = 2;
    let fs = Fs::in_memory(&o, PmemBackend::default()).expect("pool");
    let s = fs.session(Cred::root());
    // OPCOUNT_DEPTH: the files' directory is that many levels below the root (1).
    let depth: usize = std::env::var("OPCOUNT_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(1);
    let mut dir = String::new();
    for _ in 0..depth.max(1) {
        dir.push_str("/d");
        s.mkdir(&dir, 0o755).unwrap();
    }
    let mut b = Bench {
        fs: &fs,
        s: &s,
        names: (0..n).map(|i| format!("{dir}/f{i}")).collect(),
        renamed: (0..n).map(|i| format!("{dir}/g{i}")).collect(),
        file: None,
    };
    set_up(op, &mut b);
    measured(op, &b, n);
}
