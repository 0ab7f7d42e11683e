//! Network namespaces and capabilities: the only place that calls setns/unshare.
use std::{
    fs::File,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    process::Command,
};

use anyhow::{Context as _, Result, bail};

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process, from /proc/self/status.
fn effective_capabilities() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let line = status.lines().find_map(|l| l.strip_prefix("CapEff:")).context("no CapEff line in /proc/self/status")?;
    u64::from_str_radix(line.trim(), 16).context("parsing CapEff")
}

/// Fails with a clear message unless the process may create namespaces and load XDP programs.
pub fn require_capabilities() -> Result<()> {
    let caps = effective_capabilities()?;
    let has = |c: u32| caps & (1 << c) != 0;
    let mut missing = Vec::new();
    if !has(CAP_NET_ADMIN) {
        missing.push("CAP_NET_ADMIN");
    }
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_BPF (or CAP_SYS_ADMIN)");
    }
    if !missing.is_empty() {
        bail!(
            "fabric needs {} to build namespaces and load XDP programs; run it as root \
             (e.g. `sudo -E cargo ...`)",
            missing.join(" and ")
        );
    }
    Ok(())
}

/// Moves the calling thread into a fresh, anonymous network namespace. It disappears, with
/// every link in it, when the last thread and process in it are gone: cleanup that a panic
/// cannot skip.
pub fn unshare_thread() -> Result<()> {
    // SAFETY: plain syscall; CLONE_NEWNET only affects the calling thread.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error()).context("unshare(CLONE_NEWNET)");
    }
    Ok(())
}

/// Moves the calling thread into the named namespace (`/run/netns/NAME`).
pub fn enter(name: &str) -> Result<()> {
    let path = Path::new("/run/netns").join(name);
    let f = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: plain syscall on a valid fd; affects only the calling thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("setns into {name}"));
    }
    Ok(())
}

/// The ifindex of `name` in the calling thread's namespace.
pub fn ifindex(name: &str) -> Result<u32> {
    let c = std::ffi::CString::new(name)?;
    // SAFETY: valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        bail!("no interface {name} in this namespace");
    }
    Ok(idx)
}

/// Runs `ip ARGS` (iproute2) in the calling thread's namespace, failing with its stderr.
/// Used by tests and benchmarks to build small fixtures; the testbed controller uses netlink.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("running ip (install iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Runs `f` on a new thread that has entered the named namespace. Sockets and links that `f`
/// creates belong to that namespace; file descriptors it returns are usable from any thread.
pub fn in_named<T: Send>(name: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(name)?;
            f()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Where named namespaces live (as iproute2 keeps them).
pub const NETNS_DIR: &str = "/run/netns";

/// Creates a named network namespace the way iproute2 does: a fresh namespace, bind-mounted on
/// `/run/netns/NAME`, so `ip netns exec NAME` works on it too.
pub fn create_named(name: &str) -> Result<()> {
    std::fs::create_dir_all(NETNS_DIR).context("creating /run/netns")?;
    make_netns_dir_shared()?;
    let path = Path::new(NETNS_DIR).join(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("creating {} (does the namespace exist already?)", path.display()))?;
    let result = std::thread::scope(|s| {
        s.spawn(|| -> Result<()> {
            unshare_thread()?;
            bind_mount(Path::new("/proc/thread-self/ns/net"), &path)
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    result
}

/// Deletes a named namespace; its links go with it. Missing namespaces are not an error.
pub fn delete_named(name: &str) -> Result<()> {
    let path = Path::new(NETNS_DIR).join(name);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: valid path string. Failure (not mounted) is fine: we remove the file anyway.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Names of the existing namespaces that start with `prefix`.
pub fn list_named(prefix: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let entries = match std::fs::read_dir(NETNS_DIR) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(names),
        Err(e) => return Err(e).context("reading /run/netns"),
    };
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

fn bind_mount(source: &Path, target: &Path) -> Result<()> {
    let src = std::ffi::CString::new(source.as_os_str().as_encoded_bytes())?;
    let dst = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())?;
    let none = c"none";
    // SAFETY: valid C strings; a bind mount of a namespace file.
    if unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), none.as_ptr(), libc::MS_BIND, std::ptr::null()) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("bind-mounting {} on {}", source.display(), target.display()));
    }
    Ok(())
}

/// iproute2 makes /run/netns a shared mount so namespaces propagate to other mount namespaces.
fn make_netns_dir_shared() -> Result<()> {
    let dir = c"/run/netns";
    let none = c"none";
    let empty = c"";
    // SAFETY: valid C strings; remount flags only.
    let shared = |_: ()| unsafe {
        libc::mount(empty.as_ptr(), dir.as_ptr(), none.as_ptr(), libc::MS_SHARED | libc::MS_REC, std::ptr::null())
    };
    if shared(()) == 0 {
        return Ok(());
    }
    // Not a mount point yet: bind it onto itself first.
    // SAFETY: as above.
    if unsafe { libc::mount(dir.as_ptr(), dir.as_ptr(), none.as_ptr(), libc::MS_BIND | libc::MS_REC, std::ptr::null()) }
        != 0
    {
        return Err(std::io::Error::last_os_error()).context("bind-mounting /run/netns on itself");
    }
    if shared(()) != 0 {
        return Err(std::io::Error::last_os_error()).context("making /run/netns a shared mount");
    }
    Ok(())
}

/// Sets a sysctl of the calling thread's namespace (`net/ipv4/ip_forward` style path), writing
/// only when it differs. Writing a forwarding switch takes the RTNL lock and costs more the more
/// namespaces exist (measured: 1.3 ms per write with 1,000 namespaces, 5 ms with 4,000), while a
/// new namespace usually has the value already; reading is cheap.
pub fn sysctl(key: &str, value: &str) -> Result<()> {
    let path = Path::new("/proc/sys").join(key);
    let current = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    if current.trim() == value {
        return Ok(());
    }
    std::fs::write(&path, value).with_context(|| format!("writing {} = {value}", path.display()))
}

/// The two IP families, for their per-namespace forwarding switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    /// The family's forwarding switch under /proc/sys.
    pub const fn forwarding_key(self) -> &'static str {
        match self {
            IpFamily::V4 => "net/ipv4/ip_forward",
            IpFamily::V6 => "net/ipv6/conf/all/forwarding",
        }
    }
}

