//! `lynxfs-fuse-null MOUNTPOINT [--ttl-ms N] [--threads N]`
//!
//! Mounts the in-memory null file system (the "FUSE floor") and serves it in the
//! foreground until SIGINT/SIGTERM or an external `fusermount3 -u MOUNTPOINT`.
//! Defaults: TTL 0 (kernel caches off), one FUSE worker thread.

use std::path::PathBuf;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context};
use fuser::SessionUnmounter;
use lynxfs_fuse::{new_null_session, NullOptions};
use nix::sys::signal::{SigSet, Signal};

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

/// Blocks SIGINT/SIGTERM in this thread, and so in every thread spawned after it
/// (including fuser's workers): they are then only ever received by `sigwait`.
fn block_stop_signals() -> anyhow::Result<SigSet> {
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals.thread_block().context("blocking SIGINT/SIGTERM")?;
    Ok(signals)
}

/// Waits for a stop signal on a dedicated thread and unmounts, which makes
/// `Session::run` return and `main` exit normally instead of leaving a dead mount.
fn unmount_on_signal(signals: SigSet, mut unmounter: SessionUnmounter) -> anyhow::Result<()> {
    thread::Builder::new()
        .name("signal-wait".to_string())
        .spawn(move || {
            if let Ok(signal) = signals.wait() {
                eprintln!("lynxfs-fuse-null: {signal}, unmounting");
            }
            if let Err(e) = unmounter.unmount() {
                eprintln!("lynxfs-fuse-null: unmount failed: {e}");
            }
        })
        .context("spawning the signal thread")?;
    Ok(())
}

fn run() -> anyhow::Result<()> {
    let args = parse_args()?;
    // Before mounting: a signal arriving during the mount must not kill the process.
    let signals = block_stop_signals()?;
    let mut session = new_null_session(&args.mountpoint, &args.options)?;
    unmount_on_signal(signals, session.unmount_callable())?;
    eprintln!(
        "lynxfs-fuse-null: serving {} (ttl {:?}, {} thread(s))",
        args.mountpoint.display(),
        args.options.ttl,
        args.options.threads
    );
    session.run().context("FUSE session")
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
