//! Concurrent histories of namespace calls, and a linearizability checker for them
//! (issue 42): threads and processes rename, replace, exchange, remove, open and stat
//! a few names, each call recorded with what it saw and when it was invoked and
//! answered (`CLOCK_MONOTONIC`, one clock for every process); [`check`] then asks
//! whether some order of the calls, each placed between its invocation and its
//! answer, explains every answer under a sequential model of Linux's semantics.
//!
//! **The model.** Each name names a file (or a directory) or nothing. A file is known
//! by an id written into it before it gets a public name (unique in a run) and by its
//! inode number: a call that read the id (an open) must see the file's id, one that
//! saw only the inode number (a stat) its number, which may be a reused one; that is
//! all a stat can tell apart. The calls ([`Act`]): a rename from a private name onto
//! a public one (the file it carries is known, so the public name's new value is
//! too), the same with `RENAME_NOREPLACE`, an unlink (or a rename to a private name),
//! a rename between two public names and `RENAME_EXCHANGE` of two; a failed call
//! says what it found (ENOENT: a name missing; EEXIST: a name there).
//!
//! **The search.** Per object, Wing and Gong's search with Lowe's memoization, as
//! Porcupine does it: walk the invocations in time order, linearize the first call
//! the model accepts whose state (the set of calls linearized, the model's state) was
//! not met before, and backtrack when a call's answer comes before the call could be
//! placed. The set of calls linearized is kept as "every call before `base`" plus the
//! few after it, so a state costs memory in proportion to the calls in flight, not to
//! the history.
//!
//! **Per name.** A call is checked with the other calls on its name only, which
//! keeps the search small (and is what is promised: two names changed by one rename
//! may disagree for a moment, docs/CONSISTENCY.md). So a call that changes two names
//! must say what each gets: a move is recorded as a removal of its source and a put
//! of the file onto its target (by a thread that alone changes the source, so it
//! knows the file), and `RENAME_EXCHANGE` of two names that only exchanges change is
//! a swap per name: each name's state is its file and its partner's.

use std::collections::{HashMap, HashSet};
use std::fmt;

/// A file as a history knows it: the id written into it before it was named, and
/// its inode number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct File {
    pub id: u64,
    pub ino: u64,
}

/// What a read of a name saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Saw {
    /// ENOENT.
    Missing,
    /// A file: its inode number if the call told it (stat), its id if it read it
    /// (open).
    File { ino: Option<u64>, id: Option<u64> },
}

/// One call on public names, with its outcome (`ok` false: the failure the model
/// knows for it, ENOENT or EEXIST as said per variant).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Act {
    /// open (reading the id) or stat of `name`.
    Read { name: String, saw: Saw },
    /// rename(private, `name`): `name` names `file`, whatever it named.
    Put { name: String, file: File },
    /// renameat2(private, `name`, RENAME_NOREPLACE); not `ok`: EEXIST.
    PutNew { name: String, file: File, ok: bool },
    /// unlink(`name`), or rename(`name`, elsewhere); not `ok`: ENOENT.
    Remove { name: String, ok: bool },
    /// renameat2(`a`, `b`, RENAME_EXCHANGE); not `ok`: ENOENT.
    Exchange { a: String, b: String, ok: bool },
}

/// A call and when it ran: invoked at `start`, answered at `end` (nanoseconds of
/// `CLOCK_MONOTONIC`), by thread or process `who`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub who: u32,
    pub start: u64,
    pub end: u64,
    pub act: Act,
}

/// A whole history: what the names named before the first call, and the calls.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub init: Vec<(String, File)>,
    pub calls: Vec<Call>,
    /// Calls that came back with an answer the model has no place for (another
    /// errno, a file of the wrong size): each fails the check as it stands.
    pub odd: Vec<String>,
}

/// Why a history failed.
#[derive(Debug, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Steps of the search per object before it gives up (a failure: the history could
/// not be decided, which a sane history of a few seconds never needs).
const STEP_LIMIT: u64 = 200_000_000;

