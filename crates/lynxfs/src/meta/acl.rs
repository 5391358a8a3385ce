//! POSIX access control lists as Linux has them (acl(5), `fs/posix_acl.c`): the
//! extended-attribute format, validation, and the rules that keep an access ACL and
//! the mode in step (`posix_acl_equiv_mode`, `posix_acl_chmod`, `posix_acl_create`)
//! and check access through one (`posix_acl_permission`).
//!
//! The value of `system.posix_acl_access` / `system.posix_acl_default` is a 4-byte
//! little-endian version (2), then 8-byte entries: u16 tag, u16 permission bits, u32
//! id (a uid or gid for named entries, `u32::MAX` for the others).

use crate::error::{errno, Result};

use super::perm::{self, Cred, Owner};

/// The attribute holding a file's access ACL.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// The attribute holding a directory's default ACL (inherited at create).
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const HEADER: usize = 4;
const ENTRY: usize = 8;
/// The id stored with entries that name no user or group.
const UNDEFINED_ID: u32 = u32::MAX;

pub const USER_OBJ: u16 = 0x01;
pub const USER: u16 = 0x02;
pub const GROUP_OBJ: u16 = 0x04;
pub const GROUP: u16 = 0x08;
pub const MASK: u16 = 0x10;
pub const OTHER: u16 = 0x20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclEntry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// A valid ACL: entries in Linux's order (owner, named users by uid, owning group,
/// named groups by gid, mask, other), each class present as the rules require.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<AclEntry>,
}

/// Validation states, in entry order (`posix_acl_valid`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    Start,
    Users,
    Groups,
    Mask,
    Done,
}

impl Acl {
    /// Parses and validates an attribute value. `None` is "no ACL": an empty value,
    /// or a header without entries, removes one (as `posix_acl_from_xattr`).
    /// Malformed input is EINVAL, an unknown version EOPNOTSUPP, as on Linux.
    pub fn parse(value: &[u8]) -> Result<Option<Acl>> {
        if value.is_empty() {
            return Ok(None);
        }
        if value.len() < HEADER || !(value.len() - HEADER).is_multiple_of(ENTRY) {
            return Err(errno::EINVAL);
        }
        let version = u32::from_le_bytes(value[..HEADER].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(errno::EOPNOTSUPP);
        }
        let entries: Vec<AclEntry> = value[HEADER..]
            .chunks_exact(ENTRY)
            .map(|e| {
                let tag = u16::from_le_bytes([e[0], e[1]]);
                let named = tag == USER || tag == GROUP;
                AclEntry {
                    tag,
                    perm: u16::from_le_bytes([e[2], e[3]]),
                    id: if named {
                        u32::from_le_bytes([e[4], e[5], e[6], e[7]])
                    } else {
                        UNDEFINED_ID
                    },
                }
            })
            .collect();
        if entries.is_empty() {
            return Ok(None);
        }
        let acl = Acl { entries };
        acl.validate()?;
        Ok(Some(acl))
    }

    /// Linux's `posix_acl_valid`, plus strictly ascending ids within the named users
    /// and within the named groups (so no duplicates, and one encoding per ACL).
    fn validate(&self) -> Result<()> {
        let mut seen = Seen::Start;
        let mut named = false;
        let mut last_id: Option<u32> = None;
        for e in &self.entries {
            if e.perm & !7 != 0 {
                return Err(errno::EINVAL);
            }
            seen = match (e.tag, seen) {
                (USER_OBJ, Seen::Start) => Seen::Users,
                (GROUP_OBJ, Seen::Users) => {
                    last_id = None;
                    Seen::Groups
                }
                (USER, Seen::Users) | (GROUP, Seen::Groups) => {
                    if last_id.is_some_and(|l| e.id <= l) {
                        return Err(errno::EINVAL);
                    }
                    last_id = Some(e.id);
                    named = true;
                    seen
                }
                (MASK, Seen::Groups) => Seen::Mask,
                (OTHER, Seen::Mask) => Seen::Done,
                (OTHER, Seen::Groups) if !named => Seen::Done,
                _ => return Err(errno::EINVAL),
            };
        }
        if seen == Seen::Done {
            Ok(())
        } else {
            Err(errno::EINVAL)
        }
    }

