//! Centralised traffic engineering: the controller places a job's flows on paths.
//!
//! Given the traffic matrix of a job (the flows the endpoints will open, with their bytes, built
//! exactly as the endpoints build them: `forwarding::flows`), [`assign`] walks the flows largest first
//! and, at every switch on a flow's way, puts it on the member of the destination's ECMP group
//! by which it would finish first ([`soonest_done`]): that member's link and the links after it
//! the flow has no choice about (a spine's one link down to the destination's rack), each at
//! (bytes so far + the flow's) / its rate, the slowest deciding; on a tie, the member whose own
//! link would finish first. So a degraded link is spared in both directions by its rate (greedy
//! longest-processing-time-first with a min-max objective per link, Graham 1969: within 4/3 of
//! the optimum for one tier of identical links). The result is a member per flow per switch,
//! installed in each switch's `TE_FLOWS` map, where it takes precedence over the hash (`fabric_common::te`); flows the controller did
//! not see are hashed as in E-ECMP.
//!
//! The job's flows are saved with the testbed's state, so that a link failure (`fabric link
//! down`) recomputes the placement over the remaining links and reinstalls it.
use std::collections::{BTreeSet, HashMap};

use anyhow::{Context as _, Result, bail};
use fabric_common::te::{MAX_TE_FLOWS, TeEntry, TeKey, te_key};
use serde::{Deserialize, Serialize};

use crate::{
    endpoint::EndpointOptions,
    forwarding::{
        fabric::SimFabric,
        flows::{Flow, step_flows},
        route::{directed, packet},
    },
    model::plan::{LinkId, NodeId, Plan},
    model::workload::HostTransfer,
    state::State,
    state::state_dir,
};

/// One flow of a job's traffic matrix, as the switches see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeFlow {
    pub src: NodeId,
    pub dst: NodeId,
    pub sport: u16,
    pub dest_qp: u32,
    /// Frame bytes over the whole job.
    pub bytes: u64,
}

/// The controller's placement: per switch, its TE entries; and the bytes it put on each
/// directed link.
#[derive(Clone, Debug, Default)]
pub struct TePlacement {
    pub entries: HashMap<NodeId, Vec<(TeKey, TeEntry)>>,
    pub link_bytes: HashMap<u32, u64>,
    pub flows: usize,
    /// Flows left out: a host of theirs is cut off (its link or rack switch down).
    pub unroutable: usize,
}

impl TePlacement {
    /// The flows placed: all but those of a host cut off.
    pub fn placed(&self) -> usize {
        self.flows - self.unroutable
    }
}

/// The traffic matrix of a job: every flow (data and ACK directions) of every step, the bytes of
/// a flow that recurs in several steps summed (a ring's steps repeat the same flows).
pub fn job_flows(plan: &Plan, steps: &[Vec<HostTransfer>], opts: &EndpointOptions) -> Vec<TeFlow> {
    let mut by_key: HashMap<(NodeId, NodeId, u16, u32), u64> = HashMap::new();
    for step in steps {
        for f in step_flows(plan, step, opts) {
            *by_key.entry((f.src, f.dst, f.sport, f.dest_qp)).or_default() += f.frame_bytes;
        }
    }
    let mut flows: Vec<TeFlow> = by_key
        .into_iter()
        .map(|((src, dst, sport, dest_qp), bytes)| TeFlow { src, dst, sport, dest_qp, bytes })
        .collect();
    flows.sort_by_key(|f| (f.src, f.dst, f.sport, f.dest_qp));
    flows
}

fn as_sim_flow(plan: &Plan, f: &TeFlow) -> Flow {
    Flow {
        transfer: 0,
        direction: crate::forwarding::flows::Direction::Data,
        src: f.src,
        dst: f.dst,
        src_ip: plan.host_ipv4(f.src),
        dst_ip: plan.host_ipv4(f.dst),
        sport: f.sport,
        dest_qp: f.dest_qp,
        packets: 0,
        frame_bytes: f.bytes,
    }
}

/// Places `flows` on the fabric with `down` links out of service.
pub fn assign(plan: &Plan, down: &BTreeSet<LinkId>, flows: &[TeFlow]) -> Result<TePlacement> {
    assign_on(&SimFabric::from_controller(plan, down), flows)
}

