//! Batched UDP I/O for the endpoint: one `sendmmsg`/`recvmmsg` call moves many packets, which
//! is what lets one core keep several QPs at rate. Each received datagram comes with the TOS
//! byte it arrived with (`IP_RECVTOS`), so the endpoint sees the switches' CE marks; a batch can
//! be sent with a TOS of its own (an `IP_TOS` control message) for CNPs and CTS messages.
//!
//! Also the host's PFC link: an `AF_PACKET` socket on its veth for MAC control frames.
use std::{
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use anyhow::{Context as _, Result};

/// Most packets per batched call.
pub const BATCH: usize = 64;

/// How long a bind waits for its address to be free: a soak run (link faults, agent restarts,
/// back-to-back jobs) once found a host's 4791 still taken when the next job bound it, moments
/// after the previous job's sockets were closed; the holder is not identified.
const BIND_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `UdpSocket::bind`, retried while the address is in use, up to [`BIND_WAIT`].
fn bind_when_free(addr: SocketAddrV4) -> std::io::Result<UdpSocket> {
    let start = std::time::Instant::now();
    loop {
        match UdpSocket::bind(addr) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && start.elapsed() < BIND_WAIT => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// A UDP socket bound to `addr` for RoCEv2: non-blocking, with DF always set (`IP_PMTUDISC_DO`):
/// the kernel then never fragments, and gives DF datagrams of an unconnected socket IPv4
/// identification 0, so the sender knows the whole IP header the ICRC covers
/// ([`fabric_roce::icrc::Ipv4Ident::SENT_BY_US`], where that assumption is kept).
/// Packets leave with the default RoCE TOS (DSCP 26, ECT(0)).
pub fn roce_socket(addr: SocketAddrV4) -> Result<UdpSocket> {
    use fabric_roce::traffic_class::{DSCP_ROCE, data_tos};
    roce_socket_with_tos(addr, data_tos(DSCP_ROCE, true))
}

/// [`roce_socket`] whose packets leave with `tos` unless a batch says otherwise (DSCP and ECN
/// bits: UDP sockets keep the ECN bits as given). Received datagrams report their TOS.
pub fn roce_socket_with_tos(addr: SocketAddrV4, tos: u8) -> Result<UdpSocket> {
    let s = bind_when_free(addr).with_context(|| format!("binding UDP {addr}"))?;
    s.set_nonblocking(true)?;
    let val: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: valid socket and option of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            (&val as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as u32,
        )
    };
    anyhow::ensure!(rc == 0, "IP_MTU_DISCOVER: {}", std::io::Error::last_os_error());
    // RoCEv2 sends UDP checksum 0 (the ICRC protects the packet), as rxe and NICs do.
    let one: libc::c_int = 1;
    // SAFETY: as above.
    let rc = unsafe {
        libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_NO_CHECK, (&one as *const libc::c_int).cast(), 4)
    };
    anyhow::ensure!(rc == 0, "SO_NO_CHECK: {}", std::io::Error::last_os_error());
    set_int(&s, libc::IPPROTO_IP, libc::IP_TOS, libc::c_int::from(tos)).context("IP_TOS")?;
    set_int(&s, libc::IPPROTO_IP, libc::IP_RECVTOS, 1).context("IP_RECVTOS")?;
    // Room for bursts: the default socket buffers drop under a few QPs at rate. The plain
    // options are capped by net.core.{w,r}mem_max (about 200 KiB); the FORCE ones (we hold
    // CAP_NET_ADMIN) are not, and do not change a sysctl of the machine.
    for (force, plain) in [(libc::SO_SNDBUFFORCE, libc::SO_SNDBUF), (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)] {
        let size: libc::c_int = 4 << 20;
        if set_int(&s, libc::SOL_SOCKET, force, size).is_err() {
            let _ = set_int(&s, libc::SOL_SOCKET, plain, size);
        }
    }
    Ok(s)
}

fn set_int(s: &impl AsRawFd, level: libc::c_int, opt: libc::c_int, val: libc::c_int) -> std::io::Result<()> {
    // SAFETY: valid socket, an int option of the stated size.
    let rc = unsafe { libc::setsockopt(s.as_raw_fd(), level, opt, (&val as *const libc::c_int).cast(), 4) };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Room for one control message carrying an int (IP_TOS is sent as an int, received as a byte;
/// IPV6_TCLASS both ways as an int).
// SAFETY: CMSG_SPACE is a pure size computation.
const CMSG_INT_SPACE: usize = unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) } as usize;

/// The TOS (IPv4) or traffic class (IPv6) in a received message's control data, if present.
/// Walks the `cmsghdr` chain as the kernel lays it out (headers and data aligned to `usize`).
pub fn tos_from_control(control: &[u8]) -> Option<u8> {
    let align = |n: usize| n.div_ceil(size_of::<usize>()) * size_of::<usize>();
    let header = align(size_of::<libc::cmsghdr>());
    let mut at = 0;
    while at + header <= control.len() {
        // SAFETY: in bounds (checked above); read unaligned from a byte buffer.
        let h: libc::cmsghdr = unsafe { std::ptr::read_unaligned(control[at..].as_ptr().cast()) };
        let len = h.cmsg_len as usize;
        if len < header || at + len > control.len() {
            return None;
        }
        let data = &control[at + header..at + len];
        match (h.cmsg_level, h.cmsg_type) {
            (libc::IPPROTO_IP, libc::IP_TOS) if !data.is_empty() => return Some(data[0]),
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) if data.len() >= 4 => {
                return Some(i32::from_ne_bytes(data[..4].try_into().ok()?) as u8);
            }
            _ => {}
        }
        at += align(len);
    }
    None
}

