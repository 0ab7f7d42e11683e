//! The testbed's counters in the Prometheus text exposition format (version 0.0.4), for
//! `fabric stats --prometheus`, `fabric exporter` and the live view's `/metrics`, so a Grafana
//! can watch a testbed.
//!
//! The text is produced by `prometheus-client` (the Prometheus project's Rust client): every
//! scrape turns one [`StatsReport`] into metric families ([`families`]), which a [`Collector`]
//! hands to the client's encoder. A collector, rather than registered counters that are set on
//! each scrape, because the values are snapshots of counters kept in the XDP maps, not counters
//! this process increments; it also keeps the families and their samples in a stable order.
use std::net::SocketAddr;

use anyhow::Result;
use axum::{Router, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric as _},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
    registry::Registry,
};

use crate::telemetry::{
    http,
    stats::{ClassStats, PortStats, StatsReport},
};

/// Every metric name starts with this and `_`.
pub const PREFIX: &str = "fabric";

/// A label set: names and values, in the order they are written.
type Labels = Vec<(String, String)>;

/// A sample's value: counters of packets and bytes stay integers in the text.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

/// One metric family: its name without the `fabric_` prefix (and, for counters, without the
/// `_total` suffix the encoder adds), its help, its type and its samples.
#[derive(Clone, Debug)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub counter: bool,
    pub samples: Vec<(Labels, Value)>,
}

