//! Exports: a copy of a pool's metadata in a reserved area of its data device, so the
//! device alone is a complete LynxFS (issue 28, "a disk that moves"). `export` writes
//! one; `import` rebuilds a pool file from it (also for a check or a mount of the
//! device alone, into a temporary pool).
//!
//! The area holds two headers (one block each) and two slots. An export writes its
//! image into the slot the newest valid header does not name, makes it durable, then
//! writes the header of the next generation into the copy that generation's parity
//! selects and makes that durable: that header write is the commit point
//! (docs/CONSISTENCY.md, "Exports"). A crash before it leaves the previous header,
//! and the slot it names, untouched; a torn header fails its checksum and the other
//! copy is used. Each header carries the CRC32C of its image, so a slot torn or
//! overwritten later is refused, never imported.
//!
//! An open that may change the pool first marks its device's export stale
//! ([`mark_stale`]): a header of the next generation that names no image, durable
//! before the pool hands out a device block. Readers stop at it (an import, a mount
//! or a check of the device is refused, unless a read-only look is asked for), and
//! the next export supersedes it. A torn mark fails its checksum, and the export it
//! would have marked is still current: the open that wrote it never got past it.
//!
//! The image is the pool's bytes, after a clean close, as runs of non-zero blocks:
//! `[pool offset: u64][blocks: u64]` then the blocks, ended by a run of 0 blocks. An
//! imported pool is those bytes in a fresh file (zeros elsewhere), so it is the pool
//! as it was, clean, with the same identity (uuid): it pairs with the same device.
//!
//! A device may be anyone's (a disk that moves, or one made to crash its reader), so
//! nothing in a header is trusted for a size: an image is read in pieces, never
//! whole, its length bounded by its slot and by the largest image a pool of its size
//! can have; the runs must lie in the pool in order, the first holding the pool's
//! superblocks, whose pool size and identity must be the header's (the size of the
//! pool an import makes); and the checksum is checked again as an import writes it.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{file, Access, Pool};
use crate::alloc::UsedSets;
use crate::error::{Error, Result};
use crate::format::device::{DeviceHeader, DeviceRecord, HeaderProblem, RECORD_A, RECORD_B};
use crate::format::layout::{DENTRY_SIZE, MIN_POOL, SB_B};
use crate::format::superblock::SB_LEN;
use crate::format::{Layout, BLOCK, ROOT_INO};
use crate::pmem::Backend;
use crate::time::now_ns;
use std::ops::Range;

/// Where on a device its exports live: bytes `start..start + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportArea {
    pub start: u64,
    pub len: u64,
}

impl ExportArea {
    /// Header copy `k`'s offset.
    fn header(&self, k: u64) -> u64 {
        self.start + k * BLOCK
    }

    /// The bytes one slot holds.
    pub fn slot_len(&self) -> u64 {
        (self.len.saturating_sub(2 * BLOCK) / 2) / BLOCK * BLOCK
    }

    /// Slot `k`'s offset.
    fn slot(&self, k: u32) -> u64 {
        self.start + 2 * BLOCK + u64::from(k) * self.slot_len()
    }
}

const MAGIC: [u8; 8] = *b"LYNXEXPT";
const VERSION: u32 = 1;
/// The header's `flags` bit of a stale mark (zero in every export's header, as in
/// those of builds before stale marks).
const FLAG_STALE: u32 = 1;
/// The encoded header's length; its last 4 bytes are its CRC32C.
const HEADER_LEN: usize = 96;
/// The run header before each run of blocks in an image.
const RUN_LEN: usize = 16;
/// The pool is read, and the image written, in pieces of this many bytes.
const CHUNK: usize = 4 << 20;

/// One export's header: which slot holds it and how to check it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportHeader {
    pub generation: u64,
    pub slot: u32,
    /// The exported pool's identity (its superblock's).
    pub uuid: [u8; 16],
    pub pool_size: u64,
    /// The image's length in the slot, and its CRC32C.
    pub image_len: u64,
    pub image_crc: u32,
    /// Pool blocks the image holds (the rest were zero).
    pub blocks: u64,
    /// When the export (or the stale mark) was made, ns since the epoch.
    pub exported_ns: u64,
    /// A stale mark, not an export: the pool was opened read-write after the export
    /// of the generation before (its `slot` names that export's slot; no image).
    pub stale: bool,
}

