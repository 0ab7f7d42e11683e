//! The `[congestion]` section of a topology: the time scale, and the buffers, ECN and PFC
//! settings of each switch tier, in the units of a real network (bytes, real microseconds).
//! [`Congestion::qos_config`] turns them into what a switch's XDP program reads.
use fabric_common::{
    qos::{BufferMode, QosConfig},
    queue::RedParams,
};
use serde::{Deserialize, Serialize};

/// A dynamic-threshold alpha as a switch holds it (`QosConfig::alpha_x256`): in 256ths, rounded.
fn alpha_x256(alpha: f64) -> u32 {
    (alpha * 256.0).round() as u32
}

/// Congestion model settings shared by every switch, plus one [`SwitchQos`] per tier.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Congestion {
    /// Model queues, ECN and PFC at all (false: switches only forward).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Priority classes (0..=7, class = DSCP >> 3) that are lossless: paused, never dropped.
    #[serde(default = "default_lossless")]
    pub lossless_classes: Vec<u8>,
    /// Quanta (512 bit times) of each pause a switch sends; refreshed while above Xon.
    #[serde(default = "default_quanta")]
    pub pause_quanta: u16,
    /// PFC watchdog: a port/class paused longer than this (modelled µs) raises a storm event.
    #[serde(default = "default_watchdog")]
    pub watchdog_us: f64,
    /// Each tier's table may give any subset of its fields: the rest are the tier's defaults.
    #[serde(default = "SwitchQos::rtsw", deserialize_with = "rtsw_over_defaults")]
    pub rtsw: SwitchQos,
    #[serde(default = "SwitchQos::ctsw", deserialize_with = "ctsw_over_defaults")]
    pub ctsw: SwitchQos,
    #[serde(default = "SwitchQos::ctsw", deserialize_with = "ctsw_over_defaults")]
    pub atsw: SwitchQos,
}

/// A tier's table as a topology file writes it: any subset of [`SwitchQos`]'s fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchQosFields {
    buffer: Option<BufferKind>,
    buffer_kb: Option<u32>,
    alpha: Option<f64>,
    ecn_kmin_kb: Option<u32>,
    ecn_kmax_kb: Option<u32>,
    ecn_pmax: Option<f64>,
    xoff_kb: Option<u32>,
    xon_kb: Option<u32>,
    headroom_kb: Option<u32>,
}

impl SwitchQosFields {
    /// The fields given, the rest from `d`.
    fn over(self, d: SwitchQos) -> SwitchQos {
        SwitchQos {
            buffer: self.buffer.unwrap_or(d.buffer),
            buffer_kb: self.buffer_kb.unwrap_or(d.buffer_kb),
            alpha: self.alpha.unwrap_or(d.alpha),
            ecn_kmin_kb: self.ecn_kmin_kb.unwrap_or(d.ecn_kmin_kb),
            ecn_kmax_kb: self.ecn_kmax_kb.unwrap_or(d.ecn_kmax_kb),
            ecn_pmax: self.ecn_pmax.unwrap_or(d.ecn_pmax),
            xoff_kb: self.xoff_kb.unwrap_or(d.xoff_kb),
            xon_kb: self.xon_kb.unwrap_or(d.xon_kb),
            headroom_kb: self.headroom_kb.unwrap_or(d.headroom_kb),
        }
    }
}

fn rtsw_over_defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SwitchQos, D::Error> {
    Ok(SwitchQosFields::deserialize(d)?.over(SwitchQos::rtsw()))
}

fn ctsw_over_defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SwitchQos, D::Error> {
    Ok(SwitchQosFields::deserialize(d)?.over(SwitchQos::ctsw()))
}

/// The buffer, ECN and PFC settings of the switches of one tier.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchQos {
    /// "shared" (a pool with a dynamic threshold, as shallow-buffer RTSWs) or "static"
    /// (a fixed share per port and class, as deep-buffer CTSWs).
    pub buffer: BufferKind,
    /// Shared: the pool; static: each port/class queue's limit. KiB.
    pub buffer_kb: u32,
    /// Shared: a queue may grow to alpha x the free pool.
    #[serde(default = "one")]
    pub alpha: f64,
    /// RED/ECN: no marks below Kmin, probability rising to Pmax at Kmax, all above. KiB.
    pub ecn_kmin_kb: u32,
    pub ecn_kmax_kb: u32,
    pub ecn_pmax: f64,
    /// PFC: bytes held for an ingress port/class that trigger a pause, and that lift it. KiB.
    pub xoff_kb: u32,
    pub xon_kb: u32,
    /// Room kept beyond the limit of a lossless queue for bytes in flight. KiB.
    pub headroom_kb: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BufferKind {
    Shared,
    Static,
}

