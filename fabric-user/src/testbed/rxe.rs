//! Soft-RoCE (rxe) hosts: `fabric up --endpoints rxe`.
//!
//! Up to at least Linux 6.12, rxe opens its UDP/4791 socket only in the initial network namespace,
//! so an rxe device on a veth inside a host namespace receives nothing. The layout used instead:
//! the switches stay in their namespaces, every host's veth end moves to the initial namespace
//! (of the VM or CI runner; in tests, of the calling thread) under the name `<prefix>-<host>`,
//! and per-host policy routing forces host-to-host traffic out through the host's RTSW:
//!
//! ```text
//! pref 50    iif <veth> lookup local         frames arriving from the fabric are delivered
//! pref 100   from <host-ip> lookup <table>   anything a host sends leaves via its RTSW
//! pref 1000  lookup local                    the local table, moved from pref 0 to after them
//! table <table>: default via <RTSW address> dev <veth>
//! rp_filter 0 (all, default, veth), accept_local 1 (veth)
//! ```
//!
//! then `rdma link add <prefix>_<host> type rxe netdev <veth>`. A kernel whose rxe opens its socket
//! in the device's own namespace is detected ([`rxe_supports_netns`]); there every host keeps its
//! namespace and gets its rxe device in it. [`down`] removes all of it (rxe devices, rules,
//! tables, veths) from what `up` recorded, and by name when even that record is gone.
use std::{
    collections::BTreeMap,
    fs::File,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsFd as _, AsRawFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};
use futures::TryStreamExt as _;
use rtnetlink::{
    Handle, IpVersion, LinkUnspec, RouteMessageBuilder,
    packet_route::{
        link::LinkAttribute,
        rule::{RuleAction, RuleAttribute},
    },
};
use serde::{Deserialize, Serialize};

use crate::{
    dataplane::{PROGRAM_PASS, SwitchDataplane},
    model::plan::NodeId,
    state::State,
    state::bpf_dir,
    state::link_pin_name,
    state::state_dir,
    sys::netlink,
    sys::netns,
};

/// What every rxe result says about PFC.
pub const PFC_NOTE: &str = "rxe hosts sit on veths, and veth ignores PFC pause frames: rxe hosts do not obey \
     the switches' PFC (pauses are counted at the switches, not honoured by the senders)";

/// Which endpoints a testbed's hosts run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Endpoints {
    /// The project's own RoCEv2 endpoints, one namespace per host.
    #[default]
    Own,
    /// The kernel's soft-RoCE (rdma_rxe) devices.
    Rxe,
}

/// Rule priorities of the layout.
pub const PREF_IIF: u32 = 50;
pub const PREF_FROM: u32 = 100;
pub const PREF_LOCAL: u32 = 1000;
const RT_TABLE_LOCAL: u32 = 255;

/// One rxe host as `up` laid it out.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RxeHost {
    pub host: String,
    pub node: NodeId,
    /// The host's veth (in the initial namespace, or in its own with namespace-aware rxe).
    pub ifname: String,
    pub ipv4: Ipv4Addr,
    pub gateway: Ipv4Addr,
    /// Its policy-routing table (initial-namespace layout).
    pub table: u32,
    /// Its rxe device (none when the layout was built without rxe, as in tests).
    pub device: Option<String>,
    /// The index of its RoCEv2 IPv4-mapped GID.
    pub gid_index: Option<u32>,
    /// The namespace to run its programs in (namespace-aware rxe only).
    pub netns: Option<String>,
}

/// What `up --endpoints rxe` built, saved next to the testbed's state for `down` and workloads.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RxeLayout {
    pub prefix: String,
    /// One namespace per host (rxe is namespace-aware on this kernel).
    pub per_host_netns: bool,
    pub hosts: Vec<RxeHost>,
}

impl RxeLayout {
    pub fn path(prefix: &str) -> PathBuf {
        state_dir(prefix).join("rxe.json")
    }

    pub fn load(prefix: &str) -> Result<Self> {
        let path = Self::path(prefix);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("testbed {prefix:?} has no rxe hosts (no {})", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("corrupt {}", path.display()))
    }

