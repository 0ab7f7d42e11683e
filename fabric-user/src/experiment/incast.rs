//! `incast`: a 4-to-1 incast under PFC only, DCQCN and receiver-driven admission (CTS).
use anyhow::Result;

use super::harness::{Better, Case, Ctx, Metric, Outcome, Scenario, Verdict, base_options, compare, completion_ms};
use crate::{endpoint::CcMode, model::placement::Placement, model::workload::Collective, run::RunOptions};

pub const SCENARIO: Scenario = Scenario {
    name: "incast",
    summary: "A 4-to-1 incast (one sender in the receiver's rack, three behind the spines) under PFC only, \
              DCQCN and receiver-driven admission (CTS): completion, pauses, ECN marks, drops, deepest queue.",
    paper: "DCQCN was used at 200G; at 400G, DCQCN with ECN thresholds carried over did worse, and Meta ran for \
            over a year with PFC only, without persistent congestion. The collective library's receiver-driven \
            admission (a sender writes only after the receiver's clear-to-send, in flight bounded by channels x \
            buffer) keeps incasts from building queues, so the fabric rarely needs to pause. DCQCN reacts to \
            ECN marks with rate cuts and so pauses less than PFC alone.",
    run,
};

pub const RECEIVER: &str = "z0r0h0";
pub const HOSTS: [&str; 5] = [RECEIVER, "z0r0h1", "z0r1h0", "z0r2h0", "z0r3h0"];

/// The incast of `tests/congestion.rs`: four senders into z0r0h0.
pub fn incast(cc: CcMode, message_bytes: u64) -> RunOptions {
    let mut o = base_options(Collective::Incast, HOSTS.len(), message_bytes);
    o.placement = Placement::Explicit { hosts: HOSTS.map(String::from).to_vec() };
    o.endpoint.cc = cc;
    o.endpoint.cts_channels = 4;
    o.endpoint.cts_buffer_bytes = 64 * 1024;
    if cc == CcMode::Dcqcn {
        o.endpoint.dcqcn.cnp_interval_ns = 4_000;
    }
    o
}

