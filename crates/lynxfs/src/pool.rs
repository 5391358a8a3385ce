//! The pool's life: mkfs, open (validate, then recover or load the saved allocator
//! state), clean close. A pool file is held with an advisory lock (`flock`) while open,
//! so a second process gets a clear error instead of a second writer.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::alloc::{Allocators, UsedSets};
use crate::error::{Error, Result};
use crate::format::device::{DeviceHeader, DeviceRecord};
use crate::format::layout::{DENTRY_SIZE, INODE_SIZE};
use crate::format::superblock::{
    SbProblem, COMPAT_DATA_INPLACE, INCOMPAT_CWON, INCOMPAT_UNDO, INCOMPAT_XATTR_LOG,
    MAX_RESERVED_PERCENT, SB_LEN,
};
use crate::format::{inode, Geometry, Layout, Superblock, BLOCK, ROOT_INO};
use crate::log::undo::{Txn, UndoArea};
use crate::log::{recover, Journals, RecoveryReport};
use crate::pmem::device::Device;
use crate::pmem::{Backend, Mapping, Pm};
use crate::progress::{Progress, Quiet};
use crate::runtime::Span;
use crate::runtime::{attach, Attachment, RuntimeFile};
use crate::time::now_ns;
use std::sync::Arc;

pub mod device;
pub mod export;
use export::OpenFor;
mod claim;
mod file;
mod mode;
mod runtime_layout;
pub use file::POOL_MODE;
pub use mode::{BadDataMode, DataMode};
pub use runtime_layout::RuntimeLayout;

/// What `mkfs` makes.
#[derive(Clone, Debug)]
pub struct MkfsOptions {
    pub size: u64,
    pub lanes: u32,
    /// Total inodes; default one per 8 KiB of pool.
    pub inodes: Option<u64>,
    /// Replace an existing file of the caller's, or format a block device.
    pub force: bool,
    /// Owner (uid, gid) of the root directory; default: the caller's effective ids.
    pub root_owner: (u32, u32),
    /// The pool's default data mode (a mount may override it).
    pub data: DataMode,
    /// NUMA nodes the pool spans (a divisor of `lanes`). `None`: the machine's node
    /// count, or one node when `lanes` cannot be split evenly among them (the default
    /// lane count can: it is rounded up to a multiple).
    pub nodes: Option<u32>,
    /// Percent of the blocks, inodes and dentries held back for root (0 to
    /// [`MAX_RESERVED_PERCENT`]), as ext4's reserved blocks.
    pub reserved_percent: u32,
    /// A hybrid pool: file data on this device or file (made or, with `force`,
    /// formatted), metadata in the pool (`format::device`).
    pub data_device: Option<PathBuf>,
    /// The data device's size in bytes (header, data area, export area). `None`: a
    /// block device's whole size; for a file, [`DEFAULT_DEVICE_FACTOR`] times the
    /// pool's (the file is sparse: it takes disk space as data is written).
    pub device_size: Option<u64>,
}

/// A new data device file is this many times the pool's size unless told otherwise:
/// persistent memory is small and dear, disks large (a sparse file costs only what is
/// written).
pub const DEFAULT_DEVICE_FACTOR: u64 = 8;

/// The reserve a new pool holds back for root, as ext4's.
pub const DEFAULT_RESERVED_PERCENT: u32 = 5;

impl MkfsOptions {
    pub fn new(size: u64) -> Self {
        let nodes = crate::alloc::lane::machine_nodes();
        MkfsOptions {
            size,
            lanes: default_lanes().div_ceil(nodes) * nodes,
            nodes: None,
            inodes: None,
            force: false,
            root_owner: (file::caller_uid(), file::caller_gid()),
            data: DataMode::Atomic,
            reserved_percent: DEFAULT_RESERVED_PERCENT,
            data_device: None,
            device_size: None,
        }
    }
    /// The node count: the one asked for, else the machine's if the lanes split evenly
    /// among its nodes, else 1.
    fn nodes(&self, lanes: u32) -> u32 {
        self.nodes.unwrap_or_else(|| {
            let machine = crate::alloc::lane::machine_nodes();
            if lanes.is_multiple_of(machine) {
                machine
            } else {
                1
            }
        })
    }

    /// The layout of the pool, with `device_blocks` blocks on a data device (0: none).
    fn geometry(&self, device_blocks: u64) -> Result<Layout> {
        if self.reserved_percent > MAX_RESERVED_PERCENT {
            return Err(Error::Invalid(format!(
                "a reserve of {}%: it must be 0 to {MAX_RESERVED_PERCENT}%",
                self.reserved_percent
            )));
        }
        let geo = Geometry::for_size(self.size, self.lanes, self.inodes);
        let nodes = self.nodes(geo.lanes);
        let max = crate::format::layout::MAX_NODES;
        if nodes == 0 || nodes > max {
            return Err(Error::Invalid(format!(
                "{nodes} NUMA nodes: a pool spans 1 to {max}"
            )));
        }
        if !geo.lanes.is_multiple_of(nodes) {
            return Err(Error::Invalid(format!(
                "{} lanes cannot be split evenly among {nodes} NUMA nodes (the lane count \
                 must be a multiple of the node count)",
                geo.lanes
            )));
        }
        let geo = Geometry {
            device_blocks,
            ..geo.with_nodes(nodes)
        };
        if self.size < crate::format::layout::MIN_POOL {
            return Err(Error::Invalid(format!(
                "pool size {} is below the minimum of {} bytes",
                self.size,
                crate::format::layout::MIN_POOL
            )));
        }
        Layout::compute(geo).ok_or_else(|| {
            let device = match device_blocks {
                0 => String::new(),
                n => format!(" and the bitmap of a data device of {n} blocks"),
            };
            Error::Invalid(format!(
                "a pool of {} bytes cannot hold {} lanes and {} inodes{device}",
                self.size,
                geo.lanes,
                geo.inodes_per_lane * geo.lanes as u64
            ))
        })
    }
}

/// One lane per CPU.
pub fn default_lanes() -> u32 {
    crate::cpu::count() as u32
}

/// Bytes of each lane's inodes, dentries and metadata blocks that [`Pool::populate`]
/// maps in: 16,384 inodes and 4 MiB of directory-log pages a lane.
const METADATA_AHEAD: u64 = 4 << 20;

