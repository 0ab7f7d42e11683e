//! Faults beyond a clean link down: a degraded link (lower modelled rate, injected loss), a
//! flapping link, a whole switch down or up. Every one is logged in the testbed's state with its
//! time (`State::faults`), where job records find the faults of their lifetime.
//!
//! A degradation acts where the switches model the link: at each switch end of it, on what
//! that end sends (the modelled egress queue drains at the new rate, so queues build, ECN marks
//! and PFC pauses follow; and that end drops the given share of frames as `link_loss`). A host's
//! own sending onto its link is paced by its endpoint, not modelled by a switch, so on a host
//! link only the switch-to-host direction is degraded.
use std::{collections::BTreeSet, time::Duration};

use anyhow::{Context as _, Result, bail};
use fabric_common::fault::PortLoss;

use super::{find_link, link_label, reroute, set_link, set_link_carrier};
use crate::{
    model::fault::{Degradation, FaultEvent, FaultKind, check_testbed_rate},
    model::plan::{LinkId, NodeId, Plan},
    state::State,
    sys::netns,
};

/// Degrades link `spec`: `rate_gbps` (modelled, at most the link's own) and/or `loss_ppm`, with
/// loss draws from `seed`. Replaces an earlier degradation of the link. Returns its label and
/// what was set.
pub fn degrade(prefix: &str, spec: &str, rate_gbps: Option<f64>, loss_ppm: Option<u32>, seed: u64) -> Result<String> {
    if rate_gbps.is_none() && loss_ppm.is_none() {
        return Err(crate::model::fault::FaultError::NothingToDo.into());
    }
    netns::require_capabilities()?;
    let mut state = State::load(prefix)?;
    let l = find_link(&state.plan, spec)?;
    let nominal = state.plan.links[l].rate_gbps;
    let rate_gbps = rate_gbps.map(|r| check_testbed_rate(r, nominal, &state.plan.topology)).transpose()?;
    let d = Degradation { rate_gbps, loss_ppm: loss_ppm.unwrap_or(0), seed };
    apply(&state, l, &d)?;
    let label = link_label(&state.plan, l);
    let detail = d.describe(nominal);
    state.degraded.insert(l, d);
    state.faults.push(FaultEvent::now(FaultKind::LinkDegraded, &label, &detail));
    state.save()?;
    Ok(format!("{label}: {detail}"))
}

/// Gives link `spec` back its own rate and no loss.
pub fn restore(prefix: &str, spec: &str) -> Result<String> {
    netns::require_capabilities()?;
    let mut state = State::load(prefix)?;
    let l = find_link(&state.plan, spec)?;
    let label = link_label(&state.plan, l);
    if state.degraded.remove(&l).is_none() {
        bail!("link {label} is not degraded; degraded links: {}", degraded_labels(&state));
    }
    apply(&state, l, &Degradation::default())?;
    state.faults.push(FaultEvent::now(FaultKind::LinkRestored, &label, ""));
    state.save()?;
    Ok(label)
}

/// The labels of the degraded links, for messages.
pub fn degraded_labels(state: &State) -> String {
    let labels: Vec<String> = state.degraded.keys().map(|&l| link_label(&state.plan, l)).collect();
    if labels.is_empty() { "none".into() } else { labels.join(", ") }
}

/// Writes a degradation (the default one restores) into both switch ends of link `l`.
fn apply(state: &State, l: LinkId, d: &Degradation) -> Result<()> {
    let plan = &state.plan;
    let link = &plan.links[l];
    let rate = plan.topology.modelled_rate_bps(d.rate_gbps.unwrap_or(link.rate_gbps));
    for (end, (node, port)) in [(link.a, link.a_port), (link.b, link.b_port)].into_iter().enumerate() {
        if !plan.nodes[node].role.is_switch() {
            continue;
        }
        let mut dp = state.dataplane(node)?;
        dp.set_port_rate(port as u32, rate)?;
        // WCMP weighs members by their port's rate: the switch's weights follow the new rate.
        dp.refresh_wcmp().with_context(|| format!("WCMP weights of {}", plan.nodes[node].name))?;
        // Each end draws its own sequence: one seed for the link, decorrelated per end.
        let seed = d.seed ^ (end as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        dp.set_port_loss(port as u32, PortLoss::new(d.loss_ppm, seed))
            .with_context(|| format!("setting the loss of {}", plan.nodes[node].name))?;
    }
    Ok(())
}

/// Takes link `spec` down and up `count` times, `period` per cycle (half down, half up), with
/// routing repaired each time. Returns the link's label.
pub fn flap(prefix: &str, spec: &str, period: Duration, count: u32) -> Result<String> {
    if count == 0 {
        return Err(crate::model::fault::FaultError::ZeroCount.into());
    }
    let mut label = String::new();
    for _ in 0..count {
        label = set_link(prefix, spec, false)?;
        std::thread::sleep(period / 2);
        set_link(prefix, spec, true)?;
        std::thread::sleep(period / 2);
    }
    Ok(label)
}

/// Every link of switch `name` down (or back up) at once, with one rerouting: a switch reboot
/// or drain. Returns the links changed.
pub fn set_switch(prefix: &str, name: &str, up: bool) -> Result<Vec<String>> {
    netns::require_capabilities()?;
    let mut state = State::load(prefix)?;
    let sw = find_switch(&state.plan, name)?;
    let links: BTreeSet<LinkId> = state.plan.nodes[sw].ports.iter().map(|p| p.link).collect();
    let mut down_links = state.down_links.clone();
    let changed: Vec<LinkId> = if up {
        links.iter().copied().filter(|l| down_links.remove(l)).collect()
    } else {
        links.iter().copied().filter(|&l| down_links.insert(l)).collect()
    };
    if changed.is_empty() {
        bail!("switch {name} is already {}", if up { "up: none of its links is down" } else { "down" });
    }
    let kind = if up { FaultKind::SwitchUp } else { FaultKind::SwitchDown };
    state.faults.push(FaultEvent::now(kind, name, ""));
    // As for one link: down reroutes first, then takes the links down; up the other way round.
    if up {
        for &l in &changed {
            set_link_carrier(&state.plan, l, true)?;
        }
        reroute(&mut state, down_links)?;
    } else {
        reroute(&mut state, down_links)?;
        for &l in &changed {
            set_link_carrier(&state.plan, l, false)?;
        }
    }
    crate::te::reinstall(&state)?;
    Ok(changed.iter().map(|&l| link_label(&state.plan, l)).collect())
}

fn find_switch(plan: &Plan, name: &str) -> Result<NodeId> {
    let n = plan.node_by_name(name).with_context(|| {
        let switches: Vec<&str> = plan.switches().map(|s| plan.nodes[s].name.as_str()).collect();
        format!("no switch {name:?} in this testbed; its switches: {}", switches.join(", "))
    })?;
    if !plan.nodes[n].role.is_switch() {
        bail!("{name} is a host, not a switch (take its link down with `fabric link down`)");
    }
    Ok(n)
}
