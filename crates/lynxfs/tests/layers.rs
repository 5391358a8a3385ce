//! The engine's layers hold (docs/ARCHITECTURE.md, "Layers"): no module of
//! `crates/lynxfs/src` uses a module of a layer above its own.
//!
//! Every reference from one module to another is read from the source: `use crate::...`
//! (grouped ones too), `crate::a::b` paths inside code, `super::` paths that leave the
//! module, and paths through a child module (`shared::Parts` in `meta/mod.rs`). Comments
//! and string literals are skipped. A reference's target is the longest module path in
//! [`LAYERS`] it starts with (`crate::meta::shared::Parts` is `meta::shared`,
//! `crate::meta::Cred` is `meta`); names the crate root re-exports (`crate::Result`)
//! count as the module they come from. New files need no change here: a file belongs to
//! the layer of its module. A new top-level module (or a new split of one) is added to
//! [`LAYERS`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// The engine's layers, lowest first: a module may use modules of its own layer and of
/// the layers below it, never one above. Each entry names a layer and its modules; a
/// module path with `::` (`meta::index`) splits its parent: that part of the parent
/// sits in this layer, the rest of the parent where the parent is listed.
const LAYERS: &[(&str, &[&str])] = &[
    ("base", &["error", "time", "progress", "cpu"]),
    ("persistence", &["pmem"]),
    ("on-media format", &["format"]),
    ("runtime region", &["runtime"]),
    ("allocators", &["alloc"]),
    ("journals", &["log"]),
    (
        "namespace state",
        &[
            "meta::index",
            "meta::cachelet",
            "meta::gate",
            "meta::free_slots",
            "meta::shared",
            "meta::area_epoch",
        ],
    ),
    ("pool", &["pool"]),
    ("data", &["data"]),
    ("namespace", &["meta"]),
    ("API", &["api", "fsck"]),
];

/// Upward references tolerated for now, as (from module, to module, why): each entry
/// is a known defect with the issue that removes it. An entry no reference needs any
/// more fails the check (so the list only shrinks).
const ALLOWED_UPWARD: &[(&str, &str, &str)] = &[];

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = read_sources(&src);
    let checked = check(&sources, LAYERS, ALLOWED_UPWARD);
    let mut wrong = checked.violations.clone();
    wrong.extend(stale_table_entries(&sources, &checked));
    // Shown with --nocapture: the graph the layers are drawn from.
    for ((from, to), n) in &checked.edges {
        println!("{from} -> {to} ({n})");
    }
    assert!(
        checked.references > 300,
        "only {} references between modules found in {}: the scan is broken",
        checked.references,
        src.display()
    );
    assert!(
        wrong.is_empty(),
        "the engine's layers (crates/lynxfs/tests/layers.rs, LAYERS; docs/ARCHITECTURE.md) \
         do not hold:\n{}",
        wrong.join("\n")
    );
}

