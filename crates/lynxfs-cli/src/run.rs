//! `lynxfs run [--pool POOL] [--at DIR] -- CMD [ARGS...]`: runs CMD with the preload
//! library (liblynxfs_preload.so) in `LD_PRELOAD`, so that its calls on paths under DIR
//! go to POOL in the calling thread instead of through the kernel.
//!
//! Everything that can be checked is checked before the program starts (it never runs
//! with a pool it cannot use): the pool is attached by the engine first, so a missing,
//! foreign, untrusted or unattachable pool fails with the engine's own message.
//!
//! The program runs as our child ([`crate::supervise`]: its exit status is ours,
//! signals sent to us reach it) while we stay attached to the pool, and we detach when
//! it has ended. The pool's shared runtime state (the index of the directories loaded,
//! the allocators) is then built once, by us, instead of by every process the program
//! starts that touches the pool while no other is attached (a shell script's,
//! make's or git's many short processes: 8 to 11 ms each, docs/DESIGN-NOTES.md "Process
//! start: a pool held by `lynxfs run`"); and the pool is detached when our caller sees
//! us end, as it was when a lone program's last process detached at its exit.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};

use crate::mount::{mountpoint_of_pool, pool_at};

/// The preload library's file name.
pub const PRELOAD_LIB: &str = "liblynxfs_preload.so";
/// Overrides where the preload library is looked for.
pub const PRELOAD_LIB_VAR: &str = "LYNXFS_PRELOAD_LIB";

/// Exit code of every check that fails before the program starts, and of a failed
/// detach after a program that succeeded.
const FAILED: u8 = 1;
/// A shell's exit code for a command it cannot find.
const NOT_FOUND: u8 = 127;
/// A shell's exit code for a command it found but cannot execute.
const CANNOT_EXECUTE: u8 = 126;

/// What `lynxfs run` was asked to do.
pub struct Request<'a> {
    pub pool: Option<&'a Path>,
    pub at: Option<&'a Path>,
    pub cmd: &'a [OsString],
}

/// What the program is run with, and the pool held for it.
struct Plan {
    lib: PathBuf,
    pool: PathBuf,
    at: PathBuf,
    held: lynxfs::Fs,
}

/// Runs the request: returns the exit code to end with when something failed before
/// the program started; otherwise ends as the program did.
pub fn run(req: &Request) -> ExitCode {
    let plan = match plan(req) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lynxfs run: {e:#}");
            if crate::disconnected(&e) {
                eprintln!("lynxfs run: {}", crate::DISCONNECTED_HINT);
            }
            return ExitCode::from(FAILED);
        }
    };
    run_holding(plan, req.cmd)
}

fn plan(req: &Request) -> Result<Plan> {
    let lib = find_library()?;
    let (pool, at) = pool_and_dir(req.pool, req.at)?;
    let held = lynxfs::Fs::open(&pool)?;
    Ok(Plan {
        lib,
        pool,
        at,
        held,
    })
}

/// The preload library: `$LYNXFS_PRELOAD_LIB`, else next to this executable (a cargo
/// build's target/<profile>/), else `<exe dir>/../lib/lynxfs/` (an installation).
pub(crate) fn find_library() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(PRELOAD_LIB_VAR) {
        let p = PathBuf::from(p);
        return usable_library(&p)
            .with_context(|| format!("{PRELOAD_LIB_VAR}={}: cannot be preloaded", p.display()));
    }
    let exe = std::env::current_exe().context("finding the lynxfs executable")?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join(PRELOAD_LIB),
        dir.join("../lib/lynxfs").join(PRELOAD_LIB),
    ];
    for c in &candidates {
        if c.is_file() {
            return usable_library(c);
        }
    }
    bail!(
        "{PRELOAD_LIB} not found (looked in {} and {}; set {PRELOAD_LIB_VAR} to its path, or \
         build it with `cargo build --release -p lynxfs-preload`)",
        dir.display(),
        dir.join("../lib/lynxfs").display()
    )
}

/// The library's canonical path, which ld.so can take from `LD_PRELOAD`: an existing
/// file whose path has no separator of that list (space or colon).
fn usable_library(p: &Path) -> Result<PathBuf> {
    let c = p
        .canonicalize()
        .with_context(|| format!("{}", p.display()))?;
    if !c.is_file() {
        bail!("{}: not a file", c.display());
    }
    if c.as_os_str().as_bytes().iter().any(|b| b" :".contains(b)) {
        bail!(
            "{}: LD_PRELOAD cannot hold a path with a space or a colon",
            c.display()
        );
    }
    Ok(c)
}

/// The pool (canonical) and the directory it answers for (canonical): each given, or
/// found from the other through the mount table.
fn pool_and_dir(pool: Option<&Path>, at: Option<&Path>) -> Result<(PathBuf, PathBuf)> {
    let at = at.map(canonical_dir).transpose()?;
    let pool = match (pool, &at) {
        (Some(p), _) => canonical_pool(p)?,
        (None, Some(dir)) => pool_at(dir).with_context(|| {
            format!(
                "no --pool given and no pool mounted at {} (give --pool POOL)",
                dir.display()
            )
        })?,
        (None, None) => bail!("give --pool POOL, --at DIR or both (see `lynxfs run --help`)"),
    };
    let at = match at {
        Some(dir) => {
            check_not_another_pools_mount(&dir, &pool)?;
            dir
        }
        None => mountpoint_of_pool(&pool).with_context(|| {
            format!(
                "{} is not mounted: give --at DIR (the directory its paths are under), or \
                 mount it first with `lynxfs mount {} DIR`",
                pool.display(),
                pool.display()
            )
        })?,
    };
    Ok((pool, at))
}

