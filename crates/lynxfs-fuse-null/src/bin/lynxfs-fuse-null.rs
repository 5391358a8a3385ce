//! `lynxfs-fuse-null MOUNTPOINT [--ttl-ms N] [--threads N]`
//!
//! Mounts the in-memory null file system (the "FUSE floor") and serves it in the
//! foreground until SIGINT/SIGTERM/SIGHUP or an external `fusermount3 -u MOUNTPOINT`.
//! Defaults: TTL 0 (kernel caches off), one FUSE worker thread.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use lynxfs_fuse::mount::{block_stop_signals, unmount_on_signals};
use lynxfs_fuse_null::{new_null_session, NullOptions};

const USAGE: &str = "usage: lynxfs-fuse-null MOUNTPOINT [--ttl-ms N] [--threads N]";

struct Args {
    mountpoint: PathBuf,
    options: NullOptions,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut mountpoint = None;
    let mut options = NullOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--ttl-ms" => options.ttl = Duration::from_millis(number_after(&arg, args.next())?),
            "--threads" => options.threads = usize::try_from(number_after(&arg, args.next())?)?,
            "-h" | "--help" => bail!("{USAGE}"),
            _ if arg.starts_with('-') => bail!("unknown option {arg}\n{USAGE}"),
            _ if mountpoint.is_some() => bail!("more than one mount point\n{USAGE}"),
            _ => mountpoint = Some(PathBuf::from(arg)),
        }
    }
    let mountpoint = mountpoint.with_context(|| USAGE.to_string())?;
    if options.threads == 0 {
        bail!("--threads must be at least 1");
    }
    Ok(Args {
        mountpoint,
        options,
    })
}

fn number_after(flag: &str, value: Option<String>) -> anyhow::Result<u64> {
    let value = value.with_context(|| format!("{flag} needs a value"))?;
    value
        .parse()
        .with_context(|| format!("{flag}: not a number: {value}"))
}

fn run() -> anyhow::Result<()> {
    let args = parse_args()?;
    // Before mounting: a signal arriving during the mount must not kill the process.
    let signals = block_stop_signals()?;
    let (session, mount) = new_null_session(&args.mountpoint, &args.options)?;
    unmount_on_signals(signals, Arc::new(mount), "lynxfs-fuse-null")?;
    eprintln!(
        "lynxfs-fuse-null: serving {} (ttl {:?}, {} thread(s))",
        args.mountpoint.display(),
        args.options.ttl,
        args.options.threads
    );
    lynxfs_fuse::kmount::session_ended(session.run()).context("FUSE session")
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lynxfs-fuse-null: {e:#}");
            ExitCode::FAILURE
        }
    }
}
