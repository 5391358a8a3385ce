//! The `apps` suite (the papers' Table III): real programs on a real tree, the Linux
//! source from Debian's `linux-source` package. Seconds per operation, and ratios to
//! the `tmpfs` column when there is one.
//!
//! Operations, in order, each on every target before the next: `tar -xf` (of the
//! tarball decompressed once to a `.tar` in the caller's private directory in
//! `/dev/shm`, `lynxfs-bench-UID`, the same input for every target), `du -s`,
//! `find -name '*.c'` (cold: after dropping the kernel's caches and LynxFS's index;
//! warm: right after), `gzip -r` of the tree's `fs/` directory, git on that directory
//! (`init`, `add -A` and `commit`; `status`; `log --stat`), sqlite3 on a database in
//! the tree (10,000 inserts in transactions of 100; queries, an index and `VACUUM`),
//! and `rm -rf` of the whole tree. A missing git or sqlite3 leaves its rows empty,
//! said in a note; the `lib` column has no in-process git or sqlite3 and leaves them
//! empty too.
//!
//! Kernel targets (tmpfs, ext4, fuse, fuse-null, dir=) run GNU `tar`, `du`, `find`,
//! `gzip` and `rm` in the target's directory; the `preload` target runs the same
//! commands with `liblynxfs_preload.so` preloaded in the directory its pool serves
//! (each tool a process, timed end to end on every target). The `lib` target does the
//! same work in process through the library, labelled as such: an extractor on the `tar` crate (directories, files
//! with their mode and times, symlinks, hard links), a tree walk for `du` (lstat of
//! every entry) and `find` (names from readdir, as find uses d_type), `flate2` gzip at
//! level 6 over files read and written through the library, and a recursive remove.
//! `find` checks its count against the tarball's on every target, and `rm -rf` that
//! the tree is gone.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use flate2::write::GzEncoder;
use flate2::Compression;
use lynxfs::pmem::PmemBackend;
use lynxfs::{Session, TimeSet};

use crate::cold::{chill_all, drop_kernel_caches};
use crate::lib_target::to_io;
use crate::private;
use crate::{
    progress_bar, Grid, LibTarget, Measured, Options, PreloadTarget, Target, LIB_NAME,
    PRELOAD_NAME, SHM,
};

const OPS: &[&str] = &[
    "tar -xf",
    "du -s (cold)",
    "du -s (warm)",
    "find -name '*.c' (cold)",
    "find -name '*.c' (warm)",
    "gzip -r fs/",
    "git init+add+commit fs/",
    "git status fs/",
    "git log --stat fs/",
    "sqlite3 10k inserts (100/txn)",
    "sqlite3 queries+VACUUM",
    "rm -rf",
];

/// The rows run by a program that may be missing (and that the `lib` column cannot
/// run): the program.
fn program_of(op: usize) -> Option<&'static str> {
    match OPS[op] {
        l if l.starts_with("git ") => Some("git"),
        l if l.starts_with("sqlite3 ") => Some("sqlite3"),
        _ => None,
    }
}

/// The GNU tool of a cold step (the steps after which the kernel's caches are dropped).
fn tool_of(op: usize) -> Option<&'static str> {
    match op {
        1 => Some("du"),
        3 => Some("find"),
        _ => None,
    }
}