    /// Into the testbed's state folder (`up` made it; a `down` meanwhile makes this fail rather
    /// than bring the folder back).
    fn save(&self) -> Result<()> {
        crate::sys::file::write_whole(&Self::path(&self.prefix), &serde_json::to_vec_pretty(self)?)
    }

    pub fn host(&self, name: &str) -> Result<&RxeHost> {
        self.hosts.iter().find(|h| h.host == name).with_context(|| {
            let names: Vec<&str> = self.hosts.iter().map(|h| h.host.as_str()).collect();
            format!("no rxe host {name:?}; the hosts: {}", names.join(", "))
        })
    }
}

/// How `up` builds the rxe hosts.
#[derive(Clone, Copy, Debug)]
pub struct RxeOptions {
    /// Create the rxe devices. `false` builds only the layout (veths, rules, routes): for testing
    /// it on a kernel without rxe.
    pub create_devices: bool,
}

/// The veth name of a rxe host in the initial namespace.
pub fn host_ifname(prefix: &str, host: &str) -> Result<String> {
    let name = format!("{prefix}-{host}");
    ensure!(name.len() <= 15, "interface name {name:?} is longer than 15 bytes; use a shorter prefix");
    Ok(name)
}

/// The rxe device name of a host.
pub fn device_name(prefix: &str, host: &str) -> String {
    format!("{prefix}_{host}")
}

/// The first policy-routing table of a testbed: derived from its prefix (FNV-1a), so `down` finds
/// the tables even without the testbed's state. Host i uses `table_base + i`, i < 256.
pub fn table_base(prefix: &str) -> u32 {
    let h = prefix.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193));
    0x0fab_0000 | ((h & 0xff) << 8)
}

/// Loads rdma_rxe if needed and checks that the `rdma` tool is there.
pub fn ensure_rxe() -> Result<()> {
    if !Path::new("/sys/module/rdma_rxe").exists() {
        let _ = Command::new("modprobe").arg("rdma_rxe").output();
    }
    ensure!(
        Path::new("/sys/module/rdma_rxe").exists(),
        "this kernel has no rdma_rxe module (on Debian/Ubuntu: apt-get install linux-modules-extra-$(uname -r); \
         or run in the VM: `cargo xtask vm`)"
    );
    ensure!(
        Command::new("rdma").arg("-V").output().is_ok_and(|o| o.status.success()),
        "the `rdma` tool (iproute2) is missing"
    );
    Ok(())
}

