//! The switch agent: what a switch's control CPU does for its XDP data plane.
//!
//! XDP can neither hold a packet nor create one, so PFC frames are sent from userspace. The XDP
//! program raises an XOFF event in a BPF ring buffer when an ingress port/class crosses Xoff;
//! the agent, woken by the ring buffer, writes a real 802.1Qbb frame with an `AF_PACKET` socket
//! bound to that port (so it leaves on the wire towards the upstream neighbour), refreshes it
//! every half pause while the ingress holds more than Xon, and sends quanta 0 once it holds
//! less. It also samples the shared buffer's use for the dynamic threshold, runs the PFC
//! watchdog, samples queue depths, and writes the XDP program's slow-path log records (aya-log's
//! `AYA_LOGS` ring buffer) into its own log, naming the switch. One process per testbed
//! (`fabric agent`, spawned by `fabric up`, stopped by `fabric down`), one thread per switch;
//! each thread writes its telemetry to `/run/fabric/PREFIX/agent/NODE.json`, which `fabric stats`
//! reads.
use std::{
    collections::BTreeMap,
    os::fd::{AsRawFd, OwnedFd},
    path::PathBuf,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use fabric_common::{
    pfc::{CLASSES, PauseFrame, quanta_to_ns},
    qos::{BufferMode, PfcEvent},
    queue::LineRate,
};
use serde::{Deserialize, Serialize};

use crate::{
    dataplane::SwitchDataplane,
    model::plan::{NodeId, Plan},
    state::State,
    state::state_dir,
    sys::netns,
};

/// How often an agent looks at its pauses (Xon, refresh), the pool and the watchdog while some
/// pause is outstanding, and when all is quiet (wall time). The busy tick is the 1 ms every
/// figure here was measured with (it was once 200 µs on paper, which `poll` rounded up to 1 ms);
/// a finer one would wake each pausing switch's thread more often on a 2-core machine.
const BUSY_TICK: Duration = Duration::from_millis(1);
const IDLE_TICK: Duration = Duration::from_millis(5);
/// Queue depth samples (of the queues known to carry traffic), the scan for such queues, and
/// telemetry file writes. Each map read is a syscall: scanning every port/class of every switch
/// each sample would keep a small machine's CPU busy. The scan runs every 100 ms: once a second
/// missed the first second of a queue's use, most of a short run's incast.
const SAMPLE_EVERY_NS: u64 = 10_000_000;
const SCAN_EVERY_NS: u64 = 100_000_000;
const REPORT_EVERY_NS: u64 = 100_000_000;

/// The monotonic clock, as `bpf_ktime_get_ns` reads it.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Where the agents of a testbed keep their pid and telemetry.
pub fn agent_dir(prefix: &str) -> PathBuf {
    state_dir(prefix).join("agent")
}

fn pid_path(prefix: &str) -> PathBuf {
    agent_dir(prefix).join("pid")
}

/// Written by the agent once every switch's ring buffer and sockets are open.
fn ready_path(prefix: &str) -> PathBuf {
    agent_dir(prefix).join("ready")
}

/// The agent's own log (its stdout and stderr).
pub fn log_path(prefix: &str) -> PathBuf {
    agent_dir(prefix).join("agent.log")
}

/// How long `up` waits for the agent to open every switch (a loaded CI runner can be slow).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Telemetry of one switch, as written by its agent thread.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SwitchTelemetry {
    pub node: String,
    /// Monotonic ns of the last write.
    pub updated_ns: u64,
    /// Per ingress port and class that ever paused its upstream.
    pub pfc: Vec<PfcPortStats>,
    /// Delay from the XDP program's XOFF decision to the frame leaving the agent's socket, ns
    /// (wall time): every XOFF sent.
    pub xoff_delay: DelayStats,
    pub storms: Vec<StormEvent>,
    /// Per egress port and class with traffic: sampled modelled depth (bytes), log2 buckets
    /// (bucket k counts samples with depth in [2^(k-1), 2^k), bucket 0 empty queues).
    pub depth_histograms: Vec<DepthHistogram>,
    /// Pool use in bytes at the last sample (shared buffer mode).
    pub pool_used_bytes: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PfcPortStats {
    pub port: u32,
    pub ifname: String,
    pub class: usize,
    pub xoff_sent: u64,
    pub refresh_sent: u64,
    pub xon_sent: u64,
    /// Wall ns this switch kept its upstream on this port paused.
    pub pausing_ns: u64,
}

/// Delays from an XOFF crossing to the PFC frame on the wire: count, median, p99 and maximum.
/// The quantiles come from a streaming histogram (HdrHistogram, 3 significant digits: within
/// 0.1%), so recording one is constant time in the PFC path, however many came before.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DelayStats {
    pub count: u64,
    pub median_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    #[serde(skip)]
    histogram: Option<hdrhistogram::Histogram<u64>>,
}

