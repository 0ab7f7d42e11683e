//! A small switch built in the calling thread's namespace, and the packets to feed it: shared by
//! the `test_run` tests and the data-plane benchmark so both measure the same thing.
use std::net::{Ipv4Addr, Ipv6Addr};

use anyhow::{Context as _, Result};
use aya::programs::{TestRun as _, TestRunOptions, TestRunResult};
use etherparse::PacketBuilder;
use fabric_common::{
    config::{HashMode, PortInfo, SwitchConfig},
    route::{EcmpGroup, GroupMember, ROUTE_LOCAL},
    wire::udp::ROCEV2_PORT,
};

use fabric_user::{
    dataplane::{PROGRAM_BENCH_PARSE_REDIRECT, PROGRAM_PASS, SwitchDataplane},
    sys::netns,
};

/// Ports of the fixture switch: port 0 faces host A, ports 1..=UPLINKS are an ECMP group.
pub const UPLINKS: u32 = 4;
pub const GROUP_UPLINKS: u32 = 0;
pub const GROUP_HOST_A: u32 = 1;

pub const HOST_A_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const SWITCH_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// Remote hosts live in 198.18.1.0/24, reached over the uplinks.
pub const REMOTE_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 7);
pub const HOST_A_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
pub const REMOTE_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 7);

pub fn port_mac(port: u32) -> [u8; 6] {
    [0x02, 0xfa, 0, 0, 0, port as u8 + 1]
}

pub fn neighbour_mac(port: u32) -> [u8; 6] {
    [0x02, 0xfb, 0, 0, 0, port as u8 + 1]
}

