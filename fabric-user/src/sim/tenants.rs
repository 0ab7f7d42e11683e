//! Several jobs on one fabric in the twin, in rounds: step i of every job runs at once, as
//! `fabric run --jobs` runs them with `mode = "rounds"`, and each job's step ends when its own
//! last QP does. The jobs hold disjoint hosts and run the same collective shape (the same
//! number and repetition of steps), so their steps align; the switches run one hash mode and
//! every job the first job's endpoint options, as a jobs file's `[run]` gives them.
use std::collections::HashMap;

use anyhow::{Context as _, Result, bail, ensure};

use super::{
    MemberLoad, SimOptions, StepRuns, install_te_on,
    packet::{PacketOptions, add_member_load, endpoint_config, network, qp_specs, twin_of},
    steps_of,
};
use crate::{
    forwarding::fabric::SimFabric,
    model::{plan::NodeId, workload::HostTransfer},
};

/// What the jobs did together.
#[derive(Clone, Debug)]
pub struct TenantsRun {
    /// Per job, in the order given: its modelled completion, seconds.
    pub completion_s: Vec<f64>,
    /// The bytes and packets every ECMP member carried over one iteration of all the jobs.
    pub load: MemberLoad,
    pub retransmitted: u64,
    /// Every QP of every round finished within the deadline.
    pub finished: bool,
}

/// Runs `jobs` together on the twin (one job alone is a valid call: its own completion).
pub fn simulate_packet_tenants(fabric: &mut SimFabric, jobs: &[SimOptions], p: &PacketOptions) -> Result<TenantsRun> {
    let first = jobs.first().context("tenants: no job")?;
    let endpoints = endpoint_config(&first.endpoint)?;
    for (j, o) in jobs.iter().enumerate() {
        ensure!(
            o.hash == first.hash && o.hash_seed == first.hash_seed && o.endpoint.qps == first.endpoint.qps,
            "tenants: job {j} asks for another hash mode, hash seed or QP count than job 0 (the switches run one)"
        );
        ensure!(
            endpoint_config(&o.endpoint)? == endpoints,
            "tenants: job {j} asks for other endpoint settings (rate, MTU, congestion control, transport...) \
             than job 0 (the twin's hosts run one)"
        );
    }
    fabric.set_hash(first.hash, first.hash_seed);
    let placed: Vec<(Vec<NodeId>, StepRuns)> = jobs.iter().map(|o| steps_of(fabric, o)).collect::<Result<_>>()?;
    let owner = owners(fabric, &placed)?;
    let rounds = align(&placed)?;
    install_te_on(fabric, first.hash, &first.endpoint, &rounds)?;
    let fabric = &*fabric;
    let net = network(fabric, p.link_delay_ns)?;
    let mut twin = twin_of(&net, fabric, endpoints, p);
    let mut out = TenantsRun {
        completion_s: vec![0.0; jobs.len()],
        load: MemberLoad::new(fabric),
        retransmitted: 0,
        finished: true,
    };
    for (i, (transfers, repeat)) in rounds.iter().enumerate() {
        let qps = qp_specs(fabric, transfers, &first.endpoint);
        let r = twin.run_step(&qps, p.deadline_ns).with_context(|| format!("tenants: round {i}"))?;
        out.finished &= r.finished;
        out.retransmitted += r.retransmitted() * *repeat as u64;
        add_member_load(&r, *repeat as u64, &mut out.load);
        let mut end = vec![0u64; jobs.len()];
        for q in &r.qps {
            let j = owner[&q.src];
            end[j] = end[j].max(q.completed_ns.unwrap_or(r.completion_ns));
        }
        for (total, e) in out.completion_s.iter_mut().zip(end) {
            *total += e as f64 * 1e-9 * *repeat as f64;
        }
    }
    Ok(out)
}

/// Which job each host's ranks belong to; a host two jobs hold is refused.
fn owners(fabric: &SimFabric, placed: &[(Vec<NodeId>, StepRuns)]) -> Result<HashMap<NodeId, usize>> {
    let mut owner = HashMap::new();
    for (j, (hosts, _)) in placed.iter().enumerate() {
        for &h in hosts {
            if let Some(k) = owner.insert(h, j) {
                bail!(
                    "tenants: jobs {k} and {j} both hold {} (the twin's jobs hold disjoint hosts)",
                    fabric.plan.nodes[h].name
                );
            }
        }
    }
    Ok(owner)
}

