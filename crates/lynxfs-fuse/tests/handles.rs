//! File handles through a mount (issue 17, item 6): `name_to_handle_at` /
//! `open_by_handle_at` keep working for as long as the file exists, after the kernel
//! dropped its caches and after the daemon was restarted (a new mount of the pool), as
//! an NFS export of the mount needs; a handle of a removed file is stale, also when its
//! inode number was given to a new file.

use std::ffi::CString;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_fuse::mount::{mount_background, MountOptions};
use lynxfs_test_support::watchdog;

/// Room for any file system's handle (MAX_HANDLE_SZ).
const MAX_HANDLE: usize = 128;

/// A `struct file_handle` with its bytes.
#[repr(C)]
struct Handle {
    bytes: u32,
    kind: i32,
    data: [u8; MAX_HANDLE],
}

fn handle_of(path: &Path) -> Handle {
    let mut h = Handle {
        bytes: MAX_HANDLE as u32,
        kind: 0,
        data: [0; MAX_HANDLE],
    };
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut mount_id = 0;
    // SAFETY: `h` starts with the two fields of `struct file_handle` and has room for
    // `bytes` bytes after them; `c` is a NUL-terminated path; `mount_id` is writable.
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            (&mut h as *mut Handle).cast(),
            &mut mount_id,
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "name_to_handle_at {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    h
}

/// Opens what `h` names through the mount at `mnt` (read-only): the fd or the errno.
fn open_by(mnt: &Path, h: &mut Handle) -> Result<fs::File, i32> {
    let dir = fs::File::open(mnt).unwrap();
    // SAFETY: `h` is a `struct file_handle` filled by name_to_handle_at; the fd is
    // open for the call's duration.
    let fd = unsafe {
        libc::open_by_handle_at(dir.as_raw_fd(), (h as *mut Handle).cast(), libc::O_RDONLY)
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    // SAFETY: a new fd this process owns.
    Ok(unsafe { <fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// The kernel's dentry and inode caches dropped, so the mount's inodes are forgotten.
fn drop_caches() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches (needs root)");
}

#[test]
fn handles_outlive_cache_drops_and_daemon_restarts_and_go_stale_with_the_file() {
    let _w = watchdog("handles", Duration::from_secs(120));
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(64 << 20), PmemBackend::default()).unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let m = mnt.path();
    let opts = MountOptions::default();
    let mount = mount_background(&pool, m, &opts).expect("mount");
    fs::create_dir_all(m.join("d/e")).unwrap();
    fs::write(m.join("d/e/f"), b"kept").unwrap();
    let mut file = handle_of(&m.join("d/e/f"));
    let mut sub = handle_of(&m.join("d/e"));
    let sub_ino = fs::metadata(m.join("d/e")).unwrap().ino();

    drop_caches();
    let mut f = open_by(m, &mut file).expect("the file by its handle after a cache drop");
    let mut got = String::new();
    std::io::Read::read_to_string(&mut f, &mut got).unwrap();
    assert_eq!(got, "kept");
    drop(f);
    // A directory is reconnected to the tree through ".." lookups.
    let d = open_by(m, &mut sub).expect("the directory by its handle after a cache drop");
    assert_eq!(d.metadata().unwrap().ino(), sub_ino);
    drop(d);

    mount.unmount().expect("unmount");
    let mount = mount_background(&pool, m, &opts).expect("mount again");
    let f = open_by(m, &mut file).expect("the file by its handle after a daemon restart");
    assert_eq!(f.metadata().unwrap().len(), 4);
    drop(f);

    let ino = fs::metadata(m.join("d/e/f")).unwrap().ino();
    fs::remove_file(m.join("d/e/f")).unwrap();
    // The freed number comes straight back for the next file: a new generation.
    fs::write(m.join("d/e/g"), b"other").unwrap();
    let reused = fs::metadata(m.join("d/e/g")).unwrap().ino() == ino;
    drop_caches();
    assert_eq!(
        open_by(m, &mut file).err(),
        Some(libc::ESTALE),
        "reused: {reused}"
    );
    mount.unmount().expect("unmount");
}
