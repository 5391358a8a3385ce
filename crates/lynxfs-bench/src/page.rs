//! The results page, `docs/BENCHMARKS.md`: rendered from the JSON reports one run of
//! `lynxfs bench ... --out DIR` wrote (`lynxfs bench page DIR`, which
//! `scripts/bench-page.sh` runs), so every table on it carries the command, commit,
//! machine and date it came from. The page's hand-written intro, above
//! [`GENERATED_MARK`], is kept; everything below it is replaced.
//!
//! [`stamp_problems`] and [`command_problems`] are the checks the documents' test
//! runs: every number row under a stamp, every named suite and script existing.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{bail, Context};

use crate::{Report, SUITES};

/// The line that ends the page's hand-written intro.
pub const GENERATED_MARK: &str =
    "<!-- Generated below this line by `lynxfs bench page` (scripts/bench-page.sh): edit the intro above it, not the sections. -->";

/// The subcommand that writes the page; the documents' check accepts it beside
/// [`SUITES`].
pub const PAGE_COMMAND: &str = "page";

/// The file in a run's directory that says why suites were not run: one
/// `suite: reason` a line (scripts/bench-page.sh writes it).
pub const SKIPPED_FILE: &str = "skipped.txt";

/// How a goal's verdict note starts (crate::goals).
const GOAL_NOTE: &str = "goal ";

/// The stamp lines every section with numbers carries, as they start.
const STAMP: [&str; 3] = ["- Command: `", "- Commit: ", "- Machine: "];

/// A report read back, with the figure drawn next to it, if any.
pub struct Loaded {
    /// The report.
    pub report: Report,
    /// `<suite>-<time>.png` beside its JSON, if it exists.
    pub figure: Option<PathBuf>,
}

/// Every `*.json` report in `dir`, in [`SUITES`]' order, then in the order they ran.
pub fn read_reports(dir: &Path) -> anyhow::Result<Vec<Loaded>> {
    let mut loaded = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let report: Report = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a lynxfs bench report", path.display()))?;
        let png = path.with_extension("png");
        loaded.push(Loaded {
            report,
            figure: png.is_file().then_some(png),
        });
    }
    if loaded.is_empty() {
        bail!(
            "{}: no JSON reports (lynxfs bench SUITE --out DIR writes them)",
            dir.display()
        );
    }
    let rank = |s: &str| SUITES.iter().position(|x| *x == s).unwrap_or(SUITES.len());
    loaded.sort_by_key(|l| (rank(&l.report.suite), l.report.unix_time));
    Ok(loaded)
}

/// `dir/skipped.txt`'s `(suite, reason)` lines; none if there is no such file.
pub fn read_skipped(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let path = dir.join(SKIPPED_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (suite, why) = l
                .split_once(':')
                .with_context(|| format!("{}: {l:?} is not `suite: reason`", path.display()))?;
            Ok((suite.trim().to_string(), why.trim().to_string()))
        })
        .collect()
}

/// The page's intro: `page` up to and including [`GENERATED_MARK`].
pub fn intro_of(page: &str) -> anyhow::Result<&str> {
    let at = page
        .find(GENERATED_MARK)
        .with_context(|| format!("the page has no intro ending in the line {GENERATED_MARK}"))?;
    Ok(&page[..at + GENERATED_MARK.len()])
}

/// The whole page: `intro` (ending in [`GENERATED_MARK`]), one section per report, then
/// the suites this run left out. Each report's figure is copied into `figures` (the
/// page links it as `figures/NAME.png`, relative to the page in `docs/`).
pub fn render(
    intro: &str,
    reports: &[Loaded],
    skipped: &[(String, String)],
    figures: Option<&Path>,
) -> anyhow::Result<String> {
    let mut out = format!("{}\n", intro_of(intro)?.trim_end());
    summary(&mut out, reports);
    let mut names: Vec<String> = Vec::new();
    for l in reports {
        let name = figure_name(&l.report.suite, &names);
        names.push(name.clone());
        let figure = match (&l.figure, figures) {
            (Some(png), Some(dir)) => {
                fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                let to = dir.join(format!("{name}.png"));
                fs::copy(png, &to)
                    .with_context(|| format!("copying {} to {}", png.display(), to.display()))?;
                Some(format!("figures/{name}.png"))
            }
            _ => None,
        };
        section(&mut out, &l.report, figure.as_deref());
    }
    not_run(&mut out, reports, skipped);
    Ok(out)
}

