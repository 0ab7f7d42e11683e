//! Real traffic through one XDP switch: host-a / switch / host-b namespaces joined by veths.
//! The switch namespace keeps ip_forward=0, so only the XDP program can forward. Needs root.
use std::{
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::Duration,
};

use anyhow::{Context as _, Result};
use fabric_common::{
    config::{HashMode, PortInfo, SwitchConfig},
    parse::{IpHeader, parse_packet},
    route::{EcmpGroup, GroupMember, ROUTE_LOCAL},
    wire::ethernet,
};
use fabric_testkit::fixture::bth_bytes;
use fabric_user::{
    dataplane::{PROGRAM_PASS, SwitchDataplane},
    sys::netns::{self, ifindex, in_named, ip},
};

/// Deletes the test's namespaces (and with them every veth) when dropped, panic or not.
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

const MAC_A: &str = "02:0a:00:00:00:01";
const MAC_SA: &str = "02:5a:00:00:00:01";
const MAC_B: &str = "02:0b:00:00:00:01";
const MAC_SB: &str = "02:5b:00:00:00:01";

fn mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s.split(':').map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
    v.try_into().unwrap()
}

/// An AF_PACKET socket on `dev` that sees every frame the host receives.
fn packet_socket(dev: &str) -> Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket syscall; the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto as i32) };
    anyhow::ensure!(fd >= 0, "AF_PACKET socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh socket we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid start.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex(dev)? as i32;
    // SAFETY: valid fd and a sockaddr_ll of the stated size.
    let rc = unsafe {
        libc::bind(fd.as_raw_fd(), (&sll as *const libc::sockaddr_ll).cast(), size_of::<libc::sockaddr_ll>() as u32)
    };
    anyhow::ensure!(rc == 0, "bind AF_PACKET to {dev}: {}", std::io::Error::last_os_error());
    netns::set_receive_timeout(std::os::fd::AsFd::as_fd(&fd), std::time::Duration::from_millis(200))?;
    Ok(fd)
}

/// Frames received on `fd` until a read times out.
fn drain(fd: &OwnedFd) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        // SAFETY: valid fd and buffer.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            return frames;
        }
        frames.push(buf[..n as usize].to_vec());
    }
}

#[test]
fn udp_4791_crosses_the_xdp_switch_with_macs_rewritten_and_ttl_decremented() {
    netns::require_capabilities().expect("this test needs root: it builds network namespaces");
    let tag = format!("fxt{}", std::process::id());
    let (ns_a, ns_sw, ns_b) = (format!("{tag}-a"), format!("{tag}-sw"), format!("{tag}-b"));
    let _cleanup = Namespaces(vec![ns_a.clone(), ns_sw.clone(), ns_b.clone()]);
    run(&ns_a, &ns_sw, &ns_b).unwrap_or_else(|e| panic!("{e:#}"));
}

