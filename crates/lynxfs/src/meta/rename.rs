//! Rename, in all its forms: same or cross directory, over a file or an empty
//! directory, RENAME_NOREPLACE, RENAME_EXCHANGE.
//!
//! Protocol (docs/CONSISTENCY.md, "rename"): write the new dentry (or two, for an
//! exchange) and its slot, uncommitted; claim the entries and the new names in the
//! index (the index compares a claimed name with its dentry); then one journal
//! record sets the new dentries valid, the old ones invalid, their slots empty, the
//! inodes' back pointers and the parents' link counts. The record's commit word is the
//! commit point.

use crate::error::{errno, Result};
use crate::format::{dentry, inode, ROOT_INO};
use crate::pmem::Backend;
use crate::runtime::testing::stop_here;
use crate::time::now_ns;

use super::create::NewNode;
use super::index::{Claim, Entry, Sighting, State};
use super::perm::{self, cap, Cred};
use super::{check_name, is_dir, Namespace};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
    /// Leave a whiteout (a character device 0:0) at the source name, in the same
    /// commit (overlayfs's RENAME_WHITEOUT).
    pub whiteout: bool,
}

impl RenameFlags {
    /// From the `renameat2` flag bits.
    pub fn from_bits(bits: u32) -> Result<RenameFlags> {
        let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT;
        if bits & !known != 0 {
            return Err(errno::EINVAL);
        }
        Ok(RenameFlags {
            noreplace: bits & libc::RENAME_NOREPLACE != 0,
            exchange: bits & libc::RENAME_EXCHANGE != 0,
            whiteout: bits & libc::RENAME_WHITEOUT != 0,
        })
    }
}

/// Internal: the names changed under a rename between its checks and its claims.
const RETRY: crate::Error = crate::Error::Errno(libc::EAGAIN);
/// Internal: the plan moves a directory to another parent: plan again under the
/// namespace-wide rename lock.
const NEEDS_SERIAL: crate::Error = crate::Error::Errno(libc::EDEADLK);

/// Pauses between attempts of a rename that met another operation on its names, longer
/// each time and different per thread, so two renames of crossing names (a -> b while
/// b -> a) do not keep undoing each other.
#[derive(Default)]
struct Backoff {
    attempts: u32,
}

impl Backoff {
    fn pause(&mut self) {
        self.attempts += 1;
        if self.attempts <= 2 {
            std::thread::yield_now();
            return;
        }
        let spread = thread_jitter() % 8 + 1;
        let micros = (1u64 << self.attempts.min(8)) * spread;
        std::thread::sleep(std::time::Duration::from_micros(micros));
    }
}

/// A small number that differs between threads (from the address of a thread-local).
fn thread_jitter() -> u64 {
    thread_local!(static MARK: u8 = const { 0 });
    MARK.with(|m| (m as *const u8 as u64) >> 6)
}

/// The words of a rename's journal record, on the stack.
struct Words {
    words: [(u64, u64); 12],
    len: usize,
}

impl Words {
    /// The words every rename has (filled in place: pushed one by one, each with its
    /// bounds check, they cost a rename 40 instructions).
    fn starting(first: [(u64, u64); 5]) -> Words {
        let mut words = [(0, 0); 12];
        let (head, _) = words.split_first_chunk_mut::<5>().expect("room for 5");
        *head = first;
        Words { words, len: 5 }
    }

    fn push(&mut self, w: (u64, u64)) {
        self.words[self.len] = w;
        self.len += 1;
    }

    fn as_slice(&self) -> &[(u64, u64)] {
        &self.words[..self.len]
    }
}

/// The new dentries (not yet valid) and, once claimed, their index slots.
struct New {
    dst: Entry,
    src: Option<Entry>,
}

struct Plan {
    src: Entry,
    dst: Option<Entry>,
    src_dir: bool,
    dst_dir: bool,
}

/// What the plan's lookups of the source and target names saw, for their claims to
/// start from.
struct Seen<'a> {
    src: Sighting<'a>,
    dst: Sighting<'a>,
}

