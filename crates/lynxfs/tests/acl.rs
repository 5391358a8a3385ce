//! POSIX ACLs through the library: the access ACL and the mode kept in step, ACL
//! entries enforced by permission checks, default ACLs inherited at create, chmod
//! setting the mask, malformed ACLs refused (acl(5), Linux's fs/posix_acl.c).

use crate::common;

use common::{errno, fs};
use lynxfs::meta::acl::{GROUP, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ};
use lynxfs::Cred;

const NONE: u32 = u32::MAX;

/// The xattr value of an ACL with these (tag, perm, id) entries.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn perms(mode: u32) -> u32 {
    mode & 0o7777
}

fn with_groups(uid: u32, gid: u32, groups: &[u32]) -> Cred {
    let mut c = Cred::user(uid, gid);
    c.groups = groups.to_vec();
    c
}

#[test]
fn a_minimal_access_acl_is_the_mode() {
    // What `cp -p` does: create the file 0600, then set the source's ACL.
    let fs = fs(8 << 20);
    let root = fs.session(Cred::root());
    fs.close_fd(root.create("/f", 0o600).unwrap()).unwrap();
    let rw_r_r = acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 4, NONE)]);
    root.setxattr("/f", "system.posix_acl_access", &rw_r_r, 0)
        .unwrap();
    assert_eq!(perms(root.stat("/f").unwrap().mode), 0o644);
    // Nothing is stored: the mode says it all, as on ext4 and tmpfs.
    assert_eq!(
        errno(root.getxattr("/f", "system.posix_acl_access")),
        libc::ENODATA
    );
    assert!(root.listxattr("/f").unwrap().is_empty());
    // Other users now read it through the mode.
    let other = fs.session(Cred::user(1000, 1000));
    assert!(other.open("/f", libc::O_RDONLY, 0).is_ok());
}

#[test]
fn an_extended_access_acl_is_enforced_and_chmod_sets_its_mask() {
    let fs = fs(8 << 20);
    let root = fs.session(Cred::root());
    fs.close_fd(root.create("/f", 0o600).unwrap()).unwrap();
    let value = acl(&[
        (USER_OBJ, 6, NONE),
        (USER, 6, 1000),
        (GROUP_OBJ, 0, NONE),
        (GROUP, 6, 60),
        (MASK, 4, NONE),
        (OTHER, 0, NONE),
    ]);
    root.setxattr("/f", "system.posix_acl_access", &value, 0)
        .unwrap();
    assert_eq!(
        perms(root.stat("/f").unwrap().mode),
        0o640,
        "group bits = mask"
    );
    assert_eq!(
        root.getxattr("/f", "system.posix_acl_access").unwrap(),
        value
    );

    let named = fs.session(Cred::user(1000, 1000));
    let grouped = fs.session(with_groups(2000, 2000, &[60]));
    let stranger = fs.session(Cred::user(3000, 3000));
    for s in [&named, &grouped] {
        fs.close_fd(s.open("/f", libc::O_RDONLY, 0).unwrap())
            .unwrap();
        assert_eq!(
            errno(s.open("/f", libc::O_WRONLY, 0)),
            libc::EACCES,
            "mask r--"
        );
    }
    assert_eq!(errno(stranger.open("/f", libc::O_RDONLY, 0)), libc::EACCES);

    // chmod's group bits go to the mask, which now lets the entries' w through.
    root.chmod("/f", 0o660).unwrap();
    assert_eq!(perms(root.stat("/f").unwrap().mode), 0o660);
    let after = root.getxattr("/f", "system.posix_acl_access").unwrap();
    let mut expected = value.clone();
    expected[4 + 4 * 8 + 2] = 6; // the mask entry's permission
    assert_eq!(after, expected, "only the mask changed");
    for s in [&named, &grouped] {
        fs.close_fd(s.open("/f", libc::O_RDWR, 0).unwrap()).unwrap();
    }
    // The owning group's entry grants nothing, whatever the mask says.
    let owning = fs.session(Cred::user(4000, 0));
    assert_eq!(errno(owning.open("/f", libc::O_RDONLY, 0)), libc::EACCES);

    // Removing the ACL leaves the mode as it was.
    root.removexattr("/f", "system.posix_acl_access").unwrap();
    assert_eq!(perms(root.stat("/f").unwrap().mode), 0o660);
    assert_eq!(errno(named.open("/f", libc::O_RDONLY, 0)), libc::EACCES);
}