impl DelayStats {
    fn record(&mut self, ns: u64) {
        let h = self
            .histogram
            .get_or_insert_with(|| hdrhistogram::Histogram::new(3).expect("3 significant digits is a valid precision"));
        // `new` makes an auto-resizing histogram: `record` grows it to fit; only a value beyond
        // what any histogram can track is clamped.
        if h.record(ns.max(1)).is_err() {
            h.saturating_record(ns.max(1));
        }
        self.count += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    /// Brings the quantiles up to date (when the telemetry is written, not per record: a
    /// quantile walks the histogram's buckets).
    fn summarize(&mut self) {
        if let Some(h) = &self.histogram {
            self.median_ns = h.value_at_quantile(0.5);
            self.p99_ns = h.value_at_quantile(0.99);
        }
    }
}

/// The PFC watchdog fired: an egress port/class stayed paused longer than the watchdog time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StormEvent {
    pub port: u32,
    pub ifname: String,
    pub class: usize,
    /// Monotonic ns when the pause began, and how long it had lasted when the watchdog fired.
    pub paused_since_ns: u64,
    pub paused_for_ns: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DepthHistogram {
    pub port: u32,
    pub ifname: String,
    pub class: usize,
    pub buckets: Vec<u64>,
}

/// Reads the telemetry every agent thread of a testbed wrote (empty when no agent runs).
pub fn read_telemetry(prefix: &str) -> Vec<SwitchTelemetry> {
    let Ok(dir) = std::fs::read_dir(agent_dir(prefix)) else { return Vec::new() };
    let mut out: Vec<SwitchTelemetry> = dir
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

/// The executable to run the agent with: `FABRIC_BIN`, else this process when it is `fabric`.
fn agent_executable() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("FABRIC_BIN") {
        return Ok(p.into());
    }
    let exe = std::env::current_exe().context("locating the running executable")?;
    if exe.file_name().is_some_and(|n| n == "fabric") {
        return Ok(exe);
    }
    bail!(
        "cannot start the switch agent: this process ({}) is not the `fabric` binary; \
         set FABRIC_BIN to its path",
        exe.display()
    )
}

/// Starts the testbed's agent in the background (its own process group, so it outlives
/// `fabric up`) and returns once it has opened every switch: a testbed that `up` returns is
/// complete. An agent that exits or never gets ready is an error that quotes its log.
pub fn spawn(prefix: &str) -> Result<u32> {
    use std::os::unix::process::CommandExt as _;
    let dir = agent_dir(prefix);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let _ = std::fs::remove_file(ready_path(prefix));
    let log = std::fs::File::create(log_path(prefix))?;
    let mut child = std::process::Command::new(agent_executable()?)
        .args(["agent", "--prefix", prefix])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("starting the switch agent")?;
    std::fs::write(pid_path(prefix), child.id().to_string())?;
    let log_text = || std::fs::read_to_string(log_path(prefix)).unwrap_or_default();
    let start = std::time::Instant::now();
    while !ready_path(prefix).exists() {
        if let Some(status) = child.try_wait()? {
            bail!("the switch agent exited before it was ready ({status}); its log:\n{}", log_text());
        }
        if start.elapsed() > READY_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the switch agent was not ready after {READY_TIMEOUT:?}; its log:\n{}", log_text());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(child.id())
}

/// The pid of the testbed's agent if it runs (the pid file names a live `fabric agent` process
/// for this prefix, not a recycled pid).
pub fn running(prefix: &str) -> Option<i32> {
    let pid = std::fs::read_to_string(pid_path(prefix)).ok()?.trim().parse::<i32>().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let ours = args.windows(2).any(|w| w[0] == b"--prefix" && w[1] == prefix.as_bytes())
        && args.iter().any(|a| *a == b"agent");
    // A zombie (exited, not yet reaped) is not running: it has no start time.
    let running = crate::sys::process::start_time(pid as u32).is_some();
    (ours && running).then_some(pid)
}

/// Stops the testbed's agent, if one runs. Checks that the pid is still our agent first.
pub fn stop(prefix: &str) -> Result<bool> {
    let Some(pid) = running(prefix) else { return Ok(false) };
    // SAFETY: plain signals to a process we started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(10));
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Ok(true);
        }
        // Reap it if it is our child (`fabric up` then `down` in one process, as tests do).
        // SAFETY: non-blocking waitpid on a pid.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // SAFETY: non-blocking waitpid on a pid.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    Ok(true)
}

/// `fabric agent`: opens every switch, says it is ready, then runs one thread per switch until
/// the testbed's state file disappears or a signal stops it.
pub fn run(prefix: &str) -> Result<()> {
    let state = State::load(prefix)?;
    let plan = state.plan;
    let agents = plan
        .switches()
        .map(|n| SwitchAgent::new(&plan, n).with_context(|| format!("agent {}", plan.nodes[n].name)))
        .collect::<Result<Vec<_>>>()?;
    std::fs::write(ready_path(prefix), b"")?;
    std::thread::scope(|s| {
        for mut agent in agents {
            s.spawn(move || {
                if let Err(e) = agent.run() {
                    eprintln!("agent {}: {e:#}", agent.telemetry.node);
                }
            });
        }
    });
    Ok(())
}

/// A pause this switch holds on one of its ingress ports.
struct ActivePause {
    since_ns: u64,
    last_sent_ns: u64,
}

struct SwitchAgent<'p> {
    plan: &'p Plan,
    node: NodeId,
    dp: SwitchDataplane,
    events: aya::maps::RingBuf<aya::maps::MapData>,
    /// The XDP program's log (its own ring buffer), polled with `events`.
    xdp_log: aya_log::EbpfLogger<XdpLog>,
    /// One raw socket per port, bound to it.
    sockets: Vec<OwnedFd>,
    /// Each port's rate as the switch holds it, with its factors.
    rates: Vec<LineRate>,
    qos: fabric_common::qos::QosConfig,
    pause_quanta: u16,
    watchdog_ns: u64,
    active: BTreeMap<(u32, usize), ActivePause>,
    telemetry: SwitchTelemetry,
    pfc_stats: BTreeMap<(u32, usize), PfcPortStats>,
    histograms: BTreeMap<(u32, usize), Vec<u64>>,
    /// Pause episodes the watchdog already reported, by (port, class) -> paused_since.
    storms_seen: BTreeMap<(u32, usize), u64>,
    /// Egress queues that have carried traffic or been paused: the ones sampled.
    busy_queues: std::collections::BTreeSet<(u32, usize)>,
    next_scan_ns: u64,
}

