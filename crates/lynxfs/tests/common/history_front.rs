//! The library's front end for the history checker (issue 42,
//! `lynxfs_test_support::history_run`): the calls of a session of `fs`, as root, on
//! paths below `dir`.

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs};
use lynxfs_test_support::history_run::Front;

pub struct Lib<'f> {
    pub fs: &'f Fs<PmemBackend>,
    /// The directory the names are in ("" for the root).
    pub dir: String,
}

impl Lib<'_> {
    fn path(&self, p: &str) -> String {
        format!("{}/{p}", self.dir)
    }
}

fn errno(e: lynxfs::Error) -> i32 {
    e.errno()
}

impl Front for Lib<'_> {
    fn write_file(&self, path: &str, id: u64) -> Result<u64, i32> {
        let s = self.fs.session(Cred::root());
        let flags = libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY;
        let fd = s.open(self.path(path), flags, 0o644).map_err(errno)?;
        let wrote = self.fs.write(fd, &id.to_le_bytes());
        let st = self.fs.fstat(fd);
        self.fs.close_fd(fd).map_err(errno)?;
        match wrote.map_err(errno)? {
            8 => Ok(st.map_err(errno)?.ino),
            _ => Err(libc::EIO),
        }
    }

    fn mkdir(&self, path: &str) -> Result<(), i32> {
        let s = self.fs.session(Cred::root());
        s.mkdir(self.path(path), 0o755).map_err(errno)
    }

    fn rename(&self, from: &str, to: &str, flags: u32) -> Result<(), i32> {
        let s = self.fs.session(Cred::root());
        s.rename(self.path(from), self.path(to), flags)
            .map_err(errno)
    }

    fn unlink(&self, path: &str) -> Result<(), i32> {
        let s = self.fs.session(Cred::root());
        s.unlink(self.path(path)).map_err(errno)
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, i32> {
        let s = self.fs.session(Cred::root());
        let fd = s.open(self.path(path), libc::O_RDONLY, 0).map_err(errno)?;
        let mut buf = [0u8; 16];
        let n = self.fs.pread(fd, &mut buf, 0);
        self.fs.close_fd(fd).map_err(errno)?;
        Ok(buf[..n.map_err(errno)?].to_vec())
    }

    fn stat(&self, path: &str) -> Result<(u64, u64, bool), i32> {
        let s = self.fs.session(Cred::root());
        let st = s.stat(self.path(path)).map_err(errno)?;
        Ok((st.ino, st.size, st.mode & libc::S_IFMT == libc::S_IFDIR))
    }
}