/// Every job's step i together, repeated as the steps repeat; jobs whose steps do not align are
/// refused.
fn align(placed: &[(Vec<NodeId>, StepRuns)]) -> Result<Vec<(Vec<HostTransfer>, usize)>> {
    let shape = |s: &StepRuns| s.iter().map(|(_, r)| *r).collect::<Vec<_>>();
    let first = shape(&placed[0].1);
    for (j, (_, steps)) in placed.iter().enumerate() {
        ensure!(
            shape(steps) == first,
            "tenants: job {j}'s steps do not align with job 0's (the twin runs jobs in rounds: give them the \
             same collective and ranks)"
        );
    }
    Ok((0..first.len())
        .map(|i| {
            let transfers =
                placed.iter().flat_map(|(hosts, steps)| crate::model::workload::on_hosts(&steps[i].0, hosts));
            (transfers.collect(), first[i])
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        endpoint::{EndpointOptions, SportPolicy},
        model::{placement::Placement, workload::Collective},
        sim::{cli::build_fabric, packet::simulate_packet},
    };
    use fabric_common::config::HashMode;

    const PACKET: PacketOptions = PacketOptions {
        link_delay_ns: 1_000,
        deadline_ns: 1_000_000_000,
        seed: 1,
        memory_limit_bytes: 1 << 32,
        queues: crate::sim::packet::QueueModel::Held,
    };

    fn ring(hosts: &[&str], hash: HashMode, qps: u32) -> SimOptions {
        SimOptions {
            collective: Collective::Allreduce,
            ranks: Some(hosts.len()),
            message_bytes: 1 << 20,
            placement: Placement::Explicit { hosts: hosts.iter().map(|h| h.to_string()).collect() },
            seed: 1,
            hash,
            hash_seed: Some(7),
            endpoint: EndpointOptions { qps, sport: SportPolicy::Fixed, ..Default::default() },
        }
    }

    const A: [&str; 4] = ["z0r0h0", "z0r1h0", "z0r2h0", "z0r3h0"];
    const B: [&str; 4] = ["z0r0h1", "z0r1h1", "z0r2h1", "z0r3h1"];

    #[test]
    fn one_job_alone_is_the_single_case_simulation() {
        let mut f = build_fabric(None, None).unwrap();
        let a = ring(&A, HashMode::Eecmp, 8);
        let alone = simulate_packet_tenants(&mut f.clone(), std::slice::from_ref(&a), &PACKET).unwrap();
        let single = simulate_packet(&mut f, &a, &PACKET).unwrap();
        assert!(alone.finished);
        assert!((alone.completion_s[0] - single.completion_s).abs() < 1e-9, "{alone:?} vs {}", single.completion_s);
    }

    #[test]
    fn two_rings_share_the_uplinks_and_the_members_carry_both() {
        let f = build_fabric(None, None).unwrap();
        let (a, b) = (ring(&A, HashMode::FiveTuple, 1), ring(&B, HashMode::FiveTuple, 1));
        let both = simulate_packet_tenants(&mut f.clone(), &[a.clone(), b.clone()], &PACKET).unwrap();
        let alone_a = simulate_packet_tenants(&mut f.clone(), std::slice::from_ref(&a), &PACKET).unwrap();
        let alone_b = simulate_packet_tenants(&mut f.clone(), std::slice::from_ref(&b), &PACKET).unwrap();
        assert!(both.finished && both.retransmitted == 0);
        // Lossless: every member carries exactly what the two jobs carry alone.
        for s in 0..both.load.bytes.len() {
            assert_eq!(both.load.bytes[s], alone_a.load.bytes[s] + alone_b.load.bytes[s], "member {s}");
        }
        // Sharing never makes a job faster than alone.
        assert!(both.completion_s[0] >= alone_a.completion_s[0] - 1e-9, "{both:?} {alone_a:?}");
        assert!(both.completion_s[1] >= alone_b.completion_s[0] - 1e-9, "{both:?} {alone_b:?}");
    }

    #[test]
    fn bad_tenants_are_refused_by_what_is_wrong() {
        let mut f = build_fabric(None, None).unwrap();
        let e =
            |jobs: &[SimOptions]| format!("{:#}", simulate_packet_tenants(&mut f.clone(), jobs, &PACKET).unwrap_err());
        assert!(e(&[]).contains("no job"));
        let a = ring(&A, HashMode::Eecmp, 8);
        assert!(e(&[a.clone(), a.clone()]).contains("both hold z0r0h0"));
        assert!(e(&[a.clone(), ring(&B, HashMode::Pin, 8)]).contains("hash mode"));
        assert!(e(&[a.clone(), ring(&B[..3], HashMode::Eecmp, 8)]).contains("do not align"));
        let mut slow = ring(&B, HashMode::Eecmp, 8);
        slow.endpoint.rate_bps = 100_000_000_000;
        assert!(e(&[a.clone(), slow]).contains("job 1 asks for other endpoint settings"));
        let _ = &mut f;
    }
}
