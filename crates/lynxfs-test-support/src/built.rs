//! For tests that run what `cargo test` does not build for them (cdylibs, other
//! packages' executables): a nested `cargo build` of those packages into the test's
//! own target directory and profile.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::child::run_bounded;

/// How long the nested build may take.
const BUILD_LIMIT: Duration = Duration::from_secs(600);

/// target/<profile>/: the test binary is in its deps/.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    deps.parent().expect("profile directory").to_path_buf()
}

/// Every package a nested build builds, whichever artifacts its caller needs. One set
/// for all callers, because cargo resolves features over the packages it is given:
/// `-p lynxfs-bench` turns on libc's `extra_traits` (through nix) and syn's `full`
/// (through clap's derive), and the cdylibs (`liblynxfs_preload.so`, `liblynxfs.so`)
/// have one file name whatever their features. Two sets would rebuild the preload
/// library and the C API each time a test binary asked for the other set (15-45 s a
/// time, several times in one `./lynx test`); one set is built once.
const PACKAGES: &[&str] = &[
    "lynxfs-cli",
    "lynxfs-preload",
    "lynxfs-capi",
    "lynxfs-bench",
    "lynxfs-test-support",
];

/// Builds [`PACKAGES`] with this test's profile into its target directory and checks
/// that each of `artifacts` (file names in target/<profile>/) exists; returns
/// target/<profile>/.
pub fn build(artifacts: &[&str]) -> Result<PathBuf, String> {
    let dir = target_dir();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(p) => p.to_string(),
        None => return Err(format!("no profile in {}", dir.display())),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--locked", "--profile", &profile]);
    for p in PACKAGES {
        cmd.args(["-p", p]);
    }
    cmd.env(
        "CARGO_TARGET_DIR",
        dir.parent().ok_or("no target directory")?,
    )
    .current_dir(env!("CARGO_MANIFEST_DIR"));
    let out = run_bounded(&mut cmd, "cargo build", BUILD_LIMIT);
    if !out.status.success() {
        return Err(format!(
            "cargo build -p {}: {}",
            PACKAGES.join(" -p "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    for a in artifacts {
        if !dir.join(a).exists() {
            return Err(format!("the build made no {}", dir.join(a).display()));
        }
    }
    Ok(dir)
}

/// The `lynxfs` executable and the preload library of the sources under test.
pub struct Preload {
    pub lynxfs: PathBuf,
    pub preload: PathBuf,
}

impl Preload {
    /// `lynxfs run --pool POOL --at AT --` with this build's preload library: the
    /// caller adds the program and its arguments.
    pub fn run(&self, pool: &Path, at: &Path) -> Command {
        let mut c = Command::new(&self.lynxfs);
        c.arg("run")
            .arg("--pool")
            .arg(pool)
            .arg("--at")
            .arg(at)
            .arg("--")
            .env("LYNXFS_PRELOAD_LIB", &self.preload);
        c
    }
}

/// [`Preload`], built once per test binary (a failed build fails every test that
/// asks, saying why).
pub fn preload() -> &'static Preload {
    static BUILT: std::sync::OnceLock<Result<Preload, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = build(&["lynxfs", "liblynxfs_preload.so"])?;
            Ok(Preload {
                lynxfs: dir.join("lynxfs"),
                preload: dir.join("liblynxfs_preload.so"),
            })
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The `lynxfs-history` recorder (this package's executable), built once per test
/// binary of another package.
pub fn history_recorder() -> &'static Path {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = build(&["lynxfs-history"])?;
            Ok(dir.join("lynxfs-history"))
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}