/// A paragraph on the run as a whole: when, which commits, how loaded the machine was.
fn summary(out: &mut String, reports: &[Loaded]) {
    let (Some(first), Some(last)) = (
        reports.iter().map(|l| l.report.unix_time).min(),
        reports.iter().map(|l| l.report.unix_time).max(),
    ) else {
        return;
    };
    let mut commits: Vec<String> = reports
        .iter()
        .map(|l| {
            l.report
                .commit
                .as_ref()
                .map_or("(not recorded)".into(), |c| format!("`{c}`"))
        })
        .collect();
    commits.dedup();
    let _ = write!(
        out,
        "\nThis regeneration: {} reports, written {} to {} by commit {}",
        reports.len(),
        date(first),
        date(last),
        commits.join(", ")
    );
    let loads: Vec<f64> = reports
        .iter()
        .filter_map(|l| l.report.machine.load_average.first().copied())
        .collect();
    let cpus = reports
        .iter()
        .map(|l| l.report.machine.logical_cpus)
        .max()
        .unwrap_or(0);
    if let (Some(lo), Some(hi)) = (
        loads.iter().copied().reduce(f64::min),
        loads.iter().copied().reduce(f64::max),
    ) {
        let _ = write!(
            out,
            "; the 1-minute load average as each suite ended was {lo:.1} to {hi:.1} on {cpus} CPUs"
        );
        if hi > cpus as f64 + 2.0 {
            out.push_str(
                " (other work was running beside the benchmarks: expect wider spreads than \
                 on a quiet machine)",
            );
        }
    }
    out.push_str(".\n");
}

/// `suite`, or `suite-2`, `suite-3` for a suite's later reports.
fn figure_name(suite: &str, taken: &[String]) -> String {
    let mut name = suite.to_string();
    let mut n = 1;
    while taken.contains(&name) {
        n += 1;
        name = format!("{suite}-{n}");
    }
    name
}

/// One report's section: heading, what a row measures, the stamp, the table, its notes
/// and its figure.
fn section(out: &mut String, r: &Report, figure: Option<&str>) {
    let _ = writeln!(out, "\n## {}: {}\n", r.suite, r.columns.join(", "));
    if let Some(what) = measures(&r.suite) {
        let _ = writeln!(out, "{what}\n");
    }
    let command = r.command.as_deref().unwrap_or("(not recorded)");
    let commit = r
        .commit
        .as_ref()
        .map_or("(not recorded)".to_string(), |c| format!("`{c}`"));
    let _ = writeln!(out, "{}{command}`", STAMP[0]);
    let _ = writeln!(out, "{}{commit} · Date: {}", STAMP[1], date(r.unix_time));
    let _ = writeln!(out, "{}{}\n", STAMP[2], machine(r));
    let _ = writeln!(out, "{}:\n", r.title());
    out.push_str(&r.markdown_table());
    // Goal verdicts (`--goals`) are for developers; the page shows measurements.
    let notes: Vec<&String> = r
        .notes
        .iter()
        .filter(|n| !n.starts_with(GOAL_NOTE))
        .collect();
    if !notes.is_empty() {
        out.push('\n');
        for note in notes {
            let _ = writeln!(out, "- {note}");
        }
    }
    if let Some(f) = figure {
        let _ = writeln!(out, "\n![{}]({f})", r.suite);
    }
}

/// The list of suites with no report in this run, and why where the run says.
fn not_run(out: &mut String, reports: &[Loaded], skipped: &[(String, String)]) {
    let missing: Vec<&str> = SUITES
        .iter()
        .copied()
        .filter(|s| !reports.iter().any(|l| l.report.suite == *s))
        .collect();
    if missing.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n## Not run in this regeneration\n");
    for suite in missing {
        let why = skipped
            .iter()
            .find(|(s, _)| s == suite)
            .map_or("not part of this run", |(_, w)| w.as_str());
        let _ = writeln!(out, "- `{suite}`: {why}");
    }
}

