//! Worker processes for the multi-process benchmarks (issue 12): the `mdtest` suite's
//! `--processes N` rows and the `recovery` suite's second attach.
//!
//! A worker is this benchmark's own program started again (the `lynxfs-bench` binary with a
//! hidden flag, see [`WorkerCommand`]); it runs [`worker_main`] over its stdin and
//! stdout. The protocol is one line per request and one tagged line per reply
//! ([`TAG`]; untagged lines, such as a test harness's chatter, are skipped):
//!
//! - `attach POOL` → `ready ATTACH_NS POPULATE_NS`: attach the pool (`Fs::open`),
//!   then prefault the shared state's mapping (`Pool::populate`), each timed;
//! - `PHASE TOTAL N I` → `done START_NS END_NS` or `error MESSAGE`: run an `mdtest`
//!   phase (`create`, `stat`, `rename`, `remove`) over the names of thread `I` of `N`
//!   sharing `TOTAL` files, timed on `CLOCK_MONOTONIC` (one clock for every process);
//! - `quit` (or end of input): detach and exit.
//!
//! A worker blocks reading its next request, so writing one request to every worker
//! is the barrier that starts a phase in all of them together.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::LibTarget;

/// The prefix of every reply line.
pub const TAG: &str = "@lynxfs-worker";

/// How to start a worker: `program args...`, with `env` added to its environment. The
/// program must run [`worker_main`] on its stdin and stdout.
#[derive(Clone, Debug)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

/// The time a worker may take for one reply before it counts as hung.
const REPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// Now on `CLOCK_MONOTONIC`, in ns: the clock every process shares, so the parent can
/// take the span of a phase from the workers' own readings.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Serves one parent: reads requests from `input` and writes replies to `output` until
/// `quit` or the end of the input. Errors of a phase are replied; a malformed request
/// or a failed attach ends the worker with an error.
pub fn worker_main(input: impl BufRead, mut output: impl Write) -> anyhow::Result<()> {
    let mut target: Option<LibTarget> = None;
    for line in input.lines() {
        let line = line.context("reading a request")?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["quit"] => break,
            ["attach", pool] => {
                let (t, times) = LibTarget::attach_timed(Path::new(pool))
                    .with_context(|| format!("attaching {pool}"))?;
                target = Some(t);
                format!(
                    "ready {} {}",
                    times.attach.as_nanos(),
                    times.populate.as_nanos()
                )
            }
            [phase, total, n, i] => {
                let Some(t) = &target else {
                    bail!("request {line:?} before attach");
                };
                let (total, n, i) = (number(total)?, number(n)?, number(i)?);
                match crate::mdtest::run_phase_of(t, phase, total, n, i) {
                    Ok((a, b)) => format!("done {a} {b}"),
                    Err(e) => format!("error {e:#}").replace('\n', " "),
                }
            }
            _ => bail!("malformed request {line:?}"),
        };
        writeln!(output, "{TAG} {reply}").context("writing a reply")?;
        output.flush().context("writing a reply")?;
    }
    Ok(())
}

fn number(s: &str) -> anyhow::Result<usize> {
    s.parse().with_context(|| format!("{s:?} is not a count"))
}

/// One started worker.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// Worker processes, killed (if still running) and reaped when dropped.
pub(crate) struct Workers {
    workers: Vec<Worker>,
}

impl Workers {
    /// Starts `n` workers with `cmd`.
    pub(crate) fn spawn(cmd: &WorkerCommand, n: usize) -> anyhow::Result<Workers> {
        let mut out = Workers {
            workers: Vec::with_capacity(n),
        };
        for i in 0..n {
            let mut child = Command::new(&cmd.program)
                .args(&cmd.args)
                .envs(cmd.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .with_context(|| format!("starting worker {i}: {}", cmd.program.display()))?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                let _ = child.kill();
                let _ = child.wait();
                bail!("worker {i} has no pipes");
            };
            out.workers.push(Worker {
                child,
                stdin,
                stdout: BufReader::new(stdout),
            });
        }
        Ok(out)
    }

    /// Sends `request(i)` to the first `count` workers (the barrier: each starts on
    /// reading it), then collects each one's reply numbers (after the verb `expect`).
    pub(crate) fn first(
        &mut self,
        count: usize,
        request: impl Fn(usize) -> String,
        expect: &str,
    ) -> anyhow::Result<Vec<Vec<u64>>> {
        if count > self.workers.len() {
            bail!("{count} workers asked for, {} started", self.workers.len());
        }
        for (i, w) in self.workers.iter_mut().take(count).enumerate() {
            writeln!(w.stdin, "{}", request(i))
                .and_then(|()| w.stdin.flush())
                .with_context(|| format!("writing to worker {i}"))?;
        }
        // Every reply is read, also after an error, so that no stale reply is left to
        // answer the next request.
        let replies: Vec<_> = (0..count).map(|i| self.reply(i, expect)).collect();
        replies.into_iter().collect()
    }

    /// Worker `i`'s next reply: the numbers after `expect`.
    fn reply(&mut self, i: usize, expect: &str) -> anyhow::Result<Vec<u64>> {
        let w = &mut self.workers[i];
        loop {
            let line = read_line(&mut w.stdout, REPLY_TIMEOUT)
                .with_context(|| format!("reading worker {i}"))?;
            let Some(line) = line else {
                let status = w.child.wait().map(|s| s.to_string());
                bail!(
                    "worker {i} ended without replying ({})",
                    status.unwrap_or_else(|e| e.to_string())
                );
            };
            let Some(reply) = line.strip_prefix(TAG) else {
                continue; // not ours: a harness's output
            };
            let mut words = reply.split_whitespace();
            match words.next() {
                Some(verb) if verb == expect => {
                    return words
                        .map(|w| {
                            w.parse()
                                .with_context(|| format!("worker {i}: bad reply {line:?}"))
                        })
                        .collect();
                }
                Some("error") => bail!(
                    "worker {i}: {}",
                    reply.trim_start().trim_start_matches("error ")
                ),
                _ => bail!("worker {i}: unexpected reply {line:?}"),
            }
        }
    }