/// Runs `f` on a new thread inside a fresh network namespace of its own; the namespace and
/// every link made in it vanish when the thread ends, even if `f` panics.
pub fn in_private_netns<T: Send>(f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            netns::unshare_thread()?;
            f()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A loaded switch with UPLINKS + 1 veth ports in the calling thread's namespace.
pub struct FixtureSwitch {
    pub dp: SwitchDataplane,
    /// ifindex of each port.
    pub ifindex: Vec<u32>,
}

impl FixtureSwitch {
    /// Call from a thread that has its own namespace ([`netns::unshare_thread`]).
    pub fn new(mode: HashMode, seed: u32) -> Result<Self> {
        // No IPv6 autoconfiguration chatter (DAD, MLD, RS) from the veths: it would pass through
        // the switch program and move the counters the tests check.
        netns::sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
        netns::sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
        let mut dp = SwitchDataplane::load()?;
        let mut ifindex = Vec::new();
        for port in 0..=UPLINKS {
            let (a, b) = (format!("p{port}"), format!("n{port}"));
            netns::ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            netns::ip(&["link", "set", &a, "up"])?;
            netns::ip(&["link", "set", &b, "up"])?;
            let idx = netns::ifindex(&a)?;
            dp.add_port(idx, PortInfo::new(port, port_mac(port)))?;
            ifindex.push(idx);
        }
        let member = |p: u32| GroupMember { port: p, dst_mac: neighbour_mac(p), src_mac: port_mac(p) };
        let uplinks: Vec<_> = (1..=UPLINKS).map(member).collect();
        dp.set_group(GROUP_UPLINKS, &EcmpGroup::from_members(&uplinks).expect("fits"))?;
        dp.set_group(GROUP_HOST_A, &EcmpGroup::from_members(&[member(0)]).expect("fits"))?;
        dp.set_route_v4(Ipv4Addr::new(198, 18, 1, 0), 24, GROUP_UPLINKS)?;
        dp.set_route_v4(HOST_A_V4, 32, GROUP_HOST_A)?;
        dp.set_route_v4(SWITCH_V4, 32, ROUTE_LOCAL)?;
        dp.set_route_v6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0), 64, GROUP_UPLINKS)?;
        dp.set_route_v6(HOST_A_V6, 128, GROUP_HOST_A)?;
        // Attach every program somewhere, as a running switch would have them. Besides realism,
        // this keeps BPF_PROG_TEST_RUN with repeat > 1 from swapping the XDP dispatcher (an RCU
        // grace period, milliseconds) on every call.
        for &idx in &ifindex {
            dp.attach(idx)?;
        }
        let peers: Vec<u32> = ["n0", "n1"].iter().map(|n| netns::ifindex(n)).collect::<Result<_>>()?;
        dp.attach_program(PROGRAM_PASS, peers[0])?;
        dp.attach_program(PROGRAM_BENCH_PARSE_REDIRECT, peers[1])?;
        let mut sw = Self { dp, ifindex };
        sw.set_mode(mode, seed)?;
        Ok(sw)
    }

    /// The fixture's settings: `mode`, `seed`, no pin shift, the default flowlet gap (as wall
    /// time: the fixture runs at time scale 1).
    pub fn config(mode: HashMode, seed: u32) -> SwitchConfig {
        SwitchConfig::new(mode, seed, 0).with_flowlet_gap(fabric_common::balance::DEFAULT_FLOWLET_GAP_NS as u32)
    }

    pub fn set_mode(&mut self, mode: HashMode, seed: u32) -> Result<()> {
        self.dp.set_config(Self::config(mode, seed))
    }

    /// Runs `program` once on `frame` as if it arrived on `port`; returns the result and the
    /// frame as the program left it.
    pub fn run(&mut self, program: &str, port: u32, frame: &[u8]) -> Result<(TestRunResult, Vec<u8>)> {
        let ctx = xdp_md(frame.len(), self.ifindex[port as usize]);
        let mut out = vec![0u8; frame.len() + 256];
        let prog = self.dp.program(program)?;
        let res = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx),
                ..Default::default()
            })
            .context("BPF_PROG_TEST_RUN")?;
        out.truncate(res.data_size_out as usize);
        Ok((res, out))
    }

    /// Runs `program` `repeat` times on `frame` arriving on `port`: the kernel's mean time per
    /// run, the last run's action, and the frame as the runs left it (non-live test_run runs
    /// every repeat on one buffer, so each run sees what the one before it wrote).
    pub fn time(&mut self, program: &str, port: u32, frame: &[u8], repeat: u32) -> Result<Timed> {
        let ctx = xdp_md(frame.len(), self.ifindex[port as usize]);
        let mut out = vec![0u8; frame.len() + 256];
        let prog = self.dp.program(program)?;
        let res = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx),
                repeat,
                ..Default::default()
            })
            .context("BPF_PROG_TEST_RUN")?;
        out.truncate(res.data_size_out as usize);
        Ok(Timed { per_run: res.duration, action: res.return_value, frame: out })
    }

    /// Points the uplink group's next-hop MACs at port 0's own MAC. A frame from host A then
    /// stays addressed to the switch after the MAC rewrite, so that every one of a benchmark's
    /// repeated runs on one buffer takes the forwarding path: with the real next hops, every
    /// run after the first would see a frame for another host and pass it to the kernel.
    pub fn hairpin_next_hops(&mut self) -> Result<()> {
        let uplinks: Vec<_> =
            (1..=UPLINKS).map(|p| GroupMember { port: p, dst_mac: port_mac(0), src_mac: port_mac(p) }).collect();
        self.dp.set_group(GROUP_UPLINKS, &EcmpGroup::from_members(&uplinks).expect("fits"))
    }
}

/// XDP actions a run can return (the kernel's `enum xdp_action`), to compare with
/// [`Timed::action`] and test_run's return value.
pub const XDP_ABORTED: u32 = 0;
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const XDP_REDIRECT: u32 = 4;

/// The kernel's name of an XDP action, for messages.
pub fn xdp_action_name(action: u32) -> String {
    match action {
        XDP_ABORTED => "XDP_ABORTED".into(),
        XDP_DROP => "XDP_DROP".into(),
        XDP_PASS => "XDP_PASS".into(),
        XDP_TX => "XDP_TX".into(),
        XDP_REDIRECT => "XDP_REDIRECT".into(),
        other => format!("XDP action {other}"),
    }
}

