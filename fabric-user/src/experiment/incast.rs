//! `incast`: a 4-to-1 incast under PFC only, DCQCN and receiver-driven admission (CTS).
use anyhow::Result;

use super::case::find as case;
use super::twin::TwinModel;
use super::{
    harness::{
        Better, Case, Ctx, DepthSnapshot, Metric, Outcome, Scenario, base_options, completion_ms, log2_bucket_top,
        switch_drops,
    },
    verdict::{Comparison, Verdict, per_seed},
};
use crate::run::RunResult;
use crate::sim::{SimOptions, SimResult};
use crate::{endpoint::CcMode, model::placement::Placement, model::workload::Collective, run::RunOptions};

pub const SCENARIO: Scenario = Scenario {
    name: "incast",
    summary: "A 4-to-1 incast (one sender in the receiver's rack, three behind the spines) under PFC only, \
              DCQCN with the DCQCN paper's settings and tuned, and receiver-driven admission (CTS) sized under \
              and over the switch's Xoff: completion, pauses, ECN marks, losses, the queue toward the receiver.",
    paper: "Meta tried DCQCN at 200G and pivoted away from it: at 400G they ran without DCQCN, PFC only, for over \
            a year without persistent congestion (tuning ECN thresholds and DCQCN had bought about 3% in \
            completion while PFC got 2-3x worse). The collective library's receiver-driven admission (a sender \
            writes only after the receiver's clear-to-send, in flight bounded by channels x buffer) keeps \
            incasts from building queues, so the fabric rarely needs to pause.",
    run,
};

pub const RECEIVER: &str = "z0r0h0";
pub const HOSTS: [&str; 5] = [RECEIVER, "z0r0h1", "z0r1h0", "z0r2h0", "z0r3h0"];
/// The receiver's rack switch; its port toward the receiver is named after the receiver.
const RECEIVER_RTSW: &str = "z0r0";

/// CTS sized under the RTSW's Xoff (512 KiB): 4 channels x 64 KiB = 256 KiB in flight.
const CTS_UNDER_XOFF: (u32, u64) = (4, 64 * 1024);
/// CTS sized as a collective library does (NCCL: a few channels of MiB-sized buffers), over
/// Xoff: 4 channels x 512 KiB = 2 MiB in flight.
const CTS_OVER_XOFF: (u32, u64) = (4, 512 * 1024);

/// The incast of `tests/congestion.rs`: four senders into z0r0h0 (CTS under Xoff).
pub fn incast(cc: CcMode, message_bytes: u64) -> RunOptions {
    let mut o = base_options(Collective::Incast, HOSTS.len(), message_bytes);
    o.placement = Placement::Explicit { hosts: HOSTS.map(String::from).to_vec() };
    o.endpoint.cc = cc;
    (o.endpoint.cts_channels, o.endpoint.cts_buffer_bytes) = CTS_UNDER_XOFF;
    o
}

/// One case: key, label, congestion control, CTS sizing, DCQCN's CNP interval (modelled ns).
type Mode = (&'static str, &'static str, CcMode, (u32, u64), Option<u64>);

const MODES: [Mode; 5] = [
    ("pfc-only", "PFC only", CcMode::None, CTS_UNDER_XOFF, None),
    // The DCQCN paper's parameters (fabric_roce::dcqcn::DcqcnParams::default), with the switches'
    // ECN thresholds left as they are: settings carried over, not tuned for this fabric.
    ("dcqcn", "DCQCN, paper's settings", CcMode::Dcqcn, CTS_UNDER_XOFF, None),
    // One CNP per QP every 4 us (mlx5's default) instead of the paper's 50 us.
    ("dcqcn-tuned", "DCQCN, CNP every 4 µs", CcMode::Dcqcn, CTS_UNDER_XOFF, Some(4_000)),
    ("cts", "CTS 4 x 64 KiB (under Xoff)", CcMode::Cts, CTS_UNDER_XOFF, None),
    ("cts-over-xoff", "CTS 4 x 512 KiB (over Xoff)", CcMode::Cts, CTS_OVER_XOFF, None),
];