/// What [`check`] found: the objects checked and the calls in them.
#[derive(Debug, PartialEq, Eq)]
pub struct Checked {
    pub objects: usize,
    pub calls: usize,
}

/// Is `h` linearizable per object (see the module comment)? The first violation
/// found, described, if not.
pub fn check(h: &History) -> Result<Checked, Violation> {
    if let Some(odd) = h.odd.first() {
        return Err(Violation(format!(
            "{} calls had answers no model allows, the first: {odd}",
            h.odd.len()
        )));
    }
    for c in &h.calls {
        if c.end < c.start {
            return Err(Violation(format!("a call answered before it began: {c:?}")));
        }
    }
    let objects = objects(h)?;
    for o in &objects {
        o.check()?;
    }
    Ok(Checked {
        objects: objects.len(),
        calls: h.calls.len(),
    })
}

/// A call as its name sees it.
#[derive(Clone, Copy, Debug)]
enum Local {
    Read(Saw),
    Put(File),
    PutNew(File, bool),
    Remove(bool),
    /// An exchange with the partner name: its file and the partner's swap.
    Swap(bool),
}

/// A name's state: its file, and its exchange partner's (if it has one).
type State = (Option<File>, Option<File>);

impl Local {
    /// The model: the state after this call from `s`, if the call's outcome can
    /// happen in `s`.
    fn step(&self, s: State) -> Option<State> {
        let (cur, alt) = s;
        Some(match *self {
            Local::Read(saw) => match (cur, saw) {
                (None, Saw::Missing) => s,
                (Some(f), Saw::File { ino, id })
                    if ino.is_none_or(|i| i == f.ino) && id.is_none_or(|i| i == f.id) =>
                {
                    s
                }
                _ => return None,
            },
            Local::Put(f) => (Some(f), alt),
            Local::PutNew(f, true) if cur.is_none() => (Some(f), alt),
            Local::PutNew(_, false) if cur.is_some() => s,
            Local::Remove(true) if cur.is_some() => (None, alt),
            Local::Remove(false) if cur.is_none() => s,
            Local::Swap(true) if cur.is_some() && alt.is_some() => (alt, cur),
            Local::Swap(false) if cur.is_none() || alt.is_none() => s,
            _ => return None,
        })
    }
}

/// One name with its calls.
struct Object<'h> {
    name: String,
    init: State,
    calls: Vec<(&'h Call, Local)>,
}

/// Split `h` per name. A name exchanged must have one partner and no other call
/// that changes it (else its state is not its own to check).
fn objects(h: &History) -> Result<Vec<Object<'_>>, Violation> {
    let init: HashMap<&str, File> = h.init.iter().map(|(n, f)| (n.as_str(), *f)).collect();
    let mut partner: HashMap<&str, &str> = HashMap::new();
    let mut changed: HashSet<&str> = HashSet::new();
    for c in &h.calls {
        match &c.act {
            Act::Exchange { a, b, .. } => {
                for (x, y) in [(a.as_str(), b.as_str()), (b.as_str(), a.as_str())] {
                    if *partner.entry(x).or_insert(y) != y {
                        return Err(Violation(format!("{x} is exchanged with two names")));
                    }
                }
            }
            Act::Put { name, .. } | Act::PutNew { name, .. } | Act::Remove { name, .. } => {
                changed.insert(name);
            }
            Act::Read { .. } => {}
        }
    }
    if let Some(n) = partner.keys().find(|n| changed.contains(*n)) {
        return Err(Violation(format!(
            "{n} is exchanged and changed by other calls: not checkable per name"
        )));
    }
    let mut by_name: HashMap<&str, Object<'_>> = HashMap::new();
    let object = |n: &str| Object {
        name: n.to_string(),
        init: (
            init.get(n).copied(),
            partner.get(n).and_then(|p| init.get(p)).copied(),
        ),
        calls: Vec::new(),
    };
    for c in &h.calls {
        let locals: Vec<(&str, Local)> = match &c.act {
            Act::Read { name, saw } => vec![(name, Local::Read(*saw))],
            Act::Put { name, file } => vec![(name, Local::Put(*file))],
            Act::PutNew { name, file, ok } => vec![(name, Local::PutNew(*file, *ok))],
            Act::Remove { name, ok } => vec![(name, Local::Remove(*ok))],
            Act::Exchange { a, b, ok } => vec![(a, Local::Swap(*ok)), (b, Local::Swap(*ok))],
        };
        for (n, l) in locals {
            by_name
                .entry(n)
                .or_insert_with(|| object(n))
                .calls
                .push((c, l));
        }
    }
    let mut objs: Vec<Object<'_>> = by_name.into_values().collect();
    objs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(objs)
}