impl ExportHeader {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.slot.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..40].copy_from_slice(&self.uuid);
        b[40..48].copy_from_slice(&self.pool_size.to_le_bytes());
        b[48..56].copy_from_slice(&self.image_len.to_le_bytes());
        b[56..60].copy_from_slice(&self.image_crc.to_le_bytes());
        let flags = if self.stale { FLAG_STALE } else { 0 };
        b[60..64].copy_from_slice(&flags.to_le_bytes());
        b[64..72].copy_from_slice(&self.blocks.to_le_bytes());
        b[72..80].copy_from_slice(&self.exported_ns.to_le_bytes());
        let crc = crate::format::crc::of(&b[..HEADER_LEN - 4]);
        b[HEADER_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// A header copy, or why it is not one.
    fn decode(b: &[u8; HEADER_LEN]) -> std::result::Result<ExportHeader, String> {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        if b[0..8] != MAGIC {
            return Err("no export header".into());
        }
        if crate::format::crc::of(&b[..HEADER_LEN - 4]) != u32_at(HEADER_LEN - 4) {
            return Err("export header checksum mismatch (torn or damaged)".into());
        }
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!(
                "export format version {version} (this build reads {VERSION}): made by a \
                 newer LynxFS"
            ));
        }
        Ok(ExportHeader {
            slot: u32_at(12),
            generation: u64_at(16),
            uuid: b[24..40].try_into().expect("16 bytes"),
            pool_size: u64_at(40),
            image_len: u64_at(48),
            image_crc: u32_at(56),
            blocks: u64_at(64),
            exported_ns: u64_at(72),
            stale: u32_at(60) & FLAG_STALE != 0,
        })
    }
}

/// What an export wrote.
#[derive(Clone, Debug)]
pub struct ExportReport {
    pub header: ExportHeader,
    /// The generation it replaced as the device's current export, if any.
    pub replaced: Option<u64>,
}

/// Why a pool is opened, as far as its device's export is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpenFor {
    /// Use: a read-write open may change the pool and hand out device blocks, so the
    /// device's export is marked stale first.
    Use,
    /// An export: the open only closes the pool cleanly (recovery, if it was not
    /// closed, changes metadata only), which reuses no device block, so the current
    /// export stays valid until the new one supersedes it.
    Export,
}

/// What a reader of a device's export does with a stale one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfStale {
    /// Refuse, saying why and what to do (import, and a mount or check of a device).
    Refuse,
    /// Read the export the mark invalidates anyway, for a read-only look (`--stale`):
    /// [`Export::stale`] says so. Its files may show other files' bytes.
    Read,
}

/// The two header copies as found: each a header or why it is not usable.
fn read_headers(
    dev: &File,
    dev_path: &Path,
    area: &ExportArea,
) -> Result<[std::result::Result<ExportHeader, String>; 2]> {
    let mut out = [Err(String::new()), Err(String::new())];
    for (k, slot) in out.iter_mut().enumerate() {
        let mut b = [0u8; HEADER_LEN];
        dev.read_exact_at(&mut b, area.header(k as u64))
            .map_err(|e| Error::io(dev_path, e))?;
        *slot = ExportHeader::decode(&b).and_then(|h| check_lengths(h, area));
    }
    Ok(out)
}

/// A header's lengths bounded before anything is read or allocated by them: its image
/// fits in its slot and is no longer than the image of any pool of its size can be,
/// and that size is a pool's (the image's superblock must then agree, `Runs`).
fn check_lengths(h: ExportHeader, area: &ExportArea) -> std::result::Result<ExportHeader, String> {
    if h.slot > 1 || h.image_len > area.slot_len() {
        return Err(format!(
            "export header names slot {} of {} bytes, beyond the area",
            h.slot, h.image_len
        ));
    }
    if h.stale {
        return Ok(h); // a mark names no image
    }
    if h.pool_size < MIN_POOL {
        return Err(format!(
            "export header names a pool of {} bytes, smaller than any pool ({MIN_POOL})",
            h.pool_size
        ));
    }
    if h.image_len > max_image_len(h.pool_size) {
        return Err(format!(
            "export header names an image of {} bytes, more than a pool of {} bytes can \
             need ({})",
            h.image_len,
            h.pool_size,
            max_image_len(h.pool_size)
        ));
    }
    Ok(h)
}

/// The longest image of a pool of `pool_size` bytes: every block a run of its own
/// (runs never overlap), then the end mark.
fn max_image_len(pool_size: u64) -> u64 {
    pool_size
        .div_ceil(BLOCK)
        .saturating_mul(BLOCK + RUN_LEN as u64)
        .saturating_add(RUN_LEN as u64)
}

/// The valid headers, newest first.
fn newest_first(headers: &[std::result::Result<ExportHeader, String>; 2]) -> Vec<&ExportHeader> {
    let mut valid: Vec<&ExportHeader> = headers.iter().filter_map(|h| h.as_ref().ok()).collect();
    valid.sort_by_key(|h| std::cmp::Reverse(h.generation));
    valid
}

