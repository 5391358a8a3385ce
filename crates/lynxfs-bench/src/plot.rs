//! Figures: one PNG per report, drawn with `plotters` on its bitmap backend.
//!
//! The `rename` report becomes ADAM's Fig. 6: rename latency against the directory's
//! children (both axes log), one curve per column, each column's file rename a thin
//! flat line in its colour. The `hybrid-fsync` report has a panel per workload: create +
//! fsync against the file's size and the mail server against its threads (curves, both
//! axes log), and its other rows as bars. Every other report becomes a horizontal grouped bar chart: one group per operation (row),
//! one bar per column, on a log axis. With several columns the bars show each value
//! relative to the report's baseline column (or the first), so suites whose rows mix
//! units (`ablation`) still share an axis and "better" reads the same way everywhere;
//! with one column the bars show the values themselves. The absolute numbers stay in
//! the table and the JSON next to the figure.
//!
//! Text is rendered with `ab_glyph` from a TrueType font read at run time (no
//! fontconfig): `LYNXFS_BENCH_FONT` if set, else DejaVu Sans or Liberation Sans from
//! the usual Debian/Fedora/Arch places. Without one, no figure is drawn and the error
//! says so.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::rename::{children_of, FILE_ROW};
use crate::Report;

/// The font family name the figures ask for.
const FAMILY: &str = "sans-serif";

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
];

/// Registers the font once per process; the error (no font found) is kept too.
fn font() -> anyhow::Result<()> {
    static FONT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = FONT.get_or_init(|| {
        let env = std::env::var_os("LYNXFS_BENCH_FONT").map(PathBuf::from);
        let candidates = env.into_iter().chain(FONT_PATHS.iter().map(PathBuf::from));
        for path in candidates {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            // plotters keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if register_font(FAMILY, FontStyle::Normal, bytes).is_ok() {
                return Ok(path);
            }
        }
        Err(format!(
            "no TrueType font found (set LYNXFS_BENCH_FONT, or install fonts-dejavu-core); \
             looked in {}",
            FONT_PATHS.join(", ")
        ))
    });
    r.as_ref().map(drop).map_err(|e| anyhow!("{e}"))
}

/// Bar colours, one per column (a colour-blind-safe palette).
const COLORS: &[RGBColor] = &[
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(120, 120, 120),
    RGBColor(240, 228, 66),
];

/// What a figure shows: per row, per column, the plotted value (NaN: no bar).
pub(crate) struct Bars {
    pub(crate) title: String,
    pub(crate) axis: String,
    pub(crate) ops: Vec<String>,
    pub(crate) columns: Vec<String>,
    pub(crate) values: Vec<Vec<f64>>,
}

impl Bars {
    pub(crate) fn of(report: &Report) -> Self {
        let better = if report.higher_is_better {
            "higher"
        } else {
            "lower"
        };
        let relative = report.columns.len() > 1;
        let base = report.baseline_index().unwrap_or(0);
        let values = report
            .rows
            .iter()
            .map(|r| {
                r.values
                    .iter()
                    .map(|&v| if relative { v / r.values[base] } else { v })
                    .collect()
            })
            .collect();
        let axis = if relative {
            format!(
                "{} relative to {} (log scale; {better} is better)",
                report.unit, report.columns[base]
            )
        } else {
            format!("{} (log scale; {better} is better)", report.unit)
        };
        Self {
            title: format!("lynxfs bench {}", report.suite),
            axis,
            ops: report.rows.iter().map(|r| r.op.clone()).collect(),
            columns: report.columns.clone(),
            values,
        }
    }

    /// Room for the longest row name.
    fn label_px(&self) -> u32 {
        self.ops
            .iter()
            .map(|o| o.chars().count() as u32)
            .max()
            .unwrap_or(4)
            * 8
            + 16
    }

    /// The log axis range: every finite positive value, and 1 when relative, with a
    /// margin.
    fn range(&self) -> Option<(f64, f64)> {
        let mut lo = f64::INFINITY;
        let mut hi = f64::NEG_INFINITY;
        for v in self.values.iter().flatten() {
            if v.is_finite() && *v > 0.0 {
                lo = lo.min(*v);
                hi = hi.max(*v);
            }
        }
        if !lo.is_finite() {
            return None;
        }
        if self.columns.len() > 1 {
            lo = lo.min(1.0);
            hi = hi.max(1.0);
        }
        Some((lo / 1.6, hi * 1.6))
    }
}