/// Whether `program` is an executable file in a directory on PATH.
fn installed(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            std::fs::metadata(d.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The database sqlite3 works on, in the tree (so `rm -rf` takes it away).
const DB: &str = "bench.sqlite";

/// The SQL of the sqlite3 rows, written once into the caller's private directory in
/// `/dev/shm` (read by sqlite3 from there, outside every target): inserts, queries.
fn sql_scripts() -> anyhow::Result<(PathBuf, PathBuf)> {
    let dir = private::cache_dir(Path::new(SHM))?;
    let inserts = dir.join("apps-inserts-v1.sql");
    if !private::cached(&inserts)? {
        private::write_new(&inserts, |mut f| {
            writeln!(
                f,
                "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, value INTEGER);"
            )?;
            for txn in 0..100 {
                writeln!(f, "BEGIN;")?;
                for i in 0..100 {
                    let id = txn * 100 + i;
                    let value = (id * 7919) % 10_007;
                    writeln!(f, "INSERT INTO t VALUES({id}, 'name-{id:05}', {value});")?;
                }
                writeln!(f, "COMMIT;")?;
            }
            Ok(())
        })?;
    }
    let queries = dir.join("apps-queries-v1.sql");
    if !private::cached(&queries)? {
        private::write_new(&queries, |mut f| {
            writeln!(
                f,
                "SELECT count(*), sum(value) FROM t;\n\
                 SELECT count(*) FROM t WHERE name LIKE 'name-01%';\n\
                 CREATE INDEX tv ON t(value);\n\
                 SELECT id FROM t WHERE value BETWEEN 1000 AND 1100 ORDER BY value;\n\
                 DELETE FROM t WHERE id % 2 = 0;\n\
                 VACUUM;\n\
                 SELECT count(*) FROM t;"
            )?;
            Ok(())
        })?;
    }
    Ok((inserts, queries))
}

/// What the tarball holds, read once before any clock starts.
pub(crate) struct Tree {
    /// The `.tar` every target extracts.
    tar: PathBuf,
    /// Its top directory (`linux-source-6.1`).
    top: String,
    /// The directory `gzip -r` compresses (`linux-source-6.1/fs`).
    gzip_dir: String,
    /// Entries whose name ends in `.c` (what `find TOP -name '*.c'` prints).
    c_files: usize,
    files: usize,
    dirs: usize,
    bytes: u64,
    notes: Vec<String>,
}

/// `--tree generated`: a generated tree even where the Linux tarball is installed.
pub const GENERATED: &str = "generated";

/// Finds the tarball (`opts.tree`, else `/usr/src/linux-source-*.tar.xz`), decompresses
/// it once into the caller's private directory in `/dev/shm` if it is compressed, and
/// reads its shape; with none, writes a generated tree of the Linux tree's shape there
/// instead (once) and says so in the notes.
pub(crate) fn prepare(opts: &Options) -> anyhow::Result<Tree> {
    prepare_in(opts, Path::new(SHM))
}

/// [`prepare`], with what is kept between runs in the caller's private directory in
/// `base`, a directory shared with other users ([`crate::private`]).
fn prepare_in(opts: &Options, base: &Path) -> anyhow::Result<Tree> {
    let mut notes = Vec::new();
    let source = match &opts.tree {
        Some(p) if p.as_os_str() == GENERATED => None,
        Some(p) => Some(p.clone()),
        None => linux_source(),
    };
    let tar = match source {
        Some(src) if src.extension() == Some(OsStr::new("xz")) => {
            let stem = src.file_stem().unwrap_or(OsStr::new("tree.tar"));
            let cache = private::cache_dir(base)?.join(stem);
            if !private::cached(&cache)? {
                private::write_new(&cache, |out| decompress(&src, out))?;
            }
            notes.push(format!(
                "tree: {} decompressed once to {} (kept for the next run; delete it to \
                 free the memory)",
                src.display(),
                cache.display()
            ));
            cache
        }
        Some(src) => {
            notes.push(format!("tree: {}", src.display()));
            src
        }
        None => {
            let name = format!("generated-{}.tar", opts.files);
            let path = private::cache_dir(base)?.join(name);
            if !private::cached(&path)? {
                generate(&path, opts.files, opts.seed)?;
            }
            let why = if opts.tree.is_some() {
                "--tree generated"
            } else {
                "no /usr/src/linux-source-*.tar.xz (apt-get install linux-source)"
            };
            notes.push(format!(
                "tree: {why}, so a GENERATED tree of the Linux tree's shape ({} files, 15 \
                 per directory, mean 14 KiB, 60% .c), {}",
                opts.files,
                path.display()
            ));
            path
        }
    };
    let mut tree = scan(&tar)?;
    tree.notes = notes;
    tree.notes.push(format!(
        "the tree: {} files, {} directories, {:.0} MB; find matches {} names; gzip -r runs \
         on {}",
        tree.files,
        tree.dirs,
        tree.bytes as f64 / 1e6,
        tree.c_files,
        tree.gzip_dir
    ));
    Ok(tree)
}

fn linux_source() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/src")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().map(OsStr::as_bytes).unwrap_or_default();
            n.starts_with(b"linux-source-") && n.ends_with(b".tar.xz")
        })
        .collect();
    found.sort();
    found.pop()
}

/// `xz -dc src` into `out`.
fn decompress(src: &Path, out: File) -> anyhow::Result<()> {
    let status = Command::new("xz")
        .args(["-T0", "-dc"])
        .arg(src)
        .stdout(out)
        .status()
        .context("running xz (apt-get install xz-utils)")?;
    if !status.success() {
        bail!("xz -dc {} failed: {status}", src.display());
    }
    Ok(())
}

/// Writes a tar of a tree shaped like Linux's: 15 files per directory in directories
/// two levels deep under `gen-tree/` (the first top-level one is `fs`), sizes from a
/// gamma distribution of mean 14 KiB.
fn generate(path: &Path, files: usize, seed: u64) -> anyhow::Result<()> {
    private::write_new(path, |file| write_tree(file, files, seed))
}