/// Checks `area` fits in the device and holds two slots of at least one block.
fn check_area(dev: &File, dev_path: &Path, area: &ExportArea) -> Result<()> {
    let size = device_len(dev, dev_path)?;
    if area
        .start
        .checked_add(area.len)
        .is_none_or(|end| end > size)
    {
        return Err(Error::Invalid(format!(
            "{}: the export area {}..+{} lies beyond the device's {size} bytes",
            dev_path.display(),
            area.start,
            area.len
        )));
    }
    if area.slot_len() < BLOCK {
        return Err(Error::Invalid(format!(
            "{}: the export area ({} bytes) is too small for two slots",
            dev_path.display(),
            area.len
        )));
    }
    Ok(())
}

/// A device's length: a file's size, or a block device's (its size is 0 in `stat`).
fn device_len(dev: &File, dev_path: &Path) -> Result<u64> {
    let meta = dev.metadata().map_err(|e| Error::io(dev_path, e))?;
    super::file_size(dev, &meta, dev_path)
}

/// Exports the pool at `pool_path` into `area` of the device `dev` (open for reading
/// and writing). The pool is opened alone (refused while a process has it open), closed
/// cleanly, and copied while its lock is still held, so the image is a clean pool.
/// Nothing of the device's current export changes until the new one is durable.
pub fn export<B: Backend>(
    pool_path: &Path,
    backend: B,
    dev: &File,
    dev_path: &Path,
    area: ExportArea,
) -> Result<ExportReport> {
    check_area(dev, dev_path, &area)?;
    let pool = open_alone(pool_path, backend)?;
    export_open(pool, dev, dev_path, area)
}

/// Opens the pool to export, alone (refused while anyone has it open).
fn open_alone<B: Backend>(pool_path: &Path, backend: B) -> Result<Pool<B>> {
    Pool::open_for(
        pool_path,
        Access::Exclusive,
        backend,
        &crate::progress::Quiet,
        None,
        OpenFor::Export,
    )
}

/// Exports a hybrid pool into its own data device's export area (`lynxfs export`).
pub fn export_hybrid<B: Backend>(pool_path: &Path, backend: B) -> Result<ExportReport> {
    let pool = open_alone(pool_path, backend)?;
    let sb = pool.superblock();
    let (Some(header), Some(record)) = (pool.device_header(), super::device::record(&pool.pm, &sb))
    else {
        return Err(Error::Invalid(format!(
            "{}: not a hybrid pool (its data is in the pool, there is no data device to \
             export to)",
            pool_path.display()
        )));
    };
    let area = area_of(header);
    let dev_path = PathBuf::from(OsStr::from_bytes(&record.path));
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&dev_path)
        .map_err(|e| Error::io(&dev_path, e))?;
    check_area(&dev, &dev_path, &area)?;
    export_open(pool, &dev, &dev_path, area)
}

/// The export area a device's header names.
fn area_of(h: &DeviceHeader) -> ExportArea {
    ExportArea {
        start: h.export_off,
        len: h.export_len,
    }
}

/// Exports `pool`, opened alone, then lets it go.
fn export_open<B: Backend>(
    pool: Pool<B>,
    dev: &File,
    dev_path: &Path,
    area: ExportArea,
) -> Result<ExportReport> {
    let headers = read_headers(dev, dev_path, &area)?;
    let current = newest_first(&headers).first().map(|h| (*h).clone());
    pool.close()?;
    let sb = pool.superblock();
    let slot = current.as_ref().map_or(0, |h| 1 - h.slot);
    let mut writer = ImageWriter {
        dev,
        dev_path,
        base: area.slot(slot),
        cap: area.slot_len(),
        len: 0,
        buf: Vec::with_capacity(CHUNK + RUN_LEN),
        crc: 0,
        blocks: 0,
    };
    let mut chunk = vec![0u8; CHUNK];
    for range in regions(&pool.layout, &pool.alloc.used_sets()) {
        let mut off = range.start;
        while off < range.end {
            let len = (range.end - off).min(CHUNK as u64) as usize;
            pool.pm.read(off, &mut chunk[..len]);
            writer.add_runs(off, &chunk[..len])?;
            off += len as u64;
        }
    }
    let (image_len, image_crc, blocks) = writer.finish()?;
    dev.sync_data().map_err(|e| Error::io(dev_path, e))?;
    let generation = current.as_ref().map_or(1, |h| h.generation + 1);
    let header = ExportHeader {
        generation,
        slot,
        uuid: sb.uuid,
        pool_size: sb.geo.pool_size,
        image_len,
        image_crc,
        blocks,
        exported_ns: now_ns(),
        stale: false,
    };
    // The commit point: the header that names the new slot, durable.
    dev.write_all_at(&header.encode(), area.header(generation % 2))
        .and_then(|()| dev.sync_data())
        .map_err(|e| Error::io(dev_path, e))?;
    // The pool's lock is released only now: nothing changed the pool while it was
    // copied, and no open could read the old header, find it already stale, and go
    // on writing device blocks this export's header then claims it has.
    drop(pool);
    Ok(ExportReport {
        header,
        replaced: current.map(|h| h.generation),
    })
}

