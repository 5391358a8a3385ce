//! Programs that, run preloaded, try to take the pool's memory away from the engine
//! (tests/hostile.c): every C library call that can place, move, remove or change a
//! mapping, and the same as raw system calls, over each engine mapping; and a parent
//! that maps shared memory and execs a child that maps it again at the same address
//! with `MAP_FIXED` (filebench's workers do), with address randomization on and off.
//! Also a signal handler that calls into the pool while the thread it interrupted is
//! inside the library, and forks while two other threads work in the pool. After each
//! case no process is attached: `lynxfs fsck` must call the pool clean and every file
//! made before must read back intact.
//!
//! And stray stores into every engine mapping, from threads made before and after
//! the pool was attached: each faults (protection keys), and the engine's key cannot
//! be freed, opened or lent to the program's memory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_test_support::built::preload as built;
use lynxfs_test_support::{child, watchdog};

/// How long one program may run.
const LIMIT: Duration = Duration::from_secs(60);
/// How long a whole test may run (the builds included).
const TEST_LIMIT: Duration = Duration::from_secs(400);
/// Files made before the attacks, checked after each.
const BEFORE: &str = "40";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// hostile.c, built once per test binary.
fn hostile() -> &'static Path {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let out = std::env::temp_dir().join(format!("lynxfs-hostile-{}", std::process::id()));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile.c");
        let o = child::output_within(
            Command::new("cc")
                .args(["-Wall", "-Wextra", "-Werror", "-O1", "-o"])
                .arg(&out)
                .arg(&src),
            LIMIT,
        );
        assert!(o.status.success(), "cc hostile.c: {}", text(&o.stderr));
        out
    })
}

/// A fresh pool serving a fresh directory.
struct Setup {
    pool: PathBuf,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let pool = PathBuf::from(format!(
            "/dev/shm/lynxfs-hostile-{name}-{}.pool",
            std::process::id()
        ));
        let mut o = MkfsOptions::new(128 << 20);
        o.lanes = 2;
        o.force = true;
        Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs");
        let s = Setup {
            pool,
            dir: tempfile::tempdir().expect("the pool's directory"),
        };
        s.run_ok(&["files", &s.d(), BEFORE], false);
        s
    }

    fn d(&self) -> String {
        self.dir.path().to_string_lossy().into_owned()
    }

    /// hostile.c with `args`, preloaded (under `setarch -R` when `no_aslr`).
    fn run(&self, args: &[&str], no_aslr: bool) -> Output {
        let b = built();
        let mut c = if no_aslr {
            let mut c = Command::new("setarch");
            c.arg("-R").arg(&b.lynxfs);
            c
        } else {
            Command::new(&b.lynxfs)
        };
        c.arg("run")
            .arg("--pool")
            .arg(&self.pool)
            .arg("--at")
            .arg(self.dir.path())
            .arg("--")
            .arg(hostile())
            .args(args)
            .env("LYNXFS_PRELOAD_LIB", &b.preload);
        child::run_bounded(&mut c, "hostile", LIMIT)
    }

    fn run_ok(&self, args: &[&str], no_aslr: bool) -> Output {
        let o = self.run(args, no_aslr);
        assert!(
            o.status.success(),
            "hostile {args:?} ({}):\n{}{}",
            o.status,
            text(&o.stdout),
            text(&o.stderr)
        );
        o
    }

    /// No process attached: fsck says clean and the first files read back.
    fn intact(&self) {
        let mut c = Command::new(&built().lynxfs);
        c.arg("fsck").arg(&self.pool);
        let o = child::run_bounded(&mut c, "fsck", LIMIT);
        assert!(
            o.status.success(),
            "fsck ({}): {}{}",
            o.status,
            text(&o.stdout),
            text(&o.stderr)
        );
        self.run_ok(&["check", &self.d(), BEFORE, "before"], false);
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pool);
    }
}