fn run(ns_a: &str, ns_sw: &str, ns_b: &str) -> Result<()> {
    for n in [ns_a, ns_sw, ns_b] {
        ip(&["netns", "add", n])?;
    }
    // Links are born in the switch namespace with their peers sent to the hosts.
    in_named(ns_sw, || {
        ip(&[
            "link", "add", "sa", "address", MAC_SA, "type", "veth", "peer", "name", "a0", "address", MAC_A, "netns",
            ns_a,
        ])?;
        ip(&[
            "link", "add", "sb", "address", MAC_SB, "type", "veth", "peer", "name", "b0", "address", MAC_B, "netns",
            ns_b,
        ])?;
        for cmd in [
            vec!["addr", "add", "198.18.0.0/31", "dev", "sa"],
            vec!["addr", "add", "198.18.0.2/31", "dev", "sb"],
            vec!["link", "set", "sa", "up"],
            vec!["link", "set", "sb", "up"],
            vec!["link", "set", "lo", "up"],
        ] {
            ip(&cmd)?;
        }
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "0").context("ip_forward=0 in the switch")
    })?;
    for (ns, dev, addr, gw, gw_mac) in
        [(ns_a, "a0", "198.18.0.1/31", "198.18.0.0", MAC_SA), (ns_b, "b0", "198.18.0.3/31", "198.18.0.2", MAC_SB)]
    {
        in_named(ns, || {
            ip(&["addr", "add", addr, "dev", dev])?;
            ip(&["link", "set", dev, "up"])?;
            ip(&["link", "set", "lo", "up"])?;
            ip(&["neigh", "replace", gw, "lladdr", gw_mac, "dev", dev, "nud", "permanent"])?;
            ip(&["route", "add", "default", "via", gw, "dev", dev])
        })?;
    }

    // The switch: two ports, a one-member group per host, local routes for its own addresses.
    let mut dp = SwitchDataplane::load()?;
    in_named(ns_sw, || {
        let (sa, sb) = (ifindex("sa")?, ifindex("sb")?);
        dp.add_port(sa, PortInfo::new(0, mac(MAC_SA)))?;
        dp.add_port(sb, PortInfo::new(1, mac(MAC_SB)))?;
        dp.set_config(SwitchConfig::new(HashMode::Eecmp, 1, 0))?;
        let to_a = GroupMember { port: 0, dst_mac: mac(MAC_A), src_mac: mac(MAC_SA) };
        let to_b = GroupMember { port: 1, dst_mac: mac(MAC_B), src_mac: mac(MAC_SB) };
        dp.set_group(0, &EcmpGroup::from_members(&[to_a]).unwrap())?;
        dp.set_group(1, &EcmpGroup::from_members(&[to_b]).unwrap())?;
        dp.set_route_v4(Ipv4Addr::new(198, 18, 0, 1), 32, 0)?;
        dp.set_route_v4(Ipv4Addr::new(198, 18, 0, 3), 32, 1)?;
        dp.set_route_v4(Ipv4Addr::new(198, 18, 0, 0), 32, ROUTE_LOCAL)?;
        dp.set_route_v4(Ipv4Addr::new(198, 18, 0, 2), 32, ROUTE_LOCAL)?;
        dp.attach(sa)?;
        dp.attach(sb)?;
        Ok(())
    })?;
    // Host veths need an XDP program (or GRO) to receive redirected frames.
    let _pass_a = in_named(ns_a, || dp.attach_program(PROGRAM_PASS, ifindex("a0")?))?;
    let _pass_b = in_named(ns_b, || dp.attach_program(PROGRAM_PASS, ifindex("b0")?))?;

    let capture = in_named(ns_b, || packet_socket("b0"))?;
    let _receiver = in_named(ns_b, || Ok(UdpSocket::bind("198.18.0.3:4791")?))?;
    let sender = in_named(ns_a, || Ok(UdpSocket::bind("198.18.0.1:49152")?))?;
    sender.set_ttl(64)?;
    const SENT: u32 = 50;
    for psn in 0..SENT {
        let mut payload = bth_bytes(0x0A, 0x11 + psn % 4, psn).to_vec();
        payload.extend_from_slice(&[0x5a; 256]);
        payload.extend_from_slice(&[0; 4]); // ICRC slot
        sender.send_to(&payload, SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 3), 4791))?;
    }
    std::thread::sleep(Duration::from_millis(100));
    let frames = drain(&capture);

    let mut arrived = 0;
    for f in &frames {
        let Ok(p) = parse_packet(&f[..]) else { continue };
        let Some(bth) = p.bth else { continue };
        arrived += 1;
        assert_eq!(&f[ethernet::DST], &mac(MAC_B), "destination MAC rewritten to host-b");
        assert_eq!(&f[ethernet::SRC], &mac(MAC_SB), "source MAC rewritten to the switch port");
        match p.ip {
            IpHeader::V4 { src, dst, ttl, .. } => {
                assert_eq!((src, dst), ([198, 18, 0, 1], [198, 18, 0, 3]));
                assert_eq!(ttl, 63, "TTL decremented by the one hop");
            }
            IpHeader::V6 { .. } => panic!("sent IPv4"),
        }
        let l3 = &f[ethernet::HEADER_LEN..];
        let sum = fabric_common::checksum::internet_checksum(&l3[..20]);
        assert_eq!(sum, 0, "IPv4 header checksum valid after the rewrite");
        assert_eq!(bth.opcode, 0x0A);
    }
    assert_eq!(arrived, SENT, "every datagram arrives, once ({} frames seen)", frames.len());

    let (rx, tx) = (dp.port_counters(0)?, dp.port_counters(1)?);
    assert_eq!(rx.rx_roce_packets, SENT as u64, "the switch saw every RoCE packet on port 0");
    assert_eq!(tx.tx_roce_packets, SENT as u64, "and sent every one out of port 1");
    assert_eq!(tx.tx_packets, SENT as u64, "nothing else went to host-b");
    assert_eq!(rx.total_drops(), 0);
    Ok(())
}

/// A port with more than one receive queue would give the congestion model's per-ingress
/// accounts two writers: `up` refuses it by name. Checked on a veth built with two queues.
#[test]
fn a_switch_port_with_two_receive_queues_is_refused() {
    netns::require_capabilities().expect("this test needs root");
    let ns = format!("rxq{}", std::process::id() % 100_000);
    ip(&["netns", "add", &ns]).unwrap();
    let _guard = Namespaces(vec![ns.clone()]);
    in_named(&ns, || {
        ip(&["link", "add", "one0", "type", "veth", "peer", "name", "one1"])?;
        ip(&["link", "add", "two0", "numrxqueues", "2", "type", "veth", "peer", "name", "two1", "numrxqueues", "2"])?;
        Ok(())
    })
    .unwrap();
    let (one, two) =
        in_named(&ns, || Ok((netns::ensure_single_rx_queue("one0"), netns::ensure_single_rx_queue("two0")))).unwrap();
    one.expect("a default veth uses one receive queue");
    let e = format!("{:#}", two.expect_err("two receive queues were accepted"));
    assert!(e.contains("switch port two0 uses 2 receive queues"), "{e}");
}
