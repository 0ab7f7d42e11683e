//! DCQCN congestion control (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
//! SIGCOMM 2015) as two sans-IO state machines. As everywhere in [`super`], the time is a `u64` of
//! nanoseconds passed in; nothing here reads a clock or sends a packet.
//!
//! - [`ReactionPoint`] (RP, the sender; one per requester QP): cuts its rate on each CNP, raises it
//!   again on a timer and a byte counter. Its rate is what the caller passes to
//!   [`super::qp::Requester::set_rate`]; every method that can change it returns the new rate.
//! - [`NotificationPoint`] (NP, the receiver; one per responder QP): decides which ECN-marked (CE)
//!   packets are answered with a CNP ([`super::qp::Responder::congestion_notification`]).
//! - [`DcqcnParams`]: the knobs, defaulting to the paper's values, with [`DcqcnParams::scaled`]
//!   for the fabric's slowed time.
//!
//! The third role, the congestion point (RED/ECN marking in the switch), is
//! `fabric_common::queue`'s business.
//!
//! # The algorithm as implemented
//!
//! Reaction point (paper §3.1). `R_C` is the current rate, `R_T` the target rate, `α` the
//! estimate of congestion, starting at 1. On a CNP (eq. 1, with `α` from before the CNP):
//!
//! ```text
//! R_T = R_C
//! R_C = max(R_min, R_C · (1 − α/2))
//! α   = (1 − g) · α + g
//! ```
//!
//! and the rate-increase timer, the byte counter and the counts `T` and `BC` start over. Each
//! `K` (the α period) with no CNP: `α = (1 − g) · α` (eq. 2); a CNP restarts that timer too.
//!
//! From the first CNP until `R_C` is back at line rate (the rate is *limited*), a rate-increase
//! event comes every rate-increase period (timer) and every `B` bytes sent (byte counter). `T`
//! and `BC` count the timer and byte-counter events since the last CNP *before* the current one,
//! so each counter gives exactly `F` fast-recovery steps, the paper's "F = 5 successive
//! iterations". The stage (the paper's Figure 7 conditions, [`Stage::of`]):
//!
//! ```text
//! max(T, BC) < F   fast recovery      R_C = (R_T + R_C)/2                      (eq. 3)
//! min(T, BC) > F   hyper increase     R_T = R_T + i·R_HAI, i = min(T, BC) − F
//!                                     R_C = (R_T + R_C)/2
//! otherwise        additive increase  R_T = R_T + R_AI; R_C = (R_T + R_C)/2    (eq. 4)
//! ```
//!
//! then `R_T` and `R_C` are capped at line rate. Once `R_C` rounds to line rate the limiter is
//! released (`R_C = R_T` = line rate; timer and byte counter stop, as further events could change
//! nothing); `α` keeps decaying until the next CNP. Rates are kept as `f64` so the halvings are
//! exact; [`ReactionPoint::rate_bps`] rounds to whole bit/s.
//!
//! Notification point (paper §3.1, N = 50 µs): a CE packet is answered at once if no CNP went out
//! for the QP in the last interval; one that arrives inside the interval is not answered then, but
//! leaves a CNP owed at the interval's end ([`NotificationPoint::poll`]), so every interval with a
//! marked packet yields one CNP. A caller that never polls gets the simpler "at most one per
//! interval, extra marks dropped" behaviour.
//!
//! # Sources, and where they leave a choice
//!
//! - The paper, §3.1, for equations 1–4, the three stages, K = 55 µs, N = 50 µs, F = 5. The
//!   stage conditions `max(T, BC) < F` / `min(T, BC) > F` are its Figure 7 as quoted by several
//!   implementations (Marvell's DPDK `dcqcn_rp_rate_increase`, Pensando's P4 `dcqcn` program, an
//!   OMNeT++ model); the paper's text was not at hand here.
//! - The defaults, and how firmly each is the paper's (checked for this project against texts that
//!   quote the paper; the PDF itself was not at hand):
//!
//!   | field | default | source |
//!   |---|---|---|
//!   | `cnp_interval_ns` (N) | 50 µs | the paper's text, §3.1: "we use N = 50 µs in our deployment" |
//!   | `g` | 1/256 | the paper's parameter set for its 40 Gbit/s testbed (§5) |
//!   | `alpha_update_period_ns` (K) | 55 µs | as g; the fluid model's interval of eq. 2 |
//!   | `rate_increase_period_ns` (T) | 55 µs | as g |
//!   | `byte_counter_bytes` (B) | 10 MB, as 10^7 bytes | as g |
//!   | `fast_recovery_steps` (F) | 5 | as g: "F = 5 successive iterations" |
//!   | `additive_increase_bps` (R_AI) | 40 Mbit/s | as g, at 40 Gbit/s |
//!   | `hyper_increase_bps` (R_HAI) | 100 Mbit/s | not found in the paper's text: ns-3 HPCC's default |
//!   | `min_rate_bps` | 100 Mbit/s | not the paper's: ns3-rdma's `MinRate` |
//!   | `initial_alpha` | 1 | the authors' fluid model starts α at 1 |
//!
//!   Every value was chosen for 40 Gbit/s links; the paper gives no rule for other rates. The
//!   switch side of its set (RED with Kmin = 5 KB, Kmax = 200 KB, Pmax = 1%) is not a default
//!   here: the topology's tiers set their own thresholds, and `fabric experiment incast` runs
//!   these defaults at 400 Gbit/s as settings carried over, untuned.
//! - The paper's first author's ns-3 simulator (`bobzhuyb/ns3-rdma`,
//!   `src/point-to-point/model/qbb-net-device.cc`) for what the paper leaves open: T and BC
//!   restart at a CNP, the α timer restarts at a CNP, the cut is floored at a minimum rate
//!   (its `MinRate` default, 100 Mbit/s, is ours), the hyper step grows as `i · R_HAI`. Where we
//!   differ from it: it updates α *before* cutting (we follow eq. 1's order), it starts α at 0.5
//!   (we use 1, as `initial_alpha`), it halves the timer in the hyper stage (QCN's habit; not in
//!   the paper, not done here), and it drops the byte counter's overshoot (we carry it).
//! - Parameter names: Linux `drivers/infiniband/hw/mlx5/cong.c`, the mlx5 debugfs `cc_params`
//!   (`rp_time_reset` → firmware field `rpg_time_reset`, and so on). Each field below names its
//!   counterpart. Not modelled: `rpg_min_dec_fac` (with α ≤ 1 a cut already keeps at least half
//!   the rate), `rate_reduce_monitor_period` (every CNP cuts; the NP spaces them),
//!   `rate_to_set_on_first_cnp`, `clamp_tgt_rate(_after_time_inc)` (we always set `R_T = R_C`,
//!   eq. 1), `rpg_gd`, `rpg_max_rate`. The firmware keeps g and α in fixed point; we use `f64`.
//!
//! # Time scale
//!
//! The fabric runs slowed down by a factor S: [`DcqcnParams::scaled`] divides the rates by S and
//! multiplies the periods by S, and the caller passes the scaled line rate. The byte counter is
//! not scaled: at 1/S of the rate, B bytes take S times as long, as the timers do. The trajectory
//! is then the unscaled one with rates divided by S at times multiplied by S.
use serde::{Deserialize, Serialize};

