//! One pool per data device (issue 42, defect 2). Two pools on one device (a copy of
//! the pool file, a pool imported from the device's export, a mount of the device
//! alone) would each hand out the device's blocks as their own and overwrite each
//! other's files. So a device is claimed, with open-file-description locks on bytes
//! of its header block (advisory: they change no read or write of the device):
//!
//! - [`USE`]: shared by the attached processes of the one pool using the device, each
//!   through its own descriptor, so the claim ends when the last of them closes it or
//!   dies; exclusive for a use of the device alone (an import, mkfs).
//! - [`TURN`]: exclusive for the moment a process decides whether it may take `USE`,
//!   so that the holder record it reads (below) is never one being written.
//!
//! A lock cannot say who holds it, so whoever takes `USE` first writes a holder
//! record in the header block, after the device header (docs/FORMAT.md, section
//! 17.6): the pool's file (its path, device and inode numbers), or what uses the
//! device alone, and its pid. A process of the same pool file joins the claim; any
//! other is refused, naming the holder.

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use crate::error::{Error, Result};
use crate::runtime::attach::ofd_lock;

/// The locked bytes of the device.
const USE: i64 = 0;
const TURN: i64 = 1;
/// Where the holder record is: in the header block, after the header.
pub const RECORD_OFF: u64 = 2048;
pub const RECORD_LEN: usize = 1024;
const MAGIC: [u8; 8] = *b"LYNXHOLD";
const KIND_POOL: u32 = 1;
const KIND_ALONE: u32 = 2;
/// The longest text a record holds (a path, or what uses the device alone).
const MAX_TEXT: usize = RECORD_LEN - 40;

/// Who claims a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimant {
    /// The pool in this file (its device and inode numbers say which file: a copy
    /// elsewhere is another pool); its processes share the claim.
    Pool { path: Vec<u8>, dev: u64, ino: u64 },
    /// A use of the device alone (`what`: e.g. "lynxfs import"), exclusive.
    Alone { what: String },
}