/// How to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Attached: any number of processes of the pool file's owner work on the pool at
    /// once, sharing the runtime state (`crate::runtime`).
    ReadWrite,
    /// Alone: refused while any other process has the pool open (`fsck --repair`).
    Exclusive,
    /// The file is mapped privately: recovery may run in memory, the file is untouched.
    ReadOnly,
}

/// An open pool: the mapping, its layout, the allocators and the journals.
pub struct Pool<B: Backend> {
    pub pm: Pm<B>,
    pub layout: Layout,
    pub alloc: Allocators,
    pub journals: Journals,
    /// This mount's epoch (stamps DRAM pointers stored in the pool).
    pub epoch: u64,
    /// Set when this open ran recovery.
    pub recovery: Option<RecoveryReport>,
    pub was_clean: bool,
    sb: Mutex<Superblock>,
    path: PathBuf,
    access: Access,
    /// The pool file, open for the pool's life: its `flock` and the attachment's
    /// OFD locks are on it (replaced by a fork child's own open, see
    /// [`Pool::rejoin_after_fork`]).
    lock_file: Mutex<Option<File>>,
    /// Set while [`Pool::hold_for_fork`] holds `lock_file` across a fork.
    lock_file_held_for_fork: AtomicBool,
    /// Made by [`Pool::hold_for_fork`] for the fork's child: its own open of the pool
    /// file, `flock`ed, with its share of the attachment byte (see
    /// [`Pool::rejoin_after_fork`]).
    fork_spare: Mutex<Option<(File, attach::ForkLocks)>>,
    closed: AtomicBool,
    /// The shared runtime state this process is attached to (`None`: private state,
    /// for pools in memory and exclusive opens).
    runtime: Option<Arc<Attachment>>,
    /// Where each part of the runtime state lives.
    pub runtime_layout: RuntimeLayout,
    /// The allocators' part of the runtime state (a repair rebuilds it).
    alloc_span: Span,
    /// The journals' lane locks and sequence numbers (a repair resets them).
    journal_span: Span,
    /// This process's data mode: the pool's, unless the mount chose another.
    data_mode: AtomicBool,
    /// A hybrid pool's data device, with its header (`None`: data in the pool); boxed,
    /// so that an all-PM pool's fields stay as they were.
    device: Option<Box<(Device, DeviceHeader)>>,
    /// A hybrid pool's transactions (`INCOMPAT_UNDO`, `log::undo`, `data::txn`); `None`: writes
    /// flush the device before they commit.
    txn: Option<Box<Txn>>,
    /// The transactions' part of the runtime state (a repair resets it).
    txn_span: Span,
    /// Creates use consistency without ordering (`INCOMPAT_CWON`, `log::cwon`).
    pub cwon: bool,
    /// Large attribute sets are logs (`INCOMPAT_XATTR_LOG`, `data::xattr`).
    pub xattr_log: bool,
}

impl<B: Backend> Pool<B> {
    /// Format a pool file or block device.
    pub fn mkfs(path: &Path, opts: &MkfsOptions, backend: B) -> Result<()> {
        Self::mkfs_with_progress(path, opts, backend, &Quiet)
    }

    /// [`Pool::mkfs`], telling `progress` how the zeroing of a device's metadata goes.
    ///
    /// A pool file is built beside the path and renamed into place ([`file`]): a failed
    /// mkfs leaves the path as it was. A block device cannot be replaced: it is formatted
    /// in place, its metadata regions (every byte before the data blocks) zeroed through
    /// the persistence layer first; data blocks need no zeroing, since a block is always
    /// written (or zeroed) before anything reads it. A device, like an existing file, is
    /// only formatted with `force`.
    pub fn mkfs_with_progress(
        path: &Path,
        opts: &MkfsOptions,
        backend: B,
        progress: &dyn Progress,
    ) -> Result<()> {
        if opts.device_size.is_some() && opts.data_device.is_none() {
            return Err(Error::Invalid(
                "a device size without a data device (--data-device)".into(),
            ));
        }
        let device_blocks = match &opts.data_device {
            Some(d) => device::blocks_for(d, path, opts)?,
            None => 0,
        };
        let layout = opts.geometry(device_blocks)?;
        if let Some(d) = &opts.data_device {
            device::check_room(d, path, opts)?;
        }
        let len = usize::try_from(opts.size)
            .map_err(|_| Error::Invalid(format!("pool size {} is out of range", opts.size)))?;
        let target = file::examine(path, opts.force)?;
        let pool_uuid = uuid();
        // The device first, durably: the pool's superblocks, written last, name it.
        let hybrid = match &opts.data_device {
            Some(d) => Some(device::make(d, path, opts.force, pool_uuid, &layout)?),
            None => None,
        };
        let new = New {
            uuid: pool_uuid,
            device: hybrid.as_ref().map(|h| &h.record),
        };
        let replace = match target {
            file::Target::Device(dev) => {
                return mkfs_device(&dev, path, opts, (layout, &new), backend, progress)
            }
            file::Target::New => None,
            file::Target::Replace(old) => Some(old),
        };
        let staged = file::Staged::create(path, opts.size)?;
        let pm = Pm::new(Mapping::map_file(staged.file(), len, path)?, backend);
        format(&pm, layout, opts, &new);
        drop(pm);
        // `replace` (the old file, locked) is held until the new pool has taken its place.
        staged.commit(replace.is_some())
    }

    /// The size of `path` if it is a block device (`None` for anything else), so that
    /// mkfs can default to the whole device.
    pub fn device_size(path: &Path) -> Result<Option<u64>> {
        // Looked at before opening: opening a FIFO, say, would block.
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if !is_block_device(&meta) {
            return Ok(None);
        }
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        file_size(&file, &meta, path).map(Some)
    }

    /// A formatted pool in anonymous memory (tests, the crash checker).
    pub fn create_in_memory(opts: &MkfsOptions, backend: B) -> Result<Pool<B>> {
        let layout = opts.geometry(0)?;
        if opts.data_device.is_some() {
            return Err(Error::Invalid(
                "a pool in memory keeps its data in memory (no data device)".into(),
            ));
        }
        let pm = Pm::new(Mapping::anonymous(opts.size as usize)?, backend);
        let new = New {
            uuid: uuid(),
            device: None,
        };
        format(&pm, layout, opts, &new);
        let path = Path::new("<memory>");
        let sb = pick_superblock(path, pm.len(), |off, buf| pm.read(off, buf))?;
        Self::start(pm, sb, path, None, Access::ReadWrite, &Quiet)
    }

