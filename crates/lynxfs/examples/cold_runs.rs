//! Runs a program N times under the preload library, with the pool held attached by
//! this process (as `lynxfs run`'s session or a mount keeps it) and, for `cold`, the
//! index evicted before each run (the apps suite's "cold": every directory the program
//! reads is loaded again). Prints each run's wall time. Used for the callgrind and
//! timing figures of docs/DESIGN-NOTES.md, "Directory loads without per-slot work".
//!
//! ```sh
//! cargo build --release -p lynxfs-preload -p lynxfs --example cold_runs
//! target/release/examples/cold_runs POOL AT LIB N cold|warm PROGRAM ARGS...
//! ```
//! AT is the directory the pool answers for (absolute, canonical), LIB the preload
//! library; the program runs in AT. Under valgrind, set `LYNXFS_PROTECT=0`.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use lynxfs::pmem::PmemBackend;
use lynxfs::Fs;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, pool, at, lib, n, mode, program, rest @ ..] = args.as_slice() else {
        eprintln!("usage: cold_runs POOL AT LIB N cold|warm PROGRAM ARGS...");
        return ExitCode::from(2);
    };
    let (Ok(n), cold) = (n.parse::<usize>(), mode == "cold") else {
        eprintln!("cold_runs: N must be a number");
        return ExitCode::from(2);
    };
    let fs = match Fs::<PmemBackend>::open(Path::new(pool)) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("cold_runs: attaching {pool}: {e}");
            return ExitCode::FAILURE;
        }
    };
    for _ in 0..n {
        if cold {
            fs.ns().drop_index();
        }
        let t = Instant::now();
        let status = Command::new(program)
            .args(rest)
            .env("LD_PRELOAD", lib)
            .env("LYNXFS_POOL", pool)
            .env("LYNXFS_AT", at)
            .current_dir(at)
            .stdout(Stdio::null())
            .status();
        match status {
            Ok(s) if s.success() => println!("{mode} {:.2} ms", t.elapsed().as_secs_f64() * 1e3),
            Ok(s) => {
                eprintln!("cold_runs: {program}: {s}");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("cold_runs: {program}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
