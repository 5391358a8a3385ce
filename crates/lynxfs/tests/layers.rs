//! The engine's layers hold (docs/ARCHITECTURE.md, "Layers"): no module of
//! `crates/lynxfs/src` uses a module of a layer above its own.
//!
//! The references are read from the source by [`lynxfs_test_support::layers`] (which
//! says what counts as one). New files need no change here: a file belongs to the layer
//! of its module. A new top-level module (or a new split of one) is added to [`LAYERS`].

use std::path::Path;

use lynxfs_test_support::layers::{check, read_sources, stale_table_entries, Layers};

/// The engine's layers, lowest first (see [`Layers`]).
const LAYERS: Layers = &[
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
    wrong.extend(stale_table_entries(
        &sources,
        LAYERS,
        ALLOWED_UPWARD,
        &checked,
    ));
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

#[cfg(test)]
mod checker {
    //! The check itself, on small sources: it must see every form of reference, and
    //! fail on an upward one.
    use lynxfs_test_support::layers::{Checked, Source};

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