fn options(mode: &Mode, message: u64, time_scale: u64) -> RunOptions {
    let &(_, _, cc, cts, cnp) = mode;
    let mut o = incast(cc, message);
    // Tuned DCQCN crawls back from its cuts (about 20 s wall at the shipped 4000): the step's
    // wall-clock limit grows with a slower fabric.
    o.endpoint.step_timeout_ns = o.endpoint.step_timeout_ns.saturating_mul(time_scale.div_ceil(4000).max(1));
    (o.endpoint.cts_channels, o.endpoint.cts_buffer_bytes) = cts;
    if let Some(ns) = cnp {
        o.endpoint.dcqcn.cnp_interval_ns = ns;
    }
    o
}

fn run(ctx: &Ctx) -> Result<Outcome> {
    if let Some(model) = ctx.twin {
        return run_twin(ctx, model);
    }
    let message: u64 = ctx.pick(2 << 20, 8 << 20);
    let mut cases: Vec<Case> = MODES.iter().map(|m| Case::new(m.0, m.1)).collect();
    let mut topo = super::harness::shipped_topology(None)?;
    topo.time_scale = ctx.congestion_time_scale();
    let scale = topo.time_scale;
    ctx.with_testbed(topo, |state| {
        for &seed in &ctx.seeds {
            for (i, mode) in MODES.iter().enumerate() {
                let o = options(mode, message, scale);
                let depth_before = DepthSnapshot::read(state);
                let drops_before = switch_drops(state)?;
                let r = ctx.run(state, &format!("{} seed {seed}", mode.0), &o)?;
                let depth = DepthSnapshot::read(state);
                let drops = switch_drops(state)? - drops_before;
                push_metrics(&mut cases[i], &r, &o, depth.max_since(&depth_before), drops);
                let downlink = depth.max_since_on(&depth_before, RECEIVER_RTSW, RECEIVER);
                cases[i].push("downlink_queue_kib", downlink as f64 / 1024.0);
            }
        }
        Ok(())
    })?;
    let verdicts = verdicts(&cases, TESTBED_QUEUE);
    Ok(Outcome {
        setup: vec![
            format!(
                "Default testbed (4 racks x 2 hosts, 4 CTSWs), 400 Gbit/s links, time scale {scale} ({} Mbit/s wall; \
                 `--time-scale` sets it: at the topology's 4000 a small machine's endpoints wake late during a \
                 line-rate incast, and the runs count as CPU-bound).",
                400_000 / scale
            ),
            format!(
                "Incast: {} each send {} MiB to {RECEIVER} at once, at the host link's rate, 1 QP each, \
                 DSCP 26 (lossless class 3), ECN-capable.",
                HOSTS[1..].join(", "),
                message >> 20
            ),
            "DCQCN twice: with the DCQCN paper's parameters as the code's defaults (fabric_roce::dcqcn, each \
             cited there: notification point at most one CNP per QP per 50 µs, α gain g = 1/256, 55 µs timers) \
             and the switches' ECN thresholds unchanged (Kmin 100 KiB, Kmax 400 KiB): settings carried over \
             rather than tuned; and tuned, with one CNP per QP every 4 µs (mlx5's default). At 400 Gbit/s an \
             incast fills Xoff in about 10 µs, so a notification point allowed to speak once per 50 µs cannot \
             act before PFC does."
                .into(),
            format!(
                "CTS twice: {} channels x {} KiB = {} KiB in flight per receiver, under the RTSW's Xoff (512 KiB), \
                 and {} x {} KiB = {} KiB, over it (a collective library's channels carry MiB-sized buffers).",
                CTS_UNDER_XOFF.0,
                CTS_UNDER_XOFF.1 >> 10,
                (u64::from(CTS_UNDER_XOFF.0) * CTS_UNDER_XOFF.1) >> 10,
                CTS_OVER_XOFF.0,
                CTS_OVER_XOFF.1 >> 10,
                (u64::from(CTS_OVER_XOFF.0) * CTS_OVER_XOFF.1) >> 10
            ),
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
            Metric::new("lossless_lost", "switch drops + headroom overruns", "packets", Better::Lower, false),
            Metric::new(
                "downlink_queue_kib",
                "deepest sampled queue toward the receiver (log2 bucket top)",
                "KiB",
                Better::Lower,
                true,
            ),
            Metric::new(
                "max_queue_kib",
                "deepest sampled queue (upper end of its log2 bucket)",
                "KiB",
                Better::Lower,
                true,
            ),
            Metric::new("cnps", "CNPs received by senders", "", Better::None, false),
            Metric::new("retransmitted", "retransmitted packets", "", Better::Lower, false),
            Metric::new("socket_drops", "host socket drops", "datagrams", Better::Lower, false),
            Metric::new("timeouts", "retransmission timeouts", "", Better::Lower, false),
        ],
        cases,
        verdicts,
        notes: vec![],
        tables: vec![],
    })
}

