//! `lynxfs`: make, inspect and use LynxFS pools.

mod backend;
mod demo;
mod info;
mod size;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use backend::BackendKind;

/// The default pool: in /dev/shm (memory that outlives the process) where it exists.
pub const DEFAULT_POOL: &str = "/dev/shm/lynxfs.pool";

#[derive(Parser)]
#[command(
    name = "lynxfs",
    version,
    about = "LynxFS: a file system for persistent memory, in user space"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a pool file (or format a device).
    Mkfs {
        /// Pool size, e.g. 1G, 512M, 65536 (bytes).
        #[arg(long, default_value = "1G", value_parser = size::parse)]
        size: u64,
        /// Lanes (per-CPU partitions); default: one per CPU.
        #[arg(long)]
        lanes: Option<u32>,
        /// Number of inodes; default: one per 8 KiB of pool.
        #[arg(long)]
        inodes: Option<u64>,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
        /// Pool file.
        pool: PathBuf,
    },
    /// Make the default pool and run a short workload on it, printing what it measured.
    Demo {
        #[arg(long, default_value = "256M", value_parser = size::parse)]
        size: u64,
        #[arg(default_value = DEFAULT_POOL)]
        pool: PathBuf,
    },
    /// Describe a pool: format, size, lanes, mapping, space used and free.
    Info {
        /// Durability backend: pmem or msync (default: pmem on DAX or tmpfs, else msync).
        #[arg(long)]
        backend: Option<BackendKind>,
        pool: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lynxfs: {e:#}");
            ExitCode::from(8)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Mkfs {
            size,
            lanes,
            inodes,
            force,
            pool,
        } => {
            let mut opts = lynxfs::MkfsOptions::new(size);
            if let Some(l) = lanes {
                opts.lanes = l;
            }
            opts.inodes = inodes;
            opts.force = force;
            lynxfs::Pool::mkfs(&pool, &opts, lynxfs::pmem::PmemBackend::default())
                .with_context(|| format!("mkfs {}", pool.display()))?;
            println!("created {} ({} bytes)", pool.display(), size);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Demo { size, pool } => {
            demo::run(&pool, size)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Info { backend, pool } => {
            info::print(&pool, BackendKind::pick(backend, &pool))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