/// Draws `report` into `dir/<suite>-<unix time>.png` and returns the path.
pub fn draw(report: &Report, dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("{}-{}.png", report.suite, report.unix_time));
    match report.suite.as_str() {
        "rename" => draw_rename(report, &path)?,
        HYBRID_FSYNC => draw_hybrid_fsync(report, &path)?,
        _ => draw_bars(&Bars::of(report), &path)?,
    }
    if !path.exists() {
        bail!("{} was not written", path.display());
    }
    Ok(path)
}

/// The suite whose figure has a panel per workload.
const HYBRID_FSYNC: &str = "hybrid-fsync";

/// A drawing area of a PNG figure.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// One line per column over a parameter (a step per point, values on a log axis), and optionally each
/// column's flat reference value as a thin line in its colour.
struct Curves<'a> {
    title: String,
    x_desc: String,
    y_desc: String,
    columns: &'a [String],
    /// (parameter, a value per column), in the parameter's order.
    points: Vec<(f64, &'a [f64])>,
    flat: Option<&'a [f64]>,
    legend: SeriesLabelPosition,
}

/// The `rename` figure: per column, (children, µs) points and the file rename's µs.
fn draw_rename(report: &Report, path: &Path) -> anyhow::Result<()> {
    font()?;
    let curves = Curves {
        title: "lynxfs bench rename (ADAM Fig. 6; thin: a file's rename)".into(),
        x_desc: "children of the renamed directory".into(),
        y_desc: format!("{} (log scale; lower is better)", report.unit),
        columns: &report.columns,
        points: parameter_points(report, children_of),
        flat: report
            .rows
            .iter()
            .find(|r| r.op == FILE_ROW)
            .map(|r| r.values.as_slice()),
        legend: SeriesLabelPosition::UpperLeft,
    };
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| drawing(path, e))?;
    draw_curves(&root, &curves).map_err(|e| e.context(format!("drawing {}", path.display())))?;
    root.present().map_err(|e| drawing(path, e))
}

/// The rows whose name `param` reads a parameter from, as (parameter, values).
fn parameter_points(report: &Report, param: impl Fn(&str) -> Option<usize>) -> Vec<(f64, &[f64])> {
    report
        .rows
        .iter()
        .filter_map(|r| Some((param(&r.op)? as f64, r.values.as_slice())))
        .collect()
}

fn drawing(path: &Path, e: impl std::fmt::Debug) -> anyhow::Error {
    anyhow!("drawing {}: {e:?}", path.display())
}

/// Draws `c` on `area`: a log axis spanning whole decades of the values.
fn draw_curves(area: &Area, c: &Curves) -> anyhow::Result<()> {
    let values = c
        .points
        .iter()
        .flat_map(|(_, v)| v.iter())
        .chain(c.flat.iter().flat_map(|v| v.iter()))
        .filter(|v| v.is_finite() && **v > 0.0);
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(*v), hi.max(*v))
    });
    if c.points.is_empty() || !lo.is_finite() {
        bail!("nothing to plot: no parameter row with a positive value");
    }
    // The parameters grow geometrically (1, 4, 16, 64 threads; 4, 16, 64 KiB; 1, 10,
    // 100 children): one step of the axis per point, labelled with its parameter.
    let params: Vec<f64> = c.points.iter().map(|p| p.0).collect();
    let n = params.len();
    let (x_lo, x_hi) = (-0.4, n as f64 - 0.6);
    let e = |e| anyhow!("{e:?}");
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, (FAMILY, 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(
            x_lo..x_hi,
            // Whole decades, so the log axis has labelled powers of ten at both ends.
            (10f64.powf(lo.log10().floor())..10f64.powf(hi.log10().ceil())).log_scale(),
        )
        .map_err(e)?;
    let label = move |x: &f64| {
        let i = x.round();
        match (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
            true => format!("{:.0}", params[i as usize]),
            false => String::new(),
        }
    };
    chart
        .configure_mesh()
        .x_desc(&c.x_desc)
        .x_labels(2 * n + 1)
        .x_label_formatter(&label)
        .disable_x_mesh()
        .y_label_formatter(&|y| format!("{y}"))
        .y_desc(&c.y_desc)
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .draw()
        .map_err(e)?;
    for (col, name) in c.columns.iter().enumerate() {
        let color = COLORS[col % COLORS.len()];
        let line: Vec<(f64, f64)> = c
            .points
            .iter()
            .enumerate()
            .map(|(i, (_, v))| (i as f64, v[col]))
            .filter(|(_, y)| y.is_finite() && *y > 0.0)
            .collect();
        chart
            .draw_series(std::iter::once(PathElement::new(
                line.clone(),
                color.stroke_width(2),
            )))
            .map_err(e)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
        chart
            .draw_series(line.into_iter().map(|p| Circle::new(p, 4, color.filled())))
            .map_err(e)?;
        if let Some(v) = c.flat.map(|f| f[col]).filter(|v| v.is_finite() && *v > 0.0) {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x_lo, v), (x_hi, v)],
                    color.stroke_width(1),
                )))
                .map_err(e)?;
        }
    }
    chart
        .configure_series_labels()
        .position(c.legend.clone())
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()
        .map_err(e)?;
    Ok(())
}