/// Places `flows` on a fabric description (the controller's groups, or the simulator's).
pub fn assign_on(fabric: &SimFabric, flows: &[TeFlow]) -> Result<TePlacement> {
    let plan = &fabric.plan;
    let mut order: Vec<&TeFlow> = flows.iter().collect();
    // Largest first; ties in a fixed order so that the placement is reproducible.
    order.sort_by(|a, b| {
        b.bytes.cmp(&a.bytes).then((a.src, a.dst, a.sport, a.dest_qp).cmp(&(b.src, b.dst, b.sport, b.dest_qp)))
    });
    let mut out = TePlacement { flows: flows.len(), ..Default::default() };
    for f in order {
        match path_of(fabric, f, &out.link_bytes)? {
            Some(hops) => place(fabric, f, &hops, &mut out),
            None => out.unroutable += 1,
        }
    }
    for (n, e) in &out.entries {
        anyhow::ensure!(
            e.len() <= MAX_TE_FLOWS as usize,
            "{}: {} TE entries do not fit the table ({MAX_TE_FLOWS})",
            plan.nodes[*n].name,
            e.len()
        );
    }
    Ok(out)
}

/// The hops of `f` from its rack switch on, each (switch, group, member index), at each the
/// member that would finish soonest by `link_bytes` ([`soonest_done`]); `None` if a host of it is cut off (its rack switch
/// has no route to it, or a switch on the way none to the destination), where no entry could
/// carry it. An empty group is the controller's error.
fn path_of(
    fabric: &SimFabric,
    f: &TeFlow,
    link_bytes: &HashMap<u32, u64>,
) -> Result<Option<Vec<(NodeId, u32, usize)>>> {
    let plan = &fabric.plan;
    let mut at = plan.nodes[f.src].ports[0].peer_node;
    if fabric.group_of(at, f.src).is_none() {
        return Ok(None);
    }
    let mut hops = Vec::new();
    for _ in 0..16 {
        if at == f.dst || !plan.nodes[at].role.is_switch() {
            break;
        }
        let Some(group) = fabric.group_of(at, f.dst) else { return Ok(None) };
        let members = fabric.members(at, group);
        let best = soonest_done(fabric, at, members, f.dst, link_bytes, f.bytes);
        let best = best.with_context(|| format!("{}: empty group {group}", plan.nodes[at].name))?;
        hops.push((at, group, best));
        at = plan.nodes[at].ports[members[best]].peer_node;
    }
    Ok(Some(hops))
}

/// The index in `members` (ports of switch `at`) by which a flow of `bytes` to `dst` would
/// finish soonest: each member's way is its link and the links after it that the flow has no
/// choice about (groups of one member, as a spine's one link down to the destination's rack),
/// up to the next choice, short of the destination host's own link (every way ends on it); a way
/// finishes when its slowest link does, (load + bytes) / rate; links every way crosses are left
/// out, as they tell no way from another. On a tie (a shared bottleneck further on), the member
/// whose own link would finish first, then the lowest index. On links of one rate and no forced
/// links, the least loaded member; with a degraded link, its share by rate in both directions.
fn soonest_done(
    fabric: &SimFabric,
    at: NodeId,
    members: &[usize],
    dst: NodeId,
    link_bytes: &HashMap<u32, u64>,
    bytes: u64,
) -> Option<usize> {
    if members.len() <= 1 {
        return (!members.is_empty()).then_some(0);
    }
    let plan = &fabric.plan;
    let ways: Vec<Vec<(u32, LinkId)>> = members.iter().map(|&port| forced_way(fabric, at, port, dst)).collect();
    // How many ways cross each directed link (a way crosses a link once: it never loops).
    let mut crossing: HashMap<u32, usize> = HashMap::new();
    for &(d, _) in ways.iter().flatten() {
        *crossing.entry(d).or_default() += 1;
    }
    let finish = |&(d, l): &(u32, LinkId)| Finish {
        work: u128::from(link_bytes.get(&d).copied().unwrap_or(0).saturating_add(bytes)),
        rate: u128::from(plan.topology.modelled_rate_bps(plan.links[l].rate_gbps).max(1)),
    };
    let costs: Vec<Finish> = ways
        .iter()
        .map(|w| w.iter().filter(|x| crossing[&x.0] < ways.len()).map(finish).max().unwrap_or(Finish::NOTHING))
        .collect();
    let own: Vec<Finish> = ways.iter().map(|w| finish(&w[0])).collect();
    (0..members.len()).min_by(|&a, &b| costs[a].cmp(&costs[b]).then(own[a].cmp(&own[b])).then(a.cmp(&b)))
}