    /// Open a copy of a pool image held in memory (crash images, corruption tests).
    pub fn open_image(img: &[u8], backend: B) -> Result<Pool<B>> {
        let path = Path::new("<memory>");
        let sb = pick_superblock(path, img.len() as u64, |off, buf| {
            buf.copy_from_slice(&img[off as usize..off as usize + buf.len()])
        })?;
        let pm = Pm::from_image(&img[..sb.geo.pool_size as usize], backend)?;
        Self::start(pm, sb, path, None, Access::ReadWrite, &Quiet)
    }

    /// Open a pool file, validating everything before trusting it.
    pub fn open(path: &Path, access: Access, backend: B) -> Result<Pool<B>> {
        Self::open_with_progress(path, access, backend, &Quiet)
    }

    /// [`Pool::open`], telling `progress` how recovery goes when the pool was not
    /// closed cleanly.
    ///
    /// Before mapping, a pool file is checked so that no later access can fault: its
    /// size covers the pool, and every byte has storage behind it (reserved now for a
    /// read-write open; for a read-only one on tmpfs, the holes must fit in what is
    /// free). A read-write open also refuses a file that someone other than the caller
    /// or root could write, and no open follows another user's symlink.
    pub fn open_with_progress(
        path: &Path,
        access: Access,
        backend: B,
        progress: &dyn Progress,
    ) -> Result<Pool<B>> {
        Self::open_with_device(path, access, backend, progress, None)
    }

    /// [`Pool::open_with_progress`], a hybrid pool's data device at `device` instead
    /// of where the pool records it (a device that moved: another path, or another
    /// machine); it is checked as at any open. Ignored for an all-PM pool.
    pub fn open_with_device(
        path: &Path,
        access: Access,
        backend: B,
        progress: &dyn Progress,
        device: Option<&Path>,
    ) -> Result<Pool<B>> {
        Self::open_for(path, access, backend, progress, device, OpenFor::Use)
    }

    /// [`Pool::open_with_device`]; `purpose` says whether a read-write open of a hybrid
    /// pool marks its device's export stale (`export::OpenFor`).
    pub(crate) fn open_for(
        path: &Path,
        access: Access,
        backend: B,
        progress: &dyn Progress,
        device: Option<&Path>,
        purpose: OpenFor,
    ) -> Result<Pool<B>> {
        file::check_link(path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(access != Access::ReadOnly)
            // A FIFO at the path must not hang the open (its type is checked next);
            // for a file or a device the flag changes nothing.
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| match e.kind() {
                ErrorKind::NotFound => Error::Missing {
                    path: path.to_path_buf(),
                },
                _ => Error::io(path, e),
            })
            .map(crate::runtime::out_of_the_way)?;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        if !meta.is_file() && !is_block_device(&meta) {
            return Err(Error::Invalid(format!(
                "{}: not a regular file or block device",
                path.display()
            )));
        }
        if access != Access::ReadOnly {
            file::check_trusted(&meta, path, file::Holds::Pool)?;
        }
        lock(&file, path, access)?;
        // A read-only open works on a private copy: with a process attached, the copy
        // could hold its operations half done, so the two exclude each other (each
        // looks for the other after taking its own lock: one of two racing sees it).
        if access == Access::ReadOnly {
            let io = |e| Error::io(path, e);
            attach::claim_read_only(&file).map_err(io)?;
            if still_after_grace(|| attach::attached_elsewhere(&file)).map_err(io)? {
                return Err(Error::Locked {
                    path: path.to_path_buf(),
                });
            }
        }
        let size = file_size(&file, &meta, path)?;
        let sb = pick_superblock(path, size, |off, buf| {
            // A short read leaves zeros, which fail the magic check.
            let _ = file.read_at(buf, off);
        })?;
        if sb.data_device.is_some() && !sb.layout.has_device_blocks() {
            return Err(Error::Invalid(format!(
                "{}: a hybrid pool of an earlier format (its file data at the pool's own \
                 block numbers, no device block count), which this build does not open",
                path.display()
            )));
        }
        let len = sb.geo.pool_size;
        if meta.is_file() && file::unbacked(&meta, len) > 0 {
            match access {
                Access::ReadWrite | Access::Exclusive => file::reserve(&file, len, path)?,
                Access::ReadOnly => file::check_readable(&meta, len, path)?,
            }
        }
        let map = match access {
            Access::ReadWrite | Access::Exclusive => Mapping::map_file(&file, len as usize, path)?,
            Access::ReadOnly => Mapping::map_private(&file, len as usize, path)?,
        };
        let mut pm = Pm::new(map, backend);
        if access != Access::ReadOnly {
            // `file` is kept open for the pool's life (`lock_file`).
            pm.write_through(file.as_raw_fd());
        }
        let found = match sb.data_device {
            Some(_) => Some(Box::new(device::attach(
                &pm, path, &file, &sb, access, device, purpose,
            )?)),
            None => None,
        };
        let attachment = match access {
            Access::ReadWrite => {
                let shape = RuntimeLayout::compute(&sb.layout).shape();
                let a = Attachment::new(RuntimeFile::attach(path, &file, sb.uuid, shape)?);
                if still_after_grace(|| attach::read_only_elsewhere(&file))
                    .map_err(|e| Error::io(path, e))?
                {
                    let _ = a.detach(|| Ok(()));
                    return Err(Error::Locked {
                        path: path.to_path_buf(),
                    });
                }
                Some(a)
            }
            Access::Exclusive | Access::ReadOnly => None,
        };
        let opened = Opened {
            lock: Some(file),
            access,
            attachment,
            device: found,
        };
        Self::start_attached(pm, sb, path, opened, progress)
    }

    fn start(
        pm: Pm<B>,
        sb: Superblock,
        path: &Path,
        lock: Option<File>,
        access: Access,
        progress: &dyn Progress,
    ) -> Result<Pool<B>> {
        if sb.data_device.is_some() {
            // Its file data is on a device this image does not have.
            return Err(Error::Invalid(format!(
                "{}: a hybrid pool opens with its data device (Pool::open)",
                path.display()
            )));
        }
        let opened = Opened {
            lock,
            access,
            attachment: None,
            device: None,
        };
        Self::start_attached(pm, sb, path, opened, progress)
    }