/// The calls linearized so far: every call before `base`, and `above` of those after
/// it (flagged in `on`).
struct Linearized {
    on: Vec<bool>,
    base: usize,
    count: usize,
}

impl Linearized {
    fn set(&mut self, i: usize) {
        self.on[i] = true;
        self.count += 1;
        while self.base < self.on.len() && self.on[self.base] {
            self.base += 1;
        }
    }

    fn clear(&mut self, i: usize) {
        self.on[i] = false;
        self.count -= 1;
        self.base = self.base.min(i);
    }

    /// The set, canonically: `base` and the calls after it that are in.
    fn key(&self) -> (usize, Vec<u32>) {
        let mut above = Vec::new();
        let mut want = self.count - self.base;
        let mut i = self.base + 1;
        while want > 0 {
            if self.on[i] {
                above.push(i as u32);
                want -= 1;
            }
            i += 1;
        }
        (self.base, above)
    }
}

const NONE: usize = usize::MAX;

impl Object<'_> {
    fn check(&self) -> Result<(), Violation> {
        let mut calls = self.calls.clone();
        calls.sort_by_key(|(c, _)| (c.start, c.end));
        let n = calls.len();
        // Entries: call i is 2i, its answer 2i+1, in time order (an invocation before
        // an answer of the same instant: those two calls overlap); the head is 2n.
        let mut order: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * n);
        for (i, (c, _)) in calls.iter().enumerate() {
            order.push((c.start, 0, 2 * i));
            order.push((c.end, 1, 2 * i + 1));
        }
        order.sort_unstable();
        let head = 2 * n;
        let mut next = vec![NONE; 2 * n + 1];
        let mut prev = vec![NONE; 2 * n + 1];
        let mut last = head;
        for &(_, _, e) in &order {
            next[last] = e;
            prev[e] = last;
            last = e;
        }
        let unlink = |next: &mut [usize], prev: &mut [usize], e: usize| {
            let (p, q) = (prev[e], next[e]);
            next[p] = q;
            if q != NONE {
                prev[q] = p;
            }
        };
        let relink = |next: &mut [usize], prev: &mut [usize], e: usize| {
            let (p, q) = (prev[e], next[e]);
            next[p] = e;
            if q != NONE {
                prev[q] = e;
            }
        };
        let mut lin = Linearized {
            on: vec![false; n],
            base: 0,
            count: 0,
        };
        let mut seen: HashSet<((usize, Vec<u32>), State)> = HashSet::new();
        let mut stack: Vec<(usize, State)> = Vec::new();
        let mut state = self.init;
        // The furthest the search got: calls placed, the state, the call it could
        // not place.
        let mut best: (usize, State, usize) = (0, state, 0);
        let mut entry = next[head];
        let mut steps = 0u64;
        while next[head] != NONE {
            steps += 1;
            if steps > STEP_LIMIT {
                return Err(Violation(format!(
                    "{}: undecided after {STEP_LIMIT} steps ({n} calls)",
                    self.name
                )));
            }
            if entry.is_multiple_of(2) {
                let i = entry / 2;
                if let Some(s) = calls[i].1.step(state) {
                    lin.set(i);
                    if seen.insert((lin.key(), s)) {
                        stack.push((i, std::mem::replace(&mut state, s)));
                        unlink(&mut next, &mut prev, 2 * i);
                        unlink(&mut next, &mut prev, 2 * i + 1);
                        entry = next[head];
                        continue;
                    }
                    lin.clear(i);
                }
                entry = next[entry];
            } else {
                if lin.count >= best.0 {
                    best = (lin.count, state, entry / 2);
                }
                let Some((i, s)) = stack.pop() else {
                    return Err(self.violation(&calls, best));
                };
                state = s;
                lin.clear(i);
                relink(&mut next, &mut prev, 2 * i + 1);
                relink(&mut next, &mut prev, 2 * i);
                entry = next[2 * i];
            }
        }
        Ok(())
    }

    fn violation(
        &self,
        calls: &[(&Call, Local)],
        (placed, state, stuck): (usize, State, usize),
    ) -> Violation {
        let c = calls[stuck].0;
        let near: Vec<String> = calls
            .iter()
            .filter(|(o, _)| o.start <= c.end && o.end >= c.start && *o != c)
            .take(8)
            .map(|(o, _)| format!("  {o:?}"))
            .collect();
        Violation(format!(
            "not linearizable ({}, {} calls): with {placed} calls placed it named {:?} \
             (its exchange partner {:?}), and no order places\n  {c:?}\nbefore its \
             answer; the calls overlapping it:\n{}",
            self.name,
            calls.len(),
            state.0,
            state.1,
            near.join("\n")
        ))
    }
}

