//! `fabric-bench endpoint`: packets per second per core of the RoCEv2 endpoint, against raw UDP
//! datagrams of the same size through the same path, measured in the same run, on a private
//! testbed (prefix `fbench`) that is removed afterwards.
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

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

/// What a side of the raw UDP test says when the other failed before it started.
const NOT_STARTED: &str = "the other side of the raw UDP test did not start";

/// Sets its flag when dropped: a thread's end, reached by a return, an error or a panic alike.
struct SetOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Raw UDP: `count` datagrams of `size` bytes from `src` to `dst` as fast as sendmmsg goes;
/// returns the datagrams received.
fn raw_udp(plan: &fabric_user::model::plan::Plan, src: usize, dst: usize, count: u64, size: usize) -> Result<u64> {
    use std::net::SocketAddrV4;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (sip, dip) = (plan.host_ipv4(src), plan.host_ipv4(dst));
    // Each side's end, however it ends (a failure included), so that the other never waits
    // for it forever: the receiver stops once the sender is over and nothing more arrives.
    let (tx_over, rx_over) = (AtomicBool::new(false), AtomicBool::new(false));
    let ready = AtomicUsize::new(0);
    let both_ready = |other_over: &AtomicBool| -> Result<()> {
        ready.fetch_add(1, Ordering::AcqRel);
        while ready.load(Ordering::Acquire) < 2 {
            // Over and never counted as started: the other side failed before it was ready (one
            // that started and finished fast counted itself first).
            let over = other_over.load(Ordering::Acquire);
            anyhow::ensure!(!over || ready.load(Ordering::Acquire) >= 2, NOT_STARTED);
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    };
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let _over = SetOnDrop(&rx_over);
            fabric_user::sys::netns::in_named(&plan.netns(dst), || {
                let sock = fabric_user::endpoint::socket::roce_socket(SocketAddrV4::new(dip, 4791))?;
                both_ready(&tx_over)?;
                let mut bufs = Box::new([[0u8; 4096]; fabric_user::endpoint::socket::BATCH]);
                let mut got = Vec::new();
                let mut n = 0u64;
                let mut idle = 0;
                while n < count && idle < 2000 {
                    let k = fabric_user::endpoint::socket::recv_batch(&sock, &mut bufs, &mut got)?;
                    n += k as u64;
                    if k == 0 {
                        if tx_over.load(Ordering::Acquire) {
                            idle += 1;
                        }
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
                Ok(n)
            })
        });
        let tx = s.spawn(|| {
            let _over = SetOnDrop(&tx_over);
            fabric_user::sys::netns::in_named(&plan.netns(src), || {
                let sock = fabric_user::endpoint::socket::roce_socket(SocketAddrV4::new(sip, 0xC001))?;
                both_ready(&rx_over)?;
                let batch: Vec<(Vec<u8>, SocketAddrV4)> = (0..fabric_user::endpoint::socket::BATCH)
                    .map(|_| (vec![0u8; size], SocketAddrV4::new(dip, 4791)))
                    .collect();
                let mut sent = 0u64;
                while sent < count && !rx_over.load(Ordering::Acquire) {
                    let k = fabric_user::endpoint::socket::send_batch(&sock, &batch)?;
                    sent += k as u64;
                    if k < batch.len() {
                        std::thread::yield_now();
                    }
                }
                Ok(sent)
            })
        });
        let (sent, received) = (tx.join().expect("sender"), rx.join().expect("receiver"));
        match (sent, received) {
            (Ok(_), received) => received,
            (Err(e), Ok(_)) => Err(e),
            // The side that failed first says why; the other only that it was left alone.
            (Err(e), Err(r)) => Err(if e.to_string() == NOT_STARTED { r } else { e }),
        }
    })
}

pub fn endpoint() -> Result<EndpointReport> {
    use fabric_user::{
        endpoint::EndpointOptions, endpoint::engine::run_step, model::topology::Topology,
        model::workload::HostTransfer, state::State, testbed::down, testbed::up,
    };
    let mut topo = Topology::default_topology();
    topo.prefix = "fbench".into();
    // The endpoints' own cost: the fabric forwards without shaping (no modelled queues at
    // 100 Mbit/s that an unpaced flood would fill and pause).
    topo.congestion.enabled = false;
    let _ = down("fbench");
    // Made before `up`: a Ctrl-C during it removes the half-built testbed too.
    let _guard = fabric_user::testbed::DownOnDrop::owned("fbench".into());
    fabric_user::testbed::interrupt::guarded_step(|| up(&topo, true))?;
    let state = State::load("fbench")?;
    let plan = &state.plan;
    // Two racks apart: RTSW, CTSW, RTSW, as collective traffic crosses the fabric.
    let (a, b) = (plan.node_by_name("z0r0h0").expect("host"), plan.node_by_name("z0r1h0").expect("host"));
    let mut rows = Vec::new();

    let payload = 1024 + 12 + 4; // a path-MTU write: BTH + payload + ICRC
    let (cpu0, t0) = (process_cpu_s(), std::time::Instant::now());
    let got = raw_udp(plan, a, b, 400_000, payload)?;
    rows.push(row("raw UDP (sendmmsg/recvmmsg), 1060-byte datagrams", got, t0.elapsed(), process_cpu_s() - cpu0));

    let opts = EndpointOptions { qps: 1, ..Default::default() };
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
    let run_opts = fabric_user::run::RunSpec::from_file(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testbed/workloads/allreduce-8qp-eecmp.toml"),
    )?
    .to_options()?;
    let (cpu0, t0) = (process_cpu_s(), std::time::Instant::now());
    let res = fabric_user::run::run(&state, &run_opts, true)?;
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