    /// Start using the pool: the first process (or one with private runtime state)
    /// recovers it or loads the saved allocator state and marks it in use; a process
    /// attaching to a pool others already use takes the shared state as it is.
    fn start_attached(
        pm: Pm<B>,
        sb: Superblock,
        path: &Path,
        opened: Opened,
        progress: &dyn Progress,
    ) -> Result<Pool<B>> {
        let Opened {
            lock,
            access,
            attachment,
            device,
        } = opened;
        let mut sb = match attachment {
            Some(_) => current_superblock(&pm, path, &sb)?,
            None => sb,
        };
        let layout = sb.layout;
        let runtime_layout = RuntimeLayout::compute(&layout);
        let runtime = attachment.map(Arc::new);
        if let Some(a) = &runtime {
            crate::runtime::attachment::track(a);
        }
        let span = |range: &std::ops::Range<usize>| -> Result<Span> {
            match &runtime {
                Some(a) => Ok(Span::new(a.region(), range.clone())),
                None => Span::anonymous(range.len()).map_err(|e| Error::io(path, e)),
            }
        };
        let alloc_span = span(&runtime_layout.alloc)?;
        let journal_span = span(&runtime_layout.journals)?;
        let txn_span = span(&runtime_layout.txn)?;
        let undo =
            (device.is_some() && sb.incompat & INCOMPAT_UNDO != 0).then(|| UndoArea::of(&layout));
        let watch: Arc<dyn crate::runtime::Watch + Send + Sync> = match &runtime {
            Some(a) => a.clone(),
            None => Arc::new(crate::runtime::Private),
        };
        let was_clean = sb.clean;
        let first = runtime.as_ref().is_none_or(|a| a.first());
        let reserve = sb.reserved_percent;
        let (alloc, recovery) = if first {
            if let Some(u) = undo {
                // Metadata of writes whose transaction did not commit goes back to its
                // original before the walk reads any map (journals first: a committed
                // record's words are newer than any original).
                for lane in 0..layout.lanes() {
                    crate::log::journal::replay(&pm, &layout, lane);
                }
                crate::log::undo::roll_back(&pm, &layout, u);
            }
            let (mut used, recovery) = if was_clean {
                (load_state(&pm, &layout), None)
            } else {
                let (used, rep) = recover(&pm, &layout, sb.incompat & INCOMPAT_CWON != 0, progress)
                    .map_err(|w| Error::corrupt(path, w))?;
                (used, Some(rep))
            };
            if let Some(u) = undo {
                u.mark(&mut used.blocks);
            }
            sb.clean = false;
            sb.epoch += 1;
            sb.generation += 1;
            write_superblock(&pm, &sb);
            (
                Allocators::build(alloc_span.clone(), &layout, &used),
                recovery,
            )
        } else {
            (Allocators::attach(alloc_span.clone(), &layout), None)
        };
        let alloc = alloc.with_reserve(&layout, reserve);
        if let Some(a) = &runtime {
            a.publish()?;
        }
        let epoch = sb.epoch;
        let inplace = sb.compat & COMPAT_DATA_INPLACE != 0;
        Ok(Pool {
            cwon: sb.incompat & INCOMPAT_CWON != 0,
            xattr_log: sb.incompat & INCOMPAT_XATTR_LOG != 0,
            data_mode: AtomicBool::new(inplace),
            device,
            alloc,
            runtime,
            runtime_layout,
            alloc_span,
            txn: undo.map(|u| Box::new(Txn::new(txn_span.clone(), u, watch.clone()))),
            txn_span,
            journals: Journals::new(journal_span.clone(), layout.lanes(), watch),
            journal_span,
            pm,
            layout,
            epoch,
            recovery,
            was_clean,
            sb: Mutex::new(sb),
            path: path.to_path_buf(),
            access,
            lock_file: Mutex::new(lock),
            lock_file_held_for_fork: AtomicBool::new(false),
            fork_spare: Mutex::new(None),
            closed: AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn access(&self) -> Access {
        self.access
    }
    pub fn superblock(&self) -> Superblock {
        self.sb.lock().clone()
    }

    /// A hybrid pool's data device (`None`: file data is in the pool).
    #[inline]
    pub fn device(&self) -> Option<&Device> {
        self.device.as_ref().map(|d| &d.0)
    }

    /// A hybrid pool's transactions (`None`: every write is durable when it returns).
    #[inline]
    pub fn txn(&self) -> Option<&Txn> {
        self.txn.as_deref()
    }

    /// Commit the running transaction of a hybrid pool (fsync, sync, close): every
    /// write that returned before is durable after. Nothing to do in other pools.
    pub fn commit(&self) -> Result<()> {
        match self.txn() {
            Some(t) => t.commit(self),
            None => Ok(()),
        }
    }

    /// fsync of inode `ino` in a hybrid pool: commit the writes of it not yet committed
    /// (with whatever else their transaction holds), or nothing if there are none, so
    /// an fsync of a directory or of a file whose data is on the device costs no disk
    /// flush. Nothing to do in other pools.
    pub fn commit_for(&self, ino: u64) -> Result<()> {
        match self.txn() {
            Some(t) => t.commit_for(self, ino),
            None => Ok(()),
        }
    }

    /// Whether [`Self::commit_for`] of `ino` would commit (and so wait for the
    /// device): a hybrid pool holds writes of it not yet committed.
    pub fn commit_needed_for(&self, ino: u64) -> Result<bool> {
        match self.txn() {
            Some(t) => t.needed_for(self, ino),
            None => Ok(false),
        }
    }

    /// [`Self::commit`] if a hybrid pool has writes not yet committed (one load
    /// otherwise).
    #[inline]
    pub fn commit_pending(&self) -> Result<()> {
        match self.txn() {
            Some(t) if t.pending() => t.commit(self),
            _ => Ok(()),
        }
    }

    /// The runtime state's generation (bumped by every repair; 0 when private).
    pub fn runtime_generation(&self) -> u64 {
        use crate::runtime::Runtime;
        self.runtime.as_ref().map_or(0, |a| a.generation())
    }

    /// A hybrid pool's data device's header.
    pub fn device_header(&self) -> Option<&DeviceHeader> {
        self.device.as_ref().map(|d| &d.1)
    }

    /// Before the first change of inode `ino` (or of a directory's entries) since its
    /// create: settle its dentry's check word (`log::cwon::settle`; nothing on pools
    /// without `INCOMPAT_CWON`). Safe against a concurrent removal of the name (compare-and-swap).
    #[inline]
    pub fn settle(&self, ino: u64) {
        self.settle_known(ino);
    }

    /// [`Pool::settle`], true when nothing is left to settle for this incarnation of
    /// `ino` (see `log::cwon::settle`; always on pools without `INCOMPAT_CWON`).
    #[inline]
    pub fn settle_known(&self, ino: u64) -> bool {
        !self.cwon || crate::log::cwon::settle(&self.pm, &self.layout, ino)
    }

    /// How this process's writes treat allocated blocks (docs/CONSISTENCY.md, "write").
    #[inline]
    pub fn data_mode(&self) -> DataMode {
        if self.data_mode.load(Ordering::Relaxed) {
            DataMode::Inplace
        } else {
            DataMode::Atomic
        }
    }

    /// Override the pool's data mode for this process's writes (a mount's `data=`).
    pub fn set_data_mode(&self, mode: DataMode) {
        self.data_mode
            .store(mode == DataMode::Inplace, Ordering::Relaxed);
    }

    /// Before a fork (the forking thread): take this process's locks on its
    /// attachment, so that the child never inherits one held by a thread it does not
    /// have; released by [`Pool::let_go_after_fork`] in the parent and in the child.
    ///
    /// It also makes the child's own open of the pool file, with the child's locks
    /// on it (the fork spare): the child then joins with no system call of its own
    /// (docs/DESIGN-NOTES.md, "Fork children join without system calls"). Without
    /// one (an error here), the child opens its own as before.
    pub(crate) fn hold_for_fork(&self) {
        let held = self.lock_file.lock();
        let spare = held.as_ref().and_then(|f| self.fork_spare_of(f).ok());
        *self.fork_spare.lock() = spare;
        std::mem::forget(held);
        self.lock_file_held_for_fork.store(true, Ordering::Release);
        if let Some(a) = &self.runtime {
            a.hold_for_fork();
        }
    }

    /// After a fork, in the parent and in the child: let go of what
    /// [`Pool::hold_for_fork`] took (nothing when it did not run).
    pub(crate) fn let_go_after_fork(&self) {
        if let Some(a) = &self.runtime {
            a.let_go_after_fork();
        }
        if self.lock_file_held_for_fork.swap(false, Ordering::AcqRel) {
            // SAFETY: `hold_for_fork` took the lock in the thread that forked (the
            // child's only thread) and forgot its guard, then set the flag this call
            // cleared: the lock is held, and nothing else releases it.
            unsafe {
                self.lock_file
                    .force_unlock(parking_lot::lock_api::GuardNoSend::new())
            };
        }
    }

    /// A new open of the pool file (`inherited`, this process's) for a fork child,
    /// `flock`ed as this process's is, and the child's locks on it. Nothing when
    /// this process is not attached to shared runtime state.
    fn fork_spare_of(&self, inherited: &File) -> Result<(File, attach::ForkLocks)> {
        let Some(a) = &self.runtime else {
            return Err(Error::Invalid("the pool is not attached".into()));
        };
        let file = reopen(inherited, &self.path)?;
        // This process holds the same lock: no exclusive holder can be in the way.
        lock_now(&file, &self.path, self.access)?;
        let locks = a.locks_for_fork_child(&file)?;
        Ok((file, locks))
    }

    /// The descriptors of this process's open of the pool file and of its locks.
    pub(crate) fn pool_file_fds(&self) -> Vec<std::os::fd::RawFd> {
        let mut v: Vec<_> = self
            .lock_file
            .lock()
            .iter()
            .map(|f| f.as_raw_fd())
            .collect();
        v.extend(self.runtime.as_ref().and_then(|a| a.locks_fd()));
        v
    }

    /// In the parent after a fork: its copies of the fork spare are closed (the
    /// child's stay open, and so do the locks on them).
    pub(crate) fn drop_fork_spare(&self) {
        drop(self.fork_spare.lock().take());
    }

    /// In the child of a fork whose parent stays attached: open the pool file anew
    /// (the inherited open is the parent's, and so are the locks on it), take this
    /// process's own pool lock and join the runtime state as a process of its own.
    /// Returns the parent's process slot.
    ///
    /// When the parent made the child's open before the fork (`fork_spare`), the
    /// child takes it over and joins with no system call; it takes a slot now only if
    /// `register` (it holds references of its own: until then nothing of its counts,
    /// see `Fs::after_fork_child_holding`).
    pub(crate) fn rejoin_after_fork(&self, register: bool) -> Result<u32> {
        let (Some(a), mut held) = (&self.runtime, self.lock_file.lock()) else {
            return Err(Error::Invalid("the pool is not attached".into()));
        };
        if let Some((file, locks)) = self.fork_spare.lock().take() {
            let parent = a.join_after_fork(locks, register)?;
            self.pm.stop_write_through();
            *held = Some(file);
            return Ok(parent);
        }
        let Some(inherited) = held.as_ref() else {
            return Err(Error::Invalid("the pool file is not open".into()));
        };
        let file = reopen(inherited, &self.path)?;
        lock(&file, &self.path, self.access)?;
        let parent = a.fork_child(&file)?;
        // The inherited open, which writes through the file use, closes below.
        self.pm.stop_write_through();
        *held = Some(file);
        Ok(parent)
    }

    /// The shared runtime state this process is attached to, if any.
    /// Map the shared runtime state (allocators, journals, the namespace's index and
    /// cachelets, notices, descriptions) into this process now, so the first
    /// operations on a fresh pool do not stall on a page fault each: the index is a
    /// hash table, so early creates land on a new page nearly every time
    /// (docs/DESIGN-NOTES.md, "First touch and process start"). Costs about 1.3 µs per
    /// page of that state (50 ms for a 4 GiB pool with 2^20 inodes): for a process
    /// that lives long (a mount, a benchmark, a server), not one that runs a few
    /// calls. The open tables are left out: each process reserves and uses only
    /// its own. Nothing to do for private runtime state.
    pub fn populate(&self) {
        self.populate_while(|| true);
    }

    /// [`Pool::populate`] a piece at a time (2 MiB), then the pool's metadata that
    /// each lane uses first ([`METADATA_AHEAD`] of its inodes, dentries and
    /// metadata blocks: the first thousands of creates of a fresh pool then take no
    /// fault each), as long as `go_on` says so: for a
    /// thread that maps the state in the background and must stop soon when asked
    /// (`lynxfs run` once its program has ended). The pages it maps are the shared
    /// file's: other processes then find them made (cleared and in memory), and their
    /// own first touch of one only maps it.
    pub fn populate_while(&self, go_on: impl Fn() -> bool) {
        const PIECE: usize = 2 << 20;
        if let Some(a) = &self.runtime {
            let shared = self.runtime_layout.alloc.start..self.runtime_layout.total;
            let mut at = shared.start;
            while at < shared.end && go_on() {
                let len = PIECE.min(shared.end - at);
                a.region().populate(at, len);
                at += len;
            }
        }
        for (off, len) in self.metadata_first_used() {
            if !go_on() {
                return;
            }
            self.pm.populate(off, len);
        }
    }

    /// Where each lane's metadata is taken first, [`METADATA_AHEAD`] bytes of each:
    /// the start of its inodes and of its dentries (numbers are handed out from the
    /// bottom) and the top of its data blocks (metadata blocks come from there).
    fn metadata_first_used(&self) -> Vec<(u64, u64)> {
        let l = &self.layout;
        let mut parts = Vec::new();
        for lane in 0..l.lanes() {
            let inodes = l.lane_inodes(lane);
            let dentries = l.lane_dentries(lane);
            let blocks = l.lane_blocks(lane);
            let ahead = |n: u64, size: u64| (n * size).min(METADATA_AHEAD);
            parts.push((
                l.inode_addr(inodes.start),
                ahead(inodes.end - inodes.start, INODE_SIZE),
            ));
            parts.push((
                l.dentry_addr(dentries.start),
                ahead(dentries.end - dentries.start, DENTRY_SIZE),
            ));
            let top = ahead(blocks.end - blocks.start, BLOCK);
            if top > 0 {
                parts.push((l.block_addr(blocks.end - 1) + BLOCK - top, top));
            }
        }
        parts
    }

    pub fn attachment(&self) -> Option<&Arc<Attachment>> {
        self.runtime.as_ref()
    }

    /// Rebuild the allocators' shared state from what is in use (a repair).
    pub(crate) fn rebuild_allocators(&self, used: &UsedSets) {
        self.journal_span.zero();
        self.txn_span.zero();
        // The state lives in the span: the value built over it is only a view.
        drop(Allocators::build(
            self.alloc_span.clone(),
            &self.layout,
            used,
        ));
    }

    /// Leave the pool: the last process attached (or one with private state) saves
    /// the allocator state and marks the pool clean. The caller must have stopped
    /// every operation of this process on the pool.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // What this process wrote is durable before the pool is marked clean (a failed
        // flush leaves the originals for the next open to restore).
        let _ = self.commit_pending();
        match &self.runtime {
            Some(a) => a.detach(|| self.save_clean()),
            None => self.save_clean(),
        }
    }

    fn save_clean(&self) -> Result<()> {
        let used = self.alloc.used_sets();
        save_state(&self.pm, &self.layout, &used);
        let mut sb = self.sb.lock();
        // Other processes may have used the pool since this one read the superblock:
        // start from the copy in the pool.
        if let Ok(now) =
            pick_superblock(&self.path, self.pm.len(), |off, buf| self.pm.read(off, buf))
        {
            *sb = now;
        }
        sb.clean = true;
        sb.generation += 1;
        write_superblock(&self.pm, &sb);
        Ok(())
    }

    /// Drop the pool as a crash would: nothing saved, the clean flag stays off.
    pub fn crash(self) {
        self.crash_in_place();
    }

    /// As `crash`, for a pool owned by something else: from now on nothing is saved.
    pub fn crash_in_place(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            if let Some(a) = &self.runtime {
                let _ = a.detach(|| Ok(()));
            }
        }
    }
}

impl<B: Backend> Drop for Pool<B> {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// Mkfs of a block device: its old superblocks and metadata zeroed in place, then the
/// new pool written.
fn mkfs_device<B: Backend>(
    dev: &File,
    path: &Path,
    opts: &MkfsOptions,
    (layout, new): (Layout, &New),
    backend: B,
    progress: &dyn Progress,
) -> Result<()> {
    let meta = dev.metadata().map_err(|e| Error::io(path, e))?;
    let have = file_size(dev, &meta, path)?;
    if have < opts.size {
        return Err(Error::Invalid(format!(
            "{}: the device holds {have} bytes, less than the {} asked for",
            path.display(),
            opts.size
        )));
    }
    let pm = Pm::new(Mapping::map_file(dev, opts.size as usize, path)?, backend);
    zero_metadata(&pm, &layout, progress);
    format(&pm, layout, opts, new);
    Ok(())
}

/// What a new pool is called and where its data goes.
struct New<'a> {
    uuid: [u8; 16],
    /// A hybrid pool's record of its data device (already made).
    device: Option<&'a DeviceRecord>,
}

/// How a pool file was opened, for [`Pool::start_attached`].
struct Opened {
    lock: Option<File>,
    access: Access,
    attachment: Option<Attachment>,
    device: Option<Box<(Device, DeviceHeader)>>,
}

/// Write a new, empty pool: the root directory (owned by `root_owner`), the saved
/// allocator state, a hybrid pool's records of its device, and the superblocks last.
fn format<B: Backend>(pm: &Pm<B>, layout: Layout, opts: &MkfsOptions, new: &New) {
    let (uid, gid) = opts.root_owner;
    let now = now_ns();
    let root = inode::InodeImage {
        ino: ROOT_INO,
        mode: libc::S_IFDIR | 0o755,
        uid,
        gid,
        nlink: 2,
        atime: now,
        mtime: now,
        ctime: now,
        btime: now,
        generation: 1,
        ..Default::default()
    };
    let mut b = pm.batch();
    b.write(layout.inode_addr(ROOT_INO), &root.encode());
    let _ = b.persist();
    let mut used = UsedSets::empty(&layout);
    if new.device.is_some() {
        UndoArea::of(&layout).mark(&mut used.blocks);
    }
    save_state(pm, &layout, &used);
    if let Some(r) = new.device {
        device::write_records(pm, r);
    }
    let mut sb = Superblock::new(layout, new.uuid, now);
    sb.set_data_device(new.device.map(|r| r.device_uuid));
    sb.incompat |= INCOMPAT_CWON | INCOMPAT_XATTR_LOG;
    if new.device.is_some() {
        sb.incompat |= INCOMPAT_UNDO;
    }
    if opts.data == DataMode::Inplace {
        sb.compat |= COMPAT_DATA_INPLACE;
    }
    sb.set_reserve(opts.reserved_percent);
    write_superblock(pm, &sb);
    sb.generation += 1;
    write_superblock(pm, &sb);
}

/// Zeroes everything before the data blocks (superblocks, journals, saved state,
/// inode and dentry tables), in pieces made durable one by one. Both superblock copies
/// go first, in a piece of their own: a crash after that leaves no pool to open (the
/// device's old one, if any, is gone), never an old superblock over half-zeroed tables.
fn zero_metadata<B: Backend>(pm: &Pm<B>, l: &Layout, progress: &dyn Progress) {
    const PIECE: u64 = 64 << 20;
    let mut b = pm.batch();
    for sb in [crate::format::layout::SB_A, crate::format::layout::SB_B] {
        b.zero(sb, crate::format::superblock::SB_LEN);
    }
    let _ = b.persist();
    progress.phase("zeroing metadata (bytes)", Some(l.data_off));
    let mut off = 0;
    while off < l.data_off {
        let len = PIECE.min(l.data_off - off);
        let mut b = pm.batch();
        b.zero(off, len as usize);
        let _ = b.persist();
        progress.advance(len);
        off += len;
    }
}

fn uuid() -> [u8; 16] {
    let mut u = [0u8; 16];
    // Randomness for an identifier only; a failed read leaves a time-based value.
    if let Ok(f) = File::open("/dev/urandom") {
        let _ = f.read_at(&mut u, 0);
    }
    if u == [0; 16] {
        u[..8].copy_from_slice(&now_ns().to_le_bytes());
    }
    u
}

/// Write `sb` to the copy its generation selects, durably.
fn write_superblock<B: Backend>(pm: &Pm<B>, sb: &Superblock) {
    let mut b = pm.batch();
    b.write(sb.home(), &sb.encode());
    let _ = b.persist();
}

/// Pick the valid superblock copy with the highest generation, or say what is wrong.
fn pick_superblock(path: &Path, size: u64, read: impl Fn(u64, &mut [u8])) -> Result<Superblock> {
    let mut copies = Vec::new();
    for off in [crate::format::layout::SB_A, crate::format::layout::SB_B] {
        let mut buf = [0u8; SB_LEN];
        if off + SB_LEN as u64 <= size {
            read(off, &mut buf);
        }
        copies.push(Superblock::decode(&buf));
    }
    // A copy written by a newer LynxFS (intact, but of a version or with features this
    // build does not know) means the pool moved on: refuse rather than open the older
    // copy and overwrite the newer one.
    if let Some(Err(SbProblem::Version(v))) = copies
        .iter()
        .find(|c| matches!(c, Err(SbProblem::Version(_))))
    {
        return Err(Error::Version {
            path: path.to_path_buf(),
            found: *v,
            supported: crate::format::superblock::VERSION,
        });
    }
    if copies
        .iter()
        .any(|c| matches!(c, Err(SbProblem::Features(_))))
    {
        return Err(Error::corrupt(
            path,
            "a superblock copy uses feature flags this build does not know",
        ));
    }
    let best = copies
        .iter()
        .filter_map(|c| c.as_ref().ok())
        .max_by_key(|sb| sb.generation)
        .cloned();
    let Some(sb) = best else {
        let problems: Vec<&SbProblem> = copies.iter().filter_map(|c| c.as_ref().err()).collect();
        if problems.iter().all(|p| **p == SbProblem::Magic) {
            return Err(if size < crate::format::layout::MIN_POOL {
                Error::TooSmall {
                    path: path.to_path_buf(),
                    size,
                    min: crate::format::layout::MIN_POOL,
                }
            } else {
                Error::Foreign {
                    path: path.to_path_buf(),
                }
            });
        }
        if let Some(SbProblem::Version(v)) =
            problems.iter().find(|p| matches!(p, SbProblem::Version(_)))
        {
            return Err(Error::Version {
                path: path.to_path_buf(),
                found: *v,
                supported: crate::format::superblock::VERSION,
            });
        }
        return Err(Error::corrupt(
            path,
            format!(
                "both superblocks are damaged (copy A: {}; copy B: {})",
                problems[0],
                problems.get(1).map_or("-".into(), |p| p.to_string())
            ),
        ));
    };
    if sb.geo.pool_size > size {
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            expected: sb.geo.pool_size,
            actual: size,
        });
    }
    Ok(sb)
}

