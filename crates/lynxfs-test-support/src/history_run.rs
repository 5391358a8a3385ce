//! The calls whose histories [`crate::history`] checks, through any front end
//! ([`Front`]): each thread renames, replaces, exchanges, removes, opens and stats a
//! few public names at random and records every call with its times.
//!
//! The names and what may happen to them (the checker takes each name alone):
//! - `cfg`: a file replaced by renames from a thread's private name (in the same
//!   directory or another);
//! - `lock`: created by `RENAME_NOREPLACE` from a private name, and unlinked;
//! - `x0`, `x1`: files exchanged by `RENAME_EXCHANGE`;
//! - `d0`, `d1`: directories exchanged by `RENAME_EXCHANGE`; a read of one opens the
//!   file `id` below it (a path through the exchanged name) or stats it;
//! - `m0`, `n0`: thread 0 puts files onto `m0` and moves `m0` onto `n0` (it alone
//!   changes them, so it knows which file a move carries).
//!
//! Every file holds its id as 8 bytes, written before the file gets a public name,
//! so an open tells which file a name led to, and a stat of a file of another size
//! saw a file the name never had.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::child::{finish_within, spawn_group};
use crate::history::{format_call, format_init, format_odd, parse, Act, Call, File, History, Saw};

/// A front end's calls, on paths relative to its directory; errors are errnos.
pub trait Front: Sync {
    /// Create (or truncate) `path`, write `id` as its 8 bytes, and say its inode number.
    fn write_file(&self, path: &str, id: u64) -> Result<u64, i32>;
    fn mkdir(&self, path: &str) -> Result<(), i32>;
    fn rename(&self, from: &str, to: &str, flags: u32) -> Result<(), i32>;
    fn unlink(&self, path: &str) -> Result<(), i32>;
    /// Open `path` and read up to 16 bytes of it.
    fn read(&self, path: &str) -> Result<Vec<u8>, i32>;
    /// stat (following links): inode number, size, is a directory.
    fn stat(&self, path: &str) -> Result<(u64, u64, bool), i32>;
}

/// Nanoseconds of `CLOCK_MONOTONIC`: one clock for every process of the machine.
pub fn now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The public names a read picks from.
const READ_NAMES: [&str; 8] = ["cfg", "lock", "x0", "x1", "d0", "d1", "m0", "n0"];

/// Make the names' first files in the front end's (empty) directory; returns the
/// history's `init` lines.
pub fn setup(f: &dyn Front) -> Result<Vec<String>, String> {
    fn e(what: &str) -> impl Fn(i32) -> String + '_ {
        move |errno| format!("setup: {what}: errno {errno}")
    }
    let mut lines = Vec::new();
    for (i, name) in ["cfg", "x0", "x1"].iter().enumerate() {
        let id = i as u64 + 1;
        let ino = f.write_file(name, id).map_err(e(name))?;
        lines.push(format_init(name, &File { id, ino }));
    }
    for (i, name) in ["d0", "d1"].iter().enumerate() {
        let id = i as u64 + 10;
        f.mkdir(name).map_err(e(name))?;
        f.write_file(&format!("{name}/id"), id).map_err(e(name))?;
        let (ino, _, _) = f.stat(name).map_err(e(name))?;
        lines.push(format_init(name, &File { id, ino }));
    }
    Ok(lines)
}

/// A small fast generator (xorshift), seeded per thread.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One thread's calls, numbered `who` (unique among every thread of every process of
/// the run), until `run` has passed or it made `max_calls`: the history's lines.
pub fn run_thread(f: &dyn Front, who: u32, run: Duration, max_calls: usize) -> Vec<String> {
    let mut t = Thread {
        f,
        who,
        seq: 0,
        rng: Rng(0x9e37_79b9_7f4a_7c15 ^ (u64::from(who) + 1).wrapping_mul(0xd6e8_feb8_6659_fd93)),
        lines: Vec::new(),
        on_m0: None,
    };
    let own = format!("p{who}");
    if let Err(e) = f.mkdir(&own) {
        t.lines
            .push(format_odd(who, &format!("mkdir {own}: errno {e}")));
        return t.lines;
    }
    let until = Instant::now() + run;
    let mut calls = 0;
    while calls < max_calls && Instant::now() < until {
        calls += t.one();
    }
    t.lines
}

