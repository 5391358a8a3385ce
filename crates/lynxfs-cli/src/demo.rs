//! `lynxfs demo`: make the default pool and run a short real workload on it through the
//! library, next to the same work on tmpfs through system calls, printing both.
//!
//! The demo formats only a pool it creates: a path where something already is (a pool
//! holding someone's files, say) is refused with the reason, unless `--force` says to
//! format it anyway (`mkfs --force` rules: never through a symlink, only the caller's
//! own file). A pool the demo created is removed when it ends, so it can run again.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
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

pub fn run(path: &Path, size: u64, force: bool) -> Result<()> {
    if !force {
        refuse_what_is_there(path)?;
    }
    let mut opts = MkfsOptions::new(size);
    opts.force = force;
    let t = Instant::now();
    Pool::mkfs(path, &opts, PmemBackend::default())?;
    let _made = (!force).then(|| MadeHere::new(path)).transpose()?;
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

    // The same tree, as a tar archive, unpacked by tar(1) onto the mount and tmpfs.
    let shm = tempdir_in_shm()?;
    let archive = make_archive(&shm)?;
    let mnt = private_dir(&std::env::temp_dir(), "lynxfs-demo-mnt")?;
    // nosuid,nodev whatever root's defaults: the tree unpacked there is open to others.
    let options = lynxfs_fuse::MountOptions::parse("nosuid,nodev")?;
    let mount =
        lynxfs_fuse::mount_background(path, &mnt, &options).context("mount the pool with FUSE")?;
    let fuse = dir_workload(&mnt, &archive);
    mount.unmount().context("unmount")?;
    std::fs::remove_dir(&mnt).ok();
    let fuse = fuse?;
    let tdir = shm.join("tree");
    std::fs::create_dir_all(&tdir)?;
    let kernel = dir_workload(&tdir, &archive)?;
    std::fs::remove_dir_all(&shm).ok();

    let n = (DIRS * FILES) as f64;
    println!(
        "\nworkload: {DIRS} directories x {FILES} files of {} bytes ({} files)",
        BODY.len(),
        DIRS * FILES
    );
    println!(
        "{:<24} {:>11} {:>11} {:>11} {:>10} {:>10}",
        "phase (us per file)", "lynxfs lib", "lynxfs fuse", "tmpfs", "tmpfs/lib", "tmpfs/fuse"
    );
    for (name, a, f, k) in [
        (
            "unpack (create+write)",
            lib.create,
            fuse.create,
            kernel.create,
        ),
        ("list + stat", lib.list, fuse.list, kernel.list),
        ("open + read", lib.read, fuse.read, kernel.read),
        ("remove", lib.remove, fuse.remove, kernel.remove),
    ] {
        println!(
            "{name:<24} {:>11.2} {:>11.2} {:>11.2} {:>9.1}x {:>9.1}x",
            a * 1e6 / n,
            f * 1e6 / n,
            k * 1e6 / n,
            k / a,
            k / f
        );
    }
    println!(
        "(lib: the library in this process; fuse: the pool mounted with FUSE, default options, \
         unpacked with tar(1); tmpfs: a directory in /dev/shm, unpacked with tar(1). A ratio \
         above 1 means LynxFS was faster.)"
    );
    Ok(())
}

/// Refuses `path` if anything is there (looked at without following a symlink).
fn refuse_what_is_there(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
        Ok(m) => m,
    };
    let what = if meta.file_type().is_symlink() {
        "a symbolic link"
    } else if meta.is_file() {
        "a file: if a pool, formatting would erase the files in it"
    } else {
        "not a regular file"
    };
    bail!(
        "{} exists ({what}): the demo formats only a pool it creates itself; give a path \
         where nothing is, or remove it, or pass --force to format it anyway",
        path.display()
    )
}

/// The pool the demo created, removed when the demo ends (if it is still the file
/// made, not one put in its place meanwhile).
struct MadeHere {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl MadeHere {
    fn new(path: &Path) -> Result<MadeHere> {
        let m = std::fs::symlink_metadata(path).with_context(|| format!("{}", path.display()))?;
        Ok(MadeHere {
            path: path.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

impl Drop for MadeHere {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == (self.dev, self.ino) {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// A tar archive of the demo tree, built on tmpfs.
fn make_archive(shm: &Path) -> Result<std::path::PathBuf> {
    let src = shm.join("src");
    for d in 0..DIRS {
        std::fs::create_dir_all(src.join(format!("d{d}")))?;
        for f in 0..FILES {
            std::fs::write(src.join(format!("d{d}/f{f}")), BODY)?;
        }
    }
    let archive = shm.join("demo.tar");
    let st = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(&src)
        .arg(".")
        .status()
        .context("run tar")?;
    anyhow::ensure!(st.success(), "tar -cf failed");
    std::fs::remove_dir_all(&src)?;
    Ok(archive)
}

fn lib_workload(fs: &Fs) -> Result<Phases> {
    let s = fs.session(Cred::root());
    let e = |r: lynxfs::Result<()>| r.map_err(anyhow::Error::from);
    let t = Instant::now();
    for d in 0..DIRS {
        e(s.mkdir(format!("/d{d}"), 0o755))?;
        for f in 0..FILES {
            let fd = s.create(format!("/d{d}/f{f}"), 0o644)?;
            fs.write(fd, BODY)?;
            fs.close_fd(fd)?;
        }
    }
    let create = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut seen = 0;
    for d in 0..DIRS {
        for ent in s.readdir(format!("/d{d}"))? {
            if ent.name != b"." && ent.name != b".." {
                let st = s.stat(format!("/d{d}/{}", String::from_utf8_lossy(&ent.name)))?;
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
            let fd = s.open(format!("/d{d}/f{f}"), libc::O_RDONLY, 0)?;
            let n = fs.read(fd, &mut buf)?;
            anyhow::ensure!(&buf[..n] == BODY, "wrong content");
            fs.close_fd(fd)?;
        }
    }
    let read = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for d in 0..DIRS {
        for f in 0..FILES {
            e(s.unlink(format!("/d{d}/f{f}")))?;
        }
        e(s.rmdir(format!("/d{d}")))?;
    }
    let remove = t.elapsed().as_secs_f64();
    Ok(Phases {
        create,
        list,
        read,
        remove,
    })
}

/// The workload on a kernel path: unpack with tar(1), list, read, remove.
fn dir_workload(root: &Path, archive: &Path) -> Result<Phases> {
    use std::io::Read;
    let t = Instant::now();
    let st = std::process::Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(root)
        .status()
        .context("run tar")?;
    anyhow::ensure!(st.success(), "tar -xf into {} failed", root.display());
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
    private_dir(base, "lynxfs-demo")
}

/// A new directory of ours (mode 0700) in `base`, a shared directory: mkdir never follows
/// or reuses what another user may have put at the name, so a name taken is skipped.
fn private_dir(base: &Path, prefix: &str) -> Result<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for attempt in 0..16 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("{prefix}-{}-{attempt}-{nanos}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e).with_context(|| format!("create {}", dir.display())),
        }
    }
    Err(last.expect("an attempt failed"))
        .with_context(|| format!("a directory in {}", base.display()))
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
