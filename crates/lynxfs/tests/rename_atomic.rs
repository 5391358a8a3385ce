//! A name that exists throughout is never missing (issue 42, defect 1): threads of
//! one process, through the library, replace a file by `rename` or swap two
//! directories by `RENAME_EXCHANGE` in a loop while other threads open and stat the
//! names (and the paths below them). Not one ENOENT may come back, with the full-path
//! areas on or off.
//!
//! Each replacement carries its number in its bytes, and every rename and open is
//! timed, so the history of `cfg` is checked against what a linearizable `cfg`
//! promises (an atomic register with one writer): no open finds a file before its
//! rename began, or after the next rename ended, or older than another open that
//! ended before it began; and none finds one half written.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::fs;
use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, Session};

/// How long the readers read while a writer changes names, per case.
const RUN: Duration = Duration::from_millis(2000);
/// The whole test's bound (a wait that never ends fails the run).
const LIMIT: Duration = Duration::from_secs(120);
/// Reader threads per case: more than the CPUs, so that readers are preempted in the
/// middle of their walks (what widens the windows a missing name needs).
const READERS: usize = 4;

type LFs = Fs<PmemBackend>;

/// What the readers saw: calls made, ENOENT answers, other failures (a wrong or
/// torn file, a generation going back).
#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    enoent: AtomicU64,
    wrong: AtomicU64,
}

impl Tally {
    fn saw<T>(&self, r: lynxfs::Result<T>) -> Option<T> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match r {
            Ok(v) => Some(v),
            Err(e) if e.errno() == libc::ENOENT => {
                self.enoent.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => panic!("a reader's call failed: {e:?}"),
        }
    }

    /// What the readers saw, as a line; a failure's description if any call said
    /// ENOENT or saw a wrong file.
    fn verdict(&self, what: &str) -> Result<(), String> {
        let (calls, enoent, wrong) = (
            self.calls.load(Ordering::Relaxed),
            self.enoent.load(Ordering::Relaxed),
            self.wrong.load(Ordering::Relaxed),
        );
        let line = format!("{what}: {calls} calls, {enoent} ENOENT, {wrong} wrong");
        eprintln!("{line}");
        assert!(calls > 1000, "{what}: the readers made only {calls} calls");
        if enoent == 0 && wrong == 0 {
            Ok(())
        } else {
            Err(line)
        }
    }
}

/// Every case's verdict, then one assertion (so a failure shows every case's count).
fn all_pass(verdicts: &[Result<(), String>]) {
    let failed: Vec<&String> = verdicts.iter().filter_map(|v| v.as_ref().err()).collect();
    assert!(failed.is_empty(), "{failed:#?}");
}

fn areas(fs: &LFs, on: bool) {
    fs.ns().mechanisms.set_areas(on);
}

/// A file `p` holding `generation` as 8 bytes, written before it gets its name.
fn write_file(fs: &LFs, s: &Session<'_, PmemBackend>, p: &str, generation: u64) {
    let fd = s
        .open(p, libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY, 0o644)
        .unwrap();
    assert_eq!(fs.write(fd, &generation.to_le_bytes()).unwrap(), 8);
    fs.close_fd(fd).unwrap();
}

/// The generation in the file `p` leads to, if it is there.
fn read_generation(fs: &LFs, s: &Session<'_, PmemBackend>, p: &str, t: &Tally) -> Option<u64> {
    let fd = t.saw(s.open(p, libc::O_RDONLY, 0))?;
    let mut buf = [0u8; 8];
    let n = fs.pread(fd, &mut buf, 0).unwrap();
    fs.close_fd(fd).unwrap();
    if n != 8 {
        t.wrong.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    Some(u64::from_le_bytes(buf))
}

/// Run `writer` until the readers' time is up, and `READERS` threads of `reader`
/// meanwhile; `writer` returns how many changes it made.
fn race(
    writer: impl FnOnce(&AtomicBool) -> u64 + Send,
    reader: impl Fn(&AtomicBool) + Sync,
) -> u64 {
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let (stop, reader) = (&stop, &reader);
        let w = sc.spawn(move || writer(stop));
        let rs: Vec<_> = (0..READERS)
            .map(|_| sc.spawn(move || reader(stop)))
            .collect();
        let until = Instant::now() + RUN;
        while Instant::now() < until && !w.is_finished() {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        for r in rs {
            r.join().expect("a reader panicked");
        }
        let changes = w.join().expect("the writer panicked");
        assert!(changes > 100, "the writer made only {changes} changes");
        changes
    })
}

