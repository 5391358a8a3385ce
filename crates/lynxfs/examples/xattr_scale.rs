//! setxattr and getxattr against the size of one file's attribute set (issue 30, item
//! 11): for sets of 1,000, 10,000 and 100,000 `user.*` names, the mean time of 1,000
//! more sets and of 1,000 gets of names spread over the set, through the library on
//! an in-memory pool. Run: `cargo run -p lynxfs --profile ci --example xattr_scale`.
use std::time::Instant;

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions};

const PROBES: usize = 1000;

fn name(i: usize) -> String {
    format!("user.attribute{i:06}")
}

fn main() {
    let mut o = MkfsOptions::new(1 << 30);
    o.lanes = 2;
    let fs = Fs::in_memory(&o, PmemBackend::default()).expect("pool");
    let s = fs.session(Cred::root());
    for n in [1_000, 10_000, 100_000] {
        let path = format!("/f{n}");
        let fd = s
            .open(&path, libc::O_CREAT | libc::O_WRONLY, 0o644)
            .unwrap();
        fs.close_fd(fd).unwrap();
        let t = Instant::now();
        for i in 0..n {
            s.setxattr(&path, name(i), b"a small value", 0).unwrap();
        }
        let fill = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for i in n..n + PROBES {
            s.setxattr(&path, name(i), b"a small value", 0).unwrap();
        }
        let set = t.elapsed().as_secs_f64() * 1e6 / PROBES as f64;
        let t = Instant::now();
        for k in 0..PROBES {
            let v = s.getxattr(&path, name(k * n / PROBES)).unwrap();
            assert_eq!(v, b"a small value");
        }
        let get = t.elapsed().as_secs_f64() * 1e6 / PROBES as f64;
        println!(
            "{n:>7} attributes: filled in {fill:.2} s; then set {set:.2} us, get {get:.2} us (mean of {PROBES})"
        );
    }
}