/// `2026-12-02 16:50 UTC`.
fn date(unix_time: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_secs(unix_time);
    let iso = humantime::format_rfc3339_seconds(t).to_string();
    // 2026-12-02T16:50:07Z
    format!("{} {} UTC", &iso[..10], &iso[11..16])
}

/// The machine in a line: CPUs, memory, kernel and how loaded it was.
fn machine(r: &Report) -> String {
    let m = &r.machine;
    let kernel: Vec<&str> = m.kernel.split_whitespace().take(2).collect();
    let mut s = format!(
        "{} CPUs ({} available), {}, {:.0} GiB RAM, {} {}",
        m.logical_cpus,
        m.available_cpus,
        m.cpu_model,
        m.memory_bytes as f64 / (1u64 << 30) as f64,
        kernel.join(" "),
        m.arch
    );
    match m.load_average.as_slice() {
        [one, five, fifteen] => {
            let _ = write!(
                s,
                ", load average {one:.2} / {five:.2} / {fifteen:.2} (1/5/15 min) as it ended"
            );
        }
        _ => s.push_str(", load not recorded"),
    }
    s
}

/// What a suite's rows measure, in a few lines.
fn measures(suite: &str) -> Option<&'static str> {
    Some(match suite {
        "syscalls" => "Mean time per call over the files in one directory: create, stat by a path 1 to 3 (and 8, 16) directories deep, cold (caches dropped) then warm, rename, unlink, mkdir, rmdir.",
        "data" => "Throughput on one file: 4 KiB sequential and random reads and writes, 64 KiB and 1 MiB writes, 4 KiB appends, next to `memcpy` between DRAM buffers as the ceiling.",
        "mdtest" => "Files per second created, stat'ed, renamed and removed by 1 to N threads sharing one directory.",
        "smallfiles" => "Files per second writing, then reading, files of 1 to 32 KiB.",
        "recovery" => "A pool with one directory of N entries: the first attach, the first lookup (the index loaded), a second process's attach (and apart, its prefaulting of the shared state), the open after a crash, and the index's memory per entry.",
        "apps" => "Seconds for real programs on a source tree: `tar -xf`, `du -s`, `find`, `gzip -r`, `rm -rf` (cold: caches dropped first); on `lib`, the same work through the library in process.",
        "personalities" => "Operations per second of Filebench-like workloads (varmail, fileserver, webserver, createfiles, listdirs, mongo) driven by the bench's own threads.",
        "ablation" => "LynxFS against itself with one mechanism off (the DRAM index, and others), the rows of `syscalls` and `mdtest`.",
        "hybrid" => "A hybrid pool (metadata in PM, file data on a disk) against ext4 on the same disk and an all-PM pool: creates and appends with fsync, `syscalls`, 1 MiB I/O with cold reads.",
        "hybrid-fsync" => "Hybrid pools' commits: the disk's own flush, create+fsync at several sizes, appends with fsync, an fsync with nothing pending, varmail at 1 to 64 threads, against ext4 on the same disk (ratios: each column over ext4-disk).",
        "statall" => "Time per file to stat every file of a tree 8 directories deep by its full path, cold then warm.",
        "rename" => "Time per rename of a directory with 1 to N children, and of a file (ADAM's Fig. 6).",
        "filetest" => "Time per create, unlink, mkdir and rmdir of N names in one directory (ADAM's filetest and dirtest).",
        "start" => "Milliseconds per `/bin/true` started in a row, plain and under the preload in each placement (parent attached or not, working directory in the pool).",
        _ => return None,
    })
}

/// The problems with `page`'s stamps: a Markdown table row holding a number in a
/// section (from one `## ` heading to the next) without every [`STAMP`] line and a
/// date.
pub fn stamp_problems(page: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for section in sections(page) {
        let stamped = STAMP
            .iter()
            .all(|s| section.lines().any(|l| l.starts_with(s)))
            && section.contains(" · Date: ");
        if stamped {
            continue;
        }
        let heading = section.lines().next().unwrap_or("");
        problems.extend(section.lines().filter(|l| is_number_row(l)).map(|l| {
            format!("under {heading:?}: the row {l:?} has no command/commit/machine/date stamp")
        }));
    }
    problems
}

