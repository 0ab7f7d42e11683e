//! The testbed's counters in the Prometheus text exposition format (version 0.0.4), for
//! `fabric stats --prometheus` and `fabric exporter`, so a Grafana can watch a testbed.
//!
//! The exporter is a few lines over `std::net::TcpListener` answering `GET /metrics`: one
//! endpoint, no routing, no TLS — a web framework would add more than it saves.
use std::{
    fmt::Write as _,
    io::{BufRead as _, BufReader, Write as _},
    net::{IpAddr, SocketAddr, TcpListener},
};

use anyhow::{Context as _, Result, bail};

use crate::{state::State, telemetry::stats::StatsReport};

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Renders a stats report.
pub fn render(r: &StatsReport) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP fabric_{name} {help}");
        let _ = writeln!(out, "# TYPE fabric_{name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "fabric_{name}{{{labels}}} {v}");
        }
    };
    let tb = esc(&r.testbed);
    let port_labels = |sw: &str, port: &str| format!("testbed=\"{tb}\",switch=\"{}\",port=\"{}\"", esc(sw), esc(port));
    let ports: Vec<(&str, &crate::telemetry::stats::PortStats)> =
        r.switches.iter().flat_map(|s| s.ports.iter().map(move |p| (s.switch.as_str(), p))).collect();
    let per_port = |f: fn(&crate::telemetry::stats::PortStats) -> u64| -> Vec<(String, f64)> {
        ports.iter().map(|(sw, p)| (port_labels(sw, &p.port), f(p) as f64)).collect()
    };
    family("port_rx_packets_total", "counter", "Frames received on a switch port.", per_port(|p| p.rx_packets));
    family("port_rx_bytes_total", "counter", "Bytes received on a switch port.", per_port(|p| p.rx_bytes));
    family("port_tx_packets_total", "counter", "Frames forwarded out of a switch port.", per_port(|p| p.tx_packets));
    family("port_tx_bytes_total", "counter", "Bytes forwarded out of a switch port.", per_port(|p| p.tx_bytes));
    family(
        "port_rx_pfc_frames_total",
        "counter",
        "PFC frames received (consumed) on a port.",
        per_port(|p| p.rx_pfc_frames),
    );
    family(
        "port_drops_total",
        "counter",
        "Frames dropped on ingress, by reason.",
        ports
            .iter()
            .flat_map(|(sw, p)| {
                p.drops
                    .iter()
                    .map(move |(reason, n)| (format!("{},reason=\"{reason}\"", port_labels(sw, &p.port)), *n as f64))
            })
            .collect(),
    );
    let classes: Vec<(String, &crate::telemetry::stats::ClassStats)> = ports
        .iter()
        .flat_map(|(sw, p)| {
            p.classes.iter().map(move |c| (format!("{},class=\"{}\"", port_labels(sw, &p.port), c.class), c))
        })
        .collect();
    let per_class = |f: fn(&crate::telemetry::stats::ClassStats) -> f64| -> Vec<(String, f64)> {
        classes.iter().map(|(l, c)| (l.clone(), f(c))).collect()
    };
    family(
        "queue_packets_total",
        "counter",
        "Packets through a modelled egress queue.",
        per_class(|c| c.queued_packets as f64),
    );
    family("queue_ecn_marked_total", "counter", "Packets marked CE by a queue.", per_class(|c| c.ecn_marked as f64));
    family(
        "queue_overflow_drops_total",
        "counter",
        "Lossy packets dropped on a full queue.",
        per_class(|c| c.overflow_drops as f64),
    );
    family("queue_depth_bytes", "gauge", "Modelled egress queue depth now.", per_class(|c| c.depth_bytes as f64));
    family(
        "queue_max_depth_bytes",
        "gauge",
        "Deepest the modelled queue has been.",
        per_class(|c| c.max_depth_bytes as f64),
    );
    family(
        "queue_pauses_received_total",
        "counter",
        "PFC frames that paused this egress class.",
        per_class(|c| c.pauses_received as f64),
    );
    family(
        "queue_paused_seconds_total",
        "counter",
        "Wall time this egress class was paused.",
        per_class(|c| c.paused_ns as f64 / 1e9),
    );
    family(
        "queue_sent_while_paused_total",
        "counter",
        "Packets forwarded into a paused class (model error).",
        per_class(|c| c.sent_while_paused as f64),
    );
    family(
        "ingress_xoff_events_total",
        "counter",
        "Times an ingress class crossed Xoff.",
        per_class(|c| c.xoff_events as f64),
    );
    let mut pfc = Vec::new();
    for a in &r.agents {
        for p in &a.pfc {
            let l = format!("{},class=\"{}\"", port_labels(&a.node, &p.ifname), p.class);
            pfc.push((format!("{l},kind=\"xoff\""), p.xoff_sent as f64));
            pfc.push((format!("{l},kind=\"refresh\""), p.refresh_sent as f64));
            pfc.push((format!("{l},kind=\"xon\""), p.xon_sent as f64));
        }
    }
    family("pfc_frames_sent_total", "counter", "PFC frames a switch agent sent, by kind.", pfc);
    family(
        "pfc_watchdog_storms_total",
        "counter",
        "PFC watchdog events per switch.",
        r.agents
            .iter()
            .map(|a| (format!("testbed=\"{tb}\",switch=\"{}\"", esc(&a.node)), a.storms.len() as f64))
            .collect(),
    );
    family(
        "uplink_max_over_mean",
        "gauge",
        "Busiest RTSW uplink over the mean (bytes since up).",
        r.uplinks.iter().map(|u| (format!("testbed=\"{tb}\",switch=\"{}\"", esc(&u.rtsw)), u.max_over_mean)).collect(),
    );
    family(
        "time_scale",
        "gauge",
        "Modelled time = wall time / this.",
        vec![(format!("testbed=\"{tb}\""), r.time_scale as f64)],
    );
    out
}