/// Table entries that name no module, and tolerated upward references nothing needs.
fn stale_table_entries(sources: &[Source], checked: &Checked) -> Vec<String> {
    let modules: Vec<Vec<String>> = sources.iter().map(|s| module_of(&s.path)).collect();
    let mut out = Vec::new();
    for (layer, names) in LAYERS {
        for name in *names {
            let path: Vec<String> = name.split("::").map(String::from).collect();
            if !modules.iter().any(|m| m.starts_with(&path)) {
                out.push(format!("LAYERS: {name} (layer {layer}) has no source file"));
            }
        }
    }
    for (from, to, _) in ALLOWED_UPWARD {
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

/// One source file: its path under `src/` (with `/`) and its text.
struct Source {
    path: String,
    text: String,
}

fn read_sources(src: &Path) -> Vec<Source> {
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
struct Checked {
    /// One line per upward reference (or reference to a module in no layer).
    violations: Vec<String>,
    /// References from one layer node to another, counted.
    edges: BTreeMap<(String, String), usize>,
    /// Upward references `ALLOWED_UPWARD` let through, as (from, to).
    tolerated: BTreeSet<(String, String)>,
    /// References between modules seen (the scan's sanity).
    references: usize,
}

/// Checks every reference in `sources` against `layers`.
fn check(
    sources: &[Source],
    layers: &[(&str, &[&str])],
    allowed: &[(&str, &str, &str)],
) -> Checked {
    let reexports = sources
        .iter()
        .find(|s| s.path == "lib.rs")
        .map(|s| root_reexports(&tokens(&s.text)))
        .unwrap_or_default();
    let mut out = Checked::default();
    for s in sources.iter().filter(|s| s.path != "lib.rs") {
        let module = module_of(&s.path);
        for r in references(&module, &tokens(&s.text)) {
            let Some(target) = resolve(&r.path, &reexports) else {
                continue;
            };
            let at = format!("src/{}:{}: `{}`", s.path, r.line, r.shown);
            let (Some(from), Some(to)) = (node_of(&r.from, layers), node_of(&target, layers))
            else {
                let missing = if node_of(&r.from, layers).is_none() {
                    &r.from
                } else {
                    &target
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
    }
    out
}

/// The module a file under `src/` defines: `log/cwon.rs` is `log::cwon`, `log/mod.rs`
/// is `log`, `lib.rs` the root.
fn module_of(path: &str) -> Vec<String> {
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

fn node_of(path: &[String], layers: &[(&str, &[&str])]) -> Option<Node> {
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

#[cfg(test)]
mod checker {
    //! The check itself, on small sources: it must see every form of reference, and
    //! fail on an upward one.
    use super::*;

    const LIB: &str = "pub mod meta;\npub use meta::{Cred, Namespace};\npub use error::Result;\n";

    fn run(files: &[(&str, &str)]) -> Checked {
        let mut sources = vec![Source {
            path: "lib.rs".into(),
            text: LIB.into(),
        }];
        sources.extend(files.iter().map(|(p, t)| Source {
            path: p.to_string(),
            text: t.to_string(),
        }));
        check(&sources, LAYERS, &[])
    }

    #[test]
    fn a_planted_upward_import_fails_naming_file_line_and_edge() {
        let c = run(&[(
            "log/journal.rs",
            "use crate::format::Layout;\n\nuse crate::data::xattr::read_set;\n",
        )]);
        assert_eq!(
            c.violations,
            [
                "src/log/journal.rs:3: `crate::data::xattr::read_set`: log (layer journals) uses \
              data (layer data), a layer above it"
            ]
        );
    }

    #[test]
    fn the_engine_with_a_planted_upward_import_fails() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut sources = read_sources(&src);
        let journal = sources
            .iter_mut()
            .find(|s| s.path == "log/journal.rs")
            .expect("log/journal.rs");
        journal.text = format!("use crate::meta::Namespace;\n{}", journal.text);
        let c = check(&sources, LAYERS, ALLOWED_UPWARD);
        assert_eq!(
            c.violations,
            [
                "src/log/journal.rs:1: `crate::meta::Namespace`: log (layer journals) uses meta \
              (layer namespace), a layer above it"
            ]
        );
    }

    #[test]
    fn grouped_inline_super_and_reexported_paths_are_all_seen() {
        let c = run(&[(
            "format/a.rs",
            "use crate::{error::Result, pmem::{self, Pm},\n    alloc::X};\n\
             fn f() { let _ = crate::pool::Pool::<u8>::open(); }\n\
             use super::super::api::Fs;\n\
             fn g() -> crate::Cred { todo!() }\n",
        )]);
        let lines: Vec<&str> = c
            .violations
            .iter()
            .map(|v| v.split(": ").nth(1).unwrap())
            .collect();
        assert_eq!(
            lines,
            [
                "`crate::alloc::X`",
                "`crate::pool::Pool`",
                "`super::super::api::Fs`",
                "`crate::Cred`"
            ],
            "{:#?}",
            c.violations
        );
        assert!(c.violations[0].starts_with("src/format/a.rs:2:"));
        assert!(c.violations[3].contains("uses meta (layer namespace)"));
        assert_eq!(c.references, 7, "{:?}", c.edges);
    }

    #[test]
    fn comments_strings_and_own_module_paths_are_not_references() {
        let c = run(&[(
            "pmem/mod.rs",
            "// crate::api::Fs\n/* crate::meta /* nested */ crate::data */\n\
             const S: &str = \"crate::api\"; const R: &str = r#\"crate::data\"#;\n\
             fn f<'a>(x: &'a u8) -> char { 'c' }\n\
             const Q: (u8, char) = (b'\\'','\"'); const S2: &str = \"crate::api\";\n\
             const C: [char; 2] = ['\\'','\"']; const S3: &str = \"crate::api\";\n\
             use crate::pmem::flush; use self::flush::x; use super::error::Error;\n",
        )]);
        assert!(c.violations.is_empty(), "{:#?}", c.violations);
        assert_eq!(
            c.edges.keys().collect::<Vec<_>>(),
            [&("pmem".into(), "error".into())]
        );
    }

    #[test]
    fn a_split_module_is_checked_part_by_part() {
        let c = run(&[
            // The namespace's ops may use its state, not the other way round.
            ("meta/mod.rs", "mod shared;\nuse shared::Parts;\n"),
            (
                "meta/index.rs",
                "use super::cachelet::C;\nuse super::Namespace;\n",
            ),
            // The pool may use the namespace's state, not its ops.
            (
                "pool.rs",
                "use crate::meta::shared::Parts;\nuse crate::meta::perm::Cred;\n",
            ),
            // An inline test module's `super` is the file's module.
            // An inline module's `super` is the file's module (else these two would
            // name `meta::Gates` and a top-level `cachelet`).
            (
                "meta/gate.rs",
                "mod tests {\n use super::Gates;\n use super::super::cachelet::C;\n}\n",
            ),
        ]);
        assert_eq!(
            c.violations,
            [
                "src/meta/index.rs:2: `super::Namespace`: meta::index (layer namespace state) \
                 uses meta (layer namespace), a layer above it",
                "src/pool.rs:2: `crate::meta::perm::Cred`: pool (layer pool) uses meta (layer \
                 namespace), a layer above it",
            ],
        );
        assert!(c
            .edges
            .contains_key(&("meta".into(), "meta::shared".into())));
    }

    #[test]
    fn a_module_in_no_layer_is_reported() {
        let c = run(&[("storage/mod.rs", "use crate::pmem::Pm;\n")]);
        assert_eq!(
            c.violations,
            [
                "src/storage/mod.rs:1: `crate::pmem::Pm`: module storage is in no layer: add it \
              to LAYERS"
            ]
        );
    }
}
