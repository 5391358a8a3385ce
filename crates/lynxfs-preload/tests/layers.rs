//! The preload's layers hold (docs/ARCHITECTURE.md, "The preload's layers"): no
//! module of `crates/lynxfs-preload/src` uses a module of a layer above its own, and
//! no files use each other in a circle (within a layer either).
//!
//! The references are read from the source by [`lynxfs_test_support::layers`] (which
//! says what counts as one). The crate root (`lib.rs`) wires the layers together at
//! load: its references are not checked against the layers, but it is a file of the
//! circle check like any other. New files need no change here: a file belongs to the
//! layer of its module. A new top-level module (or a new split of one) is added to
//! [`LAYERS`].

use std::path::Path;

use lynxfs_test_support::layers::{
    check, circles, file_graph, read_sources, stale_table_entries, Layers, Source,
};

/// The preload's layers, lowest first (see [`Layers`]). The process hooks (fork,
/// exec, spawn, exit: `calls::process`) sit with the calls: what other families do
/// at those moments is registered in `calls::hooks` at load, not called across.
const LAYERS: Layers = &[
    ("C library and guards", &["real", "guard", "cred", "conv"]),
    ("attach", &["attach_lock", "own", "state"]),
    ("fd table", &["fds"]),
    ("routing", &["route"]),
    ("hook registry", &["calls::hooks"]),
    ("calls", &["calls"]),
];

fn sources() -> Vec<Source> {
    read_sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// Everything wrong with `sources`: upward references, modules in no layer, stale
/// table entries, circles.
fn wrong(sources: &[Source]) -> (Vec<String>, usize) {
    let checked = check(sources, LAYERS, &[]);
    let mut wrong = checked.violations.clone();
    wrong.extend(stale_table_entries(sources, LAYERS, &[], &checked));
    wrong.extend(circles(&file_graph(sources)));
    (wrong, checked.references)
}

#[test]
fn no_module_uses_a_layer_above_its_own_and_no_files_form_a_circle() {
    let sources = sources();
    // Shown with --nocapture: the graph of files the layers are drawn from.
    for ((from, to), at) in file_graph(&sources) {
        println!("{from} -> {to} ({at})");
    }
    let (wrong, references) = wrong(&sources);
    assert!(
        references > 100,
        "only {references} references between modules found: the scan is broken"
    );
    assert!(
        wrong.is_empty(),
        "the preload's layers (crates/lynxfs-preload/tests/layers.rs, LAYERS; \
         docs/ARCHITECTURE.md) do not hold:\n{}",
        wrong.join("\n")
    );
}

/// The preload's sources with `line` put first in `file`.
fn planted(file: &str, line: &str) -> Vec<Source> {
    let mut sources = sources();
    let s = sources
        .iter_mut()
        .find(|s| s.path == file)
        .unwrap_or_else(|| panic!("{file} is not a source file"));
    s.text = format!("{line}\n{}", s.text);
    sources
}

#[test]
fn the_preload_with_a_planted_upward_import_fails() {
    // The attach reaching for the process hooks, as it once did for ENV_CWD.
    let (wrong, _) = wrong(&planted("state.rs", "use crate::calls::process::ENV_FDS;"));
    assert_eq!(
        wrong[0],
        "src/state.rs:1: `crate::calls::process::ENV_FDS`: state (layer attach) uses calls \
         (layer calls), a layer above it"
    );
    // And the calls use the attach: they now form a circle.
    assert_eq!(wrong.len(), 2, "{wrong:#?}");
    assert!(
        wrong[1].contains("\n  state -> calls::process: src/state.rs:1: "),
        "{}",
        wrong[1]
    );
}

#[test]
fn the_preload_with_a_planted_circle_in_one_layer_fails() {
    // The fd calls reaching for stdio again, which itself uses them (dup3).
    let (wrong, _) = wrong(&planted("calls/fd.rs", "use super::stdio::fopen;"));
    assert_eq!(wrong.len(), 1, "{wrong:#?}");
    // The way back is named by its file and line, which edits move.
    let (head, back) = wrong[0]
        .rsplit_once(" src/")
        .expect("a step with its place");
    assert_eq!(
        head,
        "circle calls::fd -> calls::stdio -> calls::fd:\n  calls::fd -> calls::stdio: \
         src/calls/fd.rs:1: `super::stdio::fopen`\n  calls::stdio -> calls::fd:"
    );
    assert!(back.starts_with("calls/stdio.rs:"), "{back}");
}

#[test]
fn a_circle_is_named_with_each_step() {
    let files = [
        ("lib.rs", "mod a; mod b; mod c;\n"),
        ("a.rs", "use crate::b::B;\n"),
        ("b.rs", "\nfn f() { crate::c::g() }\n"),
        ("c.rs", "use super::a::A;\n"),
        ("d.rs", "use crate::a::A;\n"),
    ];
    let sources: Vec<Source> = files
        .iter()
        .map(|(p, t)| Source {
            path: p.to_string(),
            text: t.to_string(),
        })
        .collect();
    assert_eq!(
        circles(&file_graph(&sources)),
        [
            "circle a -> b -> c -> a:\n  a -> b: src/a.rs:1: `crate::b::B`\n  b -> c: \
             src/b.rs:2: `crate::c::g`\n  c -> a: src/c.rs:1: `super::a::A`"
        ]
    );
}