/// `page` cut before each line starting `## ` (the first piece is what comes before).
fn sections(page: &str) -> Vec<&str> {
    let mut starts = vec![0];
    let mut at = 0;
    for line in page.split_inclusive('\n') {
        if line.starts_with("## ") && at > 0 {
            starts.push(at);
        }
        at += line.len();
    }
    starts.push(page.len());
    starts.windows(2).map(|w| &page[w[0]..w[1]]).collect()
}

/// A Markdown table row (not the alignment row) with a digit in a cell after the first.
fn is_number_row(line: &str) -> bool {
    let Some(inner) = line.trim().strip_prefix('|') else {
        return false;
    };
    inner
        .split('|')
        .skip(1)
        .any(|cell| cell.chars().any(|c| c.is_ascii_digit()))
}

/// The problems with what `text` (a Markdown document) names: a `lynxfs bench SUITE`
/// or `lynxfs-bench SUITE` in code whose suite is not one of [`SUITES`] (or
/// [`PAGE_COMMAND`]), or a `scripts/NAME` that is not a file under `root`.
pub fn command_problems(text: &str, root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for code in code_parts(text) {
        for suite in named_suites(code) {
            if !SUITES.contains(&suite) && suite != PAGE_COMMAND {
                problems.push(format!(
                    "`lynxfs bench {suite}`: no such suite (the suites: {})",
                    SUITES.join(", ")
                ));
            }
        }
    }
    for script in named_scripts(text) {
        if !root.join(&script).is_file() {
            problems.push(format!("{script}: no such file"));
        }
    }
    problems
}

/// The code in a Markdown text: fenced blocks, and `spans` outside them.
fn code_parts(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            parts.push(line);
        } else {
            parts.extend(line.split('`').skip(1).step_by(2));
        }
    }
    parts
}

/// The word after each `lynxfs bench ` or `lynxfs-bench ` in `code` that names a
/// suite: lower case (not an option, not a placeholder such as `SUITE`).
fn named_suites(code: &str) -> Vec<&str> {
    let mut found = Vec::new();
    for prefix in ["lynxfs bench ", "lynxfs-bench "] {
        for (at, _) in code.match_indices(prefix) {
            let word = code[at + prefix.len()..]
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .next()
                .unwrap_or("");
            if word.starts_with(|c: char| c.is_ascii_lowercase()) {
                found.push(word);
            }
        }
    }
    found
}

