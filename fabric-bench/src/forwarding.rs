//! `fabric-bench forwarding`: packets per second per core through a 3-hop path (RTSW, CTSW,
//! RTSW) forwarded by the XDP switch, against the same path forwarded by the Linux kernel, and a
//! 0-hop baseline (generator straight into the sink), all measured in the same run.
//!
//! Each path is a chain of namespaces joined by veth pairs: gen → r1 → c → r2 → sink (the
//! baseline: gen → sink). The generator is the object's `traffic_generator` program run with
//! BPF_PROG_TEST_RUN in live-frame mode (XDP_TX out of the generator's veth) from a thread pinned
//! to one CPU; veth hands frames to its peer's NAPI on the sending CPU, so the whole path runs on
//! that CPU. Frames are counted where they arrive: the sink's veth runs the switch program with
//! its port registered and no routes, so every frame is counted (per-CPU port counters) and
//! dropped (XDP_DROP, reason no-route). CPU time is the generator thread's own (which includes
//! the softirqs it runs) plus ksoftirqd and other CPUs' softirq time; /proc/stat cross-checks.
//!
//! Namespaces are named `fbfw-<pid>-…`, use 198.18.0.0/15 addresses only, and are removed on
//! the way out, error or not (and, if a run was killed, by the next run).
use std::{
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use aya::{
    maps::{Array, Map, MapData},
    programs::{TestRun as _, TestRunAttrs, TestRunOptions, Xdp},
};
use fabric_common::{
    config::{GeneratorConfig, HashMode, PortInfo, SwitchConfig},
    route::{EcmpGroup, GroupMember},
};
use serde::Serialize;

use fabric_testkit::fixture::{FrameSpec, frame, xdp_md};
use fabric_user::{
    dataplane::{PROGRAM_BENCH_PARSE_REDIRECT, PROGRAM_GENERATOR, PROGRAM_PASS, SwitchDataplane},
    sys::netns::{self, ifindex, in_named, ip},
};

const PREFIX: &str = "fbfw-";
/// Frames per BPF_PROG_TEST_RUN call (tens of milliseconds of work).
const FRAMES_PER_CALL: u32 = 1 << 15;
/// Live frames sent per batch: one NAPI budget, so that a batch crosses the whole path in one
/// softirq run (4 NAPI polls x 64 stay under netdev_budget = 300).
const BATCH: u32 = 64;
const WARMUP: Duration = Duration::from_millis(300);
/// After the last call: lets stragglers (a softirq deferred to ksoftirqd) reach the sink.
const SETTLE: Duration = Duration::from_millis(20);
/// Ethernet + IPv4 + UDP + BTH in front of the payload that `fixture::frame` writes.
const HEADERS: usize = 14 + 20 + 8 + 12;
const TTL: u8 = 64;
const HOPS: f64 = 3.0;
/// Every mode, with the congestion model on, against the kernel, packets per core.
pub const TARGET: f64 = 5.0;
/// The plain XDP chain's mode (no congestion model): the reference for what a mode adds.
const PLAIN_MODE: HashMode = HashMode::Eecmp;

/// The generator's source (fixture::HOST_A_V4 = 198.18.0.1) and the sink's prefix (the
/// fixture's frames go to 198.18.1.7).
const SINK_PREFIX: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 0);
const GEN_HOST: Ipv4Addr = fabric_testkit::fixture::HOST_A_V4;

const GEN_MAC: [u8; 6] = [0x02, 0xbf, 0x77, 0, 0, 0x01];
/// Every sink's veth has this MAC (one sink program instance serves all chains).
const SINK_MAC: [u8; 6] = [0x02, 0xbf, 0x77, 0xff, 0, 0x01];
const EAST: u8 = 1;
const WEST: u8 = 2;

/// The MAC of switch `k`'s port towards the sink (`EAST`) or towards the generator (`WEST`).
fn switch_mac(k: usize, side: u8) -> [u8; 6] {
    [0x02, 0xbf, 0x77, k as u8, side, 0x01]
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Path {
    /// Generator straight into the sink: the cost of generating and receiving.
    Baseline,
    /// Three XDP switches (the project's `fabric_switch`).
    Xdp,
    /// The same with the congestion model on (default RTSW settings at real line rate, so the
    /// modelled queues stay short and nothing is dropped: the model's common path), set to each
    /// measured routing mode in turn.
    XdpCongestion,
    /// Three namespaces forwarding with the Linux kernel.
    Kernel,
    /// The floor of any XDP forwarder: three switches that parse and redirect to a fixed port
    /// (the object's `bench_parse_redirect`: no lookup, no rewrite, no counter).
    ParseRedirect,
}

impl Path {
    const ALL: [Path; 5] = [Path::Baseline, Path::ParseRedirect, Path::Xdp, Path::XdpCongestion, Path::Kernel];

    fn tag(self) -> &'static str {
        match self {
            Path::Baseline => "b",
            Path::Xdp => "x",
            Path::XdpCongestion => "q",
            Path::Kernel => "k",
            Path::ParseRedirect => "f",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Path::Baseline => "baseline: gen -> sink (0 hops)",
            Path::Xdp => "XDP switch x3 (fabric_switch)",
            Path::XdpCongestion => "XDP switch x3 + congestion model",
            Path::Kernel => "Linux kernel x3 (nexthop group x2, L4)",
            Path::ParseRedirect => "parse + fixed redirect x3 (floor)",
        }
    }

    fn switches(self) -> usize {
        if self == Path::Baseline { 0 } else { 3 }
    }
}

