//! Every suite at its default sizes on LynxFS (the library), tmpfs, a `/dev/shm`
//! directory and ext4 (when it can be mounted); `recovery` on its own pool. Ignored by default: it takes a while and needs
//! root. Run with
//! `cargo test --release -p lynxfs-bench --test full_run -- --ignored --nocapture`;
//! `LYNXFS_BENCH_OUT=DIR` also writes the JSON reports there.

use std::path::PathBuf;

use lynxfs_bench::{open_target, run_suite, Options, Target, TARGETLESS_SUITES};

fn targets() -> Vec<Box<dyn Target>> {
    let mut targets = vec![
        open_target("lib").unwrap(),
        open_target("tmpfs").unwrap(),
        open_target("shm").unwrap(),
    ];
    match open_target("ext4") {
        Ok(t) => targets.push(t),
        Err(e) => eprintln!("skipping ext4: {e:#}"),
    }
    targets
}

#[test]
#[ignore = "full-size run; prints the tables"]
fn full_run_on_kernel_file_systems() {
    let out = std::env::var_os("LYNXFS_BENCH_OUT").map(PathBuf::from);
    let targets = targets();
    let opts = Options::default();
    for suite in lynxfs_bench::SUITES {
        let on: &[Box<dyn Target>] = if TARGETLESS_SUITES.contains(suite) {
            &[]
        } else {
            &targets
        };
        // The ablated pool reloads a directory per lookup: keep its directory small.
        let opts = match *suite {
            "ablation" => Options {
                files: 1000,
                ..opts.clone()
            },
            _ => opts.clone(),
        };
        let report = run_suite(suite, on, &opts, out.as_deref()).unwrap();
        assert!(report
            .rows
            .iter()
            .all(|r| r.values.iter().all(|v| v.is_finite() && *v > 0.0)));
        println!();
    }
}