impl<'p> SwitchAgent<'p> {
    fn new(plan: &'p Plan, node: NodeId) -> Result<Self> {
        let name = &plan.nodes[node].name;
        let dir = crate::state::bpf_dir(&plan.topology.prefix).join(name);
        let mut dp = SwitchDataplane::from_pins(&dir)?;
        let events = dp.take_pfc_events()?;
        let xdp_log = dp.take_logger(XdpLog { switch: name.clone() })?;
        let ports = &plan.nodes[node].ports;
        let sockets = netns::in_named(&plan.netns(node), || {
            ports.iter().map(|p| netns::raw_socket(&p.ifname)).collect::<Result<Vec<_>>>()
        })?;
        let rates = (0..ports.len() as u32).map(|p| dp.port_line_rate(p)).collect::<Result<Vec<_>>>()?;
        let qos = dp.qos()?;
        let topo = &plan.topology;
        Ok(SwitchAgent {
            plan,
            node,
            dp,
            events,
            xdp_log,
            sockets,
            rates,
            qos,
            pause_quanta: topo.congestion.pause_quanta,
            watchdog_ns: topo.wall_ns(topo.congestion.watchdog_us * 1e3),
            active: BTreeMap::new(),
            telemetry: SwitchTelemetry { node: name.clone(), ..Default::default() },
            pfc_stats: BTreeMap::new(),
            histograms: BTreeMap::new(),
            storms_seen: BTreeMap::new(),
            busy_queues: Default::default(),
            next_scan_ns: 0,
        })
    }