fn write_tree(file: File, files: usize, seed: u64) -> anyhow::Result<()> {
    let mut b = tar::Builder::new(file);
    let mut rng = seed;
    let per_dir = 15;
    let dirs = files.div_ceil(per_dir);
    let top_dirs = (dirs as f64).sqrt().ceil() as usize;
    let data: Vec<u8> = (0..256 << 10).map(|i| b"abcdefgh ;{}\n"[i % 13]).collect();
    let header = |kind: tar::EntryType, size: u64, mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h.set_mtime(1_700_000_000);
        h
    };
    let dir = |b: &mut tar::Builder<File>, p: &str| {
        let mut h = header(tar::EntryType::Directory, 0, 0o755);
        b.append_data(&mut h, p, io::empty())
    };
    dir(&mut b, "gen-tree")?;
    let mut n = 0;
    for d in 0..dirs {
        let top = if d % top_dirs == 0 && d / top_dirs == 0 {
            "fs".to_string()
        } else {
            format!("t{}", d % top_dirs)
        };
        if d < top_dirs {
            dir(&mut b, &format!("gen-tree/{top}"))?;
        }
        let sub = format!(
            "gen-tree/{}/d{d}",
            if d % top_dirs == 0 { "fs" } else { &top }
        );
        dir(&mut b, &sub)?;
        for f in 0..per_dir {
            if n == files {
                break;
            }
            n += 1;
            let ext = match f % 10 {
                0..=5 => "c",
                6..=8 => "h",
                _ => "txt",
            };
            let size =
                (crate::personalities::gamma_size(&mut rng, 14 << 10) as usize).min(data.len());
            let mut h = header(tar::EntryType::Regular, size as u64, 0o644);
            b.append_data(&mut h, format!("{sub}/f{f}.{ext}"), &data[..size])?;
        }
    }
    b.into_inner()?.flush()?;
    Ok(())
}

fn scan(tar: &Path) -> anyhow::Result<Tree> {
    let file = File::open(tar).with_context(|| format!("opening {}", tar.display()))?;
    let mut ar = tar::Archive::new(BufReader::with_capacity(1 << 20, file));
    let (mut top, mut c_files, mut files, mut dirs, mut bytes) = (None, 0, 0, 0, 0);
    let mut has_fs = false;
    let mut first_sub: Option<String> = None;
    for entry in ar.entries()? {
        let e = entry?;
        let kind = e.header().entry_type();
        if kind.is_pax_global_extensions() {
            continue;
        }
        let path = e.path()?.into_owned();
        let comps: Vec<&OsStr> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect();
        let Some(first) = comps.first() else { continue };
        let first = first.to_string_lossy().into_owned();
        match &top {
            None => top = Some(first),
            Some(t) if *t != first => bail!("{}: more than one top directory", tar.display()),
            _ => {}
        }
        if comps.last().is_some_and(|n| n.as_bytes().ends_with(b".c")) {
            c_files += 1;
        }
        if kind.is_dir() {
            dirs += 1;
            if comps.len() == 2 {
                has_fs |= comps[1] == "fs";
                first_sub.get_or_insert_with(|| comps[1].to_string_lossy().into_owned());
            }
        } else if kind.is_file() {
            files += 1;
            bytes += e.header().size()?;
        }
    }
    let top = top.with_context(|| format!("{}: empty archive", tar.display()))?;
    let sub = if has_fs {
        "fs".to_string()
    } else {
        first_sub.with_context(|| format!("{}: no subdirectory to gzip", tar.display()))?
    };
    Ok(Tree {
        tar: tar.to_path_buf(),
        gzip_dir: format!("{top}/{sub}"),
        top,
        c_files,
        files,
        dirs,
        bytes,
        notes: Vec::new(),
    })
}

/// Runs a program in `dir`; its stdout, or an error with its stderr.
fn tool(dir: &Path, program: &str, args: &[&OsStr]) -> io::Result<Vec<u8>> {
    let mut cmd = Command::new(program);
    cmd.current_dir(dir);
    tool_with(cmd, dir, program, args)
}

/// Runs `cmd` (`program`, started in `dir`) with `args`; its stdout, or an error with
/// its stderr.
fn tool_with(mut cmd: Command, dir: &Path, program: &str, args: &[&OsStr]) -> io::Result<Vec<u8>> {
    let out = cmd
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("running {program}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or("").trim();
        let more = err.lines().count().saturating_sub(1);
        return Err(io::Error::other(format!(
            "{program} {args:?} in {}: {}: {first} (and {more} more lines)",
            dir.display(),
            out.status,
        )));
    }
    Ok(out.stdout)
}

/// One operation by the GNU tools in a directory: `run(program, args)` starts one (in
/// the kernel target's directory, or under the preload in its directory). Only the
/// tools' own work is checked here (find's count); what `rm -rf` left is checked by the
/// caller, outside the clock.
fn run_tools(
    op: usize,
    tree: &Tree,
    run: impl Fn(&str, &[&OsStr]) -> io::Result<Vec<u8>>,
) -> io::Result<()> {
    let top = OsStr::new(&tree.top);
    match op {
        0 => run("tar", &[OsStr::new("-xf"), tree.tar.as_os_str()]).map(drop),
        1 | 2 => run("du", &[OsStr::new("-s"), top]).map(drop),
        3 | 4 => {
            let out = run("find", &[top, OsStr::new("-name"), OsStr::new("*.c")])?;
            check_count(out.iter().filter(|&&b| b == b'\n').count(), tree)
        }
        5 => run("gzip", &[OsStr::new("-r"), OsStr::new(&tree.gzip_dir)]).map(drop),
        6..=8 => run_git(op, tree, &run),
        9 | 10 => run_sqlite(op, tree, &run),
        _ => run("rm", &[OsStr::new("-rf"), top]).map(drop),
    }
}

