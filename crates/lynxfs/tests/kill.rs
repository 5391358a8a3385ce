//! Process crashes: a child process (this test binary, in worker mode) runs a
//! deterministic workload on a pool file and prints one line per acknowledged
//! operation; the parent kills it with SIGKILL after a seeded number of
//! acknowledgements, reopens the pool (recovery), runs fsck (no problems allowed) and
//! checks that the pool holds exactly the state after every acknowledged operation,
//! plus possibly the one operation in flight.
//!
//! `LYNXFS_LONG=1` runs more rounds.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use lynxfs::pmem::PmemBackend;
use lynxfs::{Access, Cred, Fs, MkfsOptions, Pool};

const WORKER_ENV: &str = "LYNXFS_KILL_WORKER_POOL";
const OPS: u64 = 20_000;

#[derive(Clone, Debug)]
enum Op {
    Create(String, u64),
    Append(String, u64),
    Rename(String, String),
    Unlink(String),
}

fn content(seed: u64) -> Vec<u8> {
    let len = (seed * 2654435761 % 9000) as usize + 1;
    (0..len)
        .map(|j| (seed as usize * 31 + j * 7) as u8)
        .collect()
}

/// The names and contents in the root directory.
type Model = BTreeMap<String, Vec<u8>>;

/// Operation `i`, chosen from the model so far (the same in worker and parent).
fn op(i: u64, m: &Model) -> Op {
    let pick = |k: u64| -> Option<String> {
        if m.is_empty() {
            None
        } else {
            m.keys().nth((k % m.len() as u64) as usize).cloned()
        }
    };
    let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    match (h % 8, pick(h / 8)) {
        (0 | 1, Some(n)) if m.len() > 40 => Op::Unlink(n),
        (2, Some(n)) => Op::Append(n, i),
        (3, Some(n)) => Op::Rename(n, format!("r{i}")),
        (4, Some(n)) if m.len() > 10 => Op::Unlink(n),
        _ => Op::Create(format!("f{i}"), i),
    }
}

fn apply(m: &mut Model, o: &Op) {
    match o {
        Op::Create(n, s) => {
            m.insert(n.clone(), content(*s));
        }
        Op::Append(n, s) => m.get_mut(n).unwrap().extend(content(*s)),
        Op::Rename(a, b) => {
            let v = m.remove(a).unwrap();
            m.insert(b.clone(), v);
        }
        Op::Unlink(n) => {
            m.remove(n);
        }
    }
}

fn run_op(fs: &Fs<PmemBackend>, o: &Op) {
    let s = fs.session(Cred::root());
    match o {
        Op::Create(n, seed) => {
            let fd = s.create(format!("/{n}"), 0o644).unwrap();
            fs.pwrite(fd, &content(*seed), 0).unwrap();
            fs.close_fd(fd).unwrap();
        }
        Op::Append(n, seed) => {
            let fd = s
                .open(format!("/{n}"), libc::O_WRONLY | libc::O_APPEND, 0)
                .unwrap();
            fs.write(fd, &content(*seed)).unwrap();
            fs.close_fd(fd).unwrap();
        }
        Op::Rename(a, b) => s.rename(format!("/{a}"), format!("/{b}"), 0).unwrap(),
        Op::Unlink(n) => s.unlink(format!("/{n}")).unwrap(),
    }
}

/// Worker mode: run the workload, acknowledging each operation on stdout.
#[test]
fn worker() {
    let Ok(pool) = std::env::var(WORKER_ENV) else {
        return; // not a worker: nothing to do
    };
    let fs =
        Fs::new(Pool::open(Path::new(&pool), Access::ReadWrite, PmemBackend::default()).unwrap());
    let mut m = Model::new();
    let out = std::io::stdout();
    for i in 0..OPS {
        let o = op(i, &m);
        run_op(&fs, &o);
        apply(&mut m, &o);
        let mut l = out.lock();
        writeln!(l, "@ack {i}@").unwrap();
        l.flush().unwrap();
    }
    writeln!(out.lock(), "@done@").unwrap();
    fs.close().unwrap();
}

