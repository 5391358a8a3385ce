//! What another user's change of a file's data or size takes away (issue 30, item
//! 15): set-user-ID and set-group-ID (the writer is outside the file's group, so
//! set-group-ID goes even without group execute), and `security.capability`, after a
//! write, a truncate and an fallocate.

use crate::Ctx;

/// A version 2 `vfs_cap_data`: cap_net_raw permitted and effective.
const CAPS: [u8; 20] = [
    0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// Files root makes for [`as_user`]: (name, mode, with capabilities).
const FILES: &[(&str, u32, bool)] = &[
    ("t/pub/kp-falloc", 0o6666, false),
    ("t/pub/kp-cap-write", 0o666, true),
    ("t/pub/kp-cap-falloc", 0o666, true),
    ("t/pub/kp-cap-trunc", 0o666, true),
];

const CAP_NAME: &std::ffi::CStr = c"security.capability";

pub fn prepare(c: &mut Ctx) {
    for &(name, mode, caps) in FILES {
        std::fs::write(c.root.join(name), b"data").unwrap();
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        c.path1(&format!("prep chmod {name}"), name, |p| unsafe {
            libc::chmod(p, mode)
        });
        if caps {
            c.path1(&format!("prep setcap {name}"), name, |p| unsafe {
                // SAFETY: valid path, name and value.
                libc::setxattr(p, CAP_NAME.as_ptr(), CAPS.as_ptr().cast(), CAPS.len(), 0)
            });
        }
    }
}

/// Whether `name` still has capabilities (getxattr's answer).
fn caps_left(c: &mut Ctx, label: &str, name: &str) {
    let p = c.path(name);
    let mut buf = [0u8; 64];
    // SAFETY: valid path and name; `buf` has room for `buf.len()` bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), CAP_NAME.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    c.ret(label, r as i64, false);
}

fn fallocate(c: &mut Ctx, label: &str, name: &str) {
    let fd = c.open(&format!("{label} open"), name, libc::O_WRONLY, 0);
    // SAFETY: fd is open (or -1, and the error is recorded).
    let r = unsafe { libc::fallocate(fd, 0, 0, 8192) };
    c.call(label, r);
    c.close(fd);
}

pub fn as_user(c: &mut Ctx) {
    fallocate(c, "user fallocate 6666", "t/pub/kp-falloc");
    c.stat("user fallocate cleared privs", "t/pub/kp-falloc");
    let fd = c.open(
        "user open cap-write",
        "t/pub/kp-cap-write",
        libc::O_WRONLY,
        0,
    );
    c.write("user write cap-write", fd, b"x");
    c.close(fd);
    fallocate(c, "user fallocate cap-falloc", "t/pub/kp-cap-falloc");
    c.path1(
        "user truncate cap-trunc",
        "t/pub/kp-cap-trunc",
        // SAFETY: p is the NUL-terminated path the harness passes, alive for the call.
        |p| unsafe { libc::truncate(p, 1) },
    );
    for &(name, _, caps) in FILES {
        if caps {
            caps_left(c, &format!("user change left caps of {name}"), name);
        }
    }
}
