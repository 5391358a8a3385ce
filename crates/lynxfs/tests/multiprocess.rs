//! Many processes on one pool (issue 12): child processes (this test binary in child
//! mode, `child`) attach one pool file and work on it at once, some of them killed
//! with SIGKILL at random times or while holding a given lock (a test-only stop point,
//! `lynxfs::runtime::testing`). Checked: each process's results against its own
//! reference model, the final state against the union of every acknowledged
//! operation, one winner per O_EXCL name, atomic renames, files unlinked while open
//! elsewhere, survivors finishing within a time bound, and fsck clean after every run.
//!
//! Every child runs with a runtime directory of its test's own (a tempdir in /dev/shm)
//! and dies with the test thread that spawned it (PR_SET_PDEATHSIG); every wait for a
//! child is bounded (the test fails, and the children are killed); a watchdog aborts
//! the whole binary if a test outlives `TEST_LIMIT`. The parent attaches the pool only
//! when no child is attached (setup and the final checks).
//!
//! Run: `cargo test --profile ci -p lynxfs --test multiprocess`.
mod common;

#[path = "model/reference.rs"]
mod reference;
#[path = "model/target.rs"]
mod target;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use lynxfs::pmem::PmemBackend;
use lynxfs::runtime::attach::RUNTIME_DIR_ENV;
use lynxfs::runtime::testing::{STOPPED, STOP_ENV};
use lynxfs::{Access, Cred, Fs, MkfsOptions, Pool};

use lynxfs_test_support::history::{check, parse, History};
use lynxfs_test_support::history_run::{run_threads, setup as history_setup};
use reference::Model;
use target::{apply, diff, own_ops, pattern, snapshot, FsRef, LFs, Rng};
pub use target::{Kind, St, Target, R};

/// Child mode: what to do ("model", "excl", "shuffle", "agent").
const ROLE_ENV: &str = "LYNXFS_MP_ROLE";
const POOL_ENV: &str = "LYNXFS_MP_POOL";
/// Child mode: the process's number and its random seed.
const ID_ENV: &str = "LYNXFS_MP_ID";
const SEED_ENV: &str = "LYNXFS_MP_SEED";
/// Child mode: how many operations ("model", "shuffle") or names ("excl").
const COUNT_ENV: &str = "LYNXFS_MP_COUNT";

/// How long a test may run before the watchdog aborts the binary (children die with it).
const TEST_LIMIT: Duration = Duration::from_secs(120);
/// How long the parent waits for any one line from a child.
const LINE_LIMIT: Duration = Duration::from_secs(30);
/// How long survivors may take, after a kill, to finish what the dead process blocked.
const SURVIVOR_LIMIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------
// Parent side: pools, children, watchdog.

fn watchdog(test: &'static str) -> lynxfs_test_support::Watchdog {
    lynxfs_test_support::watchdog(test, TEST_LIMIT)
}

/// A pool file in a fresh directory in /dev/shm, which is also its runtime directory.
struct Setup {
    dir: tempfile::TempDir,
    pool: PathBuf,
}

fn setup(lanes: u32) -> Setup {
    let dir = tempfile::Builder::new()
        .prefix("lynxfs-mp")
        .tempdir_in("/dev/shm")
        .unwrap();
    let pool = dir.path().join("mp.pool");
    let mut o = MkfsOptions::new(64 << 20);
    o.lanes = lanes;
    Pool::mkfs(&pool, &o, PmemBackend::default()).unwrap();
    Setup { dir, pool }
}

impl Setup {
    /// Attach from the parent (no child attached), run `f`, detach.
    fn with_fs<T>(&self, f: impl FnOnce(&LFs) -> T) -> T {
        let fs = Fs::open(&self.pool).unwrap();
        let r = f(&fs);
        fs.close().unwrap();
        r
    }

    /// After every child has exited: open (recovering if the last one was killed),
    /// check with fsck, then run `f` on the pool.
    fn check<T>(&self, f: impl FnOnce(&LFs) -> T) -> T {
        let p = Pool::open(&self.pool, Access::ReadWrite, PmemBackend::default()).unwrap();
        if let Some(r) = &p.recovery {
            assert!(r.problems.is_empty(), "recovery: {:?}", r.problems);
        }
        let rep = lynxfs::fsck::check(&p);
        assert!(rep.is_clean(), "fsck: {:?}", rep.problems);
        let fs = Fs::new(p);
        let r = f(&fs);
        fs.close().unwrap();
        drop(fs);
        // Closed cleanly: the next open trusts the saved state, which fsck still accepts.
        let p = Pool::open(&self.pool, Access::ReadWrite, PmemBackend::default()).unwrap();
        assert!(p.was_clean, "the last close marks the pool clean");
        let rep = lynxfs::fsck::check(&p);
        assert!(
            rep.is_clean(),
            "fsck after a clean reopen: {:?}",
            rep.problems
        );
        r
    }

    fn spawn(&self, role: &str, id: usize, env: &[(&str, String)]) -> Kid {
        Kid::spawn(&self.pool, self.dir.path(), role, id, env)
    }
}

/// A line from a child: its stdout's `@...@` lines, its stop point, or its end.
enum Line {
    Said(String),
    Ended,
}

/// A child process; killed (and reaped) when dropped.
struct Kid {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Line>,
}