/// DCQCN's knobs. Times in nanoseconds, rates in bit/s. `Default` is the paper's set; a
/// configuration file may name only the fields it changes (`#[serde(default)]`). "Paper" values of
/// g, the rate-increase timer, B, R_AI and R_HAI are the commonly cited ones (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DcqcnParams {
    /// g, the gain of α's moving average. Paper: 1/256. mlx5: `dce_tcp_g` (fixed point there).
    pub g: f64,
    /// α before the first CNP. Paper: 1. mlx5: `initial_alpha_value`.
    pub initial_alpha: f64,
    /// K: α decays once per period without a CNP. Paper: 55 µs. mlx5: `dce_tcp_rtt`.
    pub alpha_update_period_ns: u64,
    /// The rate-increase timer. Paper: 55 µs. mlx5: `rpg_time_reset`.
    pub rate_increase_period_ns: u64,
    /// B: a rate-increase event every B bytes sent; 0 turns the byte counter off. Paper: 10 MB
    /// (taken as 10^7 bytes). mlx5: `rpg_byte_reset`.
    pub byte_counter_bytes: u64,
    /// F: fast-recovery steps per counter. Paper: 5. mlx5: `rpg_threshold`.
    pub fast_recovery_steps: u32,
    /// R_AI. Paper: 40 Mbit/s. mlx5: `rpg_ai_rate` (in Mbit/s there).
    pub additive_increase_bps: u64,
    /// R_HAI. Paper: 100 Mbit/s. mlx5: `rpg_hai_rate`.
    pub hyper_increase_bps: u64,
    /// The floor of a cut (capped at the line rate). ns3-rdma's `MinRate`: 100 Mbit/s. mlx5:
    /// `rpg_min_rate`.
    pub min_rate_bps: u64,
    /// N: the notification point sends at most one CNP per QP per interval; 0 answers every CE
    /// packet. Paper: 50 µs. mlx5: `np_min_time_between_cnps` (per port there).
    pub cnp_interval_ns: u64,
}

impl Default for DcqcnParams {
    fn default() -> Self {
        DcqcnParams {
            g: 1.0 / 256.0,
            initial_alpha: 1.0,
            alpha_update_period_ns: 55_000,
            rate_increase_period_ns: 55_000,
            byte_counter_bytes: 10_000_000,
            fast_recovery_steps: 5,
            additive_increase_bps: 40_000_000,
            hyper_increase_bps: 100_000_000,
            min_rate_bps: 100_000_000,
            cnp_interval_ns: 50_000,
        }
    }
}

/// A [`DcqcnParams`] that cannot run: what is wrong with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid DCQCN parameters: {0}")]
pub struct InvalidParams(pub &'static str);

impl DcqcnParams {
    /// The same parameters in time slowed down by `time_scale` (S): rates divided by S (rounded to
    /// the nearest bit/s; the minimum rate at least 1), periods multiplied by S (saturating). g,
    /// α, F and the byte counter are unchanged. `scaled(1)` is the identity.
    ///
    /// # Panics
    /// If `time_scale` is 0.
    pub fn scaled(self, time_scale: u64) -> Self {
        assert!(time_scale > 0, "DCQCN time scale must be at least 1");
        let s = u128::from(time_scale);
        let rate = |bps: u64| ((u128::from(bps) + s / 2) / s) as u64;
        let time = |ns: u64| ns.saturating_mul(time_scale);
        DcqcnParams {
            alpha_update_period_ns: time(self.alpha_update_period_ns),
            rate_increase_period_ns: time(self.rate_increase_period_ns),
            cnp_interval_ns: time(self.cnp_interval_ns),
            additive_increase_bps: rate(self.additive_increase_bps),
            hyper_increase_bps: rate(self.hyper_increase_bps),
            min_rate_bps: rate(self.min_rate_bps).max(1),
            ..self
        }
    }

    /// Checks what the state machines rely on: g and the initial α in [0, 1], both periods and the
    /// minimum rate above 0.
    pub fn validate(&self) -> Result<(), InvalidParams> {
        if !(0.0..=1.0).contains(&self.g) {
            return Err(InvalidParams("g must be in [0, 1]"));
        }
        if !(0.0..=1.0).contains(&self.initial_alpha) {
            return Err(InvalidParams("initial_alpha must be in [0, 1]"));
        }
        if self.alpha_update_period_ns == 0 {
            return Err(InvalidParams("alpha_update_period_ns must be above 0"));
        }
        if self.rate_increase_period_ns == 0 {
            return Err(InvalidParams("rate_increase_period_ns must be above 0"));
        }
        if self.min_rate_bps == 0 {
            return Err(InvalidParams("min_rate_bps must be above 0"));
        }
        Ok(())
    }
}

/// What a rate-increase event does, decided by the counts before it (paper, Figure 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// `R_C = (R_T + R_C)/2`.
    FastRecovery,
    /// `R_T += R_AI`, then as fast recovery.
    AdditiveIncrease,
    /// `R_T += i·R_HAI` with `i = min(T, BC) − F`, then as fast recovery.
    HyperIncrease,
}

