//! The fabric's uplinks per case, as small multiples: one panel per case, a row per RTSW and a
//! cell per uplink, coloured by the uplink's bytes over the mean of its RTSW's uplinks (1 = an
//! even split). The entropy story is easier to see than to read: five-tuple ECMP with one QP
//! leaves dark cells beside pale ones, E-ECMP an even band.
use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::{
    coord::Shift,
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};

use super::{
    chart::{FAMILY, register_font},
    harness::{Case, ExperimentReport},
};

/// One panel: the case's label and, per RTSW, each uplink's load relative to the RTSW's mean.
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    pub label: String,
    pub rows: Vec<(String, Vec<(String, f64)>)>,
}

/// The panels of the cases that recorded uplink bytes. An RTSW that sent nothing has every
/// cell 0 (not "even").
pub fn panels(cases: &[Case]) -> Vec<Panel> {
    cases
        .iter()
        .filter(|c| !c.uplinks.is_empty())
        .map(|c| Panel {
            label: c.label.clone(),
            rows: c
                .uplinks
                .iter()
                .map(|(rtsw, ports)| {
                    let mean = ports.iter().map(|p| p.1 as f64).sum::<f64>() / ports.len().max(1) as f64;
                    let rel = |b: u64| if mean > 0.0 { b as f64 / mean } else { 0.0 };
                    (rtsw.clone(), ports.iter().map(|(p, b)| (p.clone(), rel(*b))).collect())
                })
                .collect(),
        })
        .collect()
}

/// The colour of a relative load: pale yellow (nothing) through orange (even, 1) to dark red
/// (twice the mean or more).
pub fn colour(rel: f64) -> RGBColor {
    const STOPS: [(f64, (u8, u8, u8)); 3] = [(0.0, (255, 255, 204)), (1.0, (253, 141, 60)), (2.0, (128, 0, 38))];
    let r = rel.clamp(0.0, 2.0);
    let (lo, hi) = if r <= 1.0 { (STOPS[0], STOPS[1]) } else { (STOPS[1], STOPS[2]) };
    let t = (r - lo.0) / (hi.0 - lo.0);
    let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * t).round() as u8;
    RGBColor(mix(lo.1.0, hi.1.0), mix(lo.1.1, hi.1.1), mix(lo.1.2, hi.1.2))
}

const PANEL_COLS: usize = 3;
const PANEL_W: u32 = 330;
const CELL: u32 = 44;
const HEADER: u32 = 120;

fn size(p: &[Panel]) -> (u32, u32) {
    let rows = p.iter().map(|p| p.rows.len()).max().unwrap_or(1) as u32;
    let panel_h = 70 + rows * CELL;
    let panel_rows = p.len().div_ceil(PANEL_COLS) as u32;
    (PANEL_W * PANEL_COLS as u32 + 20, HEADER + panel_rows * panel_h)
}

/// Writes `uplink-heatmap.svg` and `.png` when any case recorded uplink bytes; returns the names.
pub fn write(r: &ExperimentReport, dir: &Path) -> Result<Vec<String>> {
    let p = panels(&r.outcome.cases);
    if p.is_empty() {
        return Ok(Vec::new());
    }
    register_font()?;
    let (svg, png) = ("uplink-heatmap.svg".to_string(), "uplink-heatmap.png".to_string());
    {
        let path = dir.join(&svg);
        let root = SVGBackend::new(&path, size(&p)).into_drawing_area();
        draw(&root, &r.name, &p)?;
        root.present().map_err(|e| anyhow!("{svg}: {e}"))?;
    }
    {
        let path = dir.join(&png);
        let root = BitMapBackend::new(&path, size(&p)).into_drawing_area();
        draw(&root, &r.name, &p)?;
        root.present().map_err(|e| anyhow!("{png}: {e}"))?;
    }
    Ok(vec![svg, png])
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, name: &str, panels: &[Panel]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing the uplink heat map: {e:?}");
    root.fill(&WHITE).map_err(err)?;
    let title = format!("{name}: bytes on each RTSW uplink, over the mean of the RTSW's uplinks");
    root.draw(&Text::new(title, (14, 12), (FAMILY, 22).into_font())).map_err(err)?;
    let note = "a row per RTSW, a cell per uplink, all seeds of a case together; 1.0 = an even split";
    root.draw(&Text::new(note, (14, 40), (FAMILY, 15).into_font().color(&RGBColor(80, 80, 80)))).map_err(err)?;
    legend(root, 14, 66).map_err(err)?;
    let body = root.margin(HEADER, 0, 10, 10);
    let rows = panels.len().div_ceil(PANEL_COLS);
    let areas = body.split_evenly((rows, PANEL_COLS));
    for (area, p) in areas.iter().zip(panels) {
        panel(area, p).map_err(err)?;
    }
    Ok(())
}

