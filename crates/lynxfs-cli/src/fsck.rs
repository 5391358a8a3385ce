//! `lynxfs fsck [--repair] POOL`: check a pool, and with `--repair` fix it. Exit codes
//! as e2fsck's: 0 clean, 1 errors corrected, 4 errors left uncorrected, 8 operational
//! error (the pool cannot be opened: missing, locked, foreign, too small, ...).
//!
//! Without `--repair` the pool is opened read-only (mapped privately), so nothing
//! reaches the file: recovery of an unclean pool runs in memory only, and the check
//! sees what the next open would see. With `--repair` it is opened read-write (which
//! runs recovery if it was not closed cleanly and rewrites the older superblock copy);
//! if problems remain, the recovery walk is forced and the pool checked again.
//! A pool in use (mounted) can only be looked at, from a copy (see [`check_a_copy`]).
//! With `--json`, what is said goes into one JSON object printed at the end
//! (docs/JSON.md) instead of lines of text.

use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::process::ExitCode;

use lynxfs::fsck::{self, FsckReport};
use lynxfs::pmem::{Backend, MsyncBackend, PmemBackend};
use lynxfs::{Access, Error, Pool};

use crate::backend::BackendKind;
use crate::progress::Bar;

pub const CLEAN: u8 = 0;
pub const CORRECTED: u8 = 1;
pub const UNCORRECTED: u8 = 4;
pub const OPERATIONAL: u8 = 8;

pub fn run(path: &Path, repair: bool, kind: BackendKind, json: bool) -> ExitCode {
    run_as(path, path, repair, kind, json)
}

/// [`run`] on the pool at `path`, which the report names `shown` (a data device whose
/// export was imported into `path`, a temporary pool).
pub fn run_as(path: &Path, shown: &Path, repair: bool, kind: BackendKind, json: bool) -> ExitCode {
    let mut out = Out::new(shown, repair, json);
    let code = run_kind(path, repair, kind, &mut out)
        .unwrap_or_else(|| check_a_copy(path, kind, &mut out));
    out.finish(code);
    ExitCode::from(code)
}

/// An operational error before the check could start (`path` given, `e` why): said on
/// stderr, and with `json` in the report's object (docs/JSON.md: printed in every case).
pub fn failed(path: &Path, repair: bool, json: bool, e: impl std::fmt::Display) -> ExitCode {
    let mut out = Out::new(path, repair, json);
    out.error(e);
    out.finish(OPERATIONAL);
    ExitCode::from(OPERATIONAL)
}

/// The check's exit code; `None` if the pool is in use and only a look was asked for.
fn run_kind(path: &Path, repair: bool, kind: BackendKind, out: &mut Out) -> Option<u8> {
    match kind {
        BackendKind::Pmem => run_with(path, repair, PmemBackend::default(), out),
        BackendKind::Msync => run_with(path, repair, MsyncBackend, out),
    }
}

/// The version of `fsck --json`'s schema (docs/JSON.md): raised when a field changes
/// meaning or goes away; new fields may appear without it.
pub const FSCK_SCHEMA: &str = "lynxfs-fsck/1";

/// Where the check's findings go: printed as they come, or gathered for `--json`.
struct Out {
    json: bool,
    pool: String,
    repair: bool,
    in_use_copy: bool,
    error: Option<String>,
    recovery: Option<serde_json::Value>,
    problems: Vec<String>,
    fixed: Vec<String>,
    left: Vec<String>,
    counts: Option<serde_json::Value>,
}

impl Out {
    fn new(path: &Path, repair: bool, json: bool) -> Out {
        Out {
            json,
            pool: path.display().to_string(),
            repair,
            in_use_copy: false,
            error: None,
            recovery: None,
            problems: Vec::new(),
            fixed: Vec::new(),
            left: Vec::new(),
            counts: None,
        }
    }

    /// A line of the text report.
    fn say(&self, line: impl std::fmt::Display) {
        if !self.json {
            println!("{line}");
        }
    }

    /// An operational error: on stderr in both forms, and in the JSON object.
    fn error(&mut self, e: impl std::fmt::Display) {
        eprintln!("lynxfs fsck: {e}");
        if self.error.is_none() {
            self.error = Some(e.to_string());
        }
    }

