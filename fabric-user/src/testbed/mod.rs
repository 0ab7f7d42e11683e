//! A testbed's life: `up` builds the Clos of namespaces and veths from a topology, loads and
//! programs the XDP switches and pins them; `down` removes everything with the testbed's prefix
//! (also after a crash or a half-finished `up`); `link` fails and repairs links.
pub mod fault;
pub mod interrupt;
pub mod probe;
pub mod rxe;

use std::{
    collections::BTreeSet,
    net::IpAddr,
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use fabric_common::{
    config::PortInfo,
    route::{ROUTE_LOCAL, RouteTarget},
};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::{
    dataplane::{PROGRAM_PASS, PROGRAM_SWITCH, SwitchDataplane},
    model::fault::{FaultEvent, FaultKind},
    model::plan::{LinkId, NodeId, Plan, Role},
    model::routing::{self, SwitchTables},
    model::topology::Topology,
    state::{BPFFS, State, bpf_dir, link_pin_name, state_dir, state_path},
    sys::netlink::{self, VethEnd, in_netns},
    sys::netns,
};

/// Worker threads for per-namespace work; netlink and verifier work is mostly kernel time.
const WORKERS: usize = 4;

/// What `up` reports.
#[derive(Debug, Serialize)]
pub struct UpSummary {
    pub name: String,
    pub prefix: String,
    pub switches: usize,
    pub hosts: usize,
    pub links: usize,
    pub seconds: f64,
    /// Wall time of each phase of the build, in order (namespaces, links, addresses, ...).
    pub phases: Vec<(String, f64)>,
}

/// Brings a testbed up with rxe hosts. The calling thread's namespace plays the initial one.
pub fn up_rxe(topo: &Topology, quiet: bool, opts: rxe::RxeOptions) -> Result<(UpSummary, rxe::RxeLayout)> {
    if opts.create_devices {
        rxe::ensure_rxe()?;
    }
    let per_host_netns = opts.create_devices && rxe::rxe_supports_netns().unwrap_or(false);
    let summary = up(topo, quiet)?;
    let prefix = &topo.prefix;
    let result = State::load(prefix).and_then(|state| {
        if per_host_netns { rxe::devices_in_namespaces(&state) } else { rxe::initial_namespace_layout(&state, opts) }
    });
    match result {
        Ok(layout) => Ok((summary, layout)),
        Err(e) => Err(e.context(format!("bringing up rxe hosts of {prefix:?} failed; {}", clean_up_after(prefix)))),
    }
}

/// Mounts bpffs on /sys/fs/bpf if nothing is mounted there (pins need it).
fn ensure_bpffs() -> Result<()> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    if mounts.lines().any(|l| l.split_whitespace().nth(1) == Some(BPFFS) && l.contains(" bpf ")) {
        return Ok(());
    }
    let (src, dst, fs) = (c"bpf", c"/sys/fs/bpf", c"bpf");
    // SAFETY: valid C strings; mounting the BPF filesystem.
    if unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("mounting bpffs on /sys/fs/bpf");
    }
    Ok(())
}

/// Runs `f` over `items` on up to WORKERS threads, ticking `bar`; the first error wins.
fn parallel<T: Sync>(items: &[T], bar: &ProgressBar, f: impl Fn(&T) -> Result<()> + Sync) -> Result<()> {
    let next = AtomicUsize::new(0);
    let errors = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS.min(items.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    if let Err(e) = f(item) {
                        errors.lock().expect("not poisoned").push(e);
                        next.store(items.len(), Ordering::Relaxed);
                        break;
                    }
                    bar.inc(1);
                }
            });
        }
    });
    match errors.into_inner().expect("not poisoned").into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn progress(len: usize, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}").expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// The phases of a bring-up on the progress bar, each one's wall time logged
/// (`RUST_LOG=fabric_user=info`).
struct Phase<'a> {
    bar: &'a ProgressBar,
    current: Option<(&'static str, Instant)>,
    done: Vec<(String, f64)>,
}

impl<'a> Phase<'a> {
    fn new(bar: &'a ProgressBar) -> Self {
        Phase { bar, current: None, done: Vec::new() }
    }

    fn start(&mut self, name: &'static str) {
        self.end();
        self.bar.set_message(name);
        self.current = Some((name, Instant::now()));
    }

    fn end(&mut self) {
        if let Some((name, t)) = self.current.take() {
            let seconds = t.elapsed().as_secs_f64();
            tracing::info!(phase = name, seconds, "bring-up phase done");
            self.done.push((name.to_string(), seconds));
        }
    }

    fn finish(mut self) -> Vec<(String, f64)> {
        self.end();
        self.done
    }
}

