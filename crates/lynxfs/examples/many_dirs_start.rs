//! Start on a pool of many directories (issue 44, "Start on big pools"): `cargo run
//! --release -p lynxfs --example many_dirs_start -- [DIRS] [ROUNDS]`. Makes a pool in
//! /dev/shm whose root holds DIRS directories (default 100,000) of one file each, then
//! per round: the first attach, the first lookup (`d0/f`: the root's DIRS entries and
//! `d0`'s one read into the index), the next directory's first lookup (`d1/f`), and
//! another process's attach and first lookup while this one holds the pool; in ms. The
//! pool is removed at the end.
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};

/// Set for the second process: the pool to attach.
const SECOND: &str = "MANY_DIRS_SECOND";

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Attach the pool at `path` and look up the last directory's file, timed.
fn second(path: &Path, dirs: u64) -> String {
    let t = Instant::now();
    let fs = Fs::open(path).expect("second attach");
    let attach = ms(t);
    let t = Instant::now();
    fs.session(Cred::root())
        .lstat(format!("d{}/f", dirs - 1))
        .expect("second process's lookup");
    format!("{attach:.2} {:.3}", ms(t))
}

fn make(path: &Path, dirs: u64) {
    // A log page per directory besides its inode and dentries.
    let mut o = MkfsOptions::new((dirs * 8192).max(256 << 20).next_multiple_of(1 << 20));
    o.inodes = Some(2 * dirs + dirs / 8 + 4096);
    Pool::mkfs(path, &o, PmemBackend::default()).expect("mkfs");
    let fs = Fs::open(path).expect("open");
    let s = fs.session(Cred::root());
    for i in 0..dirs {
        s.mkdir(format!("d{i}"), 0o755).expect("mkdir");
        s.mknod(format!("d{i}/f"), libc::S_IFREG | 0o644, 0)
            .expect("mknod");
    }
    fs.close().expect("close");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dirs: u64 = args.next().map_or(100_000, |s| s.parse().expect("DIRS"));
    let rounds: usize = args.next().map_or(5, |s| s.parse().expect("ROUNDS"));
    if let Some(p) = std::env::var_os(SECOND) {
        println!("{}", second(Path::new(&p), dirs));
        return;
    }
    let path = format!("/dev/shm/many-dirs-start-{}.pool", std::process::id());
    let path = Path::new(&path);
    make(path, dirs);
    println!("first attach, first lookup, next directory's, second attach, its first lookup (ms)");
    for _ in 0..rounds {
        let t = Instant::now();
        let fs = Fs::open(path).expect("first attach");
        let attach = ms(t);
        let t = Instant::now();
        fs.session(Cred::root())
            .lstat("d0/f")
            .expect("first lookup");
        let first = ms(t);
        let t = Instant::now();
        fs.session(Cred::root()).lstat("d1/f").expect("next lookup");
        let next = ms(t);
        let out = Command::new(std::env::current_exe().expect("this program"))
            .args([dirs.to_string(), "1".into()])
            .env(SECOND, path)
            .output()
            .expect("second process");
        let second = String::from_utf8_lossy(&out.stdout);
        println!("{attach:.2} {first:.2} {next:.3} {}", second.trim());
        fs.close().expect("close");
    }
    let _ = std::fs::remove_file(path);
}