impl Claimant {
    /// The pool file `path`, open as `file`.
    pub fn pool(path: &Path, file: &File) -> std::io::Result<Claimant> {
        let meta = file.metadata()?;
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(Claimant::Pool {
            path: path.as_os_str().as_bytes().to_vec(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// A holder record: who claimed the device first, and its pid.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    claimant: Claimant,
    pid: u32,
}

impl Record {
    fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        let (kind, dev, ino, text) = match &self.claimant {
            Claimant::Pool { path, dev, ino } => (KIND_POOL, *dev, *ino, path.as_slice()),
            Claimant::Alone { what } => (KIND_ALONE, 0, 0, what.as_bytes()),
        };
        let text = &text[..text.len().min(MAX_TEXT)];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..16].copy_from_slice(&kind.to_le_bytes());
        b[16..24].copy_from_slice(&dev.to_le_bytes());
        b[24..32].copy_from_slice(&ino.to_le_bytes());
        b[32..36].copy_from_slice(&(text.len() as u32).to_le_bytes());
        b[36..36 + text.len()].copy_from_slice(text);
        let crc = crate::format::crc::of(&b[..RECORD_LEN - 4]);
        b[RECORD_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8; RECORD_LEN]) -> Option<Record> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let len = u32_at(32) as usize;
        if b[0..8] != MAGIC
            || crate::format::crc::of(&b[..RECORD_LEN - 4]) != u32_at(RECORD_LEN - 4)
            || len > MAX_TEXT
        {
            return None;
        }
        let text = &b[36..36 + len];
        let claimant = match u32_at(12) {
            KIND_POOL => Claimant::Pool {
                path: text.to_vec(),
                dev: u64_at(16),
                ino: u64_at(24),
            },
            KIND_ALONE => Claimant::Alone {
                what: String::from_utf8_lossy(text).into_owned(),
            },
            _ => return None,
        };
        Some(Record {
            claimant,
            pid: u32_at(8),
        })
    }

    /// The holder, as a refusal names it.
    fn describe(&self) -> String {
        match &self.claimant {
            Claimant::Pool { path, .. } => format!(
                "pool {} (first attached by pid {})",
                String::from_utf8_lossy(path),
                self.pid
            ),
            Claimant::Alone { what } => format!("{what} (pid {})", self.pid),
        }
    }
}

/// Claims `dev` (open for writing) for `me`: shared with the other processes of the
/// same pool, else exclusive. The claim lasts while `dev` is open. Refused, naming
/// the holder, when another pool or a use of the device alone holds it.
pub fn claim(dev: &File, dev_path: &Path, me: &Claimant) -> Result<()> {
    let io = |e| Error::io(dev_path, e);
    ofd_lock(dev, TURN, 1, libc::F_WRLCK, true).map_err(io)?;
    let r = claim_in_turn(dev, dev_path, me);
    let _ = ofd_lock(dev, TURN, 1, libc::F_UNLCK, false);
    r
}

fn claim_in_turn(dev: &File, dev_path: &Path, me: &Claimant) -> Result<()> {
    let io = |e| Error::io(dev_path, e);
    if ofd_lock(dev, USE, 1, libc::F_WRLCK, false).map_err(io)? {
        return hold(dev, me).map_err(io);
    }
    let holder = read_record(dev).map_err(io)?;
    let same_pool = match (&holder, me) {
        (
            Some(Record {
                claimant: Claimant::Pool { dev: d, ino: i, .. },
                ..
            }),
            Claimant::Pool { dev, ino, .. },
        ) => (d, i) == (dev, ino),
        _ => false,
    };
    if same_pool && take_use(dev, libc::F_RDLCK).map_err(io)? {
        return Ok(());
    }
    if !same_pool && take_use(dev, libc::F_WRLCK).map_err(io)? {
        return hold(dev, me).map_err(io);
    }
    let who = holder.map_or_else(
        || "another user of the device (it left no holder record)".to_string(),
        |h| h.describe(),
    );
    Err(Error::Device {
        device: dev_path.to_path_buf(),
        what: format!(
            "in use by {who}: a data device serves one pool at a time (unmount or close \
             that one first)"
        ),
    })
}

/// `USE` is `me`'s alone: say so in the holder record, and share it if `me` is a pool.
fn hold(dev: &File, me: &Claimant) -> std::io::Result<()> {
    let record = Record {
        claimant: me.clone(),
        pid: std::process::id(),
    };
    dev.write_all_at(&record.encode(), RECORD_OFF)?;
    if matches!(me, Claimant::Pool { .. }) {
        // Shared from now on, for the pool's other processes (a conversion, atomic:
        // no one can take it exclusively in between).
        ofd_lock(dev, USE, 1, libc::F_RDLCK, false)?;
    }
    Ok(())
}

/// Takes `USE` (`kind`: F_RDLCK or F_WRLCK) without waiting, but retrying for
/// [`super::LOCK_GRACE`]: a holder that just closed the device may still share its
/// descriptor with a child it forked, until that child's exec closes it.
fn take_use(dev: &File, kind: libc::c_int) -> std::io::Result<bool> {
    super::still_after_grace(|| ofd_lock(dev, USE, 1, kind, false).map(|got| !got))
        .map(|held| !held)
}

fn read_record(dev: &File) -> std::io::Result<Option<Record>> {
    let mut b = [0u8; RECORD_LEN];
    match dev.read_exact_at(&mut b, RECORD_OFF) {
        Ok(()) => Ok(Record::decode(&b)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_damage_is_no_record() {
        let r = Record {
            claimant: Claimant::Pool {
                path: b"/dev/shm/pool".to_vec(),
                dev: 7,
                ino: 42,
            },
            pid: 1234,
        };
        let b = r.encode();
        assert_eq!(Record::decode(&b), Some(r));
        let mut bad = b;
        bad[40] ^= 1;
        assert_eq!(Record::decode(&bad), None);
        assert_eq!(Record::decode(&[0; RECORD_LEN]), None);
    }
}