/// The superblock as the pool holds it once this process is attached. The one read
/// before attaching (to find the runtime state) may be stale: other processes may
/// have attached, used the pool and left meanwhile (each first attach and last detach
/// writes a newer generation, under the transition lock that attaching waits for). A
/// first attacher that started from it would write "in use" under a generation the
/// pool already has, leaving the newer "clean" copy to be trusted after a crash; a
/// later attacher would stamp with an old epoch. Refused if the pool was formatted
/// anew meanwhile (the runtime state attached to was laid out for the old one).
fn current_superblock<B: Backend>(
    pm: &Pm<B>,
    path: &Path,
    read: &Superblock,
) -> Result<Superblock> {
    let now = pick_superblock(path, pm.len(), |off, buf| pm.read(off, buf))?;
    if now.uuid != read.uuid || now.geo != read.geo || now.layout != read.layout {
        return Err(Error::Invalid(format!(
            "{}: the pool was formatted anew while it was being opened",
            path.display()
        )));
    }
    Ok(now)
}

fn load_state<B: Backend>(pm: &Pm<B>, l: &Layout) -> UsedSets {
    let (b, i, d) = l.state_bitmaps();
    let read_bits = |off: u64, n: u64| -> Vec<u64> {
        let raw = pm.read_vec(off, (n.div_ceil(64) * 8) as usize);
        raw.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect()
    };
    let mut used = UsedSets {
        blocks: read_bits(b, l.data_blocks),
        inodes: read_bits(i, l.total_inodes()),
        dentries: read_bits(d, l.total_dentries()),
        device: match l.has_device_blocks() {
            true => read_bits(l.device_bitmap(), l.geo.device_blocks),
            false => Vec::new(),
        },
    };
    // Inode 0, the root and dentry 0 are never free, whatever the bitmap says.
    UsedSets::mark(&mut used.inodes, 0);
    UsedSets::mark(&mut used.inodes, ROOT_INO);
    UsedSets::mark(&mut used.dentries, 0);
    used
}