/// The `hybrid-fsync` figure, a panel per workload: create + fsync against the file's
/// size and the mail server against its threads (ops/s, log-log), and the remaining
/// rows as bars relative to the baseline.
fn draw_hybrid_fsync(report: &Report, path: &Path) -> anyhow::Result<()> {
    font()?;
    let kib = |op: &str| -> Option<usize> {
        let n: usize = op
            .strip_prefix("fsync create ")?
            .strip_suffix('K')?
            .parse()
            .ok()?;
        // The log axis has no 0: a create of an empty file stays with the bars.
        (n > 0).then_some(n)
    };
    let threads = |op: &str| -> Option<usize> {
        op.strip_prefix("varmail ")?.strip_suffix('t')?.parse().ok()
    };
    let y_desc = format!("{} (log scale; higher is better)", report.unit);
    let create = Curves {
        title: "create, write, fsync, close".into(),
        x_desc: "file size, KiB".into(),
        y_desc: y_desc.clone(),
        columns: &report.columns,
        points: parameter_points(report, kib),
        flat: None,
        legend: SeriesLabelPosition::LowerLeft,
    };
    let mail = Curves {
        title: "mail server (varmail), fsync per message".into(),
        x_desc: "threads".into(),
        y_desc,
        columns: &report.columns,
        points: parameter_points(report, threads),
        flat: None,
        legend: SeriesLabelPosition::LowerRight,
    };
    let mut rest = Bars::of(report);
    (rest.ops, rest.values) = rest
        .ops
        .into_iter()
        .zip(rest.values)
        .filter(|(op, _)| kib(op).is_none() && threads(op).is_none())
        .unzip();
    rest.title = "the other rows".into();
    rest.axis = format!(
        "relative to {} (log scale)",
        report.columns[report.baseline_index().unwrap_or(0)]
    );
    let root = BitMapBackend::new(path, (1800, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| drawing(path, e))?;
    let root = root
        .titled(&format!("lynxfs bench {}", report.suite), (FAMILY, 22))
        .map_err(|e| drawing(path, e))?;
    let panels = root.split_evenly((1, 3));
    let context = |e: anyhow::Error| e.context(format!("drawing {}", path.display()));
    draw_curves(&panels[0], &create).map_err(context)?;
    draw_curves(&panels[1], &mail).map_err(context)?;
    draw_bars_on(&panels[2], &rest).map_err(context)?;
    root.present().map_err(|e| drawing(path, e))
}

pub(crate) fn draw_bars(bars: &Bars, path: &Path) -> anyhow::Result<()> {
    font()?;
    let (rows, cols) = (bars.ops.len(), bars.columns.len().max(1));
    let group_px = BAR_PX * cols as u32 + 12;
    let height = (120 + group_px * rows as u32 + 20 * cols as u32).clamp(260, 4000);
    let width = 900 + bars.label_px();
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| drawing(path, e))?;
    draw_bars_on(&root, bars).map_err(|e| e.context(format!("drawing {}", path.display())))?;
    root.present().map_err(|e| drawing(path, e))
}

/// A bar's height in a figure of bars alone.
const BAR_PX: u32 = 12;

