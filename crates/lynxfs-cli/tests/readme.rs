//! The README's shell commands, run as a reader would run them: every command of its
//! ```sh and ```bash blocks, in order, on small pools (each `--size` made [`SMALL`],
//! each `--device-size` [`SMALL_DEVICE`]), with the paths it names under /dev/shm, /var/tmp
//! and /mnt moved into a scratch directory in /dev/shm, `lynxfs` and the preload
//! library of this build, and the mount(8) helpers linked to it, all in a private mount
//! namespace, so a failure leaves no mount behind. What cannot run in a test is in
//! [`SKIPPED`], with the reason; a README command neither run nor skipped fails the
//! test, and so does a skip that matches no README command (so the list stays true).
//! Needs root and /dev/fuse. Every command runs with a time limit, the test under a
//! watchdog.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lynxfs_test_support::child::output_within;
use lynxfs_test_support::scratch::{in_private_mount_namespace, install_helpers};
use lynxfs_test_support::{built, watchdog};

const BIN: &str = env!("CARGO_BIN_EXE_lynxfs");

/// The README's commands that are not run, each with why (and, where there is one,
/// the test that does what it does).
const SKIPPED: &[(&str, &str)] = &[
    (
        "./lynx demo",
        "installs packages, builds in release mode and benchmarks for a minute",
    ),
    ("./lynx test", "runs every test, this one among them"),
    (
        "./lynx install",
        "installs into /usr/local; tests/install.rs installs into a temporary prefix",
    ),
    (
        "./lynx uninstall",
        "removes an install from /usr/local; tests/install.rs uninstalls its own",
    ),
    (
        "./lynx package",
        "a release build of a .deb; tests/install.rs builds one",
    ),
    (
        "sudo dpkg -i target/lynxfs_*.deb",
        "installs into the machine; tests/install.rs installs the package into a temporary root",
    ),
    (
        "sudo dpkg -r lynxfs",
        "removes from the machine; tests/install.rs removes the package from its temporary root",
    ),
    (
        "man lynxfs",
        "the man pages come with ./lynx install; tests/install.rs reads each with man -l",
    ),
    (
        "man mount.lynxfs",
        "the man pages come with ./lynx install; tests/install.rs reads each with man -l",
    ),
    (
        "cc prog.c $(pkg-config --cflags --libs lynxfs)",
        "needs the installed lynxfs.pc and a program; tests/install.rs builds the C example so",
    ),
];

/// What every pool size in the README becomes.
const SMALL: &str = "64M";
/// What every data device size becomes: the device holds an export area as large as
/// the pool, and data blocks besides.
const SMALL_DEVICE: &str = "128M";

/// The directories the README's paths are under, and what each becomes in the scratch
/// directory.
const MOVED: &[(&str, &str)] = &[
    ("/dev/shm/", "shm/"),
    ("/var/tmp/", "disk/"),
    ("/mnt/", "mnt/"),
];

/// A README command that takes longer has hung.
const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// One shell command of the README and the line it is on.
#[derive(Debug)]
struct ReadmeCommand {
    line: usize,
    text: String,
}

#[test]
fn the_readmes_commands_run_on_a_small_pool() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("README.md");
    let commands = readme_commands(&readme);
    check_skip_list(&commands);
    let to_run: Vec<ReadmeCommand> = commands.into_iter().filter(|c| !skipped(c)).collect();
    assert!(!to_run.is_empty(), "the README has no command to run");
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    // Built before the watchdog starts: the first build can take minutes.
    let preload = built::preload().preload.clone();
    let _w = watchdog(
        "the_readmes_commands_run_on_a_small_pool",
        Duration::from_secs(300),
    );
    in_private_mount_namespace(move || run_all(&to_run, &preload));
}