/// git on the tree's gzip'd directory: a repository made and committed, its status,
/// its log. Configured on the command line (no user's or system's configuration
/// changes what is timed).
fn run_git(
    op: usize,
    tree: &Tree,
    run: &impl Fn(&str, &[&OsStr]) -> io::Result<Vec<u8>>,
) -> io::Result<()> {
    let git = |args: &[&str]| {
        let config = [
            "-C",
            &tree.gzip_dir,
            "-c",
            "init.defaultBranch=main",
            "-c",
            "user.name=lynxfs-bench",
            "-c",
            "user.email=bench@localhost",
        ];
        let all: Vec<&OsStr> = config.iter().chain(args).map(OsStr::new).collect();
        run("git", &all)
    };
    match op {
        6 => {
            git(&["init", "-q"])?;
            git(&["add", "-A"])?;
            git(&["commit", "-q", "-m", "tree"]).map(drop)
        }
        7 => {
            let out = git(&["status", "--porcelain"])?;
            if out.is_empty() {
                Ok(())
            } else {
                Err(io::Error::other(format!(
                    "git status after the commit: {} changed paths",
                    out.iter().filter(|&&b| b == b'\n').count()
                )))
            }
        }
        _ => git(&["log", "--stat"]).map(drop),
    }
}

/// sqlite3 on a database in the tree: the inserts (the first step makes it), then
/// the queries (whose last answer, the rows left, is checked).
fn run_sqlite(
    op: usize,
    tree: &Tree,
    run: &impl Fn(&str, &[&OsStr]) -> io::Result<Vec<u8>>,
) -> io::Result<()> {
    let (inserts, queries) = sql_scripts().map_err(io::Error::other)?;
    let db = format!("{}/{DB}", tree.top);
    let script = if op == 9 { inserts } else { queries };
    let mut read = std::ffi::OsString::from(".read ");
    read.push(&script);
    let out = run("sqlite3", &[OsStr::new(&db), &read])?;
    if op == 10 && !out.ends_with(b"5000\n") {
        return Err(io::Error::other(format!(
            "sqlite3: {:?} rows after the queries, expected 5000",
            String::from_utf8_lossy(&out).lines().last()
        )));
    }
    Ok(())
}

/// One operation on a kernel target's directory.
fn run_kernel(op: usize, dir: &Path, tree: &Tree) -> io::Result<()> {
    run_tools(op, tree, |program, args| tool(dir, program, args))?;
    if op == OPS.len() - 1 {
        gone(dir.join(&tree.top).symlink_metadata().map(drop))?;
    }
    Ok(())
}

/// One operation by the GNU tools under the preload, in its directory.
fn run_preload(op: usize, p: &PreloadTarget, tree: &Tree) -> io::Result<()> {
    run_tools(op, tree, |program, args| {
        tool_with(p.command(program), p.dir(), program, args)
    })
}

/// After `rm -rf` under the preload: the pool's root, read through the engine, is
/// empty.
fn preload_tree_gone(p: &PreloadTarget) -> io::Result<()> {
    let left = p.root_names()?;
    if left.is_empty() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "rm -rf left {} names in the pool's root",
            left.len()
        )))
    }
}

fn check_count(found: usize, tree: &Tree) -> io::Result<()> {
    if found == tree.c_files {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "find found {found} names ending in .c, the tarball has {}",
            tree.c_files
        )))
    }
}

fn gone(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(()) => Err(io::Error::other("rm -rf left the tree behind")),
    }
}

type Lib<'a> = Session<'a, PmemBackend>;

/// One operation through the library.
fn run_lib(op: usize, lib: &LibTarget, tree: &Tree) -> io::Result<()> {
    let s = lib.root_session();
    let mut path = tree.top.clone();
    match op {
        0 => extract(lib, &tree.tar),
        1 | 2 => du(&s, &mut path).map(drop),
        3 | 4 => {
            let mut found = usize::from(path.ends_with(".c"));
            find_c(&s, &mut path, &mut found)?;
            check_count(found, tree)
        }
        5 => gzip_r(lib, &mut tree.gzip_dir.clone()),
        6..=10 => Err(io::Error::other(format!("{}: not run in process", OPS[op]))),
        _ => {
            rm_rf(&s, &mut path)?;
            gone(s.lstat(&tree.top).map(drop).map_err(to_io))
        }
    }
}

fn lib_err(p: &str) -> impl Fn(lynxfs::Error) -> io::Error + '_ {
    move |e| {
        let e = to_io(e);
        io::Error::new(e.kind(), format!("{p}: {e}"))
    }
}

