//! The issues' performance goals, checked against a finished table and added to its
//! notes: where LynxFS (the [`LIB_NAME`] column) stands against them. Nothing fails on
//! a missed goal; the notes only say so.

use crate::lib_target::LIB_NAME;
use crate::Row;

/// `syscalls` goals: (row, most µs for the library, least speed-up over tmpfs).
const SYSCALLS: &[(&str, f64, f64)] = &[
    ("create", 1.5, 5.0),
    ("stat (depth 1)", 0.3, 5.0),
    // The issue states 0.3 µs at depth 1 and 0.5 µs three deep; depth 2 gets the
    // looser of the two.
    ("stat (depth 2)", 0.5, 5.0),
    ("stat (depth 3)", 0.5, 5.0),
    ("rename", 2.0, 5.0),
    ("unlink", 1.0, 5.0),
    ("mkdir", 2.0, 5.0),
    ("rmdir", 1.5, 5.0),
];

fn column(columns: &[String], pred: impl Fn(&str) -> bool) -> Option<usize> {
    columns.iter().position(|c| pred(c))
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// The goal notes for `suite`'s table, empty when it has no LynxFS column.
pub(crate) fn notes(suite: &str, columns: &[String], rows: &[Row]) -> Vec<String> {
    let Some(lib) = column(columns, |c| c == LIB_NAME) else {
        return Vec::new();
    };
    let tmpfs = column(columns, |c| c.starts_with("tmpfs"));
    let row = |op: &str| rows.iter().find(|r| r.op == op);
    let mut out = Vec::new();
    match suite {
        "syscalls" => {
            for &(op, most, speedup) in SYSCALLS {
                let Some(r) = row(op) else { continue };
                let v = r.values[lib];
                let mut s = format!("goal {op}: {v:.2} us (<= {most}: {})", met(v <= most));
                if let Some(t) = tmpfs {
                    let x = r.values[t] / v;
                    s += &format!(", {x:.1}x tmpfs (>= {speedup}x: {})", met(x >= speedup));
                }
                out.push(s);
            }
        }
        "data" => {
            let memcpy = column(columns, |c| c == "memcpy");
            for op in ["seq read 4K", "rand read 4K"] {
                if let (Some(r), Some(m)) = (row(op), memcpy) {
                    let x = r.values[m] / r.values[lib];
                    out.push(format!(
                        "goal {op}: memcpy is {x:.2}x faster (<= 1.2x: {})",
                        met(x <= 1.2)
                    ));
                }
            }
            for op in ["seq write 4K", "rand write 4K"] {
                if let (Some(r), Some(t)) = (row(op), tmpfs) {
                    let x = r.values[lib] / r.values[t];
                    out.push(format!(
                        "goal {op} (overwrite): {x:.2}x tmpfs (>= 2x: {})",
                        met(x >= 2.0)
                    ));
                }
            }
        }
        "recovery" => {
            for r in rows {
                if let [v, goal] = r.values[..] {
                    out.push(format!(
                        "goal {}: {v:.1} ms (<= {goal} ms at 1M files: {})",
                        r.op,
                        met(v <= goal)
                    ));
                }
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(op: &str, values: &[f64]) -> Row {
        Row::from_rounds(op, values.iter().map(|&v| vec![v]).collect())
    }

    #[test]
    fn syscalls_goals_compare_with_the_limit_and_with_tmpfs() {
        let cols = vec!["lynxfs".to_string(), "tmpfs".to_string()];
        let rows = vec![row("create", &[1.0, 10.0]), row("unlink", &[2.0, 4.0])];
        let n = notes("syscalls", &cols, &rows);
        assert_eq!(n.len(), 2);
        assert!(
            n[0].contains("<= 1.5: met") && n[0].contains("10.0x tmpfs (>= 5x: met)"),
            "{}",
            n[0]
        );
        assert!(
            n[1].contains("<= 1: MISSED") && n[1].contains("2.0x tmpfs (>= 5x: MISSED)"),
            "{}",
            n[1]
        );
    }

    #[test]
    fn data_goals_use_memcpy_and_tmpfs() {
        let cols: Vec<String> = ["tmpfs", "lynxfs", "memcpy"].map(String::from).into();
        let rows = vec![
            row("seq read 4K", &[1.0, 900.0, 1000.0]),
            row("rand write 4K", &[100.0, 150.0, 1.0]),
        ];
        let n = notes("data", &cols, &rows);
        assert!(n[0].contains("1.11x faster (<= 1.2x: met)"), "{}", n[0]);
        assert!(n[1].contains("1.50x tmpfs (>= 2x: MISSED)"), "{}", n[1]);
    }

    #[test]
    fn no_lynxfs_column_no_notes() {
        let cols = vec!["tmpfs".to_string()];
        assert!(notes("syscalls", &cols, &[row("create", &[1.0])]).is_empty());
    }
}
