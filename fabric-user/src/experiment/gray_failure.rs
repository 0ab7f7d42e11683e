//! `gray-failure`: failures that are not a clean link down. A spine uplink degraded to a quarter
//! of its rate under ECMP with one QP, E-ECMP with 8 QPs and TE; a lossy link under the
//! endpoints' go-back-N; a flapping link. Each fault is the testbed's own (`fabric link degrade`,
//! `fabric link flap`), applied to the uplink of z0r0 that the healthy run of the same mode
//! loaded most: the worst link to lose for that mode.
use std::time::Duration;

use anyhow::{Context as _, Result};
use fabric_common::config::HashMode;

use super::case::find as case;
use super::{
    harness::{
        Better, Case, Ctx, FaultRuns, Metric, Outcome, Scenario, Sizes, Table, busiest_uplink, completion_ms,
        fragmented_ring, switch_drops, uplink_share,
    },
    verdict::{Verdict, cpu_bound, gain_pct, per_seed},
};
use crate::{
    run::RunOptions,
    run::RunResult,
    run::job::Straggler,
    run::jobs::{JobsFile, runner},
    state::State,
    testbed,
};

pub const SCENARIO: Scenario = Scenario {
    name: "gray-failure",
    summary: "Gray failures on a ring AllReduce: the busiest RTSW-CTSW uplink degraded to a quarter of its \
              rate (`fabric link degrade --rate`) under ECMP 1 QP, E-ECMP 8 QPs, TE and WCMP; the same uplink \
              losing 0.5% of its frames under go-back-N (`--loss`); the uplink flapping mid-run; a straggler.",
    paper: "Not every failure is a clean link down: a link that runs slow or drops a fraction of its frames \
            stays in every ECMP group, so hashing keeps sending it a full share. One QP per connection puts \
            a whole connection, and so the whole ring, behind the slow link; many QPs (E-ECMP) put a \
            fraction of every message there, and a message is as late as its slowest QP. Go-back-N answers \
            each loss by resending everything after it.",
    run,
};

const RTSW: &str = "z0r0";
/// The degraded link's rate, as a fraction of its own.
const DEGRADED_FRACTION: f64 = 0.25;
/// The lossy link's loss, parts per million (0.5%).
const LOSS_PPM: u32 = 5_000;
/// The smallest slowdown, or difference of slowdowns, that counts, % or points.
const MARGIN_POINTS: f64 = 10.0;
/// The smallest slowdown from loss that counts, %.
const LOSS_MARGIN_PCT: f64 = 5.0;

/// The straggler: a host of every fragmented 8-rank ring here, computing this many times slower.
const STRAGGLER: &str = "z0r0h0";
const STRAGGLER_FACTOR: f64 = 2.0;

/// How far the slow link's share of bytes may move while its flows keep their paths, points.
const SHARE_TOLERANCE_POINTS: f64 = 5.0;

/// A routing mode compared: case key, label, hash mode, QPs per connection.
type Mode = (&'static str, &'static str, HashMode, u32);

const MODES: [Mode; 4] = [
    ("ecmp", "ECMP 1 QP", HashMode::FiveTuple, 1),
    ("eecmp", "E-ECMP 8 QPs", HashMode::Eecmp, 8),
    ("te", "TE (controller) 8 QPs", HashMode::Te, 8),
    ("wcmp", "WCMP 8 QPs", HashMode::Wcmp, 8),
];

/// The cases after the modes' healthy and degraded pairs.
const LOSSY: usize = 2 * MODES.len();
const FLAP: usize = LOSSY + 1;
const JOBS: usize = LOSSY + 2;
const STRAGGLING: usize = LOSSY + 3;

/// What the runs leave besides the cases' metrics.
#[derive(Default)]
struct Runs {
    /// Rows of the fault table.
    rows: Vec<Vec<String>>,
    /// Bytes the faulty runs delivered, of the bytes they needed.
    delivered: u64,
    needed: u64,
    /// Frames the lossy link dropped, and packets the endpoints retransmitted, over the lossy runs.
    lost: u64,
    retransmitted: u64,
    /// Twin runs judged whole (a flap's what-if, a trace replay), and those that finished.
    whole: u64,
    whole_finished: u64,
    /// The testbed's faulty runs, as attempted.
    faults: FaultRuns,
}

