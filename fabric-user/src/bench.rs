//! `fabric bench dataplane`: per-packet cost of the switch program with BPF_PROG_TEST_RUN,
//! against two references measured in the same run: (a) a bare XDP_PASS and (b) parse + a fixed
//! redirect. Figures are ratios; absolute nanoseconds are printed but depend on the machine.
use std::time::Duration;

use anyhow::Result;
use fabric_common::config::HashMode;
use serde::Serialize;

pub use crate::sim::bench::{SimBenchReport, print_sim, sim};
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
    /// The same with the congestion model on.
    pub worst_with_congestion_vs_parse_redirect: f64,
    /// Largest (d) / (c) ratio for one mode and family: what the model adds.
    pub worst_congestion_over_plain: f64,
}

/// RoCE data as our endpoints send it: DSCP 26 (the lossless class) with ECT(0), so that the
/// congestion model's cases take its full path (queue, RED, ingress accounting).
fn bench_frame(ipv6: bool) -> Vec<u8> {
    let mut f = frame(&FrameSpec { ipv6, ttl: 255, dst_mac: port_mac(0), payload_len: 1024, ..Default::default() });
    crate::fixture::set_tos(&mut f, 26 << 2 | 0b10);
    f
}

/// The default RTSW's congestion model, at real line rate (time scale 1): the queue drains
/// faster than test_run feeds it, so nothing is dropped or paused and every packet pays for
/// the model's common path.
fn bench_qos(enabled: bool) -> fabric_common::qos::QosConfig {
    let c = crate::topology::Congestion::default();
    let mut q = c.qos_config(&c.rtsw);
    q.enabled = enabled as u32;
    q
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
    /// With the congestion model on.
    qos: bool,
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
            qos: false,
            family: "ipv4",
            frame: frames[0].1.clone(),
        }];
        for (family, f) in &frames {
            cases.push(Case {
                label: "(b) parse + fixed redirect".into(),
                program: PROGRAM_BENCH_PARSE_REDIRECT,
                mode: HashMode::FiveTuple,
                qos: false,
                family,
                frame: f.clone(),
            });
        }
        for qos in [false, true] {
            for mode in HashMode::ALL {
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
                    });
                }
            }
        }
        // Rounds outermost, so that the machine's slow phases hit every case alike.
        let mut sw = FixtureSwitch::new(HashMode::FiveTuple, 0x5eed)?;
        for p in 0..=crate::fixture::UPLINKS {
            sw.dp.set_port_rate(p, 400_000_000_000)?;
        }
        let mut samples = vec![Vec::new(); cases.len()];
        for _ in 0..rounds {
            for (i, c) in cases.iter().enumerate() {
                sw.set_mode(c.mode, 0x5eed)?;
                sw.dp.set_qos(bench_qos(c.qos))?;
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
        let worst = |prefix: &str| {
            rows.iter().filter(|r| r.program.starts_with(prefix)).map(|r| r.vs_parse_redirect).fold(0.0, f64::max)
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
            .fold(0.0, f64::max);
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
    let verdict = |x: f64| if x <= 2.0 { "meets" } else { "MISSES" };
    println!(
        "full pipeline vs parse + fixed redirect: worst {:.2}x ({} the 2x target); with the congestion model {:.2}x ({})",
        r.worst_vs_parse_redirect,
        verdict(r.worst_vs_parse_redirect),
        r.worst_with_congestion_vs_parse_redirect,
        verdict(r.worst_with_congestion_vs_parse_redirect)
    );
    println!(
        "the congestion model costs at most {:.2}x the plain switch (same mode and family)",
        r.worst_congestion_over_plain
    );
}

/// `fabric bench endpoint`: packets per second per core of the RoCEv2 endpoint, against raw UDP
/// datagrams of the same size through the same path, measured in the same run, on a private
/// testbed (prefix `fbench`) that is removed afterwards.
#[derive(Debug, Serialize)]
pub struct EndpointReport {
    pub rows: Vec<EndpointRow>,
    /// RoCE endpoint packets/s per core over raw UDP packets/s per core.
    pub roce_vs_raw_udp: f64,
}

#[derive(Debug, Serialize)]
pub struct EndpointRow {
    pub case: String,
    pub packets: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub packets_per_s: f64,
    pub packets_per_cpu_s: f64,
}

/// CPU time (user + system) of the whole process so far, seconds.
fn process_cpu_s() -> f64 {
    // SAFETY: getrusage fills a plain struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn row(case: &str, packets: u64, wall: Duration, cpu_s: f64) -> EndpointRow {
    EndpointRow {
        case: case.into(),
        packets,
        wall_s: wall.as_secs_f64(),
        cpu_s,
        packets_per_s: packets as f64 / wall.as_secs_f64(),
        packets_per_cpu_s: packets as f64 / cpu_s,
    }
}

/// Raw UDP: `count` datagrams of `size` bytes from `src` to `dst` as fast as sendmmsg goes;
/// returns the datagrams received.
fn raw_udp(plan: &crate::plan::Plan, src: usize, dst: usize, count: u64, size: usize) -> Result<u64> {
    use std::net::SocketAddrV4;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (sip, dip) = (plan.host_ipv4(src), plan.host_ipv4(dst));
    let done = AtomicBool::new(false);
    let ready = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            crate::netns::in_named(&plan.netns(dst), || {
                let sock = crate::endpoint::socket::roce_socket(SocketAddrV4::new(dip, 4791))?;
                ready.wait();
                let mut bufs = Box::new([[0u8; 4096]; crate::endpoint::socket::BATCH]);
                let mut got = Vec::new();
                let mut n = 0u64;
                let mut idle = 0;
                while n < count && idle < 2000 {
                    let k = crate::endpoint::socket::recv_batch(&sock, &mut bufs, &mut got)?;
                    n += k as u64;
                    if k == 0 {
                        if done.load(Ordering::Relaxed) {
                            idle += 1;
                        }
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
                Ok(n)
            })
        });
        let tx = s.spawn(|| {
            crate::netns::in_named(&plan.netns(src), || {
                let sock = crate::endpoint::socket::roce_socket(SocketAddrV4::new(sip, 0xC001))?;
                ready.wait();
                let batch: Vec<(Vec<u8>, SocketAddrV4)> = (0..crate::endpoint::socket::BATCH)
                    .map(|_| (vec![0u8; size], SocketAddrV4::new(dip, 4791)))
                    .collect();
                let mut sent = 0u64;
                while sent < count {
                    let k = crate::endpoint::socket::send_batch(&sock, &batch)?;
                    sent += k as u64;
                    if k < batch.len() {
                        std::thread::yield_now();
                    }
                }
                done.store(true, Ordering::Relaxed);
                Ok(sent)
            })
        });
        let sent: Result<u64> = tx.join().expect("sender");
        sent?;
        rx.join().expect("receiver")
    })
}

