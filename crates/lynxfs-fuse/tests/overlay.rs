//! LynxFS as overlayfs's upper layer: overlayfs needs RENAME_WHITEOUT (a file of the
//! lower layer removed or renamed through the overlay leaves a whiteout in the upper
//! one), trusted.* xattrs (its opaque and origin marks) and O_TMPFILE or a work
//! directory for copy-ups. The lower layer is on tmpfs (`/dev/shm`).
//!
//! Needs root and `/dev/fuse`; fails loudly without them. A watchdog aborts the
//! process if anything hangs; the overlay is detached even when an assertion fails.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use lynxfs::pmem::PmemBackend;
use lynxfs::{MkfsOptions, Pool};
use lynxfs_fuse::mount::{mount_background, MountOptions};

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in test paths")
}

/// An overlay mount, detached when dropped (also when the test fails).
struct Overlay(PathBuf);

impl Overlay {
    fn mount(lower: &Path, upper: &Path, work: &Path, at: &Path) -> Overlay {
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        );
        let (src, fstype, data, target) = (
            cstr(Path::new("overlay")),
            cstr(Path::new("overlay")),
            cstr(Path::new(&opts)),
            cstr(at),
        );
        // SAFETY: valid C strings; `data` is the option string overlayfs parses.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        assert_eq!(
            r,
            0,
            "mount -t overlay: {}",
            std::io::Error::last_os_error()
        );
        Overlay(at.to_path_buf())
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let t = cstr(&self.0);
        // SAFETY: a valid C string naming the overlay this test mounted.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A whiteout: a character device with device number 0.
fn is_whiteout(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == 0)
}

#[test]
fn lynxfs_works_as_the_upper_layer_of_an_overlay() {
    let _dog = lynxfs_test_support::watchdog("overlay", Duration::from_secs(120));
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    let shm = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let pool = shm.path().join("pool");
    Pool::mkfs(&pool, &MkfsOptions::new(64 << 20), PmemBackend::default()).expect("mkfs");
    let mnt = tempfile::tempdir().expect("mount point");
    let opts = MountOptions::parse("allow_other").expect("options");
    let m = mount_background(&pool, mnt.path(), &opts).unwrap_or_else(|e| panic!("mount: {e:#}"));

    let lower = shm.path().join("lower");
    std::fs::create_dir_all(lower.join("d")).unwrap();
    std::fs::write(lower.join("gone"), b"lower gone").unwrap();
    std::fs::write(lower.join("moved"), b"lower moved").unwrap();
    std::fs::write(lower.join("d/x"), b"lower x").unwrap();
    let (upper, work) = (mnt.path().join("upper"), mnt.path().join("work"));
    std::fs::create_dir(&upper).unwrap();
    std::fs::create_dir(&work).unwrap();
    let merged_dir = tempfile::tempdir().expect("overlay mount point");
    let merged = merged_dir.path();
    let result = std::panic::catch_unwind(|| {
        let ov = Overlay::mount(&lower, &upper, &work, merged);
        assert_eq!(names(merged), ["d", "gone", "moved"]);
        // Removing and renaming lower files: whiteouts in the upper layer.
        std::fs::remove_file(merged.join("gone")).unwrap();
        std::fs::rename(merged.join("moved"), merged.join("renamed")).unwrap();
        // Writing a lower file copies it up (trusted.overlay.* marks on the copy).
        std::fs::write(merged.join("d/x"), b"upper x").unwrap();
        std::fs::write(merged.join("new"), b"new").unwrap();
        // A directory replacing a removed one is opaque (trusted.overlay.opaque).
        std::fs::remove_file(merged.join("d/x")).unwrap();
        std::fs::remove_dir(merged.join("d")).unwrap();
        std::fs::create_dir(merged.join("d")).unwrap();
        assert_eq!(names(merged), ["d", "new", "renamed"]);
        assert!(names(&merged.join("d")).is_empty(), "the new d is opaque");
        assert_eq!(
            std::fs::read(merged.join("renamed")).unwrap(),
            b"lower moved"
        );
        assert!(is_whiteout(&upper.join("gone")), "whiteout for gone");
        assert!(is_whiteout(&upper.join("moved")), "whiteout for moved");
        drop(ov);
        // The lower layer is untouched; mounted again, the overlay shows the same.
        assert_eq!(names(&lower), ["d", "gone", "moved"]);
        let ov = Overlay::mount(&lower, &upper, &work, merged);
        assert_eq!(names(merged), ["d", "new", "renamed"]);
        assert!(names(&merged.join("d")).is_empty());
        drop(ov);
    });
    m.unmount().expect("unmount");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