/// Marks the current export of device `dev` (header `h`) stale, durably, unless it
/// is already (or there is none): a read-write open of pool `uuid` calls it before it
/// hands out any device block, so an export that no longer matches the pool is never
/// used as if it did. One read of the two header copies per open; one write and
/// `fdatasync` on the first open after an export.
///
/// The mark is the next generation's header, in the copy its parity selects: the
/// current export's header is untouched, so a torn mark (its checksum fails) leaves
/// that export current, which is right, since the open waiting for the mark did not
/// get past it.
pub(super) fn mark_stale(
    dev: &File,
    dev_path: &Path,
    h: &DeviceHeader,
    uuid: [u8; 16],
) -> Result<()> {
    let area = area_of(h);
    let headers = read_headers(dev, dev_path, &area)?;
    let Some(current) = newest_first(&headers).first().copied() else {
        return Ok(());
    };
    if current.stale {
        return Ok(());
    }
    let mark = ExportHeader {
        generation: current.generation + 1,
        slot: current.slot,
        uuid,
        pool_size: current.pool_size,
        image_len: 0,
        image_crc: 0,
        blocks: 0,
        exported_ns: now_ns(),
        stale: true,
    };
    dev.write_all_at(&mark.encode(), area.header(mark.generation % 2))
        .and_then(|()| dev.sync_data())
        .map_err(|e| Error::io(dev_path, e))
}

/// The parts of a pool an export reads: everything before the inode table
/// (superblocks, journals, saved state), then the pages of the inodes, dentries and
/// data blocks in use (`used`, the allocators' bitmaps): a free slot's bytes mean
/// nothing, and an imported pool has zeros there, as mkfs leaves them. So the time
/// grows with what the pool holds, not with its size.
fn regions(l: &Layout, used: &UsedSets) -> Vec<Range<u64>> {
    let mut pages = Vec::new();
    for_each_set(&used.inodes, l.total_inodes(), |i| {
        pages.push(l.inode_addr(i.max(ROOT_INO)) / BLOCK)
    });
    for_each_set(&used.dentries, l.total_dentries(), |d| {
        let at = l.dentry_addr(d);
        pages.push(at / BLOCK);
        pages.push((at + DENTRY_SIZE - 1) / BLOCK);
    });
    for_each_set(&used.blocks, l.data_blocks, |b| {
        pages.push(l.block_addr(b) / BLOCK)
    });
    // In order already (the tables and the data area follow each other); a dentry
    // page may be pushed twice.
    pages.dedup();
    let mut out: Vec<Range<u64>> = Vec::with_capacity(pages.len() + 1);
    out.push(0..l.inode_off);
    for p in pages {
        let (start, end) = (p * BLOCK, (p + 1) * BLOCK);
        match out.last_mut() {
            Some(r) if r.end >= start => r.end = r.end.max(end),
            _ => out.push(start..end),
        }
    }
    out
}

/// Calls `f` with each set bit's index below `len`.
fn for_each_set(bits: &[u64], len: u64, mut f: impl FnMut(u64)) {
    for (w, &word) in bits.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            let i = w as u64 * 64 + u64::from(word.trailing_zeros());
            if i >= len {
                return;
            }
            f(i);
            word &= word - 1;
        }
    }
}

/// Writes an image's runs into a slot, buffered, keeping its CRC32C.
struct ImageWriter<'a> {
    dev: &'a File,
    dev_path: &'a Path,
    /// The slot's offset and length, and how much of it is written.
    base: u64,
    cap: u64,
    len: u64,
    buf: Vec<u8>,
    crc: u32,
    blocks: u64,
}

