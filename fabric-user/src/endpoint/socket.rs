//! Batched UDP I/O for the endpoint: one `sendmmsg`/`recvmmsg` call moves many packets, which
//! is what lets one core keep several QPs at rate.
use std::{
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    os::fd::AsRawFd,
};

use anyhow::{Context as _, Result};

/// Most packets per batched call.
pub const BATCH: usize = 64;

/// A UDP socket bound to `addr` for RoCEv2: non-blocking, with DF always set (`IP_PMTUDISC_DO`):
/// the kernel then never fragments, and gives DF datagrams of an unconnected socket IPv4
/// identification 0, so the sender knows the whole IP header the ICRC covers.
pub fn roce_socket(addr: SocketAddrV4) -> Result<UdpSocket> {
    let s = UdpSocket::bind(addr).with_context(|| format!("binding UDP {addr}"))?;
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
    // Room for bursts: the default socket buffers drop under a few QPs at rate.
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        let size: libc::c_int = 4 << 20;
        // SAFETY: as above.
        unsafe {
            libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, opt, (&size as *const libc::c_int).cast(), 4);
        }
    }
    Ok(s)
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
pub fn send_batch(sock: &UdpSocket, packets: &[(Vec<u8>, SocketAddrV4)]) -> Result<usize> {
    let mut sent = 0;
    while sent < packets.len() {
        let chunk = &packets[sent..(sent + BATCH).min(packets.len())];
        let mut addrs: Vec<libc::sockaddr_in> = chunk.iter().map(|(_, a)| sockaddr(*a)).collect();
        let mut iovs: Vec<libc::iovec> =
            chunk.iter().map(|(p, _)| libc::iovec { iov_base: p.as_ptr() as *mut _, iov_len: p.len() }).collect();
        // SAFETY: mmsghdr is plain data; every pointer set below outlives the call.
        let mut msgs: Vec<libc::mmsghdr> = (0..chunk.len()).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (i, m) in msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_in).cast();
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as u32;
            m.msg_hdr.msg_iov = &mut iovs[i];
            m.msg_hdr.msg_iovlen = 1;
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

/// Receives up to BATCH datagrams into `out` (payload, source); returns how many.
pub fn recv_batch(sock: &UdpSocket, bufs: &mut [[u8; 4096]; BATCH], out: &mut Vec<(usize, SocketAddrV4)>) -> Result<usize> {
    out.clear();
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
        out.push((msgs[i].msg_len as usize, src));
    }
    Ok(n as usize)
}