/// Brings a testbed up. On failure everything created so far is removed again.
pub fn up(topo: &Topology, quiet: bool) -> Result<UpSummary> {
    netns::require_capabilities()?;
    let prefix = &topo.prefix;
    let existing = netns::list_named(&format!("{prefix}-"))?;
    if !existing.is_empty() || state_path(prefix).exists() {
        bail!(
            "a testbed with prefix {prefix:?} already exists ({} namespaces); \
             run `fabric down --prefix {prefix}` first, or give this one another prefix",
            existing.len()
        );
    }
    ensure_bpffs()?;
    claim_prefix(prefix)?;
    let start = Instant::now();
    let plan = Plan::new(topo);
    let result = build(&plan, quiet).and_then(|phases| {
        // The switch agent sends the PFC frames the data plane asks for.
        if topo.congestion.enabled {
            crate::agent::spawn(prefix)?;
        }
        Ok(phases)
    });
    let phases = match result {
        Ok(phases) => phases,
        Err(e) => return Err(e.context(format!("bringing up testbed {prefix:?} failed; {}", clean_up_after(prefix)))),
    };
    Ok(UpSummary {
        name: topo.name.clone(),
        prefix: prefix.clone(),
        switches: plan.switches().count(),
        hosts: plan.hosts().count(),
        links: plan.links.len(),
        seconds: start.elapsed().as_secs_f64(),
        phases,
    })
}

/// Takes down what a failed `up` of `prefix` built, and says how that went.
fn clean_up_after(prefix: &str) -> String {
    match down(prefix) {
        Ok(_) => "everything it created was removed".into(),
        Err(e) => format!("removing what it created failed too ({e:#})"),
    }
}

/// Claims `prefix` for one `up`: its state folder is created, and only one of two `up`s with the
/// same prefix at once can create it. The other stops before it builds anything, so its
/// clean-up cannot remove the first one's testbed.
fn claim_prefix(prefix: &str) -> Result<()> {
    let dir = state_dir(prefix);
    let parent = dir.parent().expect("a state folder has a parent");
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    match std::fs::create_dir(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "a testbed with prefix {prefix:?} already exists or is being brought up ({} exists); run `fabric \
             down --prefix {prefix}` first, or give this one another prefix",
            dir.display()
        ),
        Err(e) => Err(anyhow::Error::new(e).context(format!("creating {}", dir.display()))),
    }
}

/// Builds the testbed; returns the wall time of each phase.
fn build(plan: &Plan, quiet: bool) -> Result<Vec<(String, f64)>> {
    let nodes: Vec<NodeId> = (0..plan.nodes.len()).collect();
    let switches: Vec<NodeId> = plan.switches().collect();
    let hosts: Vec<NodeId> = plan.hosts().collect();
    let bar = progress(nodes.len() * 4 + switches.len() + hosts.len(), quiet);
    // Saved first, so that `status` and `down` know about a half-built testbed (into the folder
    // `up` claimed: a `down` that removed it meanwhile makes this fail, not build it twice).
    State {
        plan: plan.clone(),
        down_links: BTreeSet::new(),
        links_taken_down: BTreeSet::new(),
        down_switches: BTreeSet::new(),
        group_slots: Default::default(),
        degraded: Default::default(),
        faults: Vec::new(),
        flaps: Default::default(),
    }
    .save()?;
    let mut phase = Phase::new(&bar);

    phase.start("namespaces");
    // A new namespace's forwarding switches are either the kernel's default (off) or copied from
    // the root namespace, depending on net.core.devconf_inherit_init_net. Only where one would
    // start on is it written: the first touch of a namespace's /proc/sys/net costs more the more
    // namespaces exist (1.6 ms each at 4,000, measured), which would make bring-up quadratic.
    // Nothing else is set per namespace: IPv6's duplicate address detection and link-local
    // addresses are turned off per port and per address, over netlink (`configure_port`).
    let inherited: Vec<&str> = netns::inherited_forwarding()?
        .into_iter()
        .filter_map(|(family, on)| on.then_some(family.forwarding_key()))
        .collect();
    parallel(&nodes, &bar, |&n| {
        let ns = plan.netns(n);
        netns::create_named(&ns)?;
        if inherited.is_empty() {
            return Ok(());
        }
        // Switches forward only through XDP; hosts not at all.
        netns::in_named(&ns, || inherited.iter().try_for_each(|key| netns::sysctl(key, "0")))
    })?;

    phase.start("links");
    // Each link is created from its lower end's namespace, the peer born in the upper one.
    parallel(&nodes, &bar, |&n| {
        let lower: Vec<LinkId> = (0..plan.links.len()).filter(|&l| plan.links[l].a == n).collect();
        if lower.is_empty() {
            return Ok(());
        }
        in_netns(&plan.netns(n), |h| async move {
            for l in lower {
                let link = &plan.links[l];
                let (pa, pb) = (&plan.nodes[link.a].ports[link.a_port], &plan.nodes[link.b].ports[link.b_port]);
                netlink::add_veth(
                    &h,
                    VethEnd { ifname: &pa.ifname, mac: pa.mac },
                    VethEnd { ifname: &pb.ifname, mac: pb.mac },
                    &plan.netns(link.b),
                    plan.topology.mtu,
                )
                .await?;
            }
            Ok(())
        })
    })?;

    phase.start("addresses, neighbours, routes");
    parallel(&nodes, &bar, |&n| configure_node(plan, n))?;

    phase.start("XDP switches");
    let tables = routing::compute(plan, &BTreeSet::new());
    parallel(&switches, &bar, |&n| install_switch(plan, n, tables[n].as_ref().expect("switch")))?;

    phase.start("host XDP");
    // Host veths need an XDP program to receive frames redirected into them; one loaded
    // XDP_PASS program serves every host.
    let mut pass = SwitchDataplane::load_programs(&[PROGRAM_PASS])?;
    for &h in &hosts {
        let ns = plan.netns(h);
        let port = &plan.nodes[h].ports[0];
        let pin = bpf_dir(&plan.topology.prefix).join(&plan.nodes[h].name);
        std::fs::create_dir_all(&pin)?;
        netns::in_named(&ns, || {
            let idx = netns::ifindex(&port.ifname)?;
            pass.attach_pinned(PROGRAM_PASS, idx, &pin.join(link_pin_name(&port.ifname)))
        })?;
        bar.inc(1);
    }

    // Last, so that the kernel's addrconf work has had the XDP phases to catch up.
    phase.start("checking addresses");
    parallel(&nodes, &bar, |&n| check_node_addresses(plan, n))?;
    let phases = phase.finish();
    bar.finish_and_clear();
    Ok(phases)
}