#[test]
fn no_mapping_call_reaches_an_engine_mapping() {
    let _w = watchdog::watchdog("hostile mapping calls", TEST_LIMIT);
    let s = Setup::new("calls");
    let pool = s.pool.to_string_lossy().into_owned();
    let o = s.run_ok(&["attack", &pool, &s.d()], false);
    let out = text(&o.stdout);
    let refused = out.lines().filter(|l| l.ends_with(" refused")).count();
    // 19 attempts at two places in each of at least two mappings.
    assert!(refused >= 2 * 2 * 19, "{refused} refusals:\n{out}");
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("would change the pool {pool}")) && err.contains("(EPERM)"),
        "no line on stderr names the pool:\n{err}"
    );
    s.intact();
}

#[test]
fn stray_stores_into_the_pool_fault_and_hurt_nothing() {
    if !lynxfs::pmem::keys::supported() {
        eprintln!(
            "skipped: this CPU or kernel has no memory protection keys (pku), \
             so a stray store into the pool cannot fault"
        );
        return;
    }
    let _w = watchdog::watchdog("hostile stray stores", TEST_LIMIT);
    let s = Setup::new("scribble");
    let pool = s.pool.to_string_lossy().into_owned();
    let o = s.run_ok(&["scribble", &pool, &s.d()], false);
    let out = text(&o.stdout);
    let faulted = out.lines().filter(|l| l.contains("(SEGV_PKUERR)")).count();
    // Three stores into each of at least two mappings, from three threads.
    assert!(faulted >= 3 * 2 * 3, "{faulted} faults:\n{out}");
    assert_eq!(
        out.lines().filter(|l| l.ends_with(" refused")).count(),
        4,
        "the engine's key freed, set or lent:\n{out}"
    );
    s.intact();
}

#[test]
fn an_execd_child_maps_its_parents_memory_at_the_same_address() {
    let _w = watchdog::watchdog("hostile exec", TEST_LIMIT);
    for no_aslr in [true, false] {
        let s = Setup::new(if no_aslr { "exec-norandom" } else { "exec" });
        let shm = format!("/dev/shm/lynxfs-hostile-shm-{}", std::process::id());
        // Larger than the pool, so that with the kernel's placement the child's pool
        // would land inside the parent's old range.
        let o = s.run(&["parent", &s.d(), &shm, "0x20000000"], no_aslr);
        let _ = std::fs::remove_file(&shm);
        assert!(
            o.status.success(),
            "exec case (ASLR {}) ({}):\n{}{}",
            if no_aslr { "off" } else { "on" },
            o.status,
            text(&o.stdout),
            text(&o.stderr)
        );
        s.intact();
        s.run_ok(&["check", &s.d(), "100", "child"], false);
    }
}

#[test]
fn a_signal_handler_calling_into_the_pool_mid_call_hurts_nothing() {
    let _w = watchdog::watchdog("hostile signals", TEST_LIMIT);
    let s = Setup::new("signals");
    s.run_ok(&["signals", &s.d()], false);
    s.intact();
}

/// Forks while two threads work in the pool and a third waits for a lock: every
/// child makes and removes a file and exits (half through `exit`, which detaches),
/// none hangs (each has a 20 s alarm; the fork gate, `lynxfs::runtime::fork_gate`).
#[test]
fn forks_beside_threads_inside_the_library_never_hang_a_child() {
    let _w = watchdog::watchdog("hostile forks", TEST_LIMIT);
    let s = Setup::new("forks");
    s.run_ok(&["forks", &s.d(), "200"], false);
    s.intact();
}

/// Children that exec while two of their threads are inside pool calls: the exec
/// waits for the calls, the new program reads the files made before, and the pool
/// is clean afterwards.
#[test]
fn an_exec_beside_threads_inside_the_library_leaves_the_pool_clean() {
    let _w = watchdog::watchdog("hostile execs", TEST_LIMIT);
    let s = Setup::new("execs");
    s.run_ok(&["execs", &s.d(), "40"], false);
    s.intact();
}
