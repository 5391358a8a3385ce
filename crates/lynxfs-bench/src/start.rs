//! The `start` suite: process start under the preload library, in each placement a
//! program meets, side by side with the same start without the library (issue 44):
//!
//! - **one process, parent not attached**: this program (not preloaded) starts
//!   `/bin/true` preloaded, [`Options::files`] times, each timed alone;
//! - **shell loop, parent not attached**: a preloaded `bash` that never touches the
//!   pool runs `/bin/true` [`Options::files`] times in a row;
//! - **shell loop, parent attached**: the same after the shell read a pool file (it is
//!   attached when it forks);
//! - **shell loop, working directory in the pool**: the shell `cd`s into a pool
//!   directory first;
//! - **shell loop, 1 MiB program in the pool**: the attached shell runs a 1 MiB
//!   program stored in the pool (`/bin/true` padded to 1 MiB).
//!
//! The plain column runs the same on `/dev/shm` without the library. The pool (1 GiB,
//! in `/dev/shm`) is held attached by this program throughout, as `lynxfs run` holds
//! it, so every preloaded process joins the runtime state rather than building it;
//! the library runs with its default protections (sealed mappings, a protection key
//! where the CPU has them). Milliseconds per process, elapsed; the notes add the CPU
//! time of the processes (user and system, the shell's included: what a loaded
//! machine distorts least). Each round runs every row plain then preloaded, the table
//! shows the median round.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};

use crate::lib_target::{fresh_pool_path, to_io};
use crate::{median, progress_bar, Grid, Measured, Options};

/// The rows, in order.
const ROWS: [&str; 5] = [
    "one process, parent not attached",
    "shell loop, parent not attached",
    "shell loop, parent attached",
    "shell loop, working directory in the pool",
    "shell loop, 1 MiB program in the pool",
];

/// The columns: without the library, then with it.
const COLUMNS: [&str; 2] = ["plain", "preload"];

/// The pool's size.
const POOL_BYTES: u64 = 1 << 30;
/// The program stored in the pool is padded to this size.
const PROGRAM_BYTES: usize = 1 << 20;
/// The program every row starts.
const TRUE: &str = "/bin/true";