/// The directed links (with their link) a flow to `dst` crosses when it leaves switch `at` by
/// port `port`: that one, then each one it has no choice about, until a switch with a choice or
/// the destination's own link (which every way crosses).
fn forced_way(fabric: &SimFabric, at: NodeId, port: usize, dst: NodeId) -> Vec<(u32, LinkId)> {
    let plan = &fabric.plan;
    let mut way = vec![(directed(fabric, at, port), plan.nodes[at].ports[port].link)];
    let mut node = plan.nodes[at].ports[port].peer_node;
    for _ in 0..16 {
        if node == dst || !plan.nodes[node].role.is_switch() {
            break;
        }
        let Some(group) = fabric.group_of(node, dst) else { break };
        let &[only] = fabric.members(node, group) else { break };
        if plan.nodes[node].ports[only].peer_node == dst {
            break;
        }
        way.push((directed(fabric, node, only), plan.nodes[node].ports[only].link));
        node = plan.nodes[node].ports[only].peer_node;
    }
    way
}

/// When a link finishes its bytes: `work` bytes at `rate` bit/s, compared exactly (by cross
/// multiplication: both below 2^64, so the products fit). Equal when the times are (1 byte at
/// 2 bit/s equals 2 at 4).
#[derive(Clone, Copy, Debug)]
struct Finish {
    work: u128,
    rate: u128,
}

impl Finish {
    const NOTHING: Finish = Finish { work: 0, rate: 1 };
}

impl Ord for Finish {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.work * other.rate).cmp(&(other.work * self.rate))
    }
}

impl PartialEq for Finish {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Finish {}

impl PartialOrd for Finish {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Puts `f` on `hops`: its bytes on every link of the way and an entry at each switch with a
/// choice (a group of one has nothing to choose: no entry needed).
fn place(fabric: &SimFabric, f: &TeFlow, hops: &[(NodeId, u32, usize)], out: &mut TePlacement) {
    let key = te_key(&packet(fabric, &as_sim_flow(&fabric.plan, f)));
    *out.link_bytes.entry(directed(fabric, f.src, 0)).or_default() += f.bytes;
    for &(at, group, best) in hops {
        let members = fabric.members(at, group);
        *out.link_bytes.entry(directed(fabric, at, members[best])).or_default() += f.bytes;
        if members.len() > 1 {
            out.entries.entry(at).or_default().push((key, TeEntry { group, member_index: best as u32 }));
        }
    }
}

fn flows_path(prefix: &str) -> std::path::PathBuf {
    state_dir(prefix).join("te-flows.json")
}

/// Places a job's flows over testbed `prefix`'s links as they are and installs the entries in
/// every switch (replacing earlier ones), and remembers the flows for recomputation after a link
/// failure. Under the testbed's change lock: a link change (a flap's step) meanwhile would move
/// the groups the entries name.
pub fn install(prefix: &str, flows: &[TeFlow]) -> Result<TePlacement> {
    let (state, _lock) = State::load_for_change(prefix)?;
    install_in(&state, flows)
}

/// [`install`] on `state`, loaded for a change (the caller holds its lock).
fn install_in(state: &State, flows: &[TeFlow]) -> Result<TePlacement> {
    let placement = assign(&state.plan_at_degraded_rates(), &state.down_links, flows)?;
    for sw in state.plan.switches() {
        // The placement names groups by their position in the tables; the switch, by the slot
        // each is installed in (they differ after a link changed).
        let entries: Vec<(TeKey, TeEntry)> = placement
            .entries
            .get(&sw)
            .into_iter()
            .flatten()
            .map(|&(k, e)| (k, TeEntry { group: state.group_slot(sw, e.group), ..e }))
            .collect();
        let name = &state.plan.nodes[sw].name;
        let mut dp = state.dataplane(sw)?;
        dp.set_te_flows(&entries).with_context(|| format!("{name}: installing its TE entries"))?;
    }
    let path = flows_path(&state.plan.topology.prefix);
    crate::sys::file::write_whole(&path, &serde_json::to_vec(flows)?)
        .with_context(|| format!("saving the job's flows to {}", path.display()))?;
    Ok(placement)
}

/// After the set of links changed: recompute and reinstall the last job's placement, if a job
/// was placed. Returns whether it did. `state` is loaded for the change (its lock held).
pub fn reinstall(state: &State) -> Result<bool> {
    let path = flows_path(&state.plan.topology.prefix);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let flows: Vec<TeFlow> =
        serde_json::from_slice(&text).with_context(|| format!("{}: not a TE flow file", path.display()))?;
    let plan = &state.plan;
    if let Some(f) =
        flows.iter().find(|f| [f.src, f.dst].iter().any(|&h| plan.nodes.get(h).is_none_or(|n| n.role.is_switch())))
    {
        bail!("{}: flow {} -> {} names no host of this testbed", path.display(), f.src, f.dst);
    }
    install_in(state, &flows)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        endpoint::SportPolicy,
        model::topology::Topology,
        model::workload::{Collective, schedule},
    };