fn run(ctx: &Ctx) -> Result<Outcome> {
    let message: u64 = ctx.pick(2 << 20, 8 << 20);
    let modes =
        [("pfc-only", "PFC only", CcMode::None), ("dcqcn", "DCQCN", CcMode::Dcqcn), ("cts", "CTS", CcMode::Cts)];
    let mut cases: Vec<Case> = modes.iter().map(|m| Case::new(m.0, m.1)).collect();
    let mut cts_bound = 0;
    ctx.with_testbed(super::harness::shipped_topology(None)?, |state| {
        for &seed in &ctx.seeds {
            for (i, &(key, _, cc)) in modes.iter().enumerate() {
                let o = incast(cc, message);
                let depth_before = super::harness::DepthSnapshot::read(state);
                let r = ctx.run(state, &format!("{key} seed {seed}"), &o)?;
                let depth = super::harness::DepthSnapshot::read(state).max_since(&depth_before);
                let c = &mut cases[i];
                let g = &r.congestion;
                c.push("completion_ms", completion_ms(&r));
                c.push("pfc_frames", (g.pfc_xoff_sent + g.pfc_refresh_sent) as f64);
                c.push("paused_ms", g.paused_ns as f64 / 1e6);
                c.push("host_paused_ms", r.hosts.iter().map(|h| h.paused_ns).sum::<u64>() as f64 / 1e6);
                c.push("ecn_marked", g.ecn_marked as f64);
                c.push("drops", (g.overflow_drops + g.over_headroom) as f64);
                c.push("max_queue_kib", depth as f64 / 1024.0);
                c.push("cnps", r.flows.iter().map(|f| f.cnps_received).sum::<u64>() as f64);
                c.push("retransmitted", r.flows.iter().map(|f| f.retransmitted).sum::<u64>() as f64);
                c.push("delivered", (r.bytes_delivered == r.bytes_needed) as u8 as f64);
                let root = r.hosts.iter().find(|h| h.host == RECEIVER).map_or(0, |h| h.cts_max_in_flight_bytes);
                c.push("cts_max_in_flight_kib", root as f64 / 1024.0);
                if let Some(b) = r.cts_bound_bytes {
                    cts_bound = b;
                }
            }
        }
        Ok(())
    })?;
    let cts_ok = {
        let m = cases[2].values.get("cts_max_in_flight_kib").cloned().unwrap_or_default();
        let max = m.iter().copied().fold(0.0, f64::max);
        Verdict {
            claim: "CTS bounds what is in flight toward the receiver by channels x buffer".into(),
            measured: format!("most in flight {max:.0} KiB, bound {} KiB", cts_bound / 1024),
            matches: max > 0.0 && max <= cts_bound as f64 / 1024.0,
            headline: false,
        }
    };
    let drops: f64 = cases.iter().map(|c| c.values.get("drops").map_or(0.0, |v| v.iter().sum())).sum();
    let delivered = cases.iter().all(|c| c.values.get("delivered").is_some_and(|v| v.iter().all(|&x| x == 1.0)));
    let verdicts = vec![
        compare(
            "Receiver-driven admission (CTS) needs far fewer pauses than PFC alone",
            &cases,
            "pfc_frames",
            " frames",
            ("cts", "pfc-only"),
            true,
            true,
        ),
        compare(
            "DCQCN pauses less than PFC alone",
            &cases,
            "pfc_frames",
            " frames",
            ("dcqcn", "pfc-only"),
            true,
            false,
        ),
        compare(
            "CTS keeps the receiver's queue shallower than PFC alone",
            &cases,
            "max_queue_kib",
            " KiB",
            ("cts", "pfc-only"),
            true,
            false,
        ),
        cts_ok,
        Verdict {
            claim: "PFC keeps the lossless class lossless under every scheme".into(),
            measured: format!("{drops:.0} drops or headroom overruns; every byte delivered: {delivered}"),
            matches: drops == 0.0 && delivered,
            headline: false,
        },
    ];
    Ok(Outcome {
        setup: vec![
            "Default testbed (4 racks x 2 hosts, 4 CTSWs), 400 Gbit/s links, time scale 4000 (100 Mbit/s wall).".into(),
            format!(
                "Incast: {} each send {} MiB to {RECEIVER} at once, at the host link's rate, 1 QP each, \
                 DSCP 26 (lossless class 3), ECN-capable.",
                HOSTS[1..].join(", "),
                message >> 20
            ),
            "DCQCN with the paper's parameters except cnp_interval_ns = 4000 (one CNP per QP every 4 µs, \
             mlx5's default) instead of 50 µs: at 400 Gbit/s an incast fills Xoff in about 50 µs, so a \
             notification point allowed to speak once per 50 µs cannot act before PFC does (see \
             fabric-user/tests/congestion.rs)."
                .into(),
            "CTS: 4 channels x 64 KiB per receiver.".into(),
            "Deepest queue: from the switch agents' sampled depth histograms (log2 buckets) during each run; \
             the testbed's own maximum only ever grows, so it cannot tell runs apart."
                .into(),
            "Nothing in the incast is random: seeds repeat the measurement.".into(),
        ],
        metrics: vec![
            Metric::new("completion_ms", "incast completion", "ms wall", Better::Lower, true),
            Metric::new("pfc_frames", "PFC frames sent by switches (XOFF + refresh)", "", Better::Lower, true),
            Metric::new("paused_ms", "paused time of switch ports", "ms wall, summed", Better::Lower, false),
            Metric::new("host_paused_ms", "paused time of hosts", "ms wall, summed", Better::Lower, false),
            Metric::new("ecn_marked", "ECN marks", "packets", Better::Lower, true),
            Metric::new("drops", "drops + headroom overruns", "packets", Better::Lower, false),
            Metric::new(
                "max_queue_kib",
                "deepest sampled queue (upper end of its log2 bucket)",
                "KiB",
                Better::Lower,
                true,
            ),
            Metric::new("cnps", "CNPs received by senders", "", Better::None, false),
            Metric::new("retransmitted", "retransmitted packets", "", Better::Lower, false),
            Metric::new("cts_max_in_flight_kib", "CTS: most in flight toward the receiver", "KiB", Better::None, false),
        ],
        cases,
        verdicts,
        notes: vec![],
        tables: vec![],
    })
}
