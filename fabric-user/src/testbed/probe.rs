//! `fabric ping`: ICMP and ICMPv6 echo from every host to every other host, through the XDP
//! fabric.
use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, ensure};
use serde::Serialize;

use crate::{model::plan::NodeId, state::State, sys::netns};

#[derive(Debug, Serialize)]
pub struct PingReport {
    /// Ordered host pairs times address families (IPv4 and IPv6).
    pub pairs: usize,
    pub reachable: usize,
    /// (source host, destination address) pairs without a reply.
    pub unreachable: Vec<(String, String)>,
}

fn checksum(data: &[u8]) -> u16 {
    fabric_common::checksum::internet_checksum(data)
}

fn echo_request(id: u16, seq: u16, v6: bool) -> Vec<u8> {
    // ICMPv6 checksums cover a pseudo-header: the kernel fills them in for raw ICMPv6 sockets.
    let mut pkt = vec![if v6 { 128 } else { 8 }, 0, 0, 0];
    pkt.extend_from_slice(&id.to_be_bytes());
    pkt.extend_from_slice(&seq.to_be_bytes());
    pkt.extend_from_slice(b"fabric ping");
    if !v6 {
        let c = checksum(&pkt);
        pkt[2..4].copy_from_slice(&c.to_be_bytes());
    }
    pkt
}

/// Pings every destination from the calling thread's namespace; returns those that replied.
fn ping_from(destinations: &[(usize, IpAddr)], id: u16, timeout: Duration) -> Result<BTreeSet<usize>> {
    let v6 = destinations.first().is_some_and(|d| d.1.is_ipv6());
    let (family, proto) = if v6 { (libc::AF_INET6, libc::IPPROTO_ICMPV6) } else { (libc::AF_INET, libc::IPPROTO_ICMP) };
    // SAFETY: plain socket syscall; ownership taken below.
    let fd = unsafe { libc::socket(family, libc::SOCK_RAW, proto) };
    ensure!(fd >= 0, "raw ICMP socket: {}", std::io::Error::last_os_error());
    // SAFETY: fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    for &(seq, dst) in destinations {
        let pkt = echo_request(id, seq as u16, v6);
        let n = match dst {
            IpAddr::V4(d) => {
                let addr = libc::sockaddr_in {
                    sin_family: libc::AF_INET as u16,
                    sin_port: 0,
                    sin_addr: libc::in_addr { s_addr: u32::from(d).to_be() },
                    sin_zero: [0; 8],
                };
                // SAFETY: valid fd, buffer and sockaddr_in.
                unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        pkt.as_ptr().cast(),
                        pkt.len(),
                        0,
                        (&addr as *const libc::sockaddr_in).cast(),
                        size_of::<libc::sockaddr_in>() as u32,
                    )
                }
            }
            IpAddr::V6(d) => {
                // SAFETY: plain data.
                let mut addr: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
                addr.sin6_family = libc::AF_INET6 as u16;
                addr.sin6_addr.s6_addr = d.octets();
                // SAFETY: valid fd, buffer and sockaddr_in6.
                unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        pkt.as_ptr().cast(),
                        pkt.len(),
                        0,
                        (&addr as *const libc::sockaddr_in6).cast(),
                        size_of::<libc::sockaddr_in6>() as u32,
                    )
                }
            }
        };
        ensure!(n >= 0, "sending ICMP echo to {dst}: {}", std::io::Error::last_os_error());
    }
    let mut replied = BTreeSet::new();
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 1500];
    while replied.len() < destinations.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let tv = libc::timeval { tv_sec: left.as_secs() as i64, tv_usec: left.subsec_micros().max(1) as i64 };
        // SAFETY: valid fd and option.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as u32,
            )
        };
        // SAFETY: plain data, filled by the kernel.
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut from_len = size_of::<libc::sockaddr_storage>() as u32;
        // SAFETY: valid fd, buffer and address storage.
        let n = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&mut from as *mut libc::sockaddr_storage).cast(),
                &mut from_len,
            )
        };
        if n <= 0 {
            break;
        }
        let pkt = &buf[..n as usize];
        // Raw ICMP sockets deliver the IPv4 header too; ICMPv6 ones do not.
        let (icmp, src) = if v6 {
            // SAFETY: an AF_INET6 socket fills a sockaddr_in6.
            let a = unsafe { &*(&from as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            (pkt, IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)))
        } else {
            let ihl = ((pkt[0] & 0x0f) as usize) * 4;
            let Some(icmp) = pkt.get(ihl..) else { continue };
            (icmp, IpAddr::V4(Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15])))
        };
        let reply_type = if v6 { 129 } else { 0 };
        if icmp.len() >= 8 && icmp[0] == reply_type && u16::from_be_bytes([icmp[4], icmp[5]]) == id {
            let seq = u16::from_be_bytes([icmp[6], icmp[7]]) as usize;
            if destinations.iter().any(|&(s, d)| s == seq && d == src) {
                replied.insert(seq);
            }
        }
    }
    Ok(replied)
}

/// Pings all ordered host pairs (or every host from `only_from`).
pub fn all_pairs(state: &State) -> Result<PingReport> {
    netns::require_capabilities()?;
    let plan = &state.plan;
    let hosts: Vec<NodeId> = plan.hosts().collect();
    let mut report = PingReport { pairs: 0, reachable: 0, unreachable: Vec::new() };
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| -> Result<()> {
        let chunks: Vec<&[NodeId]> = hosts.chunks(hosts.len().div_ceil(4).max(1)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let (hosts, results) = (&hosts, &results);
                s.spawn(move || -> Result<()> {
                    for &src in chunk {
                        for v6 in [false, true] {
                            let addr = |d: NodeId| -> IpAddr {
                                if v6 { plan.host_ipv6(d).into() } else { plan.host_ipv4(d).into() }
                            };
                            let dsts: Vec<(usize, IpAddr)> =
                                hosts.iter().filter(|&&d| d != src).map(|&d| (d, addr(d))).collect();
                            let replied = netns::in_named(&plan.netns(src), || {
                                ping_from(&dsts, 0xfab0 ^ src as u16, Duration::from_secs(2))
                            })
                            .with_context(|| format!("pinging from {}", plan.nodes[src].name))?;
                            results.lock().expect("not poisoned").push((src, dsts, replied));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        }
        Ok(())
    })?;
    for (src, dsts, replied) in results.into_inner().expect("not poisoned") {
        for (d, a) in dsts {
            report.pairs += 1;
            if replied.contains(&d) {
                report.reachable += 1;
            } else {
                report.unreachable.push((plan.nodes[src].name.clone(), format!("{} ({a})", plan.nodes[d].name)));
            }
        }
    }
    report.unreachable.sort();
    Ok(report)
}