impl Family {
    /// The name samples are exported under: `fabric_port_tx_bytes_total`, `fabric_time_scale`.
    pub fn exported_name(&self) -> String {
        let suffix = if self.counter { "_total" } else { "" };
        format!("{PREFIX}_{}{suffix}", self.name)
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn with(mut base: Labels, key: &str, value: impl ToString) -> Labels {
    base.push((key.into(), value.to_string()));
    base
}

fn counter(name: &'static str, help: &'static str, samples: Vec<(Labels, Value)>) -> Family {
    Family { name, help, counter: true, samples }
}

fn gauge(name: &'static str, help: &'static str, samples: Vec<(Labels, Value)>) -> Family {
    Family { name, help, counter: false, samples }
}

/// The metric families of a stats report, in the order they are exported.
pub fn families(r: &StatsReport) -> Vec<Family> {
    let tb = r.testbed.as_str();
    let ports: Vec<(Labels, &PortStats)> = r
        .switches
        .iter()
        .flat_map(|s| {
            s.ports.iter().map(move |p| (labels(&[("testbed", tb), ("switch", &s.switch), ("port", &p.port)]), p))
        })
        .collect();
    let mut out = port_families(&ports);
    out.extend(class_families(&ports));
    out.extend(agent_families(r));
    out.extend(job_families(r));
    let balance = |f: fn(&crate::telemetry::stats::UplinkLoad) -> f64| -> Vec<(Labels, Value)> {
        r.uplinks.iter().map(|u| (labels(&[("testbed", tb), ("switch", &u.rtsw)]), Value::Float(f(u)))).collect()
    };
    let moves = |f: fn(&crate::dataplane::BalanceMoves) -> u64| -> Vec<(Labels, Value)> {
        r.switches
            .iter()
            .map(|s| (labels(&[("testbed", tb), ("switch", &s.switch)]), Value::Int(f(&s.moves))))
            .collect()
    };
    // An RTSW's uplinks by name, for dashboards: a zone may have any name, so a pattern over
    // switch and port names cannot pick them out.
    let uplink_bytes = r
        .uplinks
        .iter()
        .flat_map(|u| {
            u.tx_bytes
                .iter()
                .map(|(port, b)| (labels(&[("testbed", tb), ("switch", &u.rtsw), ("port", port)]), Value::Int(*b)))
        })
        .collect();
    out.extend([
        counter("uplink_tx_bytes", "Bytes an RTSW forwarded out of one of its uplinks.", uplink_bytes),
        counter(
            "flowlet_moves",
            "Flowlets that took another member than the flow's previous flowlet (flowlet mode).",
            moves(|m| m.flowlet_moves),
        ),
        counter(
            "adaptive_second_choices",
            "Packets sent to the second, less loaded candidate (adaptive mode).",
            moves(|m| m.adaptive_second_choices),
        ),
        gauge(
            "uplink_max_over_mean",
            "Busiest RTSW uplink over the mean (bytes since up).",
            balance(|u| u.max_over_mean),
        ),
        gauge("uplink_jain", "Jain's fairness index over an RTSW's uplinks (bytes since up).", balance(|u| u.jain)),
        gauge(
            "time_scale",
            "Modelled time = wall time / this.",
            vec![(labels(&[("testbed", tb)]), Value::Int(r.time_scale))],
        ),
    ]);
    out
}

/// Per switch port: frames, bytes, PFC frames received, drops by reason.
fn port_families(ports: &[(Labels, &PortStats)]) -> Vec<Family> {
    let per_port = |f: fn(&PortStats) -> u64| -> Vec<(Labels, Value)> {
        ports.iter().map(|(l, p)| (l.clone(), Value::Int(f(p)))).collect()
    };
    let drops = ports
        .iter()
        .flat_map(|(l, p)| p.drops.iter().map(move |(reason, n)| (with(l.clone(), "reason", reason), Value::Int(*n))))
        .collect();
    vec![
        counter("port_rx_packets", "Frames received on a switch port.", per_port(|p| p.rx_packets)),
        counter("port_rx_bytes", "Bytes received on a switch port.", per_port(|p| p.rx_bytes)),
        counter("port_tx_packets", "Frames forwarded out of a switch port.", per_port(|p| p.tx_packets)),
        counter("port_tx_bytes", "Bytes forwarded out of a switch port.", per_port(|p| p.tx_bytes)),
        counter("port_rx_pfc_frames", "PFC frames received (consumed) on a port.", per_port(|p| p.rx_pfc_frames)),
        counter("port_drops", "Frames dropped on ingress, by reason.", drops),
    ]
}

/// Per port and priority class: the congestion model's queues.
fn class_families(ports: &[(Labels, &PortStats)]) -> Vec<Family> {
    let classes: Vec<(Labels, &ClassStats)> =
        ports.iter().flat_map(|(l, p)| p.classes.iter().map(move |c| (with(l.clone(), "class", c.class), c))).collect();
    let int = |f: fn(&ClassStats) -> u64| -> Vec<(Labels, Value)> {
        classes.iter().map(|(l, c)| (l.clone(), Value::Int(f(c)))).collect()
    };
    let paused = classes.iter().map(|(l, c)| (l.clone(), Value::Float(c.paused_ns as f64 / 1e9))).collect();
    vec![
        counter("queue_packets", "Packets through a modelled egress queue.", int(|c| c.queued_packets)),
        counter("queue_ecn_marked", "Packets marked CE by a queue.", int(|c| c.ecn_marked)),
        counter("queue_overflow_drops", "Lossy packets dropped on a full queue.", int(|c| c.overflow_drops)),
        gauge("queue_depth_bytes", "Modelled egress queue depth now.", int(|c| c.depth_bytes)),
        gauge("queue_max_depth_bytes", "Deepest the modelled queue has been.", int(|c| c.max_depth_bytes)),
        counter("queue_pauses_received", "PFC frames that paused this egress class.", int(|c| c.pauses_received)),
        counter("queue_paused_seconds", "Wall time this egress class was paused.", paused),
        counter(
            "queue_sent_while_paused",
            "Packets forwarded into a paused class (model error).",
            int(|c| c.sent_while_paused),
        ),
        counter("ingress_xoff_events", "Times an ingress class crossed Xoff.", int(|c| c.xoff_events)),
    ]
}

/// What the switch agents report: PFC frames sent by kind, watchdog storms.
fn agent_families(r: &StatsReport) -> Vec<Family> {
    let tb = r.testbed.as_str();
    let mut pfc = Vec::new();
    for a in &r.agents {
        for p in &a.pfc {
            let l = with(labels(&[("testbed", tb), ("switch", &a.node), ("port", &p.ifname)]), "class", p.class);
            for (kind, n) in [("xoff", p.xoff_sent), ("refresh", p.refresh_sent), ("xon", p.xon_sent)] {
                pfc.push((with(l.clone(), "kind", kind), Value::Int(n)));
            }
        }
    }
    let storms =
        r.agents.iter().map(|a| (labels(&[("testbed", tb), ("switch", &a.node)]), Value::Int(a.storms.len() as u64)));
    vec![
        counter("pfc_frames_sent", "PFC frames a switch agent sent, by kind.", pfc),
        counter("pfc_watchdog_storms", "PFC watchdog events per switch.", storms.collect()),
    ]
}

/// Per job of the last `fabric run --jobs`: progress, completion, bytes, labelled `job`.
fn job_families(r: &StatsReport) -> Vec<Family> {
    let tb = r.testbed.as_str();
    let per_job = |f: &dyn Fn(&crate::telemetry::jobs::JobGauge) -> Value| -> Vec<(Labels, Value)> {
        r.jobs.iter().map(|j| (labels(&[("testbed", tb), ("job", &j.job), ("job_id", &j.job_id)]), f(j))).collect()
    };
    let uplink = r
        .jobs
        .iter()
        .flat_map(|j| {
            j.uplink_bytes
                .iter()
                .map(move |(l, b)| (labels(&[("testbed", tb), ("job", &j.job), ("link", l)]), Value::Int(*b)))
        })
        .collect();
    vec![
        gauge(
            "job_progress",
            "Share of a job's steps done (all iterations), 0 to 1.",
            per_job(&|j| Value::Float(j.steps_done as f64 / j.steps.max(1) as f64)),
        ),
        gauge("job_done", "1 once the job has run its last step.", per_job(&|j| Value::Int(u64::from(j.done)))),
        gauge(
            "job_last_completion_seconds",
            "Wall time of the job's last finished iteration (0 before the first).",
            per_job(&|j| Value::Float(j.completion_ns.last().copied().unwrap_or(0) as f64 / 1e9)),
        ),
        counter(
            "job_delivered_bytes",
            "Bytes the job's receivers accepted.",
            per_job(&|j| Value::Int(j.bytes_delivered)),
        ),
        counter("job_uplink_bytes", "Frame bytes a job put on an RTSW uplink (forwarding model).", uplink),
    ]
}

/// One scrape's families, handed to the client library's encoder.
#[derive(Debug)]
struct Snapshot(Vec<Family>);

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        for f in &self.0 {
            let kind = if f.counter { MetricType::Counter } else { MetricType::Gauge };
            let mut metric = encoder.encode_descriptor(f.name, f.help, None, kind)?;
            for (l, v) in &f.samples {
                let sample = metric.encode_family(l)?;
                match (f.counter, *v) {
                    (true, Value::Int(n)) => ConstCounter::new(n).encode(sample)?,
                    (true, Value::Float(x)) => ConstCounter::new(x).encode(sample)?,
                    (false, Value::Int(n)) => ConstGauge::new(n as i64).encode(sample)?,
                    (false, Value::Float(x)) => ConstGauge::new(x).encode(sample)?,
                }
            }
        }
        Ok(())
    }
}