fn run(ctx: &Ctx) -> Result<Outcome> {
    if let Some(model) = ctx.twin {
        return run_twin(ctx, model);
    }
    let cal = ctx.time_scale()?;
    let mut topo = super::path_pinning::topology(1, 400.0, cal.time_scale);
    // Four uplinks per RTSW, as in link-failure: a degraded one is a quarter of the capacity.
    topo.zones[0].spines = 4;
    let sizes = Sizes { ranks: 8, message: ctx.pick(2 << 20, 4 << 20), iterations: ctx.pick(2, 3) };
    let mut cases = Vec::new();
    for m in &MODES {
        cases.push(Case::new(&format!("{}-healthy", m.0), &format!("{}, healthy", m.1)));
        cases.push(Case::new(&format!("{}-degraded", m.0), &format!("{}, uplink at 1/4 rate", m.1)));
    }
    cases.push(Case::new("eecmp-lossy", "E-ECMP 8 QPs, lossy uplink (0.5%)"));
    cases.push(Case::new("eecmp-flap", "E-ECMP 8 QPs, flapping uplink"));
    cases.push(Case::new("eecmp-jobs", "E-ECMP 8 QPs, jobs runner, no straggler"));
    cases.push(Case::new("eecmp-straggler", &format!("E-ECMP 8 QPs, {STRAGGLER} computes {STRAGGLER_FACTOR}x slower")));
    let mut runs = Runs::default();
    ctx.with_testbed(topo, |state| {
        for &seed in &ctx.seeds {
            for (mi, mode) in MODES.iter().enumerate() {
                let o = fragmented_ring(&sizes, mode.2, mode.3, seed);
                let healthy = ctx.run(state, &format!("{} healthy seed {seed}", mode.0), &o)?;
                let victim = busiest_uplink(&healthy, RTSW).context("z0r0 carried nothing")?;
                let label = format!("{} degraded seed {seed}", mode.0);
                let degraded = runs.faults.attempt(&label, || degraded_run(ctx, state, &o, &victim, &label))?;
                push_metrics(&mut cases[2 * mi], Some(&healthy), &victim, 0);
                push_metrics(&mut cases[2 * mi + 1], degraded.as_ref(), &victim, 0);
                runs.add(seed, mode.1, "1/4 rate", &victim, &healthy, degraded.as_ref());
                if mode.0 == "eecmp" {
                    let label = format!("eecmp lossy seed {seed}");
                    let lossy = runs.faults.attempt(&label, || lossy_run(ctx, state, &o, &victim, seed))?;
                    let lost = lossy.as_ref().map_or(0, |l| l.1);
                    push_metrics(&mut cases[LOSSY], lossy.as_ref().map(|l| &l.0), &victim, lost);
                    runs.lost += lost;
                    runs.retransmitted += lossy.as_ref().map_or(0, |l| retransmitted(&l.0));
                    runs.add(seed, mode.1, "0.5% loss", &victim, &healthy, lossy.as_ref().map(|l| &l.0));
                    let label = format!("eecmp flap seed {seed}");
                    let flap = runs.faults.attempt(&label, || flap_run(ctx, state, &o, &victim, &healthy, &label))?;
                    push_metrics(&mut cases[FLAP], flap.as_ref(), &victim, 0);
                    runs.add(seed, mode.1, "flapping", &victim, &healthy, flap.as_ref());
                    for (i, straggler) in [(JOBS, false), (STRAGGLING, true)] {
                        let label = format!("straggler {straggler} seed {seed}");
                        let run = runs.faults.attempt(&label, || straggler_run(state, &sizes, seed, straggler))?;
                        let (ms, delivered, needed) = run.unwrap_or((f64::NAN, 0, 0));
                        cases[i].push("completion_ms", ms);
                        runs.delivered += delivered;
                        runs.needed += needed;
                    }
                }
            }
        }
        Ok(())
    })?;
    let verdicts = verdicts(&cases, &runs);
    let notes = runs.faults.notes();
    let mut out = outcome(&cal.describe(), &sizes, cases, verdicts, runs);
    out.notes.extend(notes);
    Ok(out)
}

/// The slow and lossy uplink on the twin: the scenario's testbed fabric (or `--scale`'s), every
/// host a rank of a fragmented ring AllReduce. Per mode and seed the healthy run comes first;
/// the uplink of z0r0 it loaded most then runs at a quarter of the twin's link rate, and under
/// E-ECMP loses 0.5% of its frames, then flaps twice as on the testbed ([`flap_cycle`]). The
/// straggler: the same AllReduce replayed as a training step (every rank computes, then
/// all-reduces; the jobs runner's nominal compute) with and without [`STRAGGLER`] computing
/// [`STRAGGLER_FACTOR`] times as long.
fn run_twin(ctx: &Ctx, model: super::twin::TwinModel) -> Result<Outcome> {
    use super::twin::{busiest_uplink, run_one, slowed};
    let (fabric, message) = super::path_pinning::ring_fabric(ctx, model);
    let hosts = fabric.plan.hosts().count();
    let mut cases = Vec::new();
    for m in &MODES {
        cases.push(Case::new(&format!("{}-healthy", m.0), &format!("{}, healthy", m.1)));
        cases.push(Case::new(&format!("{}-degraded", m.0), &format!("{}, uplink at 1/4 rate", m.1)));
    }
    cases.push(Case::new("eecmp-lossy", "E-ECMP 8 QPs, lossy uplink (0.5%)"));
    cases.push(Case::new("eecmp-flap", "E-ECMP 8 QPs, flapping uplink"));
    cases.push(Case::new("eecmp-jobs", "E-ECMP 8 QPs, compute then AllReduce, no straggler"));
    cases.push(Case::new("eecmp-straggler", &format!("E-ECMP 8 QPs, {STRAGGLER} computes {STRAGGLER_FACTOR}x slower")));
    let mut runs = Runs::default();
    for &seed in &ctx.seeds {
        for (mi, m) in MODES.iter().enumerate() {
            let endpoint = crate::endpoint::EndpointOptions {
                qps: m.3,
                sport: crate::endpoint::SportPolicy::Fixed,
                ..Default::default()
            };
            let o = super::twin::ring_options(message, m.2, endpoint);
            let (healthy, load) = run_one(ctx, &fabric, &o, seed, &format!("{} healthy seed {seed}", m.0))?;
            let victim = busiest_uplink(&fabric, &load, RTSW).context("z0r0 sent nothing up")?;
            let link = format!("{RTSW}:{victim}");
            let slow = slowed(&fabric, &link, DEGRADED_FRACTION)?;
            let (degraded, slow_load) = run_one(ctx, &slow, &o, seed, &format!("{} degraded seed {seed}", m.0))?;
            twin_metrics(&mut cases[2 * mi], &fabric, &healthy, &load, &victim)?;
            twin_metrics(&mut cases[2 * mi + 1], &slow, &degraded, &slow_load, &victim)?;
            runs.add_twin(seed, m.1, "1/4 rate", &link, &healthy, &degraded);
            if m.0 == "eecmp" {
                let twin = TwinRun { ctx, fabric: &fabric, o: &o, seed, mode: m.1 };
                twin_eecmp_faults(&twin, (&link, &victim), &healthy, &mut cases, &mut runs)?;
            }
        }
    }
    let mut verdicts = verdicts(&cases, &runs);
    verdicts.retain(|v| v.key != "keeps-delivering");
    verdicts.push(twin_keeps_delivering(&runs));
    Ok(twin_outcome(hosts, message, cases, verdicts, runs))
}