fn configure_node(plan: &Plan, n: NodeId) -> Result<()> {
    let node = &plan.nodes[n];
    in_netns(&plan.netns(n), |h| async move {
        let lo = netlink::ifindex(&h, "lo").await?;
        netlink::set_up(&h, lo, true).await?;
        for (p, port) in node.ports.iter().enumerate() {
            let idx = netlink::ifindex(&h, &port.ifname).await?;
            // Before the first `up`: the kernel then never makes a link-local address of its own.
            netlink::disable_ipv6_address_generation(&h, idx).await?;
            configure_port(&h, plan, n, p, idx).await?;
            netns::disable_tx_checksum(&port.ifname)?;
        }
        Ok(())
    })
}

/// Brings port `p` of node `n` up with everything the plan gives it: its addresses, a permanent
/// neighbour entry for its peer, and on a host the default routes through it. Used at `up` and
/// when `fabric link up` repairs a link, since taking a link down costs it its IPv6 address,
/// its neighbours and the routes through it.
///
/// The port goes up *before* it gets its addresses. An IPv6 address added to a down interface
/// has no routes yet: when the interface comes up, the kernel re-creates its host and prefix
/// routes (addrconf_permanent_addr -> fixup_permanent_addr) with GFP_ATOMIC allocations, and each
/// route needs a per-CPU allocation. Atomic per-CPU allocations only succeed from the
/// already-populated reserve, which the kernel refills in the background; thousands of
/// interfaces coming up at once drain it (dmesg: "percpu: allocation failed, ... atomic alloc
/// failed") and the kernel then *deletes* the address ("IPv6: z0r3: Failed to add prefix route
/// for address fd00:fab::dd; dropping"). A host left without its /127 cannot reach its gateway:
/// its IPv6 default route failed with EHOSTUNREACH in up to two of three 2,048-host bring-ups.
/// On an interface that is up, an address is added through inet6_addr_add, which allocates with
/// GFP_KERNEL (it may wait for memory, it does not fail for want of the atomic reserve), so no
/// address depends on timing. `check_node_addresses` verifies it.
async fn configure_port(h: &rtnetlink::Handle, plan: &Plan, n: NodeId, p: usize, idx: u32) -> Result<()> {
    let node = &plan.nodes[n];
    let port = &node.ports[p];
    let peer = &plan.nodes[port.peer_node].ports[port.peer_port];
    netlink::set_up(h, idx, true).await?;
    netlink::add_address(h, idx, IpAddr::V4(port.ipv4), 31).await?;
    netlink::add_address(h, idx, IpAddr::V6(port.ipv6), 127).await?;
    netlink::add_neighbour(h, idx, IpAddr::V4(peer.ipv4), peer.mac).await?;
    netlink::add_neighbour(h, idx, IpAddr::V6(peer.ipv6), peer.mac).await?;
    if node.role == Role::Host {
        netlink::add_default_route_v4(h, peer.ipv4, idx).await?;
        netlink::add_default_route_v6(h, peer.ipv6, idx).await?;
    }
    Ok(())
}

/// Fails unless every port of the testbed holds its addresses (see [`check_node_addresses`]).
pub fn check_addresses(plan: &Plan) -> Result<()> {
    let nodes: Vec<NodeId> = (0..plan.nodes.len()).collect();
    parallel(&nodes, &ProgressBar::hidden(), |&n| check_node_addresses(plan, n))
}

/// How long `check_node_addresses` waits for the kernel to finish configuring an IPv6 address.
const ADDRESS_SETTLE: Duration = Duration::from_secs(10);