    /// The attribute value.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER + ENTRY * self.entries.len());
        v.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            v.extend_from_slice(&e.id.to_le_bytes());
        }
        v
    }

    pub fn entries(&self) -> &[AclEntry] {
        &self.entries
    }

    fn perm_of(&self, tag: u16) -> Option<u32> {
        self.entries
            .iter()
            .find(|e| e.tag == tag)
            .map(|e| u32::from(e.perm))
    }

    fn set_perm(&mut self, tag: u16, perm: u32) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.tag == tag) {
            e.perm = (perm & 7) as u16;
        }
    }

    /// Named users or groups (and so a mask): more than a mode can say.
    pub fn is_extended(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.tag, USER | GROUP | MASK))
    }

    /// The permission bits (0o777) this ACL gives the mode: the group class is the
    /// mask when there is one (`posix_acl_equiv_mode`).
    pub fn mode_bits(&self) -> u32 {
        let user = self.perm_of(USER_OBJ).unwrap_or(0);
        let group = self
            .perm_of(MASK)
            .or_else(|| self.perm_of(GROUP_OBJ))
            .unwrap_or(0);
        let other = self.perm_of(OTHER).unwrap_or(0);
        (user << 6) | (group << 3) | other
    }

    /// chmod of a file with this access ACL (`posix_acl_chmod`): the owner and other
    /// entries take the new bits, and the group bits go to the mask if there is one,
    /// else to the owning group.
    pub fn chmod(&mut self, mode: u32) {
        self.set_perm(USER_OBJ, mode >> 6);
        let group_tag = if self.perm_of(MASK).is_some() {
            MASK
        } else {
            GROUP_OBJ
        };
        self.set_perm(group_tag, mode >> 3);
        self.set_perm(OTHER, mode);
    }

    /// The access ACL a new inode created with `mode` gets from its directory's
    /// default ACL `self`, and its mode (`posix_acl_create_masq`): each class keeps
    /// only what both the ACL and the requested mode allow.
    pub fn for_new_inode(&self, mode: u32) -> (Acl, u32) {
        let mut acl = self.clone();
        let group_tag = if acl.perm_of(MASK).is_some() {
            MASK
        } else {
            GROUP_OBJ
        };
        for (tag, shift) in [(USER_OBJ, 6), (group_tag, 3), (OTHER, 0)] {
            let p = acl.perm_of(tag).unwrap_or(0) & (mode >> shift);
            acl.set_perm(tag, p);
        }
        let bits = acl.mode_bits();
        (acl, (mode & !0o777) | bits)
    }

    /// `posix_acl_permission`, for a caller who is not the owner (the owner's access
    /// comes from the mode, which holds the owner entry).
    fn permits(&self, cred: &Cred, o: Owner, want: u32) -> Result<()> {
        let mask = self.perm_of(MASK).unwrap_or(7);
        let allows = |perm: u16| u32::from(perm) & want == want;
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| e.tag == USER && e.id == cred.uid)
        {
            return ok_if(allows(e.perm) && mask & want == want);
        }
        let mut in_group_class = false;
        for e in &self.entries {
            let member = match e.tag {
                GROUP_OBJ => cred.in_group(o.gid),
                GROUP => cred.in_group(e.id),
                _ => false,
            };
            if member {
                in_group_class = true;
                if allows(e.perm) {
                    return ok_if(mask & want == want);
                }
            }
        }
        ok_if(!in_group_class && o.mode & want == want)
    }
}

fn ok_if(allowed: bool) -> Result<()> {
    if allowed {
        Ok(())
    } else {
        Err(errno::EACCES)
    }
}