/// The incast's senders on the twin: the testbed's 4 (its fabric), 16 at `--scale`.
fn twin_ranks(model: TwinModel) -> usize {
    if model.scale.is_some() { 17 } else { HOSTS.len() }
}

/// The same cases on the twin. Placement `fragmented` puts rank 0 (the receiver) on the first
/// rack and each sender on a rack of its own (on the testbed's fabric: exactly [`HOSTS`]).
fn run_twin(ctx: &Ctx, model: TwinModel) -> Result<Outcome> {
    let fabric = model.fabric(crate::model::topology::Topology::default_topology(), |_| {});
    let message: u64 = ctx.pick(2 << 20, 8 << 20);
    let ranks = twin_ranks(model);
    let runs: Vec<(usize, SimOptions)> = MODES
        .iter()
        .enumerate()
        .map(|(i, mode)| (i, twin_options(Collective::Incast, ranks, message, options(mode, message, 1).endpoint)))
        .collect();
    let mut cases: Vec<Case> = MODES.iter().map(|m| Case::new(m.0, m.1)).collect();
    super::twin::run_cases_with(ctx, &fabric, &runs, &mut cases, |c, r, o, _| push_twin_metrics(c, r, o))?;
    let verdicts = verdicts(&cases, TWIN_QUEUE);
    Ok(Outcome {
        setup: vec![
            format!(
                "Incast: {} senders, each on a rack of its own, send {} MiB each to one receiver at once (placement \
                 `fragmented`), 1 QP each, DSCP 26 (lossless class 3), ECN-capable; links as the topology states them \
                 (400 Gbit/s), 1 µs each.",
                ranks - 1,
                message >> 20
            ),
            "DCQCN and CTS settings as in the testbed variant (DCQCN paper's parameters and a CNP every 4 µs; CTS 4 x \
             64 KiB and 4 x 512 KiB)."
                .into(),
            "On the twin: completion is modelled time; PFC frames count every frame the switches sent (XOFF, refresh \
             and resume); the deepest queue is exact (the deepest any switch port held), and under CTS every byte \
             queued toward the receiver is within its grants, so the bound holds for every queue."
                .into(),
            "Nothing in the incast is random: seeds repeat the measurement.".into(),
        ],
        metrics: vec![
            Metric::new("completion_ms", "incast completion", "ms modelled", Better::Lower, true),
            Metric::new("pfc_frames", "PFC frames sent by switches", "", Better::Lower, true),
            Metric::new("paused_ms", "paused time of switch ports", "ms, summed", Better::Lower, false),
            Metric::new("host_paused_ms", "paused time of hosts", "ms, summed", Better::Lower, false),
            Metric::new("ecn_marked", "ECN marks", "packets", Better::Lower, true),
            Metric::new("lossless_lost", "switch drops + headroom overruns", "packets", Better::Lower, false),
            Metric::new("downlink_queue_kib", "deepest queue of any switch port", "KiB", Better::Lower, true),
            Metric::new("cnps", "CNPs received by senders", "", Better::None, false),
            Metric::new("retransmitted", "retransmitted packets", "", Better::Lower, false),
            Metric::new("timeouts", "retransmission timeouts", "", Better::Lower, false),
        ],
        cases,
        verdicts,
        notes: vec![],
        tables: vec![],
    })
}