/// `tar -xf` through the library: directories, regular files (mode, mtime and atime
/// from the header, as GNU tar running as root sets them), symlinks and hard links.
fn extract(lib: &LibTarget, tar: &Path) -> io::Result<()> {
    let s = lib.root_session();
    let fs = lib.fs();
    let mut ar = tar::Archive::new(BufReader::with_capacity(1 << 20, File::open(tar)?));
    let mut buf = vec![0u8; 1 << 20];
    for entry in ar.entries()? {
        let mut e = entry?;
        let path = e.path()?.into_owned();
        let p = path
            .to_str()
            .ok_or_else(|| io::Error::other("non-UTF-8 name"))?
            .trim_end_matches('/')
            .to_string();
        let h = e.header();
        let mode = h.mode()? & 0o7777;
        let mtime = TimeSet::At(lynxfs::Timestamp {
            sec: i64::try_from(h.mtime()?).unwrap_or(i64::MAX),
            nsec: 0,
        });
        let kind = h.entry_type();
        if kind.is_dir() {
            match s.mkdir(&p, mode) {
                Err(lynxfs::Error::Errno(libc::EEXIST)) => {}
                r => r.map_err(lib_err(&p))?,
            }
        } else if kind.is_file() {
            let fd = s
                .open(&p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode)
                .map_err(lib_err(&p))?;
            let mut off = 0u64;
            let copied = (|| loop {
                let n = e.read(&mut buf)?;
                if n == 0 {
                    return Ok::<_, io::Error>(());
                }
                let mut done = 0;
                while done < n {
                    let w = fs.pwrite(fd, &buf[done..n], off).map_err(lib_err(&p))?;
                    done += w;
                    off += w as u64;
                }
            })();
            fs.close_fd(fd).map_err(lib_err(&p))?;
            copied?;
            s.utimens(&p, Some(mtime), Some(mtime))
                .map_err(lib_err(&p))?;
        } else if kind.is_symlink() || kind.is_hard_link() {
            let target = e
                .link_name()?
                .ok_or_else(|| io::Error::other(format!("{p}: link without a target")))?;
            let t = target
                .to_str()
                .ok_or_else(|| io::Error::other("non-UTF-8 link"))?;
            if kind.is_symlink() {
                s.symlink(t, &p).map_err(lib_err(&p))?;
            } else {
                s.link(t, &p).map_err(lib_err(&p))?;
            }
        }
        // pax headers are folded into the next entry by the tar crate; nothing else
        // (devices, fifos) is in a source tree.
    }
    Ok(())
}

/// The names in a directory other than `.` and `..`, with their DT_* types.
fn entries(s: &Lib<'_>, dir: &str) -> io::Result<Vec<(Vec<u8>, u8)>> {
    Ok(s.readdir(dir)
        .map_err(lib_err(dir))?
        .into_iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .map(|e| (e.name, e.dtype))
        .collect())
}

/// Runs `f` on `path/name`, restoring `path` after.
fn with_child<R>(path: &mut String, name: &[u8], f: impl FnOnce(&mut String) -> R) -> R {
    let len = path.len();
    path.push('/');
    path.push_str(&String::from_utf8_lossy(name));
    let r = f(path);
    path.truncate(len);
    r
}

/// `du -s`: 512-byte blocks of `path` and everything under it (lstat of each).
fn du(s: &Lib<'_>, path: &mut String) -> io::Result<u64> {
    let mut total = s.lstat(path.as_str()).map_err(lib_err(path))?.blocks;
    for (name, dtype) in entries(s, path)? {
        total += with_child(path, &name, |p| {
            if dtype == libc::DT_DIR {
                du(s, p)
            } else {
                Ok(s.lstat(p.as_str()).map_err(lib_err(p))?.blocks)
            }
        })?;
    }
    Ok(total)
}

/// `find -name '*.c'`: counts names ending in `.c` under `path` (not `path` itself).
fn find_c(s: &Lib<'_>, path: &mut String, found: &mut usize) -> io::Result<()> {
    for (name, dtype) in entries(s, path)? {
        if name.ends_with(b".c") {
            *found += 1;
        }
        if dtype == libc::DT_DIR {
            with_child(path, &name, |p| find_c(s, p, found))?;
        }
    }
    Ok(())
}

/// `gzip -r`: every regular file under `path` becomes `name.gz` (level 6, gzip's
/// default) with the original's mode, and the original is removed.
fn gzip_r(lib: &LibTarget, path: &mut String) -> io::Result<()> {
    let s = lib.root_session();
    let fs = lib.fs();
    for (name, dtype) in entries(&s, path)? {
        if dtype == libc::DT_DIR {
            with_child(path, &name, |p| gzip_r(lib, p))?;
            continue;
        }
        if dtype != libc::DT_REG || name.ends_with(b".gz") {
            continue;
        }
        with_child(path, &name, |p| {
            let fd = s.open(p.as_str(), libc::O_RDONLY, 0).map_err(lib_err(p))?;
            let st = fs.fstat(fd).map_err(lib_err(p))?;
            let mut data = vec![0u8; st.size as usize];
            let mut off = 0;
            let read = (|| {
                while off < data.len() {
                    let n = fs
                        .pread(fd, &mut data[off..], off as u64)
                        .map_err(lib_err(p))?;
                    if n == 0 {
                        break;
                    }
                    off += n;
                }
                Ok::<_, io::Error>(())
            })();
            fs.close_fd(fd).map_err(lib_err(p))?;
            read?;
            let mut z =
                GzEncoder::new(Vec::with_capacity(data.len() / 3 + 64), Compression::new(6));
            z.write_all(&data[..off])?;
            let z = z.finish()?;
            let gz = format!("{p}.gz");
            let out = s
                .open(
                    &gz,
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                    st.mode & 0o7777,
                )
                .map_err(lib_err(&gz))?;
            let mut done = 0;
            let written = (|| {
                while done < z.len() {
                    done += fs
                        .pwrite(out, &z[done..], done as u64)
                        .map_err(lib_err(&gz))?;
                }
                Ok::<_, io::Error>(())
            })();
            fs.close_fd(out).map_err(lib_err(&gz))?;
            written?;
            s.unlink(p.as_str()).map_err(lib_err(p))
        })?;
    }
    Ok(())
}