fn rdma(args: &[&str]) -> Result<String> {
    let out = Command::new("rdma").args(args).output().context("running rdma (install iproute2)")?;
    ensure!(out.status.success(), "rdma {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether rxe opens its UDP socket in the namespace of its netdev (then hosts can keep their
/// namespaces): tried on a dummy device in a scratch namespace.
pub fn rxe_supports_netns() -> Result<bool> {
    std::thread::scope(|s| {
        s.spawn(|| -> Result<bool> {
            netns::unshare_thread()?;
            netns::ip(&["link", "add", "rxeprobe0", "type", "dummy"])?;
            netns::ip(&["link", "set", "rxeprobe0", "up"])?;
            if rdma(&["link", "add", "rxeprobe0", "type", "rxe", "netdev", "rxeprobe0"]).is_err() {
                return Ok(false);
            }
            let udp = std::fs::read_to_string("/proc/thread-self/net/udp").unwrap_or_default();
            let _ = rdma(&["link", "delete", "rxeprobe0"]);
            // Local address column `ADDR:PORT` in hex; 4791 = 0x12B7.
            Ok(udp.lines().skip(1).any(|l| l.split_whitespace().nth(1).is_some_and(|a| a.ends_with(":12B7"))))
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Runs `f` with a netlink handle in the calling thread's namespace.
pub fn here<T, F, Fut>(f: F) -> Result<T>
where
    F: FnOnce(Handle) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let (conn, handle, _) = rtnetlink::new_connection().context("opening a netlink socket")?;
        tokio::spawn(conn);
        f(handle).await
    })
}

fn planned(state: &State, per_host_netns: bool) -> Result<RxeLayout> {
    let plan = &state.plan;
    let prefix = &plan.topology.prefix;
    let hosts: Vec<NodeId> = plan.hosts().collect();
    ensure!(hosts.len() <= 256, "rxe mode takes at most 256 hosts");
    let base = table_base(prefix);
    let mut out = Vec::new();
    for (i, &h) in hosts.iter().enumerate() {
        let node = &plan.nodes[h];
        let port = &node.ports[0];
        let gw = plan.nodes[port.peer_node].ports[port.peer_port].ipv4;
        out.push(RxeHost {
            host: node.name.clone(),
            node: h,
            ifname: if per_host_netns { port.ifname.clone() } else { host_ifname(prefix, &node.name)? },
            ipv4: port.ipv4,
            gateway: gw,
            table: base + i as u32,
            device: None,
            gid_index: None,
            netns: per_host_netns.then(|| plan.netns(h)),
        });
    }
    Ok(RxeLayout { prefix: prefix.clone(), per_host_netns, hosts: out })
}

/// rxe is namespace-aware: every host keeps its namespace and gets its device there.
pub(super) fn devices_in_namespaces(state: &State) -> Result<RxeLayout> {
    let mut layout = planned(state, true)?;
    layout.save()?;
    for i in 0..layout.hosts.len() {
        let h = &layout.hosts[i];
        let dev = device_name(&layout.prefix, &h.host);
        let (ifname, ip) = (h.ifname.clone(), h.ipv4);
        let ns = h.netns.clone().expect("per-host");
        layout.hosts[i].device = Some(dev.clone());
        layout.save()?;
        layout.hosts[i].gid_index = Some(netns::in_named(&ns, || {
            rdma(&["link", "add", &dev, "type", "rxe", "netdev", &ifname])?;
            wait_gid_index(&dev, ip)
        })?);
    }
    layout.save()?;
    Ok(layout)
}

/// The initial namespace's reverse-path filters that the layout turns off (a host's replies come
/// back through its RTSW on another path than the kernel would choose).
const RP_FILTER_KEYS: [&str; 2] = ["net/ipv4/conf/all/rp_filter", "net/ipv4/conf/default/rp_filter"];

/// Where the first rxe testbed keeps the filters' settings from before it, beside the testbeds'
/// state folders: the last one's `down` puts them back.
fn rp_filter_record() -> PathBuf {
    state_dir("x").parent().expect("has a parent").join(".rxe-rp-filter.json")
}

/// Records [`RP_FILTER_KEYS`]' settings, unless an rxe testbed before this one did (it saw them
/// before any was changed).
fn record_rp_filter() -> Result<()> {
    let path = rp_filter_record();
    if path.exists() {
        return Ok(());
    }
    let mut before = BTreeMap::new();
    for key in RP_FILTER_KEYS {
        let file = Path::new("/proc/sys").join(key);
        let value = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        before.insert(key.to_string(), value.trim().to_string());
    }
    crate::sys::file::write_whole(&path, &serde_json::to_vec(&before)?)
}

/// Puts back the settings [`record_rp_filter`] kept (the last rxe testbed's `down`).
fn restore_rp_filter() -> Result<()> {
    let path = rp_filter_record();
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(()) };
    let before: BTreeMap<String, String> =
        serde_json::from_str(&text).with_context(|| format!("corrupt {}", path.display()))?;
    for (key, value) in &before {
        netns::sysctl(key, value)?;
    }
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))
}

/// The layout of the module docs, in the calling thread's namespace.
pub(super) fn initial_namespace_layout(state: &State, opts: RxeOptions) -> Result<RxeLayout> {
    let plan = &state.plan;
    let prefix = &plan.topology.prefix;
    let mut layout = planned(state, false)?;
    // Recorded first: `down` then finds everything even if we stop half-way.
    layout.save()?;
    let here_ns = File::open("/proc/thread-self/ns/net").context("opening this thread's namespace")?;
    for h in &layout.hosts {
        let node = &plan.nodes[h.node];
        let old = node.ports[0].ifname.clone();
        // The host's XDP_PASS link goes with the host namespace; it is attached again below.
        let pin = bpf_dir(prefix).join(&node.name).join(link_pin_name(&old));
        let _ = std::fs::remove_file(&pin);
        let (new, fd) = (h.ifname.clone(), here_ns.as_raw_fd());
        netlink::in_netns(&plan.netns(h.node), |nl| async move {
            let idx = netlink::ifindex(&nl, &old).await?;
            // Renaming needs the link down first (one message would rename before the flags).
            nl.link().set(LinkUnspec::new_with_index(idx).down().build()).execute().await?;
            nl.link().set(LinkUnspec::new_with_index(idx).name(new.clone()).build()).execute().await?;
            nl.link().set(LinkUnspec::new_with_index(idx).setns_by_fd(fd).build()).execute().await?;
            Ok(())
        })
        .with_context(|| format!("moving {}'s veth to the initial namespace as {}", node.name, h.ifname))?;
        netns::delete_named(&plan.netns(h.node))?;
    }
    record_rp_filter()?;
    for key in RP_FILTER_KEYS {
        netns::sysctl(key, "0")?;
    }
    let mut pass = SwitchDataplane::load_programs(&[PROGRAM_PASS])?;
    for h in &layout.hosts {
        let node = &plan.nodes[h.node];
        let (port, peer) = (&node.ports[0], &plan.nodes[node.ports[0].peer_node].ports[node.ports[0].peer_port]);
        let (ifname, mac6) = (h.ifname.clone(), peer.mac);
        let (ip, ip6, gw, gw6, table) = (h.ipv4, port.ipv6, h.gateway, peer.ipv6, h.table);
        let idx = here(|nl| async move {
            let idx = netlink::ifindex(&nl, &ifname).await?;
            netlink::add_address(&nl, idx, IpAddr::V4(ip), 31).await?;
            netlink::add_address(&nl, idx, IpAddr::V6(ip6), 127).await?;
            netlink::add_neighbour(&nl, idx, IpAddr::V4(gw), mac6).await?;
            netlink::add_neighbour(&nl, idx, IpAddr::V6(gw6), mac6).await?;
            netlink::set_up(&nl, idx, true).await?;
            let route =
                RouteMessageBuilder::<Ipv4Addr>::new().gateway(gw).output_interface(idx).table_id(table).build();
            nl.route()
                .add(route)
                .replace()
                .execute()
                .await
                .with_context(|| format!("default route of table {table}"))?;
            nl.rule()
                .add()
                .v4()
                .input_interface(ifname.clone())
                .table_id(RT_TABLE_LOCAL)
                .action(RuleAction::ToTable)
                .priority(PREF_IIF)
                .execute()
                .await
                .with_context(|| format!("rule iif {ifname} lookup local"))?;
            nl.rule()
                .add()
                .v4()
                .source_prefix(ip, 32)
                .table_id(table)
                .action(RuleAction::ToTable)
                .priority(PREF_FROM)
                .execute()
                .await
                .with_context(|| format!("rule from {ip} lookup {table}"))?;
            Ok(idx)
        })?;
        netns::disable_tx_checksum(&h.ifname)?;
        netns::sysctl(&format!("net/ipv4/conf/{}/rp_filter", h.ifname), "0")?;
        netns::sysctl(&format!("net/ipv4/conf/{}/accept_local", h.ifname), "1")?;
        // Frames redirected into a veth need an XDP program on it.
        let pin = bpf_dir(prefix).join(&node.name);
        std::fs::create_dir_all(&pin)?;
        pass.attach_pinned(PROGRAM_PASS, idx, &pin.join(link_pin_name(&h.ifname)))?;
    }
    here(|nl| async move { move_local_rule(&nl).await })?;
    if opts.create_devices {
        for i in 0..layout.hosts.len() {
            let dev = device_name(prefix, &layout.hosts[i].host);
            layout.hosts[i].device = Some(dev.clone());
            layout.save()?;
            rdma(&["link", "add", &dev, "type", "rxe", "netdev", &layout.hosts[i].ifname])?;
            layout.hosts[i].gid_index = Some(wait_gid_index(&dev, layout.hosts[i].ipv4)?);
        }
        layout.save()?;
    }
    Ok(layout)
}

async fn local_rules(nl: &Handle) -> Result<Vec<(u32, rtnetlink::packet_route::rule::RuleMessage)>> {
    let rules: Vec<_> = nl.rule().get(IpVersion::V4).execute().try_collect().await.context("listing rules")?;
    Ok(rules.into_iter().filter(|r| rule_table(r) == RT_TABLE_LOCAL).map(|r| (rule_priority(&r), r)).collect())
}

fn rule_table(r: &rtnetlink::packet_route::rule::RuleMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| if let RuleAttribute::Table(t) = a { Some(*t) } else { None })
        .unwrap_or(r.header.table as u32)
}