pub fn endpoint() -> Result<EndpointReport> {
    use crate::{
        endpoint::{
            EndpointOptions,
            engine::{HostTransfer, run_step},
        },
        testbed::{State, down, up},
        topology::Topology,
    };
    let mut topo = Topology::default_topology();
    topo.prefix = "fbench".into();
    // The endpoints' own cost: the fabric forwards without shaping (no modelled queues at
    // 100 Mbit/s that an unpaced flood would fill and pause).
    topo.congestion.enabled = false;
    let _ = down("fbench");
    up(&topo, true)?;
    let _guard = crate::testbed::DownOnDrop("fbench".into());
    let state = State::load("fbench")?;
    let plan = &state.plan;
    // Two racks apart: RTSW, CTSW, RTSW, as collective traffic crosses the fabric.
    let (a, b) = (plan.node_by_name("z0r0h0").expect("host"), plan.node_by_name("z0r1h0").expect("host"));
    let mut rows = Vec::new();

    let payload = 1024 + 12 + 4; // a path-MTU write: BTH + payload + ICRC
    let (cpu0, t0) = (process_cpu_s(), std::time::Instant::now());
    let got = raw_udp(plan, a, b, 400_000, payload)?;
    rows.push(row("raw UDP (sendmmsg/recvmmsg), 1060-byte datagrams", got, t0.elapsed(), process_cpu_s() - cpu0));

    let opts = EndpointOptions { qps: 1, rate_bps: 0, ..Default::default() };
    let bytes = 256u64 << 20;
    let (cpu0, t0) = (process_cpu_s(), std::time::Instant::now());
    let r = run_step(plan, &[HostTransfer { src: a, dst: b, bytes }], &opts)?;
    let packets =
        r.flows.iter().map(|f| f.packets_sent).sum::<u64>() * (opts.ack_every as u64 + 1) / opts.ack_every as u64;
    rows.push(row(
        "RoCE endpoint, 1 QP unpaced, 1024-byte path MTU (data + ACKs)",
        packets,
        t0.elapsed(),
        process_cpu_s() - cpu0,
    ));

    // The whole AllReduce, 8 ranks, paced as the demo runs it.
    let run_opts = crate::run::RunSpec::from_file(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/workloads/allreduce-8qp-eecmp.toml"),
    )?
    .to_options()?;
    let (cpu0, t0) = (process_cpu_s(), std::time::Instant::now());
    let res = crate::run::run(&state, &run_opts, true)?;
    let data: u64 = res.flows.iter().map(|f| f.packets_sent).sum::<u64>() * u64::from(run_opts.iterations);
    let packets = data * (opts.ack_every as u64 + 1) / opts.ack_every as u64;
    rows.push(row(
        "ring AllReduce, 8 ranks x 8 QPs, paced (data + ACKs)",
        packets,
        t0.elapsed(),
        process_cpu_s() - cpu0,
    ));

    let roce_vs_raw_udp = rows[1].packets_per_cpu_s / rows[0].packets_per_cpu_s;
    Ok(EndpointReport { rows, roce_vs_raw_udp })
}