/// Every command of the README's ```sh and ```bash blocks, comments left out, split at
/// each `;` and in order.
fn readme_commands(readme: &str) -> Vec<ReadmeCommand> {
    let mut commands = Vec::new();
    let mut in_shell = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in readme.lines().enumerate() {
        if let Some(fence) = raw.trim_start().strip_prefix("```") {
            in_shell = !in_shell && matches!(fence.trim(), "sh" | "bash");
            continue;
        }
        if !in_shell {
            continue;
        }
        let (line, text) = match pending.take() {
            Some((line, before)) => (line, before + " " + raw.trim()),
            None => (i + 1, raw.trim().to_string()),
        };
        // A line ending in a backslash goes on on the next.
        if let Some(continued) = text.strip_suffix('\\') {
            pending = Some((line, continued.trim_end().to_string()));
            continue;
        }
        commands.extend(
            split_commands(strip_comment(&text))
                .into_iter()
                .map(|text| ReadmeCommand {
                    line,
                    text: text.to_string(),
                }),
        );
    }
    assert!(!in_shell, "README.md: a shell block is never closed");
    commands
}

/// Where each character of `text` is outside quotes and `$( )`, as the shell reads it.
fn top_level(text: &str) -> impl Iterator<Item = (usize, char, bool)> + '_ {
    let (mut quote, mut depth) = (None, 0u32);
    text.char_indices().map(move |(i, c)| {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth = depth.saturating_sub(1),
            (None, _) => {}
        }
        (i, c, quote.is_none() && depth == 0)
    })
}

/// `text` without its comment (a `#` that begins a word, outside quotes).
fn strip_comment(text: &str) -> &str {
    let mut before = ' ';
    for (i, c, outside) in top_level(text) {
        if c == '#' && outside && before.is_whitespace() {
            return text[..i].trim_end();
        }
        before = c;
    }
    text
}

/// The commands of one line, split at each `;` outside quotes and `$( )`.
fn split_commands(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, c, outside) in top_level(text) {
        if c == ';' && outside {
            parts.push(text[start..i].trim());
            start = i + 1;
        }
    }
    parts.push(text[start..].trim());
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

fn skipped(c: &ReadmeCommand) -> bool {
    SKIPPED.iter().any(|(skip, _)| *skip == c.text)
}

/// Each skip matches a README command, so the list says what the README holds.
fn check_skip_list(commands: &[ReadmeCommand]) {
    let stale = stale_skips(SKIPPED, commands);
    assert!(
        stale.is_empty(),
        "skipped, but no longer in the README (remove them from SKIPPED): {stale:?}"
    );
}

/// The skips of `skips` that match none of `commands`.
fn stale_skips<'a>(skips: &[(&'a str, &str)], commands: &[ReadmeCommand]) -> Vec<&'a str> {
    skips
        .iter()
        .map(|(skip, _)| *skip)
        .filter(|skip| !commands.iter().any(|c| c.text == *skip))
        .collect()
}

/// The scratch directory the README's commands run in, as its reader's machine: the
/// directories its paths are under, `lynxfs` on the PATH, and a tarball to unpack.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        for (_, moved) in MOVED {
            std::fs::create_dir(dir.path().join(moved)).unwrap();
        }
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        symlink(BIN, dir.path().join("bin/lynxfs")).unwrap();
        let s = Scratch { dir };
        s.make_tarball();
        s
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `linux.tar`, which the preload's example unpacks: a few files and a directory.
    fn make_tarball(&self) {
        let tree = self.path().join("tree");
        std::fs::create_dir_all(tree.join("kernel")).unwrap();
        std::fs::write(tree.join("Makefile"), b"all:\n").unwrap();
        std::fs::write(tree.join("kernel/fork.c"), b"int fork;\n").unwrap();
        let o = output_within(
            Command::new("tar")
                .args(["cf", "linux.tar", "-C", "tree", "."])
                .current_dir(self.path()),
            COMMAND_LIMIT,
        );
        assert!(o.status.success(), "tar cf: {}", text(&o.stderr));
    }

    /// `command` with its paths moved here and its sizes made small.
    fn rewrite(&self, command: &str) -> String {
        // Through a marker no README holds, so a moved path is never moved again.
        let mut out = command.to_string();
        for (from, to) in MOVED {
            out = out.replace(from, &format!("\u{1}{to}"));
        }
        let out = out.replace('\u{1}', &format!("{}/", self.path().display()));
        small_sizes(&out)
    }

    /// Runs one README command with `sh -c`, here, with this build's `lynxfs` and
    /// preload library.
    fn run(&self, c: &ReadmeCommand, preload: &Path) {
        let rewritten = self.rewrite(&c.text);
        let path = format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            self.path().join("bin").display()
        );
        let o = output_within(
            Command::new("sh")
                .args(["-c", &rewritten])
                .current_dir(self.path())
                .env("PATH", path)
                .env("LYNXFS_PRELOAD_LIB", preload),
            COMMAND_LIMIT,
        );
        assert!(
            o.status.success(),
            "README.md line {}: `{}` (run as `{rewritten}`) failed with {}:\n{}{}",
            c.line,
            c.text,
            o.status,
            text(&o.stdout),
            text(&o.stderr)
        );
    }

    /// What the commands wrote under a mount point went into a pool (through the mount
    /// or the preload), so the directories themselves are still empty.
    fn check_mount_points_empty(&self) {
        for dir in std::fs::read_dir(self.path().join("mnt")).unwrap() {
            let dir = dir.unwrap().path();
            let names: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(
                names.is_empty(),
                "{} holds {names:?}: a README command wrote beside its pool",
                dir.display()
            );
        }
    }

    /// The mount points under this directory in this thread's mount namespace,
    /// innermost last.
    fn mounts(&self) -> Vec<PathBuf> {
        let info = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap();
        info.lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(PathBuf::from)
            .filter(|mp| mp.starts_with(self.path()))
            .collect()
    }
}