/// A call's interval, in nanoseconds since the case began: it took effect (if at all)
/// somewhere between the two.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u64,
    end: u64,
}

/// What a case's calls on `cfg` saw: the interval of the rename that gave `cfg` the
/// file of generation `g` at `renames[g - 1]` (generation 0 was there before), and
/// every read's interval with the generation it found.
#[derive(Default)]
struct History {
    renames: std::sync::Mutex<Vec<Span>>,
    reads: std::sync::Mutex<Vec<(Span, u64)>>,
}

/// Nanoseconds since `base`.
fn since(base: Instant) -> u64 {
    base.elapsed().as_nanos() as u64
}

/// Up to 5 ways the history breaks the rules of an atomic register with one writer
/// (Lamport's: what a linearizable `cfg` is, as each rename writes a new value and
/// each open reads one): no read returns a generation whose rename began after the
/// read ended, or one already replaced by a rename that ended before the read began,
/// and no read returns an older generation than a read that ended before it began.
fn register_violations(renames: &[Span], reads: &mut [(Span, u64)]) -> Vec<String> {
    let mut bad = Vec::new();
    for &(r, g) in reads.iter() {
        let wrote = (g as usize).checked_sub(1).map(|i| renames[i]);
        if wrote.is_some_and(|w| w.start > r.end) {
            bad.push(format!(
                "{r:?} read generation {g}, renamed in later ({wrote:?})"
            ));
        }
        let replaced = renames.get(g as usize);
        if replaced.is_some_and(|w| w.end < r.start) {
            bad.push(format!(
                "{r:?} read generation {g}, replaced before ({replaced:?})"
            ));
        }
    }
    // New-old inversions: sweep the reads by start, with the highest generation of
    // the reads that ended before it.
    let mut by_end: Vec<(u64, u64)> = reads.iter().map(|&(r, g)| (r.end, g)).collect();
    by_end.sort_unstable();
    reads.sort_unstable_by_key(|&(r, _)| r.start);
    let (mut ended, mut newest) = (0, 0);
    for &(r, g) in reads.iter() {
        while ended < by_end.len() && by_end[ended].0 < r.start {
            newest = newest.max(by_end[ended].1);
            ended += 1;
        }
        if g < newest {
            bad.push(format!(
                "{r:?} read generation {g} after a read of {newest} had ended"
            ));
        }
    }
    bad.truncate(5);
    bad
}

/// `write tmp; rename tmp cfg` in a loop (in `dir`, "" for the root) while readers
/// open and stat `cfg`; every open's result is checked against the renames' history
/// ([`register_violations`]).
fn replace_while_reading(dir: &str, areas_on: bool) -> Result<(), String> {
    let fs = fs(64 << 20);
    areas(&fs, areas_on);
    let root = fs.session(Cred::root());
    if !dir.is_empty() {
        root.mkdir(dir, 0o755).unwrap();
    }
    let (tmp, cfg) = (format!("{dir}/tmp"), format!("{dir}/cfg"));
    write_file(&fs, &root, &cfg, 0);
    let t = Tally::default();
    let h = History::default();
    let base = Instant::now();
    let changes = race(
        |stop| {
            let s = fs.session(Cred::root());
            let mut renames = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                write_file(&fs, &s, &tmp, renames.len() as u64 + 1);
                let start = since(base);
                s.rename(&tmp, &cfg, 0).unwrap();
                renames.push(Span {
                    start,
                    end: since(base),
                });
            }
            let n = renames.len() as u64;
            *h.renames.lock().unwrap() = renames;
            n
        },
        |stop| {
            let s = fs.session(Cred::root());
            let mut reads = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let start = since(base);
                if let Some(g) = read_generation(&fs, &s, &cfg, &t) {
                    reads.push((
                        Span {
                            start,
                            end: since(base),
                        },
                        g,
                    ));
                }
                t.saw(s.stat(&cfg));
                t.saw(s.lstat(&cfg));
            }
            h.reads.lock().unwrap().extend(reads);
        },
    );
    let mut reads = h.reads.into_inner().unwrap();
    let bad = register_violations(&h.renames.into_inner().unwrap(), &mut reads);
    t.wrong.fetch_add(bad.len() as u64, Ordering::Relaxed);
    for b in &bad {
        eprintln!("not linearizable: {b}");
    }
    t.verdict(&format!(
        "rename over {cfg}, areas {areas_on}, {changes} renames, {} reads checked",
        reads.len()
    ))
}

