//! `Session`: one caller (credentials, a working directory, the scope its paths may
//! reach), and the calls that move it.

use crate::error::{errno, Result};
use crate::meta::{perm, Cred, Namespace};
use crate::pmem::Backend;

use super::{held, path, Fs};

/// One caller: credentials, a working directory and a umask.
pub struct Session<'a, B: Backend> {
    pub(super) fs: &'a Fs<B>,
    pub cred: Cred,
    /// Taken from the permissions of what this caller creates, unless the parent's
    /// default ACL decides them (0 until [`Session::set_umask`]).
    pub(super) umask: u32,
    pub(super) cwd: u64,
    /// Holds the working directory (none for the root), as a process's cwd holds its
    /// directory: removed, it stays an empty orphan rather than its number going to a
    /// new directory that relative paths would then reach.
    pub(super) cwd_hold: Option<held::HeldIno<'a, B>>,
    /// Whether paths may leave the pool (see [`path::Scope`]).
    pub(super) scope: path::Scope,
}

impl<'a, B: Backend> Session<'a, B> {
    pub fn fs(&self) -> &'a Fs<B> {
        self.fs
    }
    pub(super) fn ns(&self) -> &'a Namespace<B> {
        &self.fs.ns
    }

    /// This caller sees the pool mounted inside a bigger tree: paths leaving it fail
    /// with [`crate::Error::Outside`] (see [`path::Scope::Mounted`]).
    pub fn mounted(mut self) -> Self {
        self.scope = path::Scope::Mounted;
        self
    }

    /// The same caller, with relative paths starting at directory `dir` instead (the
    /// `*at` calls). The caller keeps `dir` alive (an open handle on it).
    pub fn at(&self, dir: u64) -> Session<'a, B> {
        Session {
            fs: self.fs,
            cred: self.cred.clone(),
            umask: self.umask,
            cwd: dir,
            cwd_hold: None,
            scope: self.scope,
        }
    }

    /// umask(2): what later creates take from the permissions they ask for; the old
    /// mask is returned.
    pub fn set_umask(&mut self, mask: u32) -> u32 {
        std::mem::replace(&mut self.umask, mask & 0o777)
    }

    /// The working directory's inode.
    pub fn cwd(&self) -> u64 {
        self.cwd
    }

    /// The inode this session holds an open reference on (its working directory,
    /// unless that is the root), which a fork's child holds too
    /// ([`Fs::after_fork_child_holding`]).
    pub fn held_cwd(&self) -> Option<u64> {
        self.cwd_hold.as_ref().map(|h| h.ino)
    }

    /// fchdir: work in directory `dir` (held, as [`Session::chdir`] holds), which may
    /// be a removed directory still open.
    pub fn fchdir(&mut self, dir: u64) -> Result<()> {
        let held = self.hold(dir)?;
        self.ns().directory(dir)?;
        self.ns().may(dir, &self.cred, perm::X)?;
        self.cwd = dir;
        self.cwd_hold = Some(held);
        Ok(())
    }

    pub fn resolve(&self, p: impl AsRef<[u8]>, follow: bool) -> Result<u64> {
        path::resolve_in(
            self.ns(),
            self.cwd,
            p.as_ref(),
            follow,
            &self.cred,
            self.scope,
        )
    }

    /// `f` of the inode `p` leads to. A name replaced while `f` ran (a rename over
    /// it) leaves `f` on an inode freed meanwhile, ENOENT, though the name was there
    /// throughout: `f` runs again on what the path leads to then, the same number
    /// too (the file that replaced it may have been given the freed number: numbers
    /// are reused at once). ENOENT stands when the path is gone, or still leads to
    /// the freed number after the last try (an unlink that has committed and is yet
    /// to drop the name).
    pub fn on_resolved<T>(
        &self,
        p: &[u8],
        follow: bool,
        f: impl Fn(u64) -> Result<T>,
    ) -> Result<T> {
        let mut ino = self.resolve(p, follow)?;
        let mut tries = 0;
        loop {
            crate::runtime::testing::race_here("on_resolved.found");
            match f(ino) {
                Err(e) if e.errno() == libc::ENOENT && tries < super::held::LOOKUP_TRIES => {
                    crate::runtime::testing::race_here("on_resolved.failed");
                    let Ok(now) = self.resolve(p, follow) else {
                        return Err(e);
                    };
                    if now == ino {
                        super::held::pause(tries);
                    }
                    (ino, tries) = (now, tries + 1);
                }
                r => return r,
            }
        }
    }

    /// The attributes of the file `p` leads to. As [`Session::on_resolved`], and
    /// more: the number found may have been freed and given to another file before
    /// its attributes are read (a rename over the name, then a create: numbers are
    /// reused at once), whose attributes (a new file's size 0) the name never had.
    /// So the generation of the file the name led to is read with the name's index
    /// entry still in place, and the attributes count only if theirs is the same.
    pub(super) fn stat_named(&self, p: &[u8], follow: bool) -> Result<crate::meta::Stat> {
        let ns = self.ns();
        let (mut last, mut freed) = (errno::ESTALE, None);
        for attempt in 0..super::held::LOOKUP_TRIES {
            let found = path::resolve_last_in(ns, self.cwd, p, follow, &self.cred, self.scope)?;
            if freed == Some(found.ino) {
                super::held::pause(attempt);
            }
            let named = match &found.last {
                Some((dir, name)) => match ns.named_generation(*dir, name, found.ino) {
                    Some(g) => Some(g),
                    // Replaced (or evicted) since the walk: walk again.
                    None => continue,
                },
                // The path ended at a directory itself ("/", "a/.."): no name to read.
                None => None,
            };
            crate::runtime::testing::race_here("stat_named.found");
            match ns.getattr(found.ino) {
                Ok(st) if named.is_none_or(|g| g == st.generation) => return Ok(st),
                Ok(_) => last = errno::ESTALE,
                Err(e) if e.errno() == libc::ENOENT => {
                    crate::runtime::testing::race_here("stat_named.freed");
                    // Freed: gone, or replaced (see `on_resolved`).
                    if self.resolve(p, follow).is_err() {
                        return Err(e);
                    }
                    (last, freed) = (e, Some(found.ino));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// `f` of the inode `p` leads to, held while `f` runs (see `resolve_held`): for
    /// a front end's change by number, which must neither land on a newer file that
    /// reused the number nor say ENOENT for a name replaced meanwhile.
    pub fn on_held<T>(
        &self,
        p: &[u8],
        follow: bool,
        f: impl FnOnce(u64) -> Result<T>,
    ) -> Result<T> {
        let held = self.resolve_held(p, follow)?;
        f(held.ino)
    }

    /// The parent directory and last name of `p`; the name must be a real one.
    pub(super) fn parent<'p>(&self, p: &'p [u8]) -> Result<path::WalkedRef<'p>> {
        let mut links = 0;
        path::walk_parent_ref_in(self.ns(), self.cwd, p, &self.cred, &mut links, self.scope)
    }

    /// chdir: work in directory `p` (held). A removed directory still held may be
    /// entered, as Linux allows `chdir(".")` in one.
    pub fn chdir(&mut self, p: impl AsRef<[u8]>) -> Result<()> {
        let held = self.resolve_held(p.as_ref(), true)?;
        self.ns().directory(held.ino)?;
        self.ns().may(held.ino, &self.cred, perm::X)?;
        self.cwd = held.ino;
        self.cwd_hold = Some(held);
        Ok(())
    }

    pub fn getcwd(&self) -> Result<String> {
        let p = self.ns().path_of(self.cwd)?;
        Ok(String::from_utf8_lossy(&p).into_owned())
    }
}