/// One call as a line of text (what a worker writes), [`parse`]'s inverse: `WHO
/// START END VERB ARGS...`.
pub fn format_call(c: &Call) -> String {
    let ok = |ok: bool, err: &str| {
        if ok {
            "ok".to_string()
        } else {
            err.to_string()
        }
    };
    let rest = match &c.act {
        Act::Read { name, saw } => match saw {
            Saw::Missing => format!("read {name} ENOENT"),
            Saw::File { ino, id } => format!("read {name} {} {}", opt(*ino), opt(*id)),
        },
        Act::Put { name, file } => format!("put {name} {} {}", file.id, file.ino),
        Act::PutNew { name, file, ok: k } => {
            format!(
                "putnew {name} {} {} {}",
                file.id,
                file.ino,
                ok(*k, "EEXIST")
            )
        }
        Act::Remove { name, ok: k } => format!("remove {name} {}", ok(*k, "ENOENT")),
        Act::Exchange { a, b, ok: k } => format!("exchange {a} {b} {}", ok(*k, "ENOENT")),
    };
    format!("{} {} {} {rest}", c.who, c.start, c.end)
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

/// The line for a name's value before the first call.
pub fn format_init(name: &str, f: &File) -> String {
    format!("init {name} {} {}", f.id, f.ino)
}

/// The line for a call with an answer no model allows.
pub fn format_odd(who: u32, what: &str) -> String {
    format!("odd {who} {what}")
}

/// Add the lines of `text` (written by workers with [`format_call`],
/// [`format_init`], [`format_odd`]) to `h`; a line that is none of those is an error.
pub fn parse(text: &str, h: &mut History) -> Result<(), String> {
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        parse_line(line, h).map_err(|e| format!("{e}: {line:?}"))?;
    }
    Ok(())
}

