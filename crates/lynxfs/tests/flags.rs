//! Inode flags as stat reports them (issue 30, item 15): statx's `stx_attributes`
//! (built by the preload from [`lynxfs::Stat::flags`]) and a new ctime for chattr.

use crate::common;

use common::fs;
use lynxfs::meta::flags::{APPEND, NODUMP};
use lynxfs::Cred;

#[test]
fn stat_reports_the_inode_flags_and_chattr_moves_ctime() {
    let fs = fs(16 << 20);
    let s = fs.session(Cred::root());
    let fd = s.create("/f", 0o644).unwrap();
    fs.close_fd(fd).unwrap();
    let before = s.stat("/f").unwrap();
    assert_eq!(before.flags, 0);
    std::thread::sleep(std::time::Duration::from_millis(2));
    fs.ns()
        .set_inode_flags(before.ino, APPEND | NODUMP, &Cred::root())
        .unwrap();
    let after = s.stat("/f").unwrap();
    assert_eq!(after.flags, APPEND | NODUMP);
    assert!(after.ctime > before.ctime, "chattr left ctime alone");
    fs.ns()
        .set_inode_flags(before.ino, 0, &Cred::root())
        .unwrap();
    assert_eq!(s.stat("/f").unwrap().flags, 0);
}
