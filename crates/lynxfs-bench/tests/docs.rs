//! The documents' numbers stay tied to commands that exist (issue 45): every
//! `lynxfs bench SUITE` and `scripts/NAME` that README.md and docs/*.md name exists,
//! and every number row of the results page, docs/BENCHMARKS.md, carries its command,
//! commit, machine and date. Reads files only: no benchmark runs.

use std::path::{Path, PathBuf};

use lynxfs_bench::{command_problems, stamp_problems, GENERATED_MARK};

/// The repository's root (this crate is `crates/lynxfs-bench`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// README.md and every `docs/*.md`, relative to the root.
fn documents() -> Vec<String> {
    let mut docs = vec!["README.md".to_string()];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    docs
}

#[test]
fn commands_named_in_the_documents_exist() {
    let docs = documents();
    assert!(docs.iter().any(|d| d == "docs/BENCHMARKS.md"), "{docs:?}");
    for doc in docs {
        let problems = command_problems(&read(&doc), &root());
        assert!(problems.is_empty(), "{doc}:\n{}", problems.join("\n"));
    }
}

#[test]
fn results_page_is_generated_and_every_number_row_is_stamped() {
    let page = read("docs/BENCHMARKS.md");
    let (intro, generated) = page.split_once(GENERATED_MARK).expect(
        "docs/BENCHMARKS.md lost its generated mark: regenerate it with scripts/bench-page.sh",
    );
    assert!(
        generated.contains("\n## ") && generated.contains("- Command: `lynxfs bench "),
        "docs/BENCHMARKS.md has no generated section"
    );
    // The intro is a section of its own: a table of numbers there has no stamp either.
    let problems = stamp_problems(&page);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        !intro.contains("- Command: `"),
        "the intro holds a generated section"
    );
}

#[test]
fn every_result_in_the_readme_names_its_command() {
    let readme = read("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    let unnamed: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, l)| {
            let header = lines
                .get(i + 1)
                .is_some_and(|next| next.starts_with("|---"));
            l.starts_with('|') && !l.starts_with("|---") && !header
        })
        .map(|(_, l)| *l)
        .filter(|l| !(l.contains("`lynxfs bench ") || l.contains("`lynxfs-bench ")))
        .collect();
    assert!(
        unnamed.is_empty(),
        "README.md result rows without the command that produced them:\n{}",
        unnamed.join("\n")
    );
}

#[test]
fn every_figure_a_document_shows_exists() {
    let mut missing = Vec::new();
    for doc in documents() {
        let text = read(&doc);
        let dir = Path::new(&doc).parent().unwrap_or(Path::new(""));
        for (at, _) in text.match_indices("](figures/") {
            let link = &text[at + 2..];
            let link = &link[..link.find(')').unwrap_or(link.len())];
            if !root().join(dir).join(link).is_file() {
                missing.push(format!("{doc}: {link}"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