#[test]
fn a_name_replaced_by_rename_is_never_missing() {
    let _w = lynxfs_test_support::watchdog("replaced_by_rename", LIMIT);
    all_pass(&[
        replace_while_reading("", true),
        replace_while_reading("/etc", false),
    ]);
}

/// `renameat2(a, b, RENAME_EXCHANGE)` of two directories in a loop while readers open
/// and stat the files below them and the directories themselves.
fn exchange_while_reading(areas_on: bool) -> Result<(), String> {
    let fs = fs(64 << 20);
    areas(&fs, areas_on);
    let root = fs.session(Cred::root());
    for d in ["/a", "/b", "/a/sub", "/b/sub"] {
        root.mkdir(d, 0o755).unwrap();
    }
    for p in ["/a/f", "/b/f", "/a/sub/g", "/b/sub/g"] {
        write_file(&fs, &root, p, 7);
    }
    let t = Tally::default();
    let changes = race(
        |stop| {
            let s = fs.session(Cred::root());
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                s.rename("/a", "/b", libc::RENAME_EXCHANGE).unwrap();
                n += 1;
            }
            n
        },
        |stop| {
            let s = fs.session(Cred::root());
            while !stop.load(Ordering::Relaxed) {
                for p in ["/a/f", "/b/sub/g"] {
                    if read_generation(&fs, &s, p, &t).is_some_and(|g| g != 7) {
                        t.wrong.fetch_add(1, Ordering::Relaxed);
                    }
                }
                for p in ["/a", "/b/f", "/a/sub/g", "/b/sub"] {
                    t.saw(s.stat(p));
                }
            }
        },
    );
    t.verdict(&format!(
        "exchange of /a and /b, areas {areas_on}, {changes} exchanges"
    ))
}

#[test]
fn paths_below_exchanged_directories_are_never_missing() {
    let _w = lynxfs_test_support::watchdog("exchanged_directories", LIMIT);
    all_pass(&[exchange_while_reading(true), exchange_while_reading(false)]);
}

/// The history checker itself: each rule caught alone, and a linearizable history
/// (reads overlapping a rename may see either file) passed.
#[test]
fn the_register_checker_catches_each_kind_of_wrong_read() {
    let span = |start, end| Span { start, end };
    // Generation 1 renamed in during 10-20, generation 2 during 30-40.
    let renames = [span(10, 20), span(30, 40)];
    let mut fine = vec![
        (span(0, 5), 0),
        (span(15, 25), 0),
        (span(15, 25), 1),
        (span(35, 50), 2),
    ];
    assert!(register_violations(&renames, &mut fine).is_empty());
    let cases: [(&str, Vec<(Span, u64)>); 3] = [
        ("from the future", vec![(span(0, 5), 1)]),
        ("replaced before", vec![(span(25, 28), 0)]),
        ("new then old", vec![(span(15, 18), 1), (span(19, 22), 0)]),
    ];
    for (what, mut reads) in cases {
        let bad = register_violations(&renames, &mut reads);
        assert_eq!(bad.len(), 1, "{what}: {bad:?}");
    }
}
