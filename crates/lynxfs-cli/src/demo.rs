//! `lynxfs demo`: make the default pool and run a short real workload on it through the
//! library, next to the same work on tmpfs through system calls, printing both.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};

const DIRS: usize = 20;
const FILES: usize = 250;
const BODY: &[u8] = b"LynxFS demo file: a few bytes of real content, written and read back.\n";

/// Seconds each phase took, on one file system.
struct Phases {
    create: f64,
    list: f64,
    read: f64,
    remove: f64,
}

pub fn run(path: &Path, size: u64) -> Result<()> {
    let mut opts = MkfsOptions::new(size);
    opts.force = true;
    let t = Instant::now();
    Pool::mkfs(path, &opts, PmemBackend::default())?;
    println!(
        "mkfs {} ({} MiB): {:.1} ms",
        path.display(),
        size >> 20,
        ms(t)
    );
    let t = Instant::now();
    let fs = Fs::open(path)?;
    println!("open: {:.2} ms", ms(t));
    let lib = lib_workload(&fs)?;
    fs.close()?;
    drop(fs);

    let dir = tempdir_in_shm()?;
    let kernel = tmpfs_workload(&dir)?;
    std::fs::remove_dir_all(&dir).ok();

    let n = (DIRS * FILES) as f64;
    println!(
        "\nworkload: {DIRS} directories x {FILES} files of {} bytes ({} files)",
        BODY.len(),
        DIRS * FILES
    );
    println!(
        "{:<28} {:>12} {:>12} {:>8}",
        "phase (us per file)", "lynxfs lib", "tmpfs", "ratio"
    );
    for (name, a, b) in [
        ("create + write", lib.create, kernel.create),
        ("list + stat", lib.list, kernel.list),
        ("open + read", lib.read, kernel.read),
        ("unlink (+ rmdir)", lib.remove, kernel.remove),
    ] {
        println!(
            "{name:<28} {:>12.2} {:>12.2} {:>7.1}x",
            a * 1e6 / n,
            b * 1e6 / n,
            b / a
        );
    }
    println!("(ratio = tmpfs time / LynxFS time; LynxFS through its library, tmpfs through system calls)");
    Ok(())
}

fn lib_workload(fs: &Fs) -> Result<Phases> {
    let s = fs.session(Cred::root());
    let e = |r: lynxfs::Result<()>| r.map_err(anyhow::Error::from);
    let t = Instant::now();
    for d in 0..DIRS {
        e(s.mkdir(&format!("/d{d}"), 0o755))?;
        for f in 0..FILES {
            let fd = s.create(&format!("/d{d}/f{f}"), 0o644)?;
            fs.write(fd, BODY)?;
            fs.close_fd(fd)?;
        }
    }
    let create = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut seen = 0;
    for d in 0..DIRS {
        for ent in s.readdir(&format!("/d{d}"))? {
            if ent.name != b"." && ent.name != b".." {
                let st = s.stat(&format!("/d{d}/{}", String::from_utf8_lossy(&ent.name)))?;
                anyhow::ensure!(st.size == BODY.len() as u64, "wrong size");
                seen += 1;
            }
        }
    }
    anyhow::ensure!(seen == DIRS * FILES, "listed {seen} files");
    let list = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut buf = vec![0u8; 4096];
    for d in 0..DIRS {
        for f in 0..FILES {
            let fd = s.open(&format!("/d{d}/f{f}"), libc::O_RDONLY, 0)?;
            let n = fs.read(fd, &mut buf)?;
            anyhow::ensure!(&buf[..n] == BODY, "wrong content");
            fs.close_fd(fd)?;
        }
    }
    let read = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for d in 0..DIRS {
        for f in 0..FILES {
            e(s.unlink(&format!("/d{d}/f{f}")))?;
        }
        e(s.rmdir(&format!("/d{d}")))?;
    }
    let remove = t.elapsed().as_secs_f64();
    Ok(Phases {
        create,
        list,
        read,
        remove,
    })
}

fn tmpfs_workload(root: &Path) -> Result<Phases> {
    use std::io::{Read, Write};
    let t = Instant::now();
    for d in 0..DIRS {
        std::fs::create_dir(root.join(format!("d{d}")))?;
        for f in 0..FILES {
            let mut file = std::fs::File::create(root.join(format!("d{d}/f{f}")))?;
            file.write_all(BODY)?;
        }
    }
    let create = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut seen = 0;
    for d in 0..DIRS {
        for ent in std::fs::read_dir(root.join(format!("d{d}")))? {
            let st = std::fs::metadata(ent?.path())?;
            anyhow::ensure!(st.len() == BODY.len() as u64, "wrong size");
            seen += 1;
        }
    }
    anyhow::ensure!(seen == DIRS * FILES, "listed {seen} files");
    let list = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut buf = vec![0u8; 4096];
    for d in 0..DIRS {
        for f in 0..FILES {
            let mut file = std::fs::File::open(root.join(format!("d{d}/f{f}")))?;
            let n = file.read(&mut buf)?;
            anyhow::ensure!(&buf[..n] == BODY, "wrong content");
        }
    }
    let read = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for d in 0..DIRS {
        for f in 0..FILES {
            std::fs::remove_file(root.join(format!("d{d}/f{f}")))?;
        }
        std::fs::remove_dir(root.join(format!("d{d}")))?;
    }
    let remove = t.elapsed().as_secs_f64();
    Ok(Phases {
        create,
        list,
        read,
        remove,
    })
}

fn tempdir_in_shm() -> Result<std::path::PathBuf> {
    let base = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm")
    } else {
        Path::new("/tmp")
    };
    let dir = base.join(format!("lynxfs-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