/// On the twin a run's QPs are counted, not its bytes, and the flaps and the straggler are
/// judged whole: every QP and every whole run must finish, and some must have run.
fn twin_keeps_delivering(runs: &Runs) -> Verdict {
    Verdict::fact(
        "keeps-delivering",
        "Every faulty run on the twin completes every QP (slow, lossy and flapping links, a straggler)",
        format!(
            "slow and lossy runs completed {} of {} QPs; flapping and straggling runs finished {} of {}",
            runs.delivered, runs.needed, runs.whole_finished, runs.whole
        ),
        runs.delivered == runs.needed && runs.needed > 0 && runs.whole_finished == runs.whole && runs.whole > 0,
    )
}

/// One E-ECMP case on the twin: the options, fabric and seed its faulty runs share.
struct TwinRun<'a> {
    ctx: &'a Ctx,
    fabric: &'a crate::forwarding::fabric::SimFabric,
    o: &'a crate::sim::SimOptions,
    seed: u64,
    mode: &'static str,
}

/// E-ECMP's faults beyond the slow link, on the twin: `link` (to the CTSW `victim`) losing
/// [`LOSS_PPM`] of its frames, then flapping ([`flap_cycle`] of the `healthy` run), and the
/// straggler's step against the same step without it.
fn twin_eecmp_faults(
    t: &TwinRun<'_>,
    (link, victim): (&str, &str),
    healthy: &crate::sim::SimResult,
    cases: &mut [Case],
    runs: &mut Runs,
) -> Result<()> {
    use super::twin::{compute_then_allreduce, flapping, lossy, run_one};
    let (ctx, seed) = (t.ctx, t.seed);
    let lossy = lossy(t.fabric, link, LOSS_PPM)?;
    let (r, lossy_load) = run_one(ctx, &lossy, t.o, seed, &format!("eecmp lossy seed {seed}"))?;
    twin_metrics(&mut cases[LOSSY], &lossy, &r, &lossy_load, victim)?;
    let p = r.packet.as_ref().expect("a packet result");
    runs.lost += p.link_loss;
    runs.retransmitted += p.retransmissions;
    runs.add_twin(seed, t.mode, "0.5% loss", link, healthy, &r);
    let flap = flapping(ctx, t.fabric, t.o, seed, link, flap_cycle(healthy.completion_s * 1e9))?;
    cases[FLAP].push("completion_ms", flap.completion_s * 1e3);
    cases[FLAP].push("retransmitted", flap.retransmissions as f64);
    let times = (flap.baseline_completion_s, flap.completion_s);
    runs.add_whole(seed, t.mode, ("flapping", link), times, (flap.finished, Some(flap.retransmissions)));
    let straggler = Straggler { host: STRAGGLER.into(), factor: STRAGGLER_FACTOR };
    let base = compute_then_allreduce(ctx, t.fabric, t.o, seed, None)?;
    let straggling = compute_then_allreduce(ctx, t.fabric, t.o, seed, Some(straggler))?;
    cases[JOBS].push("completion_ms", base.step_s * 1e3);
    cases[STRAGGLING].push("completion_ms", straggling.step_s * 1e3);
    runs.count_whole(base.finished);
    let times = (base.step_s, straggling.step_s);
    runs.add_whole(seed, t.mode, ("straggler", STRAGGLER), times, (straggling.finished, None));
    Ok(())
}

/// A twin run's metrics (`victim`: the faulty uplink's CTSW).
fn twin_metrics(
    c: &mut Case,
    fabric: &crate::forwarding::fabric::SimFabric,
    r: &crate::sim::SimResult,
    load: &crate::sim::MemberLoad,
    victim: &str,
) -> Result<()> {
    super::twin::push(c, r)?;
    let p = r.packet.as_ref().expect("a packet result");
    c.push("victim_share_pct", super::twin::uplink_share(fabric, load, RTSW, victim) * 100.0);
    c.push("retransmitted", p.retransmissions as f64);
    c.push("lost_frames", p.link_loss as f64);
    c.push("ecn_marked", p.ecn_marks as f64);
    Ok(())
}