/// Draws `bars` on `area`: a group per row, top to bottom, a bar per column.
fn draw_bars_on(area: &Area, bars: &Bars) -> anyhow::Result<()> {
    let Some((lo, hi)) = bars.range() else {
        bail!("nothing to plot: no positive value");
    };
    let (rows, cols) = (bars.ops.len(), bars.columns.len().max(1));
    let e = |e| anyhow!("{e:?}");
    let y_top = rows as f64 - 0.5;
    let mut chart = ChartBuilder::on(area)
        .caption(&bars.title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(bars.label_px())
        .build_cartesian_2d((lo..hi).log_scale(), -0.5f64..y_top)
        .map_err(e)?;
    // Rows top to bottom in table order: row i sits at y = rows - 1 - i.
    let ops = bars.ops.clone();
    let label = move |y: &f64| {
        let r = y.round();
        if (y - r).abs() > 1e-6 || r < 0.0 || r as usize >= ops.len() {
            return String::new();
        }
        ops[ops.len() - 1 - r as usize].clone()
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows + 1)
        .y_label_formatter(&label)
        .x_desc(&bars.axis)
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .draw()
        .map_err(e)?;
    let band = 0.8 / cols as f64;
    for (c, name) in bars.columns.iter().enumerate() {
        let color = COLORS[c % COLORS.len()];
        let rects: Vec<_> = bars
            .values
            .iter()
            .enumerate()
            .filter(|(_, vals)| vals[c].is_finite() && vals[c] > 0.0)
            .map(|(i, vals)| {
                let y = (rows - 1 - i) as f64 + 0.4 - band * (c as f64 + 1.0);
                Rectangle::new([(lo, y), (vals[c], y + band * 0.9)], color.filled())
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(e)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()
        .map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Machine, Options, Row};

    /// `report` drawn as a PNG named `name`, or, on a machine without any font, an
    /// error that says so.
    fn assert_drawn(report: &Report, name: &str) {
        let dir = tempfile::tempdir().unwrap();
        match draw(report, dir.path()) {
            Ok(path) => {
                let bytes = std::fs::read(&path).unwrap();
                assert_eq!(&bytes[1..4], b"PNG");
                assert!(path.ends_with(name));
            }
            Err(e) => assert!(format!("{e:#}").contains("font"), "{e:#}"),
        }
    }

    #[test]
    fn draws_the_rename_curves() {
        let report = Report {
            suite: "rename".into(),
            unit: "us/rename".into(),
            higher_is_better: false,
            columns: vec!["lynxfs".into(), "tmpfs".into()],
            rows: vec![
                Row::from_rounds("dir of 1 child", vec![vec![2.0], vec![4.0]]),
                Row::from_rounds("dir of 10 children", vec![vec![3.0], vec![4.0]]),
                Row::from_rounds("file", vec![vec![1.0], vec![3.0]]),
            ],
            options: Options::default(),
            machine: Machine::detect(),
            unix_time: 9,
            notes: vec![],
            baseline: Some("tmpfs".into()),
            command: None,
            commit: None,
        };
        assert_drawn(&report, "rename-9.png");
    }

    #[test]
    fn draws_the_hybrid_fsync_panels() {
        let row = |op: &str, a: f64, b: f64| Row::from_rounds(op, vec![vec![a], vec![b]]);
        let report = Report {
            suite: HYBRID_FSYNC.into(),
            unit: "ops/s".into(),
            higher_is_better: true,
            columns: vec!["hybrid".into(), "ext4-disk".into()],
            rows: vec![
                row("fsync create 0K", 9e4, 1e3),
                row("fsync create 4K", 4e3, 1e3),
                row("fsync create 64K", 3e3, 9e2),
                row("append 8K, fsync/32", 6e4, 5e4),
                row("varmail 1t", 2e4, 1e4),
                row("varmail 16t", 9e4, 3e4),
            ],
            options: Options::default(),
            machine: Machine::detect(),
            unix_time: 11,
            notes: vec![],
            baseline: Some("ext4-disk".into()),
            command: None,
            commit: None,
        };
        assert_drawn(&report, "hybrid-fsync-11.png");
    }

    #[test]
    fn draws_a_png_with_bars_relative_to_the_baseline() {
        let report = Report {
            suite: "apps".into(),
            unit: "s".into(),
            higher_is_better: false,
            columns: vec!["lynxfs".into(), "tmpfs".into()],
            rows: vec![
                Row::from_rounds("tar -xf", vec![vec![2.0], vec![4.0]]),
                Row::from_rounds("rm -rf", vec![vec![1.0], vec![f64::NAN]]),
            ],
            options: Options::default(),
            machine: Machine::detect(),
            unix_time: 7,
            notes: vec![],
            baseline: Some("tmpfs".into()),
            command: None,
            commit: None,
        };
        let bars = Bars::of(&report);
        assert_eq!(bars.values[0], [0.5, 1.0]);
        assert!(bars.values[1][0].is_nan());
        assert_drawn(&report, "apps-7.png");
    }
}