    fn run(&mut self) -> Result<()> {
        let state_file = crate::state::state_path(&self.plan.topology.prefix);
        let (mut next_sample, mut next_report) = (0, 0);
        loop {
            let tick = if self.active.is_empty() { IDLE_TICK } else { BUSY_TICK };
            let mut pfds = [self.events.as_raw_fd(), self.xdp_log.as_raw_fd()].map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            // `ppoll`, not `poll`: a busy tick is under a millisecond, poll's unit.
            let timeout = libc::timespec { tv_sec: tick.as_secs() as _, tv_nsec: tick.subsec_nanos() as _ };
            // SAFETY: an array of valid pollfds, its length passed with it; a valid timespec; no
            // signal mask.
            unsafe { libc::ppoll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, &timeout, std::ptr::null()) };
            let mut events = Vec::new();
            while let Some(item) = self.events.next() {
                if item.len() >= size_of::<PfcEvent>() {
                    // SAFETY: the XDP program writes exactly one PfcEvent per record.
                    events.push(unsafe { std::ptr::read_unaligned::<PfcEvent>(item.as_ptr().cast()) });
                }
            }
            for ev in events {
                self.on_xoff(ev)?;
            }
            self.forward_xdp_log();
            let now = monotonic_ns();
            self.tend_pauses(now)?;
            if now >= next_sample {
                self.sample(now)?;
                next_sample = now + SAMPLE_EVERY_NS;
            }
            if now >= next_report {
                if !state_file.exists() {
                    return Ok(());
                }
                self.write_report(now)?;
                next_report = now + REPORT_EVERY_NS;
            }
        }
    }

    /// Writes every record the XDP program logged since the last call into the agent's log.
    /// aya-log panics on a record it cannot decode (the record is consumed all the same): that
    /// is reported, and the switch's PFC frames and telemetry go on.
    fn forward_xdp_log(&mut self) {
        let log = &mut self.xdp_log;
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| log.flush())).is_err() {
            eprintln!("agent {}: an undecodable XDP log record was skipped", self.telemetry.node);
        }
    }

    fn ifname(&self, port: u32) -> String {
        self.plan.nodes[self.node].ports.get(port as usize).map(|p| p.ifname.clone()).unwrap_or_default()
    }

    fn stats(&mut self, port: u32, class: usize) -> &mut PfcPortStats {
        let ifname = self.ifname(port);
        self.pfc_stats.entry((port, class)).or_insert_with(|| PfcPortStats {
            port,
            ifname,
            class,
            ..Default::default()
        })
    }

    /// Sends a PFC frame for one class out of `port`: false if the port is down (`fabric link
    /// down`, `fabric switch down`), where there is no one to pause.
    fn send_pfc(&self, port: u32, class: usize, quanta: u16) -> Result<bool> {
        let mac = self.plan.nodes[self.node].ports[port as usize].mac;
        let mut times = [0; CLASSES];
        times[class] = quanta;
        let frame = PauseFrame { src: mac, class_enable: 1 << class, quanta: times }.emit();
        let fd = &self.sockets[port as usize];
        // SAFETY: a valid socket and buffer.
        let n = unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV)) {
                return Ok(false);
            }
            bail!("sending a PFC frame on {}: {e}", self.ifname(port));
        }
        Ok(true)
    }

    fn on_xoff(&mut self, ev: PfcEvent) -> Result<()> {
        let (port, class) = (ev.port, ev.class as usize);
        if port as usize >= self.sockets.len() || class >= CLASSES {
            return Ok(());
        }
        if !self.send_pfc(port, class, self.pause_quanta)? {
            // The port went down after the XDP program counted the frame: no pause to hold.
            return self.dp.clear_xoff(port, class);
        }
        let now = monotonic_ns();
        self.telemetry.xoff_delay.record(now.saturating_sub(ev.time_ns));
        self.stats(port, class).xoff_sent += 1;
        self.active.insert((port, class), ActivePause { since_ns: now, last_sent_ns: now });
        Ok(())
    }

    /// Xon and refresh for every pause this switch holds. A pause on a port that has gone down
    /// ends there: the link's peer is gone, and the agent goes on with the other ports.
    fn tend_pauses(&mut self, now: u64) -> Result<()> {
        let keys: Vec<(u32, usize)> = self.active.keys().copied().collect();
        for (port, class) in keys {
            let held = self.dp.account(port, class)?.held_at(now);
            let pause_ns = quanta_to_ns(self.pause_quanta, self.rates[port as usize].bps);
            if held < u64::from(self.qos.xon_bytes) {
                let sent = self.send_pfc(port, class, 0)?;
                self.end_pause(port, class, now)?;
                self.stats(port, class).xon_sent += u64::from(sent);
            } else if now.saturating_sub(self.active[&(port, class)].last_sent_ns) >= pause_ns / 2 {
                if !self.send_pfc(port, class, self.pause_quanta)? {
                    self.end_pause(port, class, now)?;
                    continue;
                }
                self.stats(port, class).refresh_sent += 1;
                if let Some(a) = self.active.get_mut(&(port, class)) {
                    a.last_sent_ns = now;
                }
            }
        }
        Ok(())
    }

    /// Ends the pause this switch holds on `port`'s `class`: the XDP program may raise it again.
    fn end_pause(&mut self, port: u32, class: usize, now: u64) -> Result<()> {
        self.dp.clear_xoff(port, class)?;
        let since = self.active.remove(&(port, class)).map_or(now, |a| a.since_ns);
        self.stats(port, class).pausing_ns += now - since;
        Ok(())
    }

    /// Pool use, watchdog and depth samples, from every egress queue.
    fn sample(&mut self, now: u64) -> Result<()> {
        // `fabric link degrade --rate` changes a port's rate while the agent runs: its queues'
        // depths are the time their tails are ahead, at the rate in force.
        for port in 0..self.rates.len() as u32 {
            self.rates[port as usize] = self.dp.port_line_rate(port)?;
        }
        if now >= self.next_scan_ns {
            for port in 0..self.rates.len() as u32 {
                for class in 0..CLASSES {
                    let q = self.dp.queue(port, class)?;
                    if q.max_depth_bytes > 0 || q.pauses_received > 0 {
                        self.busy_queues.insert((port, class));
                    }
                }
            }
            self.next_scan_ns = now + SCAN_EVERY_NS;
        }
        let mut pool = 0;
        let busy: Vec<(u32, usize)> = self.busy_queues.iter().copied().collect();
        for (port, class) in busy {
            {
                let q = self.dp.queue(port, class)?;
                let depth = self.rates[port as usize].depth_bytes(q.tail_ns, q.paused_until_ns, now);
                pool += depth;
                let h = self.histograms.entry((port, class)).or_insert_with(|| vec![0; 41]);
                let bucket = (64 - depth.leading_zeros() as usize).min(40);
                h[bucket] += 1;
                let paused_for = now.saturating_sub(q.paused_since_ns);
                if q.paused_until_ns > now
                    && paused_for > self.watchdog_ns
                    && self.storms_seen.get(&(port, class)) != Some(&q.paused_since_ns)
                {
                    self.storms_seen.insert((port, class), q.paused_since_ns);
                    let ifname = self.ifname(port);
                    eprintln!(
                        "agent {}: PFC watchdog: {ifname} class {class} paused for {} ms",
                        self.telemetry.node,
                        paused_for / 1_000_000
                    );
                    self.telemetry.storms.push(StormEvent {
                        port,
                        ifname,
                        class,
                        paused_since_ns: q.paused_since_ns,
                        paused_for_ns: paused_for,
                    });
                }
            }
        }
        if self.qos.buffer_mode == BufferMode::Shared as u32 {
            self.dp.set_pool_used(pool)?;
        }
        self.telemetry.pool_used_bytes = pool;
        Ok(())
    }

    fn write_report(&mut self, now: u64) -> Result<()> {
        let mut t = self.telemetry.clone();
        t.updated_ns = now;
        t.pfc = self.pfc_stats.values().cloned().collect();
        // Pauses still held count up to now.
        for ((port, class), a) in &self.active {
            if let Some(s) = t.pfc.iter_mut().find(|s| s.port == *port && s.class == *class) {
                s.pausing_ns += now - a.since_ns;
            }
        }
        t.depth_histograms = self
            .histograms
            .iter()
            .map(|(&(port, class), b)| DepthHistogram { port, ifname: self.ifname(port), class, buckets: b.clone() })
            .collect();
        t.xoff_delay.summarize();
        let path = agent_dir(&self.plan.topology.prefix).join(format!("{}.json", t.node));
        crate::sys::file::write_whole(&path, &serde_json::to_vec(&t)?)
    }
}