/// Every `scripts/NAME` in `text`, NAME up to a character that cannot be in one (a
/// sentence's last `.` dropped).
fn named_scripts(text: &str) -> Vec<String> {
    text.match_indices("scripts/")
        .filter(|(at, _)| {
            // `crates/x/scripts/` would be another directory's.
            !text[..*at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '/' || c == '-')
        })
        .map(|(at, p)| {
            let name: String = text[at + p.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
                .collect();
            format!("scripts/{}", name.trim_end_matches('.'))
        })
        .filter(|s| s != "scripts/")
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Commit, Machine, Options, Row};

    fn report(suite: &str, unix_time: u64) -> Report {
        Report {
            suite: suite.into(),
            unit: "us/op".into(),
            higher_is_better: false,
            columns: vec!["lib".into(), "tmpfs".into()],
            rows: vec![Row::from_rounds("create", vec![vec![2.0], vec![4.0]])],
            options: Options::default(),
            machine: Machine::detect(),
            unix_time,
            notes: vec!["a note".into(), "goal create: 2.00 us (<= 3: met)".into()],
            baseline: Some("tmpfs".into()),
            command: Some(format!("lynxfs bench {suite} --rounds 1")),
            commit: Some(Commit::parse("abc1234-dirty")),
        }
    }

    fn intro() -> String {
        format!("# Benchmarks\n\nIntro.\n\n{GENERATED_MARK}\nold generated text\n")
    }

    #[test]
    fn renders_a_stamped_section_per_report_and_the_suites_left_out() {
        let reports = [
            Loaded {
                report: report("syscalls", 1_764_694_207),
                figure: None,
            },
            Loaded {
                report: report("syscalls", 1_764_694_300),
                figure: None,
            },
        ];
        let skipped = [("apps".to_string(), "took too long".to_string())];
        let page = render(&intro(), &reports, &skipped, None).unwrap();
        assert!(!page.contains("old generated text"), "{page}");
        assert_eq!(
            page.matches("\n## syscalls: lib, tmpfs").count(),
            2,
            "{page}"
        );
        assert!(
            page.contains("- Command: `lynxfs bench syscalls --rounds 1`"),
            "{page}"
        );
        assert!(
            page.contains(
                "- Commit: `abc1234 (with changes not committed)` · Date: 2025-12-02 16:50 UTC"
            ),
            "{page}"
        );
        assert!(page.contains("| create | 2.00 | 4.00 | 0.50 |"), "{page}");
        assert!(
            page.contains("- a note") && !page.contains("met)"),
            "{page}"
        );
        assert!(page.contains("- `apps`: took too long"), "{page}");
        assert!(page.contains("- `data`: not part of this run"), "{page}");
        assert!(
            stamp_problems(&page).is_empty(),
            "{:?}",
            stamp_problems(&page)
        );
        assert!(
            page.contains(
                "This regeneration: 2 reports, written 2025-12-02 16:50 UTC to 2025-12-02 \
                 16:51 UTC by commit `abc1234 (with changes not committed)`; the 1-minute"
            ),
            "{page}"
        );
    }

    #[test]
    fn copies_figures_under_distinct_names() {
        let run = tempfile::tempdir().unwrap();
        let figures = tempfile::tempdir().unwrap();
        let png = run.path().join("rename-1.png");
        fs::write(&png, b"png").unwrap();
        let reports: Vec<Loaded> = (0..2)
            .map(|i| Loaded {
                report: report("rename", i),
                figure: Some(png.clone()),
            })
            .collect();
        let page = render(&intro(), &reports, &[], Some(figures.path())).unwrap();
        assert!(page.contains("](figures/rename.png)") && page.contains("](figures/rename-2.png)"));
        assert!(figures.path().join("rename-2.png").is_file());
    }

    #[test]
    fn reads_reports_back_in_suite_order() {
        let run = tempfile::tempdir().unwrap();
        report("rename", 5).write_json(run.path()).unwrap();
        report("syscalls", 9).write_json(run.path()).unwrap();
        fs::write(run.path().join(SKIPPED_FILE), "apps: too slow here\n").unwrap();
        let loaded = read_reports(run.path()).unwrap();
        let suites: Vec<&str> = loaded.iter().map(|l| l.report.suite.as_str()).collect();
        assert_eq!(suites, ["syscalls", "rename"]);
        assert_eq!(
            read_skipped(run.path()).unwrap(),
            [("apps".to_string(), "too slow here".to_string())]
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(read_reports(empty.path()).is_err());
    }

    #[test]
    fn an_intro_without_the_mark_is_refused() {
        let err = render("# Benchmarks\n", &[], &[], None).unwrap_err();
        assert!(err.to_string().contains("intro"), "{err:#}");
    }

    #[test]
    fn a_number_row_without_a_stamp_is_a_problem() {
        let page = "# T\n\n| a | b |\n|---|---:|\n| x | no number |\n\n## s\n\n- Command: `c`\n\n| op | v |\n|---|---:|\n| create | 2.5 |\n";
        let problems = stamp_problems(page);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("create"), "{problems:?}");
    }

    #[test]
    fn names_of_missing_suites_and_scripts_are_problems() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir(root.path().join("scripts")).unwrap();
        fs::write(root.path().join("scripts/real.sh"), "").unwrap();
        let text = "Run `lynxfs bench syscalls --rounds 3` and `lynxfs bench SUITE`, \
                    `lynxfs bench --goals`, `lynxfs bench page DIR`, \
                    then scripts/real.sh.\n```sh\nlynxfs-bench nosuch --target lib\n```\n\
                    Prose: lynxfs bench runs it. See scripts/gone.sh and crates/x/scripts/y.sh.\n";
        let problems = command_problems(text, root.path());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("`lynxfs bench nosuch`"),
            "{problems:?}"
        );
        assert!(problems[1].starts_with("scripts/gone.sh"), "{problems:?}");
    }
}