fn save_state<B: Backend>(pm: &Pm<B>, l: &Layout, used: &UsedSets) {
    let (b, i, d) = l.state_bitmaps();
    let bytes = |bits: &[u64]| -> Vec<u8> { bits.iter().flat_map(|w| w.to_le_bytes()).collect() };
    let mut batch = pm.batch();
    batch
        .write(b, &bytes(&used.blocks))
        .write(i, &bytes(&used.inodes))
        .write(d, &bytes(&used.dentries));
    if l.has_device_blocks() {
        batch.write(l.device_bitmap(), &bytes(&used.device));
    }
    let _ = batch.persist();
}

fn lock(file: &File, path: &Path, access: Access) -> Result<()> {
    let op = match access {
        Access::Exclusive => libc::LOCK_EX,
        Access::ReadWrite | Access::ReadOnly => libc::LOCK_SH,
    };
    // A lock another holder keeps is "in use" at once, but only after a short grace:
    // the last holder may have closed the pool an instant ago while a child that a
    // thread of its process forked still shares the locked descriptor until that
    // child's exec closes it (descriptors are close-on-exec).
    let deadline = std::time::Instant::now() + LOCK_GRACE;
    loop {
        // SAFETY: flock on a descriptor we own; no memory is passed.
        let r = unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        let busy = e.raw_os_error() == Some(libc::EWOULDBLOCK);
        if busy && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
            continue;
        }
        return Err(if busy {
            Error::Locked {
                path: path.to_path_buf(),
            }
        } else {
            Error::io(path, e)
        });
    }
}