fn rule_priority(r: &rtnetlink::packet_route::rule::RuleMessage) -> u32 {
    r.attributes.iter().find_map(|a| if let RuleAttribute::Priority(p) = a { Some(*p) } else { None }).unwrap_or(0)
}

/// `ip rule add pref 1000 lookup local; ip rule del pref 0 lookup local` (idempotent).
async fn move_local_rule(nl: &Handle) -> Result<()> {
    let rules = local_rules(nl).await?;
    // A bare `lookup local` rule (no selector) at PREF_LOCAL.
    if !rules.iter().any(|(p, r)| *p == PREF_LOCAL && r.header.src_len == 0 && r.header.dst_len == 0) {
        nl.rule()
            .add()
            .v4()
            .table_id(RT_TABLE_LOCAL)
            .action(RuleAction::ToTable)
            .priority(PREF_LOCAL)
            .execute()
            .await
            .context("rule pref 1000 lookup local")?;
    }
    for (p, r) in rules {
        if p == 0 {
            nl.rule().del(r).execute().await.context("deleting rule pref 0 lookup local")?;
        }
    }
    Ok(())
}

/// The inverse of [`move_local_rule`].
async fn restore_local_rule(nl: &Handle) -> Result<()> {
    let rules = local_rules(nl).await?;
    if !rules.iter().any(|(p, _)| *p == 0) {
        nl.rule()
            .add()
            .v4()
            .table_id(RT_TABLE_LOCAL)
            .action(RuleAction::ToTable)
            .priority(0)
            .execute()
            .await
            .context("rule pref 0 lookup local")?;
    }
    for (p, r) in rules {
        if p == PREF_LOCAL
            && r.header.src_len == 0
            && r.header.dst_len == 0
            && !r.attributes.iter().any(|a| matches!(a, RuleAttribute::Iifname(_)))
        {
            nl.rule().del(r).execute().await.context("deleting rule pref 1000 lookup local")?;
        }
    }
    Ok(())
}

