//! FUSE over io_uring (LynxFS addition, see `LYNXFS-CHANGES.md`).
//!
//! With `FUSE_OVER_IO_URING` agreed at INIT, the kernel keeps one request queue per
//! possible CPU and hands a request to the queue of the CPU that made it. Each queue
//! here is one thread, pinned to its CPU, with its own ring and a few registered
//! entries (a header buffer and a payload buffer each). A completion on an entry is a
//! request; its reply is written into the same buffers and sent back with
//! `COMMIT_AND_FETCH`, which also re-arms the entry. The classic `/dev/fuse` loop
//! keeps running beside the queues: FORGET and INTERRUPT still come that way, and so
//! does everything until every queue has registered.
//!
//! A request is put back into the `/dev/fuse` layout (in-header, the opcode's fixed
//! argument, the rest) so fuser's parser and dispatch run unchanged.

use std::io;
use std::io::IoSlice;
use std::mem::size_of;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::thread::ThreadId;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::debug;
use log::error;
use log::warn;
use parking_lot::Mutex;
use zerocopy::FromBytes;
use zerocopy::IntoBytes;

use crate::Filesystem;
use crate::channel::Channel;
use crate::channel::ChannelSender;
use crate::ll::Operation;
use crate::ll::fuse_abi as abi;
use crate::reply::ReplyEmpty;
use crate::request::ReplyRoute;
use crate::request::RequestWithSender;
use crate::session::IoUringState;
use crate::session::SessionEventLoop;

/// `FUSE_URING_IN_OUT_HEADER_SZ`: room for the in-header (request) or out-header (reply).
const IN_OUT_SZ: usize = 128;
/// `FUSE_URING_OP_IN_OUT_SZ`: room for an opcode's fixed argument struct.
const OP_IN_SZ: usize = 128;
/// `FUSE_IO_URING_CMD_REGISTER`: hand an entry's buffers to the kernel.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: answer the entry's request and re-arm it.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// Entries per queue: background requests (readahead, async reads) do not stall a
/// queue while one request is served.
const QUEUE_DEPTH: usize = 4;
/// The most entries a queue grows to. A request answered later, from another thread
/// (a lock wait: SETLKW waits for the lock), keeps its entry until then, and the
/// kernel hands a queue's requests only to its free entries: with every entry held
/// by waits, the unlock that would end them could never arrive and the mount would
/// hang. So a queue keeps [`QUEUE_DEPTH`] entries free, registering more as requests
/// are held (each one a header and a payload buffer, the latter untouched but for
/// what requests write into it), up to this many.
const MAX_ENTRIES: usize = 1024;
/// How long a queue waits for a completion before looking at the stop flag.
const STOP_POLL: types::Timespec = types::Timespec::new().nsec(100_000_000);
/// `user_data` of the eventfd poll that wakes a queue for replies made on other threads.
const WAKE_TAG: u64 = u64::MAX;
/// Offset of `len` (u32) in `struct io_uring_sqe` (uapi `linux/io_uring.h`).
const SQE_LEN_OFFSET: usize = 24;

/// `struct fuse_uring_ent_in_out`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct EntInOut {
    flags: u64,
    /// The request's unique, to be given back with the commit.
    commit_id: u64,
    /// Bytes of the payload buffer in use (request: set by the kernel; reply: by us).
    payload_sz: u32,
    padding: u32,
    reserved: u64,
}

/// `struct fuse_uring_req_header`: `iov[0]` of an entry.
#[repr(C)]
struct RingHeader {
    in_out: [u8; IN_OUT_SZ],
    op_in: [u8; OP_IN_SZ],
    ent: EntInOut,
}

/// `struct fuse_uring_cmd_req`: the start of the SQE's 80-byte command area.
#[repr(C)]
#[derive(Clone, Copy, IntoBytes, zerocopy::Immutable)]
struct CmdReq {
    flags: u64,
    commit_id: u64,
    qid: u16,
    padding: [u8; 6],
}

const _: () = assert!(size_of::<EntInOut>() == 32);
const _: () = assert!(size_of::<RingHeader>() == 288);
const _: () = assert!(size_of::<CmdReq>() == 24);
const _: () = assert!(size_of::<squeue::Entry128>() == 128);
const _: () = assert!(size_of::<abi::fuse_in_header>() == 40);
const _: () = assert!(size_of::<abi::fuse_out_header>() == 16);