/// Deletes every namespace it names when dropped, error or panic.
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in self.0.iter().rev() {
            let _ = netns::delete_named(n);
        }
    }
}

/// Removes `fbfw-<pid>-…` namespaces of runs whose process is gone (killed mid-run).
fn remove_stale() -> Result<()> {
    for name in netns::list_named(PREFIX)? {
        let pid = name[PREFIX.len()..].split('-').next().and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && pid != std::process::id()
            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            netns::delete_named(&name)?;
        }
    }
    Ok(())
}

/// One chain of namespaces: `nodes[0]` is the generator, the last one the sink.
struct Chain {
    path: Path,
    nodes: Vec<String>,
    gen_ifindex: u32,
    /// The MAC the generator writes as destination: the first hop's port.
    first_hop_mac: [u8; 6],
    /// How the kernel chain routes (nexthop objects, or a multipath route as a fallback).
    kernel_routes: Option<String>,
    /// The switches' data planes (XDP chain); dropping them detaches the programs.
    switches: Vec<SwitchDataplane>,
}

fn build_chain(path: Path, guard: &mut Namespaces, tools: &mut SwitchDataplane, mode: HashMode) -> Result<Chain> {
    let base = format!("{PREFIX}{}-{}", std::process::id(), path.tag());
    let mut nodes = vec![format!("{base}-gen")];
    nodes.extend((1..=path.switches()).map(|k| format!("{base}-s{k}")));
    nodes.push(format!("{base}-sink"));
    let last = nodes.len() - 1;
    for n in &nodes {
        guard.0.push(n.clone());
        netns::create_named(n)?;
        in_named(n, || {
            ip(&["link", "set", "lo", "up"])?;
            // No IPv6 chatter (router solicitations, DAD) on the measured links.
            netns::sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
            netns::sysctl("net/ipv6/conf/default/disable_ipv6", "1")
        })
        .with_context(|| format!("setting up namespace {n}"))?;
    }
    // Link i joins node i ("east") and node i+1 ("west").
    let east_mac = |i: usize| if i == 0 { GEN_MAC } else { switch_mac(i, EAST) };
    let west_mac = |i: usize| if i == last { SINK_MAC } else { switch_mac(i, WEST) };
    for i in 0..last {
        let (here, next) = (&nodes[i], &nodes[i + 1]);
        let (a, b) = (mac_str(east_mac(i)), mac_str(west_mac(i + 1)));
        in_named(here, || {
            ip(&[
                "link", "add", "east", "address", &a, "type", "veth", "peer", "name", "west", "address", &b, "netns",
                next,
            ])?;
            ip(&["link", "set", "dev", "east", "up"])
        })?;
        in_named(next, || ip(&["link", "set", "dev", "west", "up"]))?;
    }

    let mut switches = Vec::new();
    let mut kernel_routes = None;
    match path {
        Path::Baseline => {}
        Path::Xdp | Path::XdpCongestion => {
            for (k, node) in nodes.iter().enumerate().take(last).skip(1) {
                let mut dp = SwitchDataplane::load()?;
                in_named(node, || {
                    let (west, east) = (ifindex("west")?, ifindex("east")?);
                    dp.add_port(west, PortInfo::new(0, switch_mac(k, WEST)))?;
                    dp.add_port(east, PortInfo::new(1, switch_mac(k, EAST)))?;
                    let gap = fabric_common::balance::DEFAULT_FLOWLET_GAP_NS as u32;
                    dp.set_config(SwitchConfig::new(mode, k as u32, 0).with_flowlet_gap(gap))?;
                    let to_sink = GroupMember { port: 1, dst_mac: west_mac(k + 1), src_mac: switch_mac(k, EAST) };
                    let to_gen = GroupMember { port: 0, dst_mac: east_mac(k - 1), src_mac: switch_mac(k, WEST) };
                    dp.set_group(0, &EcmpGroup::from_members(&[to_sink]).expect("fits"))?;
                    dp.set_group(1, &EcmpGroup::from_members(&[to_gen]).expect("fits"))?;
                    dp.set_route_v4(SINK_PREFIX, 24, 0)?;
                    dp.set_route_v4(GEN_HOST, 32, 1)?;
                    if path == Path::XdpCongestion {
                        let c = fabric_user::model::topology::Congestion::default();
                        dp.set_qos(c.qos_config(&c.rtsw))?;
                        dp.set_port_rate(0, 400_000_000_000)?;
                        dp.set_port_rate(1, 400_000_000_000)?;
                        dp.refresh_wcmp()?;
                    }
                    dp.attach(west)?;
                    dp.attach(east)?;
                    Ok(())
                })
                .with_context(|| format!("XDP switch in {node}"))?;
                switches.push(dp);
            }
        }
        Path::ParseRedirect => {
            for (k, node) in nodes.iter().enumerate().take(last).skip(1) {
                let mut dp = SwitchDataplane::load()?;
                in_named(node, || {
                    // EGRESS slot 0 is "east": every parsed frame goes on towards the sink.
                    dp.add_port(ifindex("east")?, PortInfo::new(0, switch_mac(k, EAST)))?;
                    dp.attach_program(PROGRAM_BENCH_PARSE_REDIRECT, ifindex("west")?)
                })
                .with_context(|| format!("parse + redirect in {node}"))?;
                switches.push(dp);
            }
        }
        Path::Kernel => {
            for (k, node) in nodes.iter().enumerate().take(last).skip(1) {
                let routes = in_named(node, || kernel_switch(k, west_mac(k + 1), east_mac(k - 1)))
                    .with_context(|| format!("kernel forwarding in {node}"))?;
                kernel_routes = Some(routes);
            }
            // veth delivers XDP_TX / redirected frames only to a peer with NAPI: give the first
            // switch's ingress a bare XDP_PASS, so the kernel receives the generator's frames.
            in_named(&nodes[1], || tools.attach_program(PROGRAM_PASS, ifindex("west")?))?;
        }
    }
    // The generator program is also attached, to a veth of its own that receives nothing:
    // BPF_PROG_TEST_RUN then finds it in the XDP dispatcher already instead of swapping it in
    // and out around every call. Not to "east": it would bounce whatever comes back (an ICMP
    // error, say) into the fabric again with a fresh TTL, forever.
    let gen_ifindex = in_named(&nodes[0], || {
        ip(&["link", "add", "park", "type", "veth", "peer", "name", "park-peer"])?;
        tools.attach_program(PROGRAM_GENERATOR, ifindex("park")?)?;
        ifindex("east")
    })?;
    // The sink: its port registered, no routes: every frame counted, then dropped.
    in_named(&nodes[last], || {
        let idx = ifindex("west")?;
        tools.add_port(idx, PortInfo::new(0, SINK_MAC))?;
        tools.attach(idx)
    })?;
    Ok(Chain { path, nodes, gen_ifindex, first_hop_mac: west_mac(1), kernel_routes, switches })
}