    fn ring_flows(plan: &Plan, qps: u32) -> Vec<TeFlow> {
        let hosts: Vec<NodeId> = plan.hosts().collect();
        let steps: Vec<Vec<HostTransfer>> = schedule(Collective::Allreduce, hosts.len(), 8 << 20, 1)
            .iter()
            .map(|s| crate::model::workload::on_hosts(s, &hosts))
            .collect();
        let opts = EndpointOptions { qps, sport: SportPolicy::Fixed, ..Default::default() };
        job_flows(plan, &steps, &opts)
    }

    /// Max/mean of the bytes on each RTSW's uplinks.
    fn uplink_imbalance(plan: &Plan, link_bytes: &HashMap<u32, u64>) -> f64 {
        let fabric = SimFabric::from_controller(plan, &BTreeSet::new());
        let mut worst: f64 = 0.0;
        for r in plan.switches().filter(|&s| plan.nodes[s].role == crate::model::plan::Role::Rtsw) {
            let loads: Vec<u64> = plan
                .uplinks(r)
                .iter()
                .map(|&p| link_bytes.get(&directed(&fabric, r, p)).copied().unwrap_or(0))
                .collect();
            let (m, _) = crate::model::balance::imbalance(&loads);
            worst = worst.max(m);
        }
        worst
    }

    #[test]
    fn greedy_placement_balances_the_uplinks_better_than_eecmp() {
        let plan = Plan::new(&Topology::default_topology());
        let flows = ring_flows(&plan, 4);
        let te = assign(&plan, &BTreeSet::new(), &flows).unwrap();
        // E-ECMP's loads for the same flows, from the simulator's hash walk.
        let fabric = SimFabric::from_controller(&plan, &BTreeSet::new());
        let mut eecmp: HashMap<u32, u64> = HashMap::new();
        for f in &flows {
            crate::forwarding::route::trace(
                &fabric,
                &as_sim_flow(&plan, f),
                |_| {},
                |l| *eecmp.entry(l).or_default() += f.bytes,
            )
            .unwrap();
        }
        let (t, e) = (uplink_imbalance(&plan, &te.link_bytes), uplink_imbalance(&plan, &eecmp));
        assert!(t < e, "TE {t:.2} must beat E-ECMP {e:.2}");
        assert!(t <= 1.34, "greedy LPT on equal flows: {t:.2}");
        // Entries only where there is a choice (RTSW uplinks; the CTSW downlink groups have one
        // member each here).
        for (n, e) in &te.entries {
            assert_eq!(plan.nodes[*n].role, crate::model::plan::Role::Rtsw, "{}", plan.nodes[*n].name);
            assert!(!e.is_empty());
        }
    }

    #[test]
    fn a_failed_link_carries_nothing_after_recomputation() {
        let plan = Plan::new(&Topology::default_topology());
        let flows = ring_flows(&plan, 2);
        let rtsw = plan.node_by_name("z0r0").unwrap();
        let port = plan.uplinks(rtsw)[0];
        let link = plan.nodes[rtsw].ports[port].link;
        let te = assign(&plan, &BTreeSet::from([link]), &flows).unwrap();
        let fabric = SimFabric::from_controller(&plan, &BTreeSet::new());
        assert_eq!(te.link_bytes.get(&directed(&fabric, rtsw, port)).copied().unwrap_or(0), 0);
        let total: u64 = plan
            .uplinks(rtsw)
            .iter()
            .map(|&p| te.link_bytes.get(&directed(&fabric, rtsw, p)).copied().unwrap_or(0))
            .sum();
        assert!(total > 0, "the rack's traffic moved to the other uplinks");
    }