#[test]
fn acl_entries_decide_search_in_directories() {
    let fs = fs(8 << 20);
    let root = fs.session(Cred::root());
    root.mkdir("/d", 0o700).unwrap();
    fs.close_fd(root.create("/d/f", 0o644).unwrap()).unwrap();
    let user = fs.session(Cred::user(1000, 1000));
    assert_eq!(errno(user.stat("/d/f")), libc::EACCES);
    let value = acl(&[
        (USER_OBJ, 7, NONE),
        (USER, 5, 1000),
        (GROUP_OBJ, 0, NONE),
        (MASK, 5, NONE),
        (OTHER, 0, NONE),
    ]);
    root.setxattr("/d", "system.posix_acl_access", &value, 0)
        .unwrap();
    assert!(user.stat("/d/f").is_ok());
    assert_eq!(user.readdir("/d").unwrap().len(), 3);
    assert_eq!(errno(user.mkdir("/d/x", 0o755)), libc::EACCES);
}

#[test]
fn malformed_acls_are_refused_and_change_nothing() {
    let fs = fs(8 << 20);
    let root = fs.session(Cred::root());
    fs.close_fd(root.create("/f", 0o600).unwrap()).unwrap();
    let bad: Vec<Vec<u8>> = vec![
        // named entry without a mask
        acl(&[
            (USER_OBJ, 6, NONE),
            (USER, 4, 5),
            (GROUP_OBJ, 4, NONE),
            (OTHER, 4, NONE),
        ]),
        // duplicate named user
        acl(&[
            (USER_OBJ, 6, NONE),
            (USER, 4, 5),
            (USER, 6, 5),
            (GROUP_OBJ, 4, NONE),
            (MASK, 6, NONE),
            (OTHER, 4, NONE),
        ]),
        // out of order, unknown tag, permission bits beyond rwx
        acl(&[(GROUP_OBJ, 4, NONE), (USER_OBJ, 6, NONE), (OTHER, 4, NONE)]),
        acl(&[
            (USER_OBJ, 6, NONE),
            (0x80, 4, NONE),
            (GROUP_OBJ, 4, NONE),
            (OTHER, 4, NONE),
        ]),
        acl(&[
            (USER_OBJ, 0o17, NONE),
            (GROUP_OBJ, 4, NONE),
            (OTHER, 4, NONE),
        ]),
        // missing other; truncated entry
        acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE)]),
        acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 4, NONE)])[..27].to_vec(),
    ];
    for v in &bad {
        for name in ["system.posix_acl_access", "system.posix_acl_default"] {
            let r = root.setxattr("/f", name, v, 0);
            assert_eq!(errno(r), libc::EINVAL, "{name} {v:?}");
        }
    }
    let mut v1 = acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 4, NONE)]);
    v1[0] = 1;
    let r = root.setxattr("/f", "system.posix_acl_access", &v1, 0);
    assert_eq!(errno(r), libc::EOPNOTSUPP, "unknown version, as Linux");
    assert_eq!(perms(root.stat("/f").unwrap().mode), 0o600);
    assert!(root.listxattr("/f").unwrap().is_empty());
}