/// Kernel forwarding in switch `k` (calling thread inside its namespace): link i is
/// 198.19.i.0/29, node i's "east" is .1, node i+1's "west" is .2; towards the sink a nexthop group
/// of two gateways (.2 and .3, both permanent neighbours on the next switch's MAC) with the L4
/// multipath hash; towards the generator a plain route. Returns how the routes were made.
fn kernel_switch(k: usize, next_mac: [u8; 6], prev_mac: [u8; 6]) -> Result<String> {
    for (key, value) in [
        ("net/ipv4/ip_forward", "1"),
        ("net/ipv4/fib_multipath_hash_policy", "1"),
        ("net/ipv4/conf/all/rp_filter", "0"),
        ("net/ipv4/conf/default/rp_filter", "0"),
        ("net/ipv4/conf/east/rp_filter", "0"),
        ("net/ipv4/conf/west/rp_filter", "0"),
    ] {
        netns::sysctl(key, value)?;
    }
    let (next_mac, prev_mac) = (mac_str(next_mac), mac_str(prev_mac));
    let (east_addr, west_addr) = (format!("198.19.{k}.1/29"), format!("198.19.{}.2/29", k - 1));
    let (gw1, gw2, back) = (format!("198.19.{k}.2"), format!("198.19.{k}.3"), format!("198.19.{}.1", k - 1));
    ip(&["addr", "add", &east_addr, "dev", "east"])?;
    ip(&["addr", "add", &west_addr, "dev", "west"])?;
    for gw in [&gw1, &gw2] {
        ip(&["neigh", "replace", gw, "lladdr", &next_mac, "dev", "east", "nud", "permanent"])?;
    }
    ip(&["neigh", "replace", &back, "lladdr", &prev_mac, "dev", "west", "nud", "permanent"])?;
    let sink = format!("{SINK_PREFIX}/24");
    let gen_host = format!("{GEN_HOST}/32");
    let with_objects = (|| -> Result<()> {
        ip(&["nexthop", "add", "id", "1", "via", &gw1, "dev", "east"])?;
        ip(&["nexthop", "add", "id", "2", "via", &gw2, "dev", "east"])?;
        ip(&["nexthop", "add", "id", "10", "group", "1/2"])?;
        ip(&["route", "add", &sink, "nhid", "10"])
    })();
    let how = match with_objects {
        Ok(()) => "nexthop group of 2 (ip nexthop), fib_multipath_hash_policy=1".to_string(),
        Err(e) => {
            ip(&["route", "add", &sink, "nexthop", "via", &gw1, "dev", "east", "nexthop", "via", &gw2, "dev", "east"])?;
            format!("multipath route of 2 next hops, fib_multipath_hash_policy=1 (nexthop objects failed: {e})")
        }
    };
    ip(&["route", "add", &gen_host, "via", &back, "dev", "west"])?;
    Ok(how)
}

/// The generator program's one-entry config map, found through the program's map ids (the
/// map is not one of the switch maps `SwitchDataplane` keeps).
fn generator_config(tools: &mut SwitchDataplane) -> Result<Array<MapData, GeneratorConfig>> {
    let info = tools.program(PROGRAM_GENERATOR)?.info()?;
    let ids = info.map_ids()?.context("this kernel does not report a program's map ids")?;
    for id in ids {
        let data = MapData::from_id(id)?;
        if data.info()?.name_as_str() == Some(fabric_common::maps::GENERATOR) {
            return Ok(Map::from_map_data(data)?.try_into()?);
        }
    }
    bail!("the generator program uses no map named GENERATOR")
}