fn twin_outcome(hosts: usize, message: u64, cases: Vec<Case>, verdicts: Vec<Verdict>, runs: Runs) -> Outcome {
    Outcome {
        setup: vec![
            format!(
                "Ring AllReduce over all {hosts} hosts, fragmented placement, {} MiB per rank (1/{hosts} of it per \
                 ring step), fixed source port; ECMP (five-tuple) with 1 QP, E-ECMP, TE and WCMP with 8 QPs; no \
                 congestion control on top of PFC; go-back-N endpoints.",
                message >> 20
            ),
            format!(
                "Each mode runs healthy first; the uplink of {RTSW} that run loaded most then runs at a quarter of \
                 the twin's link rate (both directions) for an identical run. Under E-ECMP the same link then loses \
                 0.5% of its frames at both switch ends (seeded draws, the seed of the run)."
            ),
            format!(
                "Under E-ECMP the same link then flaps twice, from a quarter of the healthy run in, each cycle a \
                 quarter of it long (half down, half up); the controller's routes around it are in force {} µs \
                 after each failure. The straggler: every rank computes for the AllReduce's nominal time (its \
                 steps' largest transfers at the host link's rate, the jobs runner's model), then all-reduces; \
                 {STRAGGLER} computes {STRAGGLER_FACTOR}x as long. Unlike the testbed's jobs runner, where the \
                 others' compute hides under the previous step, the twin's step counts every rank's compute, so \
                 the same extra compute is a smaller share of it.",
                super::twin::DETECT_NS / 1_000
            ),
            "completion_ms is modelled time.".into(),
        ],
        metrics: metrics("AllReduce completion", "ms modelled"),
        cases,
        verdicts,
        notes: vec![
            "A slow link is slow both ways: what other racks send down it into z0r0 is placed by their own \
             RTSWs, whose WCMP weights see only their own full-rate uplinks."
                .into(),
        ],
        tables: vec![Table {
            title: format!("Faults on {RTSW}'s busiest uplink, and the straggler: healthy -> faulty"),
            header: ["seed", "routing", "fault", "link", "completion ms", "retransmitted"].map(String::from).to_vec(),
            rows: runs.rows,
        }],
    }
}

/// `o` with uplink `RTSW:victim` at a quarter of its rate; the link is restored afterwards,
/// whatever the run did.
/// The metrics of both variants; only the completion's label and unit differ (wall time on the
/// testbed, modelled time on the twin).
fn metrics(completion: &'static str, unit: &'static str) -> Vec<Metric> {
    vec![
        Metric::new("completion_ms", completion, unit, Better::Lower, true),
        Metric::new("victim_share_pct", "faulty uplink's share of z0r0's uplink bytes", "%", Better::None, true),
        Metric::new("max_over_mean", "uplink max/mean (mean over RTSWs)", "", Better::Lower, false),
        Metric::new("retransmitted", "retransmitted packets", "", Better::Lower, true),
        Metric::new("lost_frames", "frames the lossy link dropped", "", Better::Lower, false),
        Metric::new("pfc_frames", "PFC frames sent by switches", "", Better::Lower, false),
        Metric::new("ecn_marked", "ECN marks", "", Better::Lower, false),
    ]
}

/// `o` once with uplink `RTSW:victim` at a quarter of its rate, restored afterwards whatever
/// the run did. The outer error is the fault's (a setup error), the inner the run's.
fn degraded_run(ctx: &Ctx, state: &State, o: &RunOptions, victim: &str, label: &str) -> Result<Result<RunResult>> {
    let prefix = state.plan.topology.prefix.as_str();
    let link = format!("{RTSW}:{victim}");
    let nominal = state.plan.topology.tiers.rtsw.rate_gbps;
    testbed::fault::degrade(prefix, &link, Some(nominal * DEGRADED_FRACTION), None, Some(0))?;
    let r = ctx.run_once(state, label, o);
    testbed::fault::restore(prefix, &link)?;
    Ok(r)
}

/// `o` with uplink `RTSW:victim` losing [`LOSS_PPM`] of its frames (seeded by `seed`), and the
/// frames the switches dropped meanwhile (the lossy link's, as nothing else drops here).
fn lossy_run(ctx: &Ctx, state: &State, o: &RunOptions, victim: &str, seed: u64) -> Result<Result<(RunResult, u64)>> {
    let prefix = state.plan.topology.prefix.as_str();
    let link = format!("{RTSW}:{victim}");
    testbed::fault::degrade(prefix, &link, None, Some(LOSS_PPM), Some(seed))?;
    let before = switch_drops(state);
    let r = ctx.run_once(state, &format!("eecmp lossy seed {seed}"), o);
    let after = switch_drops(state);
    testbed::fault::restore(prefix, &link)?;
    let lost = after?.saturating_sub(before?);
    Ok(r.map(|r| (r, lost)))
}

/// The flaps, from a healthy run of `total` (any unit): (start, period, count), starting a
/// quarter of the run in, each cycle a quarter of it long (half down, half up).
fn flap_cycle(total: f64) -> (u64, u64, u32) {
    let quarter = (total / 4.0) as u64;
    (quarter, quarter, 2)
}

/// `o` while uplink `RTSW:victim` flaps as [`flap_cycle`] says (each cycle at least 20 ms of
/// wall time, so that the agent sees every change).
fn flap_run(
    ctx: &Ctx,
    state: &State,
    o: &RunOptions,
    victim: &str,
    healthy: &RunResult,
    label: &str,
) -> Result<Result<RunResult>> {
    let prefix = state.plan.topology.prefix.as_str();
    let link = format!("{RTSW}:{victim}");
    let total_ns = completion_ms(healthy) * o.iterations as f64 * 1e6;
    let (start, period, count) = flap_cycle(total_ns);
    let (start, period) = (Duration::from_nanos(start), Duration::from_nanos(period).max(Duration::from_millis(20)));
    let r = std::thread::scope(|s| -> Result<Result<RunResult>> {
        let flapper = s.spawn(|| {
            std::thread::sleep(start);
            testbed::fault::flap(prefix, &link, period, count)
        });
        let r = ctx.run_once(state, label, o);
        flapper.join().expect("no panic")?;
        Ok(r)
    });
    // Whatever happened, the link ends up.
    testbed::set_link(prefix, &link, true)?;
    r
}

