//! `report.md` and `results.json` of an experiment.
use std::{fmt::Write as _, path::Path};

use anyhow::{Context as _, Result};

use super::harness::{Better, ExperimentReport};

fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// One Markdown table per metric: a row per case, a column per seed, and the mean.
pub fn metric_tables_md(r: &ExperimentReport) -> String {
    let mut s = String::new();
    for m in &r.outcome.metrics {
        let better = match m.better {
            Better::Lower => " (lower is better)",
            Better::Higher => " (higher is better)",
            Better::None => "",
        };
        let _ = writeln!(
            s,
            "**{}**{}{}\n",
            m.label,
            if m.unit.is_empty() { String::new() } else { format!(", {}", m.unit) },
            better
        );
        let _ = write!(s, "| case |");
        for seed in &r.seeds {
            let _ = write!(s, " seed {seed} |");
        }
        let _ = writeln!(s, " mean |");
        let _ = write!(s, "|---|");
        for _ in &r.seeds {
            let _ = write!(s, "---:|");
        }
        let _ = writeln!(s, "---:|");
        for c in &r.outcome.cases {
            let Some(vals) = c.values.get(m.key) else { continue };
            let _ = write!(s, "| {} |", c.label);
            for i in 0..r.seeds.len() {
                let _ = write!(s, " {} |", vals.get(i).map_or("-".into(), |v| fmt_value(*v)));
            }
            let _ = writeln!(s, " **{}** |", fmt_value(c.mean(m.key)));
        }
        s.push('\n');
    }
    s
}

/// The means per case and metric, as a plain-text table.
pub fn metrics_table_text(r: &ExperimentReport) -> String {
    let mut s = String::new();
    let w = r.outcome.cases.iter().map(|c| c.label.len()).max().unwrap_or(4).max(4);
    let _ = write!(s, "  {:<w$}", "case");
    for m in &r.outcome.metrics {
        let _ = write!(s, " {:>14}", truncate(m.key, 14));
    }
    s.push('\n');
    for c in &r.outcome.cases {
        let _ = write!(s, "  {:<w$}", c.label);
        for m in &r.outcome.metrics {
            let _ = write!(s, " {:>14}", fmt_value(c.mean(m.key)));
        }
        s.push('\n');
    }
    s
}

fn truncate(s: &str, n: usize) -> &str {
    if s.len() <= n { s } else { &s[..n] }
}

/// Writes `report.md` and `results.json` into `dir` (and adds them to `r.files`).
pub fn write(r: &mut ExperimentReport, dir: &Path) -> Result<()> {
    r.files.push("report.md".into());
    r.files.push("results.json".into());
    let mut s = String::new();
    let _ = writeln!(s, "# Experiment `{}`\n", r.name);
    let _ = writeln!(s, "{}\n", r.summary);
    let _ = writeln!(
        s,
        "Variant: **{}** (seeds {}), wall time {:.0} s. Re-run: `{}`.\n",
        r.variant,
        r.seeds.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "),
        r.wall_seconds,
        r.rerun
    );
    let _ = writeln!(s, "## What the paper says\n\n{}\n", r.paper);
    let _ = writeln!(s, "## Verdict\n");
    let (yes, no, unsure) = super::verdict::tally(&r.outcome.verdicts);
    let _ = writeln!(
        s,
        "{yes} claim(s) match, {no} do not, {unsure} inconclusive (identities not counted). A comparison matches \
         when the whole 95% t interval of its per-seed gain lies above its margin, does not match when it lies \
         below, and is inconclusive otherwise or when a run was CPU-bound.\n"
    );
    if let Some(c) = &r.control {
        let _ = writeln!(s, "**Negative control:** {c}.\n");
    }
    let _ = writeln!(s, "| claim | measured (per seed) | evidence | verdict |\n|---|---|---|---|");
    for v in &r.outcome.verdicts {
        let _ = writeln!(
            s,
            "| {}{} `{}` | {} | {} | **{}** |",
            v.claim,
            if v.headline { " (headline)" } else { "" },
            v.key,
            v.measured,
            v.evidence(),
            v.direction.describe()
        );
    }
    let _ = writeln!(s, "\n## Setup\n");
    for line in &r.outcome.setup {
        let _ = writeln!(s, "- {line}");
    }
    let _ = writeln!(s, "\n## Measurements\n");
    s.push_str(&metric_tables_md(r));
    for t in &r.outcome.tables {
        let _ = writeln!(s, "**{}**\n", t.title);
        let _ = writeln!(s, "| {} |", t.header.join(" | "));
        let _ = writeln!(s, "|{}", "---|".repeat(t.header.len()));
        for row in &t.rows {
            let _ = writeln!(s, "| {} |", row.join(" | "));
        }
        s.push('\n');
    }
    let charts: Vec<&String> = r.files.iter().filter(|f| f.ends_with(".svg")).collect();
    if !charts.is_empty() {
        let _ = writeln!(s, "## Charts\n");
        for c in charts {
            let _ = writeln!(s, "![{c}]({c})  ");
        }
        s.push('\n');
    }
    if !r.outcome.notes.is_empty() {
        let _ = writeln!(s, "## Notes\n");
        for n in &r.outcome.notes {
            let _ = writeln!(s, "- {n}");
        }
        s.push('\n');
    }
    let times = if r.modelled_time {
        "Times are the packet-level twin's modelled time (no wall clock enters them)."
    } else {
        "Times are wall-clock on this machine; the fabric runs slowed by the topology's `time_scale` \
         (modelled time = wall time / time_scale)."
    };
    let _ = writeln!(
        s,
        "{times} A gain is the difference in percent of the larger of the two values (so it lies in \
         -100..100%); the paper's \"x times\" become gains the same way. Bars in the charts are means, dots are seeds."
    );
    std::fs::write(dir.join("report.md"), s).with_context(|| format!("writing {}/report.md", dir.display()))?;
    std::fs::write(dir.join("results.json"), serde_json::to_vec_pretty(r)?)
        .with_context(|| format!("writing {}/results.json", dir.display()))?;
    Ok(())
}