/// Linux's `acl_permission_check` then `generic_permission`'s capabilities: the owner
/// as without ACLs; anyone else through the access ACL `acl` when the mode has group
/// bits; else by the mode; what those refuse, a capability may still allow.
pub fn check(cred: &Cred, o: Owner, acl: Option<&Acl>, want: u32) -> Result<()> {
    match acl {
        Some(acl) if cred.uid != o.uid && o.mode & 0o070 != 0 => acl
            .permits(cred, o, want)
            .or_else(|_| perm::overridden(cred, o, want)),
        _ => perm::check(cred, o, want),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = VERSION.to_le_bytes().to_vec();
        for &(t, p, id) in entries {
            v.extend_from_slice(&t.to_le_bytes());
            v.extend_from_slice(&p.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    const U: u32 = UNDEFINED_ID;

    fn parse_err(v: &[u8]) -> i32 {
        Acl::parse(v).expect_err("refused").errno()
    }

    fn refused(r: Result<()>) -> bool {
        r.is_err_and(|e| e.errno() == libc::EACCES)
    }

    #[test]
    fn parse_accepts_linux_order_and_refuses_the_rest() {
        let ok = value(&[
            (USER_OBJ, 6, U),
            (USER, 4, 7),
            (USER, 6, 9),
            (GROUP_OBJ, 4, U),
            (GROUP, 5, 3),
            (MASK, 6, U),
            (OTHER, 0, U),
        ]);
        let acl = Acl::parse(&ok).unwrap().unwrap();
        assert_eq!(acl.encode(), ok);
        assert_eq!(acl.mode_bits(), 0o660);
        let bad: &[&[(u16, u16, u32)]] = &[
            // no mask with named entries
            &[
                (USER_OBJ, 6, U),
                (USER, 4, 7),
                (GROUP_OBJ, 4, U),
                (OTHER, 0, U),
            ],
            // duplicate and unsorted named users
            &[
                (USER_OBJ, 6, U),
                (USER, 4, 7),
                (USER, 4, 7),
                (GROUP_OBJ, 4, U),
                (MASK, 6, U),
                (OTHER, 0, U),
            ],
            &[
                (USER_OBJ, 6, U),
                (USER, 4, 9),
                (USER, 4, 7),
                (GROUP_OBJ, 4, U),
                (MASK, 6, U),
                (OTHER, 0, U),
            ],
            // missing other, missing owner, bad tag, bad permission bits
            &[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U)],
            &[(GROUP_OBJ, 4, U), (OTHER, 0, U)],
            &[
                (USER_OBJ, 6, U),
                (0x40, 4, U),
                (GROUP_OBJ, 4, U),
                (OTHER, 0, U),
            ],
            &[(USER_OBJ, 8, U), (GROUP_OBJ, 4, U), (OTHER, 0, U)],
            // an entry after other
            &[
                (USER_OBJ, 6, U),
                (GROUP_OBJ, 4, U),
                (OTHER, 0, U),
                (OTHER, 0, U),
            ],
        ];
        for b in bad {
            assert_eq!(parse_err(&value(b)), libc::EINVAL, "{b:?}");
        }
        assert_eq!(parse_err(&[2, 0, 0]), libc::EINVAL);
        assert_eq!(parse_err(&ok[..ok.len() - 1]), libc::EINVAL);
        let mut v1 = ok.clone();
        v1[0] = 1;
        assert_eq!(parse_err(&v1), libc::EOPNOTSUPP);
        assert_eq!(Acl::parse(&[]).unwrap(), None);
        assert_eq!(Acl::parse(&value(&[])).unwrap(), None);
    }

    #[test]
    fn chmod_sets_the_mask_and_create_masks_the_default() {
        let mut acl = Acl::parse(&value(&[
            (USER_OBJ, 7, U),
            (USER, 7, 5),
            (GROUP_OBJ, 5, U),
            (MASK, 7, U),
            (OTHER, 5, U),
        ]))
        .unwrap()
        .unwrap();
        acl.chmod(0o640);
        assert_eq!(acl.mode_bits(), 0o640);
        assert_eq!(
            acl.perm_of(GROUP_OBJ),
            Some(5),
            "the owning group keeps its entry"
        );
        let (new, mode) = acl.for_new_inode(libc::S_IFREG | 0o666);
        assert_eq!(mode, libc::S_IFREG | 0o640);
        assert_eq!(new.perm_of(USER), Some(7), "named entries are kept");
    }

    #[test]
    fn named_entries_are_limited_by_the_mask() {
        let acl = Acl::parse(&value(&[
            (USER_OBJ, 6, U),
            (USER, 6, 1000),
            (GROUP_OBJ, 0, U),
            (GROUP, 4, 50),
            (MASK, 4, U),
            (OTHER, 0, U),
        ]))
        .unwrap()
        .unwrap();
        let o = Owner {
            mode: libc::S_IFREG | 0o640,
            uid: 1,
            gid: 1,
        };
        let u = Cred::user(1000, 1000);
        assert!(check(&u, o, Some(&acl), perm::R).is_ok());
        assert!(refused(check(&u, o, Some(&acl), perm::W)));
        let mut g = Cred::user(2000, 2000);
        g.groups.push(50);
        assert!(check(&g, o, Some(&acl), perm::R).is_ok());
        // A member of the owning group, whose entry grants nothing, gets nothing,
        // though "other" would not have helped either.
        let owning = Cred::user(3000, 1);
        assert!(refused(check(&owning, o, Some(&acl), perm::R)));
        assert!(refused(check(
            &Cred::user(4000, 4000),
            o,
            Some(&acl),
            perm::R
        )));
    }
}