/// The `log` sink aya-log decodes a switch's XDP log records into: each becomes a tracing event
/// (target `xdp`, at the record's level, with the switch's name), which the agent's subscriber
/// writes to its stderr, the agent log.
struct XdpLog {
    switch: String,
}

impl log::Log for XdpLog {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let (switch, msg) = (&self.switch, record.args());
        match record.level() {
            log::Level::Error => tracing::error!(target: "xdp", switch = %switch, "{msg}"),
            log::Level::Warn => tracing::warn!(target: "xdp", switch = %switch, "{msg}"),
            log::Level::Info => tracing::info!(target: "xdp", switch = %switch, "{msg}"),
            log::Level::Debug => tracing::debug!(target: "xdp", switch = %switch, "{msg}"),
            log::Level::Trace => tracing::trace!(target: "xdp", switch = %switch, "{msg}"),
        }
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn delay_quantiles_stream_within_their_precision() {
        let mut d = super::DelayStats::default();
        for ns in 1..=10_000u64 {
            d.record(ns * 1_000);
        }
        assert_eq!(d.count, 10_000);
        d.summarize();
        let near = |got: u64, want: u64| (got as f64 - want as f64).abs() <= want as f64 * 0.002;
        assert!(near(d.median_ns, 5_000_000), "median {}", d.median_ns);
        assert!(near(d.p99_ns, 9_900_000), "p99 {}", d.p99_ns);
        assert_eq!(d.max_ns, 10_000_000);
        d.record(1);
        assert_eq!((d.count, d.max_ns), (10_001, 10_000_000));
    }
}
