//! `lynxfs bench SUITE [OPTIONS]`: runs `lynxfs-bench` with the same arguments. The
//! benchmark harness is a program of its own so that the shipped `lynxfs` links none
//! of its libraries (plotting, archives); it is looked for beside this executable (a
//! cargo build's target/<profile>/, an installation's bin/), then on the PATH.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;

/// The benchmark harness's executable.
const BENCH_EXE: &str = "lynxfs-bench";

/// The arguments of `lynxfs bench`: all of them are `lynxfs-bench`'s, `--help` too.
#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct BenchArgs {
    /// The suite and its options (`lynxfs bench --help` lists them).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "SUITE [OPTIONS]"
    )]
    pub args: Vec<OsString>,
}

/// Replaces this process with `lynxfs-bench ARGS`: returns only if that fails.
pub fn run(args: BenchArgs) -> Result<()> {
    let exe = std::env::current_exe().context("finding the lynxfs executable")?;
    let bench = find_bench(&exe, &std::env::var_os("PATH").unwrap_or_default())?;
    // Its usage lines then read as what the user typed.
    let err = Command::new(&bench)
        .arg0("lynxfs bench")
        .args(&args.args)
        .exec();
    Err(err).with_context(|| format!("running {}", bench.display()))
}

/// `lynxfs-bench` beside `exe`, else the first in `path` (a PATH).
fn find_bench(exe: &Path, path: &OsStr) -> Result<PathBuf> {
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let beside = dir.join(BENCH_EXE);
    if beside.is_file() {
        return Ok(beside);
    }
    if let Some(found) = std::env::split_paths(path)
        .map(|d| d.join(BENCH_EXE))
        .find(|p| p.is_file())
    {
        return Ok(found);
    }
    bail!(
        "the benchmarks are the program {BENCH_EXE}, found neither beside {} nor on the \
         PATH: build it with `cargo build --release -p lynxfs-bench` (or install it \
         beside lynxfs)",
        exe.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Sub,
    }

    #[derive(clap::Subcommand)]
    enum Sub {
        Bench(BenchArgs),
    }

    fn parse(args: &[&str]) -> Vec<OsString> {
        let cli = Cli::try_parse_from(["lynxfs", "bench"].iter().chain(args)).unwrap();
        let Sub::Bench(b) = cli.cmd;
        b.args
    }

    #[test]
    fn every_argument_goes_to_the_harness_help_included() {
        let args = [
            "syscalls", "--target", "lib", "--files", "5", "--help", "-x",
        ];
        assert_eq!(parse(&args), args.map(OsString::from));
        assert_eq!(parse(&["--help"]), [OsString::from("--help")]);
        assert!(parse(&[]).is_empty());
    }

    #[test]
    fn the_harness_is_found_beside_the_executable_then_on_the_path() {
        let (dir, on_path) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let exe = dir.path().join("lynxfs");
        let path =
            std::env::join_paths(["/nonexistent", on_path.path().to_str().unwrap()]).unwrap();
        let err = find_bench(&exe, &path).unwrap_err().to_string();
        assert!(
            err.contains(BENCH_EXE) && err.contains("cargo build"),
            "{err}"
        );
        std::fs::write(on_path.path().join(BENCH_EXE), b"").unwrap();
        assert_eq!(
            find_bench(&exe, &path).unwrap(),
            on_path.path().join(BENCH_EXE)
        );
        std::fs::write(dir.path().join(BENCH_EXE), b"").unwrap();
        assert_eq!(find_bench(&exe, &path).unwrap(), dir.path().join(BENCH_EXE));
    }
}