/// The E-ECMP ring through the jobs runner (`fabric run --jobs`), with or without
/// [`STRAGGLER`] computing [`STRAGGLER_FACTOR`] times slower before each step it sends: the mean
/// completion (ms wall) and the bytes delivered and needed.
/// The outer error is the jobs file's (a setup error), the inner the run's.
fn straggler_run(state: &State, sizes: &Sizes, seed: u64, straggler: bool) -> Result<Result<(f64, u64, u64)>> {
    let slow = if straggler {
        format!("straggler = {{ host = \"{STRAGGLER}\", factor = {STRAGGLER_FACTOR:.1} }}\n")
    } else {
        String::new()
    };
    let text = format!(
        "[run]\nqps = 8\nhash = \"eecmp\"\nsport = \"fixed\"\nhash_seed = {seed}\n\
         [[job]]\nname = \"ring\"\nworkload = \"allreduce\"\nranks = {}\nmessage = \"{}\"\n\
         iterations = {}\nplacement = \"fragmented\"\n{slow}",
        sizes.ranks, sizes.message, sizes.iterations
    );
    let file: JobsFile = toml::from_str(&text).context("the straggler's jobs file")?;
    let plan = file.resolve(&state.plan, HashMode::Eecmp)?;
    let out = match runner::run_jobs(state, &plan, true) {
        Ok(out) => out,
        Err(e) => return Ok(Err(e)),
    };
    let job = out.summary.jobs.first().context("the jobs runner ran no job")?;
    let ms = super::harness::mean_ms(&job.completion_ns);
    Ok(Ok((ms, job.bytes_delivered, job.bytes_needed)))
}

fn retransmitted(r: &RunResult) -> u64 {
    r.flows.iter().map(|f| f.retransmitted).sum()
}

/// The case metrics of one run (`victim`: the faulty uplink; `lost`: frames it dropped); NaN
/// (not measured) for a run that failed twice.
fn push_metrics(c: &mut Case, r: Option<&RunResult>, victim: &str, lost: u64) {
    c.push_of("completion_ms", r, completion_ms);
    c.push_of("victim_share_pct", r, |r| uplink_share(r, RTSW, victim) * 100.0);
    c.push_of("max_over_mean", r, |r| r.balance.or_unmeasured().mean_max_over_mean);
    c.push_of("retransmitted", r, |r| retransmitted(r) as f64);
    c.push_of("lost_frames", r, |_| lost as f64);
    c.push_of("pfc_frames", r, |r| (r.congestion.pfc_xoff_sent + r.congestion.pfc_refresh_sent) as f64);
    c.push_of("ecn_marked", r, |r| r.congestion.ecn_marked as f64);
    if let Some(r) = r {
        c.push_run(r);
    }
}

/// A whole twin run's outcome: every QP completed, and its retransmissions if counted.
type Whole = (bool, Option<u64>);

impl Runs {
    /// A twin run judged whole, without a row of its own (a baseline).
    fn count_whole(&mut self, done: bool) {
        self.whole += 1;
        self.whole_finished += u64::from(done);
    }

    /// A twin run judged whole: its row (`times`: the healthy and the faulty completion, s;
    /// `outcome`: whether every QP of it completed, and its retransmissions if counted).
    fn add_whole(&mut self, seed: u64, mode: &str, (fault, link): (&str, &str), times: (f64, f64), outcome: Whole) {
        let ((healthy_s, faulty_s), (done, retransmitted)) = (times, outcome);
        self.count_whole(done);
        self.rows.push(vec![
            seed.to_string(),
            mode.to_string(),
            fault.to_string(),
            link.to_string(),
            format!("{:.3} -> {:.3}", healthy_s * 1e3, faulty_s * 1e3),
            retransmitted.map_or("-".into(), |n| n.to_string()),
        ]);
    }

    /// A twin run's row and QP counts (`delivered` and `needed` count QPs on the twin).
    fn add_twin(
        &mut self,
        seed: u64,
        mode: &str,
        fault: &str,
        link: &str,
        healthy: &crate::sim::SimResult,
        faulty: &crate::sim::SimResult,
    ) {
        let p = faulty.packet.as_ref().expect("a packet result");
        let qps = p.flow_completion_s.iter().flatten();
        self.delivered += qps.clone().filter(|t| t.is_some()).count() as u64;
        self.needed += qps.count() as u64;
        let retx = |r: &crate::sim::SimResult| r.packet.as_ref().map_or(0, |p| p.retransmissions);
        self.rows.push(vec![
            seed.to_string(),
            mode.to_string(),
            fault.to_string(),
            link.to_string(),
            format!("{:.3} -> {:.3}", healthy.completion_s * 1e3, faulty.completion_s * 1e3),
            format!("{} -> {}", retx(healthy), retx(faulty)),
        ]);
    }