fn yes() -> bool {
    true
}
fn one() -> f64 {
    1.0
}
fn default_lossless() -> Vec<u8> {
    vec![3]
}
fn default_quanta() -> u16 {
    u16::MAX
}
fn default_watchdog() -> f64 {
    2_000.0
}

impl SwitchQos {
    /// A shallow-buffer rack switch: a 32 MiB shared pool (a Tomahawk-class chip).
    pub fn rtsw() -> Self {
        SwitchQos {
            buffer: BufferKind::Shared,
            buffer_kb: 32 * 1024,
            alpha: 1.0,
            ecn_kmin_kb: 100,
            ecn_kmax_kb: 400,
            ecn_pmax: 0.2,
            xoff_kb: 512,
            xon_kb: 256,
            headroom_kb: 256,
        }
    }

    /// A deep-buffer spine: 16 MiB per port and class.
    pub fn ctsw() -> Self {
        SwitchQos { buffer: BufferKind::Static, buffer_kb: 16 * 1024, ..Self::rtsw() }
    }

    pub(super) fn check(&self, path: &str, errs: &mut Vec<(String, String)>) {
        let mut err = |field: &str, msg: String| errs.push((format!("{path}.{field}"), msg));
        if self.buffer_kb == 0 {
            err("buffer_kb", "must be greater than 0".into());
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0 && self.alpha <= 64.0) {
            err("alpha", format!("{} is not allowed; must be in (0, 64]", self.alpha));
        } else if alpha_x256(self.alpha) == 0 {
            err("alpha", format!("{} would become 0: the switches hold alpha in 256ths", self.alpha));
        }
        if self.ecn_kmin_kb >= self.ecn_kmax_kb {
            err("ecn_kmin_kb", format!("{} must be below ecn_kmax_kb ({})", self.ecn_kmin_kb, self.ecn_kmax_kb));
        }
        if !(0.0..=1.0).contains(&self.ecn_pmax) {
            err("ecn_pmax", format!("{} is not a probability (0..=1)", self.ecn_pmax));
        }
        if self.xon_kb >= self.xoff_kb {
            err("xon_kb", format!("{} must be below xoff_kb ({})", self.xon_kb, self.xoff_kb));
        }
        for (field, v) in
            [("ecn_kmax_kb", self.ecn_kmax_kb), ("xoff_kb", self.xoff_kb), ("headroom_kb", self.headroom_kb)]
        {
            if u64::from(v) * 1024 > u64::from(u32::MAX) {
                err(field, format!("{v} KiB is too large (at most 4 GiB)"));
            }
        }
        // A static buffer is a port's own, held in 32 bits; a shared pool is counted in 64.
        if self.buffer == BufferKind::Static && u64::from(self.buffer_kb) * 1024 > u64::from(u32::MAX) {
            err("buffer_kb", format!("{} KiB is too large for a static buffer (at most 4 GiB)", self.buffer_kb));
        }
    }
}

impl Default for Congestion {
    fn default() -> Self {
        Congestion {
            enabled: true,
            lossless_classes: default_lossless(),
            pause_quanta: default_quanta(),
            watchdog_us: default_watchdog(),
            rtsw: SwitchQos::rtsw(),
            ctsw: SwitchQos::ctsw(),
            atsw: SwitchQos::ctsw(),
        }
    }
}

impl Congestion {
    /// Every problem as (field path, message).
    pub(super) fn check(&self) -> Vec<(String, String)> {
        let mut errs = Vec::new();
        for (i, c) in self.lossless_classes.iter().enumerate() {
            if *c > 7 {
                errs.push(("congestion.lossless_classes".into(), format!("class {c} does not exist (0..=7)")));
            } else if self.lossless_classes[..i].contains(c) {
                errs.push(("congestion.lossless_classes".into(), format!("class {c} is named twice")));
            }
        }
        if self.pause_quanta == 0 {
            errs.push(("congestion.pause_quanta".into(), "must be greater than 0 (0 means resume)".into()));
        }
        if !(self.watchdog_us.is_finite() && self.watchdog_us > 0.0) {
            errs.push(("congestion.watchdog_us".into(), format!("{} must be a positive time", self.watchdog_us)));
        }
        self.rtsw.check("congestion.rtsw", &mut errs);
        self.ctsw.check("congestion.ctsw", &mut errs);
        self.atsw.check("congestion.atsw", &mut errs);
        errs
    }