/// What the pool holds in its root directory.
fn read_state(fs: &Fs<PmemBackend>) -> Model {
    let s = fs.session(Cred::root());
    let mut got = Model::new();
    for e in s.readdir("/").unwrap() {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let n = String::from_utf8(e.name.clone()).unwrap();
        let st = s.stat(format!("/{n}")).unwrap();
        let fd = s.open(format!("/{n}"), libc::O_RDONLY, 0).unwrap();
        let mut buf = vec![0u8; st.size as usize];
        let r = fs.pread(fd, &mut buf, 0).unwrap();
        assert_eq!(r, buf.len(), "{n}: short read");
        fs.close_fd(fd).unwrap();
        got.insert(n, buf);
    }
    got
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn sigkill_at_random_points() {
    if std::env::var(WORKER_ENV).is_ok() {
        return; // a worker runs only `worker`
    }
    let long = std::env::var("LYNXFS_LONG").is_ok_and(|v| v == "1");
    let rounds = if long { 25 } else { 4 };
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let pool = dir.path().join("kill.pool");
    let exe = std::env::current_exe().unwrap();
    let mut seed = 0x6b111_u64;
    for round in 0..rounds {
        let mut o = MkfsOptions::new(64 << 20);
        o.lanes = 2;
        o.force = true;
        Pool::mkfs(&pool, &o, PmemBackend::default()).unwrap();
        let kill_after = 1 + splitmix(&mut seed) % 3000;
        let mut child = Command::new(&exe)
            .args(["--exact", "worker", "--nocapture", "--test-threads=1"])
            .env(WORKER_ENV, &pool)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut acked: Option<u64> = None;
        let mut done = false;
        let mut killed = false;
        let reader = BufReader::new(child.stdout.take().unwrap());
        for line in reader.lines() {
            let line = line.unwrap();
            if let Some(p) = line.find("@ack ") {
                let rest = &line[p + 5..];
                let n: u64 = rest[..rest.find('@').unwrap()].parse().unwrap();
                acked = Some(n);
                if !killed && n + 1 >= kill_after {
                    // SAFETY: kill(2) on the pid of a child we spawned and have not
                    // reaped, so the pid still names it.
                    let r = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
                    assert_eq!(r, 0);
                    killed = true;
                }
            }
            if line.contains("@done@") {
                done = true;
            }
        }
        let status = child.wait().unwrap();
        assert!(
            killed || done,
            "round {round}: worker ended early: {status:?}"
        );
        // Acknowledged: ops 0..=acked. In flight: at most the next one.
        let n_acked = acked.map_or(0, |a| a + 1);
        let mut model = Model::new();
        for i in 0..n_acked {
            let o = op(i, &model);
            apply(&mut model, &o);
        }
        let mut with_next = model.clone();
        let next = op(n_acked, &model);
        apply(&mut with_next, &next);
        // A create is three calls (create, write, close): killed between the first two,
        // the file exists and is empty, a state of the finished create call.
        let mut half_next = model.clone();
        if let Op::Create(n, _) = &next {
            half_next.insert(n.clone(), Vec::new());
        }

        let p = Pool::open(&pool, Access::ReadWrite, PmemBackend::default()).unwrap();
        assert_eq!(p.was_clean, done, "round {round}: clean flag");
        let rep = lynxfs::fsck::check(&p);
        assert!(
            rep.is_clean(),
            "round {round}: fsck after SIGKILL: {:?}",
            rep.problems
        );
        if let Some(r) = &p.recovery {
            assert!(
                r.problems.is_empty(),
                "round {round}: recovery: {:?}",
                r.problems
            );
        }
        let fs = Fs::new(p);
        let got = read_state(&fs);
        let which = if got == model {
            "without the op in flight"
        } else if !done && got == with_next {
            "with the op in flight"
        } else if !done && got == half_next {
            "with the create in flight done but not its write"
        } else {
            let missing: Vec<_> = model.keys().filter(|k| !got.contains_key(*k)).collect();
            let extra: Vec<_> = got.keys().filter(|k| !model.contains_key(*k)).collect();
            let differ: Vec<_> = got
                .iter()
                .filter(|(k, v)| model.get(*k).is_some_and(|w| w != *v))
                .map(|(k, _)| k)
                .collect();
            panic!(
                "round {round}: after {n_acked} acknowledged ops (next: {next:?}) the pool \
                 differs: missing {missing:?}, extra {extra:?}, contents differ {differ:?}"
            );
        };
        println!(
            "round {round}: killed after {n_acked} acknowledged ops; {} names; state {which}",
            got.len()
        );
        fs.close().unwrap();
        drop(fs);
        // The recovered pool closes cleanly and stays consistent.
        let p = Pool::open(&pool, Access::ReadWrite, PmemBackend::default()).unwrap();
        assert!(p.was_clean);
        let rep = lynxfs::fsck::check(&p);
        assert!(
            rep.is_clean(),
            "round {round}: after reopen: {:?}",
            rep.problems
        );
    }
}
