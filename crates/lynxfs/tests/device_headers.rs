//! A data device is input from anyone (issue 42, defect 4: a 560 KiB sparse file whose
//! export header claimed a 39 GiB image made `fsck`, `import` and `mount` die with
//! "memory allocation of 41875931136 bytes failed"). Properties over the device header
//! and the export header parsers, with arbitrary headers and headers mutated from a
//! real device's, raw or re-sealed with a valid checksum as a crafter would: reading
//! the device, its export, importing it and opening its pool never panic, never ask
//! for a huge allocation (this binary's allocator refuses one, which aborts the test),
//! and end in a clear error or in the pool that was exported, of its own size.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lynxfs::format::device::{DeviceHeader, HEADER_LEN};
use lynxfs::pmem::PmemBackend;
use lynxfs::pool::export::{export_hybrid, DataDevice, IfStale};
use lynxfs::{Access, MkfsOptions, Pool};
use proptest::prelude::*;

/// The largest allocation any of these reads may make: far above the pieces an image
/// is read in (4 MiB), far below what a crafted header claims.
const ALLOC_LIMIT: usize = 256 << 20;

/// The system allocator, refusing any allocation larger than [`ALLOC_LIMIT`]: the
/// refusal aborts the process with "memory allocation of N bytes failed", as the
/// defect did (an allocator must not panic).
struct Bounded;

// SAFETY: every call is forwarded to the system allocator unchanged, except that an
// oversized request gets the null pointer, which GlobalAlloc allows for any request.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as the caller promised it.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (nothing else allocates).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: as in `dealloc`; the caller's new size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Bounded = Bounded;

const POOL_SIZE: u64 = 8 << 20;
/// The device file's length: sparse, so that crafted areas of tens of GiB fit in it
/// and pass every check of the device's size.
const DEVICE_LEN: u64 = 128 << 30;
/// The export header's length (its last 4 bytes are its CRC32C) and its fields'
/// offsets (docs/FORMAT.md, "Exports").
const EXPORT_HEADER_LEN: usize = 96;
const EXPORT_FIELDS: [(usize, usize); 8] = [
    (8, 4),  // version
    (12, 4), // slot
    (16, 8), // generation
    (40, 8), // pool size
    (48, 8), // image length
    (56, 4), // image checksum
    (60, 4), // flags
    (64, 8), // blocks
];
/// The device header's fields (format::device).
const DEVICE_FIELDS: [(usize, usize); 6] = [
    (8, 4),  // version
    (12, 4), // block size
    (56, 8), // data offset
    (64, 8), // data length
    (72, 8), // export offset
    (80, 8), // export length
];
/// The longest any one case may take: a crafted length must not make a read long.
const CASE_TIME: Duration = Duration::from_secs(10);

/// A hybrid pool exported to its device, and the device's bytes that matter (its
/// header block and its export area's headers and image), to restore before each case.
struct Fixture {
    dir: tempfile::TempDir,
    pool: PathBuf,
    device: PathBuf,
    pristine: Vec<(u64, Vec<u8>)>,
    export_off: u64,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let (pool, device) = (dir.path().join("pool"), dir.path().join("device"));
        let mut opts = MkfsOptions::new(POOL_SIZE);
        opts.data_device = Some(device.clone());
        Pool::mkfs(&pool, &opts, PmemBackend::default()).unwrap();
        let report = export_hybrid(&pool, PmemBackend::default()).unwrap();
        let header = DataDevice::open(&device).unwrap().header;
        let dev = File::open(&device).unwrap();
        let read = |at: u64, len: u64| {
            let mut b = vec![0u8; len as usize];
            dev.read_exact_at(&mut b, at).unwrap();
            (at, b)
        };
        let pristine = vec![read(0, 4096), read(header.export_off, header.export_len)];
        assert!(report.header.image_len < header.export_len);
        OpenOptions::new()
            .write(true)
            .open(&device)
            .unwrap()
            .set_len(DEVICE_LEN)
            .unwrap();
        Fixture {
            dir,
            pool,
            device,
            pristine,
            export_off: header.export_off,
        }
    }

    /// The device as exported, then `edits` applied to it.
    fn device_with(&self, edits: &[Edit]) -> File {
        let dev = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.device)
            .unwrap();
        for (at, bytes) in &self.pristine {
            dev.write_all_at(bytes, *at).unwrap();
        }
        for e in edits {
            e.apply(&dev, self.export_off);
        }
        dev
    }
}

/// One change to a device's headers.
#[derive(Clone, Debug)]
enum Edit {
    /// Bytes written over the device header, unsealed.
    DeviceRaw { offset: usize, bytes: Vec<u8> },
    /// A device header field set and the header re-sealed.
    DeviceField { field: usize, value: u64 },
    /// Bytes written over export header copy `copy`, unsealed.
    ExportRaw {
        copy: u64,
        offset: usize,
        bytes: Vec<u8>,
    },
    /// An export header field set and the copy re-sealed.
    ExportField { copy: u64, field: usize, value: u64 },
}

impl Edit {
    fn apply(&self, dev: &File, export_off: u64) {
        match self {
            Edit::DeviceRaw { offset, bytes } => raw(dev, 0, HEADER_LEN, *offset, bytes),
            Edit::DeviceField { field, value } => {
                seal(dev, 0, HEADER_LEN, DEVICE_FIELDS[*field], *value)
            }
            Edit::ExportRaw {
                copy,
                offset,
                bytes,
            } => raw(
                dev,
                export_off + copy * 4096,
                EXPORT_HEADER_LEN,
                *offset,
                bytes,
            ),
            Edit::ExportField { copy, field, value } => seal(
                dev,
                export_off + copy * 4096,
                EXPORT_HEADER_LEN,
                EXPORT_FIELDS[*field],
                *value,
            ),
        }
    }
}

