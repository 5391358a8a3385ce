//! Results: the [`Report`] a suite returns, its text table and its JSON file.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Deserializer, Serialize};

use crate::machine::Machine;
use crate::stamp::Commit;
use crate::Options;

/// One operation's results: a value per column.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// The operation (`"create"`, `"rand read 4K"`).
    pub op: String,
    /// Per column, the median over rounds, in the report's unit.
    #[serde(deserialize_with = "values_or_nan")]
    pub values: Vec<f64>,
    /// Per column, every round's value, in the order they were run.
    #[serde(deserialize_with = "rounds_or_nan")]
    pub rounds: Vec<Vec<f64>>,
}

/// JSON has no NaN: serde_json writes a failed value as `null`, read back as NaN.
fn values_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let v: Vec<Option<f64>> = Vec::deserialize(d)?;
    Ok(v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
}

/// [`values_or_nan`] for every column's rounds.
fn rounds_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<f64>>, D::Error> {
    let v: Vec<Vec<Option<f64>>> = Vec::deserialize(d)?;
    Ok(v.into_iter()
        .map(|c| c.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
        .collect())
}

impl Row {
    /// A row whose values are the medians of `rounds` (one list per column).
    pub fn from_rounds(op: impl Into<String>, rounds: Vec<Vec<f64>>) -> Self {
        let values = rounds.iter().map(|r| median(r)).collect();
        Self {
            op: op.into(),
            values,
            rounds,
        }
    }
}

/// What a suite measured, on what, and where.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// The suite's name (`"syscalls"`, `"data"`).
    pub suite: String,
    /// The unit of every value (`"us/op"`, `"MB/s"`; MB is 10^6 bytes).
    pub unit: String,
    /// Whether bigger values are better (throughput) or worse (latency).
    pub higher_is_better: bool,
    /// Column labels: the targets' names, then any reference column (`"memcpy"`).
    pub columns: Vec<String>,
    /// One row per operation, in the order they ran.
    pub rows: Vec<Row>,
    /// How the suite was run.
    pub options: Options,
    /// The machine it ran on.
    pub machine: Machine,
    /// When it finished, in seconds since the Unix epoch.
    pub unix_time: u64,
    /// Caveats worth keeping next to the numbers (a fallback target, say).
    pub notes: Vec<String>,
    /// The column the ratios are taken against (`"tmpfs"` for `apps`): the table then
    /// shows `X/baseline` for every other column. `None`: `first/X`, as described at
    /// [`Report::table`].
    pub baseline: Option<String>,
    /// The command that ran the suite (`lynxfs bench syscalls --rounds 3`), if known.
    #[serde(default)]
    pub command: Option<String>,
    /// The source commit of the benchmark, if known.
    #[serde(default)]
    pub commit: Option<Commit>,
}

impl Report {
    /// The plain-text table: one row per operation, one column per target, then a
    /// `first/X` column for each other column (the first column's value divided by X's,
    /// so for `us/op` a ratio below 1 means the first target is faster, and for `MB/s`
    /// a ratio above 1 does).
    ///
    /// With a [`Report::baseline`] column B, the ratio columns are `X/B` for every other
    /// column X instead.
    pub fn table(&self) -> String {
        let (header, body) = self.grid();
        let mut out = format!("{}\n", self.title());
        render(&mut out, &header, &body);
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }

