//! `fabric bench dataplane`: per-packet cost of the switch program with BPF_PROG_TEST_RUN,
//! against two references measured in the same run: (a) a bare XDP_PASS and (b) parse + a fixed
//! redirect. Figures are ratios; absolute nanoseconds are printed but depend on the machine.
use std::time::Duration;

use anyhow::Result;
use fabric_common::config::HashMode;
use serde::Serialize;

use crate::{
    dataplane::{PROGRAM_BENCH_PARSE_REDIRECT, PROGRAM_PASS, PROGRAM_SWITCH},
    fixture::{FixtureSwitch, FrameSpec, frame, in_private_netns, port_mac},
};

/// Runs per test_run call. The switch rewrites TTL in place and non-live test_run reuses one
/// buffer, so a call must stay well under the starting TTL (255) to measure the forwarding path.
const CHUNK: u32 = 200;

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
}

fn bench_frame(ipv6: bool) -> Vec<u8> {
    frame(&FrameSpec { ipv6, ttl: 255, dst_mac: port_mac(0), payload_len: 1024, ..Default::default() })
}

/// Median over `rounds` of the mean ns/packet of `packets` runs.
fn measure(sw: &mut FixtureSwitch, program: &str, frame: &[u8], packets: u64, rounds: u32) -> Result<f64> {
    let mut medians = Vec::new();
    for _ in 0..rounds {
        let mut total = Duration::ZERO;
        let calls = packets.div_ceil(CHUNK as u64);
        for _ in 0..calls {
            // Fresh copy each call: the TTL starts from 255 again.
            total += sw.time(program, 0, frame, CHUNK)? * CHUNK;
        }
        medians.push(total.as_nanos() as f64 / (calls * CHUNK as u64) as f64);
    }
    medians.sort_by(f64::total_cmp);
    Ok(medians[medians.len() / 2])
}

pub fn dataplane(packets: u64, rounds: u32) -> Result<DataplaneReport> {
    // A private namespace for the fixture's veths; it vanishes with the thread.
    in_private_netns(|| {
        let mut rows = Vec::new();
        let frames = [("ipv4", bench_frame(false)), ("ipv6", bench_frame(true))];
        let mut sw = FixtureSwitch::new(HashMode::FiveTuple, 1)?;
        let pass = measure(&mut sw, PROGRAM_PASS, &frames[0].1, packets, rounds)?;
        let mut baseline = Vec::new();
        for (_, f) in &frames {
            baseline.push(measure(&mut sw, PROGRAM_BENCH_PARSE_REDIRECT, f, packets, rounds)?);
        }
        rows.push(Row {
            program: "(a) XDP_PASS".into(),
            family: "ipv4",
            ns_per_packet: pass,
            vs_pass: 1.0,
            vs_parse_redirect: pass / baseline[0],
        });
        for (i, (family, _)) in frames.iter().enumerate() {
            rows.push(Row {
                program: "(b) parse + fixed redirect".into(),
                family,
                ns_per_packet: baseline[i],
                vs_pass: baseline[i] / pass,
                vs_parse_redirect: 1.0,
            });
        }
        for mode in HashMode::ALL {
            sw.set_mode(mode, 0x5eed)?;
            for (i, (family, f)) in frames.iter().enumerate() {
                let ns = measure(&mut sw, PROGRAM_SWITCH, f, packets, rounds)?;
                rows.push(Row {
                    program: format!("(c) switch, {}", mode.as_str()),
                    family,
                    ns_per_packet: ns,
                    vs_pass: ns / pass,
                    vs_parse_redirect: ns / baseline[i],
                });
            }
        }
        let worst = rows
            .iter()
            .filter(|r| r.program.starts_with("(c)"))
            .map(|r| r.vs_parse_redirect)
            .fold(0.0, f64::max);
        Ok(DataplaneReport {
            packets_per_case: packets,
            rounds,
            frame_bytes: frames[0].1.len(),
            rows,
            worst_vs_parse_redirect: worst,
        })
    })
}

pub fn print_dataplane(r: &DataplaneReport) {
    println!(
        "dataplane: BPF_PROG_TEST_RUN, {} packets x {} rounds (median), {}-byte IPv4 frame",
        r.packets_per_case, r.rounds, r.frame_bytes
    );
    println!("{:<34} {:<6} {:>10} {:>9} {:>14}", "program", "family", "ns/packet", "vs (a)", "vs (b) same IP");
    for row in &r.rows {
        println!(
            "{:<34} {:<6} {:>10.1} {:>8.2}x {:>13.2}x",
            row.program, row.family, row.ns_per_packet, row.vs_pass, row.vs_parse_redirect
        );
    }
    let verdict = if r.worst_vs_parse_redirect <= 2.0 { "meets" } else { "MISSES" };
    println!(
        "full pipeline vs parse + fixed redirect: worst {:.2}x ({verdict} the 2x target)",
        r.worst_vs_parse_redirect
    );
}