fn parse_line(line: &str, h: &mut History) -> Result<(), String> {
    let w: Vec<&str> = line.split_ascii_whitespace().collect();
    let num = |i: usize| -> Result<u64, String> {
        w.get(i)
            .ok_or("too few words")?
            .parse::<u64>()
            .map_err(|e| e.to_string())
    };
    let word = |i: usize| -> Result<String, String> {
        w.get(i)
            .map(|s| s.to_string())
            .ok_or_else(|| "too few words".to_string())
    };
    let flag = |i: usize, err: &str| -> Result<bool, String> {
        match w.get(i) {
            Some(&"ok") => Ok(true),
            Some(e) if *e == err => Ok(false),
            _ => Err(format!("word {i} is neither ok nor {err}")),
        }
    };
    match w.first() {
        Some(&"init") => {
            let f = File {
                id: num(2)?,
                ino: num(3)?,
            };
            h.init.push((word(1)?, f));
            return Ok(());
        }
        Some(&"odd") => {
            h.odd.push(line.to_string());
            return Ok(());
        }
        _ => {}
    }
    let (who, start, end) = (num(0)? as u32, num(1)?, num(2)?);
    let file = |i: usize| -> Result<File, String> {
        Ok(File {
            id: num(i)?,
            ino: num(i + 1)?,
        })
    };
    let act = match w.get(3).copied() {
        Some("read") => {
            let maybe = |i: usize| -> Result<Option<u64>, String> {
                match w.get(i) {
                    Some(&"-") => Ok(None),
                    _ => num(i).map(Some),
                }
            };
            let saw = match w.get(5) {
                Some(&"ENOENT") => Saw::Missing,
                _ => Saw::File {
                    ino: maybe(5)?,
                    id: maybe(6)?,
                },
            };
            Act::Read {
                name: word(4)?,
                saw,
            }
        }
        Some("put") => Act::Put {
            name: word(4)?,
            file: file(5)?,
        },
        Some("putnew") => Act::PutNew {
            name: word(4)?,
            file: file(5)?,
            ok: flag(7, "EEXIST")?,
        },
        Some("remove") => Act::Remove {
            name: word(4)?,
            ok: flag(5, "ENOENT")?,
        },
        Some("exchange") => Act::Exchange {
            a: word(4)?,
            b: word(5)?,
            ok: flag(6, "ENOENT")?,
        },
        _ => return Err("unknown verb".to_string()),
    };
    h.calls.push(Call {
        who,
        start,
        end,
        act,
    });
    Ok(())
}

/// The weaker promise of a mount, whose kernel caches names: no read of a name that
/// named a file throughout (from its first value on, with no call that could remove
/// it) says ENOENT. The names of `h` that such calls never remove are checked.
pub fn never_missing(h: &History) -> Result<usize, Violation> {
    if let Some(odd) = h.odd.first() {
        return Err(Violation(format!("an answer no model allows: {odd}")));
    }
    let removable: HashSet<&str> = h
        .calls
        .iter()
        .flat_map(|c| match &c.act {
            Act::Remove { name, .. } => vec![name.as_str()],
            Act::Exchange { a, b, .. } => vec![a.as_str(), b.as_str()],
            _ => vec![],
        })
        .collect();
    let always: HashSet<&str> = h
        .init
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !removable.contains(n))
        .collect();
    let mut reads = 0;
    for c in &h.calls {
        if let Act::Read { name, saw } = &c.act {
            if always.contains(name.as_str()) {
                reads += 1;
                if *saw == Saw::Missing {
                    return Err(Violation(format!(
                        "{name} named a file throughout, yet: {c:?}"
                    )));
                }
            }
        }
    }
    Ok(reads)
}

/// How stale the reads of a mount were: of the reads that told which file they
/// saw (opens) of names that are only ever replaced whole (`Put`), how many saw a
/// file that a later replacement had already displaced when the read began, and by
/// how long at most (the read's start less the earliest end of a replacement that
/// began after the seen file's own put ended). A read of a file never put on its
/// name is a violation.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Staleness {
    pub reads: usize,
    pub stale: usize,
    pub max_ns: u64,
}

pub fn staleness(h: &History) -> Result<Staleness, Violation> {
    let mut puts: HashMap<&str, Vec<(u64, u64, u64)>> = HashMap::new();
    let mut other: HashSet<&str> = HashSet::new();
    for (name, f) in &h.init {
        puts.entry(name).or_default().push((0, 0, f.id));
    }
    for c in &h.calls {
        match &c.act {
            Act::Put { name, file } => puts
                .entry(name)
                .or_default()
                .push((c.start, c.end, file.id)),
            Act::Read { .. } => {}
            Act::PutNew { name, .. } | Act::Remove { name, .. } => drop(other.insert(name)),
            Act::Exchange { a, b, .. } => other.extend([a.as_str(), b.as_str()]),
        }
    }
    puts.retain(|name, _| !other.contains(name));
    let displaced = puts
        .iter_mut()
        .map(|(name, ps)| (*name, Displaced::new(ps)))
        .collect::<HashMap<_, _>>();
    let mut s = Staleness::default();
    for c in &h.calls {
        let Act::Read {
            name,
            saw: Saw::File { id: Some(id), .. },
        } = &c.act
        else {
            continue;
        };
        let Some(d) = displaced.get(name.as_str()) else {
            continue;
        };
        let Some(when) = d.displaced_since(*id) else {
            return Err(Violation(format!(
                "{name} never named file {id}, yet: {c:?}"
            )));
        };
        s.reads += 1;
        if when < c.start {
            s.stale += 1;
            s.max_ns = s.max_ns.max(c.start - when);
        }
    }
    Ok(s)
}