    /// The cells of [`Report::table`] as a Markdown table (no title, no notes).
    pub fn markdown_table(&self) -> String {
        let (header, body) = self.grid();
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            let escaped: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
            let _ = writeln!(out, "| {} |", escaped.join(" | "));
        };
        line(&mut out, &header);
        let align: Vec<String> = (0..header.len())
            .map(|i| if i == 0 { "---" } else { "---:" }.to_string())
            .collect();
        let _ = writeln!(out, "|{}|", align.join("|"));
        for row in &body {
            line(&mut out, row);
        }
        out
    }

    /// The table's header and rows: the values, then the ratio columns.
    fn grid(&self) -> (Vec<String>, Vec<Vec<String>>) {
        let first = self.columns.first().map_or("", String::as_str);
        let mut header = vec!["op".to_string()];
        header.extend(self.columns.iter().map(|c| format!("{c} {}", self.unit)));
        let body: Vec<Vec<String>> = match self.baseline_index() {
            Some(b) => {
                let base = &self.columns[b];
                header.extend(
                    self.columns
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| i != b)
                        .map(|(_, c)| format!("{c}/{base}")),
                );
                self.rows.iter().map(|r| baseline_cells(r, b)).collect()
            }
            None => {
                header.extend(self.columns.iter().skip(1).map(|c| format!("{first}/{c}")));
                self.rows.iter().map(row_cells).collect()
            }
        };
        (header, body)
    }

    /// The index of the [`Report::baseline`] column, if it names one.
    pub fn baseline_index(&self) -> Option<usize> {
        let b = self.baseline.as_deref()?;
        self.columns.iter().position(|c| c == b)
    }

    /// What the suite ran, its unit, the rounds and which way is better.
    pub fn title(&self) -> String {
        let better = if self.higher_is_better {
            "higher"
        } else {
            "lower"
        };
        let rounds = self.options.rounds;
        let what = match self.suite.as_str() {
            "syscalls" | "smallfiles" => format!("{} files", self.options.files),
            "mdtest" if self.options.processes > 0 => format!(
                "{} files, 1 and {} threads or processes in one directory",
                self.options.files, self.options.processes
            ),
            "mdtest" => format!(
                "{} files, 1..={} threads in one directory",
                self.options.files, self.options.max_threads
            ),
            "recovery" => format!("one directory of {} files", self.options.files),
            "data" => format!("a {} MiB file", self.options.file_size >> 20),
            "apps" => {
                "GNU tools on a source tree (a lynxfs column: in-process Rust versions)".to_string()
            }
            "personalities" => "Filebench-like workloads".to_string(),
            "ablation" => "LynxFS with and without a mechanism".to_string(),
            "hybrid" => format!(
                "metadata in PM, data on a disk; {} files, a {} MiB file",
                self.options.files,
                self.options.file_size >> 20
            ),
            "statall" => format!(
                "{} files 8 directories deep, each stat'ed by its full path",
                self.options.files
            ),
            "rename" => format!(
                "a hot directory of 1 to {} children renamed, and a file (ADAM's Fig. 6)",
                self.options.files
            ),
            "filetest" => format!(
                "{} files then directories made and removed in one directory (ADAM's filetest, dirtest)",
                self.options.files
            ),
            "start" => format!(
                "/bin/true started {} times in a row, plain and under the preload",
                self.options.files
            ),
            _ => String::new(),
        };
        format!(
            "suite {}: {what}, {}, median of {rounds} round(s), {better} is better",
            self.suite, self.unit
        )
    }

    /// Writes the report as pretty JSON to `dir/<suite>-<unix time>.json`, creating
    /// `dir` if needed, and returns the file's path.
    pub fn write_json(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{}-{}.json", self.suite, self.unix_time));
        self.write_json_to(&path)?;
        Ok(path)
    }

    /// Writes the report as pretty JSON to the file `path`.
    pub fn write_json_to(&self, path: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_string_pretty(self).context("serializing the report")?;
        fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
    }
}

/// A row's cells: the operation, each value, then the first value over each other one.
fn row_cells(row: &Row) -> Vec<String> {
    let mut cells = vec![row.op.clone()];
    cells.extend(row.values.iter().map(|&v| format_value(v)));
    let first = row.values.first().copied().unwrap_or(f64::NAN);
    cells.extend(row.values.iter().skip(1).map(|&v| format_ratio(first, v)));
    cells
}

/// Three significant digits or so, without switching to exponents.
pub fn format_value(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A row's cells against column `b`: the operation, each value, then each other value
/// over `b`'s.
fn baseline_cells(row: &Row, b: usize) -> Vec<String> {
    let mut cells = vec![row.op.clone()];
    cells.extend(row.values.iter().map(|&v| format_value(v)));
    let base = row.values.get(b).copied().unwrap_or(f64::NAN);
    cells.extend(
        row.values
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != b)
            .map(|(_, &v)| format_ratio(v, base)),
    );
    cells
}

