//! What the shipped `lynxfs` binary links: none of the benchmarks' libraries (the
//! plotting and archive crates), which live in the separate `lynxfs-bench` program.

use std::process::Command;
use std::time::Duration;

use lynxfs_test_support::child::output_within;

/// Crates only the benchmark harness may link.
const BENCH_ONLY: [&str; 4] = ["plotters", "tar", "flate2", "lynxfs-bench"];

#[test]
fn the_lynxfs_binary_links_no_benchmark_library() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = output_within(
        Command::new(cargo)
            .args(["tree", "--locked", "--offline", "-p", "lynxfs-cli"])
            .args(["-e", "normal", "--prefix", "none", "--format", "{p}"])
            .current_dir(env!("CARGO_MANIFEST_DIR")),
        Duration::from_secs(120),
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // The tree is the real one: the binary's own crates are in it.
    for needed in ["lynxfs-cli", "lynxfs", "lynxfs-fuse", "clap"] {
        assert!(names.contains(&needed), "{needed} not in the tree:\n{tree}");
    }
    for banned in BENCH_ONLY {
        assert!(!names.contains(&banned), "lynxfs links {banned}:\n{tree}");
    }
}