impl Kid {
    fn spawn(pool: &Path, rt: &Path, role: &str, id: usize, env: &[(&str, String)]) -> Kid {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .env(POOL_ENV, pool)
            .env(ID_ENV, id.to_string())
            .env(RUNTIME_DIR_ENV, rt)
            .env_remove(STOP_ENV)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let (tx, rx) = mpsc::channel();
        let out = BufReader::new(child.stdout.take().unwrap());
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(|l| l.ok()) {
                if let Some(p) = line.find('@') {
                    let body = line[p + 1..].trim_end_matches('@').to_string();
                    let _ = tx2.send(Line::Said(body));
                }
            }
            let _ = tx2.send(Line::Ended);
        });
        let err = BufReader::new(child.stderr.take().unwrap());
        let name = format!("{role}#{id}");
        let who = name.clone();
        std::thread::spawn(move || {
            for line in err.lines().map_while(|l| l.ok()) {
                if let Some(point) = line.strip_prefix(STOPPED) {
                    let _ = tx.send(Line::Said(format!("stopped {point}")));
                } else {
                    eprintln!("[{who}] {line}");
                }
            }
        });
        let stdin = child.stdin.take();
        Kid {
            name,
            child,
            stdin,
            rx,
        }
    }

    /// The next thing the child says, if it says it within `limit`.
    fn next(&mut self, limit: Duration) -> Option<String> {
        match self.rx.recv_timeout(limit) {
            Ok(Line::Said(s)) => Some(s),
            Ok(Line::Ended) => panic!("{}: ended unexpectedly", self.name),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!("{}: output closed", self.name),
        }
    }

    /// The next line starting with `tag`, within `LINE_LIMIT`; the words after it.
    fn expect(&mut self, tag: &str) -> Vec<String> {
        let end = Instant::now() + LINE_LIMIT;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let Some(s) = self.next(left) else {
                panic!("{}: said no {tag:?} within {LINE_LIMIT:?}", self.name);
            };
            let mut w = s.split(' ').map(str::to_string);
            if w.next().as_deref() == Some(tag) {
                return w.collect();
            }
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Send one agent command and return its reply: `Ok(words)` or `Err(errno)`.
    fn call(&mut self, cmd: &str) -> Result<Vec<String>, i32> {
        self.send(cmd);
        self.reply(cmd)
    }

    fn reply(&mut self, cmd: &str) -> Result<Vec<String>, i32> {
        let end = Instant::now() + LINE_LIMIT;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let s = self
                .next(left)
                .unwrap_or_else(|| panic!("{}: no reply to {cmd:?}", self.name));
            let mut w = s.split(' ').map(str::to_string);
            match w.next().as_deref() {
                Some("ok") => return Ok(w.collect()),
                Some("err") => return Err(w.next().unwrap().parse().unwrap()),
                _ => {}
            }
        }
    }

    /// An agent command that must succeed.
    fn ok(&mut self, cmd: &str) -> Vec<String> {
        self.call(cmd)
            .unwrap_or_else(|e| panic!("{}: {cmd:?} failed: errno {e}", self.name))
    }

    fn kill(&mut self) {
        assert_eq!(
            // SAFETY: kill(2) on our child, not yet reaped (only `finish` and Drop wait
            // for it), so its pid names it.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) },
            0
        );
    }

    /// Close stdin (a child waiting for commands detaches and exits), and reap it
    /// within `LINE_LIMIT`; it must exit successfully.
    fn finish(mut self) {
        drop(self.stdin.take());
        let end = Instant::now() + LINE_LIMIT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "{}: exited with {st:?}", self.name);
                return;
            }
            assert!(Instant::now() < end, "{}: did not exit", self.name);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Reap a child that was killed.
    fn reap(mut self) {
        let st = self.child.wait().unwrap();
        assert!(!st.success(), "{}: killed, yet {st:?}", self.name);
    }
}

impl Drop for Kid {
    /// A test that fails midway leaves no child behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------
// Child side.

fn env_num(name: &str) -> u64 {
    std::env::var(name).unwrap().parse().unwrap()
}

fn say(s: &str) {
    let mut o = std::io::stdout().lock();
    writeln!(o, "@{s}@").unwrap();
    o.flush().unwrap();
}

/// The next line from the parent; `None` once it closed our stdin.
fn heard() -> Option<String> {
    let mut l = String::new();
    match std::io::stdin().read_line(&mut l) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(l.trim_end().to_string()),
    }
}

/// Child mode: attach the pool, play the role, detach.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return; // not a child
    };
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets this process's death signal.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let pool = PathBuf::from(std::env::var(POOL_ENV).unwrap());
    let fs = Fs::open(&pool).unwrap();
    say("ready");
    match role.as_str() {
        "model" => model_child(&fs),
        "excl" => excl_child(&fs),
        "shuffle" => shuffle_child(&fs),
        "agent" => agent_child(&fs),
        "cfg-writer" => cfg_writer_child(&fs),
        "cfg-reader" => cfg_reader_child(&fs),
        "history" => history_child(&fs),
        r => panic!("unknown role {r}"),
    }
    fs.close().unwrap();
}

/// The names process `id` works on in the model test.
fn names_of(id: u64) -> Vec<String> {
    ["a", "b", "c"]
        .iter()
        .map(|n| format!("p{id}{n}"))
        .collect()
}

/// Random operations on this process's own names in /d, each result checked against
/// this process's reference model, each acknowledged ("ack I") once it returned.
fn model_child(fs: &LFs) {
    let (id, seed, n) = (env_num(ID_ENV), env_num(SEED_ENV), env_num(COUNT_ENV));
    let ops = own_ops(seed, &names_of(id), n as usize);
    let mut m = Model::new();
    m.mkdir("/d", 0o755).unwrap();
    heard().expect("go");
    for (i, op) in ops.iter().enumerate() {
        let want = apply(op, &mut m);
        let got = apply(op, &mut FsRef(fs));
        assert_eq!(want, got, "process {id}, step {i}: {op:?}");
        ack(i as u64);
    }
    say("done");
    heard();
}

/// O_EXCL creates of /s/x0.. in order; says "won I" for each name it created.
fn excl_child(fs: &LFs) {
    let (id, n) = (env_num(ID_ENV), env_num(COUNT_ENV));
    let s = fs.session(Cred::root());
    heard().expect("go");
    for i in 0..n {
        match s.open(
            format!("/s/x{i}"),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o644,
        ) {
            Ok(fd) => {
                fs.pwrite(fd, format!("p{id}").as_bytes(), 0).unwrap();
                fs.close_fd(fd).unwrap();
                say(&format!("won {i}"));
            }
            Err(err) => assert_eq!(err.errno(), libc::EEXIST, "/s/x{i}"),
        }
    }
    say("done");
    heard();
}

/// Files in /r under names n0..n15: how many there are and their contents.
const SLOTS: u64 = 16;
const FILES: u64 = 8;

