//! `lynxfs-bench SUITE [--target T]... [--out DIR] [--files N] [--rounds N]`: runs one
//! of the suites and prints its table (and writes its JSON and a PNG figure with
//! --out). `lynxfs bench ARGS` runs this program with the same arguments, so the
//! shipped `lynxfs` links none of the benchmarks' libraries (plotting, archives).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use lynxfs_bench::{
    open_target, run_suite_with_preload, worker_main, Options, PreloadLaunch, PreloadTarget,
    Target, WorkerCommand, HYBRID_PRELOAD_NAME, PRELOAD_NAME, SUITES, TARGETLESS_SUITES,
};

/// The arguments of `lynxfs-bench` (and so of `lynxfs bench`, which runs it).
#[derive(Parser, Debug)]
#[command(
    name = "lynxfs-bench",
    version,
    about = "Run a LynxFS benchmark suite and print its table (syscalls, data, mdtest, \
             smallfiles, recovery, apps, personalities, ablation, hybrid, hybrid-fsync, statall, \
             rename, filetest, start; `lynxfs-bench page DIR` writes the results page)"
)]
struct BenchArgs {
    /// syscalls, data, mdtest, smallfiles, recovery, apps, personalities, ablation,
    /// hybrid, hybrid-fsync, statall, rename, filetest or start (process start under
    /// the preload).
    suite: String,
    /// A file system to measure, repeatable; the first is the one the ratio columns
    /// compare with the others. lib (LynxFS in process, pool in /dev/shm), hybrid (the same, 1 GiB, file data on a device file in /var/tmp), hybrid-fuse (that pool through FUSE), lib-1g (lib in a 1 GiB pool, as hybrid's), lib-inplace (its pool in the inplace data mode), lib-areas, lib-noevolution, lib-noareas (ADAM's areas with and without evolution, areas off), tmpfs, shm,
    /// ext4 (an image in /dev/shm), ext4-disk (a directory on the root file system's disk), fuse-null (the FUSE floor), fuse (LynxFS over FUSE, `lynxfs mount`'s
    /// default options: io_uring when the kernel offers it), fuse-dev (the same over
    /// the classic /dev/fuse transport), fuse-nocache (kernel name and attribute caches
    /// off, /dev/fuse) or dir=PATH; preload: unmodified programs through liblynxfs_preload.so on a
    /// fresh pool (as `lynxfs run`; its column comes first); hybrid-preload: the same on a hybrid pool (as hybrid's). Default: lib and
    /// tmpfs (hybrid, ext4-disk and lib-1g for hybrid; hybrid and ext4-disk for hybrid-fsync; rename and filetest: lib-areas,
    /// lib-noevolution, lib-noareas and tmpfs; none for recovery and ablation, which
    /// make their own pools).
    #[arg(long = "target", value_name = "T")]
    targets: Vec<String>,
    /// Write the JSON report and a PNG figure into this directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// How many files. Default per suite: syscalls 10000, mdtest 10000, smallfiles
    /// 1000, recovery 1000000, ablation 1000, statall 50000, filetest 10000, rename
    /// 10000 (the largest directory), start 50 (processes per measurement); personalities: flow iterations per
    /// personality (default 2000); apps: files of the generated tree used when there
    /// is no Linux tarball (default 80000).
    #[arg(long)]
    files: Option<usize>,
    /// Rounds per measurement; the table shows the median.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// data: the file's size in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    file_mib: u64,
    /// mdtest: the largest thread count; personalities: the most threads.
    #[arg(long, default_value_t = 8)]
    max_threads: usize,
    /// apps: the tarball to extract (.tar, or .tar.xz decompressed once into
    /// /dev/shm/lynxfs-bench-UID), or `generated` for a generated tree of --files files. Default:
    /// /usr/src/linux-source-*.tar.xz (apt-get install linux-source), else a generated
    /// tree.
    #[arg(long, value_name = "TAR")]
    tree: Option<PathBuf>,
    /// mdtest: also split the work over this many processes attached to the lib
    /// target's pool, next to as many threads (the default target is then lib alone).
    #[arg(long, value_name = "N")]
    processes: Option<usize>,
    /// Also print the project's goals for the suite (from its issues) and whether this
    /// run meets each (for developers).
    #[arg(long)]
    goals: bool,
    /// Serve as a worker process of a multi-process benchmark on stdin and stdout
    /// (started by the benchmark itself).
    #[arg(long, hide = true)]
    worker: bool,
    /// Write the whole report as JSON to this file (a preloaded child of the preload
    /// target reports to its parent this way).
    #[arg(long, hide = true, value_name = "FILE")]
    child_report: Option<PathBuf>,
    /// personalities: write `fusefloor start ROW on TARGET` and `fusefloor end ROW on
    /// TARGET ops=N` lines to FILE around each timed phase (a tracing instance's
    /// trace_marker: scripts/fusefloor.sh splits its trace by them).
    #[arg(long, value_name = "FILE")]
    mark: Option<PathBuf>,
}

