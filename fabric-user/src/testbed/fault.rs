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

use super::{change_links, find_link, interrupt, link_label, refuse_if_flapped, set_link_in};
use crate::{
    model::fault::{Degradation, FaultEvent, FaultKind, check_testbed_rate},
    model::plan::{LinkId, NodeId, Plan},
    state::{Owner, State},
    sys::netns,
};

/// Degrades link `spec`: `rate_gbps` (modelled, at most the link's own) and/or `loss_ppm`, with
/// loss draws from `seed`. Of an earlier degradation of the link, what is not given again is
/// kept; the link's own rate gives the rate back, and a link left with its own rate and no loss
/// is restored. Returns its label and what is in force.
pub fn degrade(
    prefix: &str,
    spec: &str,
    rate_gbps: Option<f64>,
    loss_ppm: Option<u32>,
    seed: Option<u64>,
) -> Result<String> {
    if rate_gbps.is_none() && loss_ppm.is_none() {
        return Err(crate::model::fault::FaultError::NothingToDo.into());
    }
    degrade_from(prefix, spec, rate_gbps, loss_ppm, seed).map(|(what, _set, _before)| what)
}

/// Slows link `spec` to `rate_gbps` for a while (a job's slow NIC), keeping its loss: returns
/// what it set and what was in force before (`Degradation::NONE` on a link not degraded), to
/// put back with [`put_back`]. Read and changed under one lock, so that no change between is
/// lost.
pub fn slow_for_a_while(prefix: &str, spec: &str, rate_gbps: f64) -> Result<(Degradation, Degradation)> {
    degrade_from(prefix, spec, Some(rate_gbps), None, None).map(|(_what, set, before)| (set, before))
}

/// [`degrade`]: what it says, the degradation it set, and the one in force before.
fn degrade_from(
    prefix: &str,
    spec: &str,
    rate_gbps: Option<f64>,
    loss_ppm: Option<u32>,
    seed: Option<u64>,
) -> Result<(String, Degradation, Degradation)> {
    netns::require_capabilities()?;
    let (state, _lock) = State::load_for_change(prefix)?;
    let l = find_link(&state.plan, spec)?;
    let nominal = state.plan.links[l].rate_gbps;
    let rate_gbps = rate_gbps.map(|r| check_testbed_rate(r, nominal, &state.plan.topology)).transpose()?;
    let before = degradation_of(&state, l);
    let set = before.updated(rate_gbps, loss_ppm, seed, nominal);
    let what = put(state, l, set)?;
    Ok((what, set, before))
}

/// Gives link `spec` back its own rate and no loss.
pub fn restore(prefix: &str, spec: &str) -> Result<String> {
    netns::require_capabilities()?;
    let (state, _lock) = State::load_for_change(prefix)?;
    let l = find_link(&state.plan, spec)?;
    let label = link_label(&state.plan, l);
    if !state.degraded.contains_key(&l) {
        bail!("link {label} is not degraded; degraded links: {}", degraded_labels(&state));
    }
    put(state, l, Degradation::NONE)?;
    Ok(label)
}

/// Puts degradation `before` back on link `spec` (`NONE`: its own rate, no loss), unless the
/// link no longer has `set` (what [`slow_for_a_while`] left): a change made since is kept.
pub fn put_back(prefix: &str, spec: &str, set: Degradation, before: Degradation) -> Result<String> {
    netns::require_capabilities()?;
    let (state, _lock) = State::load_for_change(prefix)?;
    let l = find_link(&state.plan, spec)?;
    if degradation_of(&state, l) != set {
        return Ok(format!("{}: changed since, left as it is", link_label(&state.plan, l)));
    }
    put(state, l, before)
}

fn degradation_of(state: &State, l: LinkId) -> Degradation {
    state.degraded.get(&l).copied().unwrap_or(Degradation::NONE)
}

/// Puts degradation `d` in force on link `l` (at both switch ends), logs the change and saves
/// the state. Returns the link's label and what is in force. A link that stays as it was (not
/// degraded, and `d` is none) is neither written nor logged.
fn put(mut state: State, l: LinkId, d: Degradation) -> Result<String> {
    let label = link_label(&state.plan, l);
    let nominal = state.plan.links[l].rate_gbps;
    let before = degradation_of(&state, l);
    if d.is_none() && before.is_none() {
        return Ok(format!("{label}: its own rate, no loss (it was not degraded)"));
    }
    apply(&state, l, &d, &before)?;
    let (kind, detail) = if d.is_none() {
        state.degraded.remove(&l);
        (FaultKind::LinkRestored, String::new())
    } else {
        state.degraded.insert(l, d);
        (FaultKind::LinkDegraded, d.describe(nominal))
    };
    // A placed job's flows move off (or back onto) the link by its new rate.
    if d.rate_gbps != before.rate_gbps {
        super::reinstall_te(&state, &format!("link {label} has its new rate"));
    }
    state.faults.push(FaultEvent::now(kind, &label, &detail));
    state.save()?;
    Ok(format!("{label}: {}", if d.is_none() { "its own rate, no loss" } else { &detail }))
}