impl Stage {
    /// The stage of an event that follows `timer_events` timer and `byte_events` byte-counter
    /// events since the last CNP, with F = `fast_recovery_steps`.
    pub fn of(timer_events: u64, byte_events: u64, fast_recovery_steps: u32) -> Stage {
        let f = u64::from(fast_recovery_steps);
        if timer_events.max(byte_events) < f {
            Stage::FastRecovery
        } else if timer_events.min(byte_events) > f {
            Stage::HyperIncrease
        } else {
            Stage::AdditiveIncrease
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trigger {
    Timer,
    Bytes,
}

/// The sender side of DCQCN for one QP: its rate, target rate and α (see the module docs).
#[derive(Clone, Debug)]
pub struct ReactionPoint {
    params: DcqcnParams,
    line_rate_bps: u64,
    /// R_C, bit/s.
    current: f64,
    /// R_T, bit/s.
    target: f64,
    alpha: f64,
    /// T: timer events since the last CNP.
    timer_events: u64,
    /// BC: byte-counter events since the last CNP.
    byte_events: u64,
    /// Bytes sent toward the next byte-counter event.
    bytes_counted: u64,
    /// When α next decays; `None` before the first CNP.
    next_alpha_ns: Option<u64>,
    /// When the rate-increase timer next fires; `None` while the rate is not limited.
    next_increase_ns: Option<u64>,
    /// The latest time seen: a clock going backwards is read as standing still.
    now_ns: u64,
    cnps_received: u64,
}

/// Whole bit/s (saturating; rates are never negative).
fn whole_bps(rate: f64) -> u64 {
    rate.round() as u64
}

impl ReactionPoint {
    /// A reaction point sending at `line_rate_bps` (already time-scaled), not yet limited.
    ///
    /// # Panics
    /// If `params` fail [`DcqcnParams::validate`] or the line rate is 0.
    pub fn new(line_rate_bps: u64, params: DcqcnParams, now_ns: u64) -> Self {
        if let Err(e) = params.validate() {
            panic!("{e}");
        }
        assert!(line_rate_bps > 0, "DCQCN needs a line rate above 0");
        let line = line_rate_bps as f64;
        ReactionPoint {
            params,
            line_rate_bps,
            current: line,
            target: line,
            alpha: params.initial_alpha,
            timer_events: 0,
            byte_events: 0,
            bytes_counted: 0,
            next_alpha_ns: None,
            next_increase_ns: None,
            now_ns,
            cnps_received: 0,
        }
    }

    pub fn params(&self) -> &DcqcnParams {
        &self.params
    }

    pub fn line_rate_bps(&self) -> u64 {
        self.line_rate_bps
    }

    /// R_C in whole bit/s: the rate to pace at.
    pub fn rate_bps(&self) -> u64 {
        whole_bps(self.current)
    }

    /// R_T in whole bit/s.
    pub fn target_rate_bps(&self) -> u64 {
        whole_bps(self.target)
    }

    /// α as of the latest call that took a time (α decays lazily, when time is passed in).
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// T: timer events since the last CNP.
    pub fn timer_events(&self) -> u64 {
        self.timer_events
    }

    /// BC: byte-counter events since the last CNP.
    pub fn byte_events(&self) -> u64 {
        self.byte_events
    }

    pub fn cnps_received(&self) -> u64 {
        self.cnps_received
    }

    /// Whether the rate is limited: from a CNP until the rate is back at line rate.
    pub fn is_limited(&self) -> bool {
        self.next_increase_ns.is_some()
    }

    /// The stage the next rate-increase event will take; `None` while not limited.
    pub fn stage(&self) -> Option<Stage> {
        self.is_limited().then(|| Stage::of(self.timer_events, self.byte_events, self.params.fast_recovery_steps))
    }

    /// When to call [`Self::poll`] next without new input: the rate-increase timer; `None` while
    /// not limited. (α needs no wake-up: it catches up whenever a time is passed in.)
    pub fn poll_timeout(&self) -> Option<u64> {
        self.next_increase_ns
    }

    /// A CNP arrived for this QP at `now_ns`. Timers due at or before `now_ns` run first. Returns
    /// the new rate if it changed.
    pub fn on_cnp(&mut self, now_ns: u64) -> Option<u64> {
        let before = self.rate_bps();
        let now = self.advance(now_ns);
        self.cnps_received += 1;
        let min_rate = self.params.min_rate_bps.min(self.line_rate_bps) as f64;
        let g = self.params.g;
        self.target = self.current;
        self.current = (self.current * (1.0 - self.alpha / 2.0)).max(min_rate);
        self.alpha = ((1.0 - g) * self.alpha + g).min(1.0);
        self.timer_events = 0;
        self.byte_events = 0;
        self.bytes_counted = 0;
        self.next_alpha_ns = now.checked_add(self.params.alpha_update_period_ns);
        self.next_increase_ns = now.checked_add(self.params.rate_increase_period_ns);
        self.changed_from(before)
    }

    /// `bytes` left on this QP at `now_ns` (the caller decides what a byte is, e.g. the bytes
    /// the pacer is charged). Timers due by `now_ns` run first; the bytes count toward the byte
    /// counter only while the rate is limited. Returns the new rate if it changed.
    pub fn on_bytes_sent(&mut self, bytes: u64, now_ns: u64) -> Option<u64> {
        let before = self.rate_bps();
        self.advance(now_ns);
        let per_event = self.params.byte_counter_bytes;
        if per_event > 0 && self.is_limited() {
            self.bytes_counted = self.bytes_counted.saturating_add(bytes);
            while self.is_limited() && self.bytes_counted >= per_event {
                self.bytes_counted -= per_event;
                self.increase(Trigger::Bytes);
            }
        }
        self.changed_from(before)
    }

    /// Runs the timers due at or before `now_ns` (α decay, rate increases). Returns the new rate
    /// if it changed.
    pub fn poll(&mut self, now_ns: u64) -> Option<u64> {
        let before = self.rate_bps();
        self.advance(now_ns);
        self.changed_from(before)
    }

    fn changed_from(&self, before: u64) -> Option<u64> {
        let now = self.rate_bps();
        (now != before).then_some(now)
    }

    /// Moves the clock to `now_ns` (never back) and runs the timers due by then.
    fn advance(&mut self, now_ns: u64) -> u64 {
        self.now_ns = self.now_ns.max(now_ns);
        let now = self.now_ns;
        if let Some(at) = self.next_alpha_ns
            && at <= now
        {
            let period = self.params.alpha_update_period_ns;
            let periods = (now - at) / period + 1;
            let decay = 1.0 - self.params.g;
            self.alpha *= decay.powi(i32::try_from(periods).unwrap_or(i32::MAX));
            self.next_alpha_ns = periods.checked_mul(period).and_then(|d| at.checked_add(d));
        }
        while let Some(at) = self.next_increase_ns
            && at <= now
        {
            let period = self.params.rate_increase_period_ns;
            self.next_increase_ns = at.checked_add(period);
            let moved = self.increase(Trigger::Timer);
            // With no increments left to add, an event that moved nothing is a fixed point: skip
            // the rest of the due events in one step (a long idle gap would otherwise loop).
            if !moved
                && self.timer_future_is_static()
                && let Some(next) = self.next_increase_ns
                && next <= now
            {
                let skipped = (now - next) / period + 1;
                self.timer_events = self.timer_events.saturating_add(skipped);
                self.next_increase_ns = skipped.checked_mul(period).and_then(|d| next.checked_add(d));
            }
        }
        now
    }

    /// Whether timer events alone can no longer add to R_T.
    fn timer_future_is_static(&self) -> bool {
        self.params.additive_increase_bps == 0
            && (self.params.hyper_increase_bps == 0 || self.byte_events <= u64::from(self.params.fast_recovery_steps))
    }

    /// One rate-increase event; whether it moved R_C or R_T.
    fn increase(&mut self, trigger: Trigger) -> bool {
        let (current, target) = (self.current, self.target);
        let line = self.line_rate_bps as f64;
        let f = self.params.fast_recovery_steps;
        match Stage::of(self.timer_events, self.byte_events, f) {
            Stage::FastRecovery => {}
            Stage::AdditiveIncrease => self.target += self.params.additive_increase_bps as f64,
            Stage::HyperIncrease => {
                let i = self.timer_events.min(self.byte_events) - u64::from(f);
                self.target += i as f64 * self.params.hyper_increase_bps as f64;
            }
        }
        self.target = self.target.min(line);
        self.current = ((self.target + self.current) / 2.0).min(line);
        match trigger {
            Trigger::Timer => self.timer_events = self.timer_events.saturating_add(1),
            Trigger::Bytes => self.byte_events = self.byte_events.saturating_add(1),
        }
        if self.rate_bps() >= self.line_rate_bps {
            // Recovered: release the limiter.
            self.current = line;
            self.target = line;
            self.next_increase_ns = None;
            self.bytes_counted = 0;
        }
        self.current != current || self.target != target
    }
}

/// The receiver side of DCQCN for one QP: which CE-marked packets earn a CNP.
#[derive(Clone, Debug)]
pub struct NotificationPoint {
    interval_ns: u64,
    last_cnp_ns: Option<u64>,
    /// A CE packet arrived since the last CNP and was not answered.
    owed: bool,
    ce_packets: u64,
    cnps_sent: u64,
}

impl NotificationPoint {
    /// A notification point spacing CNPs by `params.cnp_interval_ns`.
    pub fn new(params: &DcqcnParams) -> Self {
        NotificationPoint {
            interval_ns: params.cnp_interval_ns,
            last_cnp_ns: None,
            owed: false,
            ce_packets: 0,
            cnps_sent: 0,
        }
    }

    /// A CE-marked packet for this QP arrived at `now_ns`: whether to send a CNP now. `true` if
    /// no CNP went out in the last interval (a CNP exactly one interval after the previous one is
    /// allowed); otherwise the CNP is owed until [`Self::poll_timeout`].
    pub fn on_ce_packet(&mut self, now_ns: u64) -> bool {
        self.ce_packets += 1;
        if self.may_send(now_ns) {
            self.send(now_ns);
            true
        } else {
            self.owed = true;
            false
        }
    }

    /// Whether to send the owed CNP now (a CE packet went unanswered and the interval is over).
    pub fn poll(&mut self, now_ns: u64) -> bool {
        if self.owed && self.may_send(now_ns) {
            self.send(now_ns);
            true
        } else {
            false
        }
    }

    /// When an owed CNP may go; `None` if none is owed.
    pub fn poll_timeout(&self) -> Option<u64> {
        if !self.owed {
            return None;
        }
        self.last_cnp_ns.map(|t| t.saturating_add(self.interval_ns))
    }

    pub fn ce_packets(&self) -> u64 {
        self.ce_packets
    }

    pub fn cnps_sent(&self) -> u64 {
        self.cnps_sent
    }

    fn may_send(&self, now_ns: u64) -> bool {
        self.last_cnp_ns.is_none_or(|t| now_ns >= t.saturating_add(self.interval_ns))
    }

    fn send(&mut self, now_ns: u64) {
        self.last_cnp_ns = Some(now_ns);
        self.owed = false;
        self.cnps_sent += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;
    const LINE: u64 = 100_000_000_000;

    /// The defaults with the rate-increase timer pushed out of the way (1000 s).
    fn no_timer_increases() -> DcqcnParams {
        DcqcnParams { rate_increase_period_ns: 1_000_000_000_000, ..DcqcnParams::default() }
    }

    fn close(actual: f64, expected: f64, relative: f64) -> bool {
        ((actual - expected) / expected).abs() < relative
    }

    /// Two CNPs 1 µs apart from line rate: R_C = 25 Gbit/s, R_T = 50 Gbit/s, α = 1, counters and
    /// the rate-increase timer restarted at 1 µs. The target is below line rate, so additive
    /// increase is visible.
    fn after_two_cnps(params: DcqcnParams) -> ReactionPoint {
        let mut rp = ReactionPoint::new(LINE, params, 0);
        assert_eq!(rp.on_cnp(0), Some(50_000_000_000));
        assert_eq!(rp.on_cnp(US), Some(25_000_000_000));
        assert_eq!(rp.target_rate_bps(), 50_000_000_000);
        assert_eq!(rp.alpha(), 1.0);
        rp
    }

    /// The paper's increase equations applied to a stage the test names (not one the code picks).
    struct Model {
        rc: f64,
        rt: f64,
        line: f64,
        ai: f64,
        hai: f64,
    }

    impl Model {
        fn step(&mut self, stage: Stage, i: u64) {
            match stage {
                Stage::FastRecovery => {}
                Stage::AdditiveIncrease => self.rt += self.ai,
                Stage::HyperIncrease => self.rt += i as f64 * self.hai,
            }
            self.rt = self.rt.min(self.line);
            self.rc = ((self.rt + self.rc) / 2.0).min(self.line);
        }
    }

    /// The defaults as the sources in the module docs write them, in their units, converted here
    /// independently of the code's literals: a wrong unit (µs for ns, MiB for MB, Mbit for bit)
    /// or a typo in `Default` fails.
    #[test]
    fn defaults_are_the_cited_values_in_the_cited_units() {
        const US: u64 = 1_000;
        const MBIT: u64 = 1_000_000;
        let p = DcqcnParams::default();
        let cited: [(&str, f64, f64); 10] = [
            ("N = 50 us", p.cnp_interval_ns as f64, (50 * US) as f64),
            ("g = 1/256", p.g, 1.0 / 256.0),
            ("K = 55 us", p.alpha_update_period_ns as f64, (55 * US) as f64),
            ("T = 55 us", p.rate_increase_period_ns as f64, (55 * US) as f64),
            ("B = 10 MB", p.byte_counter_bytes as f64, 10e6),
            ("F = 5", f64::from(p.fast_recovery_steps), 5.0),
            ("R_AI = 40 Mbps", p.additive_increase_bps as f64, (40 * MBIT) as f64),
            ("R_HAI = 100 Mbps (ns-3 HPCC)", p.hyper_increase_bps as f64, (100 * MBIT) as f64),
            ("MinRate = 100 Mbps (ns3-rdma)", p.min_rate_bps as f64, (100 * MBIT) as f64),
            ("alpha starts at 1", p.initial_alpha, 1.0),
        ];
        for (what, ours, cited) in cited {
            assert_eq!(ours, cited, "{what}");
        }
        assert_eq!(p.validate(), Ok(()));
    }

    #[test]
    fn params_read_partially_from_toml_and_round_trip_through_json() {
        let p: DcqcnParams = toml::from_str("g = 0.0625\nfast_recovery_steps = 3\n").unwrap();
        assert_eq!(p, DcqcnParams { g: 0.0625, fast_recovery_steps: 3, ..DcqcnParams::default() });
        assert!(toml::from_str::<DcqcnParams>("rpg_time_reset = 300").is_err(), "unknown field");
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<DcqcnParams>(&json).unwrap(), p);
    }

    #[test]
    fn invalid_params_are_named() {
        let d = DcqcnParams::default();
        assert!(DcqcnParams { g: 1.5, ..d }.validate().is_err());
        assert!(DcqcnParams { g: f64::NAN, ..d }.validate().is_err());
        assert!(DcqcnParams { initial_alpha: -0.1, ..d }.validate().is_err());
        assert!(DcqcnParams { alpha_update_period_ns: 0, ..d }.validate().is_err());
        assert_eq!(
            DcqcnParams { rate_increase_period_ns: 0, ..d }.validate(),
            Err(InvalidParams("rate_increase_period_ns must be above 0"))
        );
        assert!(DcqcnParams { min_rate_bps: 0, ..d }.validate().is_err());
        assert_eq!(DcqcnParams { byte_counter_bytes: 0, cnp_interval_ns: 0, ..d }.validate(), Ok(()));
    }

    #[test]
    #[should_panic(expected = "g must be in [0, 1]")]
    fn a_reaction_point_refuses_invalid_params() {
        ReactionPoint::new(LINE, DcqcnParams { g: 2.0, ..DcqcnParams::default() }, 0);
    }

    #[test]
    fn first_cnp_halves_the_line_rate_and_alpha_stays_one() {
        let mut rp = ReactionPoint::new(LINE, DcqcnParams::default(), 0);
        assert_eq!(rp.rate_bps(), LINE);
        assert!(!rp.is_limited());
        assert_eq!((rp.poll_timeout(), rp.stage()), (None, None));
        assert_eq!(rp.poll(1_000_000_000), None, "no CNP yet: nothing runs");
        assert_eq!(rp.alpha(), 1.0);

        assert_eq!(rp.on_cnp(1_000_000_000), Some(50_000_000_000), "100 G × (1 − 1/2)");
        assert_eq!(rp.target_rate_bps(), LINE);
        assert_eq!(rp.alpha(), 1.0, "(1 − g)·1 + g");
        assert!(rp.is_limited());
        assert_eq!(rp.poll_timeout(), Some(1_000_055_000));
        assert_eq!(rp.stage(), Some(Stage::FastRecovery));
        assert_eq!(rp.cnps_received(), 1);
    }

    #[test]
    fn alpha_decays_by_one_minus_g_each_period_without_a_cnp() {
        let mut rp = ReactionPoint::new(LINE, no_timer_increases(), 0);
        rp.on_cnp(0);
        rp.poll(55 * US - 1);
        assert_eq!(rp.alpha(), 1.0, "not before a whole period");
        for k in [1u64, 2, 3, 10, 100, 1000] {
            assert_eq!(rp.poll(k * 55 * US), None, "α alone does not move the rate");
            let expected = (255.0f64 / 256.0).powi(k as i32);
            assert!(close(rp.alpha(), expected, 1e-9), "after {k} periods: {} vs {expected}", rp.alpha());
        }
        rp.poll(1000 * 55 * US + 54_999);
        assert!(close(rp.alpha(), (255.0f64 / 256.0).powi(1000), 1e-9), "mid-period: no extra decay");
        assert!(close(rp.alpha(), 0.019_962_5, 1e-5), "(255/256)^1000 ≈ 0.02");
    }

    #[test]
    fn a_cnp_restarts_the_alpha_timer() {
        let g = 1.0 / 256.0;
        let mut rp = ReactionPoint::new(LINE, no_timer_increases(), 0);
        rp.on_cnp(0);
        rp.poll(110 * US);
        let a2 = (1.0 - g) * (1.0 - g);
        assert!(close(rp.alpha(), a2, 1e-12));
        rp.on_cnp(130 * US);
        let a = (1.0 - g) * a2 + g;
        assert!(close(rp.alpha(), a, 1e-12));
        rp.poll(185 * US - 1);
        assert!(close(rp.alpha(), a, 1e-12), "next decay 55 µs after the CNP, not at 165 µs");
        rp.poll(185 * US);
        assert!(close(rp.alpha(), (1.0 - g) * a, 1e-12));
    }

    #[test]
    fn a_cut_uses_the_decayed_alpha() {
        let mut rp = ReactionPoint::new(LINE, no_timer_increases(), 0);
        rp.on_cnp(0);
        rp.poll(550 * US);
        let a10 = (255.0f64 / 256.0).powi(10);
        let cut = rp.on_cnp(550 * US).unwrap();
        let expected = 50e9 * (1.0 - a10 / 2.0); // ≈ 25.96 Gbit/s
        assert!((cut as f64 - expected).abs() <= 0.5, "{cut} vs {expected}");
        assert!((25_950_000_000..25_970_000_000).contains(&cut));
        assert_eq!(rp.target_rate_bps(), 50_000_000_000);
        assert!(close(rp.alpha(), (1.0 - 1.0 / 256.0) * a10 + 1.0 / 256.0, 1e-12));
    }

    #[test]
    fn timer_events_fast_recover_f_times_then_increase_additively() {
        let mut rp = after_two_cnps(DcqcnParams::default());
        assert_eq!(rp.poll_timeout(), Some(56 * US), "55 µs after the second CNP");
        assert_eq!(rp.poll(56 * US - 1), None);
        // Fast recovery: half the gap to R_T = 50 G at each event, five times.
        let fast = [37_500_000_000, 43_750_000_000, 46_875_000_000, 48_437_500_000, 49_218_750_000];
        for (n, rate) in fast.into_iter().enumerate() {
            assert_eq!(rp.stage(), Some(Stage::FastRecovery));
            assert_eq!(rp.poll(US + (n as u64 + 1) * 55 * US), Some(rate), "event {}", n + 1);
            assert_eq!(rp.target_rate_bps(), 50_000_000_000);
        }
        assert_eq!(rp.timer_events(), 5);
        // Additive increase: R_T += 40 M, then R_C halves the gap to it.
        assert_eq!(rp.stage(), Some(Stage::AdditiveIncrease));
        assert_eq!(rp.poll(331 * US), Some(49_629_375_000));
        assert_eq!(rp.target_rate_bps(), 50_040_000_000);
        assert_eq!(rp.poll(386 * US), Some(49_854_687_500));
        assert_eq!(rp.target_rate_bps(), 50_080_000_000);
        // Timer events alone never reach hyper increase (BC stays 0): 20 more additive steps.
        rp.poll(386 * US + 20 * 55 * US);
        assert_eq!(rp.stage(), Some(Stage::AdditiveIncrease));
        assert_eq!(rp.timer_events(), 27);
        assert_eq!(rp.target_rate_bps(), 50_000_000_000 + 22 * 40_000_000);
    }

    #[test]
    fn byte_counter_events_count_like_timer_events() {
        let params = DcqcnParams { byte_counter_bytes: 1_000, ..no_timer_increases() };
        let mut rp = ReactionPoint::new(LINE, params, 0);
        assert_eq!(rp.on_bytes_sent(5_000, 0), None, "before any CNP the byte counter is off");
        assert_eq!(rp.byte_events(), 0);
        rp.on_cnp(0);
        rp.on_cnp(US);
        assert_eq!(rp.on_bytes_sent(999, 2 * US), None);
        assert_eq!(rp.on_bytes_sent(1, 2 * US), Some(37_500_000_000), "exactly B bytes");
        assert_eq!(rp.on_bytes_sent(1_500, 2 * US), Some(43_750_000_000));
        assert_eq!(rp.on_bytes_sent(500, 2 * US), Some(46_875_000_000), "the overshoot counts");
        assert_eq!(rp.on_bytes_sent(2_000, 2 * US), Some(49_218_750_000), "two events at once");
        assert_eq!((rp.byte_events(), rp.timer_events()), (5, 0));
        assert_eq!(rp.stage(), Some(Stage::AdditiveIncrease));
        assert_eq!(rp.on_bytes_sent(1_000, 2 * US), Some(49_629_375_000));
        assert_eq!(rp.target_rate_bps(), 50_040_000_000);
        // A CNP resets the byte counter: 999 bytes before it and 1 after make no event.
        rp.on_bytes_sent(999, 3 * US);
        rp.on_cnp(4 * US);
        assert_eq!(rp.byte_events(), 0);
        let cut = rp.rate_bps();
        assert_eq!(rp.on_bytes_sent(1, 4 * US), None);
        assert_eq!(rp.rate_bps(), cut);
    }

    #[test]
    fn hyper_increase_once_both_counters_are_past_f() {
        let params = DcqcnParams { byte_counter_bytes: 1_000, ..DcqcnParams::default() };
        let mut rp = after_two_cnps(params);
        let mut model = Model { rc: 25e9, rt: 50e9, line: LINE as f64, ai: 40e6, hai: 100e6 };
        use Stage::{AdditiveIncrease as Ai, FastRecovery as Fr, HyperIncrease as Hi};

        // 6 byte-counter events at 2 µs: BC = 0..4 before them is fast recovery, BC = 5 additive.
        let changed = rp.on_bytes_sent(6_000, 2 * US);
        for stage in [Fr, Fr, Fr, Fr, Fr, Ai] {
            model.step(stage, 0);
        }
        assert_eq!(changed, Some(model.rc.round() as u64));
        assert_eq!((rp.timer_events(), rp.byte_events()), (0, 6));

        // 6 timer events (56 … 331 µs): T = 0..5, BC = 6: max ≥ F, min ≤ F: additive each time.
        for n in 1..=6u64 {
            assert_eq!(rp.stage(), Some(Ai), "timer event {n}");
            rp.poll(US + n * 55 * US);
            model.step(Ai, 0);
            assert_eq!(rp.rate_bps(), model.rc.round() as u64);
            assert_eq!(rp.target_rate_bps(), model.rt.round() as u64);
        }

        // Now T = BC = 6 > F: hyper increase, i = min(T, BC) − F.
        let script: [(&str, u64, u64); 4] =
            [("bytes", 340, 1), ("timer", 386, 1), ("bytes", 390, 2), ("timer", 441, 2)];
        for (kind, at_us, i) in script {
            assert_eq!(rp.stage(), Some(Hi), "{kind} at {at_us} µs");
            if kind == "bytes" {
                rp.on_bytes_sent(1_000, at_us * US);
            } else {
                rp.poll(at_us * US);
            }
            model.step(Hi, i);
            assert_eq!(rp.rate_bps(), model.rc.round() as u64, "{kind} at {at_us} µs");
        }
        // R_T = 50 G + 7 additive steps + (1 + 1 + 2 + 2) hyper steps.
        assert_eq!(rp.target_rate_bps(), 50_000_000_000 + 7 * 40_000_000 + 6 * 100_000_000);
        assert_eq!((rp.timer_events(), rp.byte_events()), (8, 8));
    }

    #[test]
    fn a_second_cnp_mid_recovery_cuts_from_the_current_rate() {
        let g = 1.0 / 256.0;
        let mut rp = ReactionPoint::new(LINE, DcqcnParams::default(), 0);
        rp.on_cnp(0);
        assert_eq!(rp.poll(165 * US), Some(93_750_000_000), "three fast-recovery steps");
        let a3 = (1.0f64 - g).powi(3);
        let cut = rp.on_cnp(200 * US).unwrap();
        let expected = 93.75e9 * (1.0 - a3 / 2.0);
        assert!((cut as f64 - expected).abs() <= 0.5, "{cut} vs {expected}");
        assert_eq!(rp.target_rate_bps(), 93_750_000_000, "R_T = R_C at the CNP");
        assert!(close(rp.alpha(), (1.0 - g) * a3 + g, 1e-12));
        assert_eq!((rp.timer_events(), rp.stage()), (0, Some(Stage::FastRecovery)));
        assert_eq!(rp.poll_timeout(), Some(255 * US), "the timer restarted at the CNP");
        assert_eq!(rp.poll(254 * US), None);
        let next = rp.poll(255 * US).unwrap();
        assert!((next as f64 - (93.75e9 + cut as f64) / 2.0).abs() <= 1.0);
    }

    #[test]
    fn the_rate_stops_at_line_rate_and_the_limiter_is_released() {
        let mut rp = ReactionPoint::new(LINE, DcqcnParams::default(), 0);
        rp.on_cnp(0);
        // 5 fast-recovery steps leave a 1.5625 G gap; additive steps cannot lift R_T over line
        // rate, so each halves the gap: after k of them 1.5625e9 / 2^k, under half a bit/s at k = 32.
        assert_eq!(rp.poll(5 * 55 * US), Some(98_437_500_000));
        rp.poll(36 * 55 * US);
        assert_eq!(rp.rate_bps(), LINE - 1, "k = 31: 0.73 bit/s short");
        assert_eq!(rp.target_rate_bps(), LINE, "R_T capped at line rate");
        assert!(rp.is_limited());
        assert_eq!(rp.poll(37 * 55 * US), Some(LINE));
        assert!(!rp.is_limited());
        assert_eq!((rp.poll_timeout(), rp.stage()), (None, None));
        assert_eq!(rp.on_bytes_sent(1 << 40, 38 * 55 * US), None);
        assert_eq!(rp.byte_events(), 0, "released: the byte counter is off");
        assert_eq!(rp.poll(2_100 * US), None);
        // α kept decaying (38 periods by 2100 µs); the next CNP cuts by less than half.
        let a = (255.0f64 / 256.0).powi(38);
        let cut = rp.on_cnp(2_100 * US).unwrap();
        assert!((cut as f64 - LINE as f64 * (1.0 - a / 2.0)).abs() <= 0.5, "{cut}");
        assert_eq!(cut / 1_000_000, 56_909, "100 G × (1 − 0.8618/2)");
        assert!(rp.is_limited());
    }

    #[test]
    fn the_rate_stops_at_the_minimum_rate() {
        let params = DcqcnParams { min_rate_bps: 10_000_000_000, ..DcqcnParams::default() };
        let mut rp = ReactionPoint::new(LINE, params, 0);
        assert_eq!(rp.on_cnp(0), Some(50_000_000_000));
        assert_eq!(rp.on_cnp(US), Some(25_000_000_000));
        assert_eq!(rp.on_cnp(2 * US), Some(12_500_000_000));
        assert_eq!(rp.on_cnp(3 * US), Some(10_000_000_000), "6.25 G floored at 10 G");
        assert_eq!(rp.on_cnp(4 * US), None, "already at the floor");
        assert_eq!(rp.target_rate_bps(), 10_000_000_000);
        // A line rate under the minimum: the minimum is capped at line rate.
        let mut slow = ReactionPoint::new(1_000_000_000, params, 0);
        assert_eq!(slow.on_cnp(0), None);
        assert_eq!(slow.rate_bps(), 1_000_000_000);
    }

    #[test]
    fn accessors_report_the_construction_values_and_the_cnps_counted() {
        let params = DcqcnParams { g: 1.0 / 16.0, min_rate_bps: 1_000_000, ..DcqcnParams::default() };
        let mut rp = ReactionPoint::new(25_000_000_000, params, 0);
        assert_eq!(rp.params(), &params);
        assert_eq!(rp.line_rate_bps(), 25_000_000_000);
        assert_eq!(rp.cnps_received(), 0);
        rp.on_cnp(0);
        rp.on_cnp(US);
        assert_eq!(rp.cnps_received(), 2);
    }

    #[test]
    fn a_zero_byte_counter_counts_no_bytes() {
        // B = 0 turns the byte counter off: sent bytes are no rate-increase event, however many.
        let params = DcqcnParams { byte_counter_bytes: 0, ..no_timer_increases() };
        let mut rp = ReactionPoint::new(LINE, params, 0);
        rp.on_cnp(0);
        assert_eq!(rp.on_bytes_sent(1_000_000_000, US), None);
        assert_eq!((rp.rate_bps(), rp.byte_events()), (50_000_000_000, 0));
        assert!(rp.is_limited());
    }

    /// Two CNPs from 100 G with the floor at 50 G: the first cuts to 50 G (R_T 100 G), the second
    /// sets R_T = R_C = 50 G and cannot cut below the floor. Fast recovery then has nothing to
    /// close (R_C = R_T): its events move nothing, but they still count towards F.
    fn pinned_at_a_50g_floor(params: DcqcnParams) -> ReactionPoint {
        let mut rp = ReactionPoint::new(LINE, DcqcnParams { min_rate_bps: 50_000_000_000, ..params }, 0);
        assert_eq!(rp.on_cnp(0), Some(50_000_000_000));
        assert_eq!(rp.on_cnp(US), None);
        assert_eq!((rp.rate_bps(), rp.target_rate_bps()), (50_000_000_000, 50_000_000_000));
        rp
    }

    #[test]
    fn fast_recovery_events_that_move_nothing_still_lead_to_additive_increase() {
        let mut rp = pinned_at_a_50g_floor(DcqcnParams::default());
        // Timer events at 56, 111, ..., 551 µs: T = 0..4 fast recovery (R_C = R_T = 50 G, no
        // change), T = 5..9 additive: R_T = 50.04, 50.08, 50.12, 50.16, 50.20 G and R_C halfway
        // each time: 50.02, 50.05, 50.085, 50.1225, 50.16125 G.
        assert_eq!(rp.poll(551 * US), Some(50_161_250_000));
        assert_eq!(rp.target_rate_bps(), 50_200_000_000);
        assert_eq!(rp.timer_events(), 10);
    }

    #[test]
    fn timer_events_that_move_nothing_still_lead_to_hyper_increase_after_byte_events() {
        // No additive step: only hyper increase can raise R_T, once T and BC are both past F = 5.
        let mut rp = pinned_at_a_50g_floor(DcqcnParams { additive_increase_bps: 0, ..DcqcnParams::default() });
        assert_eq!(rp.on_bytes_sent(60_000_000, US), None, "six byte events (B = 10 MB), none moves");
        assert_eq!(rp.byte_events(), 6);
        // Timer events at 56 + 55·k µs: k = 0..5 (T = 0..5) move nothing; at T = 6, i = 6 − 5 = 1:
        // R_T = 50 G + 100 M, R_C = (50.1 + 50)/2 G. All seven events in one poll: the first six
        // are fixed points, but they may not be skipped past the seventh.
        assert_eq!(rp.poll(386 * US), Some(50_050_000_000));
        assert_eq!(rp.target_rate_bps(), 50_100_000_000);
        assert_eq!(rp.timer_events(), 7);
    }

    #[test]
    fn an_idle_gap_before_any_byte_event_is_skipped_when_only_hyper_increase_could_add() {
        // R_AI = 0 and BC = 0 ≤ F: timer events alone can never reach hyper increase, so a long gap
        // is skipped in one step (a loop over its 1.8 · 10^10 events would not finish).
        let params = DcqcnParams { additive_increase_bps: 0, ..DcqcnParams::default() };
        let mut rp = after_two_cnps(params);
        let end = 1_000_000_000_000_000;
        rp.poll(end);
        assert_eq!(rp.timer_events(), (end - US) / (55 * US));
        assert_eq!(rp.rate_bps(), 50_000_000_000, "converged on R_T = 50 G");
    }

    #[test]
    fn scaled_time_gives_the_same_trajectory() {
        const S: u64 = 1000;
        let base = DcqcnParams { byte_counter_bytes: 1_000, ..DcqcnParams::default() };
        let scaled = base.scaled(S);
        assert_eq!(
            scaled,
            DcqcnParams {
                alpha_update_period_ns: 55_000_000,
                rate_increase_period_ns: 55_000_000,
                cnp_interval_ns: 50_000_000,
                additive_increase_bps: 40_000,
                hyper_increase_bps: 100_000,
                min_rate_bps: 100_000,
                ..base
            }
        );
        assert_eq!(base.scaled(1), base);

        #[derive(Clone, Copy)]
        enum Ev {
            Cnp,
            Bytes(u64),
            Poll,
        }
        let script = [
            (0, Ev::Cnp),
            (US, Ev::Cnp),
            (2 * US, Ev::Bytes(6_000)),
            (56 * US, Ev::Poll),
            (200 * US, Ev::Poll),
            (331 * US, Ev::Poll),
            (340 * US, Ev::Bytes(1_000)),
            (386 * US, Ev::Poll),
            (390 * US, Ev::Bytes(1_000)),
            (441 * US, Ev::Poll),
            (500 * US, Ev::Cnp),
            (555 * US, Ev::Poll),
            (5_000 * US, Ev::Poll),
            (5_001 * US, Ev::Bytes(3_500)),
        ];
        let mut fast = ReactionPoint::new(LINE, base, 0);
        let mut slow = ReactionPoint::new(LINE / S, scaled, 0);
        for (t, ev) in script {
            let (a, b) = match ev {
                Ev::Cnp => (fast.on_cnp(t), slow.on_cnp(t * S)),
                Ev::Bytes(n) => (fast.on_bytes_sent(n, t), slow.on_bytes_sent(n, t * S)),
                Ev::Poll => (fast.poll(t), slow.poll(t * S)),
            };
            assert_eq!(a.is_some(), b.is_some(), "at {t} ns");
            let (r, rs) = (fast.rate_bps() as f64, slow.rate_bps() as f64 * S as f64);
            assert!((r - rs).abs() <= S as f64, "at {t} ns: {r} vs {rs} (scaled × S)");
            let (tr, trs) = (fast.target_rate_bps() as f64, slow.target_rate_bps() as f64 * S as f64);
            assert!((tr - trs).abs() <= S as f64, "target at {t} ns: {tr} vs {trs}");
            assert!(close(slow.alpha(), fast.alpha(), 1e-12), "α at {t} ns");
            assert_eq!((fast.timer_events(), fast.byte_events()), (slow.timer_events(), slow.byte_events()));
            assert_eq!(fast.poll_timeout().map(|x| x * S), slow.poll_timeout());
            assert_eq!(fast.stage(), slow.stage());
        }
        assert!(fast.timer_events() > 80, "the script reached well into additive increase");
        assert!(fast.is_limited() && slow.is_limited(), "and was still limited");
    }

    #[test]
    fn an_idle_gap_with_nothing_to_add_is_skipped_not_looped() {
        let params = DcqcnParams { additive_increase_bps: 0, hyper_increase_bps: 0, ..DcqcnParams::default() };
        let mut rp = after_two_cnps(params);
        let end = 1_000_000_000_000_000; // 11.6 days: 1.8 · 10^10 timer events
        rp.poll(end);
        let events = (end - US) / (55 * US);
        assert_eq!(rp.timer_events(), events);
        assert_eq!(rp.poll_timeout(), Some(US + (events + 1) * 55 * US));
        assert_eq!(rp.rate_bps(), 50_000_000_000, "converged on R_T, never past it");
        assert!(rp.is_limited(), "R_T is below line rate, so still limited");
    }

    #[test]
    fn a_clock_going_backwards_stands_still() {
        let mut rp = ReactionPoint::new(LINE, DcqcnParams::default(), 0);
        rp.on_cnp(1_000 * US);
        assert_eq!(rp.poll(0), None);
        assert_eq!(rp.poll_timeout(), Some(1_055 * US));
        rp.on_cnp(500 * US);
        assert_eq!(rp.poll_timeout(), Some(1_055 * US), "read as a CNP at 1000 µs");
        assert_eq!(rp.rate_bps(), 25_000_000_000);
    }

    /// The times at which `np` answers CE packets at `times`.
    fn answered(np: &mut NotificationPoint, times: impl IntoIterator<Item = u64>) -> Vec<u64> {
        times.into_iter().filter(|&t| np.on_ce_packet(t)).collect()
    }

    #[test]
    fn ce_every_10_us_for_200_us_earns_4_cnps_at_50_us_spacing() {
        let mut np = NotificationPoint::new(&DcqcnParams::default());
        // 20 CE packets at 0, 10, …, 190 µs.
        let sent = answered(&mut np, (0..20).map(|k| k * 10 * US));
        assert_eq!(sent, [0, 50 * US, 100 * US, 150 * US]);
        assert_eq!((np.ce_packets(), np.cnps_sent()), (20, 4));
        // 160 … 190 µs went unanswered: one CNP is owed when the interval ends at 200 µs.
        assert_eq!(np.poll_timeout(), Some(200 * US));
        assert!(!np.poll(200 * US - 1));
        assert!(np.poll(200 * US));
        assert_eq!((np.cnps_sent(), np.poll_timeout()), (5, None));
        assert!(!np.poll(1_000 * US), "nothing owed");
    }

    #[test]
    fn ce_from_0_to_200_us_inclusive_earns_5_cnps() {
        let mut np = NotificationPoint::new(&DcqcnParams::default());
        let sent = answered(&mut np, (0..=20).map(|k| k * 10 * US));
        assert_eq!(sent, [0, 50 * US, 100 * US, 150 * US, 200 * US]);
        assert_eq!(np.poll_timeout(), None, "the packet at 200 µs was answered: nothing owed");
        // Shifted by 5 µs the same 20 packets earn 4: at 5, 55, 105, 155 µs.
        let mut np = NotificationPoint::new(&DcqcnParams::default());
        let sent = answered(&mut np, (0..20).map(|k| 5 * US + k * 10 * US));
        assert_eq!(sent, [5 * US, 55 * US, 105 * US, 155 * US]);
    }

    #[test]
    fn a_cnp_is_allowed_exactly_one_interval_after_the_last() {
        let mut np = NotificationPoint::new(&DcqcnParams::default());
        assert!(np.on_ce_packet(1_000));
        assert!(!np.on_ce_packet(1_000), "same instant");
        assert!(!np.on_ce_packet(50_999));
        assert!(np.on_ce_packet(51_000));
        assert!(!np.on_ce_packet(20_000), "a clock going backwards sends nothing");
        // A lone mark inside the interval: answered at the interval's end, not dropped.
        let mut np = NotificationPoint::new(&DcqcnParams::default());
        assert!(np.on_ce_packet(0));
        assert!(!np.on_ce_packet(10 * US));
        assert_eq!(np.poll_timeout(), Some(50 * US));
        assert!(np.poll(70 * US));
        assert!(!np.on_ce_packet(100 * US), "the owed CNP went at 70 µs: next from 120 µs");
        assert!(np.on_ce_packet(120 * US));
    }

    #[test]
    fn a_zero_interval_answers_every_ce_packet() {
        let params = DcqcnParams { cnp_interval_ns: 0, ..DcqcnParams::default() };
        let mut np = NotificationPoint::new(&params);
        assert_eq!(answered(&mut np, [0, 0, 1, 2]).len(), 4);
        assert_eq!(np.poll_timeout(), None);
    }

    #[test]
    fn scaled_cnp_interval_spaces_cnps_in_scaled_time() {
        let mut np = NotificationPoint::new(&DcqcnParams::default().scaled(1000));
        let sent = answered(&mut np, (0..20).map(|k| k * 10_000 * US));
        assert_eq!(sent, [0, 50_000 * US, 100_000 * US, 150_000 * US]);
    }
}