/// A case on the twin: `collective` over `ranks` fragmented hosts with the endpoints `endpoint`.
pub fn twin_options(
    collective: Collective,
    ranks: usize,
    message_bytes: u64,
    endpoint: crate::endpoint::EndpointOptions,
) -> SimOptions {
    SimOptions {
        collective,
        ranks: Some(ranks),
        message_bytes,
        placement: Placement::Fragmented,
        seed: 1,
        hash: fabric_common::config::HashMode::Eecmp,
        hash_seed: None,
        endpoint,
    }
}

/// The testbed's metrics from a twin result. The twin has no host sockets: a NAK there means a
/// packet lost in the network or overtaken, and none is explained by a socket drop.
fn push_twin_metrics(c: &mut Case, r: &SimResult, o: &SimOptions) {
    let Some(p) = r.packet.as_ref() else { return };
    let switches = || p.tiers.iter().filter(|t| t.tier != "host");
    c.push("ecn_marked", p.ecn_marks as f64);
    c.push("lossless_lost", switches().map(|t| t.drops + t.over_headroom).sum::<u64>() as f64);
    let deepest = p.tiers.iter().find(|t| t.tier == "rtsw").map_or(f64::NAN, |t| t.max_depth_bytes as f64);
    c.push("downlink_queue_kib", deepest / 1024.0);
    c.push("cnps", p.cnps as f64);
    c.push("retransmitted", p.retransmissions as f64);
    c.push("timeouts", p.timeouts as f64);
    c.push("socket_drops", 0.0);
    c.push("unexplained_naks", p.naks as f64);
    let explained = u64::from(o.endpoint.window) * (p.naks + p.timeouts);
    c.push("unexplained_resends", p.retransmissions.saturating_sub(explained) as f64);
    c.push("delivered", f64::from(u8::from(p.finished)));
    c.push("cts_bound_kib", (o.endpoint.cts_channels as u64 * o.endpoint.cts_buffer_bytes) as f64 / 1024.0);
}

fn push_metrics(c: &mut Case, r: &RunResult, o: &RunOptions, max_queue: u64, drops: u64) {
    let g = &r.congestion;
    c.push("completion_ms", completion_ms(r));
    c.push("pfc_frames", (g.pfc_xoff_sent + g.pfc_refresh_sent) as f64);
    c.push("paused_ms", g.paused_ns as f64 / 1e6);
    c.push("host_paused_ms", r.hosts.iter().map(|h| h.paused_ns).sum::<u64>() as f64 / 1e6);
    c.push("ecn_marked", g.ecn_marked as f64);
    // Every switch drop (the incast is all lossless class) plus what a real switch would have
    // dropped: lossless packets beyond limit + headroom.
    c.push("lossless_lost", (drops + g.over_headroom) as f64);
    c.push("max_queue_kib", max_queue as f64 / 1024.0);
    c.push("cnps", r.flows.iter().map(|f| f.cnps_received).sum::<u64>() as f64);
    let sum = |f: fn(&crate::endpoint::engine::FlowResult) -> u64| r.flows.iter().map(f).sum::<u64>();
    let (retransmitted, naks, timeouts) = (sum(|f| f.retransmitted), sum(|f| f.naks), sum(|f| f.timeouts));
    let socket_drops = r.hosts.iter().map(|h| h.udp_receive_drops).sum::<u64>();
    c.push("retransmitted", retransmitted as f64);
    c.push("socket_drops", socket_drops as f64);
    c.push("timeouts", timeouts as f64);
    // A NAK says a packet went missing; with no switch drop only a host socket can have lost it,
    // one NAK per lost packet at most.
    c.push("unexplained_naks", naks.saturating_sub(socket_drops) as f64);
    // Go-back-N resends at most a window per NAK or timeout (a timeout without loss is the
    // sender's timer firing before a coalesced ACK came back).
    let explained = u64::from(o.endpoint.window) * (naks + timeouts);
    c.push("unexplained_resends", retransmitted.saturating_sub(explained) as f64);
    c.push("delivered", (r.bytes_delivered == r.bytes_needed) as u8 as f64);
    c.push("cts_bound_kib", (o.endpoint.cts_channels as u64 * o.endpoint.cts_buffer_bytes) as f64 / 1024.0);
    c.push_run(r);
}