struct Thread<'f> {
    f: &'f dyn Front,
    who: u32,
    seq: u64,
    rng: Rng,
    lines: Vec<String>,
    /// Thread 0: the file it last put on `m0`, while there.
    on_m0: Option<File>,
}

impl Thread<'_> {
    /// One call at random; the calls recorded.
    fn one(&mut self) -> usize {
        match self.rng.below(100) {
            0..15 => self.put("cfg"),
            15..22 => self.put_new("lock"),
            22..28 => self.remove("lock"),
            28..34 => self.exchange("x0", "x1"),
            34..40 => self.exchange("d0", "d1"),
            40..45 if self.who == 0 => self.put("m0"),
            45..50 if self.who == 0 => self.move_m0(),
            _ => {
                let name = READ_NAMES[self.rng.below(READ_NAMES.len() as u64) as usize];
                if self.rng.below(2) == 0 {
                    self.open(name)
                } else {
                    self.stat(name)
                }
            }
        }
    }

    fn record(&mut self, start: u64, act: Act) -> usize {
        let c = Call {
            who: self.who,
            start,
            end: now(),
            act,
        };
        self.lines.push(format_call(&c));
        1
    }

    fn odd(&mut self, what: String) -> usize {
        self.lines.push(format_odd(self.who, &what));
        1
    }

    /// A new file under this thread's private name (in the public directory or its
    /// own, at random), holding a new id.
    fn private_file(&mut self) -> Result<(String, File), usize> {
        self.seq += 1;
        let id = (u64::from(self.who) + 1) << 32 | self.seq;
        let path = match self.rng.below(2) {
            0 => format!("t{}", self.who),
            _ => format!("p{}/t", self.who),
        };
        match self.f.write_file(&path, id) {
            Ok(ino) => Ok((path, File { id, ino })),
            Err(e) => Err(self.odd(format!("write {path}: errno {e}"))),
        }
    }

    fn put(&mut self, name: &str) -> usize {
        let (path, file) = match self.private_file() {
            Ok(p) => p,
            Err(n) => return n,
        };
        let start = now();
        match self.f.rename(&path, name, 0) {
            Ok(()) if name == "m0" => {
                self.on_m0 = Some(file);
                self.record(
                    start,
                    Act::Put {
                        name: name.into(),
                        file,
                    },
                )
            }
            Ok(()) => self.record(
                start,
                Act::Put {
                    name: name.into(),
                    file,
                },
            ),
            Err(e) => self.odd(format!("rename {path} {name}: errno {e}")),
        }
    }

    fn put_new(&mut self, name: &str) -> usize {
        let (path, file) = match self.private_file() {
            Ok(p) => p,
            Err(n) => return n,
        };
        let start = now();
        let ok = match self.f.rename(&path, name, libc::RENAME_NOREPLACE) {
            Ok(()) => true,
            Err(libc::EEXIST) => false,
            Err(e) => return self.odd(format!("rename noreplace {path} {name}: errno {e}")),
        };
        let n = self.record(
            start,
            Act::PutNew {
                name: name.into(),
                file,
                ok,
            },
        );
        if !ok {
            if let Err(e) = self.f.unlink(&path) {
                return self.odd(format!("unlink {path}: errno {e}"));
            }
        }
        n
    }

    fn remove(&mut self, name: &str) -> usize {
        let start = now();
        let ok = match self.f.unlink(name) {
            Ok(()) => true,
            Err(libc::ENOENT) => false,
            Err(e) => return self.odd(format!("unlink {name}: errno {e}")),
        };
        self.record(
            start,
            Act::Remove {
                name: name.into(),
                ok,
            },
        )
    }

    fn exchange(&mut self, a: &str, b: &str) -> usize {
        let start = now();
        let ok = match self.f.rename(a, b, libc::RENAME_EXCHANGE) {
            Ok(()) => true,
            Err(libc::ENOENT) => false,
            Err(e) => return self.odd(format!("exchange {a} {b}: errno {e}")),
        };
        self.record(
            start,
            Act::Exchange {
                a: a.into(),
                b: b.into(),
                ok,
            },
        )
    }

    /// rename(m0, n0), recorded per name: `m0` removed, `n0` given the file.
    fn move_m0(&mut self) -> usize {
        let start = now();
        let ok = match self.f.rename("m0", "n0", 0) {
            Ok(()) => true,
            Err(libc::ENOENT) => false,
            Err(e) => return self.odd(format!("rename m0 n0: errno {e}")),
        };
        let moved = self.on_m0.take();
        let end = now();
        let mut rec = |act| {
            self.lines.push(format_call(&Call {
                who: self.who,
                start,
                end,
                act,
            }))
        };
        rec(Act::Remove {
            name: "m0".into(),
            ok,
        });
        match (ok, moved) {
            (true, Some(file)) => rec(Act::Put {
                name: "n0".into(),
                file,
            }),
            (true, None) => return self.odd("rename m0 n0 moved a file never put there".into()),
            (false, _) => {}
        }
        1
    }

    fn open(&mut self, name: &str) -> usize {
        let path = match name.starts_with('d') {
            true => format!("{name}/id"),
            false => name.to_string(),
        };
        let start = now();
        let saw = match self.f.read(&path) {
            Ok(b) => match <[u8; 8]>::try_from(b.as_slice()) {
                Ok(id) => Saw::File {
                    ino: None,
                    id: Some(u64::from_le_bytes(id)),
                },
                Err(_) => return self.odd(format!("read {path}: {} bytes", b.len())),
            },
            Err(libc::ENOENT) => Saw::Missing,
            Err(e) => return self.odd(format!("open {path}: errno {e}")),
        };
        self.record(
            start,
            Act::Read {
                name: name.into(),
                saw,
            },
        )
    }

    fn stat(&mut self, name: &str) -> usize {
        let start = now();
        let saw = match self.f.stat(name) {
            Ok((ino, size, dir)) if dir || size == 8 => Saw::File {
                ino: Some(ino),
                id: None,
            },
            Ok((ino, size, _)) => {
                return self.odd(format!("stat {name}: inode {ino} of {size} bytes"))
            }
            Err(libc::ENOENT) => Saw::Missing,
            Err(e) => return self.odd(format!("stat {name}: errno {e}")),
        };
        self.record(
            start,
            Act::Read {
                name: name.into(),
                saw,
            },
        )
    }
}

