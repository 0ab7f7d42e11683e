//! PFC obedience (IEEE 802.1Qbb), sans-IO: which priority classes a host may send at a time, given
//! the pause frames its rack switch sent it, and how long each class has been paused.
//!
//! A frame's time for an enabled class replaces whatever pause was running for it (a later XOFF
//! extends or shortens it; quanta 0 resumes at once), as a NIC's per-priority pause timer does.
//! Quanta are converted at the host link's rate as the caller models it (already divided by the
//! time scale), so a pause lasts S times as long in slowed time.
use fabric_common::pfc::{CLASSES, PauseFrame, quanta_to_ns};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ClassPause {
    /// The class may send again from this time on.
    until_ns: u64,
    /// Start of the pause running now (`None` when not paused as far as we know).
    since_ns: Option<u64>,
    /// Paused time of pauses already over.
    paused_ns: u64,
    /// The longest of the pauses already over.
    longest_ns: u64,
}

/// The pause state of one host's link: one timer per priority class.
#[derive(Clone, Debug)]
pub struct PauseState {
    link_rate_bps: u64,
    classes: [ClassPause; CLASSES],
    frames: u64,
}

impl PauseState {
    /// A link of `link_rate_bps` (the modelled rate, divided by the time scale), nothing paused.
    pub fn new(link_rate_bps: u64) -> Self {
        PauseState { link_rate_bps, classes: [ClassPause::default(); CLASSES], frames: 0 }
    }

    /// Applies a PFC frame received at `now_ns`.
    pub fn on_frame(&mut self, frame: &PauseFrame, now_ns: u64) {
        self.frames += 1;
        for class in 0..CLASSES {
            let Some(quanta) = frame.class_quanta(class) else {
                continue;
            };
            self.settle(class, now_ns);
            let c = &mut self.classes[class];
            let duration = quanta_to_ns(quanta, self.link_rate_bps);
            match c.since_ns {
                // Running: the new time replaces the rest of the old one.
                Some(since) if duration == 0 => {
                    c.paused_ns += now_ns.saturating_sub(since);
                    c.longest_ns = c.longest_ns.max(now_ns.saturating_sub(since));
                    c.since_ns = None;
                    c.until_ns = now_ns;
                }
                Some(_) => c.until_ns = now_ns.saturating_add(duration),
                None if duration > 0 => {
                    c.since_ns = Some(now_ns);
                    c.until_ns = now_ns.saturating_add(duration);
                }
                None => {}
            }
        }
    }

    /// Closes the accounting of a pause that ran out by itself before `now_ns`.
    fn settle(&mut self, class: usize, now_ns: u64) {
        let c = &mut self.classes[class];
        if let Some(since) = c.since_ns
            && c.until_ns <= now_ns
        {
            c.paused_ns += c.until_ns.saturating_sub(since);
            c.longest_ns = c.longest_ns.max(c.until_ns.saturating_sub(since));
            c.since_ns = None;
        }
    }

    /// Whether packets of `class` may leave at `now_ns`.
    pub fn may_send(&self, class: usize, now_ns: u64) -> bool {
        class >= CLASSES || self.classes[class].until_ns <= now_ns
    }

    /// When `class` may send again (`now_ns` or earlier if it may now).
    pub fn resume_at(&self, class: usize) -> u64 {
        self.classes.get(class).map_or(0, |c| c.until_ns)
    }

    /// PFC frames received.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// How long `class` has been paused in total up to `now_ns`.
    pub fn paused_ns(&self, class: usize, now_ns: u64) -> u64 {
        let Some(c) = self.classes.get(class) else {
            return 0;
        };
        let running = c.since_ns.map_or(0, |since| c.until_ns.min(now_ns).saturating_sub(since));
        c.paused_ns + running
    }

    /// The longest continuous pause of `class` up to `now_ns` (one kept running by refreshes
    /// counts once, from its first frame to its resume or expiry).
    pub fn longest_pause_ns(&self, class: usize, now_ns: u64) -> u64 {
        let Some(c) = self.classes.get(class) else {
            return 0;
        };
        let running = c.since_ns.map_or(0, |since| c.until_ns.min(now_ns).saturating_sub(since));
        c.longest_ns.max(running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(class_enable: u8, q: u16) -> PauseFrame {
        PauseFrame { src: [2, 0, 0, 0, 0, 1], class_enable, quanta: [q; CLASSES] }
    }

    #[test]
    fn xoff_pauses_for_the_quanta_at_the_link_rate_and_quanta_0_resumes() {
        // 1 Gbit/s: one quantum is 512 ns.
        let mut p = PauseState::new(1_000_000_000);
        assert!(p.may_send(3, 0));
        p.on_frame(&frame(1 << 3, 1000), 1_000);
        assert!(!p.may_send(3, 1_000) && !p.may_send(3, 512_999));
        assert!(p.may_send(3, 513_000), "1000 quanta = 512 µs later");
        assert!(p.may_send(6, 2_000), "other classes run on");
        assert_eq!(p.resume_at(3), 513_000);
        assert_eq!(p.paused_ns(3, 100_000), 99_000);
        assert_eq!(p.longest_pause_ns(3, 100_000), 99_000, "a pause still running counts up to now");
        assert_eq!(p.paused_ns(3, 10_000_000), 512_000, "ran out by itself");

        // XOFF, refreshed before it runs out, then XON.
        p.on_frame(&frame(1 << 3, 0xFFFF), 20_000_000);
        p.on_frame(&frame(1 << 3, 0xFFFF), 30_000_000);
        assert!(!p.may_send(3, 30_000_000 + 33_000_000), "the refresh extends the pause");
        p.on_frame(&frame(1 << 3, 0), 40_000_000);
        assert!(p.may_send(3, 40_000_000));
        assert_eq!(p.paused_ns(3, 50_000_000), 512_000 + 20_000_000);
        assert_eq!(p.longest_pause_ns(3, 50_000_000), 20_000_000, "the refreshed pause counts once");
        assert_eq!(p.frames(), 4);
    }

    #[test]
    fn only_enabled_classes_and_time_scale() {
        // 400 Gbit/s slowed 1000 times: 0xFFFF quanta last 83.9 ms instead of 83.9 µs.
        let mut p = PauseState::new(400_000_000_000 / 1000);
        p.on_frame(&frame((1 << 3) | (1 << 6), 0xFFFF), 0);
        assert!(p.may_send(0, 1) && p.may_send(5, 1));
        assert!(!p.may_send(3, 83_000_000) && !p.may_send(6, 83_000_000));
        assert!(p.may_send(3, 83_886_080));
        // A frame with no class enabled changes nothing; a resume for an unpaused class neither.
        p.on_frame(&frame(0, 0), 10);
        p.on_frame(&frame(1 << 1, 0), 10);
        assert!(!p.may_send(3, 10));
        assert_eq!(p.paused_ns(1, 100), 0);
        assert!(p.may_send(200, 0), "no such class: never paused");
    }
}
