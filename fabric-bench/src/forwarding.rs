//! `fabric-bench forwarding`: packets per second per core through a 3-hop path (RTSW, CTSW,
//! RTSW) forwarded by the XDP switch, against the same path forwarded by the Linux kernel, and a
//! 0-hop baseline (the generator's frames straight back to it), all measured in the same run.
//!
//! Each path is a ring of namespaces joined by veth pairs: gen → r1 → c → r2 → gen (the
//! baseline: gen → gen, one veth pair whose both ends are the generator's). Frames leave the
//! generator's namespace by its veth "east" and come back by "west". veth hands frames to its
//! peer's NAPI on the sending CPU, so the whole path runs on one CPU. Two drivers:
//!
//! - live frames (the default where the kernel allows it): the object's `traffic_generator`
//!   program run with BPF_PROG_TEST_RUN in live-frame mode (XDP_TX out of "east") from a thread
//!   pinned to one CPU. "west" runs the switch program with its port registered and no routes,
//!   so every frame is counted (per-CPU port counters) and dropped (XDP_DROP, reason no-route).
//!   CPU time is the generator thread's own (which includes the softirqs it runs) plus
//!   ksoftirqd and other CPUs' softirq time; /proc/stat cross-checks.
//! - loop (where live frames are refused, as by some sandboxes' security modules): "west" runs
//!   the object's `traffic_loop`, which rewrites each arriving frame as the generator would and
//!   redirects it out of "east" again. A thread pinned to one CPU sends a few frames once from
//!   a packet socket; they then circulate in softirq on that CPU, each lap one packet through
//!   the path, counted per CPU by the loop program. CPU time is the softirq time of every CPU
//!   (/proc/stat); ksoftirqd's own runtime cross-checks. The loop program drops every frame once
//!   the lease the benchmark keeps moving ahead runs out, so a killed benchmark leaves no CPU
//!   spinning.
//!
//! Namespaces are named `fbfw-<pid>-…`, use 198.18.0.0/15 addresses only, and are removed on
//! the way out, error or not (and, if a run was killed, by the next run).
use std::{
    net::Ipv4Addr,
    os::fd::AsRawFd as _,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use aya::{
    maps::{Array, MapData, PerCpuArray},
    programs::{TestRun as _, TestRunAttrs, TestRunOptions, Xdp},
};
use fabric_common::{
    config::{GeneratorConfig, HashMode, PortInfo, SwitchConfig},
    route::{EcmpGroup, GroupMember},
};
use serde::Serialize;

use fabric_testkit::fixture::{FrameSpec, frame, xdp_md};
use fabric_user::{
    dataplane::{PROGRAM_BENCH_PARSE_REDIRECT, PROGRAM_GENERATOR, PROGRAM_LOOP, PROGRAM_PASS, SwitchDataplane},
    sys::netns::{self, ifindex, in_named, ip, raw_socket},
};

const PREFIX: &str = "fbfw-";
/// Frames per BPF_PROG_TEST_RUN call (tens of milliseconds of work).
const FRAMES_PER_CALL: u32 = 1 << 15;
/// Live frames sent per batch: one NAPI budget, so that a batch crosses the whole path in one
/// softirq run (4 NAPI polls x 64 stay under netdev_budget = 300).
const BATCH: u32 = 64;
const WARMUP: Duration = Duration::from_millis(300);
/// After the last call (or, for the loop, after the first frames): lets stragglers (a softirq
/// deferred to ksoftirqd) come back.
const SETTLE: Duration = Duration::from_millis(20);
/// Frames sent into a loop: one NAPI budget, like a live-frame batch.
const SEED_FRAMES: u32 = BATCH;
/// How often the loop's lease is moved ahead while it is measured.
const LEASE_REFRESH: Duration = Duration::from_millis(10);
/// The lease reaches this many refresh periods ahead at the loop's own pace (about 0.2 s)...
const LEASE_PERIODS: u64 = 20;
/// ...and at least this many laps ahead (0.2-5 s at the paths' rates: enough to outlast the
/// sending of the first frames, which can run the loop for a while before it returns).
const LEASE_MIN_LAPS: u64 = 1 << 21;
/// How long a loop may take to drain once its lease is withdrawn.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
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
/// Every ring's "west" (where frames come back to the generator's namespace) has this MAC (one
/// program instance serves all chains).
const SINK_MAC: [u8; 6] = [0x02, 0xbf, 0x77, 0xff, 0, 0x01];
const EAST: u8 = 1;
const WEST: u8 = 2;

/// The MAC of switch `k`'s port onwards round the ring (`EAST`) or back towards the generator
/// (`WEST`).
fn switch_mac(k: usize, side: u8) -> [u8; 6] {
    [0x02, 0xbf, 0x77, k as u8, side, 0x01]
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Path {
    /// The generator's frames straight back to it: the cost of generating and receiving.
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
            Path::Baseline => "baseline: gen -> gen (0 hops)",
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

/// What sends the frames and counts them (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Driver {
    /// Live frames where the kernel allows them, the loop where it refuses them.
    Auto,
    /// BPF_PROG_TEST_RUN with live frames.
    LiveFrames,
    /// A few frames circulating through the path and back, redirected by `traffic_loop`.
    Loop,
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

/// One ring of namespaces: `nodes[0]` is the generator's, where frames leave ("east") and come
/// back ("west"); the others are the switches.
struct Chain {
    path: Path,
    nodes: Vec<String>,
    /// The generator's "east", where every frame leaves (in `nodes[0]`).
    gen_ifindex: u32,
    /// The MAC the generator writes as destination: the first hop's port.
    first_hop_mac: [u8; 6],
    /// How the kernel chain routes (nexthop objects, or a multipath route as a fallback).
    kernel_routes: Option<String>,
    /// The switches' data planes (XDP chain); dropping them detaches the programs.
    switches: Vec<SwitchDataplane>,
}

/// The namespaces of a ring, created, with loopback up and IPv6 off.
fn create_nodes(base: &str, switches: usize, guard: &mut Namespaces) -> Result<Vec<String>> {
    let mut nodes = vec![format!("{base}-gen")];
    nodes.extend((1..=switches).map(|k| format!("{base}-s{k}")));
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
    Ok(nodes)
}

/// The MAC of node `i`'s "east" (towards the next node).
fn east_mac(i: usize) -> [u8; 6] {
    if i == 0 { GEN_MAC } else { switch_mac(i, EAST) }
}

/// The MAC of node `i`'s "west" (from the previous node).
fn west_mac(i: usize) -> [u8; 6] {
    if i == 0 { SINK_MAC } else { switch_mac(i, WEST) }
}

fn build_chain(
    path: Path,
    guard: &mut Namespaces,
    tools: &mut SwitchDataplane,
    mode: HashMode,
    driver: Driver,
) -> Result<Chain> {
    let base = format!("{PREFIX}{}-{}", std::process::id(), path.tag());
    let nodes = create_nodes(&base, path.switches(), guard)?;
    let n = nodes.len();
    // Link i joins node i's "east" and node (i+1) mod n's "west": the last link closes the ring
    // at the generator's namespace (for the baseline, the only link does).
    for i in 0..n {
        let (here, next) = (&nodes[i], &nodes[(i + 1) % n]);
        let (a, b) = (mac_str(east_mac(i)), mac_str(west_mac((i + 1) % n)));
        in_named(here, || {
            ip(&[
                "link", "add", "east", "address", &a, "type", "veth", "peer", "name", "west", "address", &b, "netns",
                next,
            ])?;
            ip(&["link", "set", "dev", "east", "up"])
        })?;
        in_named(next, || ip(&["link", "set", "dev", "west", "up"]))?;
    }
    let (switches, kernel_routes) = set_up_switches(path, &nodes, tools, mode)?;
    let gen_ifindex = in_named(&nodes[0], || {
        if driver == Driver::Loop {
            tools.attach_program(PROGRAM_LOOP, ifindex("west")?)?;
        } else {
            // The generator program is also attached, to a veth of its own that receives
            // nothing: BPF_PROG_TEST_RUN then finds it in the XDP dispatcher already instead of
            // swapping it in and out around every call. Not to "west": it would bounce whatever
            // comes back into the fabric again with a fresh TTL, forever.
            ip(&["link", "add", "park", "type", "veth", "peer", "name", "park-peer"])?;
            tools.attach_program(PROGRAM_GENERATOR, ifindex("park")?)?;
            // The sink: its port registered, no routes: every frame counted, then dropped.
            let idx = ifindex("west")?;
            tools.add_port(idx, PortInfo::new(0, SINK_MAC))?;
            tools.attach(idx)?;
        }
        ifindex("east")
    })
    .with_context(|| format!("the generator's namespace {}", nodes[0]))?;
    Ok(Chain { path, first_hop_mac: west_mac(1 % n), nodes, gen_ifindex, kernel_routes, switches })
}

/// What forwards in the switch namespaces of a ring: the XDP switch, parse + fixed redirect, or
/// the kernel (then also how it routes).
fn set_up_switches(
    path: Path,
    nodes: &[String],
    tools: &mut SwitchDataplane,
    mode: HashMode,
) -> Result<(Vec<SwitchDataplane>, Option<String>)> {
    let n = nodes.len();
    let mut switches = Vec::new();
    let mut kernel_routes = None;
    match path {
        Path::Baseline => {}
        Path::Xdp | Path::XdpCongestion => {
            for (k, node) in nodes.iter().enumerate().skip(1) {
                let dp = in_named(node, || xdp_switch(k, west_mac((k + 1) % n), path == Path::XdpCongestion, mode))
                    .with_context(|| format!("XDP switch in {node}"))?;
                switches.push(dp);
            }
        }
        Path::ParseRedirect => {
            for (k, node) in nodes.iter().enumerate().skip(1) {
                let mut dp = SwitchDataplane::load()?;
                in_named(node, || {
                    // EGRESS slot 0 is "east": every parsed frame goes on round the ring.
                    dp.add_port(ifindex("east")?, PortInfo::new(0, switch_mac(k, EAST)))?;
                    dp.attach_program(PROGRAM_BENCH_PARSE_REDIRECT, ifindex("west")?)
                })
                .with_context(|| format!("parse + redirect in {node}"))?;
                switches.push(dp);
            }
        }
        Path::Kernel => {
            for (k, node) in nodes.iter().enumerate().skip(1) {
                let routes = in_named(node, || kernel_switch(k, west_mac((k + 1) % n), east_mac(k - 1)))
                    .with_context(|| format!("kernel forwarding in {node}"))?;
                kernel_routes = Some(routes);
            }
            // veth delivers XDP_TX / redirected frames only to a peer with NAPI: give the first
            // switch's ingress a bare XDP_PASS, so the kernel receives the generator's frames.
            in_named(&nodes[1], || tools.attach_program(PROGRAM_PASS, ifindex("west")?))?;
        }
    }
    Ok((switches, kernel_routes))
}

/// XDP switch `k` of a ring (calling thread inside its namespace): towards the generator's
/// host a route to the previous node, towards the sink prefix one to `next_mac`.
fn xdp_switch(k: usize, next_mac: [u8; 6], congestion: bool, mode: HashMode) -> Result<SwitchDataplane> {
    let mut dp = SwitchDataplane::load()?;
    let (west, east) = (ifindex("west")?, ifindex("east")?);
    dp.add_port(west, PortInfo::new(0, switch_mac(k, WEST)))?;
    dp.add_port(east, PortInfo::new(1, switch_mac(k, EAST)))?;
    let gap = fabric_common::balance::DEFAULT_FLOWLET_GAP_NS as u32;
    dp.set_config(SwitchConfig::new(mode, k as u32, 0).with_flowlet_gap(gap))?;
    let to_sink = GroupMember { port: 1, dst_mac: next_mac, src_mac: switch_mac(k, EAST) };
    let to_gen = GroupMember { port: 0, dst_mac: east_mac(k - 1), src_mac: switch_mac(k, WEST) };
    dp.set_group(0, &EcmpGroup::from_members(&[to_sink]).expect("fits"))?;
    dp.set_group(1, &EcmpGroup::from_members(&[to_gen]).expect("fits"))?;
    dp.set_route_v4(SINK_PREFIX, 24, 0)?;
    dp.set_route_v4(GEN_HOST, 32, 1)?;
    if congestion {
        let c = fabric_user::model::topology::Congestion::default();
        dp.set_qos(c.qos_config(&c.rtsw))?;
        dp.set_port_rate(0, 400_000_000_000)?;
        dp.set_port_rate(1, 400_000_000_000)?;
        dp.refresh_wcmp()?;
    }
    dp.attach(west)?;
    dp.attach(east)?;
    Ok(dp)
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

/// Laps so far: over every CPU, and on the CPU with the most (what the lease is compared with).
fn laps_now(map: &PerCpuArray<MapData, u64>) -> Result<(u64, u64)> {
    let per_cpu = map.get(&0, 0).context("reading the loop's lap counter")?;
    Ok((per_cpu.iter().sum(), per_cpu.iter().copied().max().unwrap_or(0)))
}

/// Whether this kernel lets BPF_PROG_TEST_RUN send live frames: one frame from the generator
/// out of a veth of a throw-away namespace. The error says why not.
fn probe_live_frames(guard: &mut Namespaces, tools: &mut SwitchDataplane, pkt: &[u8]) -> Result<()> {
    let name = format!("{PREFIX}{}-probe", std::process::id());
    guard.0.push(name.clone());
    netns::create_named(&name)?;
    let prog: &Xdp = tools.program(PROGRAM_GENERATOR)?;
    let probed = in_named(&name, || {
        ip(&["link", "add", "park", "type", "veth", "peer", "name", "park-peer"])?;
        ip(&["link", "set", "dev", "park", "up"])?;
        let ctx = xdp_md(pkt.len(), ifindex("park")?);
        prog.test_run(TestRunOptions {
            data_in: Some(pkt),
            ctx_in: Some(&ctx),
            repeat: 1,
            attrs: TestRunAttrs::new().xdp_live_frames(1),
            ..Default::default()
        })
        .context("BPF_PROG_TEST_RUN with live frames")?;
        Ok(())
    });
    netns::delete_named(&name)?;
    guard.0.retain(|n| *n != name);
    probed
}

/// The driver to use: `auto` becomes live frames if the probe passes, the loop if not (and why).
fn resolve_driver(
    wanted: Driver,
    guard: &mut Namespaces,
    tools: &mut SwitchDataplane,
    pkt: &[u8],
) -> Result<(Driver, Option<String>)> {
    if wanted != Driver::Auto {
        return Ok((wanted, None));
    }
    match probe_live_frames(guard, tools, pkt) {
        Ok(()) => Ok((Driver::LiveFrames, None)),
        Err(e) => Ok((Driver::Loop, Some(format!("live frames refused here ({e:#}): the loop drives instead")))),
    }
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

/// What the CPUs did between two readings of [`cpu_times`], in seconds, seen from the CPU the
/// path runs on.
struct StatDelta {
    /// system + irq + softirq of that CPU.
    pinned_kernel_s: f64,
    /// softirq of every CPU.
    softirq_s: f64,
    /// softirq of the other CPUs.
    others_softirq_s: f64,
    /// Non-idle share of that CPU, anyone's work.
    pinned_busy: f64,
}

impl StatDelta {
    fn between(t0: &[[u64; 8]], t1: &[[u64; 8]], cpu: &Cpu) -> Self {
        let d = |c: usize, f: usize| t1[c][f].saturating_sub(t0[c][f]) as f64 * cpu.tick_s;
        let c = cpu.index;
        let softirq = |o: usize| d(o, SOFTIRQ);
        let cpus = 0..t1.len().min(t0.len());
        let pinned_total: f64 = (0..8).map(|f| d(c, f)).sum();
        let pinned_busy = pinned_total - d(c, IDLE) - d(c, IOWAIT);
        StatDelta {
            pinned_kernel_s: d(c, SYSTEM) + d(c, IRQ) + d(c, SOFTIRQ),
            softirq_s: cpus.clone().map(softirq).sum(),
            others_softirq_s: cpus.filter(|&o| o != c).map(softirq).sum(),
            pinned_busy: if pinned_total > 0.0 { pinned_busy / pinned_total } else { 0.0 },
        }
    }
}

const SYSTEM: usize = 2;
const IDLE: usize = 3;
const IOWAIT: usize = 4;
const IRQ: usize = 5;
const SOFTIRQ: usize = 6;

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
    /// The path's CPU seconds. Live frames: generator thread + ksoftirqd of its CPU + softirq of
    /// other CPUs. Loop: softirq of every CPU (/proc/stat).
    pub cpu_s: f64,
    /// CPU time of the pinned generator thread, which runs the whole path in its softirqs (live
    /// frames; 0 with the loop, whose thread only sends the first frames).
    pub generator_thread_s: f64,
    /// ksoftirqd of the generator's CPU (softirq work deferred out of the thread).
    pub ksoftirqd_s: f64,
    /// softirq seconds on the other CPUs (work that left the pinned CPU; expected ~0).
    pub other_cpus_softirq_s: f64,
    /// A second measure of `cpu_s`. Live frames: system + irq + softirq of the generator's CPU
    /// plus softirq of the other CPUs (/proc/stat; counts other processes' kernel time on that
    /// CPU too). Loop: ksoftirqd's runtime plus softirq of the other CPUs.
    pub cross_check_cpu_s: f64,
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

    fn pps_per_core_cross_check(&self) -> f64 {
        self.delivered as f64 / self.cross_check_cpu_s.max(1e-9)
    }
}

/// Frames the sink (the generator's "west" with live frames) has counted: all chains' sinks share
/// one instance and port index.
fn sink_packets(tools: &mut SwitchDataplane) -> Result<u64> {
    Ok(tools.port_counters(0)?.rx_packets)
}

/// The CPU the paths run on, and what measures its time.
struct Cpu {
    index: usize,
    ksoftirqd: Option<u32>,
    tick_s: f64,
}

impl Cpu {
    /// The last CPU this process may run on.
    fn generators() -> Result<Self> {
        let index = generator_cpu()?;
        // SAFETY: sysconf only reads a constant of the system.
        let tick_s = 1.0 / (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64);
        Ok(Cpu { index, ksoftirqd: ksoftirqd_pid(index), tick_s })
    }
}

fn measure(tools: &mut SwitchDataplane, chain: &Chain, cpu: &Cpu, pkt: &[u8], duration: Duration) -> Result<Sample> {
    let before = sink_packets(tools)?;
    let gen_ifindex = chain.gen_ifindex;
    let prog: &Xdp = tools.program(PROGRAM_GENERATOR)?;
    let (sent, wall, thread_s, k0, k1, t0, t1) = in_named(&chain.nodes[0], || {
        fabric_user::sys::cpu::pin_thread(cpu.index)?;
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
            .context("BPF_PROG_TEST_RUN with live frames (`--driver loop` needs none)")?;
            sent += u64::from(FRAMES_PER_CALL);
        }
        let wall = start.elapsed();
        let thread_s = thread_cpu_s() - c0;
        std::thread::sleep(SETTLE);
        Ok((sent, wall, thread_s, k0, task_ticks(cpu.ksoftirqd), t0, cpu_times()?))
    })?;
    let delivered = sink_packets(tools)? - before;
    let stat = StatDelta::between(&t0, &t1, cpu);
    let others = stat.others_softirq_s;
    let ksoftirqd_s = k1.saturating_sub(k0) as f64 * cpu.tick_s;
    Ok(Sample {
        sent,
        delivered,
        wall_s: wall.as_secs_f64(),
        cpu_s: thread_s + ksoftirqd_s + others,
        generator_thread_s: thread_s,
        ksoftirqd_s,
        other_cpus_softirq_s: others,
        cross_check_cpu_s: stat.pinned_kernel_s + others,
        pinned_cpu_busy: stat.pinned_busy,
    })
}

/// Sends `count` copies of `frame` out of "east" (calling thread inside the generator's
/// namespace).
fn seed(frame: &[u8], count: u32) -> Result<()> {
    let fd = raw_socket("east")?;
    for _ in 0..count {
        // SAFETY: a valid socket, and a buffer of the stated length.
        let sent = unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if sent < 0 {
            return Err(std::io::Error::last_os_error()).context("sending a seed frame into the loop");
        }
    }
    Ok(())
}

/// A task's runtime in seconds, from its schedstat (0 if it cannot be read).
fn task_runtime_s(pid: Option<u32>) -> f64 {
    pid.and_then(|pid| fabric_user::sys::cpu::ThreadSched::of_task(pid).ok()).map_or(0.0, |t| t.run_ns as f64 / 1e9)
}

/// The generators' maps, shared by every chain: what they write, and the looping generator's
/// laps.
struct Generator {
    config: Array<MapData, GeneratorConfig>,
    laps: PerCpuArray<MapData, u64>,
}

impl Generator {
    fn lease(&mut self, cfg: GeneratorConfig, lease: u64) -> Result<()> {
        self.config.set(0, cfg.looping(cfg.out_ifindex, lease), 0).context("setting the loop's lease")
    }

    /// Keeps the lease ahead of the laps for `span`.
    fn run_for(&mut self, cfg: GeneratorConfig, span: Duration) -> Result<()> {
        let start = Instant::now();
        let mut last = laps_now(&self.laps)?.0;
        while start.elapsed() < span {
            std::thread::sleep(LEASE_REFRESH.min(span));
            let (sum, top) = laps_now(&self.laps)?;
            self.lease(cfg, top + ((sum - last) * LEASE_PERIODS).max(LEASE_MIN_LAPS))?;
            last = sum;
        }
        Ok(())
    }

    /// Withdraws the lease and waits until no frame circulates any more.
    fn drain(&mut self, cfg: GeneratorConfig) -> Result<()> {
        self.lease(cfg, 0)?;
        self.laps_when_still(Duration::from_millis(5), DRAIN_LIMIT).context("after the loop's lease was withdrawn")?;
        Ok(())
    }

    /// Laps so far (as [`laps_now`]), once two readings `poll` apart agree; an error after
    /// `limit`.
    fn laps_when_still(&self, poll: Duration, limit: Duration) -> Result<(u64, u64)> {
        let start = Instant::now();
        let mut last = laps_now(&self.laps)?;
        loop {
            std::thread::sleep(poll);
            let now = laps_now(&self.laps)?;
            if now == last {
                return Ok(now);
            }
            if start.elapsed() > limit {
                bail!("frames still circulated after {limit:?}");
            }
            last = now;
        }
    }
}

/// One measurement with the loop driver: seed frames from a thread pinned to the CPU, let them
/// circulate for `duration` while the lease is kept ahead, then drain the loop.
fn measure_loop(looper: &mut Generator, chain: &Chain, cpu: &Cpu, pkt: &[u8], duration: Duration) -> Result<Sample> {
    let cfg = GeneratorConfig::new(chain.first_hop_mac, GEN_MAC, TTL).looping(chain.gen_ifindex, 0);
    looper.lease(cfg, laps_now(&looper.laps)?.1 + LEASE_MIN_LAPS)?;
    let mut frame = pkt.to_vec();
    frame[..6].copy_from_slice(&chain.first_hop_mac);
    frame[6..12].copy_from_slice(&GEN_MAC);
    in_named(&chain.nodes[0], || {
        fabric_user::sys::cpu::pin_thread(cpu.index)?;
        seed(&frame, SEED_FRAMES)
    })?;
    looper.run_for(cfg, SETTLE)?;
    let (l0, t0, k0) = (laps_now(&looper.laps)?.0, cpu_times()?, task_runtime_s(cpu.ksoftirqd));
    let start = Instant::now();
    looper.run_for(cfg, duration)?;
    let (l1, t1, k1) = (laps_now(&looper.laps)?.0, cpu_times()?, task_runtime_s(cpu.ksoftirqd));
    let wall = start.elapsed();
    looper.drain(cfg)?;
    let stat = StatDelta::between(&t0, &t1, cpu);
    let laps = l1 - l0;
    Ok(Sample {
        sent: laps,
        delivered: laps,
        wall_s: wall.as_secs_f64(),
        cpu_s: stat.softirq_s,
        generator_thread_s: 0.0,
        ksoftirqd_s: k1 - k0,
        other_cpus_softirq_s: stat.others_softirq_s,
        cross_check_cpu_s: (k1 - k0) + stat.others_softirq_s,
        pinned_cpu_busy: stat.pinned_busy,
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
    /// The same with the second measure of CPU time (see `Sample::cross_check_cpu_s`).
    pub pps_per_core_cross_check: f64,
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
    /// The same with the second measure of CPU time.
    pub xdp_vs_kernel_per_core_cross_check: f64,
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
    /// What sent and counted the frames: live frames, or the loop.
    pub driver: Driver,
    /// Why `auto` chose the loop, when it did.
    pub driver_note: Option<String>,
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
    pub driver: Driver,
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
    crate::stats::median(&mut v)
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
    let cpu = Cpu::generators()?;
    // One instance of the object runs the generators, the sinks and the kernel chain's XDP_PASS.
    let mut tools = SwitchDataplane::load()?;
    let frames: Vec<Vec<u8>> = opts
        .sizes
        .iter()
        .map(|&size| {
            let f = frame(&FrameSpec { src_mac: GEN_MAC, ttl: TTL, payload_len: size - HEADERS, ..Default::default() });
            assert_eq!(f.len(), size, "benchmark frame size");
            f
        })
        .collect();
    let (driver, driver_note) = resolve_driver(opts.driver, guard, &mut tools, &frames[0])?;
    if let Some(note) = &driver_note {
        println!("{note}");
    }
    let mut chains = Vec::new();
    for path in Path::ALL {
        chains.push(build_chain(path, guard, &mut tools, PLAIN_MODE, driver)?);
    }
    let (config, laps) = tools.take_generator_maps()?;
    let mut generator = Generator { config, laps };

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
            let duration = if round == 0 { WARMUP } else { sample };
            let s = match driver {
                Driver::Loop => measure_loop(&mut generator, chain, &cpu, &frames[case.frame], duration)?,
                _ => {
                    generator.config.set(0, GeneratorConfig::new(chain.first_hop_mac, GEN_MAC, TTL), 0)?;
                    measure(&mut tools, chain, &cpu, &frames[case.frame], duration)?
                }
            };
            if round == 0 {
                // Warm-up, and a check that the path forwards at all: most live frames reach the
                // sink, and a loop's frames make many laps (a broken ring ends them in one).
                let broken = match driver {
                    Driver::Loop => (s.delivered < u64::from(SEED_FRAMES) * 100)
                        .then(|| format!("its {SEED_FRAMES} looping frames made only {} laps", s.delivered)),
                    _ => (s.delivered * 10 < s.sent * 9)
                        .then(|| format!("{} of {} live frames came back", s.delivered, s.sent)),
                };
                if let Some(what) = broken {
                    bail!(
                        "path {:?} ({}-byte frames, mode {:?}): {what} in the warm-up; the ring is misconfigured",
                        chain.path,
                        frames[case.frame].len(),
                        case.mode.map(HashMode::as_str),
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
        method: method(c, opts, driver),
        cpu_accounting: cpu_accounting(c, driver),
        driver,
        driver_note,
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

fn cpu_accounting(c: usize, driver: Driver) -> String {
    if driver == Driver::Loop {
        return format!(
            "packets per core = laps / CPU seconds of the path; CPU seconds = softirq time of every CPU from \
             /proc/stat (the loop runs in softirq only: veth NAPI, XDP, kernel forwarding; tick-sampled, so it also \
             counts other softirq work of the machine). Cross-check (pps_per_core_cross_check): the runtime of \
             ksoftirqd/{c} (/proc/PID/schedstat, where a long-running softirq loop is deferred) + softirq of the \
             other CPUs"
        );
    }
    format!(
        "packets per core = delivered packets / CPU seconds of the path; CPU seconds = the pinned generator \
         thread's CPU time (CLOCK_THREAD_CPUTIME_ID: with tick-based IRQ accounting it includes the softirqs - \
         veth NAPI, XDP, kernel forwarding - that run when the thread re-enables them after each batch) + \
         ksoftirqd/{c} + softirq time of the other CPUs (/proc/stat); per-task accounting leaves out other \
         processes sharing CPU {c}. Cross-check (pps_per_core_cross_check): system + irq + softirq of CPU {c} + \
         softirq of the other CPUs from /proc/stat, which also charges other processes' kernel time"
    )
}

fn method(c: usize, opts: &Options, driver: Driver) -> String {
    let drive = if driver == Driver::Loop {
        format!(
            "{SEED_FRAMES} frames sent once from a packet socket by a thread pinned to CPU {c}, then circulating: the \
             generator's veth \"west\" runs traffic_loop, which rewrites each frame (MACs, TTL, checksum) and \
             redirects it out of \"east\" again, counting laps per CPU; veth runs its peer's NAPI on the sending \
             CPU, so the loop stays on CPU {c}"
        )
    } else {
        format!(
            "frames from the object's traffic_generator program, run with BPF_PROG_TEST_RUN in live-frame mode \
             (XDP_TX, batch {BATCH}, {FRAMES_PER_CALL} frames per call) from a thread pinned to CPU {c} with \
             sched_setaffinity; veth runs its peer's NAPI on the sending CPU, so the whole path runs on CPU {c}; \
             frames are counted where they come back (the generator's veth \"west\" runs fabric_switch with the \
             port registered and no routes: per-CPU counter, XDP_DROP)"
        )
    };
    format!(
        "rings of namespaces joined by veth pairs: gen -> RTSW -> CTSW -> RTSW -> gen, and gen -> gen as the 0-hop \
         baseline; one flow of RoCEv2 frames (UDP 4791); {drive}; the plain XDP chain runs {} without the \
         congestion model, the other XDP chain runs the model and is set to each mode in turn; median of {} rounds \
         of {:.2} s per case after a {:.1} s warm-up, cases interleaved within each round",
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
                pps_per_core_cross_check: median(s.iter().map(Sample::pps_per_core_cross_check).collect()),
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
        xdp_vs_kernel_per_core_cross_check: x.pps_per_core_cross_check / k.pps_per_core_cross_check,
        xdp_vs_kernel_per_core_median_of_rounds: per_round(x),
        xdp_vs_kernel_forwarding_only: per_hop(x),
        floor_vs_kernel_per_core: floor.pps_per_core / k.pps_per_core,
        plain_ns_per_hop_over_floor: over(x, floor),
        modes,
    }
}

pub fn print_forwarding(r: &ForwardingReport) {
    let (c, rounds, seconds) = (r.generator_cpu, r.rounds, r.seconds_per_sample);
    if r.driver == Driver::Loop {
        println!(
            "forwarding: gen -> RTSW -> CTSW -> RTSW -> gen over veths; {SEED_FRAMES} frames circulating on CPU {c}, \
             sent on by traffic_loop; counted per lap; median of {rounds} x {seconds:.2} s per case"
        );
        println!(
            "per core = laps / CPU s of the path (softirq of every CPU, /proc/stat); cross-check: ksoftirqd/{c}'s \
             runtime + other CPUs' softirq"
        );
    } else {
        println!(
            "forwarding: gen -> RTSW -> CTSW -> RTSW -> gen over veths; XDP live-frame generator (batch {}) pinned to \
             CPU {c}, the whole path on that CPU; counted where frames come back; median of {rounds} x {seconds:.2} s \
             per case",
            r.live_frame_batch
        );
        println!(
            "per core = delivered / CPU s of the path (generator thread incl. its softirqs + ksoftirqd/{c} + other \
             CPUs' softirq); cross-check: /proc/stat system+irq+softirq of CPU {c}"
        );
    }
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
        "(cross-check)",
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
            row.pps_per_core_cross_check,
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
             end (per-round median {:.2}x, cross-check {:.2}x){}",
            q.frame_bytes,
            q.xdp_vs_kernel_per_core,
            q.xdp_vs_kernel_per_core_median_of_rounds,
            q.xdp_vs_kernel_per_core_cross_check,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// On a real ring (the 0-hop baseline: the generator's own veth pair), frames sent once keep
    /// circulating while the lease is renewed; `measure_loop` counts their laps and leaves none
    /// circulating. Left alone, as by a benchmark killed mid-run, a loop ends by itself, its CPU's
    /// laps exactly at the last lease: no CPU is left spinning.
    #[test]
    fn a_loop_runs_while_its_lease_is_renewed_and_ends_by_itself() {
        let mut guard = Namespaces(Vec::new());
        let result = (|| -> Result<()> {
            let mut tools = SwitchDataplane::load()?;
            let chain = build_chain(Path::Baseline, &mut guard, &mut tools, PLAIN_MODE, Driver::Loop)?;
            let (config, laps) = tools.take_generator_maps()?;
            let mut generator = Generator { config, laps };
            let cpu = Cpu::generators()?;
            let spec = FrameSpec { src_mac: GEN_MAC, ttl: TTL, payload_len: 64 - HEADERS, ..Default::default() };
            let pkt = frame(&spec);

            let s = measure_loop(&mut generator, &chain, &cpu, &pkt, Duration::from_millis(200))?;
            assert!(s.delivered > u64::from(SEED_FRAMES) * 100, "only {} laps in 0.2 s", s.delivered);
            assert!(s.cpu_s > 0.0, "the loop's CPU time was not counted");
            let drained = laps_now(&generator.laps)?;
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(laps_now(&generator.laps)?, drained, "measure_loop left frames circulating");

            let cfg = GeneratorConfig::new(chain.first_hop_mac, GEN_MAC, TTL).looping(chain.gen_ifindex, 0);
            generator.lease(cfg, drained.1 + LEASE_MIN_LAPS)?;
            let mut seeded = pkt.clone();
            seeded[..6].copy_from_slice(&chain.first_hop_mac);
            in_named(&chain.nodes[0], || {
                fabric_user::sys::cpu::pin_thread(cpu.index)?;
                seed(&seeded, SEED_FRAMES)
            })?;
            generator.run_for(cfg, Duration::from_millis(100))?;
            let lease = generator.config.get(&0, 0)?.lease;
            let (_, top) = generator.laps_when_still(Duration::from_millis(50), Duration::from_secs(60))?;
            assert_eq!(top, lease, "the loop ran until its lease ran out, and not a lap beyond");
            Ok(())
        })();
        drop(guard);
        result.unwrap_or_else(|e| panic!("{e:#}"));
    }
}