/// Fails unless every port of node `n` holds its IPv4 and IPv6 address, the IPv6 one usable
/// (not tentative). IPv6 addresses are added without DAD, so an address is tentative only
/// until the kernel's addrconf work has run for it (the same work installs its local route);
/// with thousands of addresses queued that can lag, so this waits for it, bounded by
/// ADDRESS_SETTLE. A missing address is an error at once: the kernel dropped it.
fn check_node_addresses(plan: &Plan, n: NodeId) -> Result<()> {
    let node = &plan.nodes[n];
    in_netns(&plan.netns(n), |h| async move {
        let deadline = Instant::now() + ADDRESS_SETTLE;
        loop {
            let present = netlink::addresses(&h).await?;
            let mut tentative = Vec::new();
            for port in &node.ports {
                let idx = netlink::ifindex(&h, &port.ifname).await?;
                for want in [IpAddr::V4(port.ipv4), IpAddr::V6(port.ipv6)] {
                    match present.iter().find(|a| a.index == idx && a.addr == want) {
                        None => bail!(
                            "port {} has lost its address {want}: the kernel dropped it \
                             (dmesg may say \"Failed to add prefix route for address {want}; dropping\")",
                            port.ifname
                        ),
                        Some(a) if a.dad_failed => {
                            bail!("port {}: duplicate address detection failed for {want}", port.ifname)
                        }
                        Some(a) if a.tentative => tentative.push(format!("{want} on {}", port.ifname)),
                        Some(_) => {}
                    }
                }
            }
            if tentative.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "addresses still tentative after {} s although DAD is off: {}",
                    ADDRESS_SETTLE.as_secs(),
                    tentative.join(", ")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// Loads a switch's XDP program, registers its ports, writes its tables, attaches it to every
/// port and pins maps and links.
fn install_switch(plan: &Plan, n: NodeId, tables: &SwitchTables) -> Result<()> {
    let node = &plan.nodes[n];
    let dir = bpf_dir(&plan.topology.prefix).join(&node.name);
    netns::in_named(&plan.netns(n), || {
        let mut dp = SwitchDataplane::load_programs(&[PROGRAM_SWITCH])?;
        let mut ifindexes = Vec::new();
        for (i, port) in node.ports.iter().enumerate() {
            netns::ensure_single_rx_queue(&port.ifname)?;
            let idx = netns::ifindex(&port.ifname)?;
            // Host ports only accept their host's addresses as source.
            let peer = &plan.nodes[port.peer_node];
            let info = if peer.role == Role::Host {
                let p = &peer.ports[port.peer_port];
                PortInfo::host(i as u32, port.mac, p.ipv4.octets(), p.ipv6.octets())
            } else {
                PortInfo::new(i as u32, port.mac)
            };
            dp.add_port(idx, info)?;
            ifindexes.push(idx);
        }
        program_qos(&mut dp, plan, n)?;
        program_tables(&mut dp, plan, n, None, tables)?;
        dp.set_config(plan.topology.switch_config(node.hash, node.seed))?;
        dp.pin_maps(&dir)?;
        for (port, idx) in node.ports.iter().zip(ifindexes) {
            dp.attach_pinned(PROGRAM_SWITCH, idx, &dir.join(link_pin_name(&port.ifname)))?;
        }
        Ok(())
    })
}

/// Writes a switch's congestion model: its tier's buffers, ECN and PFC settings, and the
/// modelled (time-scaled) rate of each port's link.
pub fn program_qos(dp: &mut SwitchDataplane, plan: &Plan, n: NodeId) -> Result<()> {
    let topo = &plan.topology;
    dp.set_qos(topo.congestion.qos_config(switch_qos(plan, n)))?;
    for (i, port) in plan.nodes[n].ports.iter().enumerate() {
        dp.set_port_rate(i as u32, topo.modelled_rate_bps(plan.links[port.link].rate_gbps))?;
    }
    Ok(())
}

/// The congestion settings of a switch's tier.
pub fn switch_qos(plan: &Plan, n: NodeId) -> &crate::model::topology::SwitchQos {
    let c = &plan.topology.congestion;
    match plan.nodes[n].role {
        Role::Ctsw => &c.ctsw,
        Role::Atsw => &c.atsw,
        _ => &c.rtsw,
    }
}

/// The tables a switch has in force, and the `GROUPS` slot of each of its groups.
#[derive(Clone, Copy)]
pub struct Installed<'a> {
    pub tables: &'a SwitchTables,
    pub slots: &'a [u32],
}

/// Writes `new` into a switch's maps so that packets forwarded meanwhile see either the old
/// tables or the new ones, never a mix: the groups go into slots the routes in force do not
/// name ([`routing::assign_slots`]), then each route is switched (one atomic LPM update), then
/// routes `new` does not have are removed. Returns the slots of `new`'s groups.
pub fn program_tables(
    dp: &mut SwitchDataplane,
    plan: &Plan,
    n: NodeId,
    installed: Option<Installed<'_>>,
    new: &SwitchTables,
) -> Result<Vec<u32>> {
    let slots = routing::assign_slots(installed.map(|i| (i.tables, i.slots)), new, fabric_common::route::MAX_GROUPS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", plan.nodes[n].name))?;
    let in_force: BTreeSet<u32> = installed.map(|i| i.slots.iter().copied().collect()).unwrap_or_default();
    for (id, &slot) in slots.iter().enumerate() {
        // A reused slot holds this very group already (same members, so the same bytes).
        if !in_force.contains(&slot) {
            dp.set_group(slot, &new.ecmp_group(plan, n, id)?)?;
        }
    }
    let target = |t: RouteTarget| if t == ROUTE_LOCAL { t } else { slots[t as usize] };
    for &(addr, len, t) in &new.routes_v4 {
        dp.set_route_v4(addr, len, target(t))?;
    }
    for &(addr, len, t) in &new.routes_v6 {
        dp.set_route_v6(addr, len, target(t))?;
    }
    if let Some(old) = installed {
        for (addr, len) in routes_only_in(&old.tables.routes_v4, &new.routes_v4) {
            dp.remove_route_v4(addr, len)?;
        }
        for (addr, len) in routes_only_in(&old.tables.routes_v6, &new.routes_v6) {
            dp.remove_route_v6(addr, len)?;
        }
    }
    Ok(slots)
}

/// The prefixes of `routes` that `other` has no route for.
fn routes_only_in<'a, A: Copy + PartialEq>(
    routes: &'a [(A, u8, RouteTarget)],
    other: &'a [(A, u8, RouteTarget)],
) -> impl Iterator<Item = (A, u8)> + 'a {
    let prefixes = routes.iter().map(|&(addr, len, _)| (addr, len));
    prefixes.filter(move |&(addr, len)| !other.iter().any(|r| (r.0, r.1) == (addr, len)))
}

/// Tears a testbed down when dropped, whatever happened: for tests and benchmarks that build
/// their own.
pub struct DownOnDrop(pub String);

impl DownOnDrop {
    /// The same, for a command that builds testbeds its user never names (an experiment's, the
    /// rxe smoke test's): made before the testbed is brought up, it is also removed on Ctrl-C
    /// (`interrupt::remove_owned_on_interrupt`).
    pub fn owned(prefix: String) -> Self {
        interrupt::own(&prefix);
        DownOnDrop(prefix)
    }
}

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        // Never beside the Ctrl-C handler's own teardown (it holds this until the process ends).
        let _work = interrupt::owned_work();
        interrupt::disown(&self.0);
        let _ = down(&self.0);
    }
}

