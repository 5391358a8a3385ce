//! The largest file (issue 30, item 15): file block numbers are 32-bit, so a file
//! holds at most (2^32 - 1) blocks of 4 KiB, [`MAX_FILE`] (as ext4 with 4 KiB blocks;
//! tmpfs and XFS allow 8 EiB). Up to it every write works, sparse; beyond it Linux's
//! answers: a write starting at or past it is EFBIG, one that crosses it is cut short
//! there, and a truncate or fallocate past it is EFBIG.

use crate::common;

use common::{errno, fs};
use lynxfs::data::MAX_FILE;
use lynxfs::Cred;

#[test]
fn writes_reach_the_largest_file_and_efbig_starts_there() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    let fd = s.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    assert_eq!(fs.pwrite(fd, b"z", MAX_FILE - 1).unwrap(), 1);
    let st = fs.fstat(fd).unwrap();
    assert_eq!(st.size, MAX_FILE);
    assert!(st.blocks <= 64, "sparse: {} blocks of 512 bytes", st.blocks);
    let mut b = [0u8; 2];
    assert_eq!(fs.pread(fd, &mut b, MAX_FILE - 1).unwrap(), 1);
    assert_eq!(b[0], b'z');
    // Crossing the limit: cut short there, as Linux's generic_write_checks.
    assert_eq!(fs.pwrite(fd, b"12345678", MAX_FILE - 4).unwrap(), 4);
    assert_eq!(errno(fs.pwrite(fd, b"x", MAX_FILE)), libc::EFBIG);
    assert_eq!(errno(fs.pwrite(fd, b"x", u64::MAX - 1)), libc::EFBIG);
    assert_eq!(errno(fs.ftruncate(fd, MAX_FILE + 1)), libc::EFBIG);
    fs.ftruncate(fd, 0).unwrap();
    fs.ftruncate(fd, MAX_FILE).unwrap();
    fs.fallocate(fd, 0, MAX_FILE - 4096, 4096).unwrap();
    assert_eq!(
        errno(fs.fallocate(fd, 0, MAX_FILE - 4096, 4097)),
        libc::EFBIG
    );
    fs.close_fd(fd).unwrap();
}
