//! `fabric-bench dataplane`: per-packet cost of the switch program with BPF_PROG_TEST_RUN,
//! against two references measured in the same run: (a) a bare XDP_PASS and (b) parse + a fixed
//! redirect. Figures are ratios; absolute nanoseconds are printed but depend on the machine.
use std::time::Duration;

use anyhow::{Result, bail};
use fabric_common::{
    config::HashMode,
    parse::{IpHeader, parse_packet},
};
use serde::Serialize;

use fabric_testkit::fixture::{
    FixtureSwitch, FrameSpec, XDP_PASS, XDP_REDIRECT, frame, in_private_netns, port_mac, xdp_action_name,
};
use fabric_user::dataplane::{PROGRAM_BENCH_PARSE_REDIRECT, PROGRAM_PASS, PROGRAM_SWITCH};

/// Runs per test_run call. The switch rewrites TTL in place and non-live test_run reuses one
/// buffer, so a call must stay well under the starting TTL (255) to measure the forwarding path.
const CHUNK: u32 = 200;
/// The most the switch may cost over parse + fixed redirect, without and with the congestion
/// model (every routing mode, both IP families).
const PLAIN_TARGET: f64 = 2.0;
const CONGESTION_TARGET: f64 = 1.5;

#[derive(Debug, Serialize)]
pub struct Row {
    pub program: String,
    pub family: &'static str,
    pub ns_per_packet: f64,
    pub vs_pass: f64,
    pub vs_parse_redirect: f64,
}

#[derive(Debug, Serialize)]
pub struct DataplaneReport {
    pub packets_per_case: u64,
    pub rounds: u32,
    pub frame_bytes: usize,
    pub rows: Vec<Row>,
    /// Largest full-pipeline / parse-redirect ratio; the target is <= 2.
    pub worst_vs_parse_redirect: f64,
    /// The same with the congestion model on; the target is <= 1.5.
    pub worst_with_congestion_vs_parse_redirect: f64,
    /// Largest (d) / (c) ratio for one mode and family: what the model adds.
    pub worst_congestion_over_plain: f64,
}

/// RoCE data as our endpoints send it: DSCP 26 (the lossless class) with ECT(0), so that the
/// congestion model's cases take its full path (queue, RED, ingress accounting).
fn bench_frame(ipv6: bool) -> Vec<u8> {
    let mut f = frame(&FrameSpec { ipv6, ttl: 255, dst_mac: port_mac(0), payload_len: 1024, ..Default::default() });
    fabric_testkit::fixture::set_tos(&mut f, 26 << 2 | 0b10);
    f
}

/// The default RTSW's congestion model, at real line rate (time scale 1): the queue drains
/// faster than test_run feeds it, so nothing is dropped or paused and every packet pays for
/// the model's common path.
fn bench_qos(enabled: bool) -> fabric_common::qos::QosConfig {
    let c = fabric_user::model::topology::Congestion::default();
    let mut q = c.qos_config(&c.rtsw);
    q.enabled = enabled as u32;
    q
}

/// Mean ns/packet of `packets` runs of `c.program` on `c.frame`. Every call's runs are checked
/// to have taken the path the case times (see [`Case::check`]), and the congestion model to
/// have queued every run of a case with the model and none of one without.
fn measure_once(sw: &mut FixtureSwitch, c: &Case, packets: u64) -> Result<f64> {
    let mut total = Duration::ZERO;
    let calls = packets.div_ceil(CHUNK as u64);
    let queued_before = modelled_packets(sw)?;
    for _ in 0..calls {
        // Fresh copy each call: the TTL starts from 255 again.
        let timed = sw.time(c.program, 0, &c.frame, CHUNK)?;
        c.check(timed.action, &timed.frame, CHUNK)?;
        total += timed.per_run * CHUNK;
    }
    let runs = calls * CHUNK as u64;
    let queued = modelled_packets(sw)? - queued_before;
    let want = if c.qos { runs } else { 0 };
    if queued != want {
        bail!(
            "{} ({}): the congestion model queued {queued} of {runs} runs, where {want} should have been: its \
             time would not be the path it names",
            c.label,
            c.family
        );
    }
    Ok(total.as_nanos() as f64 / runs as f64)
}

/// Packets the congestion model has queued on any port of the fixture, every class.
fn modelled_packets(sw: &mut FixtureSwitch) -> Result<u64> {
    let mut n = 0;
    for port in 0..=fabric_testkit::fixture::UPLINKS {
        n += sw.dp.port_class_counters(port)?.iter().map(|c| c.packets).sum::<u64>();
    }
    Ok(n)
}

/// What each run of a case must do for its time to mean what its label says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// XDP_PASS, the frame untouched.
    Pass,
    /// XDP_REDIRECT, the frame untouched (parse + fixed redirect).
    Redirect,
    /// XDP_REDIRECT after the switch's rewrite, on every run: the TTL fell by one per run.
    Forward,
}

