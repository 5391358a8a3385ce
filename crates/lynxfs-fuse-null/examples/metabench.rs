//! `metabench DIR [N]`: µs per metadata call over N files (default 2000) in DIR,
//! one thread, through plain system calls: create (open O_CREAT|O_EXCL + close),
//! stat (cold: first stat of each name; warm: the same names again), rename, unlink,
//! mkdir, rmdir. Used to compare a LynxFS mount, the null FUSE floor and tmpfs by
//! hand (see the crate docs for the commands).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Instant;

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in paths")
}

fn timed(label: &str, names: &[CString], mut f: impl FnMut(usize, &CString) -> i32) {
    let t = Instant::now();
    for (i, n) in names.iter().enumerate() {
        let r = f(i, n);
        if r < 0 {
            let e = std::io::Error::last_os_error();
            eprintln!("metabench: {label} {:?}: {e}", n);
            std::process::exit(1);
        }
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / names.len() as f64;
    println!("{label:<12} {us:>8.2} us/op");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: metabench DIR [N]");
        std::process::exit(2);
    };
    let n: usize = match args.next().map(|s| s.parse()) {
        None => 2000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("metabench: N must be a positive number");
            std::process::exit(2);
        }
    };
    let base = Path::new(&dir).join(format!("metabench-{}", std::process::id()));
    std::fs::create_dir(&base).unwrap_or_else(|e| {
        eprintln!("metabench: {}: {e}", base.display());
        std::process::exit(1);
    });
    let files: Vec<CString> = (0..n).map(|i| c(&base.join(format!("f{i}")))).collect();
    let renamed: Vec<CString> = (0..n).map(|i| c(&base.join(format!("r{i}")))).collect();
    let dirs: Vec<CString> = (0..n).map(|i| c(&base.join(format!("d{i}")))).collect();
    // SAFETY: `stat` is plain integers, for which all zeros is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the path is NUL-terminated and alive for the call; the descriptor
    // closed is the one just opened.
    timed("create", &files, |_, p| unsafe {
        let fd = libc::open(
            p.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o644,
        );
        if fd >= 0 {
            libc::close(fd)
        } else {
            fd
        }
    });
    // SAFETY: NUL-terminated paths alive for the call, `st` a valid out-buffer.
    timed("stat", &files, |_, p| unsafe {
        libc::stat(p.as_ptr(), &mut st)
    });
    // SAFETY: NUL-terminated paths alive for the call, `st` a valid out-buffer.
    timed("stat again", &files, |_, p| unsafe {
        libc::stat(p.as_ptr(), &mut st)
    });
    // SAFETY: NUL-terminated paths alive for the call.
    timed("rename", &files, |i, p| unsafe {
        libc::rename(p.as_ptr(), renamed[i].as_ptr())
    });
    // SAFETY: NUL-terminated paths alive for the call.
    timed("unlink", &renamed, |_, p| unsafe {
        libc::unlink(p.as_ptr())
    });
    // SAFETY: NUL-terminated paths alive for the call.
    timed("mkdir", &dirs, |_, p| unsafe {
        libc::mkdir(p.as_ptr(), 0o755)
    });
    // SAFETY: NUL-terminated paths alive for the call.
    timed("rmdir", &dirs, |_, p| unsafe { libc::rmdir(p.as_ptr()) });
    let _ = std::fs::remove_dir(&base);
}