/// What [`FixtureSwitch::time`] measured and what the runs left behind.
#[derive(Clone, Debug)]
pub struct Timed {
    /// The kernel's mean time per run.
    pub per_run: std::time::Duration,
    /// The last run's XDP action.
    pub action: u32,
    /// The frame after the last run.
    pub frame: Vec<u8>,
}

/// The 24-byte `struct xdp_md` that BPF_PROG_TEST_RUN takes as context.
pub fn xdp_md(len: usize, ingress_ifindex: u32) -> Vec<u8> {
    [0u32, len as u32, 0, ingress_ifindex, 0, 0].iter().flat_map(|v| v.to_ne_bytes()).collect()
}

/// What to put in a test frame.
#[derive(Clone, Debug)]
pub struct FrameSpec {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub vlan: Option<u16>,
    pub ipv6: bool,
    pub ttl: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// BTH destination QP, used when `dst_port` is 4791.
    pub dest_qp: u32,
    pub payload_len: usize,
}

impl Default for FrameSpec {
    fn default() -> Self {
        Self {
            src_mac: neighbour_mac(0),
            dst_mac: port_mac(0),
            vlan: None,
            ipv6: false,
            ttl: 64,
            src_port: 0xC000,
            dst_port: ROCEV2_PORT,
            dest_qp: 0x11,
            payload_len: 64,
        }
    }
}

/// A RoCEv2 RDMA WRITE-only BTH (+ RETH-sized payload) for `dest_qp`.
pub fn bth_bytes(opcode: u8, dest_qp: u32, psn: u32) -> [u8; 12] {
    let q = dest_qp.to_be_bytes();
    let p = psn.to_be_bytes();
    [opcode, 0, 0xff, 0xff, 0, q[1], q[2], q[3], 0x80, p[1], p[2], p[3]]
}

/// Builds a frame from host A towards the remote prefix.
pub fn frame(spec: &FrameSpec) -> Vec<u8> {
    let mut payload = Vec::new();
    if spec.dst_port == ROCEV2_PORT {
        payload.extend_from_slice(&bth_bytes(0x0A, spec.dest_qp, 1));
    }
    payload.resize(payload.len() + spec.payload_len, 0xab);
    let eth = PacketBuilder::ethernet2(spec.src_mac, spec.dst_mac);
    let l3 = match (spec.vlan, spec.ipv6) {
        (None, false) => eth.ipv4(HOST_A_V4.octets(), REMOTE_V4.octets(), spec.ttl),
        (None, true) => eth.ipv6(HOST_A_V6.octets(), REMOTE_V6.octets(), spec.ttl),
        (Some(tci), false) => {
            eth.single_vlan(tci.try_into().expect("vid")).ipv4(HOST_A_V4.octets(), REMOTE_V4.octets(), spec.ttl)
        }
        (Some(tci), true) => {
            eth.single_vlan(tci.try_into().expect("vid")).ipv6(HOST_A_V6.octets(), REMOTE_V6.octets(), spec.ttl)
        }
    };
    let b = l3.udp(spec.src_port, spec.dst_port);
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, &payload).expect("writing to a Vec");
    out
}

/// Sets the TOS (IPv4, header checksum recomputed) or traffic class (IPv6) of an untagged
/// fixture frame.
pub fn set_tos(frame: &mut [u8], tos: u8) {
    let l3 = 14;
    if frame[l3] >> 4 == 4 {
        frame[l3 + 1] = tos;
        frame[l3 + 10..l3 + 12].fill(0);
        let ihl = usize::from(frame[l3] & 0x0F) * 4;
        let c = fabric_common::checksum::internet_checksum(&frame[l3..l3 + ihl]);
        frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    } else {
        frame[l3] = (frame[l3] & 0xF0) | (tos >> 4);
        frame[l3 + 1] = (frame[l3 + 1] & 0x0F) | (tos << 4);
    }
}