impl ImageWriter<'_> {
    /// Adds the non-zero blocks of `bytes` (the pool's bytes at `off`) as runs.
    fn add_runs(&mut self, off: u64, bytes: &[u8]) -> Result<()> {
        let block = BLOCK as usize;
        let zero_at = |i: usize| is_zero(&bytes[i..(i + block).min(bytes.len())]);
        let mut i = 0;
        while i < bytes.len() {
            if zero_at(i) {
                i += block;
                continue;
            }
            let start = i;
            while i < bytes.len() && !zero_at(i) {
                i += block;
            }
            let run = &bytes[start..i.min(bytes.len())];
            let n = run.len().div_ceil(block) as u64;
            self.put(&(off + start as u64).to_le_bytes())?;
            self.put(&n.to_le_bytes())?;
            self.put(run)?;
            self.blocks += n;
        }
        Ok(())
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let len = self.buf.len() as u64;
        if self.len + len > self.cap {
            return Err(Error::Export {
                path: self.dev_path.to_path_buf(),
                what: format!(
                    "the export does not fit: each of the export area's two slots holds {} \
                     bytes, and the pool's non-zero blocks need more (the device's current \
                     export is unchanged)",
                    self.cap
                ),
            });
        }
        self.dev
            .write_all_at(&self.buf, self.base + self.len)
            .map_err(|e| Error::io(self.dev_path, e))?;
        self.crc = crc32c::crc32c_append(self.crc, &self.buf);
        self.len += len;
        self.buf.clear();
        Ok(())
    }

    /// Ends the image: (its length, its CRC32C, the blocks it holds).
    fn finish(mut self) -> Result<(u64, u32, u64)> {
        self.put(&[0u8; RUN_LEN])?;
        self.flush()?;
        Ok((self.len, self.crc, self.blocks))
    }
}

fn is_zero(b: &[u8]) -> bool {
    // SAFETY: every bit pattern is a valid u64, and `align_to` only puts whole,
    // aligned words of `b` in the middle part.
    let (head, words, tail) = unsafe { b.align_to::<u64>() };
    head.iter().all(|&x| x == 0) && words.iter().all(|&w| w == 0) && tail.iter().all(|&x| x == 0)
}

/// A device's current export, read and checked: its header, and where its image is
/// (read again, and checked again, by an import: it is never held in memory whole).
pub struct Export {
    pub header: ExportHeader,
    image: ImageAt,
    /// Why a newer export than this one could not be used, if one was found.
    pub skipped: Option<String>,
    /// Read past a stale mark ([`IfStale::Read`]): the pool has been opened
    /// read-write since this export.
    pub stale: bool,
}

/// Reads the device's newest export whose image is intact. `expect_uuid`: the pool the
/// device belongs to (its header's), which the export must be of. Refused with what was
/// found when no export is usable, and (unless `if_stale` says to read it) when a
/// stale mark is newer than any usable export: exports older than a mark are stale.
pub fn read_export(
    dev: &File,
    dev_path: &Path,
    area: ExportArea,
    expect_uuid: Option<[u8; 16]>,
    if_stale: IfStale,
) -> Result<Export> {
    check_area(dev, dev_path, &area)?;
    let headers = read_headers(dev, dev_path, &area)?;
    let mut problems: Vec<String> = headers
        .iter()
        .enumerate()
        .filter_map(|(k, h)| {
            h.as_ref()
                .err()
                .map(|why| format!("header copy {k}: {why}"))
        })
        .collect();
    let mut skipped = None;
    let mut stale = false;
    for h in newest_first(&headers) {
        if let Some(want) = expect_uuid.filter(|u| *u != h.uuid) {
            problems.push(format!(
                "export generation {} is of pool {}, but the device belongs to pool {}",
                h.generation,
                hex(&h.uuid),
                hex(&want)
            ));
            continue;
        }
        if h.stale {
            match if_stale {
                IfStale::Refuse => return Err(stale_error(dev_path, h, &problems)),
                IfStale::Read => {
                    stale = true;
                    continue;
                }
            }
        }
        let image = ImageAt {
            dev: dev.try_clone().map_err(|e| Error::io(dev_path, e))?,
            path: dev_path.to_path_buf(),
            at: area.slot(h.slot),
        };
        let why = match image.stream(h, |_, _| Ok(())) {
            Ok(()) => {
                return Ok(Export {
                    header: h.clone(),
                    image,
                    skipped,
                    stale,
                })
            }
            Err(ImageFault::Io(e)) => return Err(e),
            Err(ImageFault::Damaged(why)) => why,
        };
        let problem = format!(
            "export generation {} (slot {}): {why}",
            h.generation, h.slot
        );
        skipped.get_or_insert_with(|| problem.clone());
        problems.push(problem);
    }
    Err(Error::Export {
        path: dev_path.to_path_buf(),
        what: format!(
            "no usable export ({}): export the pool to its device first (`lynxfs export \
             POOL`, or `lynxfs umount --export DIR`)",
            problems.join("; ")
        ),
    })
}

