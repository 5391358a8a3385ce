//! The `hybrid` suite (issue 28, FSMAC): what keeping metadata in persistent memory
//! and file data on a disk buys against ext4 on the same disk, and what it costs
//! against an all-PM pool.
//!
//! Rows, in operations per second (the row's name says what one operation is):
//! - `fsync create 16K`: create a file, write 16 KiB, fsync, close (fs_mark's sync
//!   mode, FSMAC's file-create size), over [`Options::files`] / 10 files;
//! - `append 8K, fsync/32`: FSMAC's file-append workload, 8 KiB appends to one file of
//!   [`Options::file_size`] bytes with an fsync after every 32;
//! - `varmail`: the `personalities` suite's mail server (fsyncs as Filebench's), run
//!   through that suite (which runs its other personalities too; only this row is kept);
//! - `syscalls ...`: the `syscalls` suite's rows over [`Options::files`] names, turned
//!   from µs/op into ops/s;
//! - `seq write 1M (MiB/s)` (the file's 1 MiB writes then one fsync) and
//!   `seq read 1M cold (MiB/s)` (after the kernel's caches are dropped, so ext4 and
//!   the data device read from the disk);
//! - `rand write 4K, fsync` (4 KiB writes at random block offsets of that file, one
//!   per [`RAND_SPAN`] bytes of it, then one fsync, timed) and `rand read 4K cold`
//!   (as many reads at other random offsets, caches dropped first), in operations
//!   per second.
//!
//! With a `hybrid` column, three more rows (in that column only) time the export and
//! import of a fresh hybrid pool of 10 x [`Options::files`] files (100,000 by
//! default) next to copying the metadata's bytes to a file on the same disk, in files
//! per second; the notes give the seconds.
//!
//! Targets: `hybrid` ([`HybridTarget`]: a pool in /dev/shm, its data device a file in
//! [`DISK_BASE`]); `ext4-disk` ([`DiskDirTarget`], a fresh directory on the root file
//! system, which must be ext4) is the comparison the issue asks for; `ext4` is an image
//! in /dev/shm and waits for no disk.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use tempfile::TempDir;

use lynxfs::pmem::PmemBackend;
use lynxfs::pool::export::{export_hybrid, DataDevice, IfStale};
use lynxfs::{Cred, Fs, MkfsOptions};

use crate::lib_target::{fresh_pool_path, to_io, PoolFile};
use crate::report::Row;
use crate::target::{pread_exact, pwrite_all};
use crate::{
    progress_bar, DirTarget, Handle, LibTarget, Measured, OpenFlags, Options, Stat, Target,
};

/// The suite's directory in each target's root.
const ROOT: &str = "hybrid";
/// Where [`DiskDirTarget`] makes its directory: on the root file system, which
/// survives a reboot (unlike /tmp on some systems) and is not a tmpfs.
pub const DISK_BASE: &str = "/var/tmp";
/// The label of [`DiskDirTarget`] columns.
pub const DISK_NAME: &str = "ext4-disk";
/// `statfs`'s `f_type` of ext2, ext3 and ext4.
const EXT4_MAGIC: i64 = 0xEF53;

const CREATE_SIZE: usize = 16 << 10;
const APPEND: usize = 8 << 10;
const APPENDS_PER_FSYNC: u64 = 32;
const SEQ_BLOCK: usize = 1 << 20;
/// The random rows' request size.
const RAND_BLOCK: u64 = 4 << 10;
/// One random request per this many bytes of the file (4,096 for 64 MiB).
const RAND_SPAN: u64 = 16 << 10;

/// The label of [`HybridTarget`] columns.
pub const HYBRID_NAME: &str = "hybrid";

/// The rows of the export measurement (the hybrid column only).
const EXPORT_ROWS: &[&str] = &[
    "export (files/s)",
    "import (files/s)",
    "copy metadata bytes (files/s)",
];

/// The rows this suite measures itself, before the borrowed ones.
const OWN_ROWS: &[&str] = &[
    "fsync create 16K",
    "append 8K, fsync/32",
    "seq write 1M (MiB/s)",
    "seq read 1M cold (MiB/s)",
    "rand write 4K, fsync",
    "rand read 4K cold",
];

/// A fresh directory on the root file system's disk, removed when dropped: ext4 with
/// its journal and the disk's real fsync, which the `ext4` target (an image in
/// /dev/shm) does not wait for.
pub struct DiskDirTarget {
    dir: DirTarget,
    // Dropped after `dir` closed its descriptors.
    _tmp: TempDir,
}