/// `rm -rf`: everything under `path`, then `path`.
fn rm_rf(s: &Lib<'_>, path: &mut String) -> io::Result<()> {
    for (name, dtype) in entries(s, path)? {
        with_child(path, &name, |p| {
            if dtype == libc::DT_DIR {
                rm_rf(s, p)
            } else {
                s.unlink(p.as_str()).map_err(lib_err(p))
            }
        })?;
    }
    s.rmdir(path.as_str()).map_err(lib_err(path))
}

/// How a target runs the tools.
enum Runner<'a> {
    Kernel(&'a Path),
    Lib(&'a LibTarget),
    Preload(&'a PreloadTarget),
}

fn runner(t: &dyn Target) -> anyhow::Result<Runner<'_>> {
    if let Some(lib) = t.as_lib() {
        Ok(Runner::Lib(lib))
    } else if let Some(dir) = t.host_dir() {
        Ok(Runner::Kernel(dir))
    } else {
        bail!(
            "target {} is neither a kernel directory nor the lynxfs library",
            t.name()
        )
    }
}

impl Runner<'_> {
    fn run(&self, op: usize, tree: &Tree) -> io::Result<()> {
        match self {
            Runner::Kernel(dir) => run_kernel(op, dir, tree),
            Runner::Lib(lib) => run_lib(op, lib, tree),
            Runner::Preload(p) => run_preload(op, p, tree),
        }
    }

    /// The checks that stay off the clock: after `rm -rf` under the preload, the pool
    /// is read back through the engine (an attach, which the tools' time must not
    /// include).
    fn check_after(&self, op: usize) -> io::Result<()> {
        match self {
            Runner::Preload(p) if op == OPS.len() - 1 => preload_tree_gone(p),
            _ => Ok(()),
        }
    }

    /// Makes the target cold: the preload's pool drops its index (the kernel targets'
    /// caches and the library's index are dropped by [`chill_all`]).
    fn chill(&self) -> io::Result<()> {
        match self {
            Runner::Preload(p) => p.drop_index(),
            _ => Ok(()),
        }
    }

    /// Loads the step's program (and, under the preload, the library) into the page
    /// cache again after the kernel's caches were dropped, outside the clock and in
    /// `/` (no target's path): a cold step measures a file system's cold metadata, not
    /// the program's binaries coming back from disk, which whichever target ran first
    /// after the drop would otherwise pay for every other.
    fn load_program(&self, op: usize) {
        let Some(program) = tool_of(op) else { return };
        let mut cmd = match self {
            Runner::Kernel(_) => Command::new(program),
            Runner::Preload(p) => p.command(program),
            Runner::Lib(_) => return,
        };
        cmd.current_dir("/");
        let _ = tool_with(cmd, Path::new("/"), program, &[OsStr::new("--version")]);
    }

    fn scrub(&self, tree: &Tree) {
        match self {
            Runner::Kernel(dir) => {
                let _ = tool(dir, "rm", &[OsStr::new("-rf"), OsStr::new(&tree.top)]);
            }
            Runner::Lib(lib) => {
                let _ = rm_rf(&lib.root_session(), &mut tree.top.clone());
            }
            Runner::Preload(p) => {
                let _ = run_preload(OPS.len() - 1, p, tree);
            }
        }
    }
}