/// The refusal of an export that a stale mark (`mark`) invalidates.
fn stale_error(dev_path: &Path, mark: &ExportHeader, problems: &[String]) -> Error {
    let newer = match problems.is_empty() {
        true => String::new(),
        false => format!(" (newer than the mark: {})", problems.join("; ")),
    };
    Error::Export {
        path: dev_path.to_path_buf(),
        what: format!(
            "the export is stale: its pool was opened read-write after it was made (stale \
             mark of generation {}{newer}), so its metadata may name device blocks since \
             reused or freed, and importing, mounting or checking it would show other \
             files' bytes or lose data. Open the pool and export it again (`lynxfs export \
             POOL`, or `lynxfs umount --export DIR`); to look at the stale export \
             read-only anyway: `lynxfs fsck --stale DEVICE` or `lynxfs mount --stale -o ro \
             DEVICE DIR`",
            mark.generation
        ),
    }
}

/// A data device, its header read and checked, for reading its export.
#[derive(Debug)]
pub struct DataDevice {
    pub file: File,
    pub path: PathBuf,
    pub header: DeviceHeader,
}

impl DataDevice {
    /// Opens `path` (read-only) and reads its header; refused, saying why, when it is
    /// not a LynxFS data device.
    pub fn open(path: &Path) -> Result<DataDevice> {
        let file = File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Missing {
                path: path.to_path_buf(),
            },
            _ => Error::io(path, e),
        })?;
        let header = super::device::read_header(&file)
            .map_err(|e| Error::io(path, e))?
            .map_err(|p| Error::Export {
                path: path.to_path_buf(),
                what: match p {
                    HeaderProblem::Magic => "not a LynxFS data device".to_string(),
                    p => format!("not a usable LynxFS data device: {p}"),
                },
            })?;
        Ok(DataDevice {
            file,
            path: path.to_path_buf(),
            header,
        })
    }

    /// Whether `path` starts with a data device's header (so `lynxfs mount`, `fsck`
    /// and `info` can tell a device from a pool).
    pub fn is_device(path: &Path) -> bool {
        use std::os::unix::fs::FileTypeExt;
        // Only a regular file or a block device is read: opening a fifo would wait
        // for a writer, and a character device may never answer.
        let readable = std::fs::metadata(path)
            .is_ok_and(|m| m.file_type().is_file() || m.file_type().is_block_device());
        readable
            && File::open(path)
                .ok()
                .and_then(|f| super::device::read_header(&f).ok())
                .is_some_and(|h| !matches!(h, Err(HeaderProblem::Magic)))
    }

    /// The device's newest usable export, which must be of the pool its header names.
    pub fn read_export(&self, if_stale: IfStale) -> Result<Export> {
        read_export(
            &self.file,
            &self.path,
            area_of(&self.header),
            Some(self.header.pool_uuid),
            if_stale,
        )
    }

    /// Claims the device for a use of it alone (`pool::claim`) while the returned
    /// file is open: refused, naming the holder, while a pool uses it, so that the
    /// import is never of a device another pool is changing, nor a second pool on it.
    /// A block device is opened exclusively (`O_EXCL`: refused while the kernel or a
    /// program holds it so), as mkfs.ext4 does. A device this user cannot write is not
    /// claimed: nothing done with it can change it (an imported pool's read-write open
    /// is refused its device).
    fn claim_alone(&self) -> Result<Option<File>> {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        let block = self
            .file
            .metadata()
            .is_ok_and(|m| m.file_type().is_block_device());
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        if block {
            options.custom_flags(libc::O_EXCL);
        }
        let file = match options.open(&self.path) {
            Ok(file) => file,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EACCES | libc::EPERM | libc::EROFS)
                ) =>
            {
                return Ok(None)
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(Error::Device {
                    device: self.path.clone(),
                    what: "busy: mounted, or held exclusively by another program".into(),
                })
            }
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        let me = super::claim::Claimant::Alone {
            what: "an import of the device (lynxfs import, or fsck or mount of the device)".into(),
        };
        super::claim::claim(&file, &self.path, &me)?;
        Ok(Some(file))
    }

    /// Rebuilds the device's pool at `new_pool` from its newest usable export; the new
    /// pool records this device (by its absolute path) as its data device. A stale
    /// export is imported only with [`IfStale::Read`], for a read-only look: the new
    /// pool must then never be opened read-write (its files' blocks may be another
    /// pool's now).
    pub fn import(&self, new_pool: &Path, if_stale: IfStale) -> Result<Export> {
        // Said before the export is read: the target, not the export, is the problem.
        if std::fs::symlink_metadata(new_pool).is_ok() {
            return Err(Error::Exists {
                path: new_pool.to_path_buf(),
            });
        }
        let _claim = self.claim_alone()?;
        let e = self.read_export(if_stale)?;
        let abs = std::fs::canonicalize(&self.path).map_err(|e| Error::io(&self.path, e))?;
        let record = DeviceRecord::new(self.header.device_uuid, abs.as_os_str().as_bytes())
            .ok_or_else(|| {
                Error::Invalid(format!("{}: the device's path is too long", abs.display()))
            })?;
        e.write_pool(new_pool, Some(&record))?;
        Ok(e)
    }
}