    /// A degraded uplink, slow both ways: the placement keeps the flows it would gate off it
    /// in both directions (up from its rack, and down into it from its spine, a link no switch
    /// chooses), so the job's slowest link finishes far sooner than under a placement blind to
    /// the rate (the same flows placed on the nominal fabric).
    #[test]
    fn a_degraded_uplink_is_spared_both_ways_by_its_rate() {
        let nominal = Plan::new(&Topology::default_topology());
        let rtsw = nominal.node_by_name("z0r0").unwrap();
        let slow = nominal.nodes[rtsw].ports[nominal.uplinks(rtsw)[0]].link;
        let mut degraded = nominal.clone();
        degraded.links[slow].rate_gbps /= 4.0;
        let flows = ring_flows(&nominal, 8);
        // Per placement: the time its busiest link between switches takes at the degraded rates
        // (bytes per Gbit/s; the hosts' links carry the same whatever the placement), and the
        // slow link's bytes each way.
        let between_switches = |d: &u32| {
            let link = &degraded.links[(d / 2) as usize];
            degraded.nodes[link.a].role.is_switch() && degraded.nodes[link.b].role.is_switch()
        };
        let judge = |p: &TePlacement| {
            let time = |(&d, &b): (&u32, &u64)| b as f64 / degraded.links[(d / 2) as usize].rate_gbps;
            let worst = p.link_bytes.iter().filter(|(d, _)| between_switches(d)).map(time).fold(0.0, f64::max);
            let way = |d: u32| p.link_bytes.get(&d).copied().unwrap_or(0);
            (worst, [way(2 * slow as u32), way(2 * slow as u32 + 1)])
        };
        let (aware, aware_slow) = judge(&assign(&degraded, &BTreeSet::new(), &flows).unwrap());
        let (blind, blind_slow) = judge(&assign(&nominal, &BTreeSet::new(), &flows).unwrap());
        for way in 0..2 {
            assert!(aware_slow[way] < blind_slow[way], "way {way}: {aware_slow:?} vs rate-blind {blind_slow:?}");
        }
        assert!(aware * 1.5 < blind, "the busiest link: rate-aware {aware:.0}, rate-blind {blind:.0}");
    }

    /// A shared bottleneck further on (every spine's link down into the destination's rack as
    /// busy) leaves the choice to the member's own link, the least loaded, not the first; and a
    /// way stops short of the destination host's link, which every way ends on.
    #[test]
    fn a_tie_further_on_goes_to_the_least_loaded_own_link() {
        let plan = Plan::new(&Topology::default_topology());
        let fabric = SimFabric::from_controller(&plan, &BTreeSet::new());
        let (rtsw, dst) = (plan.node_by_name("z0r1").unwrap(), plan.node_by_name("z0r0h0").unwrap());
        let members = fabric.members(rtsw, fabric.group_of(rtsw, dst).unwrap());
        assert_eq!(members.len(), 4);
        let mut bytes = HashMap::new();
        for (i, &port) in members.iter().enumerate() {
            bytes.insert(directed(&fabric, rtsw, port), if i < 2 { 2 } else { 0 });
            let spine = plan.nodes[rtsw].ports[port].peer_node;
            let down = fabric.members(spine, fabric.group_of(spine, dst).unwrap())[0];
            bytes.insert(directed(&fabric, spine, down), 5);
            let way = forced_way(&fabric, rtsw, port, dst);
            assert_eq!(way.len(), 2, "the uplink and the spine's link down, not the host's");
        }
        assert_eq!(soonest_done(&fabric, rtsw, members, dst, &bytes, 1), Some(2));
    }

    /// A host cut off (its only link down, or its rack switch) cannot be reached by any entry:
    /// its flows are left out of the placement and counted, and the others are placed as before
    /// (recomputing after `fabric link down` or `fabric switch down` must not fail the change).
    #[test]
    fn flows_of_a_host_cut_off_are_left_out_and_the_rest_placed() {
        let plan = Plan::new(&Topology::default_topology());
        let flows = ring_flows(&plan, 2);
        let host = plan.hosts().next().unwrap();
        let cut = BTreeSet::from([plan.nodes[host].ports[0].link]);
        let te = assign(&plan, &cut, &flows).unwrap_or_else(|e| panic!("{e:#}"));
        let of_host = flows.iter().filter(|f| f.src == host || f.dst == host).count();
        assert!(of_host > 0);
        assert_eq!((te.flows, te.unroutable, te.placed()), (flows.len(), of_host, flows.len() - of_host));
        let others: Vec<TeFlow> = flows.iter().filter(|f| f.src != host && f.dst != host).copied().collect();
        let alone = assign(&plan, &cut, &others).unwrap();
        assert_eq!((alone.unroutable, &alone.link_bytes), (0, &te.link_bytes));
        assert_eq!(alone.entries, te.entries);
    }
}