/// The kernel's calls (through libc, so a preload library sees them) in a directory.
pub struct Libc {
    dir: String,
}

impl Libc {
    pub fn new(dir: &Path) -> Libc {
        Libc {
            dir: dir.to_string_lossy().into_owned(),
        }
    }

    fn path(&self, p: &str) -> std::ffi::CString {
        std::ffi::CString::new(format!("{}/{p}", self.dir)).expect("a path without NUL")
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `r` as a result: -1 is the errno.
fn ok(r: libc::c_int) -> Result<libc::c_int, i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

impl Front for Libc {
    fn write_file(&self, path: &str, id: u64) -> Result<u64, i32> {
        let p = self.path(path);
        // SAFETY: `p` is a NUL-terminated path that lives through the call.
        let fd = ok(unsafe {
            libc::open(
                p.as_ptr(),
                libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY | libc::O_CLOEXEC,
                0o644,
            )
        })?;
        let bytes = id.to_le_bytes();
        // SAFETY: `bytes` is valid for 8 bytes; `fd` is ours.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), 8) };
        // SAFETY: a zeroed stat is a valid out-parameter; `fd` is ours.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let r = unsafe { libc::fstat(fd, &mut st) };
        // SAFETY: closes our own descriptor once.
        unsafe { libc::close(fd) };
        if n != 8 {
            return Err(if n < 0 { errno() } else { libc::EIO });
        }
        ok(r)?;
        Ok(st.st_ino)
    }

    fn mkdir(&self, path: &str) -> Result<(), i32> {
        let p = self.path(path);
        // SAFETY: `p` is a NUL-terminated path that lives through the call.
        ok(unsafe { libc::mkdir(p.as_ptr(), 0o755) }).map(drop)
    }

    fn rename(&self, from: &str, to: &str, flags: u32) -> Result<(), i32> {
        let (a, b) = (self.path(from), self.path(to));
        // SAFETY: both paths are NUL-terminated and live through the call.
        ok(unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                flags,
            )
        })
        .map(drop)
    }