    /// These settings with every tier's ECN thresholds set to `kmin_kb`..`kmax_kb` (KiB): a
    /// case's own thresholds. Thresholds a topology file could not hold are refused with the
    /// field at fault, and `self` is left as it was.
    pub fn with_ecn_thresholds(&self, kmin_kb: u32, kmax_kb: u32) -> Result<Self, String> {
        let mut c = self.clone();
        for sw in [&mut c.rtsw, &mut c.ctsw, &mut c.atsw] {
            (sw.ecn_kmin_kb, sw.ecn_kmax_kb) = (kmin_kb, kmax_kb);
        }
        match c.check().into_iter().next() {
            Some((field, msg)) => Err(format!("{field}: {msg}")),
            None => Ok(c),
        }
    }

    /// What a switch with settings `sw` reads (rates and times are applied elsewhere; bytes
    /// are not scaled).
    pub fn qos_config(&self, sw: &SwitchQos) -> QosConfig {
        let kb = |v: u32| v.saturating_mul(1024);
        QosConfig {
            enabled: self.enabled as u32,
            lossless_classes: self.lossless_classes.iter().fold(0, |m, c| m | 1 << (c & 7)),
            red: RedParams::new(kb(sw.ecn_kmin_kb), kb(sw.ecn_kmax_kb), sw.ecn_pmax),
            xoff_bytes: kb(sw.xoff_kb),
            xon_bytes: kb(sw.xon_kb),
            headroom_bytes: kb(sw.headroom_kb),
            buffer_mode: match sw.buffer {
                BufferKind::Shared => BufferMode::Shared as u32,
                BufferKind::Static => BufferMode::Static as u32,
            },
            port_buffer_bytes: kb(sw.buffer_kb),
            alpha_x256: alpha_x256(sw.alpha),
            pool_bytes: u64::from(sw.buffer_kb) * 1024,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cases_ecn_thresholds_reach_every_tier_and_bad_ones_name_the_field() {
        let base = Congestion::default();
        let c = base.with_ecn_thresholds(50, 200).unwrap();
        for sw in [&c.rtsw, &c.ctsw, &c.atsw] {
            assert_eq!((sw.ecn_kmin_kb, sw.ecn_kmax_kb), (50, 200));
            assert_eq!(c.qos_config(sw).red, RedParams::new(50 * 1024, 200 * 1024, sw.ecn_pmax));
        }
        assert_eq!((c.rtsw.xoff_kb, c.ctsw.buffer_kb), (base.rtsw.xoff_kb, base.ctsw.buffer_kb), "nothing else");
        let err = base.with_ecn_thresholds(400, 100).unwrap_err();
        assert!(err.starts_with("congestion.rtsw.ecn_kmin_kb: 400 must be below ecn_kmax_kb (100)"), "{err}");
        let err = base.with_ecn_thresholds(1, 8 << 20).unwrap_err();
        assert!(err.starts_with("congestion.rtsw.ecn_kmax_kb"), "{err}");
        assert_eq!(base, Congestion::default(), "the settings asked from are unchanged");
    }

    #[test]
    fn a_tier_table_may_give_any_subset_of_its_fields() {
        let c: Congestion = toml::from_str("[rtsw]\nxoff_kb = 100\nxon_kb = 50\n[atsw]\nbuffer_kb = 1024\n").unwrap();
        let rtsw = SwitchQos { xoff_kb: 100, xon_kb: 50, ..SwitchQos::rtsw() };
        assert_eq!((c.rtsw, c.ctsw.clone()), (rtsw, SwitchQos::ctsw()), "the rest from the tier's own defaults");
        assert_eq!(c.atsw, SwitchQos { buffer_kb: 1024, ..SwitchQos::ctsw() });
        let empty: Congestion = toml::from_str("[ctsw]\n").unwrap();
        assert_eq!(empty, Congestion::default());
        // A misspelt field is still refused, by name.
        let err = toml::from_str::<Congestion>("[rtsw]\nxof_kb = 100\n").unwrap_err().to_string();
        assert!(err.contains("unknown field `xof_kb`") && err.contains("xoff_kb"), "{err}");
        // A subset is checked against the defaults it keeps: Xon 600 KiB is above the default Xoff.
        let c: Congestion = toml::from_str("[rtsw]\nxon_kb = 600\n").unwrap();
        let mut errs = Vec::new();
        c.rtsw.check("congestion.rtsw", &mut errs);
        assert_eq!(errs, [("congestion.rtsw.xon_kb".to_string(), "600 must be below xoff_kb (512)".to_string())]);
    }
}
