//! The Grafana dashboard shipped in `docs/grafana/fabric.json`, checked against the exporter: the
//! metric names its PromQL queries read must be names the exporter declares, so a renamed metric
//! cannot leave a dashboard of empty panels behind.
use std::collections::BTreeSet;

/// Every PromQL query of a dashboard: panel targets' `expr` and templating queries.
pub fn queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(dashboard, &mut out);
    out
}

fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr" | "query" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => walk(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
        _ => {}
    }
}

/// PromQL words that are not metric names: keywords, and the aggregation operators (which may
/// be followed by `by (...)` rather than by their parenthesis).
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// The metric names a PromQL expression reads: identifiers that are neither functions nor
/// aggregations (followed by `(`), keywords, label names inside `{...}`, grouping lists after
/// `by`/`on`/..., strings, durations nor numbers.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    // Grafana's `label_values(METRIC, LABEL)`: only its first argument is a metric.
    if let Some(args) = expr.trim().strip_prefix("label_values(") {
        return metric_names(args.split([',', ')']).next().unwrap_or_default());
    }
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let (mut i, mut depth_braces, mut skip_parens_after) = (0, 0usize, false);
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                // A string: skip to its closing quote.
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += 1 + usize::from(chars[i] == '\\');
                }
            }
            '{' => depth_braces += 1,
            '}' => depth_braces = depth_braces.saturating_sub(1),
            '[' => {
                while i < chars.len() && chars[i] != ']' {
                    i += 1;
                }
            }
            '(' if skip_parens_after => {
                // A grouping list: `by (switch, port)`.
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                skip_parens_after = false;
            }
            c if word_char(c) && !c.is_ascii_digit() => {
                let start = i;
                while i < chars.len() && word_char(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace()).copied();
                skip_parens_after =
                    ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&word.as_str());
                if depth_braces == 0 && next != Some('(') && !KEYWORDS.contains(&word.as_str()) {
                    names.insert(word);
                }
                continue;
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number (1e9 included).
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    names
}

/// The metric names a dashboard's queries read that `exported` does not declare.
pub fn unknown_metrics(dashboard: &serde_json::Value, exported: &BTreeSet<String>) -> BTreeSet<String> {
    queries(dashboard).iter().flat_map(|q| metric_names(q)).filter(|m| !exported.contains(m)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::prometheus;

    const DASHBOARD: &str = include_str!("../../../docs/grafana/fabric.json");

    fn exported() -> BTreeSet<String> {
        prometheus::declared_names(&prometheus::render(&prometheus::tests::full_report()))
    }

    #[test]
    fn names_are_found_in_promql_and_nothing_else() {
        let e = r#"max by (switch) (rate(fabric_port_tx_bytes_total{testbed="$testbed",port=~"z[0-9]+c.*"}[1m])) * on(testbed) group_left() fabric_time_scale / 1e9"#;
        let names: Vec<String> = metric_names(e).into_iter().collect();
        assert_eq!(names, ["fabric_port_tx_bytes_total", "fabric_time_scale"]);
        assert_eq!(metric_names("label_values(fabric_time_scale, testbed)").len(), 1);
        assert!(metric_names("increase(x_total[5m]) > bool 0").contains("x_total"));
    }

    /// Zones and switches may have any names (`east`, `spine7`): a query that matches names by
    /// pattern shows nothing on such a testbed.
    #[test]
    fn no_query_matches_switch_or_port_names_by_pattern() {
        let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
        for q in queries(&dashboard) {
            assert!(!q.contains("switch=~") && !q.contains("port=~"), "a query matches names by pattern: {q}");
        }
    }

    #[test]
    fn every_metric_the_dashboard_reads_is_one_the_exporter_emits() {
        let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
        let exported = exported();
        let unknown = unknown_metrics(&dashboard, &exported);
        assert!(unknown.is_empty(), "the dashboard reads metrics the exporter does not emit: {unknown:?}");
        let read: BTreeSet<String> = queries(&dashboard).iter().flat_map(|q| metric_names(q)).collect();
        for wanted in [
            "fabric_uplink_max_over_mean",
            "fabric_queue_ecn_marked_total",
            "fabric_queue_depth_bytes",
            "fabric_port_drops_total",
            "fabric_pfc_frames_sent_total",
        ] {
            assert!(read.contains(wanted), "the dashboard shows no {wanted}");
        }
        // The check bites: a query of a metric that does not exist is reported.
        let mut broken = dashboard.clone();
        broken["panels"][0]["targets"][0]["expr"] = "rate(fabric_port_tx_byte_total[1m])".into();
        assert_eq!(unknown_metrics(&broken, &exported).into_iter().collect::<Vec<_>>(), ["fabric_port_tx_byte_total"]);
    }
}