/// Runs the suite on `targets`, with `preload` (if any) as the first column.
pub(crate) fn run(
    targets: &[Box<dyn Target>],
    names: &[String],
    preload: Option<&PreloadTarget>,
    opts: &Options,
) -> anyhow::Result<Measured> {
    let mut runners: Vec<Runner<'_>> = preload.map(Runner::Preload).into_iter().collect();
    for t in targets {
        runners.push(runner(t.as_ref())?);
    }
    let mut names = names.to_vec();
    if preload.is_some() {
        names.insert(0, PRELOAD_NAME.to_string());
    }
    let tree = prepare(opts)?;
    crate::mdtest::check_free(targets, &names[usize::from(preload.is_some())..], &tree.top)?;
    if let Some(p) = preload {
        if !p.root_names()?.is_empty() {
            bail!("the {PRELOAD_NAME} target's pool is not empty");
        }
    }
    let mut notes = tree.notes.clone();
    let cold = drop_kernel_caches();
    if let Err(why) = &cold {
        notes.push(why.clone());
    }
    notes.push(
        "cold: kernel caches dropped (sync; echo 3 > /proc/sys/vm/drop_caches) and the LynxFS \
         index evicted (drop_index) once before the step, then the step's program run once \
         in / (`du --version`, `find --version`, under the preload for its column: its \
         binaries back in the page cache, outside the clock), then each target in turn; warm: \
         the same run again right after; on tmpfs, dropping caches cannot drop the tree \
         itself"
            .into(),
    );
    notes.push(format!(
        "GNU tools: the kernel targets and {PRELOAD_NAME} run GNU tar, du, find, gzip and rm, \
         each a process timed end to end (start included); {PRELOAD_NAME} runs the same \
         commands with liblynxfs_preload.so in LD_PRELOAD (the environment `lynxfs run` \
         sets) in a directory its pool serves; a {LIB_NAME} column is NOT these tools but \
         their in-process Rust re-implementation (tar crate, tree walk, flate2 level 6, \
         recursive remove)"
    ));
    for program in ["git", "sqlite3"] {
        if !installed(program) {
            notes.push(format!(
                "{program} is not installed: its rows are left empty (apt-get install {program})"
            ));
        }
    }
    if runners.iter().any(|r| matches!(r, Runner::Lib(_))) {
        notes.push(format!(
            "{LIB_NAME}: the git and sqlite3 rows are left empty (no in-process equivalent)"
        ));
    }
    let mut grid = Grid::new(OPS.to_vec(), runners.len());
    let mut failed: Vec<Option<String>> = vec![None; runners.len()];
    let bar = progress_bar(opts, "apps", opts.rounds * OPS.len() * runners.len());
    for _ in 0..opts.rounds {
        for (op, label) in OPS.iter().enumerate() {
            if op == 1 || op == 3 {
                let _ = chill_all(targets);
                for r in &runners {
                    if let Err(e) = r.chill() {
                        notes.push(format!("could not drop the preload pool's index: {e}"));
                    }
                    r.load_program(op);
                }
            }
            for (col, r) in runners.iter().enumerate() {
                bar.set_message(format!("{label} on {}", names[col]));
                bar.inc(1);
                let cannot =
                    program_of(op).is_some_and(|p| !installed(p) || matches!(r, Runner::Lib(_)));
                if failed[col].is_some() || cannot {
                    grid.push(op, col, f64::NAN);
                    continue;
                }
                let start = Instant::now();
                let result = r.run(op, &tree);
                let secs = start.elapsed().as_secs_f64();
                match result.and_then(|()| r.check_after(op)) {
                    Ok(()) => grid.push(op, col, secs),
                    Err(e) => {
                        grid.push(op, col, f64::NAN);
                        failed[col] = Some(format!("{} failed at {label}: {e}", names[col]));
                        r.scrub(&tree);
                    }
                }
            }
        }
        // A failed target sits the remaining rounds out.
    }
    bar.finish_and_clear();
    notes.extend(failed.into_iter().flatten());
    let baseline = crate::tmpfs_column(&names);
    Ok(Measured {
        unit: "s",
        higher_is_better: false,
        columns: names,
        rows: grid.into_rows(),
        notes,
        baseline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DirTarget;

    fn small_opts(dir: &Path) -> Options {
        let tar = dir.join("t.tar");
        generate(&tar, 120, 5).unwrap();
        Options {
            tree: Some(tar),
            progress: false,
            ..Options::default()
        }
    }

    /// A directory anyone may create names in, as `/dev/shm` is.
    fn shared_dir() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir_in(SHM).unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        d
    }

    /// Runs `script` with sh as uid/gid 1000, an unprivileged user, in `dir`.
    fn as_user_1000(dir: &Path, script: &str) {
        use std::os::unix::process::CommandExt;
        let out = Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .uid(1000)
            .gid(1000)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn generated(files: usize) -> Options {
        Options {
            tree: Some(PathBuf::from(GENERATED)),
            files,
            progress: false,
            ..Options::default()
        }
    }

    /// A user plants a tarball of their own wherever the suite might look for its
    /// cached one (a setuid-root copy of a shell extracted by root would be theirs to
    /// run): the suite extracts its own tree, never theirs.
    #[test]
    fn a_tarball_another_user_planted_is_never_used() {
        let shared = shared_dir();
        as_user_1000(
            shared.path(),
            "mkdir -p planted/sub && echo x > planted/sub/evil.c && \
             tar -cf lynxfs-bench-generated-30.tar planted",
        );
        let tree = prepare_in(&generated(30), shared.path()).unwrap();
        assert_eq!(tree.top, "gen-tree", "the planted tarball was used");
        assert_eq!(tree.files, 30);
    }

    /// A user plants a symlink, to a file of root's, at the name the suite wrote its
    /// tarball through: the file is untouched.
    #[test]
    fn a_symlink_another_user_planted_is_never_written_through() {
        let shared = shared_dir();
        let private = tempfile::tempdir().unwrap();
        let victim = private.path().join("victim");
        std::fs::write(&victim, b"root's own").unwrap();
        let v = victim.display();
        as_user_1000(
            shared.path(),
            &format!("ln -s {v} lynxfs-bench-generated-31.partial"),
        );
        let tree = prepare_in(&generated(31), shared.path());
        assert!(
            std::fs::read(&victim).unwrap() == b"root's own",
            "the planted symlink was written through"
        );
        assert_eq!(tree.unwrap().files, 31);
    }

    /// Issue 42, defect 7: what another user made at the private cache directory's
    /// name (a directory, a link, a file) is neither used nor in the way: the cache
    /// goes to a directory of our own beside it, found again by the next run, and
    /// theirs is left alone.
    #[test]
    fn a_cache_directory_another_user_planted_is_passed_over() {
        use std::os::unix::fs::MetadataExt;
        for plant in [
            "mkdir -m 0700 lynxfs-bench-0",
            "mkdir -m 0700 d && ln -s d lynxfs-bench-0",
            "touch lynxfs-bench-0",
        ] {
            let shared = shared_dir();
            as_user_1000(shared.path(), plant);
            let planted = shared.path().join("lynxfs-bench-0");
            let before = std::fs::symlink_metadata(&planted).unwrap();
            for run in 0..2 {
                let tree = prepare_in(&generated(32), shared.path())
                    .unwrap_or_else(|e| panic!("{plant}, run {run}: {e:#}"));
                assert_eq!(tree.files, 32);
            }
            let after = std::fs::symlink_metadata(&planted).unwrap();
            assert_eq!((after.uid(), after.ino()), (1000, before.ino()), "{plant}");
            let ours: Vec<_> = std::fs::read_dir(shared.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().contains("lynxfs-bench-0."))
                .collect();
            assert_eq!(
                ours.len(),
                1,
                "{plant}: one cache of ours, found again: {ours:?}"
            );
            let m = std::fs::symlink_metadata(&ours[0]).unwrap();
            assert_eq!((m.uid(), m.mode() & 0o7777, m.is_dir()), (0, 0o700, true));
        }
    }

    #[test]
    fn generated_tree_has_the_expected_shape() {
        let dir = tempfile::tempdir().unwrap();
        let opts = small_opts(dir.path());
        let tree = prepare(&opts).unwrap();
        assert_eq!(tree.top, "gen-tree");
        assert_eq!(tree.gzip_dir, "gen-tree/fs");
        assert_eq!(tree.files, 120);
        // 8 directories of 15 files f0..f14, of which f0..f5 and f10..f14 are .c.
        assert_eq!(tree.c_files, 8 * 11);
    }

    #[test]
    fn lib_and_kernel_tools_agree_and_leave_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let opts = small_opts(dir.path());
        let host = tempfile::tempdir().unwrap();
        let lib = LibTarget::create(&{
            let mut o = lynxfs::MkfsOptions::new(256 << 20);
            o.inodes = Some(4096);
            o
        })
        .unwrap();
        let targets: Vec<Box<dyn Target>> = vec![
            Box::new(lib),
            Box::new(DirTarget::new(host.path(), "tmp").unwrap()),
        ];
        let names: Vec<String> = targets.iter().map(|t| t.name()).collect();
        let m = run(&targets, &names, None, &opts).unwrap();
        let failures: Vec<_> = m.notes.iter().filter(|n| n.contains("failed")).collect();
        assert!(failures.is_empty(), "{failures:?}");
        for (op, r) in m.rows.iter().enumerate() {
            match program_of(op) {
                // The lib column has no git or sqlite3; the kernel's runs them when
                // they are installed (and says so in a note when not).
                Some(p) => {
                    assert!(r.values[0].is_nan(), "{}", r.op);
                    if installed(p) {
                        assert!(r.values[1] > 0.0, "{}", r.op);
                    } else {
                        assert!(m.notes.iter().any(|n| n.contains(p)), "{p}");
                    }
                }
                None => assert!(r.values.iter().all(|v| *v > 0.0), "{}", r.op),
            }
        }
        assert!(std::fs::read_dir(host.path()).unwrap().next().is_none());
        assert!(targets[0].readdir(Path::new("")).unwrap().is_empty());
    }

    #[test]
    fn lib_gzip_writes_real_gzip_and_removes_the_original() {
        let lib = LibTarget::create(&lynxfs::MkfsOptions::new(64 << 20)).unwrap();
        let s = lib.root_session();
        s.mkdir("d", 0o755).unwrap();
        let fd = s
            .open("d/a.c", libc::O_CREAT | libc::O_WRONLY, 0o640)
            .unwrap();
        lib.fs()
            .pwrite(fd, b"int main() { return 0; }\n", 0)
            .unwrap();
        lib.fs().close_fd(fd).unwrap();
        gzip_r(&lib, &mut "d".to_string()).unwrap();
        assert!(s.lstat("d/a.c").is_err());
        let st = s.lstat("d/a.c.gz").unwrap();
        assert_eq!(st.mode & 0o777, 0o640);
        let fd = s.open("d/a.c.gz", libc::O_RDONLY, 0).unwrap();
        let mut z = vec![0u8; st.size as usize];
        lib.fs().pread(fd, &mut z, 0).unwrap();
        let mut out = String::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "int main() { return 0; }\n");
    }
}