fn legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    x: i32,
    y: i32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let steps = 40;
    for i in 0..steps {
        let rel = 2.0 * i as f64 / (steps - 1) as f64;
        let x0 = x + 6 * i;
        root.draw(&Rectangle::new([(x0, y), (x0 + 6, y + 14)], colour(rel).filled()))?;
    }
    let label = |t: &str, dx: i32| Text::new(t.to_string(), (x + dx, y + 18), (FAMILY, 14).into_font());
    root.draw(&label("0", 0))?;
    root.draw(&label("1 (even)", 6 * steps / 2 - 14))?;
    root.draw(&label("2+", 6 * steps - 14))?;
    Ok(())
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let label: String = if p.label.chars().count() > 40 {
        format!("{}…", p.label.chars().take(39).collect::<String>())
    } else {
        p.label.clone()
    };
    area.draw(&Text::new(label, (4, 4), (FAMILY, 16).into_font()))?;
    let left = 56;
    let top = 44;
    let centre = |t: String, x: i32, y: i32, ink: &RGBColor| {
        Text::new(t, (x, y), (FAMILY, 14).into_font().color(ink).pos(Pos::new(HPos::Center, VPos::Center)))
    };
    // Uplink names over the columns of the first row (the same spines for every RTSW of a zone).
    if let Some((_, first)) = p.rows.first() {
        for (j, (port, _)) in first.iter().enumerate() {
            let x = left + j as i32 * CELL as i32 + CELL as i32 / 2;
            area.draw(&centre(port.clone(), x, top - 10, &BLACK))?;
        }
    }
    for (i, (rtsw, cells)) in p.rows.iter().enumerate() {
        let y = top + i as i32 * CELL as i32;
        area.draw(&Text::new(rtsw.clone(), (4, y + CELL as i32 / 2 - 8), (FAMILY, 14).into_font()))?;
        for (j, (_, rel)) in cells.iter().enumerate() {
            let x = left + j as i32 * CELL as i32;
            area.draw(&Rectangle::new([(x, y), (x + CELL as i32 - 2, y + CELL as i32 - 2)], colour(*rel).filled()))?;
            let ink = if *rel > 1.3 { WHITE } else { BLACK };
            area.draw(&centre(format!("{rel:.1}"), x + CELL as i32 / 2 - 1, y + CELL as i32 / 2 - 1, &ink))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::stats::UplinkLoad;

    fn case(label: &str, loads: &[(&str, &[u64])]) -> Case {
        let mut c = Case::new(label, label);
        let ups: Vec<UplinkLoad> = loads
            .iter()
            .map(|(rtsw, b)| UplinkLoad {
                rtsw: rtsw.to_string(),
                tx_bytes: b.iter().enumerate().map(|(i, b)| (format!("z0c{i}"), *b)).collect(),
                max_over_mean: 0.0,
                jain: 0.0,
            })
            .collect();
        // Two seeds: the case sums them.
        c.add_uplinks(&ups);
        c.add_uplinks(&ups);
        c
    }

    #[test]
    fn cells_are_loads_over_the_rtsw_mean_summed_over_seeds() {
        let cases =
            [case("five-tuple", &[("z0r0", &[400, 0, 0, 0]), ("z0r1", &[0, 0, 0, 0])]), Case::new("none", "no runs")];
        assert_eq!(
            cases[0].uplinks["z0r0"],
            vec![("z0c0".into(), 800), ("z0c1".into(), 0), ("z0c2".into(), 0), ("z0c3".into(), 0)]
        );
        let p = panels(&cases);
        assert_eq!(p.len(), 1, "a case without uplink bytes gets no panel");
        let rel: Vec<f64> = p[0].rows[0].1.iter().map(|c| c.1).collect();
        assert_eq!(rel, [4.0, 0.0, 0.0, 0.0]);
        assert!(p[0].rows[1].1.iter().all(|c| c.1 == 0.0), "an idle RTSW is not 'even'");
    }

    #[test]
    fn colours_run_from_pale_through_even_to_dark() {
        assert_eq!(colour(0.0), RGBColor(255, 255, 204));
        assert_eq!(colour(1.0), RGBColor(253, 141, 60));
        assert_eq!(colour(5.0), colour(2.0));
        let lum = |c: RGBColor| c.0 as u32 + c.1 as u32 + c.2 as u32;
        assert!(lum(colour(0.5)) > lum(colour(1.0)) && lum(colour(1.0)) > lum(colour(1.5)));
    }

    #[test]
    fn the_heat_map_renders_as_svg_and_png_with_a_panel_per_case() {
        let cases = vec![
            case("five-tuple, 1 QP", &[("z0r0", &[400, 0, 0, 0]), ("z0r1", &[0, 300, 100, 0])]),
            case("E-ECMP, 8 QPs", &[("z0r0", &[100, 100, 100, 100]), ("z0r1", &[90, 110, 100, 100])]),
        ];
        let r = ExperimentReport {
            schema: crate::experiment::harness::SCHEMA,
            name: "ecmp-entropy".into(),
            summary: String::new(),
            paper: String::new(),
            variant: "ci".into(),
            seeds: vec![1, 2],
            control: None,
            wall_seconds: 0.0,
            outcome: crate::experiment::harness::Outcome {
                setup: vec![],
                metrics: vec![],
                cases,
                verdicts: vec![],
                notes: vec![],
                tables: vec![],
            },
            files: vec![],
            rerun: "fabric experiment t".into(),
            modelled_time: false,
        };
        let dir = std::env::temp_dir().join(format!("fabric-heatmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(write(&r, &dir).unwrap(), ["uplink-heatmap.svg", "uplink-heatmap.png"]);
        let svg = std::fs::read_to_string(dir.join("uplink-heatmap.svg")).unwrap();
        let texts: Vec<&str> =
            svg.split("<text").skip(1).filter_map(|t| t.split('>').nth(1)?.split('<').next()).map(str::trim).collect();
        for wanted in ["five-tuple, 1 QP", "E-ECMP, 8 QPs", "4.0", "1.0", "z0c3"] {
            assert!(texts.contains(&wanted), "{wanted} is not written: {texts:?}");
        }
        assert_eq!(texts.iter().filter(|t| **t == "z0r1").count(), 2, "an RTSW row per panel");
        assert_eq!(&std::fs::read(dir.join("uplink-heatmap.png")).unwrap()[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