/// Writes one `IP_TOS` control message (an int) into `buf` (at least [`CMSG_INT_SPACE`] bytes,
/// aligned for `cmsghdr`); returns its length.
fn write_tos_cmsg(buf: &mut [u64], tos: u8) -> usize {
    let bytes = buf.as_mut_ptr().cast::<u8>();
    // SAFETY: buf is 8-byte aligned and long enough for one header and one int.
    unsafe {
        let h = bytes.cast::<libc::cmsghdr>();
        (*h).cmsg_level = libc::IPPROTO_IP;
        (*h).cmsg_type = libc::IP_TOS;
        (*h).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
        let data = libc::CMSG_DATA(h).cast::<libc::c_int>();
        data.write_unaligned(libc::c_int::from(tos));
    }
    CMSG_INT_SPACE
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// Sends `packets` (payload, destination) with as few `sendmmsg` calls as possible. Returns how
/// many were sent; a full socket buffer stops early (the caller keeps the rest).
pub fn send_batch<P: AsRef<[u8]>>(sock: &UdpSocket, packets: &[(P, SocketAddrV4)]) -> Result<usize> {
    send_batch_with_tos(sock, packets, None)
}

/// [`send_batch`] with the socket's TOS or, if given, `tos`.
pub fn send_batch_with_tos<P: AsRef<[u8]>>(
    sock: &UdpSocket,
    packets: &[(P, SocketAddrV4)],
    tos: Option<u8>,
) -> Result<usize> {
    let mut sent = 0;
    let words = CMSG_INT_SPACE.div_ceil(8);
    while sent < packets.len() {
        let chunk = &packets[sent..(sent + BATCH).min(packets.len())];
        let mut control = vec![0u64; words * chunk.len()];
        let mut addrs: Vec<libc::sockaddr_in> = chunk.iter().map(|(_, a)| sockaddr(*a)).collect();
        let mut iovs: Vec<libc::iovec> = chunk
            .iter()
            .map(|(p, _)| p.as_ref())
            .map(|p| libc::iovec { iov_base: p.as_ptr() as *mut _, iov_len: p.len() })
            .collect();
        // SAFETY: mmsghdr is plain data; every pointer set below outlives the call.
        let mut msgs: Vec<libc::mmsghdr> = (0..chunk.len()).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (i, m) in msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_in).cast();
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as u32;
            m.msg_hdr.msg_iov = &mut iovs[i];
            m.msg_hdr.msg_iovlen = 1;
            if let Some(tos) = tos {
                let buf = &mut control[i * words..(i + 1) * words];
                m.msg_hdr.msg_controllen = write_tos_cmsg(buf, tos) as _;
                m.msg_hdr.msg_control = buf.as_mut_ptr().cast();
            }
        }
        // SAFETY: msgs points at chunk.len() initialised headers.
        let n = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as u32, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(sent);
            }
            return Err(e).context("sendmmsg");
        }
        sent += n as usize;
        if (n as usize) < chunk.len() {
            return Ok(sent);
        }
    }
    Ok(sent)
}

/// One received datagram: its length in the buffer of the same index, its source, and the TOS
/// it arrived with (`None` if the kernel did not say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub len: usize,
    pub from: SocketAddrV4,
    pub tos: Option<u8>,
}

/// Receives up to BATCH datagrams into `bufs`, described in `out`; returns how many.
pub fn recv_batch(sock: &UdpSocket, bufs: &mut [[u8; 4096]; BATCH], out: &mut Vec<Received>) -> Result<usize> {
    out.clear();
    let words = (2 * CMSG_INT_SPACE).div_ceil(8);
    let mut control = vec![0u64; words * BATCH];
    // SAFETY: plain data, filled by the kernel.
    let mut addrs: [libc::sockaddr_in; BATCH] = unsafe { std::mem::zeroed() };
    let mut iovs: Vec<libc::iovec> =
        bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
    // SAFETY: as above.
    let mut msgs: Vec<libc::mmsghdr> = (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (i, m) in msgs.iter_mut().enumerate() {
        m.msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_in).cast();
        m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as u32;
        m.msg_hdr.msg_iov = &mut iovs[i];
        m.msg_hdr.msg_iovlen = 1;
        m.msg_hdr.msg_control = control[i * words..].as_mut_ptr().cast();
        m.msg_hdr.msg_controllen = (words * 8) as _;
    }
    // SAFETY: BATCH initialised headers pointing at live buffers.
    let n = unsafe {
        libc::recvmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut())
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Ok(0);
        }
        return Err(e).context("recvmmsg");
    }
    for i in 0..n as usize {
        let a = &addrs[i];
        let src = SocketAddrV4::new(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)), u16::from_be(a.sin_port));
        let h = &msgs[i].msg_hdr;
        // SAFETY: the kernel wrote msg_controllen bytes of control data into our buffer.
        let control = unsafe { std::slice::from_raw_parts(h.msg_control.cast::<u8>(), h.msg_controllen) };
        out.push(Received { len: msgs[i].msg_len as usize, from: src, tos: tos_from_control(control) });
    }
    Ok(n as usize)
}