/// The index of the device's RoCE v2 GID for `ip` (`::ffff:a.b.c.d`), from sysfs.
pub fn gid_index(dev: &str, ip: Ipv4Addr) -> Result<Option<u32>> {
    let port = Path::new("/sys/class/infiniband").join(dev).join("ports/1");
    let want = ip.to_ipv6_mapped();
    let entries = std::fs::read_dir(port.join("gids")).with_context(|| format!("reading {}/gids", port.display()))?;
    let mut found: Vec<u32> = Vec::new();
    for e in entries.flatten() {
        let Ok(i) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(gid) = std::fs::read_to_string(e.path()) else { continue };
        let hex: String = gid.trim().chars().filter(|c| *c != ':').collect();
        let Ok(v) = u128::from_str_radix(&hex, 16) else { continue };
        if Ipv6Addr::from(v) != want {
            continue;
        }
        let kind = std::fs::read_to_string(port.join("gid_attrs/types").join(i.to_string())).unwrap_or_default();
        if kind.trim().eq_ignore_ascii_case("RoCE v2") {
            found.push(i);
        }
    }
    Ok(found.into_iter().min())
}

fn wait_gid_index(dev: &str, ip: Ipv4Addr) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(i) = gid_index(dev, ip)? {
            return Ok(i);
        }
        if Instant::now() > deadline {
            bail!("{dev} has no RoCE v2 GID for {ip} after 10 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// rxe's own counters of a device (`hw_counters`), by name.
pub fn hw_counters(dev: &str) -> Result<BTreeMap<String, u64>> {
    let dir = Path::new("/sys/class/infiniband").join(dev).join("ports/1/hw_counters");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?.flatten() {
        if let Ok(v) = std::fs::read_to_string(e.path()).map(|s| s.trim().parse::<u64>()) {
            out.insert(e.file_name().to_string_lossy().into_owned(), v.unwrap_or(0));
        }
    }
    Ok(out)
}

/// rxe counters that must stay zero on a clean run: a sequence error (the receiver saw a gap in
/// a QP's requests and NAKed it: the fabric lost or reordered a packet), a transfer that failed
/// (retries exhausted), or a host or device error (no receive buffer posted, the link went
/// down). A frame whose ICRC does not check is dropped silently by the receiver; it shows up as
/// a sequence error, or, at a message's tail, only as a packet sent and never received, which
/// the runs check apart (sent and received packets of both devices).
/// Not among them: [`RETRY_COUNTERS`], and `send_err`, which counts packets the local stack
/// refused to transmit (the veth's ring was full) and that rxe sent again; both are reported.
pub const ERROR_COUNTERS: &[&str] = &[
    "out_of_seq_request",
    "rcvd_seq_err",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "rcvd_rnr_err",
    "send_rnr_err",
    "link_downed",
];

/// rxe counters of its resends, whatever caused them: the requester resent what was
/// unacknowledged (its retransmission timer fired, or a NAK asked), and the receiver discarded
/// the copies it already had. Reported, not an error. With no sequence error and every packet
/// sent received, a write or send was delivered once and in order, and the resends were the
/// retransmission timer's: the hosts' timing, as our fabric never holds a packet (its queues
/// are modelled). On the 6.1 kernel under software emulation rxe's send path now and then
/// stalls until the timer (`qp_timeout`) fires. (For reads they can also mean a response that
/// came early, which rxe drops and recovers by timer: reordering.)
pub const RETRY_COUNTERS: &[&str] = &["completer_retry_err", "duplicate_request"];

/// Removes a testbed's rxe hosts: devices, rules, tables, veths; the local rule goes back to
/// pref 0 when no other rxe testbed remains. Works from the saved layout or, without it, by name.
/// Returns what it removed, for `down`'s report. Runs in the calling thread's namespace.
pub fn down(prefix: &str) -> Result<usize> {
    let layout = RxeLayout::load(prefix).ok();
    let ifnames: Vec<String> =
        layout.iter().flat_map(|l| l.hosts.iter().filter(|h| h.netns.is_none()).map(|h| h.ifname.clone())).collect();
    let devices: Vec<String> = layout.iter().flat_map(|l| l.hosts.iter().filter_map(|h| h.device.clone())).collect();
    let name_prefix = format!("{prefix}-");
    let mut removed = 0;
    // rxe devices: recorded, named after the testbed, or on one of its veths.
    if let Ok(entries) = std::fs::read_dir("/sys/class/infiniband") {
        for e in entries.flatten() {
            let dev = e.file_name().to_string_lossy().into_owned();
            let ndev = std::fs::read_to_string(e.path().join("ports/1/gid_attrs/ndevs/0")).unwrap_or_default();
            let ndev = ndev.trim();
            if devices.contains(&dev) || dev.starts_with(&format!("{prefix}_")) || ifnames.iter().any(|i| i == ndev) {
                rdma(&["link", "delete", &dev]).with_context(|| format!("removing rxe device {dev}"))?;
                removed += 1;
            }
        }
    }
    let others = other_rxe_testbeds(prefix);
    let had_layout = layout.is_some();
    let tables: Vec<u32> = layout.iter().flat_map(|l| l.hosts.iter().map(|h| h.table)).collect();
    let base = table_base(prefix);
    removed += here(|nl| async move {
        let mut n = 0;
        let rules: Vec<_> = nl.rule().get(IpVersion::V4).execute().try_collect().await.context("listing rules")?;
        for r in rules {
            let table = rule_table(&r);
            let iif = r
                .attributes
                .iter()
                .find_map(|a| if let RuleAttribute::Iifname(i) = a { Some(i.clone()) } else { None });
            // By the tables this testbed's layout recorded. Without the record (a crash lost it)
            // by the prefix's table range: it comes from a hash of the prefix, which another
            // testbed's may share, so only then.
            let ours = tables.contains(&table)
                || (!had_layout && (base..base + 256).contains(&table))
                || iif.is_some_and(|i| {
                    ifnames.contains(&i) || (i.starts_with(&name_prefix) && rule_priority(&r) == PREF_IIF)
                });
            if ours {
                nl.rule().del(r).execute().await.context("deleting a rule")?;
                n += 1;
            }
        }
        let links: Vec<_> = nl.link().get().execute().try_collect().await.context("listing links")?;
        for l in links {
            let Some(name) =
                l.attributes.iter().find_map(|a| if let LinkAttribute::IfName(n) = a { Some(n.clone()) } else { None })
            else {
                continue;
            };
            let veth = l
                .attributes
                .iter()
                .any(|a| matches!(a, LinkAttribute::LinkInfo(i) if format!("{i:?}").contains("Veth")));
            if ifnames.contains(&name) || (veth && name.starts_with(&name_prefix)) {
                nl.link().del(l.header.index).execute().await.with_context(|| format!("deleting {name}"))?;
                n += 1;
            }
        }
        if others == 0 && (had_layout || n > 0) {
            restore_local_rule(&nl).await?;
        }
        Ok(n)
    })?;
    if others == 0 {
        restore_rp_filter()?;
    }
    let _ = std::fs::remove_file(RxeLayout::path(prefix));
    Ok(removed)
}

/// How many other testbeds have rxe hosts (the moved local rule stays while any does).
fn other_rxe_testbeds(prefix: &str) -> usize {
    rxe_testbeds_in(state_dir(prefix).parent().expect("has a parent")).iter().filter(|p| *p != prefix).count()
}

/// The prefixes of the testbeds with rxe hosts whose state folders are in `dir`, in order.
fn rxe_testbeds_in(dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut prefixes: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().join("rxe.json").exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    prefixes.sort();
    prefixes
}

/// The testbed an rxe command acts on when no `--prefix` is given: the one testbed with rxe
/// hosts. None up, or several, is an error that says what to do.
pub fn the_rxe_testbed() -> Result<String> {
    pick_the_rxe_testbed(rxe_testbeds_in(state_dir("x").parent().expect("has a parent")))
}

fn pick_the_rxe_testbed(mut prefixes: Vec<String>) -> Result<String> {
    match prefixes.len() {
        0 => bail!(
            "no testbed with rxe hosts is up: bring one up (fabric up --topology testbed/rxe-smoke.toml \
             --endpoints rxe), or name one with --prefix"
        ),
        1 => Ok(prefixes.remove(0)),
        _ => bail!("several testbeds have rxe hosts ({}): name one with --prefix", prefixes.join(", ")),
    }
}

/// One ICMP echo from `src` (a local address, bound) to `dst`; whether a reply came within
/// `timeout`. Used to check the rxe layout's routing without rxe.
pub fn ping(src: Ipv4Addr, dst: Ipv4Addr, id: u16, timeout: Duration) -> Result<bool> {
    // SAFETY: plain socket syscall; ownership taken below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
    ensure!(fd >= 0, "raw ICMP socket: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let sa = |a: Ipv4Addr| libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(a).to_be() },
        sin_zero: [0; 8],
    };
    let len = size_of::<libc::sockaddr_in>() as u32;
    // SAFETY: valid fd and sockaddr_in.
    let rc = unsafe { libc::bind(fd.as_raw_fd(), (&sa(src) as *const libc::sockaddr_in).cast(), len) };
    ensure!(rc == 0, "binding to {src}: {}", std::io::Error::last_os_error());
    let mut pkt = vec![8u8, 0, 0, 0, (id >> 8) as u8, id as u8, 0, 1];
    pkt.extend_from_slice(b"fabric-rxe-layout");
    let mut sum: u32 = pkt.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    pkt[2..4].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    // SAFETY: valid fd, buffer and sockaddr_in.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            pkt.as_ptr().cast(),
            pkt.len(),
            0,
            (&sa(dst) as *const libc::sockaddr_in).cast(),
            len,
        )
    };
    ensure!(n >= 0, "sending ICMP echo {src} -> {dst}: {}", std::io::Error::last_os_error());
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 1500];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        crate::sys::netns::set_receive_timeout(fd.as_fd(), left)?;
        // SAFETY: valid fd and buffer.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            return Ok(false);
        }
        let p = &buf[..n as usize];
        let ihl = ((p[0] & 0x0f) as usize) * 4;
        let from = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
        if let Some(icmp) = p.get(ihl..ihl + 8)
            && icmp[0] == 0
            && u16::from_be_bytes([icmp[4], icmp[5]]) == id
            && from == dst
        {
            return Ok(true);
        }
    }
}