impl DiskDirTarget {
    /// A fresh directory under [`DISK_BASE`]; refused unless that is on ext4.
    pub fn create() -> io::Result<Self> {
        let tmp = tempfile::Builder::new()
            .prefix("lynxfs-bench.")
            .tempdir_in(DISK_BASE)?;
        let kind = fs_type(tmp.path())?;
        if kind != EXT4_MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{DISK_BASE} is not on ext4 (statfs type {kind:#x}): make an ext4 file \
                     system on a loop device on the disk and use --target dir=PATH"
                ),
            ));
        }
        Ok(Self {
            dir: DirTarget::new(tmp.path(), DISK_NAME)?,
            _tmp: tmp,
        })
    }
}

/// A hybrid LynxFS pool driven through the library: the pool (metadata) in /dev/shm,
/// its data device a sparse file in [`DISK_BASE`], on the root file system's disk.
/// Both are removed when it is dropped.
pub struct HybridTarget {
    // Field order is drop order: the pool closes before its device goes.
    lib: LibTarget,
    _device: PoolFile,
}

impl HybridTarget {
    /// The pool's size: its file data is on the device, so the pool needs room for
    /// metadata only (mkfs reserves all of it in /dev/shm, which a 2-core machine
    /// running several benchmarks at once cannot spare 4 GiB of twice).
    pub const SIZE: u64 = 1 << 30;
    /// Inodes: more than any suite keeps at once.
    pub const INODES: u64 = 1 << 18;

    /// A fresh hybrid pool of [`Self::SIZE`] and [`Self::INODES`].
    pub fn create() -> io::Result<Self> {
        let device = PoolFile(fresh_device_path()?);
        let mut opts = MkfsOptions::new(Self::SIZE);
        opts.inodes = Some(Self::INODES);
        opts.data_device = Some(device.0.clone());
        let lib = LibTarget::create(&opts)?.with_label(HYBRID_NAME);
        Ok(Self {
            lib,
            _device: device,
        })
    }
}

/// An all-PM pool of the hybrid pool's size and inodes (`lib-1g`), labelled as `lib`.
pub(crate) fn small_lib() -> io::Result<LibTarget> {
    let mut opts = MkfsOptions::new(HybridTarget::SIZE);
    opts.inodes = Some(HybridTarget::INODES);
    LibTarget::create(&opts)
}

/// A name in [`DISK_BASE`] for a data device, which mkfs makes.
pub(crate) fn fresh_device_path() -> io::Result<PathBuf> {
    let tmp = tempfile::Builder::new()
        .prefix("lynxfs-bench.")
        .suffix(".dev")
        .tempfile_in(DISK_BASE)?;
    let (_, path) = tmp.keep().map_err(|e| e.error)?;
    std::fs::remove_file(&path)?;
    Ok(path)
}

/// The file system type (`statfs`'s `f_type`) of `path`.
fn fs_type(path: &Path) -> io::Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `st` is plain data that statfs fills; `c` is NUL-terminated and outlives
    // the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between libcs.
    Ok(st.f_type as i64)
}

impl Target for DiskDirTarget {
    fn name(&self) -> String {
        self.dir.name()
    }
    fn create(&self, path: &Path) -> io::Result<()> {
        self.dir.create(path)
    }
    fn stat(&self, path: &Path) -> io::Result<Stat> {
        self.dir.stat(path)
    }
    fn unlink(&self, path: &Path) -> io::Result<()> {
        self.dir.unlink(path)
    }
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        self.dir.mkdir(path)
    }
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        self.dir.rmdir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.dir.rename(from, to)
    }
    fn open(&self, path: &Path, flags: OpenFlags) -> io::Result<Handle> {
        self.dir.open(path, flags)
    }
    fn pwrite(&self, handle: Handle, buf: &[u8], off: u64) -> io::Result<usize> {
        self.dir.pwrite(handle, buf, off)
    }
    fn pread(&self, handle: Handle, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.dir.pread(handle, buf, off)
    }
    fn close(&self, handle: Handle) -> io::Result<()> {
        self.dir.close(handle)
    }
    fn readdir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        self.dir.readdir(path)
    }
    fn fsync(&self, handle: Handle) -> io::Result<()> {
        self.dir.fsync(handle)
    }
    fn host_dir(&self) -> Option<&Path> {
        Some(self.dir.root())
    }
}

impl Target for HybridTarget {
    fn name(&self) -> String {
        self.lib.name()
    }
    fn create(&self, path: &Path) -> io::Result<()> {
        self.lib.create(path)
    }
    fn stat(&self, path: &Path) -> io::Result<Stat> {
        self.lib.stat(path)
    }
    fn unlink(&self, path: &Path) -> io::Result<()> {
        self.lib.unlink(path)
    }
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        self.lib.mkdir(path)
    }
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        self.lib.rmdir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.lib.rename(from, to)
    }
    fn open(&self, path: &Path, flags: OpenFlags) -> io::Result<Handle> {
        self.lib.open(path, flags)
    }
    fn pwrite(&self, handle: Handle, buf: &[u8], off: u64) -> io::Result<usize> {
        self.lib.pwrite(handle, buf, off)
    }
    fn pread(&self, handle: Handle, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.lib.pread(handle, buf, off)
    }
    fn close(&self, handle: Handle) -> io::Result<()> {
        self.lib.close(handle)
    }
    fn readdir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        self.lib.readdir(path)
    }
    fn fsync(&self, handle: Handle) -> io::Result<()> {
        self.lib.fsync(handle)
    }
    fn as_lib(&self) -> Option<&LibTarget> {
        Some(&self.lib)
    }
}