/// `bytes` over the header of `len` bytes at `at`, from `offset` on (within it).
fn raw(dev: &File, at: u64, len: usize, offset: usize, bytes: &[u8]) {
    let offset = offset % len;
    let n = bytes.len().min(len - offset);
    dev.write_all_at(&bytes[..n], at + offset as u64).unwrap();
}

/// The header of `len` bytes at `at` with field `(offset, width)` set to `value`, its
/// checksum (its last 4 bytes) made to match.
fn seal(dev: &File, at: u64, len: usize, (offset, width): (usize, usize), value: u64) {
    let mut b = vec![0u8; len];
    dev.read_exact_at(&mut b, at).unwrap();
    b[offset..offset + width].copy_from_slice(&value.to_le_bytes()[..width]);
    let crc = crc32c::crc32c(&b[..len - 4]);
    b[len - 4..].copy_from_slice(&crc.to_le_bytes());
    dev.write_all_at(&b, at).unwrap();
}

/// Field values a crafter would try: the defect's, huge, edge, block-aligned, any.
fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(41_875_931_136u64),
        Just(0u64),
        Just(u64::MAX),
        Just(1u64 << 30),
        (0u64..1 << 24).prop_map(|b| b * 4096),
        (1u64..16).prop_map(|g| g << 30),
        any::<u64>(),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    let bytes = proptest::collection::vec(any::<u8>(), 1..16);
    prop_oneof![
        (0..HEADER_LEN, bytes.clone())
            .prop_map(|(offset, bytes)| Edit::DeviceRaw { offset, bytes }),
        (0..DEVICE_FIELDS.len(), value())
            .prop_map(|(field, value)| Edit::DeviceField { field, value }),
        (0..2u64, 0..EXPORT_HEADER_LEN, bytes).prop_map(|(copy, offset, bytes)| {
            Edit::ExportRaw {
                copy,
                offset,
                bytes,
            }
        }),
        (0..2u64, 0..EXPORT_FIELDS.len(), value())
            .prop_map(|(copy, field, value)| Edit::ExportField { copy, field, value }),
    ]
}

/// Everything that reads a device's headers, on the edited device: whatever it
/// answers, an import that succeeds made the pool that was exported, of its size.
fn read_everything(f: &Fixture, case: usize) -> Result<(), TestCaseError> {
    if let Ok(device) = DataDevice::open(&f.device) {
        let _ = device.read_export(IfStale::Read);
        let target = f.dir.path().join(format!("import-{case}"));
        if device.import(&target, IfStale::Read).is_ok() {
            let len = std::fs::metadata(&target).unwrap().len();
            std::fs::remove_file(&target).unwrap();
            prop_assert_eq!(len, POOL_SIZE, "an import made a pool of another size");
        }
    }
    // The pool's own open reads the device's header too.
    let _ = Pool::open(&f.pool, Access::ReadOnly, PmemBackend::default());
    Ok(())
}

#[test]
fn crafted_device_and_export_headers_give_errors_never_a_crash() {
    let f = Fixture::new();
    // The unedited device imports: the properties are not vacuous.
    f.device_with(&[]);
    let case = Cell::new(0);
    read_everything(&f, 0).unwrap();
    let target = f.dir.path().join("plain");
    DataDevice::open(&f.device)
        .unwrap()
        .import(&target, IfStale::Refuse)
        .expect("the unedited device imports");
    let config = ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(edits in proptest::collection::vec(edit(), 1..4))| {
        case.set(case.get() + 1);
        f.device_with(&edits);
        let start = Instant::now();
        read_everything(&f, case.get())?;
        prop_assert!(start.elapsed() < CASE_TIME, "took {:?}", start.elapsed());
    });
}

#[test]
fn the_defects_header_is_refused_with_a_clear_error() {
    let f = Fixture::new();
    // An export area of 100 GiB (two slots of 50), its header claiming a 39 GiB image
    // of a 40 GiB pool.
    f.device_with(&[
        Edit::DeviceField {
            field: 5,
            value: 100 << 30,
        },
        Edit::ExportField {
            copy: 1,
            field: 4,
            value: 41_875_931_136,
        },
        Edit::ExportField {
            copy: 1,
            field: 3,
            value: 40 << 30,
        },
    ]);
    let err = DataDevice::open(&f.device)
        .unwrap()
        .import(&f.dir.path().join("x"), IfStale::Refuse)
        .expect_err("a crafted export")
        .to_string();
    assert!(err.contains("no usable export"), "{err}");
    assert!(!f.dir.path().join("x").exists());
}

#[test]
fn a_header_naming_another_pool_size_than_its_image_is_refused() {
    let f = Fixture::new();
    f.device_with(&[Edit::ExportField {
        copy: 1,
        field: 3,
        value: 1 << 30,
    }]);
    let err = DataDevice::open(&f.device)
        .unwrap()
        .import(&f.dir.path().join("x"), IfStale::Refuse)
        .expect_err("a pool size that is not the image's")
        .to_string();
    assert!(err.contains("superblock"), "{err}");
    assert!(!f.dir.path().join("x").exists());
}

#[test]
fn any_device_header_decodes_or_is_refused() {
    proptest!(|(bytes in proptest::collection::vec(any::<u8>(), HEADER_LEN))| {
        let b: [u8; HEADER_LEN] = bytes.try_into().unwrap();
        if let Ok(h) = DeviceHeader::decode(&b) {
            let _ = h.device_len();
            prop_assert_eq!(DeviceHeader::decode(&h.encode()), Ok(h));
        }
    });
}