/// What `down` removed.
#[derive(Debug, Default, Serialize)]
pub struct DownSummary {
    pub namespaces: usize,
    pub pins_removed: bool,
    pub state_removed: bool,
    pub agent_stopped: bool,
    /// rxe devices, policy rules and host veths removed from the initial namespace.
    pub rxe_removed: usize,
}

/// Removes every namespace (and so every veth), pinned object and state file of the testbed.
/// Works on a half-built or crashed testbed, and does nothing the second time.
pub fn down(prefix: &str) -> Result<DownSummary> {
    // What a prefix names is removed below: a name that is not a testbed's (`..`, a slash) could
    // reach outside its folders, whoever the caller is.
    crate::model::topology::validate::parse_prefix(prefix).map_err(|e| anyhow::anyhow!("down: {e}"))?;
    netns::require_capabilities()?;
    // A change in progress (a flap's step) ends before its testbed goes, and a later one finds
    // no testbed; a stuck one does not keep it up.
    let _lock = crate::state::ChangeLock::take_for_down(prefix);
    // Every step is tried, whatever failed before it: one that fails (an rxe rule the kernel
    // refuses to delete, a busy namespace) must not leave the rest of the testbed behind.
    let mut failed: Vec<anyhow::Error> = Vec::new();
    let mut summary = DownSummary::default();
    match crate::agent::stop(prefix) {
        Ok(stopped) => summary.agent_stopped = stopped,
        Err(e) => failed.push(e),
    }
    // rxe hosts (`up --endpoints rxe`) live outside the testbed's namespaces.
    let rxe_done = match crate::testbed::rxe::down(prefix) {
        Ok(n) => {
            summary.rxe_removed = n;
            true
        }
        Err(e) => {
            failed.push(e);
            false
        }
    };
    match netns::list_named(&format!("{prefix}-")) {
        Ok(namespaces) => {
            for ns in &namespaces {
                match netns::delete_named(ns) {
                    Ok(()) => summary.namespaces += 1,
                    Err(e) => failed.push(e.context(format!("removing namespace {ns}"))),
                }
            }
        }
        Err(e) => failed.push(e),
    }
    let pins = bpf_dir(prefix);
    if pins.exists() {
        if let Err(e) = std::fs::remove_dir_all(&pins) {
            failed.push(anyhow::Error::new(e).context(format!("removing {}", pins.display())));
        }
        summary.pins_removed = !pins.exists();
    }
    // The rxe record stays while what it lists is not all removed: the next `down` needs it
    // to find the policy rules and tables by their recorded numbers.
    if rxe_done {
        match remove_state_dir(prefix) {
            Ok(removed) => summary.state_removed = removed,
            Err(e) => failed.push(e),
        }
    }
    match failed.len() {
        0 => Ok(summary),
        n => {
            let steps = failed.iter().map(|e| format!("{e:#}")).collect::<Vec<_>>().join("; ");
            bail!("down: {n} step(s) failed, the rest was removed (run `fabric down` again to retry): {steps}")
        }
    }
}