/// The pool's hex uuid, as `lynxfs info` prints it.
fn hex(u: &[u8; 16]) -> String {
    u.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why an image was not read: damaged (another export may still be usable), or the
/// device could not be read (nothing else on it can be either).
enum ImageFault {
    Damaged(String),
    Io(Error),
}

/// Where an export's image is: its device and the offset of its slot.
struct ImageAt {
    dev: File,
    path: PathBuf,
    at: u64,
}

impl ImageAt {
    /// Reads the image `h` names in pieces of [`CHUNK`] bytes, checking as it goes
    /// ([`Runs`]) and calling `sink(pool offset, bytes)` with the pool's bytes; at the
    /// end, the checksum. Nothing it allocates depends on the header: `sink` may have
    /// been given bytes of an image found damaged at the end, so what it builds is
    /// used only when this returns `Ok`.
    fn stream(
        &self,
        h: &ExportHeader,
        mut sink: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> std::result::Result<(), ImageFault> {
        let mut runs = Runs::new(h);
        let mut buf = vec![0u8; (h.image_len as usize).min(CHUNK)];
        let (mut done, mut crc) = (0u64, 0u32);
        while done < h.image_len {
            let piece = &mut buf[..(h.image_len - done).min(CHUNK as u64) as usize];
            self.dev
                .read_exact_at(piece, self.at + done)
                .map_err(|e| ImageFault::Io(Error::io(&self.path, e)))?;
            crc = crc32c::crc32c_append(crc, piece);
            runs.feed(piece, &mut sink)?;
            done += piece.len() as u64;
        }
        runs.finish().map_err(ImageFault::Damaged)?;
        if crc != h.image_crc {
            return Err(ImageFault::Damaged(
                "its image fails its checksum (torn or overwritten)".into(),
            ));
        }
        Ok(())
    }
}

/// The bytes of the pool that hold its two superblock copies.
const SB_HEAD: usize = SB_B as usize + SB_LEN;

/// An image's runs, parsed as its bytes arrive: each run lies in the pool, after the
/// run before (so their bytes add up to the pool's size at most); the first holds the
/// pool's superblocks, whose pool size and identity must be the header's; the end
/// mark ends the image.
struct Runs {
    pool_size: u64,
    uuid: [u8; 16],
    image_len: u64,
    /// Image bytes consumed.
    pos: u64,
    /// The run header being read, and how many of its bytes are in.
    head: [u8; RUN_LEN],
    head_len: usize,
    /// The run being read: the pool offset of its next byte, and its bytes left.
    body: Option<(u64, u64)>,
    /// Where the next run may start in the pool (the end of the one before).
    next_free: u64,
    /// The pool's first bytes, until the superblocks are in and checked.
    sb: Option<Box<[u8; SB_HEAD]>>,
    ended: bool,
}

impl Runs {
    fn new(h: &ExportHeader) -> Runs {
        Runs {
            pool_size: h.pool_size,
            uuid: h.uuid,
            image_len: h.image_len,
            pos: 0,
            head: [0; RUN_LEN],
            head_len: 0,
            body: None,
            next_free: 0,
            sb: Some(Box::new([0; SB_HEAD])),
            ended: false,
        }
    }

    /// Takes the image's next bytes, giving each run's bytes to `sink`.
    fn feed(
        &mut self,
        mut bytes: &[u8],
        sink: &mut impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> std::result::Result<(), ImageFault> {
        while !bytes.is_empty() {
            if self.ended {
                return Err(ImageFault::Damaged(format!(
                    "{} bytes follow the image's end mark",
                    self.image_len - self.pos
                )));
            }
            let took = match self.body {
                Some((off, left)) => {
                    let n = (left as usize).min(bytes.len());
                    self.body_bytes(off, &bytes[..n])
                        .map_err(ImageFault::Damaged)?;
                    sink(off, &bytes[..n]).map_err(ImageFault::Io)?;
                    self.body = (left > n as u64).then_some((off + n as u64, left - n as u64));
                    n
                }
                None => {
                    let at = self.pos - self.head_len as u64;
                    let n = (RUN_LEN - self.head_len).min(bytes.len());
                    self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
                    self.head_len += n;
                    if self.head_len == RUN_LEN {
                        self.start_run(at).map_err(ImageFault::Damaged)?;
                    }
                    n
                }
            };
            self.pos += took as u64;
            bytes = &bytes[took..];
        }
        Ok(())
    }

    /// A whole run header is in, the one at image byte `at`.
    fn start_run(&mut self, at: u64) -> std::result::Result<(), String> {
        self.head_len = 0;
        let word = |o: usize| u64::from_le_bytes(self.head[o..o + 8].try_into().expect("8"));
        let (off, blocks) = (word(0), word(8));
        if blocks == 0 {
            self.ended = true;
            return Ok(());
        }
        let bad = || format!("a run at byte {at} names blocks {off}+{blocks} outside the pool");
        if off % BLOCK != 0 || off >= self.pool_size || off < self.next_free {
            return Err(bad());
        }
        // Only the pool's last block may be short.
        let len = blocks
            .checked_mul(BLOCK)
            .ok_or_else(bad)?
            .min(self.pool_size - off);
        if len <= (blocks - 1) * BLOCK {
            return Err(bad());
        }
        if self.sb.is_some() && (off != 0 || len < SB_HEAD as u64) {
            return Err("the image does not start with the pool's superblocks".into());
        }
        self.body = Some((off, len));
        self.next_free = off + len;
        Ok(())
    }

    /// Bytes of a run at pool offset `off`: the superblocks are checked once in.
    fn body_bytes(&mut self, off: u64, bytes: &[u8]) -> std::result::Result<(), String> {
        let Some(head) = self.sb.as_mut() else {
            return Ok(());
        };
        let start = off as usize;
        let n = bytes.len().min(SB_HEAD - start);
        head[start..start + n].copy_from_slice(&bytes[..n]);
        if start + n < SB_HEAD {
            return Ok(());
        }
        let head = self.sb.take().expect("checked above");
        let sb = super::pick_superblock(Path::new("its image's pool"), self.pool_size, |o, b| {
            b.copy_from_slice(&head[o as usize..o as usize + b.len()])
        })
        .map_err(|e| e.to_string())?;
        if sb.geo.pool_size != self.pool_size || sb.uuid != self.uuid {
            return Err(format!(
                "its header names pool {} of {} bytes, its image's superblock pool {} of {} \
                 bytes",
                hex(&self.uuid),
                self.pool_size,
                hex(&sb.uuid),
                sb.geo.pool_size
            ));
        }
        Ok(())
    }

    /// The image's bytes are all in: it must have ended with its end mark.
    fn finish(&self) -> std::result::Result<(), String> {
        match (self.ended, self.body) {
            (true, _) if self.sb.is_none() => Ok(()),
            (true, _) => Err("the image holds no superblock".into()),
            (false, Some(_)) => Err("the image ends inside a run".into()),
            (false, None) => Err(format!(
                "the image ends inside a run header at byte {}",
                self.pos - self.head_len as u64
            )),
        }
    }
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("header", &self.header)
            .field("device", &self.image.path)
            .field("skipped", &self.skipped)
            .field("stale", &self.stale)
            .finish()
    }
}

impl Export {
    /// Writes the exported pool into a new pool file at `path` (refused if something is
    /// there), built beside it and renamed into place, durable when this returns.
    pub fn import(&self, path: &Path) -> Result<()> {
        self.write_pool(path, None)
    }

    /// [`Export::import`], the pool's records of its data device replaced by `record`
    /// (the device where it is now, which may not be where it was exported from). The
    /// image is read and checked again as it is written: the device may have changed
    /// since [`read_export`] checked it, and then nothing is left at `path`.
    fn write_pool(&self, path: &Path, record: Option<&DeviceRecord>) -> Result<()> {
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(Error::Exists {
                path: path.to_path_buf(),
            });
        }
        let staged = file::Staged::create(path, self.header.pool_size)?;
        let write = |off: u64, bytes: &[u8]| {
            staged
                .file()
                .write_all_at(bytes, off)
                .map_err(|e| Error::io(path, e))
        };
        match self.image.stream(&self.header, write) {
            Ok(()) => {}
            Err(ImageFault::Io(e)) => return Err(e),
            Err(ImageFault::Damaged(why)) => {
                return Err(Error::Export {
                    path: self.image.path.clone(),
                    what: format!(
                        "export generation {} changed while it was imported: {why}",
                        self.header.generation
                    ),
                })
            }
        }
        if let Some(r) = record {
            let bytes = r.encode();
            for at in [RECORD_A, RECORD_B] {
                write(at, &bytes)?;
            }
        }
        staged.commit(false)
    }
}