/// Seconds to export, import and copy the metadata's bytes, and those bytes.
struct ExportTimes {
    export: f64,
    import: f64,
    copy: f64,
    bytes: u64,
}

/// Makes a hybrid pool of `files` files (1 KiB of data each, on the device, in
/// directories of 1000), then per round: exports it, imports the export into a new
/// pool, and copies the export's bytes from the pool file to a file on the same disk
/// (written, then fdatasync, as the export's image is).
fn export_rounds(files: usize, rounds: usize) -> anyhow::Result<Vec<ExportTimes>> {
    let pool = PoolFile(fresh_pool_path()?);
    let device = PoolFile(fresh_device_path()?);
    // The files' data blocks are the device's (8 times the pool by default); the pool
    // holds their metadata.
    let mut opts = MkfsOptions::new(1 << 30);
    opts.inodes = Some((files as u64 * 2).max(1 << 12));
    opts.data_device = Some(device.0.clone());
    lynxfs::Pool::mkfs(&pool.0, &opts, PmemBackend::default()).map_err(to_io)?;
    fill(&pool.0, files).context("filling the pool to export")?;
    let mut out = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        let r = export_hybrid(&pool.0, PmemBackend::default()).map_err(to_io)?;
        let export = start.elapsed().as_secs_f64();
        let copy_to = PoolFile(fresh_device_path()?);
        let copy = copy_bytes(&pool.0, &copy_to.0, r.header.image_len)?;
        let imported = PoolFile(fresh_pool_path()?);
        let start = Instant::now();
        DataDevice::open(&device.0)
            .and_then(|d| d.import(&imported.0, IfStale::Refuse))
            .map_err(to_io)?;
        let import = start.elapsed().as_secs_f64();
        out.push(ExportTimes {
            export,
            import,
            copy,
            bytes: r.header.image_len,
        });
    }
    Ok(out)
}

fn fill(pool: &Path, files: usize) -> anyhow::Result<()> {
    let fs = Fs::open(pool)?;
    let s = fs.session(Cred::root());
    let data = [0x3cu8; 1024];
    for i in 0..files {
        if i % 1000 == 0 {
            s.mkdir(format!("/d{}", i / 1000), 0o755)?;
        }
        let fd = s.create(format!("/d{}/f{i}", i / 1000), 0o644)?;
        fs.pwrite(fd, &data, 0)?;
        fs.close_fd(fd)?;
    }
    drop(s);
    fs.close()?;
    Ok(())
}

/// Seconds to copy `len` bytes from the start of `from` into a new file `to`, durably.
fn copy_bytes(from: &Path, to: &Path, len: u64) -> io::Result<f64> {
    use std::os::unix::fs::FileExt;
    let src = std::fs::File::open(from)?;
    let start = Instant::now();
    let dst = std::fs::File::create(to)?;
    let mut buf = vec![0u8; 4 << 20];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        src.read_exact_at(&mut buf[..n], off)?;
        dst.write_all_at(&buf[..n], off)?;
        off += n as u64;
    }
    dst.sync_data()?;
    Ok(start.elapsed().as_secs_f64())
}

/// Files created with an fsync each: files per second.
fn fsync_create(t: &dyn Target, files: usize) -> io::Result<f64> {
    let dir = Path::new(ROOT).join("fsync");
    t.mkdir(&dir)?;
    let paths: Vec<PathBuf> = (0..files).map(|i| dir.join(format!("f{i}"))).collect();
    let buf = vec![0x5au8; CREATE_SIZE];
    let start = Instant::now();
    for p in &paths {
        let h = t.open(p, OpenFlags::CREATE_TRUNCATE)?;
        let written = pwrite_all(t, h, &buf, 0).and_then(|()| t.fsync(h));
        t.close(h)?;
        written?;
    }
    let secs = start.elapsed().as_secs_f64();
    for p in &paths {
        t.unlink(p)?;
    }
    t.rmdir(&dir)?;
    Ok(files as f64 / secs)
}