/// How many runs decremented the frame's TTL (IPv4) or hop limit (IPv6) from `before` to
/// `after`; `None` if either is no IP frame or the TTL grew.
fn ttl_decrements(before: &[u8], after: &[u8]) -> Option<u32> {
    let ttl = |f: &[u8]| match parse_packet(f).ok()?.ip {
        IpHeader::V4 { ttl, .. } => Some(ttl),
        IpHeader::V6 { hop_limit, .. } => Some(hop_limit),
    };
    ttl(before)?.checked_sub(ttl(after)?).map(u32::from)
}

/// Whether `runs` runs that returned `action` (the last one's) and left `after` of `before`
/// took `path`, or what they did instead.
fn check_path(path: Path, before: &[u8], action: u32, after: &[u8], runs: u32) -> Result<()> {
    let (want_action, want_decrements) = match path {
        Path::Pass => (XDP_PASS, 0),
        Path::Redirect => (XDP_REDIRECT, 0),
        Path::Forward => (XDP_REDIRECT, runs),
    };
    if action != want_action {
        bail!("the last of {runs} runs returned {}, not {}", xdp_action_name(action), xdp_action_name(want_action));
    }
    match ttl_decrements(before, after) {
        Some(n) if n == want_decrements => Ok(()),
        Some(n) => bail!("{n} of {runs} runs decremented the TTL, where {want_decrements} should have"),
        None => bail!("the frame the runs left is no IP frame with a TTL at most the one sent"),
    }
}

/// One benchmark case: a program, a hash mode to configure first, a frame.
struct Case {
    label: String,
    program: &'static str,
    mode: HashMode,
    /// With the congestion model on.
    qos: bool,
    family: &'static str,
    frame: Vec<u8>,
    /// What every run must do.
    path: Path,
}

impl Case {
    /// A benchmark that timed another path than its label's (an early exit of the switch, say)
    /// would report a figure for code it never ran: each call is checked, and the run stops.
    fn check(&self, action: u32, after: &[u8], runs: u32) -> Result<()> {
        check_path(self.path, &self.frame, action, after, runs).map_err(|e| {
            anyhow::anyhow!("{} ({}): {e}: its time would not be the path it names", self.label, self.family)
        })
    }
}

pub fn dataplane(packets: u64, rounds: u32, modes: &[HashMode]) -> Result<DataplaneReport> {
    // A private namespace for the fixture's veths; it vanishes with the thread.
    in_private_netns(|| {
        let frames = [("ipv4", bench_frame(false)), ("ipv6", bench_frame(true))];
        let mut cases = vec![Case {
            label: "(a) XDP_PASS".into(),
            program: PROGRAM_PASS,
            mode: HashMode::FiveTuple,
            qos: false,
            family: "ipv4",
            frame: frames[0].1.clone(),
            path: Path::Pass,
        }];
        for (family, f) in &frames {
            cases.push(Case {
                label: "(b) parse + fixed redirect".into(),
                program: PROGRAM_BENCH_PARSE_REDIRECT,
                mode: HashMode::FiveTuple,
                qos: false,
                family,
                frame: f.clone(),
                path: Path::Redirect,
            });
        }
        for qos in [false, true] {
            for &mode in modes {
                for (family, f) in &frames {
                    cases.push(Case {
                        label: if qos {
                            format!("(d) switch + congestion, {}", mode.as_str())
                        } else {
                            format!("(c) switch, {}", mode.as_str())
                        },
                        program: PROGRAM_SWITCH,
                        mode,
                        qos,
                        family,
                        frame: f.clone(),
                        path: Path::Forward,
                    });
                }
            }
        }
        // Rounds outermost, so that the machine's slow phases hit every case alike.
        let mut sw = FixtureSwitch::new(HashMode::FiveTuple, 0x5eed)?;
        // Every repeated run on the one buffer must find the frame still addressed to the switch.
        sw.hairpin_next_hops()?;
        for p in 0..=fabric_testkit::fixture::UPLINKS {
            sw.dp.set_port_rate(p, 400_000_000_000)?;
        }
        // `wcmp` weighs the uplinks by those rates.
        sw.dp.refresh_wcmp()?;
        let mut samples = vec![Vec::new(); cases.len()];
        for _ in 0..rounds {
            for (i, c) in cases.iter().enumerate() {
                sw.set_mode(c.mode, 0x5eed)?;
                sw.dp.set_qos(bench_qos(c.qos))?;
                samples[i].push(measure_once(&mut sw, c, packets)?);
            }
        }
        let ns: Vec<f64> = samples.iter_mut().map(|v| crate::stats::median(v)).collect();
        let pass = ns[0];
        let baseline = |family: &str| if family == "ipv4" { ns[1] } else { ns[2] };
        let rows: Vec<Row> = cases
            .iter()
            .zip(&ns)
            .map(|(c, &v)| Row {
                program: c.label.clone(),
                family: c.family,
                ns_per_packet: v,
                vs_pass: v / pass,
                vs_parse_redirect: v / baseline(c.family),
            })
            .collect();
        let worst = |prefix: &str| {
            rows.iter().filter(|r| r.program.starts_with(prefix)).map(|r| r.vs_parse_redirect).fold(0.0, worse)
        };
        let (worst_c, worst_d) = (worst("(c)"), worst("(d)"));
        // The model's own cost: (d) over (c) for the same mode and family.
        let model_cost = rows
            .iter()
            .filter(|r| r.program.starts_with("(d)"))
            .filter_map(|d| {
                let mode = d.program.rsplit(", ").next()?;
                let c = rows.iter().find(|c| c.program == format!("(c) switch, {mode}") && c.family == d.family)?;
                Some(d.ns_per_packet / c.ns_per_packet)
            })
            .fold(0.0, worse);
        Ok(DataplaneReport {
            packets_per_case: packets,
            rounds,
            frame_bytes: frames[0].1.len(),
            rows,
            worst_vs_parse_redirect: worst_c,
            worst_with_congestion_vs_parse_redirect: worst_d,
            worst_congestion_over_plain: model_cost,
        })
    })
}