fn fewer(key: &'static str, claim: &str, metric: &str, (a, b): (&str, &str), margin: f64, cases: &[Case]) -> Verdict {
    Comparison { key, claim, metric, unit: "", cases: (a, b), better: Better::Lower, margin_pct: margin }.judge(cases)
}

/// Where and how finely `downlink_queue_kib` was read, for the CTS bound.
#[derive(Clone, Copy)]
struct QueueReading {
    what: &'static str,
    /// Exact bytes (the twin); else the top of the agents' log2 depth bucket (the testbed).
    exact: bool,
}

/// Where the testbed reads the queue the CTS bound is checked in.
const TESTBED_QUEUE: QueueReading =
    QueueReading { what: "deepest sampled queue z0r0->z0r0h0 (log2 bucket tops)", exact: false };

/// Where the twin reads it: every RTSW port, exactly; the receiver's is the incast's deepest
/// (every other RTSW port carries one sender's flow).
const TWIN_QUEUE: QueueReading = QueueReading { what: "deepest RTSW port queue (exact)", exact: true };

/// The verdicts, `queue` saying where and how `downlink_queue_kib` was read.
fn verdicts(cases: &[Case], queue: QueueReading) -> Vec<Verdict> {
    vec![
        fewer(
            "cts-pauses-less",
            "Receiver-driven admission (CTS, in flight under Xoff) needs far fewer pauses than PFC alone",
            "pfc_frames",
            ("cts", "pfc-only"),
            50.0,
            cases,
        )
        .headline(),
        fewer(
            "cts-over-xoff-pauses",
            "CTS avoids pauses only when channels x buffer fits under the switch's Xoff: sized over it, it \
             pauses more than sized under it",
            "pfc_frames",
            ("cts", "cts-over-xoff"),
            50.0,
            cases,
        ),
        cts_bound(cases, queue),
        fewer(
            "dcqcn-paper-no-better",
            "At 400G, DCQCN with settings carried over (the paper's 50 µs CNP interval, untuned ECN thresholds) \
             does worse than PFC alone: PFC alone completes the incast faster",
            "completion_ms",
            ("pfc-only", "dcqcn"),
            5.0,
            cases,
        ),
        fewer(
            "dcqcn-tuned-pauses-less",
            "Tuned DCQCN (a CNP every 4 µs) pauses less than PFC alone",
            "pfc_frames",
            ("dcqcn-tuned", "pfc-only"),
            20.0,
            cases,
        ),
        fewer(
            "dcqcn-tuned-recovers-slowly",
            "(This testbed's finding, not the paper's) Tuning only the CNP interval trades pauses for rate: with the \
             40G-era increase steps (R_AI 40 Mbit/s every 55 µs) the cut senders recover so slowly that PFC alone \
             completes sooner",
            "completion_ms",
            ("pfc-only", "dcqcn-tuned"),
            5.0,
            cases,
        ),
        lossless(cases),
    ]
}

/// The deepest queue toward a receiver, as the agents sample it (the top of a log2 bucket), that
/// CTS with `bound_bytes` of payload in flight may show: the queue holds frames, headers and wire
/// overhead too (about 2% at 4 KiB).
pub fn cts_queue_limit_bytes(bound_bytes: u64) -> u64 {
    log2_bucket_top(cts_queue_exact_limit_bytes(bound_bytes))
}

/// The same limit for a queue read exactly: the payload bound and its frames' overhead.
fn cts_queue_exact_limit_bytes(bound_bytes: u64) -> u64 {
    bound_bytes + bound_bytes * 3 / 100
}