/// The payload buffer an entry needs: `max(FUSE_MIN_READ_BUFFER, max_write,
/// max_pages * PAGE_SIZE)`, as the kernel checks at registration.
pub(crate) fn payload_size(max_write: u32, max_pages: u16) -> usize {
    let pages = usize::from(max_pages) * page_size::get();
    8192.max(max_write as usize).max(pages)
}

/// The CPUs the kernel makes queues for (`/sys/devices/system/cpu/possible`, e.g.
/// `0-1` or `0,2-3`).
pub(crate) fn possible_cpus() -> io::Result<Vec<usize>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(text.trim())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {text:?}")))
}

fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// One registered entry: its buffers live as long as the queue (the kernel holds
/// their addresses from REGISTER until the ring is torn down).
struct RingEntry {
    header: NonNull<RingHeader>,
    payload: NonNull<u8>,
    payload_len: usize,
    /// `iov[0]` = header, `iov[1]` = payload; `sqe->addr` points here.
    iov: Box<[libc::iovec; 2]>,
    /// The unique of the request the entry holds (its commit id).
    commit_id: AtomicU64,
}

// SAFETY: the raw buffers are owned by the entry (freed in Drop) and used by one party
// at a time: the kernel from a REGISTER/COMMIT submission until the entry's completion,
// then the queue thread (reading the request), then the request's one reply (writing
// the answer before it submits the commit). fuser sends exactly one reply per request.
unsafe impl Send for RingEntry {}
// SAFETY: as for Send: no two threads touch the buffers at once (see above).
unsafe impl Sync for RingEntry {}

impl RingEntry {
    fn new(payload_len: usize) -> RingEntry {
        let header = Box::new(RingHeader {
            in_out: [0; IN_OUT_SZ],
            op_in: [0; OP_IN_SZ],
            ent: EntInOut::default(),
        });
        let header = NonNull::from(Box::leak(header));
        let payload = NonNull::from(Box::leak(vec![0u8; payload_len].into_boxed_slice()));
        let payload = payload.cast::<u8>();
        let iov = Box::new([
            libc::iovec {
                iov_base: header.as_ptr().cast(),
                iov_len: size_of::<RingHeader>(),
            },
            libc::iovec {
                iov_base: payload.as_ptr().cast(),
                iov_len: payload_len,
            },
        ]);
        RingEntry {
            header,
            payload,
            payload_len,
            iov,
            commit_id: AtomicU64::new(0),
        }
    }
}

impl Drop for RingEntry {
    fn drop(&mut self) {
        // SAFETY: both were leaked from boxes of these types and sizes in `new`, and the
        // queue (which owns the entries) is dropped only after its ring, so the kernel
        // no longer holds them.
        unsafe {
            drop(Box::from_raw(self.header.as_ptr()));
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.payload.as_ptr(),
                self.payload_len,
            )));
        }
    }
}

/// A queue: its ring, entries and the wake-up for replies made on other threads.
struct Queue {
    qid: u16,
    /// Declared before `entries`: the ring is closed (and the kernel lets go of the
    /// buffers) before they are freed.
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Serialises pushes to the submission queue.
    sq_lock: Mutex<()>,
    /// Entries whose reply was written on another thread, for the queue thread to commit.
    foreign: Mutex<Vec<usize>>,
    wake: OwnedFd,
    /// The registered entries, in order (set once each, never moved: the kernel holds
    /// their buffers' addresses, and replies find them by index).
    entries: Box<[std::sync::OnceLock<RingEntry>]>,
    /// How many of `entries` are registered.
    registered: std::sync::atomic::AtomicUsize,
    /// Entries whose request has been delivered and not yet answered.
    held: std::sync::atomic::AtomicUsize,
    payload_len: usize,
    thread: ThreadId,
    /// The `/dev/fuse` channel the commands name (kept open by this).
    ch: Channel,
}