    /// A fault's row; `faulty` is `None` when its run failed twice.
    fn add(
        &mut self,
        seed: u64,
        mode: &str,
        fault: &str,
        victim: &str,
        healthy: &RunResult,
        faulty: Option<&RunResult>,
    ) {
        let after = match faulty {
            Some(f) => {
                self.delivered += f.bytes_delivered;
                self.needed += f.bytes_needed;
                [
                    format!("{:.0}%", uplink_share(f, RTSW, victim) * 100.0),
                    format!("{:.1}", completion_ms(f)),
                    retransmitted(f).to_string(),
                ]
            }
            None => ["-", "(failed twice)", "-"].map(String::from),
        };
        self.rows.push(vec![
            seed.to_string(),
            mode.to_string(),
            fault.to_string(),
            format!("{RTSW}:{victim}"),
            format!("{:.0}% -> {}", uplink_share(healthy, RTSW, victim) * 100.0, after[0]),
            format!("{:.1} -> {}", completion_ms(healthy), after[1]),
            format!("{} -> {}", retransmitted(healthy), after[2]),
        ]);
    }
}

/// Per seed, how much fault `fault` slowed mode `key` (gain of healthy over faulty, %).
fn slowdown(cases: &[Case], key: &str, fault: &str) -> Vec<f64> {
    let h = case(cases, &format!("{key}-healthy")).values_of("completion_ms");
    let f = case(cases, &format!("{key}-{fault}")).values_of("completion_ms");
    h.iter().zip(&f).map(|(&h, &f)| gain_pct(h, f, Better::Lower)).collect()
}

fn verdicts(cases: &[Case], runs: &Runs) -> Vec<Verdict> {
    vec![
        slow_link_slows_eecmp(cases).headline(),
        ecmp_suffers_more(cases),
        shares_unchanged(cases),
        wcmp_moves_load(cases),
        loss_slows(cases),
        straggler_slows(cases),
        runs.faults.judged(Verdict::fact(
            "go-back-n-amplifies",
            "Go-back-N resends more packets than the lossy link lost (each loss resends the window after it)",
            format!("lossy runs: {} frames lost, {} packets retransmitted", runs.lost, runs.retransmitted),
            runs.lost > 0 && runs.retransmitted > runs.lost,
        )),
        runs.faults.delivery_fact(
            "keeps-delivering",
            "Every gray-failure run delivers every byte (slow, lossy and flapping links, a straggler)",
            runs.delivered,
            runs.needed,
        ),
    ]
}

/// Hashing does not route around a slow link: E-ECMP with 8 QPs, whose QPs spread every message
/// over all uplinks, still waits for the QPs hashed onto the slow one, so the message is as late
/// as its slowest QP.
fn slow_link_slows_eecmp(cases: &[Case]) -> Verdict {
    let s = slowdown(cases, "eecmp", "degraded");
    let used: Vec<&Case> = ["eecmp-healthy", "eecmp-degraded"].map(|k| case(cases, k)).to_vec();
    Verdict::from_gains(
        "slow-link-slows-eecmp",
        "A slow (1/4 rate) uplink slows the AllReduce even under E-ECMP with 8 QPs: hashing keeps its share on it",
        format!("slowdown of E-ECMP 8 QPs from the 1/4-rate uplink per seed: {}", per_seed(&s, "%")),
        s,
        MARGIN_POINTS,
    )
    .unless_cpu_bound(cpu_bound(&used))
}

/// The slow link costs ECMP 1 QP more than E-ECMP 8 QPs: per seed, ECMP's slowdown minus
/// E-ECMP's, in points, so that what the lost capacity costs every mode alike cancels.
fn ecmp_suffers_more(cases: &[Case]) -> Verdict {
    let [ecmp, eecmp, te] = ["ecmp", "eecmp", "te"].map(|k| slowdown(cases, k, "degraded"));
    let diff: Vec<f64> = ecmp.iter().zip(&eecmp).map(|(a, b)| a - b).collect();
    let measured = format!(
        "slowdown from the 1/4-rate uplink per seed (% of the slower run): ECMP 1 QP {}, E-ECMP 8 QPs {}, TE {}",
        per_seed(&ecmp, "%"),
        per_seed(&eecmp, "%"),
        per_seed(&te, "%")
    );
    let used: Vec<&Case> =
        ["ecmp-healthy", "ecmp-degraded", "eecmp-healthy", "eecmp-degraded"].map(|k| case(cases, k)).to_vec();
    Verdict::from_gains(
        "ecmp-suffers-more",
        "A slow (1/4 rate) uplink hurts ECMP with one QP more than E-ECMP with 8 QPs (slowdown difference, points)",
        measured,
        diff,
        MARGIN_POINTS,
    )
    .unless_cpu_bound(cpu_bound(&used))
}

/// Hashing does not see capacity: the slow uplink keeps the share of bytes it had when healthy
/// under both hashed modes, within [`SHARE_TOLERANCE_POINTS`]: the flows keep their paths, and
/// only retransmitted bytes (which differ from run to run) move the shares.
fn shares_unchanged(cases: &[Case]) -> Verdict {
    let share = |k: &str| case(cases, k).values_of("victim_share_pct");
    let pairs = [("ecmp", "ECMP"), ("eecmp", "E-ECMP")]
        .map(|(k, label)| (label, share(&format!("{k}-healthy")), share(&format!("{k}-degraded"))));
    let holds = pairs.iter().all(|(_, h, d)| h.iter().zip(d).all(|(h, d)| (h - d).abs() <= SHARE_TOLERANCE_POINTS));
    let measured = pairs
        .iter()
        .map(|(label, h, d)| format!("{label} {} -> {}", per_seed(h, "%"), per_seed(d, "%")))
        .collect::<Vec<_>>()
        .join("; ");
    Verdict::identity(
        "hash-keeps-share",
        "Hashing keeps sending the slow uplink the share of bytes it had when healthy (it does not see capacity)",
        format!("the slow uplink's share of {RTSW}'s uplink bytes, healthy -> degraded: {measured}"),
        holds,
    )
}