/// Whether a namespace created now starts with `family` forwarding on, given
/// `net.core.devconf_inherit_init_net` and whether the creating (root) namespace forwards.
/// The kernel's rule: 0 (its default) copies IPv4's settings and gives IPv6 compiled-in
/// defaults; 1 and 3 copy both (from init_net, from the creator: the same namespace here);
/// 2 gives both defaults. The compiled-in default is off. An unknown mode counts as copying, so
/// that the caller turns forwarding off rather than trusting it is off.
pub const fn new_namespace_forwards(inherit_mode: u32, family: IpFamily, creator_forwards: bool) -> bool {
    let copies = !matches!((inherit_mode, family), (2, _) | (0, IpFamily::V6));
    copies && creator_forwards
}

/// For each family, whether a new namespace will start forwarding (read from this process's
/// namespace: the mode, and its own forwarding switches). Lets the testbed skip touching a
/// new namespace's /proc/sys/net, whose first access costs more the more namespaces exist.
pub fn inherited_forwarding() -> Result<[(IpFamily, bool); 2]> {
    let read = |key: &str| -> Result<String> {
        let path = Path::new("/proc/sys").join(key);
        Ok(std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?.trim().to_owned())
    };
    // Kernels before 5.1 have no such switch and behave as mode 0.
    let mode = read("net/core/devconf_inherit_init_net").ok().and_then(|m| m.parse().ok()).unwrap_or(0);
    let mut out = [(IpFamily::V4, false), (IpFamily::V6, false)];
    for (family, forwards) in &mut out {
        *forwards = new_namespace_forwards(mode, *family, read(family.forwarding_key())? != "0");
    }
    Ok(out)
}

/// Turns off transmit checksum offload on `ifname` (in the calling thread's namespace). A veth
/// hands its peer packets whose L4 checksum is still to be filled in; once XDP redirects such a
/// frame, that promise is lost and the receiver sees a bad checksum. Software checksums avoid it.
pub fn disable_tx_checksum(ifname: &str) -> Result<()> {
    const ETHTOOL_STXCSUM: u32 = 0x17;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let mut value = EthtoolValue { cmd: ETHTOOL_STXCSUM, data: 0 };
    // SAFETY: `value` is the ethtool_value the command reads, alive for the call.
    unsafe { ethtool(ifname, (&mut value as *mut EthtoolValue).cast()) }
        .with_context(|| format!("turning off tx checksum offload on {ifname}"))
}

/// Sets a socket's receive timeout (SO_RCVTIMEO); a zero timeout is rounded up to 1 µs, since
/// zero would mean "block forever".
pub fn set_receive_timeout(fd: std::os::fd::BorrowedFd<'_>, timeout: std::time::Duration) -> Result<()> {
    use std::os::fd::AsRawFd as _;
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros().max(1) as libc::suseconds_t,
    };
    // SAFETY: a valid fd, and an option value of the size passed, alive for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as u32,
        )
    };
    anyhow::ensure!(rc == 0, "setting a receive timeout: {}", std::io::Error::last_os_error());
    Ok(())
}