impl Queue {
    fn new(qid: u16, ch: Channel, payload_len: usize) -> io::Result<Queue> {
        // Twice the entries, plus the wake-up poll, always fit in the submission queue.
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_coop_taskrun()
            .build((QUEUE_DEPTH * 2 + 2) as u32)?;
        // SAFETY: eventfd has no memory arguments; the result is checked before use.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `wake` is a new descriptor that nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(wake) };
        Ok(Queue {
            qid,
            ring,
            sq_lock: Mutex::new(()),
            foreign: Mutex::new(Vec::new()),
            wake,
            entries: (0..MAX_ENTRIES)
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            registered: std::sync::atomic::AtomicUsize::new(0),
            held: std::sync::atomic::AtomicUsize::new(0),
            payload_len,
            thread: std::thread::current().id(),
            ch,
        })
    }

    /// Registered entry `idx`.
    fn entry(&self, idx: usize) -> &RingEntry {
        self.entries[idx]
            .get()
            .expect("a ring entry the kernel names was registered")
    }

    /// Registers one more entry; false at [`MAX_ENTRIES`]. Called on the queue thread
    /// only (registrations, like commits, come from the task that serves the queue).
    fn grow(&self) -> io::Result<bool> {
        let idx = self.registered.load(Ordering::Acquire);
        if idx >= MAX_ENTRIES {
            return Ok(false);
        }
        let _ = self.entries[idx].set(RingEntry::new(self.payload_len));
        self.registered.store(idx + 1, Ordering::Release);
        self.push(&self.command(idx, CMD_REGISTER))?;
        Ok(true)
    }

    /// The URING_CMD SQE for `cmd_op` on entry `idx`.
    fn command(&self, idx: usize, cmd_op: u32) -> squeue::Entry128 {
        let entry = self.entry(idx);
        let req = CmdReq {
            flags: 0,
            commit_id: entry.commit_id.load(Ordering::Acquire),
            qid: self.qid,
            padding: [0; 6],
        };
        let mut cmd = [0u8; 80];
        cmd[..size_of::<CmdReq>()].copy_from_slice(req.as_bytes());
        let sqe = opcode::UringCmd80::new(types::Fd(self.ch.as_fd().as_raw_fd()), cmd_op)
            .cmd(cmd)
            .addr(Some(entry.iov.as_ptr() as u64))
            .build()
            .user_data(idx as u64);
        with_sqe_len(sqe, 2)
    }