/// Renames among /r/n0..n15 (exchanges and no-replace moves) and whole-file reads,
/// which must always see one of the files' contents; "ack I" after each.
fn shuffle_child(fs: &LFs) {
    let (seed, n) = (env_num(SEED_ENV), env_num(COUNT_ENV));
    let s = fs.session(Cred::root());
    let mut r = Rng(seed | 1);
    heard().expect("go");
    for i in 0..n {
        let a = format!("/r/n{}", r.below(SLOTS));
        let b = format!("/r/n{}", r.below(SLOTS));
        let res = match r.below(3) {
            0 => s.rename(&a, &b, libc::RENAME_EXCHANGE),
            1 => s.rename(&a, &b, libc::RENAME_NOREPLACE),
            _ => read_whole(fs, &a).map(|d| {
                let body = String::from_utf8(d).unwrap();
                assert!(body.starts_with("file") && body.len() > 4, "{a}: {body:?}");
            }),
        };
        if let Err(err) = res {
            assert!(
                [libc::ENOENT, libc::EEXIST].contains(&err.errno()),
                "step {i}: {a} {b}: {err}"
            );
        }
        ack(i);
    }
    say("done");
    heard();
}

/// How long the `cfg` writer and readers run (issue 42).
const CFG_RUN: Duration = Duration::from_millis(2000);

/// Replace `/cfg` by `write /tmp; rename /tmp /cfg` for `CFG_RUN`, each file holding
/// its number; says how many.
fn cfg_writer_child(fs: &LFs) {
    let s = fs.session(Cred::root());
    heard().expect("go");
    let until = Instant::now() + CFG_RUN;
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let fd = s
            .open(
                "/tmp",
                libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY,
                0o644,
            )
            .unwrap();
        assert_eq!(fs.pwrite(fd, &n.to_le_bytes(), 0).unwrap(), 8);
        fs.close_fd(fd).unwrap();
        s.rename("/tmp", "/cfg", 0).unwrap();
    }
    say(&format!("renamed {n}"));
    heard();
}

/// How long each process records its history, and its threads' calls at most.
const HISTORY_RUN: Duration = Duration::from_millis(1500);
const HISTORY_CALLS: usize = 40_000;
/// Child mode: the file a "history" child writes its calls to.
const HISTORY_ENV: &str = "LYNXFS_MP_HISTORY";

/// Two threads of calls on the names in /h (`history_run`), numbered from 10 times
/// the process's number; their lines written to the file named by `HISTORY_ENV`.
fn history_child(fs: &LFs) {
    let id = env_num(ID_ENV) as u32;
    let out = std::env::var(HISTORY_ENV).unwrap();
    let front = common::history_front::Lib {
        fs,
        dir: "/h".into(),
    };
    heard().expect("go");
    let lines = run_threads(&front, 10 * id, 2, HISTORY_RUN, HISTORY_CALLS);
    std::fs::write(out, lines.join("\n")).unwrap();
    say("done");
    heard();
}

/// Open, read and stat `/cfg` for `CFG_RUN`; says the calls made, the ENOENTs, and
/// the reads that saw a short file or an older one after a newer one.
fn cfg_reader_child(fs: &LFs) {
    let s = fs.session(Cred::root());
    heard().expect("go");
    let until = Instant::now() + CFG_RUN;
    let (mut calls, mut enoent, mut wrong, mut last) = (0u64, 0u64, 0u64, 0u64);
    let mut saw = |r: lynxfs::Result<()>| {
        calls += 1;
        match r {
            Ok(()) => {}
            Err(e) if e.errno() == libc::ENOENT => enoent += 1,
            Err(e) => panic!("reading /cfg: {e}"),
        }
    };
    while Instant::now() < until {
        saw(read_whole(fs, "/cfg").map(|d| {
            let Ok(bytes) = <[u8; 8]>::try_from(d.as_slice()) else {
                wrong += 1;
                return;
            };
            let g = u64::from_le_bytes(bytes);
            wrong += (g < last) as u64;
            last = g;
        }));
        saw(s.stat("/cfg").map(drop));
    }
    say(&format!("tally {calls} {enoent} {wrong}"));
    heard();
}

fn read_whole(fs: &LFs, p: &str) -> lynxfs::Result<Vec<u8>> {
    let s = fs.session(Cred::root());
    let fd = s.open(p, libc::O_RDONLY, 0)?;
    let size = fs.fstat(fd)?.size as usize;
    let mut buf = vec![0u8; size];
    let n = fs.pread(fd, &mut buf, 0);
    fs.close_fd(fd)?;
    buf.truncate(n?);
    Ok(buf)
}