/// A non-blocking `AF_PACKET` socket for MAC control frames on `ifname` (of the calling
/// thread's namespace): it receives the PFC frames that arrive there and sends whole frames.
pub fn pfc_socket(ifname: &str) -> Result<OwnedFd> {
    let ifindex = crate::sys::netns::ifindex(ifname)?;
    let proto = fabric_common::wire::ethernet::ETHERTYPE_MAC_CONTROL.to_be();
    // SAFETY: plain syscall.
    let fd = unsafe {
        libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, i32::from(proto))
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("socket(AF_PACKET)");
    }
    // SAFETY: a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: a valid sockaddr_ll of the stated size.
    let rc = unsafe {
        libc::bind(fd.as_raw_fd(), (&sll as *const libc::sockaddr_ll).cast(), size_of::<libc::sockaddr_ll>() as u32)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("binding AF_PACKET to {ifname}"));
    }
    Ok(fd)
}

/// The next frame waiting on an `AF_PACKET` socket, into `buf`; `None` when there is none.
/// Frames this host sent itself are skipped.
pub fn recv_frame<'a>(fd: &OwnedFd, buf: &'a mut [u8]) -> Result<Option<&'a [u8]>> {
    loop {
        // SAFETY: plain data.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_ll>() as u32;
        // SAFETY: valid buffer and address of the stated sizes.
        let n = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
                (&mut from as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(e).context("recvfrom(AF_PACKET)");
        }
        if from.sll_pkttype == libc::PACKET_OUTGOING {
            continue;
        }
        return Ok(Some(&buf[..n as usize]));
    }
}

/// Sends a whole Ethernet frame on the interface an `AF_PACKET` socket is bound to.
pub fn send_frame(fd: &OwnedFd, frame: &[u8]) -> Result<()> {
    // SAFETY: valid buffer of the stated size.
    let n = unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error()).context("send(AF_PACKET)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Control data laid out with the libc macros, as the kernel does.
    fn control_with(items: &[(i32, i32, &[u8])]) -> Vec<u8> {
        let mut buf = vec![0u64; 64];
        // SAFETY: msghdr is plain data; the CMSG macros stay inside the buffer we give them.
        unsafe {
            let mut mh: libc::msghdr = std::mem::zeroed();
            mh.msg_control = buf.as_mut_ptr().cast();
            mh.msg_controllen = 64 * 8;
            let mut h = libc::CMSG_FIRSTHDR(&mh);
            let mut total = 0;
            for &(level, ty, data) in items {
                (*h).cmsg_level = level;
                (*h).cmsg_type = ty;
                (*h).cmsg_len = libc::CMSG_LEN(data.len() as u32) as _;
                std::ptr::copy_nonoverlapping(data.as_ptr(), libc::CMSG_DATA(h), data.len());
                total += libc::CMSG_SPACE(data.len() as u32) as usize;
                h = libc::CMSG_NXTHDR(&mh, h);
            }
            let bytes = std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), total);
            bytes.to_vec()
        }
    }

    #[test]
    fn tos_from_control_messages() {
        // IPv4: IP_TOS arrives as one byte.
        assert_eq!(tos_from_control(&control_with(&[(libc::IPPROTO_IP, libc::IP_TOS, &[0x6B])])), Some(0x6B));
        // IPv6: the traffic class as an int, after an unrelated message.
        let ttl = 64i32.to_ne_bytes();
        let tclass = 0xC0i32.to_ne_bytes();
        let c =
            control_with(&[(libc::IPPROTO_IP, libc::IP_TTL, &ttl), (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &tclass)]);
        assert_eq!(tos_from_control(&c), Some(0xC0));
        // Nothing, or nothing of ours, or a length that runs past the buffer.
        assert_eq!(tos_from_control(&[]), None);
        assert_eq!(tos_from_control(&control_with(&[(libc::IPPROTO_IP, libc::IP_TTL, &ttl)])), None);
        let mut bad = control_with(&[(libc::IPPROTO_IP, libc::IP_TOS, &[0x6B])]);
        bad[0] = 200;
        assert_eq!(tos_from_control(&bad), None);
        // What we send is what we parse.
        let mut buf = [0u64; 4];
        let n = write_tos_cmsg(&mut buf, 0xC0);
        // SAFETY: reading back our own initialised buffer.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
        assert_eq!(tos_from_control(bytes), Some(0xC0));
    }
}