/// Renders a stats report in the Prometheus text format.
pub fn render(r: &StatsReport) -> String {
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(Snapshot(families(r))));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        .expect("writing into a String cannot fail");
    out
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The sample names a text in the exposition format declares (`# TYPE` lines; a counter's
/// samples carry its declared name, `_total` included).
pub fn declared_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The `/metrics` route for a testbed: the state is read again on every scrape, so a testbed
/// rebuilt under a running exporter is followed, and one that is down answers 503.
pub fn router(prefix: String) -> Router {
    Router::new().route("/metrics", get(move || metrics(prefix.clone())))
}

async fn metrics(prefix: String) -> axum::response::Response {
    let scrape = tokio::task::spawn_blocking(move || -> Result<String> {
        let state = crate::state::State::load(&prefix)?;
        Ok(render(&crate::telemetry::stats::collect(&state)?))
    })
    .await;
    match scrape {
        Ok(Ok(text)) => ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}\n")).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// `fabric exporter --listen ADDR`: serves `/metrics` until killed (or after `max_requests`
/// responses). Loopback addresses only unless `allow_remote`: the testbed's counters are not
/// for the network at large.
pub fn serve(prefix: &str, listen: SocketAddr, allow_remote: bool, max_requests: Option<u64>) -> Result<()> {
    let listener = http::bind(listen, allow_remote)?;
    eprintln!("serving http://{}/metrics", listener.local_addr()?);
    if let Some(note) = http::absent_testbed_note(prefix) {
        eprintln!("{note}");
    }
    let app = router(prefix.to_string()).route("/", get(|| async { "fabric exporter: see /metrics\n" }));
    http::serve(listener, app, max_requests)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::telemetry::stats::{ClassStats, CongestionTotals, PortStats, StatsReport, SwitchStats, UplinkLoad};

    /// A report with a sample in every family.
    pub(crate) fn full_report() -> StatsReport {
        let mut p = PortStats {
            port: "z0c1".into(),
            up: true,
            rx_packets: 3,
            rx_bytes: 300,
            tx_packets: 2,
            tx_bytes: 200,
            rx_roce_packets: 1,
            tx_roce_packets: 1,
            drops: [("no_route", 4)].into_iter().collect(),
            to_kernel: Default::default(),
            rx_pfc_frames: 5,
            classes: Vec::new(),
            degraded: None,
        };
        p.classes.push(ClassStats { class: 3, ecn_marked: 7, paused_ns: 2_500_000_000, ..Default::default() });
        let agent = crate::agent::SwitchTelemetry {
            node: "z0r0".into(),
            pfc: vec![crate::agent::PfcPortStats {
                ifname: "z0c1".into(),
                class: 3,
                xoff_sent: 9,
                ..Default::default()
            }],
            ..Default::default()
        };
        StatsReport {
            testbed: "fab".into(),
            time_scale: 4000,
            switches: vec![SwitchStats {
                switch: "z0r0".into(),
                role: crate::model::plan::Role::Rtsw,
                ports: vec![p],
                moves: crate::dataplane::BalanceMoves { flowlet_moves: 3, adaptive_second_choices: 0 },
            }],
            uplinks: vec![UplinkLoad {
                rtsw: "z0r0".into(),
                tx_bytes: vec![("z0c1".into(), 200)],
                max_over_mean: 1.5,
                jain: 0.75,
            }],
            congestion: CongestionTotals::default(),
            agents: vec![agent],
            jobs: vec![crate::telemetry::jobs::JobGauge {
                job: "b".into(),
                job_id: "fab-1-b".into(),
                steps_done: 3,
                steps: 12,
                done: false,
                completion_ns: vec![],
                bytes_delivered: 4096,
                uplink_bytes: [("z0r0->z0c1".to_string(), 200)].into(),
                stopped: false,
            }],
        }
    }

    #[test]
    fn renders_the_text_format_with_the_names_it_always_had() {
        let text = render(&full_report());
        assert!(text.contains("# TYPE fabric_port_tx_bytes_total counter"), "{text}");
        assert!(text.contains("fabric_port_tx_bytes_total{testbed=\"fab\",switch=\"z0r0\",port=\"z0c1\"} 200\n"));
        assert!(text.contains(
            "fabric_port_drops_total{testbed=\"fab\",switch=\"z0r0\",port=\"z0c1\",reason=\"no_route\"} 4\n"
        ));
        assert!(
            text.contains(
                "fabric_queue_ecn_marked_total{testbed=\"fab\",switch=\"z0r0\",port=\"z0c1\",class=\"3\"} 7\n"
            )
        );
        assert!(text.contains(
            "fabric_queue_paused_seconds_total{testbed=\"fab\",switch=\"z0r0\",port=\"z0c1\",class=\"3\"} 2.5\n"
        ));
        assert!(text.contains(
            "fabric_pfc_frames_sent_total{testbed=\"fab\",switch=\"z0r0\",port=\"z0c1\",class=\"3\",kind=\"xoff\"} 9\n"
        ));
        assert!(text.contains("fabric_uplink_max_over_mean{testbed=\"fab\",switch=\"z0r0\"} 1.5\n"));
        assert!(text.contains("fabric_uplink_tx_bytes_total{testbed=\"fab\",switch=\"z0r0\",port=\"z0c1\"} 200\n"));
        assert!(text.contains("fabric_time_scale{testbed=\"fab\"} 4000\n"));
        // Per job: the `job` label.
        assert!(text.contains("fabric_job_progress{testbed=\"fab\",job=\"b\",job_id=\"fab-1-b\"} 0.25\n"), "{text}");
        assert!(text.contains("fabric_job_uplink_bytes_total{testbed=\"fab\",job=\"b\",link=\"z0r0->z0c1\"} 200\n"));
        // Every sample line is `name{labels} value`, and its name is declared.
        let declared = declared_names(&text);
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (head, v) = l.rsplit_once(' ').unwrap();
            assert!(head.ends_with('}') && v.parse::<f64>().is_ok(), "{l}");
            assert!(declared.contains(head.split('{').next().unwrap()), "{l}");
        }
    }

    #[test]
    fn every_family_is_declared_under_its_exported_name() {
        let r = full_report();
        let declared = declared_names(&render(&r));
        let fams = families(&r);
        assert_eq!(declared.len(), fams.len());
        for f in &fams {
            assert!(declared.contains(&f.exported_name()), "{} not in {declared:?}", f.exported_name());
            assert!(!f.samples.is_empty(), "the fixture leaves {} empty", f.name);
        }
    }
}