fn set_generator(map: &mut Array<MapData, GeneratorConfig>, dst: [u8; 6], src: [u8; 6], ttl: u8) -> Result<()> {
    map.set(0, GeneratorConfig::new(dst, src, ttl), 0)?;
    Ok(())
}

/// Per-CPU times from /proc/stat, in clock ticks: user, nice, system, idle, iowait, irq,
/// softirq, steal.
fn cpu_times() -> Result<Vec<[u64; 8]>> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let mut cpus = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(name) = fields.next() else { continue };
        let Some(n) = name.strip_prefix("cpu").and_then(|n| n.parse::<usize>().ok()) else { continue };
        let mut v = [0u64; 8];
        for (slot, f) in v.iter_mut().zip(fields) {
            *slot = f.parse().unwrap_or(0);
        }
        if cpus.len() <= n {
            cpus.resize(n + 1, [0; 8]);
        }
        cpus[n] = v;
    }
    Ok(cpus)
}

const SYSTEM: usize = 2;
const IDLE: usize = 3;
const IOWAIT: usize = 4;
const IRQ: usize = 5;
const SOFTIRQ: usize = 6;

fn pin_to_cpu(cpu: usize) -> Result<()> {
    // SAFETY: cpu_set_t is plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    anyhow::ensure!(cpu < libc::CPU_SETSIZE as usize, "CPU {cpu} out of range");
    // SAFETY: an index inside the set, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; valid set of the stated size.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("pinning the generator to CPU {cpu}"));
    }
    Ok(())
}

/// The last CPU this process may run on: where the generator runs.
fn generator_cpu() -> Result<usize> {
    // SAFETY: cpu_set_t is plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; a valid set of the stated size.
    if unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
    }
    (0..libc::CPU_SETSIZE as usize)
        .rev()
        // SAFETY: indexes below CPU_SETSIZE.
        .find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .context("no CPU in this process's affinity mask")
}

/// CPU time of the calling thread (the scheduler's precise runtime; with tick-based IRQ
/// accounting, as here, it includes the softirqs the thread runs when it re-enables them).
fn thread_cpu_s() -> f64 {
    // SAFETY: timespec is plain data, filled by the call.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid clock id and pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// The pid of `ksoftirqd/CPU`: softirq work the generator's thread defers runs there.
fn ksoftirqd_pid(cpu: usize) -> Option<u32> {
    let want = format!("ksoftirqd/{cpu}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim() == want).then_some(pid)
    })
}

/// utime + stime of a task, in clock ticks (0 if it cannot be read).
fn task_ticks(pid: Option<u32>) -> u64 {
    let Some(pid) = pid else { return 0 };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0 };
    let f: Vec<u64> = rest.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
}

/// One measurement of one path and frame size.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub sent: u64,
    pub delivered: u64,
    pub wall_s: f64,
    /// The path's CPU seconds: generator thread + ksoftirqd of its CPU + softirq of other CPUs.
    pub cpu_s: f64,
    /// CPU time of the pinned generator thread, which runs the whole path in its softirqs.
    pub generator_thread_s: f64,
    /// ksoftirqd of the generator's CPU (softirq work deferred out of the thread).
    pub ksoftirqd_s: f64,
    /// softirq seconds on the other CPUs (work that left the pinned CPU; expected ~0).
    pub other_cpus_softirq_s: f64,
    /// Cross-check from /proc/stat: system + irq + softirq of the generator's CPU plus softirq of
    /// the other CPUs. Counts other processes' kernel time on that CPU too.
    pub proc_stat_cpu_s: f64,
    /// Non-idle share of the generator's CPU over the sample, anyone's work.
    pub pinned_cpu_busy: f64,
}

impl Sample {
    fn delivered_pps(&self) -> f64 {
        self.delivered as f64 / self.wall_s
    }

    fn pps_per_core(&self) -> f64 {
        self.delivered as f64 / self.cpu_s.max(1e-9)
    }

    fn pps_per_core_proc_stat(&self) -> f64 {
        self.delivered as f64 / self.proc_stat_cpu_s.max(1e-9)
    }
}

/// Frames the sink has counted (all chains' sinks share one instance and port index).
fn sink_packets(tools: &mut SwitchDataplane) -> Result<u64> {
    Ok(tools.port_counters(0)?.rx_packets)
}

struct Cpu {
    index: usize,
    ksoftirqd: Option<u32>,
    tick_s: f64,
}

