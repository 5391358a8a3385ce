//! Records a history of namespace calls through libc (so a preload library sees
//! them) in a directory, for `lynxfs_test_support::history` to check:
//!
//! `lynxfs-history DIR setup` makes the names' first files and prints the `init`
//! lines; `lynxfs-history DIR run WHO THREADS MILLIS MAX_CALLS` runs THREADS threads
//! numbered from WHO for MILLIS ms (at most MAX_CALLS calls each) and prints their
//! calls.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use lynxfs_test_support::history_run::{run_threads, setup, Libc};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok());
    let lines = match (args.get(1), args.get(2).map(String::as_str)) {
        (Some(dir), Some("setup")) => setup(&Libc::new(Path::new(dir))),
        (Some(dir), Some("run")) => match (num(3), num(4), num(5), num(6)) {
            (Some(who), Some(threads), Some(ms), Some(max)) => Ok(run_threads(
                &Libc::new(Path::new(dir)),
                who as u32,
                threads as u32,
                Duration::from_millis(ms),
                max as usize,
            )),
            _ => Err("run: WHO THREADS MILLIS MAX_CALLS, numbers".to_string()),
        },
        _ => Err("usage: lynxfs-history DIR setup | DIR run WHO THREADS MILLIS MAX_CALLS".into()),
    };
    match lines {
        Ok(lines) => {
            let mut out = std::io::stdout().lock();
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            if out
                .write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lynxfs-history: {e}");
            ExitCode::FAILURE
        }
    }
}