/// `a / b` to two decimals, or `-` when it is undefined.
pub fn format_ratio(a: f64, b: f64) -> String {
    let r = a / b;
    if r.is_finite() {
        format!("{r:.2}")
    } else {
        "-".into()
    }
}

/// Appends an aligned table: the first column left-aligned, the rest right-aligned.
fn render(out: &mut String, header: &[String], body: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in body {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut String, cells: &[String]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, &w))| {
                if i == 0 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(out, header);
    for row in body {
        line(out, row);
    }
}

/// The median (the mean of the middle two for an even count); NaN for no values.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(columns: &[&str], rows: Vec<Row>) -> Report {
        Report {
            suite: "syscalls".into(),
            unit: "us/op".into(),
            higher_is_better: false,
            columns: columns.iter().map(|s| s.to_string()).collect(),
            rows,
            options: Options::default(),
            machine: Machine::detect(),
            unix_time: 0,
            notes: vec![],
            baseline: None,
            command: None,
            commit: None,
        }
    }

    #[test]
    fn table_has_ratio_of_first_column_over_each_other() {
        let rows = vec![Row::from_rounds(
            "create",
            vec![vec![2.0], vec![4.0], vec![1.0]],
        )];
        let table = report(&["tmpfs", "ext4", "lib"], rows).table();
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[1].contains("tmpfs/ext4") && lines[1].contains("tmpfs/lib"),
            "{table}"
        );
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(cells, ["create", "2.00", "4.00", "1.00", "0.50", "2.00"]);
    }

    #[test]
    fn table_with_a_baseline_divides_every_other_column_by_it() {
        let rows = vec![Row::from_rounds(
            "tar -xf",
            vec![vec![3.0], vec![2.0], vec![6.0]],
        )];
        let mut r = report(&["lib", "tmpfs", "ext4"], rows);
        r.baseline = Some("tmpfs".into());
        let table = r.table();
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[1].contains("lib/tmpfs") && lines[1].contains("ext4/tmpfs"),
            "{table}"
        );
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            cells,
            ["tar", "-xf", "3.00", "2.00", "6.00", "1.50", "3.00"]
        );
    }

    #[test]
    fn table_columns_line_up() {
        let rows = vec![
            Row::from_rounds("create", vec![vec![1234.5], vec![1.0]]),
            Row::from_rounds("stat (depth 3)", vec![vec![0.5], vec![0.25]]),
        ];
        let table = report(&["a", "b"], rows).table();
        let widths: Vec<usize> = table.lines().skip(1).map(|l| l.chars().count()).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{table}");
    }

    #[test]
    fn undefined_ratio_is_a_dash() {
        assert_eq!(format_ratio(1.0, 0.0), "-");
        assert_eq!(format_ratio(3.0, 2.0), "1.50");
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn json_round_trips_the_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![Row::from_rounds("create", vec![vec![2.0, 3.0, 4.0]])];
        let path = report(&["tmpfs"], rows).write_json(dir.path()).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(v["rows"][0]["values"][0], 3.0);
        assert_eq!(v["rows"][0]["rounds"][0][2], 4.0);
        assert!(v["machine"]["cpu_model"].is_string());
    }

    #[test]
    fn json_reads_back_with_a_failed_value_as_nan() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![Row::from_rounds("create", vec![vec![2.0], vec![f64::NAN]])];
        let mut r = report(&["lib", "tmpfs"], rows);
        r.commit = Some(Commit::parse("abc1234-dirty"));
        let path = r.write_json(dir.path()).unwrap();
        let back: Report = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(back.rows[0].values[0], 2.0);
        assert!(back.rows[0].values[1].is_nan() && back.rows[0].rounds[1][0].is_nan());
        assert_eq!(back.commit, r.commit);
        assert_eq!(back.columns, r.columns);
    }

    #[test]
    fn markdown_table_has_the_text_tables_cells() {
        let rows = vec![Row::from_rounds("a|b", vec![vec![2.0], vec![4.0]])];
        let md = report(&["lib", "tmpfs"], rows).markdown_table();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines[0], "| op | lib us/op | tmpfs us/op | lib/tmpfs |");
        assert_eq!(lines[1], "|---|---:|---:|---:|");
        assert_eq!(lines[2], "| a\\|b | 2.00 | 4.00 | 0.50 |");
    }
}
