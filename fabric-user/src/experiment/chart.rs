//! Charts of an experiment with plotters: one per charted metric, a bar per case (the mean) and a
//! dot per seed, written as SVG and as PNG.
//!
//! Fonts: the SVG backend writes text as `<text>` elements (the viewer's fonts draw it); the PNG
//! is rasterised here, with plotters' `ab_glyph` feature and DejaVu Sans shipped in
//! `fabric-user/assets/` (Bitstream Vera licence, `assets/LICENSE-DejaVu.txt`), so no
//! fontconfig, FreeType or system font is needed.
use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::{coord::Shift, prelude::*};

use super::harness::{Better, ExperimentReport, Metric};

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
pub(crate) const FAMILY: &str = "sans-serif";

pub(crate) fn register_font() -> Result<()> {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *ONCE.get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok { Ok(()) } else { Err(anyhow!("the shipped font does not parse")) }
}

/// Draws every charted metric of `r` into `dir` as `METRIC.svg` and `METRIC.png`; returns the
/// file names.
pub fn write_all(r: &ExperimentReport, dir: &Path) -> Result<Vec<String>> {
    register_font()?;
    let mut files = Vec::new();
    for m in r.outcome.metrics.iter().filter(|m| m.chart) {
        let svg = format!("{}.svg", m.key);
        let png = format!("{}.png", m.key);
        {
            let path = dir.join(&svg);
            let root = SVGBackend::new(&path, size(r)).into_drawing_area();
            draw(&root, r, m)?;
            root.present().map_err(|e| anyhow!("{svg}: {e}"))?;
        }
        {
            let path = dir.join(&png);
            let root = BitMapBackend::new(&path, size(r)).into_drawing_area();
            draw(&root, r, m)?;
            root.present().map_err(|e| anyhow!("{png}: {e}"))?;
        }
        files.push(svg);
        files.push(png);
    }
    Ok(files)
}

/// 900 px wide, a 56 px row per case.
fn size(r: &ExperimentReport) -> (u32, u32) {
    (900, 120 + 56 * r.outcome.cases.len().max(1) as u32)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &ExperimentReport, m: &Metric) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing {}: {e:?}", m.key);
    root.fill(&WHITE).map_err(err)?;
    let cases: Vec<(&str, Vec<f64>, f64)> = r
        .outcome
        .cases
        .iter()
        .filter_map(|c| {
            let v = c.values.get(m.key)?;
            let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
            Some((c.label.as_str(), finite, c.mean(m.key)))
        })
        .collect();
    if cases.is_empty() {
        return Ok(());
    }
    let top = cases.iter().flat_map(|c| c.1.iter().copied().chain([c.2])).filter(|x| x.is_finite()).fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };
    let n = cases.len();
    let better = match m.better {
        Better::Lower => " (lower is better)",
        Better::Higher => " (higher is better)",
        Better::None => "",
    };
    let title = format!("{}: {}{}", r.name, m.label, better);
    // Horizontal bars: each case's name reads in full at the left, whatever its length.
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 20))
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(LABEL_AREA_PX)
        .build_cartesian_2d(0f64..top, 0f64..n as f64)
        .map_err(err)?;
    let labels: Vec<String> = cases.iter().map(|c| c.0.to_string()).collect();
    let step = axis_step(top);
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n * 2 + 1)
        .y_label_formatter(&|y| {
            // Case i's bar spans i+0.2..i+0.8 from the top; its label sits at the middle.
            let from_top = n as f64 - y;
            let i = from_top.floor() as usize;
            if (from_top - i as f64 - 0.5).abs() < 0.01 && i < labels.len() {
                wrap(&labels[i], 44)
            } else {
                String::new()
            }
        })
        .x_labels(((top / step).floor() as usize + 1).clamp(2, 12))
        .x_label_formatter(&|x| axis_number(*x, step))
        .x_desc(if m.unit.is_empty() { m.label.to_string() } else { format!("{} ({})", m.label, m.unit) })
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .draw()
        .map_err(err)?;
    for (i, (_, seeds, mean)) in cases.iter().enumerate() {
        let color = Palette99::pick(i).mix(0.75);
        let row = (n - 1 - i) as f64;
        if mean.is_finite() {
            chart
                .draw_series(std::iter::once(Rectangle::new([(0.0, row + 0.2), (*mean, row + 0.8)], color.filled())))
                .map_err(err)?;
        }
        let k = seeds.len().max(1) as f64;
        chart
            .draw_series(
                seeds
                    .iter()
                    .enumerate()
                    .map(|(j, v)| Circle::new((*v, row + 0.3 + 0.4 * (j as f64 + 0.5) / k), 4, BLACK.filled())),
            )
            .map_err(err)?;
    }
    Ok(())
}

/// Room for the case names left of the bars, px.
const LABEL_AREA_PX: u32 = 300;

/// A round step (1, 2 or 5 x 10^k) giving about six ticks up to `top`.
fn axis_step(top: f64) -> f64 {
    let raw = (top / 6.0).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let m = raw / mag;
    mag * if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// A tick value with as many decimals as the step needs: `7000`, not `7000.0`; `0.25`, not `0.3`.
fn axis_number(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()) as usize };
    format!("{v:.decimals$}")
}

/// The label on one line, shortened to `n` characters.
fn wrap(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::harness::{Case, Outcome};

    #[test]
    fn svg_and_png_render_without_system_fonts() {
        let mut a = Case::new("a", "five-tuple, 1 QP");
        a.push("m", 3.0);
        a.push("m", 4.0);
        let mut b = Case::new("b", "E-ECMP, 8 QPs");
        b.push("m", 1.2);
        b.push("m", f64::NAN);
        let r = ExperimentReport {
            schema: crate::experiment::harness::SCHEMA,
            name: "t".into(),
            summary: String::new(),
            paper: String::new(),
            variant: "ci".into(),
            seeds: vec![1, 2],
            control: None,
            wall_seconds: 0.0,
            outcome: Outcome {
                setup: vec![],
                metrics: vec![Metric::new("m", "max/mean", "", Better::Lower, true)],
                cases: vec![a, b],
                verdicts: vec![],
                notes: vec![],
                tables: vec![],
            },
            files: vec![],
            rerun: "fabric experiment t".into(),
            modelled_time: false,
        };
        let dir = std::env::temp_dir().join(format!("fabric-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = write_all(&r, &dir).unwrap();
        assert_eq!(files, ["m.svg", "m.png"]);
        let svg = std::fs::read_to_string(dir.join("m.svg")).unwrap();
        assert!(svg.contains("<svg") && svg.contains("max/mean"));
        let png = std::fs::read(dir.join("m.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn axis_ticks_are_round_and_print_no_needless_decimals() {
        assert_eq!(axis_step(8050.0), 2000.0);
        assert_eq!(axis_number(7000.0, 2000.0), "7000");
        assert_eq!(axis_step(1.5), 0.5);
        assert_eq!(axis_number(0.5, 0.5), "0.5");
        assert_eq!(axis_step(0.09), 0.02);
        assert_eq!(axis_number(0.04, 0.02), "0.04");
    }
}