impl Drop for Scratch {
    /// Detaches whatever a failed command left mounted here, so its daemon ends (the
    /// namespace hides it from the machine, but lives as long as the daemon does).
    fn drop(&mut self) {
        for mp in self.mounts().iter().rev() {
            let _ = output_within(Command::new("umount").arg("-l").arg(mp), COMMAND_LIMIT);
        }
    }
}

/// `command` with the value after each `--size` made [`SMALL`], after each
/// `--device-size` [`SMALL_DEVICE`].
fn small_sizes(command: &str) -> String {
    let mut words: Vec<&str> = command.split(' ').collect();
    for i in 1..words.len() {
        match words[i - 1] {
            "--size" => words[i] = SMALL,
            "--device-size" => words[i] = SMALL_DEVICE,
            _ => {}
        }
    }
    words.join(" ")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs the commands in order in a fresh scratch directory (in the caller's private
/// mount namespace), then checks they left nothing mounted.
fn run_all(commands: &[ReadmeCommand], preload: &Path) {
    let scratch = Scratch::new();
    install_helpers(&scratch.path().join("sbin"), Path::new(BIN));
    for c in commands {
        scratch.run(c, preload);
    }
    let left = scratch.mounts();
    assert!(
        left.is_empty(),
        "the README's commands left mounts behind: {left:?}"
    );
    scratch.check_mount_points_empty();
}

#[test]
fn commands_are_split_at_semicolons_and_comments_left_out() {
    let readme = "text\n```sh\na x; b # c; d\n\"#q\" 'e;f' $(g; h)\nlong \\\n  line\n```\n\
                  ```rust\nnot a command\n```\n";
    let got: Vec<(usize, String)> = readme_commands(readme)
        .into_iter()
        .map(|c| (c.line, c.text))
        .collect();
    let want = [
        (3, "a x"),
        (3, "b"),
        (4, "\"#q\" 'e;f' $(g; h)"),
        (5, "long line"),
    ];
    assert_eq!(
        got,
        want.map(|(l, t)| (l, t.to_string())),
        "the commands of a README"
    );
}

#[test]
fn paths_move_into_the_scratch_directory_and_sizes_shrink() {
    let s = Scratch {
        dir: tempfile::tempdir_in("/dev/shm").unwrap(),
    };
    let root = s.path().display();
    assert_eq!(
        s.rewrite("lynxfs mkfs --size 4G --device-size 1T --data-device /var/tmp/d /dev/shm/p"),
        format!("lynxfs mkfs --size {SMALL} --device-size {SMALL_DEVICE} --data-device {root}/disk/d {root}/shm/p")
    );
    assert_eq!(
        s.rewrite("mkdir -p /mnt/x"),
        format!("mkdir -p {root}/mnt/x")
    );
}

#[test]
fn a_skip_that_matches_no_command_is_stale() {
    let commands = readme_commands("```sh\n./lynx demo # the demo\nlynxfs info x\n```\n");
    let skips = [("./lynx demo", "why"), ("./lynx demo --force", "why")];
    assert_eq!(stale_skips(&skips, &commands), ["./lynx demo --force"]);
}