    fn unlink(&self, path: &str) -> Result<(), i32> {
        let p = self.path(path);
        // SAFETY: `p` is a NUL-terminated path that lives through the call.
        ok(unsafe { libc::unlink(p.as_ptr()) }).map(drop)
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, i32> {
        let p = self.path(path);
        // SAFETY: `p` is a NUL-terminated path that lives through the call.
        let fd = ok(unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })?;
        let mut buf = [0u8; 16];
        // SAFETY: `buf` is valid for 16 bytes; `fd` is ours.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        let err = errno();
        // SAFETY: closes our own descriptor once.
        unsafe { libc::close(fd) };
        if n < 0 {
            return Err(err);
        }
        Ok(buf[..n as usize].to_vec())
    }

    fn stat(&self, path: &str) -> Result<(u64, u64, bool), i32> {
        let p = self.path(path);
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `p` is NUL-terminated and `st` valid, both through the call.
        ok(unsafe { libc::stat(p.as_ptr(), &mut st) })?;
        let dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        Ok((st.st_ino, st.st_size as u64, dir))
    }
}

/// Run `threads` threads of calls on `f` (numbered from `first_who`), for `run` or
/// `max_calls` calls each: their lines, one after the other.
pub fn run_threads(
    f: &dyn Front,
    first_who: u32,
    threads: u32,
    run: Duration,
    max_calls: usize,
) -> Vec<String> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || run_thread(f, first_who + t, run, max_calls)))
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().expect("a history thread panicked"))
            .collect()
    })
}

/// The argument vector of one run of the `lynxfs-history` recorder (the executable
/// first); a test turns it into a command run plainly, under a preload, as another
/// user.
pub type Argv = Vec<OsString>;

/// How [`record_processes`] runs the recorder.
pub struct Recording<'a> {
    /// The `lynxfs-history` executable.
    pub exe: &'a Path,
    /// The directory the names are in (existing, empty).
    pub dir: &'a Path,
    /// Threads per process.
    pub threads: u32,
    /// How long each thread calls, and the calls it makes at most.
    pub run: Duration,
    pub max_calls: u64,
}

/// How long one recorder process may take beyond its run before the test fails.
const RECORDER_SLACK: Duration = Duration::from_secs(120);

/// A history recorded by `lynxfs-history`: its `setup` (run by `command(None, ..)`),
/// then `procs` processes calling at once, process `k` run by `command(Some(k), ..)`
/// with its threads numbered from `10 * k`. Every process runs in a group of its own
/// and is killed, failing the test, if it outlives its run by two minutes.
pub fn record_processes(
    r: &Recording,
    procs: usize,
    command: &dyn Fn(Option<usize>, Argv) -> Command,
) -> Result<History, String> {
    let argv = |args: &[String]| -> Argv {
        let mut v: Argv = vec![r.exe.into(), r.dir.into()];
        v.extend(args.iter().map(Into::into));
        v
    };
    let mut h = History::default();
    let mut setup = command(None, argv(&["setup".into()]));
    let out = finish_within(spawn_group(&mut setup, "setup"), "setup", RECORDER_SLACK);
    parse_output("setup", &out, &mut h)?;
    let kids: Vec<_> = (0..procs)
        .map(|k| {
            let args = [
                "run".into(),
                (10 * k).to_string(),
                r.threads.to_string(),
                r.run.as_millis().to_string(),
                r.max_calls.to_string(),
            ];
            spawn_group(&mut command(Some(k), argv(&args)), "a recorder")
        })
        .collect();
    for (k, kid) in kids.into_iter().enumerate() {
        let what = format!("recorder {k}");
        let out = finish_within(kid, &what, r.run + RECORDER_SLACK);
        parse_output(&what, &out, &mut h)?;
    }
    Ok(h)
}

/// A recorder's lines into `h`, if it succeeded.
fn parse_output(what: &str, out: &Output, h: &mut History) -> Result<(), String> {
    if !out.status.success() {
        return Err(format!(
            "{what}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    parse(&String::from_utf8_lossy(&out.stdout), h)
}