/// The puts of one name sorted by start, with the earliest end among each suffix:
/// when a file put on the name had certainly been displaced.
struct Displaced {
    /// (start, end, id), by start.
    puts: Vec<(u64, u64, u64)>,
    /// `earliest_end[i]`: the least end among `puts[i..]`.
    earliest_end: Vec<u64>,
    /// Each id's put's end.
    put_end: HashMap<u64, u64>,
}

impl Displaced {
    fn new(puts: &mut [(u64, u64, u64)]) -> Displaced {
        puts.sort_unstable();
        let mut earliest_end = vec![u64::MAX; puts.len() + 1];
        for i in (0..puts.len()).rev() {
            earliest_end[i] = earliest_end[i + 1].min(puts[i].1);
        }
        Displaced {
            puts: puts.to_vec(),
            earliest_end,
            put_end: puts.iter().map(|&(_, end, id)| (id, end)).collect(),
        }
    }

    /// From when file `id` was certainly no longer the name's (`u64::MAX`: never),
    /// or `None` if it never was.
    fn displaced_since(&self, id: u64) -> Option<u64> {
        let end = *self.put_end.get(&id)?;
        let later = self.puts.partition_point(|&(start, _, _)| start <= end);
        Some(self.earliest_end[later])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: File = File { id: 1, ino: 10 };
    const B: File = File { id: 2, ino: 11 };
    const C: File = File { id: 3, ino: 10 };

    fn call(start: u64, end: u64, act: Act) -> Call {
        Call {
            who: 0,
            start,
            end,
            act,
        }
    }

    fn read(name: &str, saw: Saw) -> Act {
        Act::Read {
            name: name.into(),
            saw,
        }
    }

    fn id(i: u64) -> Saw {
        Saw::File {
            ino: None,
            id: Some(i),
        }
    }

    fn history(init: &[(&str, File)], calls: Vec<Call>) -> History {
        History {
            init: init.iter().map(|(n, f)| (n.to_string(), *f)).collect(),
            calls,
            odd: vec![],
        }
    }

    fn put(name: &str, file: File) -> Act {
        Act::Put {
            name: name.into(),
            file,
        }
    }

    #[test]
    fn a_read_overlapping_a_replacement_may_see_either_file() {
        for saw in [id(1), id(2)] {
            let h = history(
                &[("cfg", A)],
                vec![call(0, 10, put("cfg", B)), call(5, 7, read("cfg", saw))],
            );
            assert!(check(&h).is_ok(), "{saw:?}");
        }
    }

    #[test]
    fn a_name_replaced_is_never_missing() {
        // The bug of issue 42: a name replaced by rename found missing meanwhile.
        let h = history(
            &[("cfg", A)],
            vec![
                call(0, 10, put("cfg", B)),
                call(5, 7, read("cfg", Saw::Missing)),
            ],
        );
        let err = check(&h).unwrap_err();
        assert!(err.0.contains("not linearizable"), "{err}");
    }

    #[test]
    fn a_read_never_goes_back_to_a_replaced_file() {
        // Two reads one after the other, both during the rename: new, then old.
        let h = history(
            &[("cfg", A)],
            vec![
                call(0, 10, put("cfg", B)),
                call(1, 2, read("cfg", id(2))),
                call(3, 4, read("cfg", id(1))),
            ],
        );
        assert!(check(&h).is_err());
        // The other way round is fine.
        let h = history(
            &[("cfg", A)],
            vec![
                call(0, 10, put("cfg", B)),
                call(1, 2, read("cfg", id(1))),
                call(3, 4, read("cfg", id(2))),
            ],
        );
        assert!(check(&h).is_ok());
    }

    #[test]
    fn a_stale_read_after_the_rename_answered_fails() {
        let h = history(
            &[("cfg", A)],
            vec![call(0, 10, put("cfg", B)), call(11, 12, read("cfg", id(1)))],
        );
        assert!(check(&h).is_err());
    }

    #[test]
    fn a_stat_knows_files_by_number_only() {
        // C reuses A's number: a stat cannot tell them apart; an open can.
        let by_ino = |i| Saw::File {
            ino: Some(i),
            id: None,
        };
        let h = history(
            &[("cfg", A)],
            vec![
                call(0, 1, put("cfg", C)),
                call(2, 3, read("cfg", by_ino(10))),
            ],
        );
        assert!(check(&h).is_ok());
        let h = history(
            &[("cfg", A)],
            vec![call(0, 1, put("cfg", C)), call(2, 3, read("cfg", id(1)))],
        );
        assert!(check(&h).is_err());
    }

    #[test]
    fn exchanges_swap_each_name_with_its_partner() {
        let ex = |ok| Act::Exchange {
            a: "x".into(),
            b: "y".into(),
            ok,
        };
        let init = [("x", A), ("y", B)];
        let good = history(
            &init,
            vec![
                call(0, 10, ex(true)),
                call(1, 2, read("x", id(2))),
                call(3, 4, read("y", id(1))),
                call(11, 12, ex(true)),
                call(13, 14, read("x", id(1))),
            ],
        );
        assert_eq!(
            check(&good),
            Ok(Checked {
                objects: 2,
                calls: 5
            })
        );
        // Per name: after the exchange answered, `x` is B's until the next one.
        let stale = history(
            &init,
            vec![call(0, 10, ex(true)), call(11, 12, read("x", id(1)))],
        );
        assert!(check(&stale).is_err());
        // An exchange never brings a third file, nor leaves a name empty.
        let third = history(
            &init,
            vec![call(0, 10, ex(true)), call(1, 2, read("y", id(3)))],
        );
        assert!(check(&third).is_err());
        let missing = history(
            &init,
            vec![call(0, 10, ex(true)), call(1, 2, read("y", Saw::Missing))],
        );
        assert!(check(&missing).is_err());
        // An exchange that said it was done with both names there swapped them: one
        // that did nothing (two later reads see no change) is caught.
        let idle = history(
            &init,
            vec![
                call(0, 1, read("x", id(1))),
                call(2, 3, ex(true)),
                call(4, 5, read("x", id(1))),
            ],
        );
        assert!(check(&idle).is_err());
        // A name both exchanged and replaced cannot be checked alone: refused.
        let mixed = history(&init, vec![call(0, 1, ex(true)), call(2, 3, put("x", C))]);
        assert!(check(&mixed).unwrap_err().0.contains("not checkable"));
    }

    #[test]
    fn removals_and_creates_follow_the_model() {
        let rm = |ok| Act::Remove {
            name: "lock".into(),
            ok,
        };
        let new = |f, ok| Act::PutNew {
            name: "lock".into(),
            file: f,
            ok,
        };
        let h = history(
            &[],
            vec![
                call(0, 1, rm(false)),
                call(2, 3, new(A, true)),
                call(4, 5, new(B, false)),
                call(6, 7, read("lock", id(1))),
                call(8, 9, rm(true)),
                call(10, 11, read("lock", Saw::Missing)),
            ],
        );
        assert!(check(&h).is_ok());
        // A create that succeeded while the name was there is wrong.
        let h = history(&[("lock", A)], vec![call(0, 1, new(B, true))]);
        assert!(check(&h).is_err());
        // A removal that found nothing while the name was there throughout.
        let h = history(
            &[("lock", A)],
            vec![call(0, 5, put("lock", B)), call(1, 2, rm(false))],
        );
        assert!(check(&h).is_err());
    }

    #[test]
    fn many_overlapping_calls_are_decided_quickly() {
        // 20,000 calls, a rename overlapping three reads each time (the first sees
        // the old file, the others the new one): a real run's shape. A search
        // without memoization would not finish.
        let mut calls = Vec::new();
        let mut old = A;
        for k in 0..5_000u64 {
            let t = k * 40;
            let f = File {
                id: 100 + k,
                ino: k,
            };
            calls.push(call(t, t + 35, put("cfg", f)));
            calls.push(call(t + 10, t + 15, read("cfg", id(old.id))));
            calls.push(call(t + 20, t + 25, read("cfg", id(f.id))));
            calls.push(call(t + 30, t + 33, read("cfg", id(f.id))));
            old = f;
        }
        assert_eq!(
            check(&history(&[("cfg", A)], calls)),
            Ok(Checked {
                objects: 1,
                calls: 20_000
            })
        );
    }

    #[test]
    fn lines_round_trip() {
        let calls = vec![
            call(1, 2, read("cfg", id(3))),
            call(1, 2, read("cfg", Saw::Missing)),
            call(
                1,
                2,
                read(
                    "cfg",
                    Saw::File {
                        ino: Some(4),
                        id: None,
                    },
                ),
            ),
            call(3, 4, put("cfg", A)),
            call(
                3,
                4,
                Act::PutNew {
                    name: "l".into(),
                    file: B,
                    ok: false,
                },
            ),
            call(
                5,
                6,
                Act::Remove {
                    name: "l".into(),
                    ok: true,
                },
            ),
            call(
                5,
                6,
                Act::Exchange {
                    a: "a".into(),
                    b: "b".into(),
                    ok: true,
                },
            ),
        ];
        let mut text: String = calls.iter().map(|c| format_call(c) + "\n").collect();
        text += &(format_init("cfg", &A) + "\n");
        let mut h = History::default();
        parse(&text, &mut h).unwrap();
        assert_eq!(h.calls, calls);
        assert_eq!(h.init, vec![("cfg".to_string(), A)]);
        assert!(parse("0 1 2 frobnicate x", &mut h).is_err());
    }

    #[test]
    fn an_odd_answer_fails_the_history() {
        let mut h = History::default();
        parse(&format_odd(3, "stat cfg: size 0"), &mut h).unwrap();
        assert!(check(&h).unwrap_err().0.contains("size 0"));
    }

    #[test]
    fn the_weaker_promise_checks_names_never_removed() {
        let h = history(
            &[("cfg", A), ("lock", B)],
            vec![
                call(0, 10, put("cfg", B)),
                call(
                    1,
                    2,
                    Act::Remove {
                        name: "lock".into(),
                        ok: true,
                    },
                ),
                call(3, 4, read("lock", Saw::Missing)),
                call(5, 6, read("cfg", id(2))),
            ],
        );
        assert_eq!(never_missing(&h), Ok(1));
        let mut h = h;
        h.calls.push(call(7, 8, read("cfg", Saw::Missing)));
        assert!(never_missing(&h).is_err());
    }

    #[test]
    fn staleness_counts_reads_of_displaced_files() {
        let put = |name: &str, file: File| Act::Put {
            name: name.into(),
            file,
        };
        let mut h = History {
            init: vec![("cfg".into(), A)],
            ..History::default()
        };
        h.calls = vec![
            call(10, 20, put("cfg", B)),
            call(15, 16, read("cfg", id(1))),
            call(25, 26, read("cfg", id(2))),
            call(30, 40, put("cfg", C)),
            call(45, 46, read("cfg", id(2))),
        ];
        let s = staleness(&h).unwrap();
        assert_eq!((s.reads, s.stale, s.max_ns), (3, 1, 5));
        h.calls.push(call(50, 51, read("cfg", id(9))));
        assert!(staleness(&h).is_err());
    }
}