/// CTS bounds the bytes in flight toward the receiver: measured in the network, as the deepest
/// sampled queue of the receiver's RTSW port toward it, at the log2 resolution of the agents'
/// depth histograms; PFC alone must exceed the same bound, or the measure could not tell.
fn cts_bound(cases: &[Case], queue: QueueReading) -> Verdict {
    let cts = case(cases, "cts");
    let bound_kib = cts.values_of("cts_bound_kib").first().copied().unwrap_or(0.0);
    let bound = (bound_kib * 1024.0) as u64;
    let limit = if queue.exact { cts_queue_exact_limit_bytes(bound) } else { cts_queue_limit_bytes(bound) };
    let limit_kib = limit as f64 / 1024.0;
    let under = cts.values_of("downlink_queue_kib");
    let pfc = case(cases, "pfc-only").values_of("downlink_queue_kib");
    let holds = !under.is_empty() && under.iter().all(|&q| q <= limit_kib) && pfc.iter().all(|&q| q > limit_kib);
    Verdict::fact(
        "cts-bounds-in-flight",
        "CTS bounds what is in flight toward the receiver by channels x buffer (measured in the switch queue \
         toward the receiver, not in the receiver's grant bookkeeping)",
        format!(
            "{} per seed: CTS {} KiB, PFC only {} KiB; bound {bound_kib:.0} KiB, i.e. at most {limit_kib:.0} KiB{}",
            queue.what,
            per_seed(&under, ""),
            per_seed(&pfc, ""),
            if queue.exact { " with its frames' overhead" } else { " (its log2 bucket)" }
        ),
        holds,
    )
}