fn measure(tools: &mut SwitchDataplane, chain: &Chain, cpu: &Cpu, pkt: &[u8], duration: Duration) -> Result<Sample> {
    let before = sink_packets(tools)?;
    let gen_ifindex = chain.gen_ifindex;
    let prog: &Xdp = tools.program(PROGRAM_GENERATOR)?;
    let (sent, wall, thread_s, k0, k1, t0, t1) = in_named(&chain.nodes[0], || {
        pin_to_cpu(cpu.index)?;
        let ctx = xdp_md(pkt.len(), gen_ifindex);
        let (t0, k0, c0) = (cpu_times()?, task_ticks(cpu.ksoftirqd), thread_cpu_s());
        let start = Instant::now();
        let mut sent = 0u64;
        while start.elapsed() < duration {
            prog.test_run(TestRunOptions {
                data_in: Some(pkt),
                ctx_in: Some(&ctx),
                repeat: FRAMES_PER_CALL,
                attrs: TestRunAttrs::new().xdp_live_frames(BATCH),
                ..Default::default()
            })
            .context("BPF_PROG_TEST_RUN with live frames")?;
            sent += u64::from(FRAMES_PER_CALL);
        }
        let wall = start.elapsed();
        let thread_s = thread_cpu_s() - c0;
        std::thread::sleep(SETTLE);
        Ok((sent, wall, thread_s, k0, task_ticks(cpu.ksoftirqd), t0, cpu_times()?))
    })?;
    let delivered = sink_packets(tools)? - before;
    let d = |c: usize, f: usize| t1[c][f].saturating_sub(t0[c][f]) as f64 * cpu.tick_s;
    let c = cpu.index;
    let pinned_kernel = d(c, SYSTEM) + d(c, IRQ) + d(c, SOFTIRQ);
    let pinned_total: f64 = (0..8).map(|f| d(c, f)).sum();
    let pinned_busy = pinned_total - d(c, IDLE) - d(c, IOWAIT);
    let others: f64 = (0..t1.len().min(t0.len())).filter(|&o| o != c).map(|o| d(o, SOFTIRQ)).sum();
    let ksoftirqd_s = k1.saturating_sub(k0) as f64 * cpu.tick_s;
    Ok(Sample {
        sent,
        delivered,
        wall_s: wall.as_secs_f64(),
        cpu_s: thread_s + ksoftirqd_s + others,
        generator_thread_s: thread_s,
        ksoftirqd_s,
        other_cpus_softirq_s: others,
        proc_stat_cpu_s: pinned_kernel + others,
        pinned_cpu_busy: if pinned_total > 0.0 { pinned_busy / pinned_total } else { 0.0 },
    })
}

#[derive(Debug, Serialize)]
pub struct ForwardingRow {
    pub path: Path,
    /// The switches' routing mode (the XDP paths).
    pub mode: Option<String>,
    pub label: &'static str,
    pub frame_bytes: usize,
    /// Medians over the rounds.
    pub delivered_pps: f64,
    pub pps_per_core: f64,
    pub ns_per_packet_per_core: f64,
    /// The same from /proc/stat CPU times (see `Sample::proc_stat_cpu_s`).
    pub pps_per_core_proc_stat: f64,
    /// Share of the wall time the path had its CPU (cpu_s / wall_s): under 1 when other work
    /// on the machine shared the generator's CPU.
    pub cpu_share: f64,
    pub pinned_cpu_busy: f64,
    pub loss: f64,
    /// For the 3-hop paths: (ns/packet - baseline ns/packet) / 3, the forwarding alone.
    pub ns_per_hop: Option<f64>,
    /// 1e9 / (3 x ns_per_hop): 3-hop forwarding capacity of one core without generator and sink.
    pub forwarding_only_pps_per_core: Option<f64>,
    pub samples: Vec<Sample>,
}