/// A checksum that tells contents apart.
fn sum(d: &[u8]) -> u64 {
    d.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Commands from stdin, one per line, each answered "ok ..." or "err ERRNO".
fn agent_child(fs: &LFs) {
    let s = fs.session(Cred::root());
    let wr = libc::O_CREAT | libc::O_WRONLY;
    while let Some(line) = heard() {
        let w: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> u64 { w[i].parse().unwrap() };
        let r: lynxfs::Result<String> = match w[0] {
            "create" => s
                .open(w[1], wr, 0o644)
                .and_then(|fd| fs.close_fd(fd))
                .map(|_| String::new()),
            "excl" => s
                .open(w[1], wr | libc::O_EXCL, 0o644)
                .and_then(|fd| fs.close_fd(fd))
                .map(|_| String::new()),
            "mkdir" => s.mkdir(w[1], 0o755).map(|_| String::new()),
            "unlink" => s.unlink(w[1]).map(|_| String::new()),
            "rmdir" => s.rmdir(w[1]).map(|_| String::new()),
            "rename" => s.rename(w[1], w[2], 0).map(|_| String::new()),
            "write" => s.open(w[1], libc::O_WRONLY, 0).and_then(|fd| {
                let n = fs.pwrite(fd, &pattern(num(3) as usize, num(4) as u8), num(2));
                fs.close_fd(fd)?;
                n.map(|n| n.to_string())
            }),
            "chmod" => s
                .chmod(w[1], u32::from_str_radix(w[2], 8).unwrap())
                .map(|_| String::new()),
            "touch" => s
                .utimens(w[1], Some(lynxfs::TimeSet::Now), Some(lynxfs::TimeSet::Now))
                .map(|_| String::new()),
            "stat" => s.stat(w[1]).map(|st| format!("{} {}", st.size, st.ino)),
            "readdir" => s.readdir(w[1]).map(|l| (l.len() - 2).to_string()),
            "readfile" => read_whole(fs, w[1]).map(|d| format!("{} {}", d.len(), sum(&d))),
            "open" => s.open(w[1], libc::O_RDONLY, 0).map(|fd| fd.to_string()),
            "read" => {
                let mut buf = vec![0u8; num(2) as usize];
                fs.pread(num(1), &mut buf, 0)
                    .map(|n| format!("{n} {}", sum(&buf[..n])))
            }
            "close" => fs.close_fd(num(1)).map(|_| String::new()),
            "statfs" => Ok(fs.session(Cred::root()).statfs().files_free.to_string()),
            // Keep busy with operations that wait on nothing, for `ms` milliseconds.
            "spin" => {
                let until = std::time::Instant::now() + Duration::from_millis(num(1));
                while std::time::Instant::now() < until {
                    let _ = s.stat("/u");
                }
                Ok(String::new())
            }
            c => panic!("unknown command {c}"),
        };
        match r {
            Ok(v) => say(&format!("ok {v}")),
            Err(err) => say(&format!("err {}", err.errno())),
        }
    }
}

/// How many operations a worker child runs before it waits for the parent's "more":
/// a victim is killed at most this far past its kill point.
const WINDOW: u64 = 8;

/// A worker child's acknowledgement of operation `i`; every `WINDOW` it waits for the
/// parent (who may kill it instead).
fn ack(i: u64) {
    say(&format!("ack {i}"));
    if (i + 1).is_multiple_of(WINDOW) {
        heard().expect("more");
    }
}

/// Run worker children ("ack", "done") to the end: each gets "go", then "more" after
/// every `WINDOW` acknowledgements, and "bye" once done; child `k` is killed once it
/// acknowledged `kill_at[k]` operations. Returns what each acknowledged.
fn drive(kids: Vec<Kid>, kill_at: &[Option<usize>]) -> Vec<usize> {
    let mut kids: Vec<Option<Kid>> = kids.into_iter().map(Some).collect();
    for k in kids.iter_mut().flatten() {
        k.expect("ready");
    }
    for k in kids.iter_mut().flatten() {
        k.send("go");
    }
    let mut acked = vec![0usize; kids.len()];
    let end = Instant::now() + Duration::from_secs(60);
    while kids.iter().any(Option::is_some) {
        assert!(
            Instant::now() < end,
            "the workers did not finish: acked {acked:?}"
        );
        let mut idle = true;
        for k in 0..kids.len() {
            let Some(kid) = kids[k].as_mut() else {
                continue;
            };
            let Some(said) = kid.next(Duration::ZERO) else {
                continue;
            };
            idle = false;
            if said == "done" {
                kid.send("bye");
                kids[k].take().unwrap().finish();
                continue;
            }
            if !said.starts_with("ack ") {
                continue;
            }
            acked[k] += 1;
            if kill_at[k] == Some(acked[k]) {
                kid.kill();
                // What it said before dying counts: read until its output ends.
                while let Ok(Line::Said(s)) = kid.rx.recv_timeout(LINE_LIMIT) {
                    acked[k] += s.starts_with("ack ") as usize;
                }
                kids[k].take().unwrap().reap();
            } else if (acked[k] as u64).is_multiple_of(WINDOW) {
                kid.send("more");
            }
        }
        if idle {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    acked
}

// ---------------------------------------------------------------------------------
// The multi-process model test.

/// `procs` children run `ops` random operations each on their own names in /d; the
/// first `kills` of them are killed at random points. Each checks its own results;
/// the final pool must hold every acknowledged operation of every process (a killed
/// one's operation in flight may or may not be there).
fn model_run(procs: usize, kills: usize, ops: usize, seed: u64) {
    let st = setup(2);
    st.with_fs(|fs| fs.session(Cred::root()).mkdir("/d", 0o755).unwrap());
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let seeds: Vec<u64> = (0..procs).map(|k| seed * 100 + k as u64).collect();
    let kids: Vec<Kid> = (0..procs)
        .map(|k| {
            let env = [
                (SEED_ENV, seeds[k].to_string()),
                (COUNT_ENV, ops.to_string()),
            ];
            st.spawn("model", k, &env)
        })
        .collect();
    // A victim dies after this many of its acknowledgements.
    let kill_at: Vec<Option<usize>> = (0..procs)
        .map(|k| (k < kills).then(|| 1 + rng.below(ops as u64 - 1) as usize))
        .collect();
    let acked = drive(kids, &kill_at);
    // Disjoint names: the processes' operations commute, so one model replaying each
    // process's acknowledged operations in turn is the union of their states.
    let plans: Vec<_> = (0..procs)
        .map(|k| own_ops(seeds[k], &names_of(k as u64), ops))
        .collect();
    let in_flight: Vec<usize> = (0..procs)
        .filter(|&k| kill_at[k].is_some() && acked[k] < ops)
        .collect();
    st.check(|fs| {
        let got = snapshot(&mut FsRef(fs)).unwrap();
        let mut last = String::new();
        for mask in 0..1u32 << in_flight.len() {
            let mut m = Model::new();
            m.mkdir("/d", 0o755).unwrap();
            for k in 0..procs {
                let with = in_flight
                    .iter()
                    .position(|&v| v == k)
                    .is_some_and(|b| mask & 1 << b != 0);
                for op in &plans[k][..acked[k] + with as usize] {
                    let _ = apply(op, &mut m);
                }
            }
            let want = snapshot(&mut m).unwrap();
            if want == got {
                println!(
                    "model run: {procs} processes, kill points {kill_at:?}, acknowledged \
                     {acked:?}, in flight {in_flight:?} applied by mask {mask:b}"
                );
                return;
            }
            last = diff(&want, &got);
        }
        panic!("no outcome of the operations in flight matches; acknowledged {acked:?}:\n{last}");
    });
}

#[test]
fn processes_on_disjoint_names_match_their_models() {
    let _dog = watchdog("processes_on_disjoint_names_match_their_models");
    model_run(3, 0, 400, 11);
}

#[test]
fn killed_processes_keep_every_acknowledged_operation() {
    let _dog = watchdog("killed_processes_keep_every_acknowledged_operation");
    for round in 0..3 {
        model_run(4, 2, 300, 21 + round);
    }
}

// ---------------------------------------------------------------------------------
// Shared names.

#[test]
fn exclusive_creates_of_shared_names_have_one_winner_each() {
    let _dog = watchdog("exclusive_creates_of_shared_names_have_one_winner_each");
    const NAMES: u64 = 300;
    let st = setup(2);
    st.with_fs(|fs| fs.session(Cred::root()).mkdir("/s", 0o755).unwrap());
    let mut kids: Vec<Kid> = (0..3)
        .map(|k| st.spawn("excl", k, &[(COUNT_ENV, NAMES.to_string())]))
        .collect();
    for k in &mut kids {
        k.expect("ready");
    }
    for k in &mut kids {
        k.send("go");
    }
    let mut winner: BTreeMap<u64, usize> = BTreeMap::new();
    for (id, k) in kids.iter_mut().enumerate() {
        loop {
            let s = k.next(LINE_LIMIT).expect("an excl child went quiet");
            if s == "done" {
                break;
            }
            if let Some(i) = s.strip_prefix("won ") {
                let i: u64 = i.parse().unwrap();
                if let Some(other) = winner.insert(i, id) {
                    panic!("/s/x{i} created by both process {other} and {id}");
                }
            }
        }
        k.send("bye");
    }
    for k in kids {
        k.finish();
    }
    assert_eq!(winner.len() as u64, NAMES, "a name nobody created");
    st.check(|fs| {
        for (i, id) in &winner {
            let d = read_whole(fs, &format!("/s/x{i}")).unwrap();
            assert_eq!(d, format!("p{id}").as_bytes(), "/s/x{i}");
        }
        let n = fs.session(Cred::root()).readdir("/s").unwrap().len() - 2;
        assert_eq!(n as u64, NAMES);
    });
}

/// Renames among shared names, with one process killed midway: every file is there
/// exactly once at the end, under one name.
#[test]
fn renames_of_shared_names_are_atomic() {
    let _dog = watchdog("renames_of_shared_names_are_atomic");
    let st = setup(2);
    st.with_fs(|fs| {
        let s = fs.session(Cred::root());
        s.mkdir("/r", 0o755).unwrap();
        for i in 0..FILES {
            let fd = s.create(format!("/r/n{i}"), 0o644).unwrap();
            fs.pwrite(fd, format!("file{i}").as_bytes(), 0).unwrap();
            fs.close_fd(fd).unwrap();
        }
    });
    let kids: Vec<Kid> = (0..3)
        .map(|k| {
            let env = [(SEED_ENV, (k + 5).to_string()), (COUNT_ENV, "3000".into())];
            st.spawn("shuffle", k, &env)
        })
        .collect();
    // The victim dies after 500 acknowledged steps, the others go on.
    let acked = drive(kids, &[Some(500), None, None]);
    assert!(acked[0] < 3000 && acked[1..] == [3000, 3000], "{acked:?}");
    st.check(|fs| {
        let s = fs.session(Cred::root());
        let mut seen = BTreeSet::new();
        for d in s.readdir("/r").unwrap() {
            if d.name == b"." || d.name == b".." {
                continue;
            }
            let p = format!("/r/{}", String::from_utf8(d.name).unwrap());
            let body = String::from_utf8(read_whole(fs, &p).unwrap()).unwrap();
            assert!(seen.insert(body.clone()), "{body} under two names");
            assert_eq!(s.stat(&p).unwrap().nlink, 1, "{p}");
        }
        let want: BTreeSet<String> = (0..FILES).map(|i| format!("file{i}")).collect();
        assert_eq!(seen, want);
    });
}

/// A name replaced by rename in one process is never missing in others (issue 42):
/// one process replaces `/cfg` in a loop while two others open, read and stat it.
/// It failed now and then (1 ENOENT in 977,076 calls): a reader found the replaced
/// file freed and then the name leading to the same number, given meanwhile to the
/// file that replaced it, and took that for an unlink (`api::held::tests`).
#[test]
fn a_name_replaced_in_one_process_is_never_missing_in_others() {
    let _dog = watchdog("a_name_replaced_in_one_process_is_never_missing_in_others");
    let st = setup(2);
    st.with_fs(|fs| {
        let s = fs.session(Cred::root());
        let fd = s.create("/cfg", 0o644).unwrap();
        fs.pwrite(fd, &0u64.to_le_bytes(), 0).unwrap();
        fs.close_fd(fd).unwrap();
    });
    let mut kids = vec![st.spawn("cfg-writer", 0, &[])];
    kids.extend((1..3).map(|k| st.spawn("cfg-reader", k, &[])));
    for k in &mut kids {
        k.expect("ready");
    }
    for k in &mut kids {
        k.send("go");
    }
    let renamed: u64 = kids[0].expect("renamed")[0].parse().unwrap();
    let mut tallies = Vec::new();
    for k in &mut kids[1..] {
        let t: Vec<u64> = k
            .expect("tally")
            .iter()
            .map(|w| w.parse().unwrap())
            .collect();
        tallies.push(t);
    }
    for k in kids {
        k.finish();
    }
    eprintln!("{renamed} renames; readers' calls, ENOENT, wrong: {tallies:?}");
    assert!(renamed > 100, "only {renamed} renames");
    for t in &tallies {
        assert!(t[0] > 1000, "a reader made only {} calls", t[0]);
        assert_eq!(
            (t[1], t[2]),
            (0, 0),
            "ENOENT and wrong reads of /cfg: {tallies:?}"
        );
    }
    st.check(|fs| assert!(fs.session(Cred::root()).stat("/cfg").is_ok()));
}

/// Concurrent histories through the library across processes (issue 42): three
/// processes of two threads each rename, replace, exchange, remove, open and stat
/// a few names (`lynxfs_test_support::history_run`); the merged history, every call
/// timed on `CLOCK_MONOTONIC`, must be linearizable per name.
/// `LYNXFS_HISTORY_DUMP=FILE` writes the history to FILE, to study a failure.
#[test]
fn histories_across_processes_are_linearizable() {
    let _dog = watchdog("histories_across_processes_are_linearizable");
    let st = setup(2);
    let init = st.with_fs(|fs| {
        fs.session(Cred::root()).mkdir("/h", 0o755).unwrap();
        history_setup(&common::history_front::Lib {
            fs,
            dir: "/h".into(),
        })
        .unwrap()
    });
    let files: Vec<PathBuf> = (0..3)
        .map(|k| st.dir.path().join(format!("history-{k}")))
        .collect();
    let mut kids: Vec<Kid> = (0..3)
        .map(|k| {
            let out = files[k].to_string_lossy().into_owned();
            st.spawn("history", k, &[(HISTORY_ENV, out)])
        })
        .collect();
    for k in &mut kids {
        k.expect("ready");
    }
    for k in &mut kids {
        k.send("go");
    }
    for k in &mut kids {
        k.expect("done");
    }
    for k in kids {
        k.finish();
    }
    let mut text = init.join("\n");
    text.push('\n');
    for f in &files {
        text += &std::fs::read_to_string(f).unwrap();
        text.push('\n');
    }
    if let Ok(dump) = std::env::var("LYNXFS_HISTORY_DUMP") {
        std::fs::write(dump, &text).unwrap();
    }
    let mut h = History::default();
    parse(&text, &mut h).unwrap();
    let checked = check(&h).unwrap_or_else(|v| panic!("{v}"));
    eprintln!("{checked:?}");
    assert!(checked.calls > 10_000, "only {} calls", checked.calls);
    st.check(|_| ());
}

impl Kid {
    /// Kill the child and reap it.
    fn kill_and_reap(mut self) {
        self.kill();
        self.reap();
    }
}

/// Free inodes, as statfs counts them.
fn files_free(fs: &LFs) -> u64 {
    fs.session(Cred::root()).statfs().files_free
}

fn make_file(fs: &LFs, p: &str, len: usize, seed: u8) {
    let s = fs.session(Cred::root());
    let fd = s.create(p, 0o644).unwrap();
    fs.pwrite(fd, &pattern(len, seed), 0).unwrap();
    fs.close_fd(fd).unwrap();
}

#[test]
fn a_file_unlinked_while_open_elsewhere_lives_until_the_last_close() {
    let _dog = watchdog("a_file_unlinked_while_open_elsewhere_lives_until_the_last_close");
    let st = setup(2);
    let want = format!("10000 {}", sum(&pattern(10_000, 3)));
    let free = st.with_fs(|fs| {
        fs.session(Cred::root()).mkdir("/u", 0o755).unwrap();
        let free = files_free(fs);
        make_file(fs, "/u/f", 10_000, 3);
        free
    });
    let mut k: Vec<Kid> = (0..3).map(|i| st.spawn("agent", i, &[])).collect();
    for kid in &mut k {
        kid.expect("ready");
    }
    let fa = k[0].ok("open /u/f")[0].clone();
    let fb = k[1].ok("open /u/f")[0].clone();
    k[2].ok("unlink /u/f");
    assert_eq!(k[2].call("stat /u/f"), Err(libc::ENOENT));
    assert_eq!(k[0].ok(&format!("read {fa} 20000")).join(" "), want);
    k[0].ok(&format!("close {fa}"));
    assert_eq!(
        k[1].ok(&format!("read {fb} 20000")).join(" "),
        want,
        "after A's close"
    );
    // The name is free for a new file while the old one is still open.
    k[2].ok("create /u/f");
    assert_eq!(k[1].ok(&format!("read {fb} 20000")).join(" "), want);
    k[1].ok(&format!("close {fb}"));
    k[2].ok("unlink /u/f");
    for kid in k {
        kid.finish();
    }
    st.check(|fs| assert_eq!(files_free(fs), free, "the unlinked file was freed"));
}

#[test]
fn a_process_killed_idle_is_repaired_without_anyone_waiting_on_it() {
    let _dog = watchdog("a_process_killed_idle_is_repaired_without_anyone_waiting_on_it");
    let st = setup(2);
    let free = st.with_fs(|fs| {
        fs.session(Cred::root()).mkdir("/u", 0o755).unwrap();
        let free = files_free(fs);
        make_file(fs, "/u/f", 10_000, 3);
        free
    });
    let mut k: Vec<Kid> = (0..2).map(|i| st.spawn("agent", i, &[])).collect();
    for kid in &mut k {
        kid.expect("ready");
    }
    // A holds the file open, B removes its name: only A's open keeps it.
    k[0].ok("open /u/f");
    k[1].ok("unlink /u/f");
    let orphaned: u64 = k[1].ok("statfs")[0].parse().unwrap();
    assert_eq!(orphaned + 1, free, "the open file still holds its inode");
    // A dies holding no lock: nobody will ever wait on it. B's own operations look
    // for dead processes now and then, and the repair frees the orphan.
    k.remove(0).kill_and_reap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        k[0].ok("spin 50");
        let now: u64 = k[0].ok("statfs")[0].parse().unwrap();
        if now == free {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the dead process's open file was never released ({now} free, {free} expected)"
        );
    }
    for kid in k {
        kid.finish();
    }
    st.check(|fs| assert_eq!(files_free(fs), free, "the unlinked file was freed"));
}

// ---------------------------------------------------------------------------------
// A victim killed holding each kind of lock.

/// The tree every lock scenario starts from.
fn lock_tree(fs: &LFs) {
    let s = fs.session(Cred::root());
    for d in ["/g", "/h", "/L", "/e", "/c", "/g/d0", "/g/d1"] {
        s.mkdir(d, 0o755).unwrap();
    }
    for i in 0..4 {
        make_file(fs, &format!("/g/g{i}"), 100, i);
    }
    make_file(fs, "/h/h0", 10, 1);
    for i in 0..10 {
        make_file(fs, &format!("/L/l{i}"), 10, i);
    }
    make_file(fs, "/f", 20_000, 5);
}

/// What a bystander does before and after the kill: nothing the victim holds.
const BYSTANDER: [&str; 6] = [
    "create /c/x",
    "write /c/x 0 5000 3",
    "readfile /c/x",
    "mkdir /c/s",
    "rmdir /c/s",
    "unlink /c/x",
];

/// Victim A runs `victim` with stop point `point` armed and stops there. Survivor B
/// runs `series` (the entry marked "!" must wait for what A holds: it is sent before
/// the kill and must not be answered until then); bystander C works elsewhere before
/// and after. Every command must succeed within `SURVIVOR_LIMIT` of the kill; the
/// pool must be fsck-clean afterwards. Returns the survivors' time after the kill.
fn killed_holding(point: &str, victim: &str, series: &[&str]) -> Duration {
    let st = setup(2);
    st.with_fs(lock_tree);
    let mut b = st.spawn("agent", 1, &[]);
    let mut c = st.spawn("agent", 2, &[]);
    b.expect("ready");
    c.expect("ready");
    // The root and /g are loaded before A starts, so that A's first pass through its
    // stop point is in its own operation (not in loading the directories on its way).
    b.ok("stat /g/g0");
    let mut a = st.spawn("agent", 0, &[(STOP_ENV, point.to_string())]);
    a.expect("ready");
    a.send(victim);
    assert_eq!(
        a.expect("stopped"),
        vec![point.to_string()],
        "A's stop point"
    );
    for cmd in BYSTANDER {
        c.ok(cmd);
    }
    let blocked = series.iter().position(|s| s.starts_with('!')).unwrap();
    for cmd in &series[..blocked] {
        b.ok(cmd);
    }
    let cmd = &series[blocked][1..];
    b.send(cmd);
    assert!(
        b.next(Duration::from_millis(300)).is_none(),
        "{point}: {cmd:?} did not wait for the stopped process"
    );
    let killed = Instant::now();
    a.kill_and_reap();
    b.reply(cmd)
        .unwrap_or_else(|e| panic!("{point}: {cmd:?} failed after the kill: errno {e}"));
    for cmd in &series[blocked + 1..] {
        b.ok(cmd);
    }
    for cmd in BYSTANDER {
        c.ok(cmd);
    }
    let took = killed.elapsed();
    assert!(
        took < SURVIVOR_LIMIT,
        "{point}: the survivors took {took:?} after the kill"
    );
    println!("{point}: survivors done {took:?} after the kill");
    b.finish();
    c.finish();
    st.check(|_| {});
    took
}

#[test]
fn killed_holding_the_data_write_lock() {
    let _dog = watchdog("killed_holding_the_data_write_lock");
    let series = ["!write /f 100 100 8", "readfile /f", "write /f 0 30000 9"];
    killed_holding("write.data_lock", "write /f 0 5000 7", &series);
}

/// Readers never wait for a write's copy (issue 15): A stops between copying its new
/// bytes and its commit, holding the file's data lock for update; B, through a handle
/// it already has, reads the range A does not write and the one it does (the old
/// bytes) at once, while B's own write waits for A and goes on once A is killed.
#[test]
fn readers_go_on_while_a_writer_is_stopped_before_its_commit() {
    let _dog = watchdog("readers_go_on_while_a_writer_is_stopped_before_its_commit");
    let st = setup(2);
    st.with_fs(lock_tree);
    let mut b = st.spawn("agent", 1, &[]);
    b.expect("ready");
    let fd = b.ok("open /f")[0].clone();
    let old = b.ok(&format!("read {fd} 20000"));
    let point = "write.before_commit";
    let mut a = st.spawn("agent", 0, &[(STOP_ENV, point.to_string())]);
    a.expect("ready");
    a.send("write /f 8192 5000 7");
    assert_eq!(a.expect("stopped"), vec![point.to_string()]);
    let started = Instant::now();
    assert_eq!(
        b.ok(&format!("read {fd} 8192")),
        b.ok(&format!("read {fd} 8192"))
    );
    assert_eq!(
        b.ok(&format!("read {fd} 20000")),
        old,
        "A's uncommitted bytes"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the reads waited"
    );
    let cmd = "write /f 100 100 8";
    b.send(cmd);
    assert!(
        b.next(Duration::from_millis(300)).is_none(),
        "{cmd:?} did not wait for the stopped writer"
    );
    a.kill_and_reap();
    b.reply(cmd).expect("the write after the kill");
}

#[test]
fn killed_holding_an_inode_lock() {
    let _dog = watchdog("killed_holding_an_inode_lock");
    let series = ["!touch /f", "chmod /f 644", "stat /f"];
    killed_holding("setattr.inode_lock", "chmod /f 600", &series);
}

#[test]
fn killed_holding_a_directory_gate_shared() {
    let _dog = watchdog("killed_holding_a_directory_gate_shared");
    // Creates share the gate with the victim; only the rmdir needs it alone.
    let series = ["create /h/b", "unlink /h/b", "unlink /h/h0", "!rmdir /h"];
    killed_holding("create.gate_shared", "create /h/a", &series);
}

#[test]
fn killed_holding_a_directory_gate_alone() {
    let _dog = watchdog("killed_holding_a_directory_gate_alone");
    let series = ["!create /e/x", "unlink /e/x", "rmdir /e"];
    killed_holding("rmdir.gate_alone", "rmdir /e", &series);
}

#[test]
fn killed_holding_the_rename_lock() {
    let _dog = watchdog("killed_holding_the_rename_lock");
    // Only renames moving a directory to another parent take the rename lock.
    let series = [
        "rename /g/g1 /g/r1",
        "!rename /g/d1 /h/d1",
        "rename /h/d1 /g/d1",
        "stat /g/g0",
    ];
    killed_holding("rename.lock", "rename /g/d0 /h/d0", &series);
}

#[test]
fn killed_holding_an_index_stripe_lock() {
    let _dog = watchdog("killed_holding_an_index_stripe_lock");
    let series = ["!excl /g/same", "stat /g/same", "unlink /g/same"];
    killed_holding("index.stripe", "excl /g/same", &series);
}

#[test]
fn killed_holding_a_directory_load_lock() {
    let _dog = watchdog("killed_holding_a_directory_load_lock");
    let series = ["!stat /L/l1", "readdir /L", "create /L/b", "stat /L/l0"];
    killed_holding("dir.load", "stat /L/l0", &series);
}

#[test]
fn killed_between_a_creates_first_write_and_its_commit() {
    let _dog = watchdog("killed_between_a_creates_first_write_and_its_commit");
    let series = ["!create /g/mid", "stat /g/mid", "unlink /g/mid"];
    killed_holding("create.before_commit", "create /g/mid", &series);
}

#[test]
fn killed_between_a_renames_first_write_and_its_commit() {
    let _dog = watchdog("killed_between_a_renames_first_write_and_its_commit");
    // B's rename of the name A has claimed waits (planning again) until the repair.
    let series = ["rename /g/g3 /g/r3", "!rename /g/g2 /g/r2", "stat /g/r2"];
    killed_holding("rename.before_commit", "rename /g/g2 /g/r2", &series);
}

/// B has a file open that A unlinked; A is killed holding the rename lock and C's
/// rename makes the repair happen. B still reads the file; once B closes it the
/// inode is free.
#[test]
fn open_files_of_the_living_survive_a_repair() {
    let _dog = watchdog("open_files_of_the_living_survive_a_repair");
    let st = setup(2);
    let want = format!("9000 {}", sum(&pattern(9000, 4)));
    let free = st.with_fs(|fs| {
        let s = fs.session(Cred::root());
        s.mkdir("/o", 0o755).unwrap();
        make_file(fs, "/o/y", 10, 1);
        make_file(fs, "/o/z", 10, 2);
        s.mkdir("/o/dy", 0o755).unwrap();
        s.mkdir("/o/dz", 0o755).unwrap();
        let free = files_free(fs);
        make_file(fs, "/o/f", 9000, 4);
        free
    });
    let mut a = st.spawn("agent", 0, &[(STOP_ENV, "rename.lock".to_string())]);
    let mut b = st.spawn("agent", 1, &[]);
    let mut c = st.spawn("agent", 2, &[]);
    for k in [&mut a, &mut b, &mut c] {
        k.expect("ready");
    }
    let fd = b.ok("open /o/f")[0].clone();
    a.ok("unlink /o/f");
    // Directories moving to another parent: those take the rename lock.
    a.send("rename /o/dz /dz");
    assert_eq!(a.expect("stopped"), vec!["rename.lock".to_string()]);
    c.send("rename /o/dy /dy");
    assert!(
        c.next(Duration::from_millis(300)).is_none(),
        "C did not wait"
    );
    a.kill_and_reap();
    c.reply("rename").expect("C's rename after the repair");
    assert_eq!(b.ok(&format!("read {fd} 20000")).join(" "), want);
    assert_eq!(c.call("stat /o/f"), Err(libc::ENOENT));
    b.ok(&format!("close {fd}"));
    b.finish();
    c.finish();
    st.check(|fs| {
        assert_eq!(files_free(fs), free, "the unlinked file was freed");
        let s = fs.session(Cred::root());
        assert!(s.stat("/dy").is_ok() && s.stat("/o/dz").is_ok());
    });
}

/// Full-path areas (issue 27) are each process's own: what one process learnt must
/// follow what another renames, removes and makes again, also while a third is
/// stopped inside a directory removal (its change counted as running) and after it is
/// killed there (the repair ends the count).
#[test]
fn one_processs_areas_follow_another_processs_renames_and_removals() {
    let _dog = watchdog("one_processs_areas_follow_another_processs_renames_and_removals");
    let st = setup(2);
    st.with_fs(|fs| {
        let s = fs.session(Cred::root());
        for d in ["/p", "/p/q", "/p/q/r", "/p/q/r/s", "/p/e"] {
            s.mkdir(d, 0o755).unwrap();
        }
        make_file(fs, "/p/q/r/s/f", 10, 1);
    });
    let mut a = st.spawn("agent", 0, &[]);
    let mut b = st.spawn("agent", 1, &[]);
    a.expect("ready");
    b.expect("ready");
    let f = a.ok("stat /p/q/r/s/f");
    assert_eq!(a.ok("stat /p/q/r/s/f"), f);
    b.ok("rename /p/q /p/q2");
    assert_eq!(a.call("stat /p/q/r/s/f"), Err(libc::ENOENT));
    assert_eq!(a.ok("stat /p/q2/r/s/f"), f);
    b.ok("unlink /p/q2/r/s/f");
    b.ok("rmdir /p/q2/r/s");
    assert_eq!(a.call("stat /p/q2/r/s/f"), Err(libc::ENOENT));
    b.ok("mkdir /p/x");
    b.ok("mkdir /p/q2/r/s");
    b.ok("create /p/q2/r/s/f");
    let g = a.ok("stat /p/q2/r/s/f");
    assert_ne!(g, f, "the new file");
    // A third process stops inside an rmdir, its change counted.
    let point = "rmdir.gate_alone";
    let mut v = st.spawn("agent", 2, &[(STOP_ENV, point.to_string())]);
    v.expect("ready");
    v.send("rmdir /p/e");
    assert_eq!(v.expect("stopped"), vec![point.to_string()]);
    b.ok("rename /p/q2 /p/q3");
    assert_eq!(a.call("stat /p/q2/r/s/f"), Err(libc::ENOENT));
    assert_eq!(a.ok("stat /p/q3/r/s/f"), g);
    v.kill_and_reap();
    assert_eq!(a.ok("stat /p/q3/r/s/f"), g);
    b.ok("rename /p/q3 /p/q4");
    assert_eq!(a.call("stat /p/q3/r/s/f"), Err(libc::ENOENT));
    assert_eq!(a.ok("stat /p/q4/r/s/f"), g);
    a.finish();
    b.finish();
    st.check(|_| {});
}
