//! The layers of a crate, read from its source: which module uses which, whether any
//! uses a layer above its own, and whether any files use each other in a circle. The
//! engine's `tests/layers.rs` and the preload's use it, each with its own table.
//!
//! Every reference from one module to another is read from the source: `use crate::...`
//! (grouped ones too), `crate::a::b` paths inside code, `super::` paths that leave the
//! module, and paths through a child module (`shared::Parts` in `meta/mod.rs`). Comments
//! and string literals are skipped. A reference's target is the longest module path in
//! the layer table it starts with (`crate::meta::shared::Parts` is `meta::shared`,
//! `crate::meta::Cred` is `meta`); names the crate root re-exports (`crate::Result`)
//! count as the module they come from. A file belongs to the layer of its module.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// A crate's layers, lowest first: a module may use modules of its own layer and of
/// the layers below it, never one above. Each entry names a layer and its modules; a
/// module path with `::` (`meta::index`) splits its parent: that part of the parent
/// sits in this layer, the rest of the parent where the parent is listed.
pub type Layers<'a> = &'a [(&'a str, &'a [&'a str])];

/// One source file: its path under `src/` (with `/`) and its text.
pub struct Source {
    pub path: String,
    pub text: String,
}

/// Every `.rs` file under `src`, in path order.
pub fn read_sources(src: &Path) -> Vec<Source> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let p = entry.expect("directory entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).expect("under src");
                let path = rel.to_string_lossy().replace('\\', "/");
                let text =
                    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                out.push(Source { path, text });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// What a check found.
#[derive(Default)]
pub struct Checked {
    /// One line per upward reference (or reference to a module in no layer).
    pub violations: Vec<String>,
    /// References from one layer node to another, counted.
    pub edges: BTreeMap<(String, String), usize>,
    /// Upward references the allowed list let through, as (from, to).
    pub tolerated: BTreeSet<(String, String)>,
    /// References between modules seen (the scan's sanity).
    pub references: usize,
}

/// A reference from one module to another, read from a source file.
pub struct Reference {
    /// Where it is written, for messages: `src/log/journal.rs:3: `crate::data::X``.
    pub at: String,
    /// The file it is written in, under `src/`.
    pub file: String,
    /// The module it is written in (inline modules included).
    pub from: Vec<String>,
    /// The path it names from the crate root, with the root's re-exports followed.
    pub target: Vec<String>,
}

/// Every reference in `sources` from one module to a path of the crate.
pub fn references_in(sources: &[Source]) -> Vec<Reference> {
    let reexports = sources
        .iter()
        .find(|s| s.path == "lib.rs")
        .map(|s| root_reexports(&tokens(&s.text)))
        .unwrap_or_default();
    let mut out = Vec::new();
    for s in sources {
        let module = module_of(&s.path);
        for r in references(&module, &tokens(&s.text)) {
            let Some(target) = resolve(&r.path, &reexports) else {
                continue;
            };
            out.push(Reference {
                at: format!("src/{}:{}: `{}`", s.path, r.line, r.shown),
                file: s.path.clone(),
                from: r.from,
                target,
            });
        }
    }
    out
}

/// Checks every reference in `sources` against `layers`, letting through the upward
/// ones `allowed` names as (from, to, why). The crate root (`lib.rs`) wires the layers
/// together, so its own references are not checked.
pub fn check(sources: &[Source], layers: Layers, allowed: &[(&str, &str, &str)]) -> Checked {
    let mut out = Checked::default();
    for r in references_in(sources)
        .into_iter()
        .filter(|r| r.file != "lib.rs")
    {
        let at = &r.at;
        let (Some(from), Some(to)) = (node_of(&r.from, layers), node_of(&r.target, layers)) else {
            let missing = if node_of(&r.from, layers).is_none() {
                &r.from
            } else {
                &r.target
            };
            out.violations.push(format!(
                "{at}: module {} is in no layer: add it to LAYERS",
                missing.join("::")
            ));
            continue;
        };
        if from.name == to.name {
            continue;
        }
        out.references += 1;
        *out.edges
            .entry((from.name.clone(), to.name.clone()))
            .or_default() += 1;
        if to.layer <= from.layer {
            continue;
        }
        if allowed
            .iter()
            .any(|(f, t, _)| *f == from.name && *t == to.name)
        {
            out.tolerated.insert((from.name, to.name));
            continue;
        }
        out.violations.push(format!(
            "{at}: {} (layer {}) uses {} (layer {}), a layer above it",
            from.name, layers[from.layer].0, to.name, layers[to.layer].0
        ));
    }
    out
}

/// Table entries that name no module, and tolerated upward references `checked` did
/// not need.
pub fn stale_table_entries(
    sources: &[Source],
    layers: Layers,
    allowed: &[(&str, &str, &str)],
    checked: &Checked,
) -> Vec<String> {
    let modules: Vec<Vec<String>> = sources.iter().map(|s| module_of(&s.path)).collect();
    let mut out = Vec::new();
    for (layer, names) in layers {
        for name in *names {
            let path: Vec<String> = name.split("::").map(String::from).collect();
            if !modules.iter().any(|m| m.starts_with(&path)) {
                out.push(format!("LAYERS: {name} (layer {layer}) has no source file"));
            }
        }
    }
    for (from, to, _) in allowed {
        if !checked
            .tolerated
            .contains(&(from.to_string(), to.to_string()))
        {
            out.push(format!(
                "ALLOWED_UPWARD: {from} -> {to} is no longer used: remove it"
            ));
        }
    }
    out
}

/// The graph of files: for each file that uses another (as their modules' names,
/// `crate` for the root), where the first such reference is written. A reference
/// belongs to the file whose module is the longest start of its path
/// (`crate::calls::fd::close` is `calls::fd`, `crate::calls::on_fd` is `calls`).
pub fn file_graph(sources: &[Source]) -> BTreeMap<(String, String), String> {
    let modules: Vec<Vec<String>> = sources.iter().map(|s| module_of(&s.path)).collect();
    let file_of = |path: &[String]| -> String {
        let m = modules
            .iter()
            .filter(|m| path.starts_with(m))
            .max_by_key(|m| m.len())
            .cloned()
            .unwrap_or_default();
        if m.is_empty() {
            "crate".to_string()
        } else {
            m.join("::")
        }
    };
    let mut out = BTreeMap::new();
    for r in references_in(sources) {
        let (from, to) = (file_of(&r.from), file_of(&r.target));
        if from != to {
            out.entry((from, to)).or_insert(r.at);
        }
    }
    out
}

/// Every circle in `graph` (as [`file_graph`] draws it), one per set of files that
/// reach each other: `a -> b -> a`, each step with where it is written.
pub fn circles(graph: &BTreeMap<(String, String), String>) -> Vec<String> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in graph.keys() {
        next.entry(from).or_default().push(to);
    }
    let mut out = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for start in next.keys().copied() {
        if seen.contains(start) {
            continue;
        }
        let Some(path) = shortest_path_back(&next, start) else {
            continue;
        };
        // The rest of the files that reach `start` and back belong to this circle.
        let there = reachable(&next, start);
        seen.extend(
            there
                .into_iter()
                .filter(|n| reachable(&next, n).contains(start)),
        );
        let steps: Vec<String> = path
            .windows(2)
            .map(|w| {
                format!(
                    "  {} -> {}: {}",
                    w[0],
                    w[1],
                    graph[&(w[0].into(), w[1].into())]
                )
            })
            .collect();
        out.push(format!(
            "circle {}:\n{}",
            path.join(" -> "),
            steps.join("\n")
        ));
    }
    out
}

/// The files reachable from `start` in one step or more.
fn reachable<'a>(next: &BTreeMap<&'a str, Vec<&'a str>>, start: &'a str) -> BTreeSet<&'a str> {
    let mut found = BTreeSet::new();
    let mut todo = vec![start];
    while let Some(n) = todo.pop() {
        for &m in next.get(n).into_iter().flatten() {
            if found.insert(m) {
                todo.push(m);
            }
        }
    }
    found
}

/// The shortest way from `start` back to itself (`start` first and last), if any.
fn shortest_path_back<'a>(
    next: &BTreeMap<&'a str, Vec<&'a str>>,
    start: &'a str,
) -> Option<Vec<&'a str>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut todo = std::collections::VecDeque::from([start]);
    while let Some(n) = todo.pop_front() {
        for &m in next.get(n).into_iter().flatten() {
            if m == start {
                // Built from the end back along the way `n` was found.
                let mut path = vec![start, n];
                let mut at = n;
                while at != start {
                    at = came_from[at];
                    path.push(at);
                }
                path.reverse();
                return Some(path);
            }
            if !came_from.contains_key(m) {
                came_from.insert(m, n);
                todo.push_back(m);
            }
        }
    }
    None
}