/// One routing mode with the congestion model on, against the kernel of the same run.
#[derive(Debug, Serialize)]
pub struct ModeRatio {
    pub mode: String,
    /// XDP packets per core-second / kernel packets per core-second, end to end.
    pub vs_kernel_per_core: f64,
    /// Median over rounds of the ratio within one round.
    pub vs_kernel_per_core_median_of_rounds: f64,
    /// Kernel ns per hop / XDP ns per hop (generator and sink costs removed).
    pub vs_kernel_forwarding_only: Option<f64>,
    /// ns per hop over the plain switch's (`eecmp`, model off): what the mode and the model add.
    pub ns_per_hop_over_plain: Option<f64>,
    /// ns per hop over parse + fixed redirect's: the whole switch over the floor.
    pub ns_per_hop_over_floor: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct ForwardingRatio {
    pub frame_bytes: usize,
    /// The plain switch (eecmp, no congestion model) over the kernel, packets per core.
    pub xdp_vs_kernel_per_core: f64,
    /// The same with /proc/stat CPU times.
    pub xdp_vs_kernel_per_core_proc_stat: f64,
    /// Median over rounds of the ratio within one round (the two cases ran seconds apart).
    pub xdp_vs_kernel_per_core_median_of_rounds: f64,
    /// Kernel ns per hop / XDP ns per hop (generator and sink costs removed).
    pub xdp_vs_kernel_forwarding_only: Option<f64>,
    /// Parse + fixed redirect over the kernel: the most any XDP switch on this path can reach.
    pub floor_vs_kernel_per_core: f64,
    /// The plain switch's ns per hop over the floor's.
    pub plain_ns_per_hop_over_floor: Option<f64>,
    /// Every measured mode with the congestion model on.
    pub modes: Vec<ModeRatio>,
}

#[derive(Debug, Serialize)]
pub struct ForwardingReport {
    pub method: String,
    /// The routing modes measured with the congestion model on.
    pub modes: Vec<String>,
    pub cpu_accounting: String,
    pub generator_cpu: usize,
    pub rounds: usize,
    pub seconds_per_sample: f64,
    pub live_frame_batch: u32,
    pub frames_per_call: u32,
    pub kernel_routes: String,
    pub rows: Vec<ForwardingRow>,
    pub ratios: Vec<ForwardingRatio>,
    pub target: f64,
    /// The smallest end-to-end XDP/kernel ratio over the modes (congestion model on) and frame
    /// sizes.
    pub worst_ratio: f64,
    pub worst_mode: String,
    pub meets_target: bool,
}

/// What `fabric-bench forwarding` measures, and for how long.
#[derive(Clone, Debug)]
pub struct Options {
    /// Routing modes to measure with the congestion model on.
    pub modes: Vec<HashMode>,
    pub rounds: usize,
    pub seconds: f64,
    pub sizes: Vec<usize>,
}

impl Options {
    fn check(&self) -> Result<()> {
        if self.modes.is_empty() {
            bail!("--modes: name at least one routing mode");
        }
        if self.rounds == 0 {
            bail!("--rounds: at least 1");
        }
        if !(0.05..=60.0).contains(&self.seconds) {
            bail!("--seconds: {} is outside 0.05..=60", self.seconds);
        }
        if let Some(&s) = self.sizes.iter().find(|&&s| !(64..=1500).contains(&s)) {
            bail!("--sizes: {s} bytes is outside 64..=1500");
        }
        if self.sizes.is_empty() {
            bail!("--sizes: name at least one frame size");
        }
        Ok(())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn forwarding(opts: &Options) -> Result<ForwardingReport> {
    opts.check()?;
    netns::require_capabilities()?;
    remove_stale()?;
    let mut guard = Namespaces(Vec::new());
    let result = run(&mut guard, opts);
    drop(guard);
    result
}

/// One measured case: a frame size, a chain, and the routing mode its switches are set to.
struct Case {
    frame: usize,
    chain: usize,
    mode: Option<HashMode>,
}

/// The switches of an XDP chain set to `mode` (the flowlet gap as built).
fn set_mode(chain: &mut Chain, mode: HashMode) -> Result<()> {
    let gap = fabric_common::balance::DEFAULT_FLOWLET_GAP_NS as u32;
    for (k, dp) in chain.switches.iter_mut().enumerate() {
        dp.set_config(SwitchConfig::new(mode, k as u32 + 1, 0).with_flowlet_gap(gap))?;
    }
    Ok(())
}

fn run(guard: &mut Namespaces, opts: &Options) -> Result<ForwardingReport> {
    let index = generator_cpu()?;
    // SAFETY: sysconf only reads a constant of the system.
    let tick_s = 1.0 / (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64);
    let cpu = Cpu { index, ksoftirqd: ksoftirqd_pid(index), tick_s };
    // One instance of the object runs the generators, the sinks and the kernel chain's XDP_PASS.
    let mut tools = SwitchDataplane::load()?;
    let mut chains = Vec::new();
    for path in Path::ALL {
        chains.push(build_chain(path, guard, &mut tools, PLAIN_MODE)?);
    }
    let mut gen_cfg = generator_config(&mut tools)?;
    let frames: Vec<Vec<u8>> = opts
        .sizes
        .iter()
        .map(|&size| {
            let f = frame(&FrameSpec { src_mac: GEN_MAC, ttl: TTL, payload_len: size - HEADERS, ..Default::default() });
            assert_eq!(f.len(), size, "benchmark frame size");
            f
        })
        .collect();

    // Cases: frame size x path (x mode on the congestion chain); rounds outermost so that slow
    // phases of the machine hit all.
    let mut cases = Vec::new();
    for f in 0..frames.len() {
        for (c, chain) in chains.iter().enumerate() {
            if chain.path == Path::XdpCongestion {
                cases.extend(opts.modes.iter().map(|&m| Case { frame: f, chain: c, mode: Some(m) }));
            } else {
                let mode = (chain.path == Path::Xdp).then_some(PLAIN_MODE);
                cases.push(Case { frame: f, chain: c, mode });
            }
        }
    }
    let sample = Duration::from_secs_f64(opts.seconds);
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); cases.len()];
    for round in 0..=opts.rounds {
        for (i, case) in cases.iter().enumerate() {
            let chain = &mut chains[case.chain];
            if let (Some(mode), Path::XdpCongestion) = (case.mode, chain.path) {
                set_mode(chain, mode)?;
            }
            set_generator(&mut gen_cfg, chain.first_hop_mac, GEN_MAC, TTL)?;
            let duration = if round == 0 { WARMUP } else { sample };
            let s = measure(&mut tools, chain, &cpu, &frames[case.frame], duration)?;
            if round == 0 {
                // Warm-up, and a check that the path forwards at all.
                if s.delivered * 10 < s.sent * 9 {
                    bail!(
                        "path {:?} ({}-byte frames, mode {:?}) delivered {} of {} frames to the sink: the chain is \
                         misconfigured",
                        chain.path,
                        frames[case.frame].len(),
                        case.mode.map(HashMode::as_str),
                        s.delivered,
                        s.sent
                    );
                }
            } else {
                samples[i].push(s);
            }
        }
    }
    let rows = rows(&cases, &chains, &frames, samples);
    let ratios: Vec<ForwardingRatio> = opts.sizes.iter().map(|&size| ratios(&rows, size)).collect();
    let (worst_ratio, worst_mode) = ratios
        .iter()
        .flat_map(|r| {
            r.modes.iter().map(move |m| (m.vs_kernel_per_core, format!("{} ({} bytes)", m.mode, r.frame_bytes)))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((0.0, String::new()));
    let c = cpu.index;
    Ok(ForwardingReport {
        modes: opts.modes.iter().map(|m| m.as_str().to_string()).collect(),
        method: method(c, opts),
        cpu_accounting: format!(
            "packets per core = delivered packets / CPU seconds of the path; CPU seconds = the pinned generator \
             thread's CPU time (CLOCK_THREAD_CPUTIME_ID: with tick-based IRQ accounting it includes the softirqs - \
             veth NAPI, XDP, kernel forwarding - that run when the thread re-enables them after each batch) + \
             ksoftirqd/{c} + softirq time of the other CPUs (/proc/stat); per-task accounting leaves out other \
             processes sharing CPU {c}. Cross-check (pps_per_core_proc_stat): system + irq + softirq of CPU {c} + \
             softirq of the other CPUs from /proc/stat, which also charges other processes' kernel time"
        ),
        generator_cpu: c,
        rounds: opts.rounds,
        seconds_per_sample: opts.seconds,
        live_frame_batch: BATCH,
        frames_per_call: FRAMES_PER_CALL,
        kernel_routes: chains.iter().find_map(|c| c.kernel_routes.clone()).unwrap_or_default(),
        rows,
        ratios,
        target: TARGET,
        worst_ratio,
        worst_mode,
        meets_target: worst_ratio >= TARGET,
    })
}

fn method(c: usize, opts: &Options) -> String {
    format!(
        "chains of namespaces joined by veth pairs: gen -> RTSW -> CTSW -> RTSW -> sink, and gen -> sink as the 0-hop \
         baseline; one flow of RoCEv2 frames (UDP 4791) from the object's traffic_generator program, run with \
         BPF_PROG_TEST_RUN in live-frame mode (XDP_TX, batch {BATCH}, {FRAMES_PER_CALL} frames per call) from a \
         thread pinned to CPU {c} with sched_setaffinity; veth runs its peer's NAPI on the sending CPU, so the whole \
         path runs on CPU {c}; frames are counted at the sink (its veth runs fabric_switch with the port registered \
         and no routes: per-CPU counter, XDP_DROP); the plain XDP chain runs {} without the congestion model, the \
         other XDP chain runs the model and is set to each mode in turn; median of {} rounds of {:.2} s per case \
         after a {:.1} s warm-up, cases interleaved within each round",
        PLAIN_MODE.as_str(),
        opts.rounds,
        opts.seconds,
        WARMUP.as_secs_f64()
    )
}

fn rows(cases: &[Case], chains: &[Chain], frames: &[Vec<u8>], samples: Vec<Vec<Sample>>) -> Vec<ForwardingRow> {
    let mut rows: Vec<ForwardingRow> = cases
        .iter()
        .zip(samples)
        .map(|(case, s)| {
            let pps_per_core = median(s.iter().map(Sample::pps_per_core).collect());
            ForwardingRow {
                path: chains[case.chain].path,
                mode: case.mode.map(|m| m.as_str().to_string()),
                label: chains[case.chain].path.label(),
                frame_bytes: frames[case.frame].len(),
                delivered_pps: median(s.iter().map(Sample::delivered_pps).collect()),
                pps_per_core,
                ns_per_packet_per_core: 1e9 / pps_per_core,
                pps_per_core_proc_stat: median(s.iter().map(Sample::pps_per_core_proc_stat).collect()),
                cpu_share: median(s.iter().map(|x| x.cpu_s / x.wall_s).collect()),
                pinned_cpu_busy: median(s.iter().map(|x| x.pinned_cpu_busy).collect()),
                loss: median(s.iter().map(|x| 1.0 - x.delivered as f64 / x.sent.max(1) as f64).collect()),
                ns_per_hop: None,
                forwarding_only_pps_per_core: None,
                samples: s,
            }
        })
        .collect();
    for &size in frames.iter().map(Vec::len).collect::<Vec<_>>().iter() {
        let Some(base) = rows.iter().find(|r| r.path == Path::Baseline && r.frame_bytes == size) else { continue };
        let base = base.ns_per_packet_per_core;
        for r in rows.iter_mut().filter(|r| r.frame_bytes == size && r.path != Path::Baseline) {
            let hop = (r.ns_per_packet_per_core - base) / HOPS;
            if hop > 0.0 {
                r.ns_per_hop = Some(hop);
                r.forwarding_only_pps_per_core = Some(1e9 / (HOPS * hop));
            }
        }
    }
    rows
}

fn ratios(rows: &[ForwardingRow], size: usize) -> ForwardingRatio {
    let row = |p: Path| rows.iter().find(|r| r.path == p && r.frame_bytes == size).expect("row");
    let (x, k, floor) = (row(Path::Xdp), row(Path::Kernel), row(Path::ParseRedirect));
    let over = |a: &ForwardingRow, b: &ForwardingRow| a.ns_per_hop.zip(b.ns_per_hop).map(|(a, b)| a / b);
    let per_round = |a: &ForwardingRow| {
        median(a.samples.iter().zip(&k.samples).map(|(a, b)| a.pps_per_core() / b.pps_per_core()).collect())
    };
    let per_hop = |a: &ForwardingRow| match (a.ns_per_hop, k.ns_per_hop) {
        (Some(xh), Some(kh)) => Some(kh / xh),
        _ => None,
    };
    let modes = rows
        .iter()
        .filter(|r| r.path == Path::XdpCongestion && r.frame_bytes == size)
        .map(|q| ModeRatio {
            mode: q.mode.clone().unwrap_or_default(),
            vs_kernel_per_core: q.pps_per_core / k.pps_per_core,
            vs_kernel_per_core_median_of_rounds: per_round(q),
            vs_kernel_forwarding_only: per_hop(q),
            ns_per_hop_over_plain: over(q, x),
            ns_per_hop_over_floor: over(q, floor),
        })
        .collect();
    ForwardingRatio {
        frame_bytes: size,
        xdp_vs_kernel_per_core: x.pps_per_core / k.pps_per_core,
        xdp_vs_kernel_per_core_proc_stat: x.pps_per_core_proc_stat / k.pps_per_core_proc_stat,
        xdp_vs_kernel_per_core_median_of_rounds: per_round(x),
        xdp_vs_kernel_forwarding_only: per_hop(x),
        floor_vs_kernel_per_core: floor.pps_per_core / k.pps_per_core,
        plain_ns_per_hop_over_floor: over(x, floor),
        modes,
    }
}

pub fn print_forwarding(r: &ForwardingReport) {
    println!(
        "forwarding: gen -> RTSW -> CTSW -> RTSW -> sink over veths; XDP live-frame generator (batch {}) pinned to CPU \
         {}, the whole path on that CPU; counted at the sink; median of {} x {:.2} s per case",
        r.live_frame_batch, r.generator_cpu, r.rounds, r.seconds_per_sample
    );
    println!(
        "per core = delivered / CPU s of the path (generator thread incl. its softirqs + ksoftirqd/{} + other CPUs' \
         softirq); cross-check: /proc/stat system+irq+softirq of CPU {}",
        r.generator_cpu, r.generator_cpu
    );
    println!("kernel path: {}", r.kernel_routes);
    println!(
        "{:>5} {:<35} {:<10} {:>11} {:>6} {:>5} {:>11} {:>11} {:>7} {:>7} {:>12}",
        "frame",
        "path",
        "mode",
        "delivered/s",
        "share",
        "loss",
        "pkts/core-s",
        "(/proc/stat)",
        "ns/pkt",
        "ns/hop",
        "3-hop fwd/core"
    );
    for row in &r.rows {
        println!(
            "{:>5} {:<35} {:<10} {:>11.0} {:>5.0}% {:>4.1}% {:>11.0} {:>12.0} {:>7.1} {:>7} {:>14}",
            row.frame_bytes,
            row.label,
            row.mode.as_deref().unwrap_or("-"),
            row.delivered_pps,
            row.cpu_share * 100.0,
            row.loss * 100.0,
            row.pps_per_core,
            row.pps_per_core_proc_stat,
            row.ns_per_packet_per_core,
            row.ns_per_hop.map_or("-".into(), |v| format!("{v:.1}")),
            row.forwarding_only_pps_per_core.map_or("-".into(), |v| format!("{v:.0}")),
        );
    }
    println!("(share: the path's CPU time over wall time - under 100% when other work shared the CPU)");
    let plain = PLAIN_MODE.as_str();
    for q in &r.ratios {
        println!(
            "XDP / kernel, {:>4}-byte frames, plain switch ({plain}, no model): {:.2}x packets per core end to \
             end (per-round median {:.2}x, /proc/stat {:.2}x){}",
            q.frame_bytes,
            q.xdp_vs_kernel_per_core,
            q.xdp_vs_kernel_per_core_median_of_rounds,
            q.xdp_vs_kernel_per_core_proc_stat,
            q.xdp_vs_kernel_forwarding_only.map_or(String::new(), |v| format!("; {v:.2}x per hop, forwarding only")),
        );
        println!(
            "  floor (parse + fixed redirect): {:.2}x per core; the plain switch costs {} its ns/hop",
            q.floor_vs_kernel_per_core,
            q.plain_ns_per_hop_over_floor.map_or("-".into(), |v| format!("{v:.2}x")),
        );
        for m in &q.modes {
            println!(
                "  with the congestion model, {:<10} {:.2}x per core (per-round median {:.2}x){}{}{}",
                m.mode,
                m.vs_kernel_per_core,
                m.vs_kernel_per_core_median_of_rounds,
                m.vs_kernel_forwarding_only.map_or(String::new(), |v| format!("; {v:.2}x per hop")),
                m.ns_per_hop_over_plain.map_or(String::new(), |v| format!("; {v:.2}x the plain switch's ns/hop")),
                m.ns_per_hop_over_floor.map_or(String::new(), |v| format!(", {v:.2}x the floor's")),
            );
        }
    }
    let verdict = if r.meets_target { "meets" } else { "MISSES" };
    println!(
        "worst end-to-end ratio with the congestion model {:.2}x, {} ({verdict} the {:.0}x target)",
        r.worst_ratio, r.worst_mode, r.target
    );
}