/// Lossless: no lossless packet dropped (or over headroom) anywhere, every byte delivered, every
/// NAK (a packet missing at a receiver) explained by a host socket drop, and every resend by a
/// NAK or a timeout (a window each).
fn lossless(cases: &[Case]) -> Verdict {
    let sum = |m: &str| cases.iter().map(|c| c.values_of(m).iter().sum::<f64>()).sum::<f64>();
    let delivered = cases.iter().all(|c| c.values_of("delivered").iter().all(|&x| x == 1.0));
    let (lost, naks, resends) = (sum("lossless_lost"), sum("unexplained_naks"), sum("unexplained_resends"));
    Verdict::fact(
        "lossless",
        "PFC keeps the lossless class lossless under every scheme",
        format!(
            "{lost:.0} lossless packets dropped or over headroom in the switches; {:.0} retransmitted after {:.0} \
             timeouts, {:.0} host socket drops, {naks:.0} NAKs and {resends:.0} resends unexplained by them; every \
             byte delivered: {delivered}",
            sum("retransmitted"),
            sum("timeouts"),
            sum("socket_drops")
        ),
        lost == 0.0 && naks == 0.0 && resends == 0.0 && delivered,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{case::testing::assert_each_can_fail, verdict::Decision};

    fn cases(cts_queue: [f64; 3], pfc_queue: [f64; 3], lost: [f64; 3], unexplained: [f64; 3]) -> Vec<Case> {
        let c = |k: &str, pfc: [f64; 3], queue: [f64; 3], ms: [f64; 3]| {
            Case::with(
                k,
                &[
                    ("pfc_frames", &pfc),
                    ("downlink_queue_kib", &queue),
                    ("completion_ms", &ms),
                    ("cts_bound_kib", &[256.0; 3]),
                    ("lossless_lost", &lost),
                    ("unexplained_resends", &unexplained),
                    ("unexplained_naks", &[0.0; 3]),
                    ("timeouts", &[0.0; 3]),
                    ("delivered", &[1.0; 3]),
                    ("retransmitted", &[0.0; 3]),
                    ("socket_drops", &[0.0; 3]),
                ],
            )
        };
        vec![
            c("pfc-only", [30.0, 35.0, 32.0], pfc_queue, [800.0, 810.0, 790.0]),
            c("dcqcn", [20.0, 22.0, 21.0], [4096.0; 3], [1200.0, 1210.0, 1190.0]),
            c("dcqcn-tuned", [0.0; 3], [1024.0; 3], [20000.0, 21000.0, 20500.0]),
            c("cts", [0.0, 1.0, 0.0], cts_queue, [760.0, 750.0, 770.0]),
            c("cts-over-xoff", [18.0, 19.0, 20.0], [2048.0; 3], [900.0, 910.0, 890.0]),
        ]
    }

    fn testbed_verdicts(cases: &[Case]) -> Vec<Verdict> {
        verdicts(cases, TESTBED_QUEUE)
    }

    /// On the twin the queue is exact: 300 KiB over a 256 KiB bound is over it, though the
    /// testbed's 512 KiB bucket would hold it.
    #[test]
    fn an_exact_queue_is_held_to_the_bound_itself() {
        let over = cases([300.0; 3], [2048.0; 3], [0.0; 3], [0.0; 3]);
        assert_eq!(decision(&verdicts(&over, TWIN_QUEUE), "cts-bounds-in-flight"), Decision::DoesNotMatch);
        assert_eq!(decision(&verdicts(&over, TESTBED_QUEUE), "cts-bounds-in-flight"), Decision::Matches);
        let under = cases([260.0; 3], [2048.0; 3], [0.0; 3], [0.0; 3]);
        assert_eq!(decision(&verdicts(&under, TWIN_QUEUE), "cts-bounds-in-flight"), Decision::Matches);
    }

    fn decision(v: &[Verdict], key: &str) -> Decision {
        v.iter().find(|v| v.key == key).unwrap().direction
    }

    #[test]
    fn the_cts_bound_is_read_in_the_queue_and_must_separate_cts_from_pfc_alone() {
        let ok = testbed_verdicts(&cases([256.0; 3], [2048.0; 3], [0.0; 3], [0.0; 3]));
        assert_eq!(decision(&ok, "cts-bounds-in-flight"), Decision::Matches);
        assert_eq!(decision(&ok, "cts-pauses-less"), Decision::Matches);
        assert_eq!(decision(&ok, "cts-over-xoff-pauses"), Decision::Matches);
        assert_eq!(decision(&ok, "dcqcn-paper-no-better"), Decision::Matches);
        assert_eq!(decision(&ok, "lossless"), Decision::Matches);
        // A queue past the bound's bucket, or a measure that cannot tell CTS from PFC alone.
        assert_eq!(
            decision(&testbed_verdicts(&cases([1024.0; 3], [2048.0; 3], [0.0; 3], [0.0; 3])), "cts-bounds-in-flight"),
            Decision::DoesNotMatch
        );
        assert_eq!(
            decision(&testbed_verdicts(&cases([256.0; 3], [256.0; 3], [0.0; 3], [0.0; 3])), "cts-bounds-in-flight"),
            Decision::DoesNotMatch
        );
    }

    #[test]
    fn the_comparisons_turn_with_their_cases() {
        assert_each_can_fail(
            &cases([256.0; 3], [2048.0; 3], [0.0; 3], [0.0; 3]),
            testbed_verdicts,
            &[
                ("cts-pauses-less", ("cts", "pfc-only"), "pfc_frames"),
                ("cts-over-xoff-pauses", ("cts", "cts-over-xoff"), "pfc_frames"),
                ("dcqcn-paper-no-better", ("pfc-only", "dcqcn"), "completion_ms"),
                ("dcqcn-tuned-pauses-less", ("dcqcn-tuned", "pfc-only"), "pfc_frames"),
                ("dcqcn-tuned-recovers-slowly", ("pfc-only", "dcqcn-tuned"), "completion_ms"),
            ],
        );
    }

    #[test]
    fn a_nak_no_socket_drop_explains_breaks_losslessness() {
        let mut c = cases([256.0; 3], [2048.0; 3], [0.0; 3], [0.0; 3]);
        c[2].values.insert("unexplained_naks".into(), vec![0.0, 1.0, 0.0]);
        assert_eq!(decision(&testbed_verdicts(&c), "lossless"), Decision::DoesNotMatch);
    }

    #[test]
    fn one_lost_lossless_packet_or_one_unexplained_resend_breaks_losslessness() {
        assert_eq!(
            decision(&testbed_verdicts(&cases([256.0; 3], [2048.0; 3], [0.0, 1.0, 0.0], [0.0; 3])), "lossless"),
            Decision::DoesNotMatch
        );
        assert_eq!(
            decision(&testbed_verdicts(&cases([256.0; 3], [2048.0; 3], [0.0; 3], [0.0, 0.0, 1.0])), "lossless"),
            Decision::DoesNotMatch
        );
    }
}