/// Removes testbed `prefix`'s state folder; false if there was none.
fn remove_state_dir(prefix: &str) -> Result<bool> {
    let dir = state_dir(prefix);
    if !dir.exists() {
        return Ok(false);
    }
    // Renamed away first, in one step: a change still waiting for the lock (or one that
    // outlived the wait) then finds no folder to write into, rather than a half-removed one it
    // would fill again while `remove_dir_all` empties it.
    let doomed = dir.with_file_name(format!(".{prefix}.removing.{}", std::process::id()));
    std::fs::rename(&dir, &doomed).with_context(|| format!("moving {} aside to remove it", dir.display()))?;
    std::fs::remove_dir_all(&doomed).with_context(|| format!("removing {}", doomed.display()))?;
    Ok(true)
}

/// What exists of a testbed and whether it is whole.
#[derive(Debug, Serialize)]
pub struct Status {
    pub prefix: String,
    pub state_file: bool,
    pub namespaces_expected: usize,
    pub namespaces_present: usize,
    pub missing_namespaces: Vec<String>,
    pub unexpected_namespaces: Vec<String>,
    pub xdp_links_expected: usize,
    pub xdp_links_pinned: usize,
    pub down_links: Vec<String>,
    /// Switches taken down whole (`fabric switch down`).
    pub down_switches: Vec<String>,
    /// Degraded links (`fabric link degrade`): label and what was set.
    pub degraded_links: Vec<String>,
    /// The switch agent (PFC frames, watchdog) runs when the congestion model is on.
    pub agent_expected: bool,
    pub agent_running: bool,
    pub healthy: bool,
}

pub fn status(prefix: &str) -> Result<Status> {
    let present = netns::list_named(&format!("{prefix}-"))?;
    let state = State::load(prefix).ok();
    let (expected, links_expected, links_pinned, down_links) = match &state {
        Some(s) => {
            // rxe hosts (`up --endpoints rxe`) have no namespace; their veth has another name.
            let rxe = crate::testbed::rxe::RxeLayout::load(prefix).ok().filter(|l| !l.per_host_netns);
            let moved = |n: NodeId| rxe.as_ref().and_then(|l| l.hosts.iter().find(|h| h.node == n));
            let expected: Vec<String> =
                (0..s.plan.nodes.len()).filter(|&n| moved(n).is_none()).map(|n| s.plan.netns(n)).collect();
            let mut pinned = 0;
            let mut wanted = 0;
            for (n, node) in s.plan.nodes.iter().enumerate() {
                let dir = bpf_dir(prefix).join(&node.name);
                for port in &node.ports {
                    wanted += 1;
                    let ifname = moved(n).map_or(&port.ifname, |h| &h.ifname);
                    pinned += dir.join(link_pin_name(ifname)).exists() as usize;
                }
            }
            let down = s.down_links.iter().map(|&l| link_label(&s.plan, l)).collect();
            (expected, wanted, pinned, down)
        }
        None => (Vec::new(), 0, 0, Vec::new()),
    };
    let degraded_links = state.as_ref().map_or(Vec::new(), |s| {
        let describe = |(&l, d): (&LinkId, &crate::model::fault::Degradation)| {
            format!("{} ({})", link_label(&s.plan, l), d.describe(s.plan.links[l].rate_gbps))
        };
        s.degraded.iter().map(describe).collect()
    });
    let down_switches = state
        .as_ref()
        .map_or(Vec::new(), |s| s.down_switches.iter().map(|&sw| s.plan.nodes[sw].name.clone()).collect());
    let missing: Vec<String> = expected.iter().filter(|n| !present.contains(n)).cloned().collect();
    let unexpected: Vec<String> = present.iter().filter(|n| !expected.contains(n)).cloned().collect();
    let agent_expected = state.as_ref().is_some_and(|s| s.plan.topology.congestion.enabled);
    let agent_running = crate::agent::running(prefix).is_some();
    let healthy = state.is_some()
        && missing.is_empty()
        && unexpected.is_empty()
        && links_pinned == links_expected
        && agent_running == agent_expected;
    Ok(Status {
        prefix: prefix.into(),
        state_file: state.is_some(),
        namespaces_expected: expected.len(),
        namespaces_present: present.len(),
        degraded_links,
        missing_namespaces: missing,
        unexpected_namespaces: unexpected,
        xdp_links_expected: links_expected,
        xdp_links_pinned: links_pinned,
        down_links,
        down_switches,
        agent_expected,
        agent_running,
        healthy,
    })
}

/// `node:ifname` of a link's lower end.
pub fn link_label(plan: &Plan, l: LinkId) -> String {
    plan.link_label(l)
}

/// Finds the link named `NODE:IFNAME` (either end).
pub fn find_link(plan: &Plan, spec: &str) -> Result<LinkId> {
    plan.find_link(spec)
}

/// Takes a link down (both veth ends) or back up, and reprograms every switch's ECMP groups
/// and routes for the links that remain. A link of a switch that is down (`fabric switch
/// down`) comes back with its switch, not alone.
pub fn set_link(prefix: &str, spec: &str, up: bool) -> Result<String> {
    netns::require_capabilities()?;
    let (mut state, _lock) = State::load_for_change(prefix)?;
    let l = find_link(&state.plan, spec)?;
    refuse_if_flapped(&state, l)?;
    rxe::refuse_moved_host_links(&state, [l], if up { "link up" } else { "link down" })?;
    set_link_in(&mut state, l, up)?;
    Ok(link_label(&state.plan, l))
}