/// `lynxfs-bench page DIR` (`lynxfs bench page DIR`): the results page from the
/// reports of a run.
#[derive(Parser, Debug)]
#[command(
    name = "lynxfs-bench page",
    bin_name = "lynxfs bench page",
    about = "Rewrite the results page from the JSON reports `lynxfs bench SUITE --out DIR` \
             wrote in DIR (scripts/bench-page.sh runs the suites, then this)"
)]
struct PageArgs {
    /// The directory the reports and figures were written into; `skipped.txt` there
    /// (`suite: reason` lines) says why a suite is missing.
    dir: PathBuf,
    /// The page to rewrite: its hand-written intro, down to the generated mark, is kept.
    #[arg(long, value_name = "FILE", default_value = "docs/BENCHMARKS.md")]
    page: PathBuf,
    /// Where the figures are copied; the page links them as `figures/NAME.png`.
    #[arg(long, value_name = "DIR", default_value = "docs/figures")]
    figures: PathBuf,
}

/// Rewrites the results page (see [`PageArgs`]).
fn write_page(args: &PageArgs) -> Result<()> {
    let old = std::fs::read_to_string(&args.page)
        .with_context(|| format!("reading the page's intro from {}", args.page.display()))?;
    let reports = lynxfs_bench::read_reports(&args.dir)?;
    let skipped = lynxfs_bench::read_skipped(&args.dir)?;
    let page = lynxfs_bench::render_page(&old, &reports, &skipped, Some(&args.figures))?;
    std::fs::write(&args.page, page).with_context(|| format!("writing {}", args.page.display()))?;
    println!(
        "wrote {} ({} sections) and its figures in {}",
        args.page.display(),
        reports.len(),
        args.figures.display()
    );
    Ok(())
}

/// The preload library's file name.
const PRELOAD_LIB: &str = "liblynxfs_preload.so";
/// Overrides where the preload library is looked for (as for `lynxfs run`).
const PRELOAD_LIB_VAR: &str = "LYNXFS_PRELOAD_LIB";

/// The preload library, where `lynxfs run` looks for it: `$LYNXFS_PRELOAD_LIB`, else
/// next to this executable (a cargo build's target/<profile>/), else `<exe
/// dir>/../lib/lynxfs/` (an installation). `PreloadTarget::create` checks it is a file.
fn find_library() -> Result<PathBuf> {
    let found = match std::env::var_os(PRELOAD_LIB_VAR) {
        Some(p) => PathBuf::from(p),
        None => {
            let exe = std::env::current_exe().context("finding this program")?;
            let dir = exe.parent().unwrap_or(Path::new("/"));
            let candidates = [
                dir.join(PRELOAD_LIB),
                dir.join("../lib/lynxfs").join(PRELOAD_LIB),
            ];
            let found = candidates.iter().find(|c| c.is_file()).with_context(|| {
                format!(
                    "the preload target needs {PRELOAD_LIB} (looked in {} and {}; set \
                     {PRELOAD_LIB_VAR} to its path, or build it: `cargo build --release` \
                     of the workspace)",
                    candidates[0].display(),
                    candidates[1].display()
                )
            })?;
            found.clone()
        }
    };
    // ld.so takes LD_PRELOAD as a list separated by spaces and colons.
    let c = found
        .canonicalize()
        .with_context(|| format!("the preload library {}", found.display()))?;
    if c.as_os_str()
        .as_encoded_bytes()
        .iter()
        .any(|b| b" :".contains(b))
    {
        bail!(
            "{}: LD_PRELOAD cannot hold a path with a space or a colon",
            c.display()
        );
    }
    Ok(c)
}