/// Refuses a switch port that uses more than one receive queue. The congestion model's
/// per-ingress accounts and pause fields have a single writer, the port's receive path: a veth
/// with one receive queue runs it in one NAPI context at a time. With more, XDP redirects from
/// different CPUs land on different queues, two CPUs update one account at once, and the
/// counts go wrong silently.
pub fn ensure_single_rx_queue(ifname: &str) -> Result<()> {
    let n = rx_queues(ifname)?;
    anyhow::ensure!(
        n == 1,
        "switch port {ifname} uses {n} receive queues; the congestion model needs 1 (one writer per ingress account)"
    );
    Ok(())
}

/// The receive queues a device uses (ETHTOOL_GCHANNELS: rx plus combined channels), in the
/// calling thread's namespace. For veth this is its real queue count, which XDP redirects
/// spread over by CPU.
pub fn rx_queues(ifname: &str) -> Result<u32> {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    /// struct ethtool_channels.
    #[repr(C)]
    #[derive(Default)]
    struct EthtoolChannels {
        cmd: u32,
        max_rx: u32,
        max_tx: u32,
        max_other: u32,
        max_combined: u32,
        rx_count: u32,
        tx_count: u32,
        other_count: u32,
        combined_count: u32,
    }
    let mut ch = EthtoolChannels { cmd: ETHTOOL_GCHANNELS, ..Default::default() };
    // SAFETY: `ch` is the ethtool_channels the command fills, alive for the call.
    unsafe { ethtool(ifname, (&mut ch as *mut EthtoolChannels).cast()) }
        .with_context(|| format!("reading the channels of {ifname}"))?;
    Ok(ch.rx_count + ch.combined_count)
}

/// One SIOCETHTOOL ioctl on `ifname` with `data` as its command block.
///
/// # Safety
/// `data` must point at the ethtool structure the command in its first word expects, valid for
/// reads and writes for the duration of the call.
unsafe fn ethtool(ifname: &str, data: *mut libc::c_char) -> Result<()> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    // SAFETY: ifreq is plain data.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = ifname.as_bytes();
    anyhow::ensure!(name.len() < ifr.ifr_name.len(), "interface name {ifname} too long");
    for (d, s) in ifr.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = data;
    // SAFETY: a datagram socket for the ioctl, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    anyhow::ensure!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: valid fd, and an ifreq whose data points at the caller's live command block.
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL, &mut ifr) };
    let err = std::io::Error::last_os_error();
    // SAFETY: closing our own fd.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(err.into());
    }
    Ok(())
}

/// A raw packet socket bound to `ifname` in the caller's namespace, for sending whole frames
/// only (protocol 0: it receives nothing): the agent's PFC frames, the benchmark's seed frames.
pub fn raw_socket(ifname: &str) -> Result<OwnedFd> {
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        bail!("AF_PACKET socket: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let ifindex = ifindex(ifname)?;
    // SAFETY: zeroed sockaddr_ll is valid; fields set below.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: valid socket and address of the right size.
    let r = unsafe {
        libc::bind(fd.as_raw_fd(), (&sll as *const libc::sockaddr_ll).cast(), size_of::<libc::sockaddr_ll>() as u32)
    };
    if r < 0 {
        bail!("binding a packet socket to {ifname}: {}", std::io::Error::last_os_error());
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::{IpFamily, new_namespace_forwards};

    /// The kernel's devconf_inherit_init_net table: which new namespaces copy the creator's
    /// forwarding switch, per family and mode.
    #[test]
    fn new_namespaces_forward_only_where_the_mode_copies_a_forwarding_creator() {
        let copies = |mode, family| new_namespace_forwards(mode, family, true);
        assert!(copies(0, IpFamily::V4), "mode 0 copies IPv4");
        assert!(!copies(0, IpFamily::V6), "mode 0 resets IPv6 to defaults");
        assert!(copies(1, IpFamily::V4) && copies(1, IpFamily::V6));
        assert!(!copies(2, IpFamily::V4) && !copies(2, IpFamily::V6));
        assert!(copies(3, IpFamily::V4) && copies(3, IpFamily::V6));
        assert!(copies(7, IpFamily::V6), "an unknown mode is assumed to copy");
        for mode in 0..4 {
            for family in [IpFamily::V4, IpFamily::V6] {
                assert!(!new_namespace_forwards(mode, family, false), "a creator that does not forward");
            }
        }
    }
}