/// The labels of the degraded links, for messages.
pub fn degraded_labels(state: &State) -> String {
    let labels: Vec<String> = state.degraded.keys().map(|&l| link_label(&state.plan, l)).collect();
    if labels.is_empty() { "none".into() } else { labels.join(", ") }
}

/// Writes degradation `d` (the default one restores) into both switch ends of link `l`, whose
/// ends hold `before`. An end that fails leaves both as they were: the end written first gets
/// `before` back.
fn apply(state: &State, l: LinkId, d: &Degradation, before: &Degradation) -> Result<()> {
    let link = &state.plan.links[l];
    let ends = [(link.a, link.a_port), (link.b, link.b_port)];
    for (i, &end) in ends.iter().enumerate() {
        if let Err(e) = apply_end(state, l, i, end, d) {
            // The end that failed too: it may have taken the rate before failing.
            for (j, &written) in ends[..=i].iter().enumerate() {
                // Best effort: the end that failed is already named in the error.
                let _ = apply_end(state, l, j, written, before);
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Writes degradation `d` into end number `end` (`node`, `port`) of link `l`, if it is a switch.
fn apply_end(state: &State, l: LinkId, end: usize, (node, port): (NodeId, usize), d: &Degradation) -> Result<()> {
    let plan = &state.plan;
    if !plan.nodes[node].role.is_switch() {
        return Ok(());
    }
    let name = &plan.nodes[node].name;
    let rate = plan.topology.modelled_rate_bps(d.rate_gbps.unwrap_or(plan.links[l].rate_gbps));
    let mut dp = state.dataplane(node).with_context(|| format!("switch {name}"))?;
    dp.set_port_rate(port as u32, rate).with_context(|| format!("setting the rate of {name}"))?;
    // WCMP weighs members by their port's rate: the switch's weights follow the new rate.
    dp.refresh_wcmp().with_context(|| format!("WCMP weights of {name}"))?;
    let seed = fabric_common::fault::end_seed(d.seed, l as u64, end as u64);
    dp.set_port_loss(port as u32, PortLoss::new(d.loss_ppm, seed))
        .with_context(|| format!("setting the loss of {name}"))
}

/// Takes link `spec` down and up `count` times, `period` per cycle (half down, half up), with
/// routing repaired each time. Returns the link's label. The link belongs to the flap while it
/// runs (`State::flaps`): other commands may not take it down or up, nor its switches down.
/// Each change is one step for a stop signal's cleanup (`interrupt::on_stop_signal`), which
/// brings the link back up with [`end_flap`] rather than leave it down.
pub fn flap(prefix: &str, spec: &str, period: Duration, count: u32) -> Result<String> {
    if count == 0 {
        return Err(crate::model::fault::FaultError::ZeroCount.into());
    }
    netns::require_capabilities()?;
    let (l, label) = interrupt::guarded_step(|| own_flap(prefix, spec))?;
    let flapped = (0..count).try_for_each(|_| {
        interrupt::guarded_step(|| flap_step(prefix, l, &label, false))?;
        std::thread::sleep(period / 2);
        interrupt::guarded_step(|| flap_step(prefix, l, &label, true))?;
        std::thread::sleep(period / 2);
        Ok::<_, anyhow::Error>(())
    });
    let released = interrupt::guarded_step(|| release_flap(prefix, l));
    flapped.and(released).map(|()| label)
}

/// Records this process as the one flapping link `spec` (no other command may take it down or
/// up until [`release_flap`]); returns the link and its label.
fn own_flap(prefix: &str, spec: &str) -> Result<(LinkId, String)> {
    let (mut state, _lock) = State::load_for_change(prefix)?;
    let l = find_link(&state.plan, spec)?;
    let label = link_label(&state.plan, l);
    if let Some(&sw) = state.down_switches_of(l).first() {
        let name = &state.plan.nodes[sw].name;
        bail!("link {label} is down with switch {name}: nothing to flap (fabric switch up {name})");
    }
    super::rxe::refuse_moved_host_links(&state, [l], "link flap")?;
    if let Some(owner) = state.flapped_by_another(l) {
        bail!("link {label} is already being flapped by process {} (one flap of a link at a time)", owner.pid);
    }
    // Down, and no live flap's: taken down by hand (`fabric link down`), or a killed flap's.
    if state.links_taken_down.contains(&l) {
        bail!(
            "link {label} is down (fabric link down): bring it up first (fabric link up {label}); a flap ends with it up"
        );
    }
    state.flaps.insert(l, Owner::this_process()?);
    state.save()?;
    Ok((l, label))
}

/// One step of this process's flap of link `l` (`label`): taken only while the testbed still
/// records the flap as this process's. A testbed taken down and built again under the same
/// prefix since the flap began has no such record, and its links are not the flap's to change.
fn flap_step(prefix: &str, l: LinkId, label: &str, up: bool) -> Result<()> {
    let (mut state, _lock) = State::load_for_change(prefix)?;
    if state.flaps.get(&l) != Some(&Owner::this_process()?) {
        bail!(
            "testbed {prefix:?} no longer records this flap of link {label}: it was taken down and built again \
             since the flap began, so the flap ends and leaves the new testbed's links as they are"
        );
    }
    set_link_in(&mut state, l, up)
}

/// Ends this process's record of flapping link `l`, if the testbed still has it.
fn release_flap(prefix: &str, l: LinkId) -> Result<()> {
    let (mut state, _lock) = State::load_for_change(prefix)?;
    if state.flaps.get(&l) == Some(&Owner::this_process()?) {
        state.flaps.remove(&l);
        state.save()?;
    }
    Ok(())
}

/// Ends this process's flap of link `spec`, cut short: brings the link back up if it is down,
/// and ends the flap's record. A link this process does not flap
/// (a flap refused, or stopped before it began) is left as it is. Says what it found or did.
pub fn end_flap(prefix: &str, spec: &str) -> Result<String> {
    let (mut state, _lock) = State::load_for_change(prefix)?;
    let l = find_link(&state.plan, spec)?;
    let label = link_label(&state.plan, l);
    if state.flaps.remove(&l) != Some(Owner::this_process()?) {
        return Ok(format!("link {label} was not being flapped by this command: left as it is"));
    }
    // No switch of the link can have gone down meanwhile: `switch down` refuses a flapped link.
    if !state.links_taken_down.contains(&l) {
        state.save()?;
        return Ok(format!("link {label} is up"));
    }
    // Saves the state without the flap's record too.
    set_link_in(&mut state, l, true)?;
    Ok(format!("link {label} is up again; ECMP groups repaired"))
}

/// What `fabric switch down|up` changed.
#[derive(Debug)]
pub struct SwitchChange {
    /// The links that went down or came up, by label.
    pub changed: Vec<String>,
    /// Up only: the switch's links that stay down, each with why (taken down one by one, or
    /// the switch at its other end is down).
    pub held_down: Vec<String>,
}

/// Every link of switch `name` down (or back up) at once, with one rerouting: a switch reboot
/// or drain. A link taken down by itself (`fabric link down`) or whose other end is a switch
/// that is down too stays down when the switch comes back.
pub fn set_switch(prefix: &str, name: &str, up: bool) -> Result<SwitchChange> {
    netns::require_capabilities()?;
    let (mut state, _lock) = State::load_for_change(prefix)?;
    let sw = find_switch(&state.plan, name)?;
    let mut down_switches = state.down_switches.clone();
    let toggled = if up { down_switches.remove(&sw) } else { down_switches.insert(sw) };
    if !toggled {
        return Err(already(&state, sw, up));
    }
    let links: BTreeSet<LinkId> = state.plan.nodes[sw].ports.iter().map(|p| p.link).collect();
    for &link in &links {
        refuse_if_flapped(&state, link)?;
    }
    super::rxe::refuse_moved_host_links(&state, links.iter().copied(), if up { "switch up" } else { "switch down" })?;
    let down_links = state.out_of_service(&state.links_taken_down, &down_switches);
    let changed: Vec<LinkId> = state.down_links.symmetric_difference(&down_links).copied().collect();
    let held_down = if up { held_down(&state, &down_switches, links.intersection(&down_links)) } else { Vec::new() };
    state.down_switches = down_switches;
    let kind = if up { FaultKind::SwitchUp } else { FaultKind::SwitchDown };
    state.faults.push(FaultEvent::now(kind, name, ""));
    change_links(&mut state, &changed, up, down_links)?;
    let changed = changed.iter().map(|&l| link_label(&state.plan, l)).collect();
    Ok(SwitchChange { changed, held_down })
}

/// Why switch `sw` is already up (or down): with the links of it that are down on their own,
/// which `switch up` does not bring back.
fn already(state: &State, sw: NodeId, up: bool) -> anyhow::Error {
    let name = &state.plan.nodes[sw].name;
    let on_their_own: Vec<String> = (state.plan.nodes[sw].ports.iter())
        .filter(|p| up && state.links_taken_down.contains(&p.link))
        .map(|p| link_label(&state.plan, p.link))
        .collect();
    if on_their_own.is_empty() {
        return anyhow::anyhow!("switch {name} is already {}", if up { "up" } else { "down" });
    }
    anyhow::anyhow!(
        "switch {name} is already up; its links down on their own come back with fabric link up: {}",
        on_their_own.join(", ")
    )
}

/// Labels of `links` with why each stays down while `down_switches` are down.
fn held_down<'a>(
    state: &State,
    down_switches: &BTreeSet<NodeId>,
    links: impl Iterator<Item = &'a LinkId>,
) -> Vec<String> {
    let why = |l: LinkId| {
        let link = &state.plan.links[l];
        let by_hand = state.links_taken_down.contains(&l).then(|| "taken down by itself".to_string());
        let switches = [link.a, link.b].into_iter().filter(|n| down_switches.contains(n));
        let reasons: Vec<String> = by_hand
            .into_iter()
            .chain(switches.map(|sw| format!("switch {} is down", state.plan.nodes[sw].name)))
            .collect();
        reasons.join("; ")
    };
    links.map(|&l| format!("{} ({})", link_label(&state.plan, l), why(l))).collect()
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