/// `fabric exporter --listen ADDR`: serves `/metrics` until killed. Only loopback addresses: the
/// testbed's counters are not for the network at large.
pub fn serve(state: &State, listen: SocketAddr, max_requests: Option<u64>) -> Result<()> {
    if !is_loopback(listen.ip()) {
        bail!("refusing to listen on {listen}: the exporter serves loopback addresses only (127.0.0.1 or ::1)");
    }
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    eprintln!("serving http://{}/metrics", listener.local_addr()?);
    for (served, conn) in (1..).zip(listener.incoming()) {
        let mut conn = conn?;
        let mut line = String::new();
        BufReader::new(&conn).read_line(&mut line)?;
        let (status, body) = if line.starts_with("GET /metrics ") || line.starts_with("GET / ") {
            ("200 OK", render(&crate::telemetry::stats::collect(state)?))
        } else {
            ("404 Not Found", "only /metrics\n".to_string())
        };
        write!(
            conn,
            "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        if max_requests.is_some_and(|m| served >= m) {
            return Ok(());
        }
    }
    Ok(())
}

fn is_loopback(ip: IpAddr) -> bool {
    ip.is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::stats::{ClassStats, CongestionTotals, PortStats, StatsReport, SwitchStats};

    #[test]
    fn renders_the_text_format() {
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
        };
        p.classes.push(ClassStats { class: 3, ecn_marked: 7, paused_ns: 2_000_000_000, ..Default::default() });
        let r = StatsReport {
            testbed: "fab".into(),
            time_scale: 4000,
            switches: vec![SwitchStats { switch: "z0r0".into(), role: crate::model::plan::Role::Rtsw, ports: vec![p] }],
            uplinks: Vec::new(),
            congestion: CongestionTotals::default(),
            agents: Vec::new(),
        };
        let text = render(&r);
        assert!(text.contains("# TYPE fabric_port_tx_bytes_total counter"));
        assert!(text.contains("fabric_port_tx_bytes_total{testbed=\"fab\",switch=\"z0r0\",port=\"z0c1\"} 200"));
        assert!(
            text.contains(
                "fabric_port_drops_total{testbed=\"fab\",switch=\"z0r0\",port=\"z0c1\",reason=\"no_route\"} 4"
            )
        );
        assert!(
            text.contains("fabric_queue_ecn_marked_total{testbed=\"fab\",switch=\"z0r0\",port=\"z0c1\",class=\"3\"} 7")
        );
        assert!(text.contains(
            "fabric_queue_paused_seconds_total{testbed=\"fab\",switch=\"z0r0\",port=\"z0c1\",class=\"3\"} 2"
        ));
        assert!(text.contains("fabric_time_scale{testbed=\"fab\"} 4000"));
        // Every sample line is `name{labels} value`.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (head, v) = l.rsplit_once(' ').unwrap();
            assert!(head.ends_with('}') && v.parse::<f64>().is_ok(), "{l}");
        }
        assert!(!is_loopback("198.18.0.1".parse().unwrap()) && is_loopback("::1".parse().unwrap()));
    }
}
