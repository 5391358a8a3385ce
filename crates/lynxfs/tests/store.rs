//! The storage seam seen from outside: file data written through `data::store`
//! reaches the crash checker's recording (a test of the whole engine, so it lives
//! here rather than in the data layer, which may not use the API above it).
use std::sync::atomic::AtomicU64;

use lynxfs::data::store::DataStore;
use lynxfs::data::{file_extents, MapCache};
use lynxfs::format::BLOCK;
use lynxfs::pmem::{Event, RecordingBackend};
use lynxfs::{Cred, Fs, MkfsOptions};

/// A write's bytes go through the store, so the crash checker's recording sees
/// them: stored at the pool offset the store names for the file's block (the one
/// FIEMAP reports), flushed, and fenced before the commit that publishes them.
#[test]
fn the_recording_sees_file_data_written_through_the_store() {
    let rec = RecordingBackend::new();
    let fs = Fs::in_memory(&MkfsOptions::new(16 << 20), rec.clone()).unwrap();
    let s = fs.session(Cred::root());
    let fd = s.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let data: Vec<u8> = (0..BLOCK as usize).map(|i| (i % 251) as u8 + 1).collect();
    rec.take();
    assert_eq!(fs.pwrite(fd, &data, 0).unwrap(), data.len());
    let events = rec.take();

    let ino = s.stat("/f").unwrap().ino;
    let version = AtomicU64::new(0);
    let ext = file_extents(fs.pool(), ino, &MapCache::new(&version, 0, None)).unwrap();
    assert_eq!(ext.len(), 1, "one block written: {ext:?}");
    let blk = fs.pool().layout.block_of(ext[0].physical).unwrap();
    assert_eq!(fs.pool().data().physical(blk), ext[0].physical);

    let at = |want: &Event| events.iter().position(|e| e == want);
    let stored = at(&Event::Store {
        off: ext[0].physical,
        bytes: data.clone(),
    })
    .expect("the data's store recorded at the block's address");
    let flushed = events[stored..]
        .iter()
        .position(|e| matches!(e, Event::Flush { off, .. } if *off >= ext[0].physical && *off < ext[0].physical + BLOCK))
        .expect("its flush recorded");
    assert!(
        events[stored + flushed..].contains(&Event::Fence),
        "a fence after the data's flush: {events:?}"
    );
    let mut back = vec![0u8; data.len()];
    assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), data.len());
    assert_eq!(back, data);
}
