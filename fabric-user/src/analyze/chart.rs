//! The chart of `fabric analyze --chart PATH.svg`: predicted share of the RoCE bytes per uplink,
//! one group of bars per uplink, one bar per hash mode, the even share as a dashed line. Written
//! as SVG and as PNG beside it, with the experiment charts' shipped font (no system fonts).
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use plotters::{coord::Shift, prelude::*};

use super::Report;
use crate::experiment::chart::{FAMILY, register_font};

/// Draws `r` into `path` with the extension `svg` and the same chart beside it with the extension
/// `png` (so `--chart x.png` writes both too, not the PNG over the SVG); returns both paths.
pub fn write(r: &Report, path: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    let svg = &path.with_extension("svg");
    if let Some(dir) = svg.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let png = svg.with_extension("png");
    {
        let root = SVGBackend::new(svg, (900, 480)).into_drawing_area();
        draw(&root, r)?;
        root.present().map_err(|e| anyhow!("{}: {e}", svg.display()))?;
    }
    {
        let root = BitMapBackend::new(&png, (900, 480)).into_drawing_area();
        draw(&root, r)?;
        root.present().map_err(|e| anyhow!("{}: {e}", png.display()))?;
    }
    Ok(vec![svg.to_path_buf(), png])
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing the analysis chart: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let n = r.group.uplinks.max(1) as usize;
    let shares: Vec<Vec<f64>> = r
        .modes
        .iter()
        .map(|m| {
            let total: u64 = m.uplink_bytes.iter().sum();
            m.uplink_bytes.iter().map(|&b| if total > 0 { 100.0 * b as f64 / total as f64 } else { 0.0 }).collect()
        })
        .collect();
    let top = shares.iter().flatten().copied().fold(100.0 / n as f64, f64::max) * 1.45;
    let name = Path::new(&r.capture).file_name().map_or(r.capture.clone(), |f| f.to_string_lossy().into_owned());
    let title =
        format!("{name}: predicted RoCE bytes per uplink ({} uplinks, seed {:#x})", r.group.uplinks, r.group.seed);
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * n + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 && i < n { format!("uplink {i}") } else { String::new() }
        })
        .y_desc("share of RoCE bytes (%)")
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .draw()
        .map_err(err)?;
    let k = shares.len().max(1) as f64;
    for (j, (m, s)) in r.modes.iter().zip(&shares).enumerate() {
        let color = Palette99::pick(j).mix(0.8);
        chart
            .draw_series(s.iter().enumerate().map(|(i, &v)| {
                let x0 = i as f64 + 0.1 + 0.8 * j as f64 / k;
                Rectangle::new([(x0, 0.0), (x0 + 0.8 / k, v)], color.filled())
            }))
            .map_err(err)?
            .label(if m.max_over_mean.is_nan() {
                format!("{} (no RoCE bytes)", m.mode)
            } else {
                format!("{} (max/mean {:.2}, Jain {:.3})", m.mode, m.max_over_mean, m.jain)
            })
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    let even = 100.0 / n as f64;
    chart
        .draw_series(DashedLineSeries::new([(0.0, even), (n as f64, even)], 6, 4, BLACK.stroke_width(1)))
        .map_err(err)?
        .label("even share")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 10, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 13))
        .draw()
        .map_err(err)?;
    Ok(())
}