/// What fixes it: WCMP weights the members by their modelled rates, so the slow uplink's share
/// of the bytes falls (gain of degraded over healthy in that share).
fn wcmp_moves_load(cases: &[Case]) -> Verdict {
    let h = case(cases, "wcmp-healthy").values_of("victim_share_pct");
    let d = case(cases, "wcmp-degraded").values_of("victim_share_pct");
    let g: Vec<f64> = h.iter().zip(&d).map(|(&h, &d)| gain_pct(d, h, Better::Lower)).collect();
    Verdict::from_gains(
        "wcmp-moves-load",
        "WCMP (members weighted by capacity) moves load off the slow uplink",
        format!(
            "the slow uplink's share of {RTSW}'s uplink bytes under WCMP, healthy -> degraded: {} -> {}",
            per_seed(&h, "%"),
            per_seed(&d, "%")
        ),
        g,
        MARGIN_POINTS,
    )
}

/// A 0.5% lossy uplink slows E-ECMP's AllReduce under go-back-N by more than [`LOSS_MARGIN_PCT`].
fn loss_slows(cases: &[Case]) -> Verdict {
    let s = slowdown(cases, "eecmp", "lossy");
    let used: Vec<&Case> = ["eecmp-healthy", "eecmp-lossy"].map(|k| case(cases, k)).to_vec();
    Verdict::from_gains(
        "loss-slows-gbn",
        "An uplink losing 0.5% of its frames slows the AllReduce (E-ECMP 8 QPs, go-back-N endpoints)",
        format!("slowdown from the lossy uplink per seed: {}", per_seed(&s, "%")),
        s,
        LOSS_MARGIN_PCT,
    )
    .unless_cpu_bound(cpu_bound(&used))
}

/// One slow host holds up the whole ring: every step waits for its transfer. An identity: the
/// jobs runner adds the straggler's extra compute to each step's time (the network does not
/// slow it), so the figures show that delay's share of the ring, not something the fabric could
/// fail to show.
fn straggler_slows(cases: &[Case]) -> Verdict {
    let (base, slow) = (
        case(cases, "eecmp-jobs").values_of("completion_ms"),
        case(cases, "eecmp-straggler").values_of("completion_ms"),
    );
    let s: Vec<f64> = base.iter().zip(&slow).map(|(&b, &s)| gain_pct(b, s, Better::Lower)).collect();
    Verdict::from_gains(
        "straggler-slows-ring",
        "One host computing 2x slower slows the whole ring AllReduce (every step waits for it)",
        format!(
            "slowdown from the straggler per seed: {} (its extra compute, added to each step it sends in)",
            per_seed(&s, "%")
        ),
        s,
        LOSS_MARGIN_PCT,
    )
    .as_identity()
}