    /// Pushes an SQE; the queue thread's next wait submits it.
    fn push(&self, sqe: &squeue::Entry128) -> io::Result<()> {
        let _guard = self.sq_lock.lock();
        loop {
            // SAFETY: pushes are serialised by `sq_lock`, and the SQE's iovec array and
            // buffers belong to the queue, which outlives the ring.
            let pushed = unsafe { self.ring.submission_shared().push(sqe) };
            if pushed.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// Arms the poll that wakes the queue thread when `wake` is written.
    fn arm_wake(&self) -> io::Result<()> {
        let poll = opcode::PollAdd::new(types::Fd(self.wake.as_raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(WAKE_TAG);
        self.push(&squeue::Entry128::from(poll))
    }

    /// Commits the replies written on other threads (the commit must come from the
    /// queue thread: the kernel delivers the entry's next request in the task that
    /// submitted the command).
    fn commit_foreign(&self) -> io::Result<()> {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `buf`; the eventfd is non-blocking.
        unsafe { libc::read(self.wake.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        let ready = std::mem::take(&mut *self.foreign.lock());
        for idx in ready {
            self.push(&self.command(idx, CMD_COMMIT_AND_FETCH))?;
        }
        self.arm_wake()
    }

    /// Writes a reply (as it would go to `/dev/fuse`) into entry `idx` and commits it.
    fn reply(&self, idx: usize, data: &[IoSlice<'_>]) -> io::Result<()> {
        let entry = self.entry(idx);
        self.held.fetch_sub(1, Ordering::AcqRel);
        let total: usize = data.iter().map(|d| d.len()).sum();
        let header_len = size_of::<abi::fuse_out_header>();
        let too_big = total < header_len || total - header_len > entry.payload_len;
        // SAFETY: this request's one reply owns the entry's buffers until the commit
        // below (see `RingEntry`); the pointers are valid for the sizes used.
        let (in_out, payload, ent) = unsafe {
            let h = entry.header.as_ptr();
            (
                &mut (*h).in_out,
                std::slice::from_raw_parts_mut(entry.payload.as_ptr(), entry.payload_len),
                &mut (*h).ent,
            )
        };
        if too_big {
            error!("FUSE reply of {total} bytes does not fit the ring entry; answering EIO");
            let out = abi::fuse_out_header {
                len: header_len as u32,
                error: -libc::EIO,
                unique: entry.commit_id.load(Ordering::Acquire),
            };
            in_out[..header_len].copy_from_slice(out.as_bytes());
            ent.payload_sz = 0;
        } else {
            scatter(data, &mut in_out[..header_len], payload);
            ent.payload_sz = (total - header_len) as u32;
        }
        if std::thread::current().id() == self.thread {
            return self.push(&self.command(idx, CMD_COMMIT_AND_FETCH));
        }
        self.foreign.lock().push(idx);
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from `one` to the eventfd.
        if unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Copies the bytes of `data` into `head` and then `tail` (which must hold the rest).
fn scatter(data: &[IoSlice<'_>], head: &mut [u8], tail: &mut [u8]) {
    let mut pos = 0;
    for d in data {
        let mut d: &[u8] = d;
        if pos < head.len() {
            let n = d.len().min(head.len() - pos);
            head[pos..pos + n].copy_from_slice(&d[..n]);
            pos += n;
            d = &d[n..];
        }
        let at = pos - head.len().min(pos);
        tail[at..at + d.len()].copy_from_slice(d);
        pos += d.len();
    }
}

/// Sets `sqe->len`, which `UringCmd80` (io-uring 0.7) does not expose; FUSE reads the
/// number of iovecs at `sqe->addr` from it.
fn with_sqe_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: `Entry128` is `repr(C)`, 128 bytes (asserted above), starting with the
    // kernel's `struct io_uring_sqe`, all plain integers: any bytes are a valid value.
    // `len` is the u32 at offset 24 of that struct.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    bytes[SQE_LEN_OFFSET..SQE_LEN_OFFSET + 4].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above, back to the same type.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(bytes) }
}

/// Where the reply to a request that came over a ring goes.
#[derive(Clone)]
pub(crate) struct UringSender {
    queue: Arc<Queue>,
    entry: usize,
}

impl std::fmt::Debug for UringSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "UringSender(queue {}, entry {})",
            self.queue.qid, self.entry
        )
    }
}

impl UringSender {
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        self.queue.reply(self.entry, data)
    }

    /// The `/dev/fuse` sender, for what only the device does (backing files).
    pub(crate) fn channel(&self) -> ChannelSender {
        self.queue.ch.sender()
    }
}

/// Pins the calling thread to `cpu`, so its queue is served where its requests start.
fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(io::Error::from)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(io::Error::from)
}

/// Reassembles a ring request into the `/dev/fuse` layout in `buf` (8-byte aligned
/// words); returns its length in bytes.
fn reassemble(entry: &RingEntry, buf: &mut Vec<u64>) -> io::Result<usize> {
    // SAFETY: the kernel completed this entry: it is the queue thread's until the reply.
    let (header, payload) = unsafe {
        (
            &*entry.header.as_ptr(),
            std::slice::from_raw_parts(entry.payload.as_ptr(), entry.payload_len),
        )
    };
    let in_len = size_of::<abi::fuse_in_header>();
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    entry
        .commit_id
        .store(header.ent.commit_id, Ordering::Release);
    let (in_header, _) = abi::fuse_in_header::read_from_prefix(&header.in_out[..])
        .map_err(|_| bad("ring in-header"))?;
    let len = in_header.len as usize;
    let payload_sz = header.ent.payload_sz as usize;
    let op_len = len
        .checked_sub(in_len + payload_sz)
        .filter(|&n| n <= OP_IN_SZ && payload_sz <= payload.len())
        .ok_or_else(|| bad("ring request lengths"))?;
    // Grown, never shrunk: the bytes below are all overwritten, so a request after a
    // smaller one costs no zeroing of what the last large one left.
    let words = len.div_ceil(8);
    if buf.len() < words {
        buf.resize(words, 0);
    }
    let bytes = &mut buf.as_mut_bytes()[..len];
    bytes[..in_len].copy_from_slice(&header.in_out[..in_len]);
    bytes[in_len..in_len + op_len].copy_from_slice(&header.op_in[..op_len]);
    bytes[in_len + op_len..].copy_from_slice(&payload[..payload_sz]);
    Ok(len)
}

/// Serves queue `qid` on the calling thread until the kernel ends its entries (unmount,
/// abort) or `stop` is set.
pub(crate) fn serve_queue<FS: Filesystem>(
    qid: usize,
    ch: Channel,
    payload_len: usize,
    stop: Arc<AtomicBool>,
    state: IoUringState,
    event_loop: SessionEventLoop<FS>,
) -> io::Result<()> {
    if let Err(e) = pin_to_cpu(qid) {
        warn!("io_uring queue {qid}: not pinned to its CPU: {e}");
    }
    let qid16 = u16::try_from(qid).map_err(|_| io::Error::other("queue id"))?;
    let queue = Arc::new(Queue::new(qid16, ch, payload_len)?);
    for _ in 0..QUEUE_DEPTH {
        queue.grow()?;
    }
    queue.arm_wake()?;
    let mut live = QUEUE_DEPTH;
    let mut served = false;
    let mut buf: Vec<u64> = Vec::new();
    let mut ready: Vec<(u64, i32)> = Vec::with_capacity(QUEUE_DEPTH + 1);
    while live > 0 && !stop.load(Ordering::Acquire) {
        let args = types::SubmitArgs::new().timespec(&STOP_POLL);
        match queue.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        // SAFETY: only this thread reads the completion queue.
        ready
            .extend(unsafe { queue.ring.completion_shared() }.map(|c| (c.user_data(), c.result())));
        // The requests just reaped were read now, whichever is served first.
        let start = crate::times::started(event_loop.times.as_ref());
        for (tag, res) in ready.drain(..) {
            if tag == WAKE_TAG {
                queue.commit_foreign()?;
                continue;
            }
            let idx = tag as usize;
            if res < 0 {
                // The kernel ends entries with an error on unmount or abort (ENOTCONN,
                // ECONNABORTED, ECANCELED); at registration it refuses the transport.
                debug!(
                    "io_uring queue {qid} entry {idx}: {}",
                    io::Error::from_raw_os_error(-res)
                );
                if !served && res != -libc::ENOTCONN {
                    // Refused before serving: the kernel falls back to /dev/fuse.
                    warn!(
                        "io_uring queue {qid}: {}",
                        io::Error::from_raw_os_error(-res)
                    );
                    state.set(false);
                }
                live -= 1;
                continue;
            }
            served = true;
            queue.held.fetch_add(1, Ordering::AcqRel);
            serve_entry(&queue, idx, &mut buf, &event_loop, start);
        }
        // Requests held past their dispatch (answered later from other threads) keep
        // their entries: keep QUEUE_DEPTH free for the requests still to come.
        while queue.registered.load(Ordering::Acquire)
            < queue.held.load(Ordering::Acquire) + QUEUE_DEPTH
            && queue.grow()?
        {
            live += 1;
        }
    }
    debug!("io_uring queue {qid} done");
    Ok(())
}

/// Parses and dispatches the request entry `idx` holds.
fn serve_entry<FS: Filesystem>(
    queue: &Arc<Queue>,
    idx: usize,
    buf: &mut Vec<u64>,
    event_loop: &SessionEventLoop<FS>,
    start: Option<std::time::Instant>,
) {
    let sender = UringSender {
        queue: queue.clone(),
        entry: idx,
    };
    let Some(req) = reassemble(queue.entry(idx), buf)
        .inspect_err(|e| error!("io_uring queue {}: {e}", queue.qid))
        .ok()
        .and_then(|len| {
            RequestWithSender::new(ReplyRoute::Uring(sender.clone()), &buf.as_bytes()[..len])
                .map(|req| req.timed(event_loop.times.as_ref(), start))
        })
    else {
        // Unreadable: answer EIO, which also gives the entry back to the kernel.
        let out = abi::fuse_out_header {
            len: size_of::<abi::fuse_out_header>() as u32,
            error: -libc::EIO,
            unique: queue.entry(idx).commit_id.load(Ordering::Acquire),
        };
        let _ = sender.send(&[IoSlice::new(out.as_bytes())]);
        return;
    };
    if let Ok(Operation::Destroy(_)) = req.request.operation() {
        req.reply::<ReplyEmpty>().ok();
    } else {
        req.dispatch(event_loop);
    }
}