#[test]
fn who_may_set_which_acl() {
    let fs = fs(8 << 20);
    let root = fs.session(Cred::root());
    fs.close_fd(root.create("/f", 0o666).unwrap()).unwrap();
    let minimal = acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 0, NONE)]);
    let user = fs.session(Cred::user(1000, 1000));
    let r = user.setxattr("/f", "system.posix_acl_access", &minimal, 0);
    assert_eq!(errno(r), libc::EPERM, "not the owner, though it may write");
    assert_eq!(
        errno(user.removexattr("/f", "system.posix_acl_access")),
        libc::EPERM
    );
    assert_eq!(perms(root.stat("/f").unwrap().mode), 0o666);

    // A default ACL exists only on directories; an empty value removes one.
    let r = root.setxattr("/f", "system.posix_acl_default", &minimal, 0);
    assert_eq!(errno(r), libc::EACCES);
    root.setxattr("/f", "system.posix_acl_default", &[], 0)
        .unwrap();

    // The owner outside the file's group loses set-group-ID, as chmod would do.
    root.chown("/f", Some(1000), Some(50)).unwrap();
    root.chmod("/f", 0o2770).unwrap();
    user.setxattr("/f", "system.posix_acl_access", &minimal, 0)
        .unwrap();
    assert_eq!(perms(root.stat("/f").unwrap().mode), 0o640);
}

#[test]
fn default_acls_are_inherited_at_create() {
    let fs = fs(8 << 20);
    let root = fs.session(Cred::root());
    root.mkdir("/d", 0o755).unwrap();
    let default = acl(&[
        (USER_OBJ, 7, NONE),
        (USER, 7, 1000),
        (GROUP_OBJ, 5, NONE),
        (MASK, 7, NONE),
        (OTHER, 0, NONE),
    ]);
    root.setxattr("/d", DEFAULT_NAME, &default, 0).unwrap();
    assert_eq!(root.getxattr("/d", DEFAULT_NAME).unwrap(), default);
    assert_eq!(
        perms(root.stat("/d").unwrap().mode),
        0o755,
        "mode untouched"
    );

    // A file: the default masked by the mode asked for.
    fs.close_fd(root.create("/d/f", 0o644).unwrap()).unwrap();
    assert_eq!(perms(root.stat("/d/f").unwrap().mode), 0o640);
    let expected = acl(&[
        (USER_OBJ, 6, NONE),
        (USER, 7, 1000),
        (GROUP_OBJ, 5, NONE),
        (MASK, 4, NONE),
        (OTHER, 0, NONE),
    ]);
    assert_eq!(root.getxattr("/d/f", ACCESS_NAME).unwrap(), expected);
    assert_eq!(errno(root.getxattr("/d/f", DEFAULT_NAME)), libc::ENODATA);

    // A directory: the same access ACL, and the default as its own default.
    root.mkdir("/d/sub", 0o777).unwrap();
    assert_eq!(perms(root.stat("/d/sub").unwrap().mode), 0o770);
    assert_eq!(root.getxattr("/d/sub", ACCESS_NAME).unwrap(), default);
    assert_eq!(root.getxattr("/d/sub", DEFAULT_NAME).unwrap(), default);
    let user = fs.session(Cred::user(1000, 1000));
    fs.close_fd(user.create("/d/sub/mine", 0o600).unwrap())
        .unwrap();
    assert_eq!(
        errno(fs.session(Cred::user(5, 5)).stat("/d/sub/mine")),
        libc::EACCES
    );

    // Symlinks get no ACL; a minimal default leaves only a mode.
    root.symlink("f", "/d/link").unwrap();
    assert!(root.listxattr("/d/link").is_ok());
    let minimal = acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 5, NONE), (OTHER, 0, NONE)]);
    root.mkdir("/m", 0o755).unwrap();
    root.setxattr("/m", DEFAULT_NAME, &minimal, 0).unwrap();
    fs.close_fd(root.create("/m/f", 0o666).unwrap()).unwrap();
    assert_eq!(perms(root.stat("/m/f").unwrap().mode), 0o640);
    assert_eq!(errno(root.getxattr("/m/f", ACCESS_NAME)), libc::ENODATA);
    // Removing the default stops the inheritance.
    root.removexattr("/m", DEFAULT_NAME).unwrap();
    fs.close_fd(root.create("/m/g", 0o666).unwrap()).unwrap();
    assert_eq!(perms(root.stat("/m/g").unwrap().mode), 0o666);
}

const ACCESS_NAME: &str = "system.posix_acl_access";
const DEFAULT_NAME: &str = "system.posix_acl_default";