/// The scenario's report: setup, metrics, cases, verdicts, notes and the fault table.
fn outcome(calibration: &str, sizes: &Sizes, cases: Vec<Case>, verdicts: Vec<Verdict>, runs: Runs) -> Outcome {
    let Sizes { ranks, message, iterations } = *sizes;
    Outcome {
        setup: vec![
            "Testbed: 1 zone, 4 racks x 2 hosts, 4 CTSWs (four uplinks per RTSW), 400 Gbit/s.".into(),
            calibration.to_string(),
            format!(
                "Ring AllReduce over {ranks} ranks, fragmented placement, {} MiB per rank, {iterations} iterations, \
                 fixed source port; ECMP (five-tuple) with 1 QP, E-ECMP, TE and WCMP with 8 QPs.",
                message >> 20
            ),
            format!(
                "Each mode runs healthy first; the uplink of {RTSW} that run loaded most is then degraded to 100 \
                 Gbit/s (modelled) for an identical run and restored. Under E-ECMP the same uplink then loses 0.5% \
                 of its frames (a seeded draw in the switch, counted as link_loss), and then flaps twice \
                 (`fabric link flap`, a cycle a quarter of the healthy run long, routing repaired each time)."
            ),
            format!(
                "A straggler: the same E-ECMP ring through the jobs runner (`fabric run --jobs`), without and with \
                 {STRAGGLER} computing {STRAGGLER_FACTOR}x slower (before each step it sends, it waits \
                 {STRAGGLER_FACTOR} - 1 times the step's time at line rate)."
            ),
        ],
        metrics: metrics("AllReduce completion (mean of iterations)", "ms wall"),
        cases,
        verdicts,
        notes: vec![
            "TE's controller places the job's flows by their bytes over each link's rate, the degraded rate \
             included (both ways of the link), so it moves flows off the slow link, knowing each flow's bytes; WCMP \
             does it by weighting the members by capacity, flow by flow by hash, without knowing the bytes."
                .into(),
            "Hashed modes are degraded on the link they loaded most, so ECMP with one QP loses a whole \
             connection's path; that is the point of the comparison, not a bias: it is where ECMP put the bytes."
                .into(),
        ],
        tables: vec![Table {
            title: format!("Faults on {RTSW}'s busiest uplink: healthy -> faulty"),
            header: ["seed", "routing", "fault", "link", "link's share", "completion ms", "retransmitted"]
                .map(String::from)
                .to_vec(),
            rows: runs.rows,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::verdict::Decision;

    /// Cases with ECMP slowed to `ecmp_degraded` ms from 100 and E-ECMP from 80 to 100.
    fn cases(
        ecmp_degraded: [f64; 3],
        lossy: [f64; 3],
        eecmp_share_degraded: [f64; 3],
        straggler: [f64; 3],
        wcmp_share_degraded: [f64; 3],
    ) -> Vec<Case> {
        let c = |k, t: [f64; 3], share: [f64; 3]| Case::with(k, &[("completion_ms", &t), ("victim_share_pct", &share)]);
        vec![
            c("ecmp-healthy", [100.0, 100.0, 100.0], [50.0, 50.0, 50.0]),
            c("ecmp-degraded", ecmp_degraded, [50.0, 50.0, 50.0]),
            c("eecmp-healthy", [80.0, 81.0, 79.0], [30.0, 31.0, 29.0]),
            c("eecmp-degraded", [100.0, 101.0, 99.0], eecmp_share_degraded),
            c("te-healthy", [70.0, 70.0, 70.0], [25.0, 25.0, 25.0]),
            c("te-degraded", [75.0, 75.0, 75.0], [25.0, 25.0, 25.0]),
            c("wcmp-healthy", [80.0, 80.0, 80.0], [30.0, 30.0, 30.0]),
            c("wcmp-degraded", [85.0, 85.0, 85.0], wcmp_share_degraded),
            c("eecmp-lossy", lossy, [30.0, 30.0, 30.0]),
            c("eecmp-flap", [90.0, 90.0, 90.0], [20.0, 20.0, 20.0]),
            c("eecmp-jobs", [100.0, 100.0, 100.0], [0.0; 3]),
            c("eecmp-straggler", straggler, [0.0; 3]),
        ]
    }

    fn runs(lost: u64, retransmitted: u64, delivered: u64) -> Runs {
        Runs { rows: Vec::new(), delivered, needed: 10, lost, retransmitted, ..Default::default() }
    }

    #[test]
    fn on_the_twin_every_qp_and_every_whole_run_must_finish() {
        let twin = |delivered, whole, whole_finished| {
            twin_keeps_delivering(&Runs { whole, whole_finished, ..runs(1, 8, delivered) }).direction
        };
        assert_eq!(twin(10, 3, 3), Decision::Matches);
        assert_eq!(twin(9, 3, 3), Decision::DoesNotMatch, "a QP that never completed");
        assert_eq!(twin(10, 3, 2), Decision::DoesNotMatch, "a flap or straggler run that never finished");
        assert_eq!(twin(10, 0, 0), Decision::DoesNotMatch, "no whole run at all: nothing shown");
        assert_eq!(
            twin_keeps_delivering(&Runs { whole: 3, whole_finished: 3, ..Default::default() }).direction,
            Decision::DoesNotMatch,
            "no QP counted at all"
        );
    }

    #[test]
    fn verdicts_can_match() {
        // ECMP slows 75% (100 -> 400), E-ECMP 20%; loss slows 20%; go-back-N resends 8x the loss.
        let v = verdicts(
            &cases(
                [400.0, 401.0, 399.0],
                [100.0, 101.0, 99.0],
                [30.0, 31.0, 29.0],
                [150.0, 151.0, 149.0],
                [5.0, 6.0, 4.0],
            ),
            &runs(10, 80, 10),
        );
        let keys: Vec<&str> = v.iter().map(|v| v.key).collect();
        assert_eq!(
            keys,
            [
                "slow-link-slows-eecmp",
                "ecmp-suffers-more",
                "hash-keeps-share",
                "wcmp-moves-load",
                "loss-slows-gbn",
                "straggler-slows-ring",
                "go-back-n-amplifies",
                "keeps-delivering"
            ]
        );
        for v in &v {
            assert_eq!(v.direction, Decision::Matches, "{}: {}", v.key, v.evidence());
        }
    }

    #[test]
    fn verdicts_can_fail() {
        // E-ECMP is not slowed and ECMP slows 1%; loss costs nothing; retransmissions only of
        // what was lost; a byte missing; and the slow link's share moved (as a capacity-aware
        // mode would).
        let mut c =
            cases([101.0, 102.0, 100.0], [80.0, 81.0, 79.0], [10.0, 10.0, 10.0], [100.0, 101.0, 99.0], [30.0; 3]);
        c[3] =
            Case::with("eecmp-degraded", &[("completion_ms", &[80.0, 81.0, 79.0]), ("victim_share_pct", &[10.0; 3])]);
        let v = verdicts(&c, &runs(10, 10, 9));
        for v in &v {
            assert_eq!(v.direction, Decision::DoesNotMatch, "{}: {}", v.key, v.evidence());
        }
        // No loss at all is no evidence of amplification either.
        let v = verdicts(
            &cases([400.0, 401.0, 399.0], [100.0, 101.0, 99.0], [30.0, 31.0, 29.0], [150.0; 3], [5.0; 3]),
            &runs(0, 5, 10),
        );
        let amplifies = v.iter().find(|v| v.key == "go-back-n-amplifies").unwrap();
        assert_eq!(amplifies.direction, Decision::DoesNotMatch);
    }
}