/// FSMAC's file-append: appends per second.
fn append(t: &dyn Target, size: u64) -> io::Result<f64> {
    let path = Path::new(ROOT).join("append");
    let appends = size / APPEND as u64;
    let buf = vec![0xa5u8; APPEND];
    let h = t.open(&path, OpenFlags::CREATE_TRUNCATE)?;
    let start = Instant::now();
    let run = (|| {
        for i in 0..appends {
            pwrite_all(t, h, &buf, i * APPEND as u64)?;
            if (i + 1) % APPENDS_PER_FSYNC == 0 {
                t.fsync(h)?;
            }
        }
        t.fsync(h)
    })();
    let secs = start.elapsed().as_secs_f64();
    t.close(h)?;
    t.unlink(&path)?;
    run.map(|()| appends as f64 / secs)
}

/// The sequential file's path.
fn seq_path() -> PathBuf {
    Path::new(ROOT).join("seq")
}

/// Writes the sequential file in 1 MiB pieces, then fsyncs it: MiB/s.
fn seq_write(t: &dyn Target, size: u64) -> io::Result<f64> {
    let buf: Vec<u8> = (0..SEQ_BLOCK).map(|i| (i % 253) as u8).collect();
    let h = t.open(&seq_path(), OpenFlags::CREATE_TRUNCATE)?;
    let start = Instant::now();
    let run = (|| {
        for off in (0..size).step_by(SEQ_BLOCK) {
            pwrite_all(t, h, &buf, off)?;
        }
        t.fsync(h)
    })();
    let secs = start.elapsed().as_secs_f64();
    t.close(h)?;
    run.map(|()| mib(size) / secs)
}

/// Reads the sequential file in 1 MiB pieces (the caller chilled the caches): MiB/s.
fn seq_read(t: &dyn Target, size: u64) -> io::Result<f64> {
    let mut buf = vec![0u8; SEQ_BLOCK];
    let h = t.open(&seq_path(), OpenFlags::READ)?;
    let start = Instant::now();
    let run = (|| {
        for off in (0..size).step_by(SEQ_BLOCK) {
            pread_exact(t, h, &mut buf, off)?;
            std::hint::black_box(&buf);
        }
        Ok(())
    })();
    let secs = start.elapsed().as_secs_f64();
    t.close(h)?;
    run.map(|()| mib(size) / secs)
}

/// `count` block offsets spread at random over a file of `size` bytes, the same for
/// every target (a fixed xorshift seed: `seed` tells the rows apart).
fn random_offsets(size: u64, count: u64, seed: u64) -> Vec<u64> {
    let blocks = (size / RAND_BLOCK).max(1);
    let mut x = seed | 1;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % blocks) * RAND_BLOCK
        })
        .collect()
}

/// 4 KiB writes at random offsets of the sequential file, then one fsync (timed):
/// writes per second.
fn rand_write(t: &dyn Target, size: u64) -> io::Result<f64> {
    let offsets = random_offsets(size, size / RAND_SPAN, 0x9e37_79b9_7f4a_7c15);
    let buf = [0x6du8; RAND_BLOCK as usize];
    let h = t.open(&seq_path(), OpenFlags::READ_WRITE)?;
    let start = Instant::now();
    let run = (|| {
        for &off in &offsets {
            pwrite_all(t, h, &buf, off)?;
        }
        t.fsync(h)
    })();
    let secs = start.elapsed().as_secs_f64();
    t.close(h)?;
    run.map(|()| offsets.len() as f64 / secs)
}