/// [`set_link`] of link `l` in `state`, loaded for this change (the caller holds its lock).
fn set_link_in(state: &mut State, l: LinkId, up: bool) -> Result<()> {
    let mut taken_down = state.links_taken_down.clone();
    if up {
        if let Some(&sw) = state.down_switches_of(l).first() {
            let name = &state.plan.nodes[sw].name;
            bail!(
                "link {} is down with switch {name}: bring the switch back first (fabric switch up {name})",
                link_label(&state.plan, l)
            );
        }
        taken_down.remove(&l);
    } else {
        taken_down.insert(l);
    }
    let down_links = state.out_of_service(&taken_down, &state.down_switches);
    // A link brought up that was up, or down that was down, is configured again (a repair of a
    // half-changed link) but is no fault: the job records would count it as one.
    if taken_down != state.links_taken_down {
        let kind = if up { FaultKind::LinkUp } else { FaultKind::LinkDown };
        state.faults.push(FaultEvent::now(kind, link_label(&state.plan, l), ""));
    }
    state.links_taken_down = taken_down;
    change_links(state, &[l], up, down_links)
}

/// Refuses a change of link `l` while another process flaps it: the flap would undo the change
/// at its next step.
fn refuse_if_flapped(state: &State, l: LinkId) -> Result<()> {
    if let Some(owner) = state.flapped_by_another(l) {
        bail!(
            "link {} is being flapped by process {} (fabric link flap): wait for the flap to end, or stop it \
             (kill {}), which brings the link back up",
            link_label(&state.plan, l),
            owner.pid,
            owner.pid
        );
    }
    Ok(())
}

/// Takes links `changed` down (or brings them up) and routes the fabric with `down_links` out
/// of service: the one order of steps of a link's and a switch's change. Order matters for
/// packets in flight. Down: reroute around the links first, then take them down, so nothing is
/// redirected into a dead veth. Up: bring them up first, then route onto them; if the reroute
/// fails, they go down again, as routing still has them out of service.
fn change_links(state: &mut State, changed: &[LinkId], up: bool, down_links: BTreeSet<LinkId>) -> Result<()> {
    if up {
        // Routing still has them out of service until the reroute: if bringing one up or the
        // reroute fails, they go down again. Only those: a link already in service (one brought
        // up again to repair it) stays up, as routing uses it.
        let was_down: Vec<LinkId> = changed.iter().copied().filter(|l| state.down_links.contains(l)).collect();
        let brought_up = changed.iter().try_for_each(|&l| set_link_carrier(&state.plan, l, true));
        if let Err(e) = brought_up.and_then(|()| reroute(state, down_links)) {
            for &l in &was_down {
                let _ = set_link_carrier(&state.plan, l, false);
            }
            return Err(e);
        }
    } else {
        reroute(state, down_links)?;
        for &l in changed {
            set_link_carrier(&state.plan, l, false)?;
        }
    }
    reinstall_te(state, "the links changed and the switches route around them");
    Ok(())
}

/// Traffic engineering recomputes its placement over the links in service at their rates (flows
/// of a host cut off are left out, so a partition does not fail it), after `change` (what the
/// warning says took effect). A failure is a warning, not an error: the change has taken effect (a flap must go on to its next step), and
/// the switches stay safe, a flow keeping its old entry where that still names its group and
/// being hashed elsewhere.
pub(crate) fn reinstall_te(state: &State, change: &str) {
    if let Err(e) = crate::te::reinstall(state) {
        eprintln!("warning: {change}, but the traffic-engineering placement could not be recomputed: {e:#}");
    }
}

/// Sets both ends of link `l` up or down. A down link loses its IPv6 addresses, its neighbour
/// entries and the routes through it (the kernel's doing); up restores them all.
fn set_link_carrier(plan: &Plan, l: LinkId, up: bool) -> Result<()> {
    let link = &plan.links[l];
    for (node, port) in [(link.a, link.a_port), (link.b, link.b_port)] {
        let ifname = &plan.nodes[node].ports[port].ifname;
        in_netns(&plan.netns(node), |h| async move {
            let idx = netlink::ifindex(&h, ifname).await?;
            if up { configure_port(&h, plan, node, port, idx).await } else { netlink::set_up(&h, idx, false).await }
        })?;
    }
    Ok(())
}

