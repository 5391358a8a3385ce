//! LynxFS addition (`LYNXFS-CHANGES.md` item 9): the daemon's own time per request
//! type, from the moment a request was read (its io_uring completion reaped, or its
//! `/dev/fuse` read returned) to the moment its reply was written (into the ring
//! entry, with the commit queued; before the `/dev/fuse` write, whose system call is
//! the kernel's work). Opt-in ([`crate::Session::time_requests`]): a session without
//! it reads no clock and allocates nothing per request.
//!
//! Each opcode keeps a histogram with 32 buckets per power of two (values within
//! about 3% of the truth), shared by every serving thread through atomic counters.

use std::io;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::ll::fuse_abi::fuse_opcode;

/// Sub-buckets per power of two (`1 << SUB_BITS`).
const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
/// Buckets per opcode: values below `SUB` exactly, then `SUB` per power of two.
const BUCKETS: usize = (64 - SUB_BITS as usize) * SUB + SUB;
/// Opcodes 0..OPCODES are kept apart; anything above (CUSE_INIT) is not timed.
const OPCODES: usize = 64;

/// The histogram bucket of `ns`.
fn bucket(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros();
    let sub = (ns >> (msb - SUB_BITS)) as usize & (SUB - 1);
    (msb - SUB_BITS + 1) as usize * SUB + sub
}

/// The smallest value that falls in bucket `b`.
fn bucket_floor(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let msb = (b / SUB) as u32 + SUB_BITS - 1;
    let sub = (b % SUB) as u64;
    (1u64 << msb) | (sub << (msb - SUB_BITS))
}

/// One opcode's times.
struct Opcode {
    count: AtomicU64,
    total_ns: AtomicU64,
    buckets: Box<[AtomicU64]>,
}

impl Opcode {
    fn new() -> Opcode {
        Opcode {
            count: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// The daemon's own time per request type, for a whole session.
pub struct RequestTimes {
    ops: Box<[Opcode]>,
}

impl std::fmt::Debug for RequestTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestTimes")
    }
}

impl Default for RequestTimes {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestTimes {
    /// Empty histograms for every opcode.
    pub fn new() -> RequestTimes {
        RequestTimes {
            ops: (0..OPCODES).map(|_| Opcode::new()).collect(),
        }
    }

    fn record(&self, opcode: u32, ns: u64) {
        let Some(op) = self.ops.get(opcode as usize) else {
            return;
        };
        op.count.fetch_add(1, Ordering::Relaxed);
        op.total_ns.fetch_add(ns, Ordering::Relaxed);
        op.buckets[bucket(ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// Writes one line per opcode that was timed: its name, count, total nanoseconds,
    /// then `FLOOR:COUNT` for each non-empty bucket (FLOOR the bucket's smallest value
    /// in nanoseconds), so that runs can be merged before percentiles are taken.
    pub fn write_to(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "# fuser request times: opcode count total_ns floor_ns:count..."
        )?;
        for (code, op) in self.ops.iter().enumerate() {
            let count = op.count.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let name = fuse_opcode::try_from(code as u32)
                .map_or_else(|_| format!("OPCODE_{code}"), |o| format!("{o:?}"));
            write!(
                out,
                "{name} {count} {}",
                op.total_ns.load(Ordering::Relaxed)
            )?;
            for (b, n) in op.buckets.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    write!(out, " {}:{n}", bucket_floor(b))?;
                }
            }
            writeln!(out)?;
        }
        Ok(())
    }
}

/// A request being timed: recorded when its reply is written.
#[derive(Debug, Clone)]
pub(crate) struct Timer {
    times: Arc<RequestTimes>,
    opcode: u32,
    start: Instant,
}

impl Timer {
    pub(crate) fn new(times: Arc<RequestTimes>, opcode: u32, start: Instant) -> Timer {
        Timer {
            times,
            opcode,
            start,
        }
    }

    pub(crate) fn stop(&self) {
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.times.record(self.opcode, ns);
    }
}

/// The clock reading for requests just read, if `times` is on.
pub(crate) fn started(times: Option<&Arc<RequestTimes>>) -> Option<Instant> {
    times.map(|_| Instant::now())
}
