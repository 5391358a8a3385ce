//! The mount table as this process sees it (`/proc/self/mountinfo`), and who else
//! holds a mount: other mount namespaces' copies of it, processes using files on it.

use std::path::Path;

/// One line of /proc/self/mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount's device, `major:minor` (for FUSE: `0:` and the connection number).
    pub device: String,
    pub mountpoint: String,
    pub fstype: String,
    pub source: String,
    /// The mount's own options (`rw`, `nosuid`, `relatime`, ...).
    pub options: Vec<String>,
    /// The superblock's options (for FUSE: `user_id=`, `default_permissions`, ...).
    pub super_options: Vec<String>,
}

/// The mounts this process sees, in mount order (a mount over another comes later).
pub fn mounts() -> Vec<MountEntry> {
    mounts_of("self")
}

/// The mounts process `pid` (a number, or `self`) sees: those of its mount namespace.
/// Empty if it is gone or its table cannot be read.
pub fn mounts_of(pid: &str) -> Vec<MountEntry> {
    let info = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
    info.lines().filter_map(parse_line).collect()
}

/// Mounts of one device in a mount namespace other than ours (made by `unshare -m`,
/// a service's PrivateTmp, a container), named by one process in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceCopy {
    pub pid: u32,
    /// The process's command name (`/proc/PID/comm`).
    pub command: String,
    /// Where the device is mounted there, in mount order.
    pub mountpoints: Vec<String>,
}

fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The command name of process `pid`, or "?" once it is gone.
pub fn command_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// The mount namespaces other than ours, among those whose processes we may look
/// at, that have `device` (`major:minor`) mounted: one entry per namespace.
pub fn copies_elsewhere(device: &str) -> Vec<NamespaceCopy> {
    let ns_of = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    let Some(ours) = ns_of("self") else {
        return Vec::new();
    };
    let mut seen = vec![ours];
    let mut copies = Vec::new();
    for pid in pids() {
        let Some(ns) = ns_of(&pid.to_string()) else {
            continue;
        };
        if seen.contains(&ns) {
            continue;
        }
        seen.push(ns);
        let mountpoints: Vec<String> = mounts_of(&pid.to_string())
            .into_iter()
            .filter(|m| m.device == device)
            .map(|m| m.mountpoint)
            .collect();
        if !mountpoints.is_empty() {
            copies.push(NamespaceCopy {
                pid,
                command: command_of(pid),
                mountpoints,
            });
        }
    }
    copies
}

/// Is `path` on `device` (`major:minor`)? Asks no FUSE daemon
/// (`AT_STATX_DONT_SYNC`): the device is the kernel's own.
fn on_device(path: &Path, device: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statx is plain data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: c is NUL-terminated and stx a writable statx buffer.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_STATX_DONT_SYNC,
            0,
            &mut stx,
        )
    };
    r == 0 && format!("{}:{}", stx.stx_dev_major, stx.stx_dev_minor) == device
}

/// The processes (other than this one) with a file, their working directory or their
/// root on `device` (`major:minor`): (pid, command name).
pub fn users_of(device: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            let base = format!("/proc/{pid}");
            let fds = std::fs::read_dir(format!("{base}/fd"))
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()));
            [format!("{base}/cwd"), format!("{base}/root")]
                .into_iter()
                .map(Into::into)
                .chain(fds)
                .any(|p: std::path::PathBuf| on_device(&p, device))
        })
        .map(|pid| (pid, command_of(pid)))
        .collect()
}

/// `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER`.
fn parse_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let left: Vec<&str> = left.split(' ').collect();
    let mut right = right.split(' ');
    let list = |s: &str| s.split(',').map(str::to_string).collect();
    Some(MountEntry {
        device: left.get(2)?.to_string(),
        mountpoint: unescape(left.get(4)?),
        options: list(left.get(5)?),
        fstype: right.next()?.to_string(),
        source: unescape(right.next()?),
        super_options: right.next().map(list).unwrap_or_default(),
    })
}

/// Decodes the octal escapes (`\040` for a space) of /proc/self/mountinfo.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = |c: &u8| (b'0'..=b'7').contains(c);
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(octal) {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/x\0"), r"/x\0");
    }

    #[test]
    fn parses_a_line() {
        let l =
            r"43 27 0:40 / /tmp/a\040b rw,nosuid shared:1 - fuse.lynxfs /dev/shm/p,q rw,user_id=0";
        assert_eq!(
            parse_line(l),
            Some(MountEntry {
                device: "0:40".to_string(),
                mountpoint: "/tmp/a b".to_string(),
                fstype: "fuse.lynxfs".to_string(),
                source: "/dev/shm/p,q".to_string(),
                options: vec!["rw".to_string(), "nosuid".to_string()],
                super_options: vec!["rw".to_string(), "user_id=0".to_string()],
            })
        );
    }
}