/// 4 KiB reads at random offsets of the sequential file (the caller chilled the
/// caches): reads per second.
fn rand_read(t: &dyn Target, size: u64) -> io::Result<f64> {
    let offsets = random_offsets(size, size / RAND_SPAN, 0x2545_f491_4f6c_dd1d);
    let mut buf = [0u8; RAND_BLOCK as usize];
    let h = t.open(&seq_path(), OpenFlags::READ)?;
    let start = Instant::now();
    let run = (|| {
        for &off in &offsets {
            pread_exact(t, h, &mut buf, off)?;
            std::hint::black_box(&buf);
        }
        Ok(())
    })();
    let secs = start.elapsed().as_secs_f64();
    t.close(h)?;
    run.map(|()| offsets.len() as f64 / secs)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Removes what a failed round may have left.
fn scrub(t: &dyn Target) {
    let fsync = Path::new(ROOT).join("fsync");
    if let Ok(names) = t.readdir(&fsync) {
        for n in names {
            let _ = t.unlink(&fsync.join(n));
        }
    }
    let _ = t.rmdir(&fsync);
    let _ = t.unlink(&Path::new(ROOT).join("append"));
    let _ = t.unlink(&Path::new(ROOT).join("clean"));
    let _ = t.unlink(&Path::new(ROOT).join("other"));
    let _ = t.unlink(&seq_path());
    let _ = t.rmdir(Path::new(ROOT));
}

/// Drops every target's caches before a cold row; a failure is a note, once.
fn chill(targets: &[Box<dyn Target>], notes: &mut Vec<String>) {
    if let Err(why) = crate::cold::chill_all(targets) {
        if !notes.contains(&why) {
            notes.push(why);
        }
    }
}

/// One round of this suite's own rows on every target, in [`OWN_ROWS`] order; each
/// row runs on every target before the next row starts, so noise lands on all alike.
fn own_round(
    targets: &[Box<dyn Target>],
    opts: &Options,
    cells: &mut [Vec<Vec<f64>>],
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    let files = (opts.files / 10).max(1);
    for t in targets {
        t.mkdir(Path::new(ROOT))?;
    }
    for (col, t) in targets.iter().enumerate() {
        cells[0][col].push(fsync_create(t.as_ref(), files)?);
    }
    for (col, t) in targets.iter().enumerate() {
        cells[1][col].push(append(t.as_ref(), opts.file_size)?);
    }
    for (col, t) in targets.iter().enumerate() {
        cells[2][col].push(seq_write(t.as_ref(), opts.file_size)?);
    }
    chill(targets, notes);
    for (col, t) in targets.iter().enumerate() {
        cells[3][col].push(seq_read(t.as_ref(), opts.file_size)?);
    }
    for (col, t) in targets.iter().enumerate() {
        cells[4][col].push(rand_write(t.as_ref(), opts.file_size)?);
    }
    chill(targets, notes);
    for (col, t) in targets.iter().enumerate() {
        cells[5][col].push(rand_read(t.as_ref(), opts.file_size)?);
    }
    for t in targets {
        t.unlink(&seq_path())?;
        t.rmdir(Path::new(ROOT))?;
    }
    Ok(())
}

/// The borrowed rows: `varmail` from the `personalities` suite, every `syscalls` row
/// as ops/s.
fn borrowed_rows(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let flows = Options {
        files: (opts.files / 20).max(1),
        ..opts.clone()
    };
    let p = crate::personalities::run(targets, names, &flows).context("personalities")?;
    // Its rows are named by thread count ("varmail 2t"), the first round apart.
    rows.extend(
        p.rows
            .into_iter()
            .filter(|r| r.op.starts_with("varmail ") && !r.op.contains("round")),
    );
    let s = crate::syscalls::run(targets, names, opts).context("syscalls")?;
    if s.unit != "us/op" {
        bail!("the syscalls suite reports {}, not us/op", s.unit);
    }
    for r in s.rows {
        let per_sec: Vec<Vec<f64>> = r
            .rounds
            .iter()
            .map(|col| col.iter().map(|us| 1e6 / us).collect())
            .collect();
        rows.push(Row::from_rounds(format!("syscalls {}", r.op), per_sec));
    }
    Ok(rows)
}

/// The export rows (in column `col` only) and their note.
fn export_measurement(
    col: usize,
    names: &[String],
    opts: &Options,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) {
    let files = opts.files * 10;
    let times = match export_rounds(files, opts.rounds) {
        Ok(t) => t,
        Err(e) => {
            // The other rows still stand.
            notes.push(format!("export and import failed: {e:#}"));
            return;
        }
    };
    let per_sec = |f: fn(&ExportTimes) -> f64| -> Vec<Vec<f64>> {
        (0..names.len())
            .map(|c| match c == col {
                true => times.iter().map(|t| files as f64 / f(t)).collect(),
                false => vec![f64::NAN],
            })
            .collect()
    };
    let fields: [fn(&ExportTimes) -> f64; 3] = [|t| t.export, |t| t.import, |t| t.copy];
    for (op, f) in EXPORT_ROWS.iter().zip(fields) {
        rows.push(Row::from_rounds(*op, per_sec(f)));
    }
    let med = |f: fn(&ExportTimes) -> f64| crate::median(&times.iter().map(f).collect::<Vec<_>>());
    let (e, i, c) = (med(|t| t.export), med(|t| t.import), med(|t| t.copy));
    notes.push(format!(
        "export of a hybrid pool of {files} files (1 KiB each, on the device): export \
         {e:.3} s, import {i:.3} s, copying its {:.1} MiB of metadata to a file on the \
         same disk (fdatasync'd) {c:.3} s: export / copy = {:.2}",
        mib(times[0].bytes),
        e / c
    ));
}

pub(crate) fn run(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
) -> anyhow::Result<Measured> {
    crate::mdtest::check_free(targets, names, ROOT)?;
    let bar = progress_bar(opts, "hybrid", opts.rounds);
    let mut cells = vec![vec![Vec::new(); targets.len()]; OWN_ROWS.len()];
    let mut notes = Vec::new();
    for _ in 0..opts.rounds {
        bar.inc(1);
        if let Err(e) = own_round(targets, opts, &mut cells, &mut notes) {
            targets.iter().for_each(|t| scrub(t.as_ref()));
            return Err(e);
        }
    }
    bar.finish_and_clear();
    let mut rows: Vec<Row> = OWN_ROWS
        .iter()
        .zip(cells)
        .map(|(op, c)| Row::from_rounds(*op, c))
        .collect();
    if let Some(col) = names.iter().position(|n| n == HYBRID_NAME) {
        export_measurement(col, names, opts, &mut rows, &mut notes);
    }
    rows.extend(borrowed_rows(targets, names, opts)?);
    notes.push(format!(
        "fsync create: {} files of 16 KiB, each written then fsync'd; append: {} appends \
         of 8 KiB, fsync after every {APPENDS_PER_FSYNC}; seq: a {} MiB file, written in \
         1 MiB pieces then fsync'd (the fsync is timed), read after sync and echo 3 > \
         /proc/sys/vm/drop_caches; rand: {} writes of 4 KiB at random offsets of that \
         file then one fsync (timed), and as many reads at other offsets after the \
         caches are dropped; varmail: {} flows (the personalities suite); \
         syscalls: {} files, 1e6 / (us/op)",
        (opts.files / 10).max(1),
        opts.file_size / APPEND as u64,
        opts.file_size >> 20,
        opts.file_size / RAND_SPAN,
        (opts.files / 20).max(1),
        opts.files
    ));
    if names.iter().any(|n| n == DISK_NAME) {
        notes.push(format!(
            "{DISK_NAME}: a directory in {DISK_BASE}, on the root file system's disk (ext4)"
        ));
    }
    Ok(Measured {
        unit: "ops/s",
        higher_is_better: true,
        columns: names.to_vec(),
        rows,
        notes,
        // The ratios: every column against ext4 on the same disk.
        baseline: names
            .iter()
            .any(|n| n == DISK_NAME)
            .then(|| DISK_NAME.to_string()),
    })
}

/// The `hybrid-fsync` suite's create sizes (fs_mark's sync mode at several sizes; 0:
/// an fsync of a new empty file, metadata alone).
const CREATE_SIZES: &[usize] = &[0, 4 << 10, 16 << 10, 64 << 10];
/// The mail server's thread counts.
const MAIL_THREADS: &[usize] = &[1, 4, 16, 64];
/// fsyncs of a file whose data an earlier fsync made durable, per round
/// ([`clean_fsync`]).
const CLEAN_FSYNCS: usize = 500;
/// Flushes of the disk's own probe, per round.
const PROBE_FLUSHES: usize = 200;

/// The `hybrid-fsync` suite's rows (issue 43), in order.
fn fsync_rows() -> Vec<String> {
    let mut rows: Vec<String> = CREATE_SIZES
        .iter()
        .map(|&s| format!("fsync create {}K", s >> 10))
        .collect();
    rows.push("append 8K, fsync/32".into());
    rows.push("fsync committed file, other written".into());
    rows.extend(MAIL_THREADS.iter().map(|t| format!("varmail {t}t")));
    rows
}

/// Files of `size` bytes created with an fsync each: files per second.
fn fsync_create_sized(t: &dyn Target, files: usize, size: usize) -> io::Result<f64> {
    let dir = Path::new(ROOT).join("fsync");
    t.mkdir(&dir)?;
    let paths: Vec<PathBuf> = (0..files).map(|i| dir.join(format!("f{i}"))).collect();
    let buf = vec![0x5au8; size];
    let start = Instant::now();
    for p in &paths {
        let h = t.open(p, OpenFlags::CREATE_TRUNCATE)?;
        let written = match size {
            0 => Ok(()),
            _ => pwrite_all(t, h, &buf, 0),
        }
        .and_then(|()| t.fsync(h));
        t.close(h)?;
        written?;
    }
    let secs = start.elapsed().as_secs_f64();
    for p in &paths {
        t.unlink(p)?;
    }
    t.rmdir(&dir)?;
    Ok(files as f64 / secs)
}

/// fsyncs of a file whose 16 KiB an fsync already made durable, each after a 4 KiB
/// append to another file that is not fsync'd (nothing of the fsync'd file is pending:
/// a hybrid pool need not commit the other file's write; ext4 flushes the disk's cache
/// at every fsync): fsyncs per second.
fn clean_fsync(t: &dyn Target) -> io::Result<f64> {
    let (path, other) = (Path::new(ROOT).join("clean"), Path::new(ROOT).join("other"));
    let h = t.open(&path, OpenFlags::CREATE_TRUNCATE)?;
    let o = t.open(&other, OpenFlags::CREATE_TRUNCATE)?;
    let run = (|| {
        pwrite_all(t, h, &vec![0x3cu8; CREATE_SIZE], 0)?;
        t.fsync(h)?;
        let block = [0x4bu8; 4096];
        let start = Instant::now();
        for i in 0..CLEAN_FSYNCS as u64 {
            pwrite_all(t, o, &block, i * 4096)?;
            t.fsync(h)?;
        }
        Ok(CLEAN_FSYNCS as f64 / start.elapsed().as_secs_f64())
    })();
    t.close(h)?;
    t.close(o)?;
    t.unlink(&path)?;
    t.unlink(&other)?;
    run
}

/// What the guest's idle loop does, if this is a VM with the haltpoll driver: with
/// `guest_halt_poll_ns` 0 an idle vCPU halts at once, and on the 2-core Firecracker VM
/// a flush's completion then waits for the next timer tick (an ext4 create + fsync
/// 3-4 ms when the machine is idle, 0.3-0.5 ms when its CPUs are busy or polling).
fn halt_poll_note() -> Option<String> {
    let ns = std::fs::read_to_string(HALT_POLL_NS).ok()?;
    Some(format!(
        "the guest's halt polling ({HALT_POLL_NS}): {} ns; at 0 an idle vCPU halts and a \
         disk flush's completion can wait for a timer tick, so a single-threaded fsync \
         row on an idle machine may run ten times slower than on a busy one (both \
         columns alike, but not always in the same round)",
        ns.trim()
    ))
}

/// The haltpoll cpuidle driver's polling time, in a guest that has it.
const HALT_POLL_NS: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";

/// The disk's own flush, in µs per call: a file in [`DISK_BASE`] written and made
/// durable first (so its blocks are allocated and written), then [`PROBE_FLUSHES`]
/// times a 4 KiB overwrite and `fdatasync` (the least a durable small write costs on
/// this disk), and as many `fdatasync`s with nothing written (the cache flush alone).
/// Medians.
fn disk_flush_us() -> io::Result<(f64, f64)> {
    use std::os::unix::fs::FileExt;
    let f = tempfile::tempfile_in(DISK_BASE)?;
    let span = 4u64 << 20;
    f.write_all_at(&vec![0x11u8; span as usize], 0)?;
    f.sync_all()?;
    let block = [0x22u8; 4096];
    let mut written = Vec::with_capacity(PROBE_FLUSHES);
    let mut bare = Vec::with_capacity(PROBE_FLUSHES);
    for i in 0..PROBE_FLUSHES as u64 {
        let start = Instant::now();
        f.write_all_at(&block, (i * 4096) % span)?;
        f.sync_data()?;
        written.push(start.elapsed().as_secs_f64() * 1e6);
        let start = Instant::now();
        f.sync_data()?;
        bare.push(start.elapsed().as_secs_f64() * 1e6);
    }
    Ok((crate::median(&written), crate::median(&bare)))
}

/// The `hybrid-fsync` suite: per round, the disk's flush, then each row on every
/// target before the next row (noise lands on all alike).
pub(crate) fn run_fsync(
    targets: &[Box<dyn Target>],
    names: &[String],
    opts: &Options,
) -> anyhow::Result<Measured> {
    crate::mdtest::check_free(targets, names, ROOT)?;
    let rows = fsync_rows();
    let bar = progress_bar(opts, "hybrid-fsync", opts.rounds);
    let mut cells = vec![vec![Vec::new(); targets.len()]; rows.len()];
    let (mut written, mut bare) = (Vec::new(), Vec::new());
    let files = (opts.files / 10).max(1);
    let mail = Options {
        files: (opts.files / 10).max(1),
        ..opts.clone()
    };
    for _ in 0..opts.rounds {
        bar.inc(1);
        let (w, b) = disk_flush_us().context("timing the disk's flush")?;
        written.push(w);
        bare.push(b);
        let round = (|| -> anyhow::Result<()> {
            for t in targets {
                t.mkdir(Path::new(ROOT))?;
            }
            let mut row = 0;
            for &size in CREATE_SIZES {
                for (col, t) in targets.iter().enumerate() {
                    cells[row][col].push(fsync_create_sized(t.as_ref(), files, size)?);
                }
                row += 1;
            }
            for (col, t) in targets.iter().enumerate() {
                cells[row][col].push(append(t.as_ref(), opts.file_size)?);
            }
            row += 1;
            for (col, t) in targets.iter().enumerate() {
                cells[row][col].push(clean_fsync(t.as_ref())?);
            }
            row += 1;
            for &threads in MAIL_THREADS {
                for (col, t) in targets.iter().enumerate() {
                    let v = crate::personalities::varmail(t.as_ref(), threads, &mail)
                        .with_context(|| format!("varmail {threads}t on {}", names[col]))?;
                    cells[row][col].push(v);
                }
                row += 1;
            }
            for t in targets {
                t.rmdir(Path::new(ROOT))?;
            }
            Ok(())
        })();
        if let Err(e) = round {
            targets.iter().for_each(|t| scrub(t.as_ref()));
            return Err(e);
        }
    }
    bar.finish_and_clear();
    let rows = rows
        .iter()
        .zip(cells)
        .map(|(op, c)| Row::from_rounds(op.clone(), c))
        .collect();
    let us = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut notes = vec![
        format!(
            "the disk's own flush (a file in {DISK_BASE}, written first): a 4 KiB \
             overwrite + fdatasync {} us, an fdatasync with nothing written {} us (median \
             of {PROBE_FLUSHES}, per round)",
            us(&written),
            us(&bare)
        ),
        format!(
            "fsync create: {files} files per size, each written then fsync'd (0K: \
             created and fsync'd); append: {} appends of 8 KiB, fsync after every \
             {APPENDS_PER_FSYNC}; fsync committed file: {CLEAN_FSYNCS} fsyncs of a 16 KiB \
             file already fsync'd, each after a 4 KiB append to another file; varmail: {} flows (the personalities suite's)",
            opts.file_size / APPEND as u64,
            mail.files
        ),
        "a hybrid pool's metadata is in /dev/shm (DRAM standing in for persistent \
         memory: it survives no power loss, unlike ext4's journal on the disk), which \
         favours LynxFS against a durable ext4"
            .to_string(),
    ];
    notes.extend(halt_poll_note());
    Ok(Measured {
        unit: "ops/s",
        higher_is_better: true,
        columns: names.to_vec(),
        rows,
        notes,
        // Every column against ext4 on the same disk, the ratios (a preloaded
        // column, merged in front, too).
        baseline: names
            .iter()
            .any(|n| n == DISK_NAME)
            .then(|| DISK_NAME.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LibTarget;

    #[test]
    fn random_offsets_are_aligned_inside_the_file_and_repeat() {
        let size = 1 << 20;
        let a = random_offsets(size, 64, 7);
        assert_eq!(a, random_offsets(size, 64, 7));
        assert_ne!(a, random_offsets(size, 64, 8));
        assert!(a
            .iter()
            .all(|o| o % RAND_BLOCK == 0 && o + RAND_BLOCK <= size));
        // Spread, not one block again and again.
        let mut distinct = a.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 32, "{distinct:?}");
    }

    #[test]
    fn runs_on_hybrid_lib_and_a_disk_directory_and_cleans_up() {
        let targets: Vec<Box<dyn Target>> = vec![
            Box::new(HybridTarget::create().unwrap()),
            Box::new(DiskDirTarget::create().unwrap()),
            Box::new(LibTarget::create(&lynxfs::MkfsOptions::new(256 << 20)).unwrap()),
        ];
        let names: Vec<String> = targets.iter().map(|t| t.name()).collect();
        let opts = Options {
            files: 40,
            file_size: 1 << 20,
            progress: false,
            ..Options::default()
        };
        let m = run(&targets, &names, &opts).unwrap();
        let ops: Vec<&str> = m.rows.iter().map(|r| r.op.as_str()).collect();
        assert_eq!(&ops[..OWN_ROWS.len()], OWN_ROWS);
        assert!(
            ops.iter().any(|o| o.starts_with("varmail ")) && ops.contains(&"syscalls create"),
            "{ops:?}"
        );
        for r in &m.rows {
            // The export rows have the hybrid column only.
            let measured = match EXPORT_ROWS.contains(&r.op.as_str()) {
                true => &r.values[..1],
                false => &r.values[..],
            };
            assert!(
                measured.iter().all(|v| v.is_finite() && *v > 0.0),
                "{}: {:?}",
                r.op,
                r.values
            );
        }
        for op in EXPORT_ROWS {
            assert!(ops.contains(op), "{ops:?}");
        }
        for t in &targets {
            assert!(t.readdir(Path::new("")).unwrap().is_empty());
        }
    }

    #[test]
    fn the_fsync_suite_measures_every_row_and_cleans_up() {
        let targets: Vec<Box<dyn Target>> = vec![
            Box::new(HybridTarget::create().unwrap()),
            Box::new(DiskDirTarget::create().unwrap()),
        ];
        let names: Vec<String> = targets.iter().map(|t| t.name()).collect();
        let opts = Options {
            files: 40,
            file_size: 1 << 20,
            progress: false,
            ..Options::default()
        };
        let m = run_fsync(&targets, &names, &opts).unwrap();
        let ops: Vec<String> = m.rows.iter().map(|r| r.op.clone()).collect();
        assert_eq!(ops, fsync_rows());
        for r in &m.rows {
            assert!(
                r.values.iter().all(|v| v.is_finite() && *v > 0.0),
                "{}: {:?}",
                r.op,
                r.values
            );
        }
        assert!(m.notes[0].contains("fdatasync"), "{:?}", m.notes);
        for t in &targets {
            assert!(t.readdir(Path::new("")).unwrap().is_empty());
        }
    }
}