/// The module a file under `src/` defines: `log/cwon.rs` is `log::cwon`, `log/mod.rs`
/// is `log`, `lib.rs` the root.
pub fn module_of(path: &str) -> Vec<String> {
    let mut parts: Vec<String> = path
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// A module's place in the layers: the longest entry of `layers` its path starts with.
struct Node {
    name: String,
    layer: usize,
}

fn node_of(path: &[String], layers: Layers) -> Option<Node> {
    let mut best: Option<(usize, &str, usize)> = None;
    for (layer, (_, names)) in layers.iter().enumerate() {
        for name in *names {
            let segs: Vec<&str> = name.split("::").collect();
            let matches = segs.len() <= path.len() && segs.iter().zip(path).all(|(a, b)| a == b);
            if matches && best.is_none_or(|(len, _, _)| segs.len() > len) {
                best = Some((segs.len(), name, layer));
            }
        }
    }
    best.map(|(_, name, layer)| Node {
        name: name.to_string(),
        layer,
    })
}

/// The module path a reference names from the crate root, with the root's re-exports
/// followed (`crate::Result` is `error::Result`); `None` for an item of the root itself.
fn resolve(path: &[String], reexports: &HashMap<String, Vec<String>>) -> Option<Vec<String>> {
    let first = path.first()?;
    match reexports.get(first) {
        Some(origin) => Some(origin.iter().chain(&path[1..]).cloned().collect()),
        None => Some(path.to_vec()),
    }
}

/// A token of Rust source, with its line; comments, literals and lifetimes are dropped.
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Skips to just past `end`, counting lines; used for comments and literals.
    let skip_to = |from: usize, end: &str, line: &mut usize| -> usize {
        let e: Vec<char> = end.chars().collect();
        let mut j = from;
        while j < c.len() && !c[j..].starts_with(&e) {
            if c[j] == '\n' {
                *line += 1;
            }
            j += 1;
        }
        (j + e.len()).min(c.len())
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        match ch {
            '\n' => {
                line += 1;
                i += 1;
            }
            _ if ch.is_whitespace() => i += 1,
            '/' if next == Some('/') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 0;
                while i < c.len() {
                    if c[i..].starts_with(&['/', '*']) {
                        depth += 1;
                        i += 2;
                    } else if c[i..].starts_with(&['*', '/']) {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if c[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            '"' => i = skip_string(&c, i + 1, &mut line),
            '\'' => {
                if next == Some('\\') {
                    // An escape (`'\''`, `'\u{7f}'`): the quote after it closes.
                    i = skip_to(i + 3, "'", &mut line);
                } else if c.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    // A lifetime or label: its name follows as an identifier, dropped.
                    i += 1;
                    while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                        i += 1;
                    }
                }
            }
            ':' if next == Some(':') => {
                out.push((Tok::Sep, line));
                i += 2;
            }
            _ if ch.is_alphanumeric() || ch == '_' => {
                let start = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                let word: String = c[start..i].iter().collect();
                let at = c.get(i).copied();
                match (word.as_str(), at) {
                    ("r" | "br", Some('#' | '"')) => {
                        let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
                        if c.get(i + hashes) == Some(&'"') {
                            let end = format!("\"{}", "#".repeat(hashes));
                            i = skip_to(i + hashes + 1, &end, &mut line);
                        } else {
                            // `r#ident`: a raw identifier.
                            out.push((Tok::Ident(word), line));
                        }
                    }
                    ("b", Some('"')) => i = skip_string(&c, i + 1, &mut line),
                    ("b", Some('\'')) if c.get(i + 1) == Some(&'\\') => {
                        i = skip_to(i + 3, "'", &mut line)
                    }
                    ("b", Some('\'')) => i += 3,
                    _ => out.push((Tok::Ident(word), line)),
                }
            }
            _ => {
                out.push((Tok::Punct(ch), line));
                i += 1;
            }
        }
    }
    out
}

/// Skips a string literal's body from `i` (just past the opening quote).
fn skip_string(c: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < c.len() && c[i] != '"' {
        if c[i] == '\n' {
            *line += 1;
        }
        i += if c[i] == '\\' { 2 } else { 1 };
    }
    i + 1
}

/// A reference from one module to a path.
struct Ref {
    /// The module the reference is written in (inline modules included).
    from: Vec<String>,
    /// The path named, from the crate root.
    path: Vec<String>,
    /// As written (for the message).
    shown: String,
    line: usize,
}

fn ident(t: Option<&(Tok, usize)>) -> Option<&str> {
    match t {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

fn is(t: Option<&(Tok, usize)>, want: &Tok) -> bool {
    t.is_some_and(|(t, _)| t == want)
}

/// Every path in `toks` (the source of `module`) that starts at `crate::`, `super::`
/// or a child module declared in the file.
fn references(module: &[String], toks: &[(Tok, usize)]) -> Vec<Ref> {
    let children: BTreeSet<&str> = (0..toks.len())
        .filter(|&i| ident(toks.get(i)) == Some("mod") && is(toks.get(i + 2), &Tok::Punct(';')))
        .filter_map(|i| ident(toks.get(i + 1)))
        .collect();
    let mut out = Vec::new();
    // Inline modules open at this point: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('{') => {
                depth += 1;
                if ident(i.checked_sub(2).and_then(|j| toks.get(j))) == Some("mod") {
                    if let Some(name) = ident(toks.get(i - 1)) {
                        inline.push((name.to_string(), depth));
                    }
                }
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        let after_path = is(i.checked_sub(1).and_then(|j| toks.get(j)), &Tok::Sep)
            || is(i.checked_sub(1).and_then(|j| toks.get(j)), &Tok::Punct('.'));
        let starts = match ident(toks.get(i)) {
            _ if after_path || !is(toks.get(i + 1), &Tok::Sep) => None,
            Some("crate") => Some((Vec::new(), i + 2, "crate::".to_string())),
            Some("super") => {
                let mut base = here.clone();
                let mut j = i;
                let mut shown = String::new();
                while ident(toks.get(j)) == Some("super") && is(toks.get(j + 1), &Tok::Sep) {
                    base.pop();
                    shown.push_str("super::");
                    j += 2;
                }
                Some((base, j, shown))
            }
            Some(name) if inline.is_empty() && children.contains(name) => {
                Some((here.clone(), i, String::new()))
            }
            _ => None,
        };
        let Some((base, at, shown)) = starts else {
            i += 1;
            continue;
        };
        let mut leaves = Vec::new();
        let end = use_tree(toks, at, &mut Vec::new(), &mut leaves);
        for (rel, line) in leaves {
            out.push(Ref {
                from: here.clone(),
                shown: format!("{shown}{}", rel.join("::")),
                path: base.iter().cloned().chain(rel).collect(),
                line,
            });
        }
        i = end.max(i + 1);
    }
    out
}

/// Reads the path (or `use` tree: `a::{b, c::{self, d}}`) starting at token `i` under
/// `prefix`, pushing each leaf path with its line; returns the index past it.
fn use_tree(
    toks: &[(Tok, usize)],
    mut i: usize,
    prefix: &mut Vec<String>,
    leaves: &mut Vec<(Vec<String>, usize)>,
) -> usize {
    let depth = prefix.len();
    loop {
        match toks.get(i) {
            Some((Tok::Ident(s), line)) if s == "self" => {
                leaves.push((prefix.clone(), *line));
                i += 1;
                break;
            }
            Some((Tok::Ident(s), line)) => {
                prefix.push(s.clone());
                i += 1;
                if is(toks.get(i), &Tok::Sep) {
                    i += 1;
                    continue;
                }
                leaves.push((prefix.clone(), *line));
                break;
            }
            Some((Tok::Punct('{'), _)) => {
                i += 1;
                while i < toks.len() && !is(toks.get(i), &Tok::Punct('}')) {
                    if is(toks.get(i), &Tok::Punct(',')) {
                        i += 1;
                        continue;
                    }
                    let before = i;
                    i = use_tree(toks, i, prefix, leaves);
                    // `x as y`: the alias is not a path.
                    while i < toks.len() && !matches!(toks[i].0, Tok::Punct(',') | Tok::Punct('}'))
                    {
                        i += 1;
                    }
                    i = i.max(before + 1);
                }
                i += 1;
                break;
            }
            Some((Tok::Punct('*'), line)) => {
                leaves.push((prefix.clone(), *line));
                i += 1;
                break;
            }
            _ => {
                if let Some((_, line)) = toks.get(i.saturating_sub(1)) {
                    leaves.push((prefix.clone(), *line));
                }
                break;
            }
        }
    }
    prefix.truncate(depth);
    i
}

/// The names `lib.rs` re-exports (`pub use error::{Error, Result}`), each with the
/// module path it comes from.
fn root_reexports(toks: &[(Tok, usize)]) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    for i in 0..toks.len() {
        if ident(toks.get(i)) == Some("pub") && ident(toks.get(i + 1)) == Some("use") {
            let mut leaves = Vec::new();
            use_tree(toks, i + 2, &mut Vec::new(), &mut leaves);
            for (mut path, _) in leaves {
                if let Some(name) = path.pop() {
                    out.insert(name, path);
                }
            }
        }
    }
    out
}
