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

/// Mean ns/packet of `packets` runs of `program` on `frame`.
fn measure_once(sw: &mut FixtureSwitch, program: &str, frame: &[u8], packets: u64) -> Result<f64> {
    let mut total = Duration::ZERO;
    let calls = packets.div_ceil(CHUNK as u64);
    for _ in 0..calls {
        // Fresh copy each call: the TTL starts from 255 again.
        total += sw.time(program, 0, frame, CHUNK)? * CHUNK;
    }
    Ok(total.as_nanos() as f64 / (calls * CHUNK as u64) as f64)
}

/// One benchmark case: a program, a hash mode to configure first, a frame.
struct Case {
    label: String,
    program: &'static str,
    mode: HashMode,
    family: &'static str,
    frame: Vec<u8>,
}

pub fn dataplane(packets: u64, rounds: u32) -> Result<DataplaneReport> {
    // A private namespace for the fixture's veths; it vanishes with the thread.
    in_private_netns(|| {
        let frames = [("ipv4", bench_frame(false)), ("ipv6", bench_frame(true))];
        let mut cases = vec![Case {
            label: "(a) XDP_PASS".into(),
            program: PROGRAM_PASS,
            mode: HashMode::FiveTuple,
            family: "ipv4",
            frame: frames[0].1.clone(),
        }];
        for (family, f) in &frames {
            cases.push(Case {
                label: "(b) parse + fixed redirect".into(),
                program: PROGRAM_BENCH_PARSE_REDIRECT,
                mode: HashMode::FiveTuple,
                family,
                frame: f.clone(),
            });
        }
        for mode in HashMode::ALL {
            for (family, f) in &frames {
                cases.push(Case {
                    label: format!("(c) switch, {}", mode.as_str()),
                    program: PROGRAM_SWITCH,
                    mode,
                    family,
                    frame: f.clone(),
                });
            }
        }
        // Rounds outermost, so that the machine's slow phases hit every case alike.
        let mut sw = FixtureSwitch::new(HashMode::FiveTuple, 0x5eed)?;
        let mut samples = vec![Vec::new(); cases.len()];
        for _ in 0..rounds {
            for (i, c) in cases.iter().enumerate() {
                sw.set_mode(c.mode, 0x5eed)?;
                samples[i].push(measure_once(&mut sw, c.program, &c.frame, packets)?);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let ns: Vec<f64> = samples.iter_mut().map(median).collect();
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
        let worst = rows
            .iter()
            .filter(|r| r.program.starts_with("(c)"))
            .map(|r| r.vs_parse_redirect)
            .fold(0.0, f64::max);
        Ok(DataplaneReport { packets_per_case: packets, rounds, frame_bytes: frames[0].1.len(), rows, worst_vs_parse_redirect: worst })
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