    /// [`Workers::first`] for every worker.
    pub(crate) fn all(
        &mut self,
        request: impl Fn(usize) -> String,
        expect: &str,
    ) -> anyhow::Result<Vec<Vec<u64>>> {
        self.first(self.workers.len(), request, expect)
    }

    /// Asks every worker to detach and waits for them to end.
    pub(crate) fn quit(mut self) -> anyhow::Result<()> {
        for (i, w) in self.workers.iter_mut().enumerate() {
            writeln!(w.stdin, "quit")
                .and_then(|()| w.stdin.flush())
                .with_context(|| format!("writing to worker {i}"))?;
        }
        for (i, w) in self.workers.iter_mut().enumerate() {
            let status = w
                .child
                .wait()
                .with_context(|| format!("waiting for worker {i}"))?;
            if !status.success() {
                bail!("worker {i} ended with {status}");
            }
        }
        self.workers.clear();
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // Only after an error: the workers may be mid-phase; they are ours to stop.
        for w in &mut self.workers {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

/// The next line of `r`, waiting at most `timeout` for it to start (a worker that
/// hangs fails the benchmark instead of hanging it); `None` at end of file.
fn read_line(r: &mut BufReader<ChildStdout>, timeout: Duration) -> io::Result<Option<String>> {
    if r.buffer().is_empty() {
        let mut pfd = libc::pollfd {
            fd: r.get_ref().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: poll reads and writes the one live pollfd it is given.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no reply within {} s", timeout.as_secs()),
            ));
        }
    }
    let mut line = String::new();
    match r.read_line(&mut line)? {
        0 => Ok(None),
        _ => Ok(Some(line.trim_end().to_string())),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use lynxfs::MkfsOptions;

    /// Set in a worker started by [`spawned_workers_run_a_phase_together`].
    const WORKER_ENV: &str = "LYNXFS_BENCH_TEST_WORKER";

    /// The worker side of the spawn test: this test binary run again with only this
    /// test selected and [`WORKER_ENV`] set. Run normally, it checks that a worker
    /// refuses a malformed request.
    #[test]
    fn worker_entry() {
        if std::env::var_os(WORKER_ENV).is_some() {
            let stdin = io::stdin();
            let code = match worker_main(stdin.lock(), io::stdout()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("worker: {e:#}");
                    1
                }
            };
            std::process::exit(code);
        }
        let err = worker_main(&b"create 1 1\n"[..], Vec::new()).unwrap_err();
        assert!(err.to_string().contains("malformed"), "{err:#}");
        let err = worker_main(&b"stat 1 1 0\n"[..], Vec::new()).unwrap_err();
        assert!(err.to_string().contains("before attach"), "{err:#}");
    }

    fn small() -> LibTarget {
        LibTarget::create(&MkfsOptions::new(64 << 20)).unwrap()
    }

    #[test]
    fn an_in_process_worker_attaches_and_runs_phases() {
        let t = small();
        crate::Target::mkdir(&t, Path::new(crate::mdtest::DIR)).unwrap();
        let input = format!(
            "attach {}\ncreate 10 2 1\nstat 10 2 1\nstat 10 2 0\nquit\ncreate 10 2 0\n",
            t.pool_path().display()
        );
        let mut out = Vec::new();
        worker_main(input.as_bytes(), &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert!(lines[0].starts_with(&format!("{TAG} ready ")));
        assert!(lines[1].starts_with(&format!("{TAG} done ")));
        assert!(lines[2].starts_with(&format!("{TAG} done ")));
        // Thread 0's files were never made: its stat phase fails, and says why.
        assert!(lines[3].starts_with(&format!("{TAG} error ")), "{out}");
        // The worker's creates are in the pool this process has open.
        assert!(crate::Target::stat(&t, Path::new("mdtest/t1.f4")).is_ok());
    }

    /// This test binary, run again as a worker ([`worker_entry`]).
    pub(crate) fn test_worker() -> WorkerCommand {
        WorkerCommand {
            program: std::env::current_exe().unwrap(),
            args: vec!["--exact".into(), "workers::tests::worker_entry".into()],
            env: vec![(WORKER_ENV.into(), "1".into())],
        }
    }

    #[test]
    fn spawned_workers_run_a_phase_together() {
        let t = small();
        crate::Target::mkdir(&t, Path::new(crate::mdtest::DIR)).unwrap();
        let cmd = test_worker();
        let mut w = Workers::spawn(&cmd, 2).unwrap();
        let pool = t.pool_path().display().to_string();
        let ready = w.all(|_| format!("attach {pool}"), "ready").unwrap();
        assert_eq!(ready.len(), 2);
        // Each replies its attach time, then its populate time.
        assert!(ready.iter().all(|r| r.len() == 2), "{ready:?}");
        let spans = w.all(|i| format!("create 20 2 {i}"), "done").unwrap();
        assert!(
            spans.iter().all(|s| s.len() == 2 && s[0] <= s[1]),
            "{spans:?}"
        );
        let err = w.all(|i| format!("create 20 2 {i}"), "done").unwrap_err();
        assert!(err.to_string().contains("exists"), "{err:#}");
        w.quit().unwrap();
        assert_eq!(
            crate::Target::readdir(&t, Path::new("mdtest"))
                .unwrap()
                .len(),
            20
        );
    }
}