/// A new open file description of the pool file open as `inherited`: the same file
/// whatever its path names now.
fn reopen(inherited: &File, path: &Path) -> Result<File> {
    let proc_path = format!("/proc/self/fd/{}", inherited.as_raw_fd());
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&proc_path)
        .map(crate::runtime::out_of_the_way)
        .map_err(|e| Error::io(path, e))
}

/// [`lock`] without its grace: for a lock that this process holds already on another
/// open of the file (so it cannot be in use exclusively).
fn lock_now(file: &File, path: &Path, access: Access) -> Result<()> {
    let op = match access {
        Access::Exclusive => libc::LOCK_EX,
        Access::ReadWrite | Access::ReadOnly => libc::LOCK_SH,
    };
    // SAFETY: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    Err(Error::io(path, std::io::Error::last_os_error()))
}

/// Whether `held` (another open's lock on the pool file) is still true after up to
/// [`LOCK_GRACE`]: a lock an open that just closed left in a forked child's copy of
/// its descriptor goes at that child's exec, as in [`lock`].
fn still_after_grace(mut held: impl FnMut() -> std::io::Result<bool>) -> std::io::Result<bool> {
    let deadline = std::time::Instant::now() + LOCK_GRACE;
    while held()? {
        if std::time::Instant::now() >= deadline {
            return Ok(true);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(false)
}

/// How long a busy pool lock is retried before the pool is reported in use: a fork on
/// a loaded machine can take longer than 200 ms to reach its exec (seen once in ten
/// runs of the mount tests beside a build), and a pool really in use is told 2 s late.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

fn is_block_device(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    meta.file_type().is_block_device()
}

fn file_size(file: &File, meta: &std::fs::Metadata, path: &Path) -> Result<u64> {
    if !is_block_device(meta) {
        return Ok(meta.len());
    }
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer we pass, which points at
    // a live local.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), 0x8008_1272, &mut size as *mut u64) };
    if r != 0 {
        return Err(Error::io(path, std::io::Error::last_os_error()));
    }
    Ok(size)
}

/// Bytes per data block, for callers that report space.
pub const BLOCK_SIZE: u64 = BLOCK;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_node_count_is_the_machine_s_when_the_lanes_split() {
        let m = crate::alloc::lane::machine_nodes();
        let o = MkfsOptions::new(64 << 20);
        assert!(
            o.lanes.is_multiple_of(m),
            "default lanes {} for {m} nodes",
            o.lanes
        );
        assert_eq!(o.nodes(o.lanes), m);
        assert_eq!(o.nodes(4 * m), m);
        // Lanes a caller chose that the machine's nodes do not divide: one node.
        if m > 1 {
            assert_eq!(o.nodes(m + 1), 1);
        }
        let asked = MkfsOptions {
            nodes: Some(3),
            ..o
        };
        assert_eq!(
            asked.nodes(4),
            3,
            "asked for is asked for (mkfs refuses it)"
        );
    }
    use crate::format::layout::{SB_A, SB_B};
    use crate::pmem::{Event, RecordingBackend};

    /// The order CONSISTENCY.md gives for mkfs of a device: both superblock copies are
    /// zeroed and fenced before any other byte is stored, and every metadata byte is
    /// zeroed and fenced before the new superblocks are written.
    #[test]
    fn a_device_loses_its_old_superblocks_first_and_gets_new_ones_last() {
        let opts = MkfsOptions::new(8 << 20);
        let layout = opts.geometry(0).unwrap();
        let rec = RecordingBackend::new();
        let pm = Pm::new(Mapping::anonymous(8 << 20).unwrap(), rec.clone());
        zero_metadata(&pm, &layout, &Quiet);
        let zeroing = rec.take();
        let new = New {
            uuid: [1; 16],
            device: None,
        };
        format(&pm, layout, &opts, &new);
        let formatting = rec.take();

        let first_fence = zeroing.iter().position(|e| matches!(e, Event::Fence));
        let before: Vec<_> = zeroing[..first_fence.expect("a fence")]
            .iter()
            .filter_map(|e| match e {
                Event::Store { off, bytes } => Some((*off, bytes.len())),
                _ => None,
            })
            .collect();
        let sb_len = SB_LEN;
        assert_eq!(before, [(SB_A, sb_len), (SB_B, sb_len)]);
        assert!(matches!(zeroing.last(), Some(Event::Fence)));
        // After that fence, stores that cover [0, data_off) without a gap.
        let mut pieces: Vec<(u64, u64)> = zeroing[first_fence.unwrap()..]
            .iter()
            .filter_map(|e| match e {
                Event::Store { off, bytes } => Some((*off, bytes.len() as u64)),
                _ => None,
            })
            .collect();
        pieces.sort_unstable();
        let covered = pieces.iter().try_fold(0, |end, &(off, len)| {
            (off <= end).then_some(end.max(off + len))
        });
        assert_eq!(covered, Some(layout.data_off));
        // The superblocks come after everything else mkfs writes.
        let last_other = formatting
            .iter()
            .rposition(|e| matches!(e, Event::Store { off, .. } if *off != SB_A && *off != SB_B));
        let first_sb = formatting
            .iter()
            .position(|e| matches!(e, Event::Store { off, .. } if *off == SB_A || *off == SB_B));
        assert!(last_other < first_sb, "{last_other:?} {first_sb:?}");
    }
}