impl<B: Backend> Namespace<B> {
    pub fn rename(
        &self,
        sp: u64,
        sn: &[u8],
        dp: u64,
        dn: &[u8],
        flags: RenameFlags,
        cred: &Cred,
    ) -> Result<()> {
        self.op(|| {
            // A hybrid pool's pending writes commit first: a rename over a file then
            // never leaves the new name on data that a crash would roll back
            // (`auto_da_alloc`, docs/CONSISTENCY.md "Hybrid pools").
            self.pool.commit_pending()?;
            // Only a directory changing parent takes the namespace-wide lock; every
            // other rename learns that from its plan and runs beside the others.
            let mut serial = false;
            let mut backoff = Backoff::default();
            loop {
                match self.rename_once(sp, sn, dp, dn, flags, cred, serial) {
                    Err(e) if e.errno() == NEEDS_SERIAL.errno() => serial = true,
                    Err(e) if e.errno() == RETRY.errno() => {
                        self.watch().check()?;
                        backoff.pause();
                    }
                    r => return r,
                }
            }
        })
        .map(|due| self.after_removal(sp, due))
    }

    /// One try; true when the source directory's log is due a compaction check.
    #[allow(clippy::too_many_arguments)]
    fn rename_once(
        &self,
        sp: u64,
        sn: &[u8],
        dp: u64,
        dn: &[u8],
        flags: RenameFlags,
        cred: &Cred,
        serial: bool,
    ) -> Result<bool> {
        if flags.exchange && (flags.noreplace || flags.whiteout) {
            return Err(errno::EINVAL);
        }
        // Making a whiteout is making a device node (CAP_MKNOD).
        if flags.whiteout && !cred.has(cap::MKNOD) {
            return Err(errno::EPERM);
        }
        for n in [sn, dn] {
            if n == b"." || n == b".." {
                return Err(errno::EBUSY);
            }
            check_name(n)?;
        }
        // Checked in this order (both directories before either permission), once
        // for a rename within one directory, which enters its directory at once
        // (entering looks at it as `dir` does; only a directory changing parent takes
        // the rename lock, which comes before any gate).
        let lane = self.lane();
        let entered = if sp == dp && !serial {
            Some(self.enter_in(sp, lane)?)
        } else {
            self.dir(sp)?;
            self.dir(dp)?;
            None
        };
        self.may(sp, cred, perm::W | perm::X)?;
        if dp != sp {
            self.may(dp, cred, perm::W | perm::X)?;
        }
        let _serial = match serial {
            true => {
                let held = self.locks.rename(self.watch())?;
                stop_here("rename.lock");
                Some(held)
            }
            false => None,
        };
        // Both parents entered (once if they are one), before any name is looked at.
        let sdir = match entered {
            Some(e) => e,
            None => self.enter_in(sp, lane)?,
        };
        let ddir_own = if dp == sp {
            None
        } else {
            Some(self.enter_in(dp, lane)?)
        };
        let ddir: &super::Dir<'_> = ddir_own.as_deref().unwrap_or(&sdir);
        let sdir: &super::Dir<'_> = &sdir;
        let pm = &self.pool.pm;
        let seen = Seen {
            src: self.index.sight(pm, sp, sn, Entry::visible),
            dst: self.index.sight(pm, dp, dn, Entry::visible),
        };
        let mut plan = self.plan((sp, dp), &seen, flags, cred, serial)?;
        // A directory moved or replaced: paths the areas learnt may lead elsewhere.
        let _areas = (plan.src_dir || plan.dst_dir).then(|| self.areas.changing());
        if sp == dp && sn == dn {
            return Ok(false); // one name, which the plan found: nothing to do
        }
        // The new dentries first (not valid): the index compares a claimed name with
        // its dentry's.
        // What the source name will name: the exchanged file, or a new whiteout.
        let (into_src, whiteout) = match (plan.dst.filter(|_| flags.exchange), flags.whiteout) {
            (Some(d), _) => (Some((d.ino, d.dtype)), None),
            (None, true) => {
                let w = self.new_whiteout(sp, cred)?;
                (Some((w, libc::DT_CHR)), Some(w))
            }
            (None, false) => (None, None),
        };
        let drop_whiteout = |err| {
            if let Some(w) = whiteout {
                self.free_whiteout(w);
            }
            err
        };
        let new_dst = self
            .new_dentry(ddir, plan.src.ino, dn, plan.src.dtype, lane, true)
            .map_err(drop_whiteout)?;
        let new_src = match into_src {
            Some((ino, dtype)) => match self.new_dentry(sdir, ino, sn, dtype, lane, true) {
                Ok(e) => Some(e),
                Err(err) => {
                    self.discard_dentry(ddir, new_dst);
                    return Err(drop_whiteout(err));
                }
            },
            None => None,
        };
        let mut news = New {
            dst: new_dst,
            src: new_src,
        };
        // Claim the names by CAS. A name another operation is moving, removing or
        // creating right now makes this rename plan again (see `claim_names`), so two
        // renames of crossing names never report a name missing that was there.
        // Whole entries: a freed dentry or inode number may come straight back (the
        // free lists are stacks) for another file of another type.
        let (want_src, want_dst) = (plan.src, plan.dst);
        self.claim_names((&mut plan, &seen), &mut news, flags, (sdir, ddir))
            .map_err(drop_whiteout)?;
        let undo = |err| {
            self.unclaim_names(&plan, &news, sdir, ddir);
            drop_whiteout(err)
        };
        // An unlink and a create of one of the names between the plan and the claims
        // would leave the plan's checks about other files: plan again.
        let same = |a: Entry, b: Entry| (a.dentry, a.ino, a.dtype) == (b.dentry, b.ino, b.dtype);
        let dst_same = match (plan.dst, want_dst) {
            (Some(a), Some(b)) => same(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same(plan.src, want_src) || !dst_same {
            return Err(undo(RETRY));
        }
        if plan.dst.is_some_and(|d| d.ino == plan.src.ino) {
            // Two names of one file, both claimed at once: POSIX says do nothing. Not
            // decided on the plan's two lookups, which a concurrent rename can make
            // see one file at two moments (an exchange reported done that swapped
            // nothing: issue 42).
            let _nothing_to_do = undo(RETRY);
            return Ok(false);
        }
        if ddir.removed() || sdir.removed() {
            return Err(undo(errno::ENOENT));
        }
        // Replacing a directory: hold its gate alone so it stays empty.
        let (victim, _vgate) = match plan.dst {
            Some(d) if plan.dst_dir && !flags.exchange => {
                let (v, g) = self.lock_alone(d.ino).map_err(undo)?;
                (Some(v), Some(g))
            }
            _ => (None, None),
        };
        if victim.as_ref().is_some_and(|v| v.entries() > 0) {
            return Err(undo(errno::ENOTEMPTY));
        }
        let due = self
            .commit_rename(&plan, &news, sp, sdir, dp, ddir, flags, lane)
            .map_err(undo)?;
        self.notices.name(sp, sn, plan.src.ino);
        if plan.src_dir {
            self.areas.renamed(plan.src.ino);
        }
        self.notices.name(dp, dn, plan.dst.map_or(0, |d| d.ino));
        if let Some(v) = &victim {
            v.set_removed(dp, self.load(dp, inode::GENERATION));
            v.drain_slots(&self.free_slots);
        }
        drop(_vgate);
        if let Some(d) = plan.dst.filter(|_| !flags.exchange) {
            self.drop_link(d.ino, plan.dst_dir, now_ns());
        }
        Ok(due)
    }

    /// Check every rule on the entries `seen` before anything is claimed.
    fn plan(
        &self,
        (sp, dp): (u64, u64),
        seen: &Seen<'_>,
        flags: RenameFlags,
        cred: &Cred,
        serial: bool,
    ) -> Result<Plan> {
        let Some(src) = seen.src.entry() else {
            return Err(errno::ENOENT);
        };
        let dst = seen.dst.entry();
        if flags.exchange && dst.is_none() {
            return Err(errno::ENOENT);
        }
        match dst {
            // A removal of the target (an unlink, another rename) perhaps past its
            // commit point, the name gone for readers before the index drops it:
            // plan again once it is settled (issue 42: EEXIST while reads said ENOENT).
            Some(d) if flags.noreplace && d.state == State::Leaving => return Err(RETRY),
            Some(_) if flags.noreplace => return Err(errno::EEXIST),
            _ => {}
        }
        let src_dir = is_dir(self.mode(src.ino));
        let dst_dir = dst.is_some_and(|d| is_dir(self.mode(d.ino)));
        // A directory moving to another parent is the only rename that can make a
        // cycle: it checks ancestry on a tree no other such rename changes meanwhile.
        // (Its claims later confirm the entries are the ones planned with.)
        let moves_dir = sp != dp && (src_dir || (flags.exchange && dst_dir));
        if moves_dir && !serial {
            return Err(NEEDS_SERIAL);
        }
        // The ancestor checks come before the type checks, as in do_renameat2: the
        // source above the target's parent, or the target above the source's.
        if src_dir && self.is_within(dp, src.ino) {
            return Err(errno::EINVAL);
        }
        if let Some(d) = dst.filter(|_| dst_dir) {
            if self.is_within(sp, d.ino) {
                return Err(if flags.exchange {
                    errno::EINVAL
                } else {
                    errno::ENOTEMPTY
                });
            }
        }
        if let Some(d) = dst.filter(|_| !flags.exchange) {
            if d.ino != src.ino {
                match (src_dir, dst_dir) {
                    (true, false) => return Err(errno::ENOTDIR),
                    (false, true) => return Err(errno::EISDIR),
                    _ => {}
                }
                if dst_dir && self.dir(d.ino)?.entries() > 0 {
                    return Err(errno::ENOTEMPTY);
                }
            }
        }
        perm::sticky_ok(cred, self.owner(sp), self.owner(src.ino))?;
        self.may_delete(sp, src.ino)?;
        if let Some(d) = dst {
            perm::sticky_ok(cred, self.owner(dp), self.owner(d.ino))?;
            self.may_delete(dp, d.ino)?;
        }
        // A directory changing parent rewrites its "..": that needs write access to it.
        if sp != dp {
            if src_dir {
                self.may(src.ino, cred, perm::W)?;
            }
            if let Some(d) = dst.filter(|_| flags.exchange && dst_dir) {
                self.may(d.ino, cred, perm::W)?;
            }
        }
        Ok(Plan {
            src,
            dst,
            src_dir,
            dst_dir,
        })
    }

    /// Is `dir` the directory `anc` or below it?
    fn is_within(&self, dir: u64, anc: u64) -> bool {
        let mut cur = dir;
        for _ in 0..=self.pool.layout.total_inodes() {
            if cur == anc {
                return true;
            }
            if cur == ROOT_INO {
                return false;
            }
            cur = self.parent_of(cur);
        }
        true // a cycle: refuse rather than loop
    }

    /// Claim the old names (Ready -> Leaving) and the new ones for the new dentries,
    /// beside the old entries of the same names; on failure nothing stays claimed and
    /// the new dentries are discarded.
    fn claim_names(
        &self,
        (plan, seen): (&mut Plan, &Seen<'_>),
        news: &mut New,
        flags: RenameFlags,
        (sdir, ddir): (&super::Dir, &super::Dir),
    ) -> Result<()> {
        let pm = &self.pool.pm;
        let discard = |news: &New| {
            self.discard_dentry(ddir, news.dst);
            if let Some(ns) = news.src {
                self.discard_dentry(sdir, ns);
            }
        };
        // From the entries the plan saw: a compare-and-swap each if they did not
        // change since.
        let Some(src) = self.index.leave_sighted(pm, &seen.src) else {
            discard(news);
            // Changed since the plan saw it: being moved, removed or replaced, or
            // already replaced by another rename (a new entry of the name, which this
            // claim did not see). Plan again: the plan's lookup says ENOENT only if
            // the name is missing then. (Asking whether it was still in transit here
            // said ENOENT for a name another rename had just replaced: issue 42.)
            return Err(RETRY);
        };
        let dst = match plan.dst {
            Some(_) => match self.index.leave_sighted(pm, &seen.dst) {
                Some(d) => Some(d),
                None => {
                    // The target went or is going: plan again (without it, if gone).
                    self.unclaim(src);
                    discard(news);
                    return Err(RETRY);
                }
            },
            None => None,
        };
        (plan.src, plan.dst) = (src, dst);
        let plan = &*plan;
        let claim = |seen: &Sighting<'_>, e: &Entry, beside: Option<&Entry>| match self
            .index
            .claim_sighted(pm, seen, e, beside.map(|b| b.pos), self.watch())?
        {
            Claim::Claimed(pos) => Ok(pos),
            // The name appeared after the plan (a create, a link or another rename):
            // replace it, as if this rename had come after, unless told not to.
            Claim::Taken(e) if flags.noreplace && e.state == State::Ready => Err(errno::EEXIST),
            Claim::Taken(_) => Err(RETRY),
        };
        let fail = |err, news: &New, dst_pos: Option<u64>| {
            if let Some(pos) = dst_pos {
                self.index.abandon(pos);
            }
            self.unclaim(plan.src);
            if let Some(d) = plan.dst {
                self.unclaim(d);
            }
            discard(news);
            err
        };
        news.dst.pos = match claim(&seen.dst, &news.dst, plan.dst.as_ref()) {
            Ok(pos) => pos,
            Err(err) => return Err(fail(err, news, None)),
        };
        if let Some(mut ns) = news.src {
            ns.pos = match claim(&seen.src, &ns, Some(&plan.src)) {
                Ok(pos) => pos,
                Err(err) => return Err(fail(err, news, Some(news.dst.pos))),
            };
            news.src = Some(ns);
        }
        Ok(())
    }

    /// Undo `claim_names`.
    fn unclaim_names(&self, plan: &Plan, news: &New, sdir: &super::Dir, ddir: &super::Dir<'_>) {
        self.index.abandon(news.dst.pos);
        self.discard_dentry(ddir, news.dst);
        if let Some(ns) = news.src {
            self.index.abandon(ns.pos);
            self.discard_dentry(sdir, ns);
        }
        self.unclaim(plan.src);
        if let Some(d) = plan.dst {
            self.unclaim(d);
        }
    }

    /// Commit the rename; true when the source directory's log is due a compaction
    /// check (`Dir::remove_entry`).
    #[allow(clippy::too_many_arguments)]
    fn commit_rename(
        &self,
        plan: &Plan,
        news: &New,
        sp: u64,
        sdir: &super::Dir,
        dp: u64,
        ddir: &super::Dir,
        flags: RenameFlags,
        lane: u32,
    ) -> Result<bool> {
        let pool = &self.pool;
        // Each new dentry commits with the state word written into it (`BORN`).
        let valid = |d: u64| pool.pm.load_u64(d + dentry::BORN);
        // The rename's time is the new name's birth (one clock reading per rename).
        let dst_valid = valid(news.dst.dentry);
        let now = dst_valid & !dentry::VALID;
        let gone = dentry::state_word(false, now);
        let src = plan.src;
        let (new_dst, new_src) = (news.dst, news.src);
        // At most 11 words (5, 2 for a replaced entry, 2 for an exchange or whiteout,
        // 2 link counts): on the stack.
        let mut w = Words::starting([
            (new_dst.dentry + dentry::STATE, dst_valid),
            (src.dentry + dentry::STATE, gone),
            (src.slot, 0),
            (self.iaddr(src.ino) + inode::DENTRY, new_dst.dentry),
            // In the record, not stored before it: the moved inode may be a fresh
            // create (CWON), whose dentry this commit invalidates with the change.
            (self.iaddr(src.ino) + inode::CTIME, now),
        ]);
        if let Some(d) = plan.dst {
            w.push((d.dentry + dentry::STATE, gone));
            w.push((d.slot, 0));
        }
        if let Some(ns) = new_src {
            w.push((ns.dentry + dentry::STATE, valid(ns.dentry)));
            w.push((self.iaddr(ns.ino) + inode::DENTRY, ns.dentry));
        }
        // Link-count changes of the (at most two) parents.
        let mut delta: [(u64, i64); 2] = [(sp, 0), (dp, 0)];
        let slot = |d: u64| usize::from(d != sp);
        delta[slot(sp)].1 -= plan.src_dir as i64;
        delta[slot(dp)].1 += plan.src_dir as i64;
        if plan.dst.is_some() {
            delta[slot(dp)].1 -= plan.dst_dir as i64;
            if flags.exchange {
                delta[slot(sp)].1 += plan.dst_dir as i64;
            }
        }
        // One inode lock per directory whose link count changes (`delta` names each
        // directory once: one parent's second slot stays 0), in inode order, so no
        // deadlock.
        let mut changed = delta.map(|(d, n)| (n != 0).then_some((d, n)));
        if let [Some((a, _)), Some((b, _))] = changed {
            if b < a {
                changed.swap(0, 1);
            }
        }
        let mut locks = [None, None];
        for (l, c) in locks.iter_mut().zip(changed) {
            if let Some((d, _)) = c {
                *l = Some(self.ilock(d)?);
            }
        }
        for &(d, n) in changed.iter().flatten() {
            let cur = self.load(d, inode::NLINK) as i64;
            w.push((self.iaddr(d) + inode::NLINK, (cur + n).max(0) as u64));
        }
        // The parents' times below land before the commit: a fresh directory must
        // be settled first (the journal's own words need not: they invalidate the
        // source's dentry in the same commit). A parent whose link count stays and
        // whose times are durable from this tick keeps them, as for a create
        // (`touch_parent`; docs/CONSISTENCY.md "The parent's times").
        let parents: [Option<&super::Dir<'_>>; 2] = if sp == dp {
            [Some(sdir), None]
        } else {
            [Some(sdir), Some(ddir)]
        };
        let mut stored = [false; 2];
        let mut b = pool.pm.batch();
        for (dir, stored) in parents.iter().zip(stored.iter_mut()) {
            let Some(dir) = dir else { continue };
            let p = dir.ino;
            let keeps_links = changed.iter().flatten().all(|&(d, _)| d != p);
            if keeps_links && self.parent_times_current(dir, now) {
                continue;
            }
            self.settle_entered(dir);
            b.write_u64(self.iaddr(p) + inode::MTIME, now)
                .write_u64(self.iaddr(p) + inode::CTIME, now);
            *stored = true;
        }
        b.flushed();
        // The new dentries are written and claimed, nothing is committed yet.
        stop_here("rename.before_commit");
        let _committed = pool
            .journals
            .commit(&pool.pm, &pool.layout, lane, w.as_slice())?;
        drop(locks);
        // Fenced by the commit: later operations of this tick may leave them alone.
        for (dir, _) in parents.iter().zip(stored).filter(|(_, s)| *s) {
            if let Some(dir) = dir {
                dir.cachelet()
                    .durable_times()
                    .store(now, std::sync::atomic::Ordering::Release);
            }
        }
        // The index follows the pool: the new names first, then the old entries go,
        // so a lookup never misses both.
        self.index.replace(
            std::iter::once(new_dst.pos).chain(new_src.map(|ns| ns.pos)),
            std::iter::once(src).chain(plan.dst),
        );
        let due = if sp == dp && new_src.is_none() && plan.dst.is_none() {
            // One entry out of the directory and one into it: the count stays.
            sdir.slot_freed(lane)
        } else {
            let due = new_src.is_none() && sdir.remove_entry(lane);
            if plan.dst.is_none() {
                ddir.add_entry(lane);
            }
            due
        };
        self.retire_dentry(sdir, src);
        if let Some(d) = plan.dst {
            self.retire_dentry(ddir, d);
        }
        Ok(due)
    }

    /// A whiteout's inode (a character device 0:0 owned by `cred`), written and
    /// flushed but named by nothing until the rename commits (recovery frees it if
    /// the rename never does). Returns its number.
    fn new_whiteout(&self, parent: u64, cred: &Cred) -> Result<u64> {
        let node = NewNode {
            mode: libc::S_IFCHR,
            rdev: 0,
            target: None,
            umask: 0,
        };
        self.new_unnamed_inode(parent, node, cred, super::create::Naming::Later)
    }

    /// Undo [`Namespace::new_whiteout`] for a rename that did not commit.
    fn free_whiteout(&self, ino: u64) {
        let mut b = self.pool.pm.batch();
        b.write_u64(self.iaddr(ino) + inode::INO, 0);
        drop(b.persist());
        self.pool.alloc.inodes.free(ino);
    }

    /// A dentry that was written but never committed: give back its slot and id.
    pub(super) fn discard_dentry(&self, dir: &super::Dir<'_>, e: Entry) {
        let mut b = self.pool.pm.batch();
        b.write_u64(e.slot, 0);
        let _ = b.persist();
        self.retire_dentry(dir, e);
    }

    /// A dentry no longer named by its slot: recycle both.
    pub(super) fn retire_dentry(&self, dir: &super::Dir<'_>, e: Entry) {
        dir.release_slot(&self.free_slots, e.slot);
        if let Some(id) = self.pool.layout.dentry_id(e.dentry) {
            self.pool.alloc.dentries.free(id);
        }
    }
}
