//! `lynxfs info --json` and `lynxfs fsck --json`: one JSON object on stdout with the
//! keys docs/JSON.md lists, for a pool at rest, a mounted one and a missing one.
//! Mounting needs root and /dev/fuse. Every command runs with a time limit, the test
//! under a watchdog.

#[allow(dead_code)] // not every helper of the shared module is used here
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use lynxfs_test_support::child::output_within;
use lynxfs_test_support::watchdog;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_lynxfs");
const LIMIT: Duration = Duration::from_secs(120);

fn lynxfs(args: &[&str], path: &Path) -> Output {
    output_within(Command::new(BIN).args(args).arg(path), LIMIT)
}

/// The command's stdout, which must be one JSON object and nothing else.
fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// The documented keys of `info --json`, each always present.
const INFO_KEYS: [&str; 12] = [
    "schema",
    "pool",
    "state",
    "mountpoint",
    "format",
    "space",
    "nodes",
    "index",
    "cachelets",
    "processes",
    "runtime_bytes",
    "daemon",
];

const FSCK_KEYS: [&str; 12] = [
    "schema",
    "pool",
    "repair",
    "in_use_copy",
    "exit_code",
    "result",
    "error",
    "recovery",
    "problems",
    "fixed",
    "left",
    "counts",
];

fn has_keys(v: &Value, keys: &[&str]) {
    for k in keys {
        assert!(v.get(k).is_some(), "no {k} in {v:#}");
    }
}

#[test]
fn info_and_fsck_print_their_documented_json() {
    let _w = watchdog(
        "info_and_fsck_print_their_documented_json",
        Duration::from_secs(300),
    );
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("pool");
    let o = lynxfs(&["mkfs", "--size", "64M", "--lanes", "2"], &pool);
    assert!(o.status.success());

    // At rest.
    let o = lynxfs(&["info", "--json"], &pool);
    assert!(o.status.success());
    let v = json(&o);
    has_keys(&v, &INFO_KEYS);
    assert_eq!(v["schema"], "lynxfs-info/1");
    assert_eq!(v["state"], "clean");
    assert_eq!(v["pool"], pool.to_str().unwrap());
    assert_eq!(v["format"]["size_bytes"], 64 << 20);
    assert_eq!(v["format"]["lanes"], 2);
    assert_eq!(v["format"]["data_mode"], "atomic");
    assert_eq!(v["format"]["backend"], "pmem");
    assert_eq!(v["space"]["inodes"]["used"], 1, "the root");
    let b = &v["space"]["blocks"];
    assert_eq!(
        b["used"].as_u64().unwrap() + b["free"].as_u64().unwrap(),
        b["total"].as_u64().unwrap()
    );
    assert!(v["index"].is_null() && v["daemon"].is_null());

    let o = lynxfs(&["fsck", "--json"], &pool);
    assert_eq!(o.status.code(), Some(0));
    let v = json(&o);
    has_keys(&v, &FSCK_KEYS);
    assert_eq!(v["schema"], "lynxfs-fsck/1");
    assert_eq!(v["result"], "clean");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["problems"], serde_json::json!([]));
    assert_eq!(v["counts"]["directories"], 1);

    // Mounted: the daemon's figures, and fsck looks at a copy.
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let o = output_within(
        Command::new(BIN)
            .args(["mount", "-o", "threads=1"])
            .arg(&pool)
            .arg(&mnt),
        LIMIT,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(mnt.join("f"), b"x").unwrap();
    let o = lynxfs(&["info", "--json"], &mnt);
    let info = json(&o);
    let o = lynxfs(&["fsck", "--json"], &pool);
    let check = json(&o);
    let o = lynxfs(&["umount"], &mnt);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    has_keys(&info, &INFO_KEYS);
    assert_eq!(info["state"], "mounted");
    assert_eq!(info["mountpoint"], mnt.to_str().unwrap());
    assert!(info["format"].is_null());
    assert!(info["daemon"]["rss_anon_bytes"].as_u64().unwrap() > 0);
    assert!(info["index"]["entries"].as_u64().unwrap() >= 1, "{info:#}");
    assert_eq!(info["processes"], 2, "the daemon and info");
    assert_eq!(check["in_use_copy"], true);
    assert_eq!(check["counts"]["files"], 1);

    // What cannot be checked is an error, in the object and the exit code.
    let missing = dir.path().join("missing");
    let o = lynxfs(&["fsck", "--json"], &missing);
    assert_eq!(o.status.code(), Some(8));
    let v = json(&o);
    assert_eq!(v["result"], "error");
    assert!(v["error"].as_str().unwrap().contains("no such pool"), "{v}");
    let o = lynxfs(&["info", "--json"], &missing);
    assert_eq!(o.status.code(), Some(8));
    assert!(o.stdout.is_empty(), "no object for a pool info cannot read");
}