/// Reprograms every switch whose tables differ with `down_links` out of service, and saves the
/// new tables' group slots with the state. A switch that cannot be reprogrammed (its maps gone
/// from a half-broken testbed) stops the change, and the switches reprogrammed before it get
/// their tables back: no switch is left routing around a link the others still use.
fn reroute(state: &mut State, down_links: BTreeSet<LinkId>) -> Result<()> {
    let old = routing::compute(&state.plan, &state.down_links);
    let new = routing::compute(&state.plan, &down_links);
    let mut done: Vec<(NodeId, Vec<u32>)> = Vec::new();
    for sw in state.plan.switches() {
        let (o, n) = (old[sw].as_ref().expect("switch"), new[sw].as_ref().expect("switch"));
        if o == n {
            continue;
        }
        let old_slots = installed_slots(state, sw, o);
        match reprogram(state, sw, Installed { tables: o, slots: &old_slots }, n) {
            Ok(slots) => done.push((sw, slots)),
            Err(e) => return Err(roll_back(state, Some(sw), &done, [&old, &new], e)),
        }
    }
    // Saved before `state` changes: a state that cannot be saved undoes the change too, or the
    // next change would start from slots that are not in force.
    let mut next = state.clone();
    next.group_slots.extend(done.iter().cloned());
    next.down_links = down_links;
    if let Err(e) = next.save() {
        return Err(roll_back(state, None, &done, [&old, &new], e));
    }
    *state = next;
    Ok(())
}

/// After switch `failed` could not be reprogrammed, or the state could not be saved (`error`):
/// gives it and the switches `done` before it their `old` tables back (`[old, new]`). Returns
/// the error to report, naming any switch left with its `new` tables, in part or whole.
fn roll_back(
    state: &State,
    failed: Option<NodeId>,
    done: &[(NodeId, Vec<u32>)],
    [old, new]: [&[Option<SwitchTables>]; 2],
    error: anyhow::Error,
) -> anyhow::Error {
    let restore = |sw: NodeId| {
        let (o, n) = (old[sw].as_ref().expect("switch"), new[sw].as_ref().expect("switch"));
        restore_tables(state, sw, o, n).err().map(|e| format!("{} ({e:#})", state.plan.nodes[sw].name))
    };
    // A switch that failed where its maps could not be opened was never written.
    let failed = failed.filter(|&sw| state.dataplane(sw).is_ok());
    let left: Vec<String> = done.iter().map(|&(sw, _)| sw).chain(failed).filter_map(restore).collect();
    if left.is_empty() {
        return error.context("routing left as it was");
    }
    error.context(format!(
        "routing left as it was except on {}: rebuild the testbed (fabric down, fabric up)",
        left.join(", ")
    ))
}

/// The `GROUPS` slots of switch `sw`'s tables in force, `tables`.
fn installed_slots(state: &State, sw: NodeId, tables: &SwitchTables) -> Vec<u32> {
    let identity = || (0..tables.groups.len() as u32).collect();
    state.group_slots.get(&sw).cloned().unwrap_or_else(identity)
}

/// Programs `to` into switch `sw`, whose tables in force are `from`; returns `to`'s slots.
fn reprogram(state: &State, sw: NodeId, from: Installed<'_>, to: &SwitchTables) -> Result<Vec<u32>> {
    let name = &state.plan.nodes[sw].name;
    let mut dp = state.dataplane(sw).with_context(|| format!("reprogramming switch {name}"))?;
    program_tables(&mut dp, &state.plan, sw, Some(from), to).with_context(|| format!("reprogramming switch {name}"))
}

/// Gives switch `sw` its tables `old` back, in the slots the state has for them, after all or
/// part of `attempted` was programmed. An update never writes a slot that the routes in force
/// name ([`routing::assign_slots`]), so `old`'s groups are still in their slots: only the routes
/// are switched back, and those that only `attempted` has removed. The state's slots stay true.
fn restore_tables(state: &State, sw: NodeId, old: &SwitchTables, attempted: &SwitchTables) -> Result<()> {
    let slots = installed_slots(state, sw, old);
    let mut dp = state.dataplane(sw)?;
    program_tables(&mut dp, &state.plan, sw, Some(Installed { tables: old, slots: &slots }), old)?;
    // A route the failed update never added is not there to remove: nothing to undo.
    for (addr, len) in routes_only_in(&attempted.routes_v4, &old.routes_v4) {
        let _ = dp.remove_route_v4(addr, len);
    }
    for (addr, len) in routes_only_in(&attempted.routes_v6, &old.routes_v6) {
        let _ = dp.remove_route_v6(addr, len);
    }
    Ok(())
}

/// Sets the ECMP hash mode of every switch at run time, and optionally re-seeds them (each
/// switch's seed derived from `seed` and its node id, so switches stay decorrelated).
pub fn set_hash_mode(state: &State, mode: fabric_common::config::HashMode, seed: Option<u32>) -> Result<()> {
    // Under the change lock: a reroute meanwhile (a flap's step) writes new groups and their
    // weights, which a refresh working from a group read before it would overwrite.
    let _lock = crate::state::ChangeLock::take(&state.plan.topology.prefix)?;
    for sw in state.plan.switches() {
        let node = &state.plan.nodes[sw];
        let seed = seed.map_or(node.seed, |s| crate::model::plan::switch_seed(s, sw));
        let mut dp = state.dataplane(sw)?;
        // The weights first: a switch switched to `wcmp` finds its weights in place.
        dp.refresh_wcmp()?;
        dp.set_config(state.plan.topology.switch_config(mode, seed))?;
    }
    Ok(())
}