/// The worse of two ratios, NaN (a case not measured) the worst of all: `f64::max` would drop
/// it, and a target would then be met by what was never measured.
fn worse(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}

pub fn print_dataplane(r: &DataplaneReport) {
    println!(
        "dataplane: BPF_PROG_TEST_RUN, {} packets x {} rounds (median), {}-byte IPv4 frame",
        r.packets_per_case, r.rounds, r.frame_bytes
    );
    println!("{:<44} {:<6} {:>10} {:>9} {:>14}", "program", "family", "ns/packet", "vs (a)", "vs (b) same IP");
    for row in &r.rows {
        println!(
            "{:<44} {:<6} {:>10.1} {:>8.2}x {:>13.2}x",
            row.program, row.family, row.ns_per_packet, row.vs_pass, row.vs_parse_redirect
        );
    }
    let verdict = |x: f64, target: f64| if x <= target { "meets" } else { "MISSES" };
    println!(
        "full pipeline vs parse + fixed redirect: worst {:.2}x ({} the {PLAIN_TARGET}x target); with the congestion \
         model {:.2}x ({} the {CONGESTION_TARGET}x target)",
        r.worst_vs_parse_redirect,
        verdict(r.worst_vs_parse_redirect, PLAIN_TARGET),
        r.worst_with_congestion_vs_parse_redirect,
        verdict(r.worst_with_congestion_vs_parse_redirect, CONGESTION_TARGET)
    );
    println!(
        "the congestion model costs at most {:.2}x the plain switch (same mode and family)",
        r.worst_congestion_over_plain
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `frame` with its TTL (or hop limit) lowered by `by`, as that many forwarding runs leave it.
    fn forwarded(frame: &[u8], ipv6: bool, by: u8) -> Vec<u8> {
        let mut f = frame.to_vec();
        let at = if ipv6 { 14 + 7 } else { 14 + 8 };
        f[at] -= by;
        f
    }

    #[test]
    fn a_forwarding_case_must_have_forwarded_on_every_run() {
        for ipv6 in [false, true] {
            let sent = bench_frame(ipv6);
            assert!(check_path(Path::Forward, &sent, XDP_REDIRECT, &forwarded(&sent, ipv6, 200), 200).is_ok());
            // One forwarding run, then 199 early exits (a frame no longer for the switch): the
            // benchmark's old blind spot.
            let err = check_path(Path::Forward, &sent, XDP_PASS, &forwarded(&sent, ipv6, 1), 200);
            assert!(err.unwrap_err().to_string().contains("returned XDP_PASS, not XDP_REDIRECT"));
            let err = check_path(Path::Forward, &sent, XDP_REDIRECT, &forwarded(&sent, ipv6, 1), 200);
            assert!(err.unwrap_err().to_string().contains("1 of 200 runs"));
        }
    }

    /// A case without a measurement (NaN) is the worst: no target is met by it.
    #[test]
    fn an_unmeasured_case_is_the_worst() {
        assert_eq!([1.2, 3.4, 2.0].into_iter().fold(0.0, worse), 3.4);
        assert!([1.2, f64::NAN, 2.0].into_iter().fold(0.0, worse).is_nan());
    }

    #[test]
    fn a_reference_case_must_leave_the_frame_as_sent() {
        let sent = bench_frame(false);
        assert!(check_path(Path::Redirect, &sent, XDP_REDIRECT, &sent, 200).is_ok());
        assert!(check_path(Path::Pass, &sent, XDP_PASS, &sent, 200).is_ok());
        assert!(check_path(Path::Pass, &sent, XDP_REDIRECT, &sent, 200).is_err());
        let touched = forwarded(&sent, false, 1);
        assert!(check_path(Path::Redirect, &sent, XDP_REDIRECT, &touched, 200).is_err());
        assert!(check_path(Path::Redirect, &sent, XDP_REDIRECT, &sent[..20], 200).is_err());
    }
}