/// Where one column's files are: a directory holding `x` (a file), `d` (a directory)
/// and `big` (the 1 MiB program).
struct Place {
    dir: PathBuf,
    /// The environment of a process of this column.
    env: Vec<(&'static str, String)>,
}

impl Place {
    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

pub(crate) fn run(opts: &Options) -> anyhow::Result<Measured> {
    let Some(library) = &opts.library else {
        bail!("the start suite needs the preload library (liblynxfs_preload.so)");
    };
    if Command::new("bash")
        .args(["-c", ": $EPOCHREALTIME"])
        .status()
        .map_or(true, |s| !s.success())
    {
        bail!("the start suite runs its loops in bash (5.0 or later, for $EPOCHREALTIME): apt-get install bash");
    }
    let pool = fresh_pool_path()?;
    let result = run_on(&pool, library, opts);
    let _ = std::fs::remove_file(&pool);
    result
}

fn run_on(pool: &Path, library: &Path, opts: &Options) -> anyhow::Result<Measured> {
    Pool::mkfs(pool, &MkfsOptions::new(POOL_BYTES), PmemBackend::default())
        .map_err(to_io)
        .with_context(|| format!("making the pool {}", pool.display()))?;
    // Held attached while the processes run, as `lynxfs run` holds it.
    let fs = Fs::open(pool).with_context(|| format!("attaching {}", pool.display()))?;
    let program = padded_program()?;
    fill_pool(&fs, &program)?;
    let at = tempfile::Builder::new()
        .prefix("lynxfs-start.")
        .tempdir()
        .context("making the pool's directory")?;
    let plain = tempfile::Builder::new()
        .prefix("lynxfs-start-plain.")
        .tempdir_in("/dev/shm")
        .context("making the plain directory in /dev/shm")?;
    fill_plain(plain.path(), &program)?;
    let places = [
        Place {
            dir: plain.path().to_path_buf(),
            env: Vec::new(),
        },
        Place {
            dir: at.path().to_path_buf(),
            env: vec![
                ("LD_PRELOAD", library.display().to_string()),
                ("LYNXFS_POOL", pool.display().to_string()),
                ("LYNXFS_AT", at.path().display().to_string()),
            ],
        },
    ];
    let n = opts.files;
    let mut grid = Grid::new(ROWS.to_vec(), COLUMNS.len());
    let mut cpu = Grid::new(ROWS.to_vec(), COLUMNS.len());
    let bar = progress_bar(opts, "start", opts.rounds * ROWS.len() * COLUMNS.len());
    for _ in 0..opts.rounds {
        for (row, _) in ROWS.iter().enumerate() {
            for (column, place) in places.iter().enumerate() {
                let before = children_cpu_ms();
                let ms = match row {
                    0 => one_by_one(place, n)?,
                    _ => shell_loop(place, row, n)?,
                };
                grid.push(row, column, ms);
                cpu.push(row, column, (children_cpu_ms() - before) / n as f64);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    drop(fs);
    let rows = grid.into_rows();
    let cpu = cpu.into_rows();
    let mut notes: Vec<String> = rows
        .iter()
        .zip(&cpu)
        .map(|(r, c)| {
            let (p, q) = (r.values[0], r.values[1]);
            let (cp, cq) = (c.values[0], c.values[1]);
            format!(
                "{}: {:+.2} ms per process over plain; CPU {cp:.2} ms plain, {cq:.2} preloaded \
                 ({:+.2})",
                r.op,
                q - p,
                cq - cp
            )
        })
        .collect();
    notes.push(format!(
        "{n} processes per measurement; pool {} (1 GiB, held attached by this program); \
         plain: the same files in /dev/shm",
        pool.display()
    ));
    Ok(Measured {
        unit: "ms/process",
        higher_is_better: false,
        columns: COLUMNS.map(String::from).to_vec(),
        rows,
        notes,
        baseline: Some(COLUMNS[0].to_string()),
    })
}

/// The CPU time (user and system) of this process's waited-for descendants so far,
/// in ms: a shell's includes its children's. What a loaded machine distorts least.
fn children_cpu_ms() -> f64 {
    // SAFETY: a plain C struct, valid all zero; getrusage fills it (and cannot fail
    // for RUSAGE_CHILDREN).
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut u);
        u
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(u.ru_utime) + ms(u.ru_stime)
}

/// `/bin/true`'s bytes padded with zeros to [`PROGRAM_BYTES`] (the kernel maps what
/// the program headers name; the rest of the file is never read).
fn padded_program() -> anyhow::Result<Vec<u8>> {
    let mut bytes = std::fs::read(TRUE).with_context(|| format!("reading {TRUE}"))?;
    if bytes.len() < PROGRAM_BYTES {
        bytes.resize(PROGRAM_BYTES, 0);
    }
    Ok(bytes)
}

/// The pool's side: `x`, `d` and the program `big`, written through the engine.
fn fill_pool(fs: &Fs, program: &[u8]) -> anyhow::Result<()> {
    // SAFETY: geteuid and getegid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let s = fs.session(if uid == 0 {
        Cred::root()
    } else {
        Cred::user(uid, gid)
    });
    let write = |name: &str, data: &[u8], mode: u32| -> lynxfs::Result<()> {
        let fd = s.open(name, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode)?;
        let mut done = 0;
        while done < data.len() {
            done += fs.write(fd, &data[done..])?;
        }
        fs.close_fd(fd)
    };
    write("/x", b"x\n", 0o644)?;
    write("/big", program, 0o755)?;
    s.mkdir("/d", 0o755)?;
    Ok(())
}

fn fill_plain(dir: &Path, program: &[u8]) -> anyhow::Result<()> {
    std::fs::write(dir.join("x"), b"x\n")?;
    let big = dir.join("big");
    std::fs::write(&big, program)?;
    std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o755))?;
    std::fs::create_dir(dir.join("d"))?;
    Ok(())
}

/// `/bin/true` started `n` times by this program, each a fork, exec and wait: the
/// median, in ms.
fn one_by_one(place: &Place, n: usize) -> anyhow::Result<f64> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let status = Command::new(TRUE)
            .envs(place.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .status()
            .with_context(|| format!("starting {TRUE}"))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if !status.success() {
            bail!("{TRUE} failed: {status}");
        }
    }
    Ok(median(&times))
}

/// One shell, set up for `row`, running its program `n` times in a row: ms per
/// process, timed by the shell itself (its setup left out).
fn shell_loop(place: &Place, row: usize, n: usize) -> anyhow::Result<f64> {
    let (setup, program) = match row {
        1 => (":".to_string(), TRUE.to_string()),
        2 => (format!(": < {}", place.path("x")), TRUE.to_string()),
        3 => (format!("cd {}", place.path("d")), TRUE.to_string()),
        _ => (format!(": < {}", place.path("x")), place.path("big")),
    };
    let script = format!(
        "{setup} || exit 1; s=$EPOCHREALTIME; for ((i = 0; i < {n}; i++)); do {program} || exit 1; done; \
         echo $s $EPOCHREALTIME"
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .envs(place.env.iter().map(|(k, v)| (k, v)))
        // $EPOCHREALTIME with a decimal point.
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .context("starting bash")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "the loop `{script}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let times: Vec<f64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [start, end] = times[..] else {
        bail!("the loop printed {text:?}, not two times");
    };
    Ok((end - start) * 1e3 / n as f64)
}