    /// A problem found; `how` is the text report's prefix.
    fn problem(&mut self, how: &str, p: &str) {
        self.say(format!("{how}: {p}"));
        self.problems.push(p.to_string());
    }

    fn fixed(&mut self, how: &str, f: &str) {
        self.say(format!("{how}: {f}"));
        self.fixed.push(f.to_string());
    }

    fn finish(&self, code: u8) {
        if !self.json {
            return;
        }
        let result = match code {
            CLEAN => "clean",
            CORRECTED => "corrected",
            UNCORRECTED => "uncorrected",
            _ => "error",
        };
        let v = serde_json::json!({
            "schema": FSCK_SCHEMA,
            "pool": self.pool,
            "repair": self.repair,
            "in_use_copy": self.in_use_copy,
            "exit_code": code,
            "result": result,
            "error": self.error,
            "recovery": self.recovery,
            "problems": self.problems,
            "fixed": self.fixed,
            "left": self.left,
            "counts": self.counts,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("a JSON value prints")
        );
    }
}

/// A read-only check of a pool in use (mounted, or attached by a preloaded program):
/// as `e2fsck -n` on a mounted file system, it checks what is there now, from a copy
/// taken at once (in memory), which it sees as after a crash at that instant: the
/// in-memory recovery finishes what the journals hold, and an operation in flight may
/// still show as a problem.
fn check_a_copy(path: &Path, kind: BackendKind, out: &mut Out) -> u8 {
    out.in_use_copy = true;
    out.say(format!(
        "{} is in use (mounted, or attached by a program): checking a copy taken now, as \
         after a crash at this instant; changes in flight may show as problems (run again, \
         or unmount, to be sure)",
        path.display()
    ));
    match copy_into_memory(path) {
        Ok(copy) => {
            let at = std::path::PathBuf::from(format!("/proc/self/fd/{}", copy.as_raw_fd()));
            run_kind(&at, false, kind, out).unwrap_or(OPERATIONAL)
        }
        Err(e) => {
            out.error(format!("copying {}: {e}", path.display()));
            OPERATIONAL
        }
    }
}

fn copy_into_memory(path: &Path) -> std::io::Result<std::fs::File> {
    let mut from = std::fs::File::open(path)?;
    // SAFETY: the name is a NUL-terminated literal; the flags are plain bits.
    let fd = unsafe { libc::memfd_create(c"lynxfs-fsck-copy".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned this descriptor, owned by nobody else.
    let mut to = unsafe { std::fs::File::from_raw_fd(fd) };
    std::io::copy(&mut from, &mut to)?;
    Ok(to)
}

/// Only a file or a block device is read: opening a FIFO, say, would hang. (A missing
/// path is left for the open to report.)
fn check_type(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() && !m.file_type().is_block_device() => Err(Error::Invalid(format!(
            "{}: not a regular file or block device",
            path.display()
        ))),
        _ => Ok(()),
    }
}

fn print_report(rep: &FsckReport, out: &mut Out) {
    for p in &rep.problems {
        out.problem("problem", p);
    }
}

fn run_with<B: Backend>(path: &Path, repair: bool, backend: B, out: &mut Out) -> Option<u8> {
    out.say(format!(
        "checking {}{}",
        path.display(),
        if repair { " (repair)" } else { "" }
    ));
    if let Err(e) = check_type(path) {
        out.error(e);
        return Some(OPERATIONAL);
    }
    // The superblock copies as the file holds them: a read-write open rewrites the
    // older copy, which would hide damage to it.
    let sb_problems = match fsck::check_file_superblocks(path) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(), // open says it
        Err(e) => {
            out.error(format!("{}: {e}", path.display()));
            return Some(OPERATIONAL);
        }
    };
    let access = if repair {
        Access::Exclusive
    } else {
        Access::ReadOnly
    };
    let bar = Bar::new();
    let opened = Pool::open_with_progress(path, access, backend, &bar);
    bar.finish();
    let mut pool = match opened {
        Ok(p) => p,
        Err(Error::Locked { .. }) if !repair => return None,
        Err(e) => {
            // The copies' damage explains a corrupt pool; for anything else (empty,
            // too small, foreign, missing, ...) the open's own error says it all.
            if matches!(e, Error::Corrupt { .. }) {
                for p in &sb_problems {
                    out.problem("problem", p);
                }
                out.left = sb_problems.clone();
            }
            out.error(&e);
            return Some(match e {
                // Ours, but damaged beyond what opening can get past.
                Error::Corrupt { .. } => UNCORRECTED,
                _ => OPERATIONAL,
            });
        }
    };
    let mut found = sb_problems.len();
    for p in &sb_problems {
        out.problem("problem", p);
    }
    if let Some(r) = &pool.recovery {
        out.recovery = Some(serde_json::json!({
            "replayed": repair,
            "journals_replayed": r.journals_replayed,
            "journals_torn": r.journals_torn,
            "slots_cleared": r.slots_cleared,
            "dentries_dropped": r.dentries_dropped,
            "nlinks_fixed": r.nlinks_fixed,
            "inodes_reclaimed": r.inodes_reclaimed,
        }));
        out.say(format!(
            "the pool was not closed cleanly: recovery {} {} journal(s), dropped {} torn, \
             cleared {} slot(s), dropped {} entr(ies), fixed {} link count(s), reclaimed {} inode(s)",
            if repair { "replayed" } else { "would replay" },
            r.journals_replayed,
            r.journals_torn,
            r.slots_cleared,
            r.dentries_dropped,
            r.nlinks_fixed,
            r.inodes_reclaimed
        ));
        for p in &r.problems {
            out.problem("problem (cut by recovery)", p);
        }
        found += r.problems.len();
    }
    let first = fsck::check_with_progress(&pool, &bar);
    bar.finish();
    print_report(&first, out);
    found += first.problems.len();
    let mut left = if repair { 0 } else { found };
    let mut last = first;
    if repair && !last.is_clean() {
        let repaired = fsck::repair_with_progress(&mut pool, &bar);
        bar.finish();
        match repaired {
            Ok(r) => {
                for f in &r.fixes {
                    out.fixed("fixed", f);
                }
                for p in &r.recovery_problems {
                    out.fixed("fixed (cut by recovery)", p);
                }
                last = fsck::check_with_progress(&pool, &bar);
                bar.finish();
                if !last.is_clean() {
                    out.say("after repair:");
                    for p in &last.problems {
                        out.say(format!("problem: {p}"));
                    }
                }
                left = last.problems.len();
                out.left = last.problems.clone();
            }
            Err(e) => {
                out.say(format!("repair failed: {e}"));
                out.error.get_or_insert(format!("repair failed: {e}"));
                left = last.problems.len().max(1);
                out.left = last.problems.clone();
            }
        }
    }
    if !repair {
        out.left = out.problems.clone();
    }
    out.counts = Some(serde_json::json!({
        "directories": last.directories,
        "files": last.files,
        "symlinks": last.symlinks,
        "others": last.others,
        "dentries": last.dentries,
        "blocks": last.blocks,
        "speculative_blocks": last.speculative,
    }));
    out.say(format!(
        "{}: {} directories, {} files, {} symlinks, {} other; {} entries, {} data blocks in use",
        path.display(),
        last.directories,
        last.files,
        last.symlinks,
        last.others,
        last.dentries,
        last.blocks
    ));
    if last.speculative > 0 {
        out.say(format!(
            "{} of those blocks are preallocated past the end of growing files (given back at their last close or by recovery; not leaks)",
            last.speculative
        ));
    }
    let code = if found == 0 {
        out.say("clean");
        CLEAN
    } else if left == 0 {
        out.say(format!("{found} problem(s) found, all corrected"));
        CORRECTED
    } else if repair {
        out.say(format!("{found} problem(s) found, {left} left uncorrected"));
        UNCORRECTED
    } else {
        out.say(format!(
            "{found} problem(s) found, not corrected (run with --repair)"
        ));
        UNCORRECTED
    };
    if repair {
        if let Err(e) = pool.close() {
            out.error(e);
            return Some(OPERATIONAL);
        }
    } else {
        pool.crash(); // a read-only look: nothing to save
    }
    Some(code)
}
