//! The mount table as this process sees it (`/proc/self/mountinfo`).

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