/// The preload target (`spec`: `preload`, or `hybrid-preload` on a hybrid pool): this
/// program runs its suites under the library.
fn preload_target(spec: &str) -> Result<PreloadTarget> {
    let launch = PreloadLaunch {
        bench: std::env::current_exe().context("finding this program")?,
        library: find_library()?,
    };
    let target = if spec == HYBRID_PRELOAD_NAME {
        PreloadTarget::create_hybrid(launch)
    } else {
        PreloadTarget::create(launch)
    };
    target.with_context(|| format!("setting up the {spec} target"))
}

/// How a benchmark starts its worker processes: this program, `SUITE --worker`.
fn worker_command(suite: &str) -> Result<WorkerCommand> {
    Ok(WorkerCommand {
        program: std::env::current_exe().context("finding this program to start workers")?,
        args: vec![suite.into(), "--worker".into()],
        env: Vec::new(),
    })
}

/// The file count a suite uses when --files is not given.
fn default_files(suite: &str) -> usize {
    match suite {
        "smallfiles" => 1000,
        "personalities" => 2000,
        "ablation" => 1000,
        "recovery" => 1_000_000,
        "apps" => 80_000,
        "statall" => 50_000,
        "start" => 50,
        _ => 10_000,
    }
}

/// Runs the suite `args` names; `command` is the command line its report records.
fn run(args: BenchArgs, command: Option<String>) -> Result<()> {
    if args.worker {
        return worker_main(std::io::stdin().lock(), std::io::stdout().lock());
    }
    let suite = args.suite.as_str();
    if !SUITES.contains(&suite) {
        bail!(
            "unknown suite {suite:?}; the suites are {}",
            SUITES.join(", ")
        );
    }
    let processes = args.processes.unwrap_or(0);
    if args.processes.is_some() && suite != "mdtest" {
        bail!("--processes is an option of the mdtest suite");
    }
    if args.processes == Some(0) {
        bail!("--processes must be at least 1");
    }
    let targetless = TARGETLESS_SUITES.contains(&suite);
    let specs = if !args.targets.is_empty() {
        if targetless {
            bail!("suite {suite} makes its own LynxFS pool and takes no --target");
        }
        args.targets.clone()
    } else if targetless {
        Vec::new()
    } else if processes > 0 {
        vec!["lib".to_string()]
    } else if suite == "hybrid-fsync" {
        vec![
            lynxfs_bench::HYBRID_NAME.to_string(),
            lynxfs_bench::DISK_NAME.to_string(),
        ]
    } else if suite == "hybrid" {
        vec![
            lynxfs_bench::HYBRID_NAME.to_string(),
            lynxfs_bench::DISK_NAME.to_string(),
            "lib-1g".to_string(),
        ]
    } else if ["rename", "filetest"].contains(&suite) {
        ["lib-areas", "lib-noevolution", "lib-noareas", "tmpfs"]
            .map(String::from)
            .to_vec()
    } else {
        vec!["lib".to_string(), "tmpfs".to_string()]
    };
    let opts = Options {
        files: args.files.unwrap_or_else(|| default_files(suite)),
        file_size: args
            .file_mib
            .checked_mul(1 << 20)
            .context("--file-mib is too large")?,
        rounds: args.rounds,
        max_threads: args.max_threads,
        tree: args.tree.clone(),
        processes,
        goals: args.goals,
        worker: Some(worker_command(suite)?),
        progress: args.child_report.is_none(),
        library: if suite == "start" {
            Some(find_library()?)
        } else {
            None
        },
        command,
        mark: args.mark.clone(),
        ..Options::default()
    };
    let mut preload = None;
    let mut targets: Vec<Box<dyn Target>> = Vec::with_capacity(specs.len());
    for spec in &specs {
        if [PRELOAD_NAME, HYBRID_PRELOAD_NAME].contains(&spec.as_str()) {
            if preload.is_some() {
                bail!("one preload target at a time: {PRELOAD_NAME} or {HYBRID_PRELOAD_NAME}");
            }
            preload = Some(preload_target(spec)?);
            continue;
        }
        let t = open_target(spec).with_context(|| format!("target {spec}"))?;
        if t.name().contains("shm") && spec == "tmpfs" {
            eprintln!("note: tmpfs could not be mounted; {} stands in", t.name());
        }
        targets.push(t);
    }
    let report = run_suite_with_preload(
        suite,
        &targets,
        preload.as_ref(),
        &opts,
        args.out.as_deref(),
    )?;
    if let Some(path) = &args.child_report {
        report.write_json_to(path)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.first().map(String::as_str) == Some(lynxfs_bench::PAGE_COMMAND) {
        // `page` stands where the program's name would, so its own arguments follow.
        let args = PageArgs::parse_from(&raw);
        return match write_page(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lynxfs-bench page: {e:#}");
                ExitCode::from(8)
            }
        };
    }
    let args = BenchArgs::parse();
    // A table piped into `head` ends quietly, as other tools do, instead of panicking
    // on the closed pipe.
    // SAFETY: restores the default action of one signal; no handler is involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    match run(args, Some(lynxfs_bench::command_line(&raw))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lynxfs-bench: {e:#}");
            // What `lynxfs bench` exited with when it ran the suites itself.
            ExitCode::from(8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_test(args: BenchArgs) -> Result<()> {
        run(args, None)
    }

    fn parse(args: &[&str]) -> BenchArgs {
        BenchArgs::try_parse_from(std::iter::once("lynxfs-bench").chain(args.iter().copied()))
            .unwrap()
    }

    #[test]
    fn parses_repeated_targets_and_options() {
        let a = parse(&[
            "syscalls", "--target", "lib", "--target", "dir=/tmp", "--files", "5", "--out", "o",
        ]);
        assert_eq!(a.suite, "syscalls");
        assert_eq!(a.targets, ["lib", "dir=/tmp"]);
        assert_eq!(a.files, Some(5));
        assert_eq!(a.out, Some(PathBuf::from("o")));
        assert_eq!(a.rounds, 1);
    }

    #[test]
    fn processes_belong_to_mdtest_and_need_one() {
        let a = parse(&["mdtest", "--processes", "2"]);
        assert_eq!(a.processes, Some(2));
        assert!(!a.worker);
        let err = run_test(parse(&["syscalls", "--processes", "2"])).unwrap_err();
        assert!(err.to_string().contains("mdtest"), "{err:#}");
        let err = run_test(parse(&["mdtest", "--processes", "0"])).unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err:#}");
        let err = run_test(parse(&[
            "mdtest",
            "--processes",
            "2",
            "--target",
            "dir=/tmp",
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("lib"), "{err:#}");
    }

    #[test]
    fn refuses_unknown_suites_and_targets_on_targetless_suites() {
        let err = run_test(parse(&["nope"])).unwrap_err();
        assert!(err.to_string().contains("unknown suite"), "{err:#}");
        let err = run_test(parse(&["recovery", "--target", "tmpfs"])).unwrap_err();
        assert!(err.to_string().contains("takes no --target"), "{err:#}");
        let err = run_test(parse(&["ablation", "--target", "lib"])).unwrap_err();
        assert!(err.to_string().contains("takes no --target"), "{err:#}");
    }

    #[test]
    fn runs_a_small_suite_on_lib_and_a_directory_and_writes_json() {
        let dir = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let target = format!("dir={}", dir.path().display());
        let files = "20";
        let a = parse(&[
            "smallfiles",
            "--target",
            "lib",
            "--target",
            &target,
            "--files",
            files,
            "--out",
            out.path().to_str().unwrap(),
        ]);
        run_test(a).unwrap();
        let mut written: Vec<_> = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        written.sort();
        // The JSON and, where a font is installed, its figure.
        assert!(written[0].extension().unwrap() == "json", "{written:?}");
        assert!(
            written.len() <= 2
                && written
                    .iter()
                    .skip(1)
                    .all(|p| p.extension().unwrap() == "png")
        );
        let json = std::fs::read_to_string(&written[0]).unwrap();
        assert!(json.contains("\"lynxfs\"") && json.contains("\"smallfiles\""));
    }
}