/// Refuses a change (`what`) of `links` when one ends at a rxe host whose end was moved to the
/// initial namespace: the change would look for it in the host's namespace, which that layout
/// removes, and leave the link half changed.
pub(super) fn refuse_moved_host_links(
    state: &State,
    links: impl IntoIterator<Item = crate::model::plan::LinkId>,
    what: &str,
) -> Result<()> {
    if !RxeLayout::path(&state.plan.topology.prefix).exists() {
        return Ok(());
    }
    let layout = RxeLayout::load(&state.plan.topology.prefix)?;
    if layout.per_host_netns {
        return Ok(());
    }
    if let Some((l, host)) = host_link(&state.plan, links) {
        bail!(
            "{what}: link {} ends at rxe host {}, whose end lives in the initial namespace here (rxe needs it there); \
             faults of rxe hosts' links are not supported: fail a link between switches instead",
            state.plan.link_label(l),
            state.plan.nodes[host].name
        );
    }
    Ok(())
}

/// The first of `links` that ends at a host, and the host.
fn host_link(
    plan: &crate::model::plan::Plan,
    links: impl IntoIterator<Item = crate::model::plan::LinkId>,
) -> Option<(usize, NodeId)> {
    links.into_iter().find_map(|l| {
        let link = &plan.links[l];
        [link.a, link.b].into_iter().find(|&n| !plan.nodes[n].role.is_switch()).map(|h| (l, h))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host's link is found among a change's links (a switch's links include its hosts');
    /// links between switches are not.
    #[test]
    fn a_change_of_a_host_link_is_found() {
        let plan = crate::model::plan::Plan::new(&crate::model::topology::Topology::default_topology());
        let spine = plan.find_link("z0r0:z0c0").unwrap();
        let host = plan.find_link("z0r0:z0r0h1").unwrap();
        assert_eq!(host_link(&plan, [spine]), None);
        assert_eq!(host_link(&plan, [spine, host]), Some((host, plan.node_by_name("z0r0h1").unwrap())));
    }

    /// Without `--prefix`, the rxe commands act on the one testbed with rxe hosts; none or
    /// several are refused, saying what to do or naming them.
    #[test]
    fn the_rxe_testbed_is_the_only_one_with_rxe_hosts() {
        let dir = tempfile::tempdir().unwrap();
        for (prefix, rxe) in [("rxa", true), ("own", false), ("rxc", true)] {
            std::fs::create_dir(dir.path().join(prefix)).unwrap();
            if rxe {
                std::fs::write(dir.path().join(prefix).join("rxe.json"), "{}").unwrap();
            }
        }
        let found = rxe_testbeds_in(dir.path());
        assert_eq!(found, ["rxa", "rxc"]);
        let several = format!("{:#}", pick_the_rxe_testbed(found).unwrap_err());
        assert!(several.contains("several testbeds have rxe hosts (rxa, rxc)"), "{several}");
        assert_eq!(pick_the_rxe_testbed(vec!["rxa".into()]).unwrap(), "rxa");
        let none = format!("{:#}", pick_the_rxe_testbed(Vec::new()).unwrap_err());
        assert!(none.contains("no testbed with rxe hosts is up"), "{none}");
    }
}
