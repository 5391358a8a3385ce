//! What a report was measured with besides the machine: the command line and the
//! source commit, so that a figure on the results page names both.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// Overrides the commit a report records: `ID`, or `ID-dirty` when the tree had
/// changes not committed (`scripts/bench-all.sh` sets it from the tree it built).
pub const COMMIT_VAR: &str = "LYNXFS_BENCH_COMMIT";

/// Written before the command a report records when a wrapper ran the benchmark
/// (`taskset -c 0`), so the page shows the whole command.
pub const LAUNCHER_VAR: &str = "LYNXFS_BENCH_LAUNCHER";

/// The suffix of [`COMMIT_VAR`] that marks a dirty tree.
const DIRTY: &str = "-dirty";

/// The source commit a report's binary was built from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    /// The abbreviated commit id (`git rev-parse --short HEAD`).
    pub id: String,
    /// Whether tracked files differed from that commit.
    pub dirty: bool,
}

impl Commit {
    /// [`COMMIT_VAR`] if set, else asks git about the source tree this program was
    /// built from (which may have moved on since the build: scripts/bench-all.sh
    /// builds first, then sets the variable); `None` where neither answers (an
    /// installed binary).
    pub fn detect() -> Option<Self> {
        match std::env::var(COMMIT_VAR) {
            Ok(v) if !v.is_empty() => Some(Self::parse(&v)),
            _ => Self::of_tree(Path::new(env!("CARGO_MANIFEST_DIR"))),
        }
    }

    /// `ID` or `ID-dirty`.
    pub fn parse(s: &str) -> Self {
        match s.strip_suffix(DIRTY) {
            Some(id) => Self {
                id: id.to_string(),
                dirty: true,
            },
            None => Self {
                id: s.to_string(),
                dirty: false,
            },
        }
    }

    /// HEAD of the git tree at `dir`, and whether its tracked files differ from it.
    fn of_tree(dir: &Path) -> Option<Self> {
        let id = git(dir, &["rev-parse", "--short", "HEAD"])?;
        let status = git(dir, &["status", "--porcelain", "--untracked-files=no"])?;
        Some(Self {
            id,
            dirty: !status.is_empty(),
        })
    }
}

impl std::fmt::Display for Commit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.id)?;
        if self.dirty {
            write!(f, " (with changes not committed)")?;
        }
        Ok(())
    }
}

/// `git -C dir ARGS`'s trimmed output, `None` if git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The command line a report records: `lynxfs bench ARGS` whatever the program was
/// called, without `--out DIR` (a scratch directory, nothing to reproduce), after
/// [`LAUNCHER_VAR`] if set.
pub fn command_line(args: &[String]) -> String {
    let mut words: Vec<String> = std::env::var(LAUNCHER_VAR)
        .ok()
        .filter(|l| !l.is_empty())
        .into_iter()
        .collect();
    words.push("lynxfs bench".to_string());
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        if a == "--out" {
            rest.next();
        } else if !a.starts_with("--out=") {
            words.push(a.clone());
        }
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_dirty_commit() {
        assert_eq!(
            Commit::parse("abc1234-dirty"),
            Commit {
                id: "abc1234".into(),
                dirty: true
            }
        );
        assert!(!Commit::parse("abc1234").dirty);
    }

    #[test]
    fn this_source_tree_has_a_commit() {
        // Built from a git checkout (cargo test runs in one): the id is hex.
        let c = Commit::of_tree(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert!(
            c.id.len() >= 7 && c.id.chars().all(|ch| ch.is_ascii_hexdigit()),
            "{c:?}"
        );
    }

    #[test]
    fn the_command_line_drops_the_output_directory() {
        let args: Vec<String> = ["syscalls", "--out", "/tmp/x", "--rounds", "3", "--out=/y"]
            .map(String::from)
            .to_vec();
        let line = command_line(&args);
        assert!(line.ends_with("lynxfs bench syscalls --rounds 3"), "{line}");
    }
}