/// A pool path made canonical; a missing one is left for the engine to describe.
fn canonical_pool(p: &Path) -> Result<PathBuf> {
    match p.canonicalize() {
        Ok(c) => Ok(c),
        Err(_) if !p.exists() => Err(lynxfs::Error::Missing {
            path: p.to_path_buf(),
        }
        .into()),
        Err(e) => Err(e).with_context(|| format!("{}", p.display())),
    }
}

/// `--at DIR`: an existing directory, made canonical (absolute, no symlinks).
fn canonical_dir(p: &Path) -> Result<PathBuf> {
    let c = p
        .canonicalize()
        .with_context(|| format!("--at {}", p.display()))?;
    if !c.is_dir() {
        bail!("--at {}: not a directory", p.display());
    }
    Ok(c)
}

/// A DIR that is the FUSE mount of a different pool would show the pool's files to
/// preloaded programs and the other pool's to the rest: refused.
fn check_not_another_pools_mount(dir: &Path, pool: &Path) -> Result<()> {
    match pool_at(dir) {
        Ok(mounted) if mounted != pool => bail!(
            "--at {}: the mount point of another pool ({})",
            dir.display(),
            mounted.display()
        ),
        _ => Ok(()),
    }
}

/// `LD_PRELOAD` with the library first; a library already in the list (a nested
/// `lynxfs run`) is not added twice.
fn preload_value(lib: &Path, existing: Option<&OsStr>) -> OsString {
    let lib = lib.as_os_str();
    let rest: Vec<&[u8]> = existing
        .map(|e| e.as_bytes())
        .unwrap_or_default()
        .split(|b| *b == b' ' || *b == b':')
        .filter(|s| !s.is_empty() && *s != lib.as_bytes())
        .collect();
    let mut v = lib.to_os_string();
    for s in rest {
        v.push(":");
        v.push(OsStr::from_bytes(s));
    }
    v
}

/// Runs the command with the pool held, detaches when it has ended, and ends as it
/// did; returns the exit code to end with when it cannot be started.
fn run_holding(plan: Plan, cmd: &[OsString]) -> ExitCode {
    let Some((program, args)) = cmd.split_first() else {
        eprintln!("lynxfs run: no command given (lynxfs run --pool POOL -- CMD [ARGS...])");
        detach(&plan);
        return ExitCode::from(FAILED);
    };
    let preload = preload_value(&plan.lib, std::env::var_os("LD_PRELOAD").as_deref());
    let spawned = crate::supervise::spawn(
        Command::new(program)
            .args(args)
            .env("LD_PRELOAD", preload)
            .env("LYNXFS_POOL", &plan.pool)
            .env("LYNXFS_AT", &plan.at),
    );
    let mut child = match spawned {
        Ok(c) => c,
        Err(err) => {
            detach(&plan);
            return ExitCode::from(cannot_start(program, &err));
        }
    };
    // Meanwhile the pool's shared runtime state is mapped in, so the program's
    // processes do not each stop on a page fault that also clears the page (docs/
    // DESIGN-NOTES.md, "First touch"): on the other CPU, and given up when the program
    // ends. Child::wait retries an interrupted wait: a forwarded signal does not end it.
    let ended = AtomicBool::new(false);
    let status = std::thread::scope(|s| {
        s.spawn(|| {
            plan.held
                .pool()
                .populate_while(|| !ended.load(Ordering::Relaxed))
        });
        let status = child.wait();
        ended.store(true, Ordering::Relaxed);
        status
    });
    let detached = detach(&plan);
    match status {
        Ok(s) if detached || !s.success() => crate::supervise::end_as(s),
        Ok(_) => ExitCode::from(FAILED),
        Err(e) => {
            eprintln!("lynxfs run: waiting for {}: {e}", program.to_string_lossy());
            ExitCode::from(FAILED)
        }
    }
}

/// The shell's exit code for a command that could not be started, said on stderr.
fn cannot_start(program: &OsStr, err: &std::io::Error) -> u8 {
    match err.kind() {
        std::io::ErrorKind::NotFound => {
            eprintln!(
                "lynxfs run: {}: command not found",
                program.to_string_lossy()
            );
            NOT_FOUND
        }
        _ => {
            eprintln!("lynxfs run: {}: {err}", program.to_string_lossy());
            CANNOT_EXECUTE
        }
    }
}

/// Leaves the pool (a hybrid pool's writes commit here); false, said on stderr, if that
/// failed.
fn detach(plan: &Plan) -> bool {
    match plan.held.close() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("lynxfs run: {}: detaching: {e}", plan.pool.display());
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_goes_first_and_once() {
        let lib = Path::new("/l/liblynxfs_preload.so");
        assert_eq!(preload_value(lib, None), OsString::from(lib));
        assert_eq!(
            preload_value(lib, Some(OsStr::new("/a.so /b.so:/c.so"))),
            OsString::from("/l/liblynxfs_preload.so:/a.so:/b.so:/c.so")
        );
        assert_eq!(
            preload_value(lib, Some(OsStr::new("/l/liblynxfs_preload.so /a.so"))),
            OsString::from("/l/liblynxfs_preload.so:/a.so")
        );
    }
}