pub fn print_endpoint(r: &EndpointReport) {
    println!("endpoint: packets per second per core (process CPU time), same run, same path (RTSW-CTSW-RTSW)");
    println!("{:<66} {:>9} {:>8} {:>8} {:>12} {:>14}", "case", "packets", "wall s", "cpu s", "pkts/s", "pkts/cpu-s");
    for row in &r.rows {
        println!(
            "{:<66} {:>9} {:>8.2} {:>8.2} {:>12.0} {:>14.0}",
            row.case, row.packets, row.wall_s, row.cpu_s, row.packets_per_s, row.packets_per_cpu_s
        );
    }
    println!("RoCE endpoint vs raw UDP, packets per CPU-second: {:.2}x", r.roce_vs_raw_udp);
}

/// `fabric bench bringup`: time to bring up and tear down each shipped topology and synthetic
/// ones of growing size, and how the time grows with the number of links.
#[derive(Debug, Serialize)]
pub struct BringupReport {
    pub rows: Vec<BringupRow>,
    /// Least-squares fit of up time over links: seconds = intercept + per_link * links.
    pub fit_intercept_s: f64,
    pub fit_per_link_ms: f64,
    /// Coefficient of determination of that fit (1 = perfectly linear).
    pub fit_r2: f64,
}

#[derive(Debug, Serialize)]
pub struct BringupRow {
    pub topology: String,
    pub hosts: usize,
    pub namespaces: usize,
    pub links: usize,
    pub up_s: f64,
    pub down_s: f64,
    pub up_ms_per_link: f64,
}

fn synthetic(hosts: u32) -> crate::topology::Topology {
    let mut t = crate::topology::Topology::default_topology();
    t.name = format!("synthetic-{hosts}");
    t.zones[0].hosts_per_rack = 4;
    t.zones[0].racks = hosts / 4;
    t.zones[0].spines = if hosts > 64 { 8 } else { 4 };
    t
}

pub fn bringup() -> Result<BringupReport> {
    use crate::{testbed, topology::Topology};
    const PREFIX: &str = "fbup";
    let _guard = crate::testbed::DownOnDrop(PREFIX.into());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed");
    let mut topologies = Vec::new();
    for f in ["default.toml", "two-zones.toml", "large.toml"] {
        let path = dir.join(f);
        topologies.push(Topology::parse(&std::fs::read_to_string(&path)?, &path.display().to_string())?);
    }
    for hosts in [8, 16, 32, 64, 128, 256] {
        topologies.push(synthetic(hosts));
    }
    let mut rows = Vec::new();
    for mut t in topologies {
        t.prefix = PREFIX.into();
        testbed::down(PREFIX)?;
        let plan = crate::plan::Plan::new(&t);
        let start = std::time::Instant::now();
        testbed::up(&t, true)?;
        let up_s = start.elapsed().as_secs_f64();
        let start = std::time::Instant::now();
        testbed::down(PREFIX)?;
        let down_s = start.elapsed().as_secs_f64();
        rows.push(BringupRow {
            topology: t.name.clone(),
            hosts: plan.hosts().count(),
            namespaces: plan.nodes.len(),
            links: plan.links.len(),
            up_s,
            down_s,
            up_ms_per_link: up_s * 1e3 / plan.links.len() as f64,
        });
    }
    // Fit over the synthetic series only (same shape, growing size).
    let pts: Vec<(f64, f64)> =
        rows.iter().filter(|r| r.topology.starts_with("synthetic")).map(|r| (r.links as f64, r.up_s)).collect();
    let n = pts.len() as f64;
    let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let ss_tot: f64 = pts.iter().map(|p| (p.1 - my).powi(2)).sum();
    let ss_res: f64 = pts.iter().map(|p| (p.1 - intercept - slope * p.0).powi(2)).sum();
    Ok(BringupReport { rows, fit_intercept_s: intercept, fit_per_link_ms: slope * 1e3, fit_r2: 1.0 - ss_res / ss_tot })
}

pub fn print_bringup(r: &BringupReport) {
    println!("bringup: `fabric up` / `fabric down` wall time per topology");
    println!(
        "{:<22} {:>6} {:>11} {:>6} {:>8} {:>8} {:>12}",
        "topology", "hosts", "namespaces", "links", "up s", "down s", "up ms/link"
    );
    for row in &r.rows {
        println!(
            "{:<22} {:>6} {:>11} {:>6} {:>8.2} {:>8.2} {:>12.2}",
            row.topology, row.hosts, row.namespaces, row.links, row.up_s, row.down_s, row.up_ms_per_link
        );
    }
    println!(
        "growth (synthetic series): up = {:.2} s + {:.2} ms x links, R^2 = {:.3}",
        r.fit_intercept_s, r.fit_per_link_ms, r.fit_r2
    );
}
