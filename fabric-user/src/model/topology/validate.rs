//! Semantic checks of a parsed topology; each error names the field (`zones[1].uplinks_per_spine`).
//!
//! The limits mirror what the rest of the fabric can actually build (see `testbed/README.md`):
//! ECMP groups of at most [`MAX_GROUP_MEMBERS`] members, switches of at most [`MAX_PORTS`] ports,
//! interface names within Linux's IFNAMSIZ, namespace names kept to the same length, one /31 and
//! one /127 per link out of the address plan.
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use fabric_common::config::MAX_PORTS;
use fabric_common::queue::MIN_RATE_BPS;
use fabric_common::route::MAX_GROUP_MEMBERS;

use super::{Topology, Zone};

/// Longest Linux interface name (IFNAMSIZ is 16 including the NUL).
pub const MAX_IFNAME_LEN: usize = 15;
/// Longest namespace name `<prefix>-<node>` we accept. The kernel would take far longer names
/// (they are files under /run/netns), but keeping them to the interface-name limit keeps
/// `ip netns` listings, `ip -n` command lines and reports aligned and readable.
pub const MAX_NETNS_LEN: usize = 15;
/// Longest testbed prefix.
pub const MAX_PREFIX_LEN: usize = 6;
/// Longest zone name.
pub const MAX_ZONE_NAME_LEN: usize = 3;
/// MTU range: IPv6 needs at least 1280; native XDP on a veth refuses to attach (ERANGE) when the
/// MTU leaves a frame no room in one page: 4096 - 256 headroom - 14 - 320 shared info = 3506.
pub const MTU_RANGE: std::ops::RangeInclusive<u32> = 1280..=3506;
/// The whole IPv4 plan must lie inside the benchmarking range 198.18.0.0/15 (RFC 2544).
pub const IPV4_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);
/// The whole IPv6 plan must lie inside the unique-local range fd00::/8 (RFC 4193).
pub const IPV6_RANGE: (Ipv6Addr, u8) = (Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0), 8);
/// Node indices end up in 16 bits of every MAC address (`plan::mac`).
pub const MAX_NODES: u64 = 1 << 16;

const MAX_GROUP: u64 = MAX_GROUP_MEMBERS as u64;
const MAX_SWITCH_PORTS: u64 = MAX_PORTS as u64;

impl Topology {
    /// Checks everything serde cannot: ranges, uniqueness, group sizes, the address plan.
    ///
    /// Returns every problem found (one per line when there are several), each starting with
    /// the path of the field at fault.
    pub(super) fn validate(&self) -> Result<(), String> {
        let mut errs = Errors::default();
        self.check_scalars(&mut errs);
        let zones_ok = self.check_zones(&mut errs);
        let atsw_ok = self.check_atsw(&mut errs);
        self.check_tiers(&mut errs);
        if !super::TIME_SCALES.contains(&self.time_scale) {
            let (lo, hi) = (super::TIME_SCALES.start(), super::TIME_SCALES.end());
            errs.push("time_scale", format!("{} is not allowed; must be {lo}..={hi}", self.time_scale));
        }
        self.check_flowlet_gap(&mut errs);
        for (path, message) in self.congestion.check() {
            errs.push(&path, message);
        }
        // The derived checks need sane counts; without them they would only repeat the above.
        if zones_ok && atsw_ok {
            self.check_groups_and_ports(&mut errs);
            self.check_names(&mut errs);
            self.check_node_count(&mut errs);
        }
        self.check_addressing(zones_ok && atsw_ok, &mut errs);
        errs.into_result()
    }

    /// The gap must be positive, and in wall-clock time fit the switch's 32-bit ns field.
    fn check_flowlet_gap(&self, errs: &mut Errors) {
        let gap = self.flowlet_gap_us;
        if !gap.is_finite() || gap <= 0.0 {
            errs.push("flowlet_gap_us", format!("{gap} is not allowed; must be a positive number of microseconds"));
        } else if self.time_scale >= 1 {
            let wall_ns = gap * 1e3 * self.time_scale as f64;
            if !(1.0..=u32::MAX as f64).contains(&wall_ns.round()) {
                errs.push(
                    "flowlet_gap_us",
                    format!(
                        "{gap} us at time_scale {} is {wall_ns} ns of wall-clock time; the switches take 1..={} ns",
                        self.time_scale,
                        u32::MAX
                    ),
                );
            }
        }
    }

    fn check_scalars(&self, errs: &mut Errors) {
        if self.name.trim().is_empty() {
            errs.push("name", "must not be empty (it names the testbed in reports)".into());
        }
        if let Err(what) = check_ident(&self.prefix, MAX_PREFIX_LEN) {
            errs.push(
                "prefix",
                format!(
                    "{:?} {what}; allowed: 1..={MAX_PREFIX_LEN} characters of [a-z0-9] starting with a \
                     letter (it starts every namespace name, `<prefix>-<node>`)",
                    self.prefix
                ),
            );
        }
        if !MTU_RANGE.contains(&self.mtu) {
            errs.push(
                "mtu",
                format!(
                    "{} is out of range; allowed: {}..={} (IPv6 needs at least 1280; native XDP on veth \
                     cannot attach above 3506)",
                    self.mtu,
                    MTU_RANGE.start(),
                    MTU_RANGE.end()
                ),
            );
        }
    }

    /// Per-zone field checks; true if every zone has usable counts (>= 1 everywhere).
    fn check_zones(&self, errs: &mut Errors) -> bool {
        if self.zones.is_empty() {
            errs.push("zones", "must have at least 1 zone (add a [[zones]] table)".into());
            return false;
        }
        let mut ok = true;
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, z) in self.zones.iter().enumerate() {
            let path = |f: &str| format!("zones[{i}].{f}");
            if let Err(what) = check_ident(&z.name, MAX_ZONE_NAME_LEN) {
                errs.push(
                    &path("name"),
                    format!(
                        "{:?} {what}; allowed: 1..={MAX_ZONE_NAME_LEN} characters of [a-z0-9] starting with a \
                         letter (it is part of every node and interface name)",
                        z.name
                    ),
                );
            } else if let Some(first) = seen.insert(&z.name, i) {
                seen.insert(&z.name, first);
                errs.push(
                    &path("name"),
                    format!("{:?} is already the name of zones[{first}]; zone names must be unique", z.name),
                );
            }
            let counts: [(&str, u32, &str); 4] = [
                ("racks", z.racks, "a zone needs at least one rack (RTSW)"),
                ("hosts_per_rack", z.hosts_per_rack, "a rack with no hosts has nothing to carry"),
                ("spines", z.spines, "a zone with no CTSW cannot connect its racks"),
                (
                    "uplinks_per_spine",
                    z.uplinks_per_spine,
                    "a rack with no uplinks cannot reach the rest of the fabric",
                ),
            ];
            for (field, value, why) in counts {
                if value == 0 {
                    ok = false;
                    errs.push(&path(field), format!("must be at least 1 ({why})"));
                }
            }
        }
        if self.zones.len() > 1 && self.atsw.is_none() {
            errs.push(
                "atsw",
                format!(
                    "missing: there are {} zones but no ATSW layer, and zones can only reach each other \
                     through ATSWs; add an [atsw] table (count >= 1) or use a single zone",
                    self.zones.len()
                ),
            );
        }
        ok
    }

    /// True if there is no ATSW layer or it has usable counts.
    fn check_atsw(&self, errs: &mut Errors) -> bool {
        let Some(a) = &self.atsw else { return true };
        let mut ok = true;
        if a.count == 0 {
            ok = false;
            errs.push(
                "atsw.count",
                "must be at least 1 (an ATSW layer without ATSWs joins nothing; remove [atsw] instead)".into(),
            );
        }
        if a.uplinks_per_ctsw == 0 {
            ok = false;
            errs.push(
                "atsw.uplinks_per_ctsw",
                "must be at least 1 (a CTSW with no uplinks cannot reach the ATSW layer)".into(),
            );
        }
        ok
    }

    fn check_tiers(&self, errs: &mut Errors) {
        let t = &self.tiers;
        for (name, tier) in [("host", &t.host), ("rtsw", &t.rtsw), ("ctsw", &t.ctsw), ("atsw", &t.atsw)] {
            let r = tier.rate_gbps;
            if !r.is_finite() || r <= 0.0 {
                errs.push(
                    &format!("tiers.{name}.rate_gbps"),
                    format!("{r} is not allowed; must be a finite number of Gbit/s greater than 0"),
                );
            } else if super::TIME_SCALES.contains(&self.time_scale) && !self.testbed_sends_at(r) {
                let least = self.least_testbed_rate_gbps();
                errs.push(
                    &format!("tiers.{name}.rate_gbps"),
                    format!(
                        "{r} Gbit/s at time_scale {} is {} bit/s on the testbed, where a port sends at {MIN_RATE_BPS} \
                         bit/s or more: at least {least} Gbit/s",
                        self.time_scale,
                        self.modelled_rate_bps(r)
                    ),
                );
            }
        }
    }

    /// ECMP group sizes and switch port counts (needs counts >= 1).
    fn check_groups_and_ports(&self, errs: &mut Errors) {
        let atsw = self.atsw.as_ref().map(|a| (u64::from(a.count), u64::from(a.uplinks_per_ctsw)));
        for (i, z) in self.zones.iter().enumerate() {
            let (racks, hosts, spines, ups) =
                (u64::from(z.racks), u64::from(z.hosts_per_rack), u64::from(z.spines), u64::from(z.uplinks_per_spine));
            // RTSW -> CTSWs.
            if spines * ups > MAX_GROUP {
                errs.push(
                    &format!("zones[{i}].spines/uplinks_per_spine"),
                    format!(
                        "an RTSW's uplink ECMP group would have spines x uplinks_per_spine = {spines} x {ups} = {} \
                         members; at most {MAX_GROUP} are allowed",
                        spines * ups
                    ),
                );
            }
            // CTSW -> one rack (unreachable while spines >= 1, kept for the record).
            if ups > MAX_GROUP {
                errs.push(
                    &format!("zones[{i}].uplinks_per_spine"),
                    format!(
                        "a CTSW's ECMP group towards a rack would have uplinks_per_spine = {ups} members; at most \
                         {MAX_GROUP} are allowed"
                    ),
                );
            }
            let rtsw_ports = hosts + spines * ups;
            if rtsw_ports > MAX_SWITCH_PORTS {
                errs.push(
                    &format!("zones[{i}]"),
                    format!(
                        "an RTSW would have {rtsw_ports} ports (hosts_per_rack {hosts} + spines x uplinks_per_spine \
                         {spines} x {ups}); a switch has at most {MAX_SWITCH_PORTS} ports"
                    ),
                );
            }
            let (up_ports, up_desc) = match atsw {
                Some((count, upc)) => (count * upc, format!(" + atsw.count x atsw.uplinks_per_ctsw {count} x {upc}")),
                None => (0, String::new()),
            };
            let ctsw_ports = racks * ups + up_ports;
            if ctsw_ports > MAX_SWITCH_PORTS {
                errs.push(
                    &format!("zones[{i}]"),
                    format!(
                        "a CTSW would have {ctsw_ports} ports (racks x uplinks_per_spine {racks} x {ups}{up_desc}); \
                         a switch has at most {MAX_SWITCH_PORTS} ports"
                    ),
                );
            }
            // ATSW -> this zone's CTSWs.
            if let Some((_, upc)) = atsw
                && spines * upc > MAX_GROUP
            {
                errs.push(
                    &format!("zones[{i}].spines/atsw.uplinks_per_ctsw"),
                    format!(
                        "an ATSW's ECMP group towards zone {:?} would have spines x atsw.uplinks_per_ctsw = \
                         {spines} x {upc} = {} members; at most {MAX_GROUP} are allowed",
                        z.name,
                        spines * upc
                    ),
                );
            }
        }
        if let Some((count, upc)) = atsw {
            // CTSW -> the ATSW layer.
            if count * upc > MAX_GROUP {
                errs.push(
                    "atsw",
                    format!(
                        "a CTSW's ECMP group towards the ATSW layer would have count x uplinks_per_ctsw = {count} x \
                         {upc} = {} members; at most {MAX_GROUP} are allowed",
                        count * upc
                    ),
                );
            }
            let total_spines: u64 = self.zones.iter().map(|z| u64::from(z.spines)).sum();
            let atsw_ports = total_spines * upc;
            if atsw_ports > MAX_SWITCH_PORTS {
                errs.push(
                    "atsw.uplinks_per_ctsw",
                    format!(
                        "an ATSW would have {atsw_ports} ports (all zones' spines {total_spines} x uplinks_per_ctsw \
                         {upc}); a switch has at most {MAX_SWITCH_PORTS} ports"
                    ),
                );
            }
        }
    }

    /// Interface and namespace name lengths (needs counts >= 1 and valid identifiers).
    fn check_names(&self, errs: &mut Errors) {
        for (i, z) in self.zones.iter().enumerate() {
            for (name, what) in zone_node_names(z) {
                let ns = format!("{}-{name}", self.prefix);
                if ns.len() > MAX_NETNS_LEN {
                    errs.push(
                        &format!("zones[{i}]"),
                        format!(
                            "namespace name {ns:?} (of {what}) would be {} characters; namespace names \
                             `<prefix>-<node>` must fit {MAX_NETNS_LEN}: shorten `prefix` or `zones[{i}].name`, or \
                             use fewer racks/hosts_per_rack/spines",
                            ns.len()
                        ),
                    );
                    break; // the longest name comes first; one report per zone is enough
                }
            }
            for (ifname, what) in zone_ifnames(z, self.atsw.as_ref().map(|a| (a.count, a.uplinks_per_ctsw))) {
                if ifname.len() > MAX_IFNAME_LEN {
                    errs.push(
                        &format!("zones[{i}]"),
                        format!(
                            "interface name {ifname:?} (on {what}) would be {} characters; Linux allows at most \
                             {MAX_IFNAME_LEN} (IFNAMSIZ): shorten `zones[{i}].name`, or use fewer \
                             racks/hosts_per_rack/spines or parallel links",
                            ifname.len()
                        ),
                    );
                    break;
                }
            }
        }
        if let Some(a) = &self.atsw {
            let node = format!("a{}", a.count - 1);
            let ns = format!("{}-{node}", self.prefix);
            if ns.len() > MAX_NETNS_LEN {
                errs.push(
                    "atsw.count",
                    format!(
                        "namespace name {ns:?} (of the last ATSW) would be {} characters; namespace names must fit \
                         {MAX_NETNS_LEN}: shorten `prefix` or use fewer ATSWs",
                        ns.len()
                    ),
                );
            }
            // A CTSW's port towards the last ATSW (longer names towards CTSWs are per zone above).
            let ifname = format!("{node}{}", parallel_suffix(a.uplinks_per_ctsw));
            if ifname.len() > MAX_IFNAME_LEN {
                errs.push(
                    "atsw",
                    format!(
                        "interface name {ifname:?} (on a CTSW, towards the last ATSW) would be {} characters; Linux \
                         allows at most {MAX_IFNAME_LEN}",
                        ifname.len()
                    ),
                );
            }
        }
    }

    /// Node indices are encoded in 16 bits of the MAC addresses.
    fn check_node_count(&self, errs: &mut Errors) {
        let nodes = self.node_count();
        if nodes > MAX_NODES {
            errs.push(
                "zones",
                format!(
                    "the topology has {nodes} nodes (hosts and switches); at most {MAX_NODES} are supported (MAC \
                     addresses encode the node index in 16 bits)"
                ),
            );
        }
    }

    fn check_addressing(&self, counts_ok: bool, errs: &mut Errors) {
        let a = &self.addressing;
        // Only size the plan when the counts are sane; otherwise the link count means nothing.
        let links = if counts_ok { Some(self.link_count()) } else { None };

        let v4 = u128::from(u32::from(a.ipv4));
        let (v4_base, v4_base_len) = (u128::from(u32::from(IPV4_RANGE.0)), IPV4_RANGE.1);
        check_plan(
            errs,
            AddrPlan {
                family: "ipv4",
                bits: 32,
                addr: v4,
                addr_text: a.ipv4.to_string(),
                len: a.ipv4_prefix_len,
                range: (v4_base, v4_base_len),
                range_text: format!("{}/{}", IPV4_RANGE.0, IPV4_RANGE.1),
                per_link: 31,
                links,
                aligned_text: |n| Ipv4Addr::from(n as u32).to_string(),
            },
        );
        let v6 = u128::from(a.ipv6);
        let (v6_base, v6_base_len) = (u128::from(IPV6_RANGE.0), IPV6_RANGE.1);
        check_plan(
            errs,
            AddrPlan {
                family: "ipv6",
                bits: 128,
                addr: v6,
                addr_text: a.ipv6.to_string(),
                len: a.ipv6_prefix_len,
                range: (v6_base, v6_base_len),
                range_text: format!("{}/{}", IPV6_RANGE.0, IPV6_RANGE.1),
                per_link: 127,
                links,
                aligned_text: |n| Ipv6Addr::from(n).to_string(),
            },
        );
    }

    /// Number of links (veth pairs): host links, RTSW-CTSW links, CTSW-ATSW links.
    pub fn link_count(&self) -> u64 {
        let mut links: u64 = 0;
        let mut total_spines: u64 = 0;
        for z in &self.zones {
            let racks = u64::from(z.racks);
            links += racks * u64::from(z.hosts_per_rack);
            links += racks * u64::from(z.spines) * u64::from(z.uplinks_per_spine);
            total_spines += u64::from(z.spines);
        }
        if let Some(a) = &self.atsw {
            links += total_spines * u64::from(a.count) * u64::from(a.uplinks_per_ctsw);
        }
        links
    }

    /// Number of nodes (namespaces): hosts, RTSWs, CTSWs and ATSWs.
    pub fn node_count(&self) -> u64 {
        let zones: u64 = self
            .zones
            .iter()
            .map(|z| u64::from(z.racks) * (1 + u64::from(z.hosts_per_rack)) + u64::from(z.spines))
            .sum();
        zones + self.atsw.as_ref().map_or(0, |a| u64::from(a.count))
    }
}

/// A testbed prefix given on the command line (`--prefix`), checked as a topology's `prefix` is:
/// it names the testbed's folders under /run/fabric and /sys/fs/bpf/fabric, which `down` removes,
/// so `..`, a slash or an empty name must never reach them.
pub fn parse_prefix(s: &str) -> Result<String, String> {
    parse_prefix_up_to(s, MAX_PREFIX_LEN, "a testbed prefix")
}

/// [`parse_prefix`] of at most `max` characters; `what` names the prefix in the error.
pub fn parse_prefix_up_to(s: &str, max: usize, what: &str) -> Result<String, String> {
    check_ident(s, max)
        .map(|()| s.to_string())
        .map_err(|wrong| format!("{s:?} {wrong}; {what} is 1..={max} characters of [a-z0-9] starting with a letter"))
}

/// Checks an identifier: 1..=max chars of [a-z0-9], starting with a letter. Err says what is wrong.
fn check_ident(s: &str, max: usize) -> Result<(), String> {
    if s.is_empty() {
        return Err("is empty".into());
    }
    if s.len() > max {
        return Err(format!("is {} characters long, too long", s.chars().count()));
    }
    if let Some(c) = s.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit())) {
        return Err(format!("contains {c:?}, which is not allowed"));
    }
    if !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err("does not start with a letter".into());
    }
    Ok(())
}

/// The `.k` suffix of the last of `n` parallel links (none for a single link), as `plan` names them.
fn parallel_suffix(n: u32) -> String {
    if n > 1 { format!(".{}", n - 1) } else { String::new() }
}

/// The longest node names of a zone (highest indices), longest first, with what they are.
fn zone_node_names(z: &Zone) -> Vec<(String, &'static str)> {
    let (r, h, c) = (z.racks - 1, z.hosts_per_rack - 1, z.spines - 1);
    let mut v = vec![
        (format!("{}r{r}h{h}", z.name), "the last host"),
        (format!("{}r{r}", z.name), "the last RTSW"),
        (format!("{}c{c}", z.name), "the last CTSW"),
    ];
    v.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    v
}

/// The longest interface names involving a zone, longest first: every port is named after the
/// neighbour, plus `.k` on parallel links.
fn zone_ifnames(z: &Zone, atsw: Option<(u32, u32)>) -> Vec<(String, &'static str)> {
    let (r, h, c) = (z.racks - 1, z.hosts_per_rack - 1, z.spines - 1);
    let ups = parallel_suffix(z.uplinks_per_spine);
    let mut v = vec![
        (format!("{}r{r}", z.name), "a host, towards its RTSW"),
        (format!("{}r{r}h{h}", z.name), "an RTSW, towards its last host"),
        (format!("{}c{c}{ups}", z.name), "an RTSW, towards the last CTSW"),
        (format!("{}r{r}{ups}", z.name), "a CTSW, towards the last RTSW"),
    ];
    if let Some((_, upc)) = atsw {
        v.push((format!("{}c{c}{}", z.name, parallel_suffix(upc)), "an ATSW, towards the zone's last CTSW"));
    }
    v.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    v
}

/// One address family's plan, as numbers.
struct AddrPlan<F: Fn(u128) -> String> {
    family: &'static str,
    bits: u8,
    addr: u128,
    addr_text: String,
    len: u8,
    range: (u128, u8),
    range_text: String,
    /// Prefix length of one link's subnet (31 or 127): each link takes 2 addresses.
    per_link: u8,
    links: Option<u64>,
    aligned_text: F,
}

fn check_plan<F: Fn(u128) -> String>(errs: &mut Errors, p: AddrPlan<F>) {
    let fam = p.family;
    let len_path = format!("addressing.{fam}_prefix_len");
    let addr_path = format!("addressing.{fam}");
    let (range_base, range_len) = p.range;
    let allowed = format!("{range_len}..={}", p.per_link);
    let mask = |len: u8| -> u128 {
        // Network mask of `len` bits within a `bits`-bit address.
        let all = if p.bits == 128 { u128::MAX } else { (1u128 << p.bits) - 1 };
        if len == 0 { 0 } else { all & !((1u128 << (p.bits - len)) - 1) }
    };
    if p.len > p.per_link {
        errs.push(
            &len_path,
            format!("{} is too long; allowed: {allowed} (every link needs a /{} of 2 addresses)", p.len, p.per_link),
        );
        return;
    }
    if p.len < range_len || p.addr & mask(range_len) != range_base {
        let path = if p.len < range_len { &len_path } else { &addr_path };
        errs.push(
            path,
            format!(
                "the plan {}/{} is not inside {}; the whole plan (address and prefix length {allowed}) must lie \
                 inside it",
                p.addr_text, p.len, p.range_text
            ),
        );
        return;
    }
    let host_bits = p.addr & !mask(p.len);
    if host_bits != 0 {
        errs.push(
            &addr_path,
            format!(
                "{} is not aligned to its prefix length /{} (host bits are set); use {}",
                p.addr_text,
                p.len,
                (p.aligned_text)(p.addr & mask(p.len))
            ),
        );
        return;
    }
    if let Some(links) = p.links {
        // 2^(bits - len) addresses, 2 per link.
        let fit: u128 = 1u128 << (p.bits - p.len - 1);
        if u128::from(links) > fit {
            // Longest prefix that still fits: 2^(per_link - len) >= links.
            let need_bits = 64 - (links - 1).leading_zeros() as u8; // ceil(log2(links))
            let need_len = p.per_link.saturating_sub(need_bits);
            let hint = if need_len >= range_len {
                format!("use a prefix length of at most /{need_len}")
            } else {
                format!("even {} is too small; the topology is too large", p.range_text)
            };
            errs.push(
                &len_path,
                format!(
                    "the plan {}/{} is too small: the topology has {links} links, each needing 2 {fam} addresses \
                     (a /{}), but only {fit} links fit; {hint}",
                    p.addr_text, p.len, p.per_link
                ),
            );
        }
    }
}

/// Collected problems, each `path: message`.
#[derive(Default)]
struct Errors(Vec<String>);

impl Errors {
    fn push(&mut self, path: &str, message: String) {
        self.0.push(format!("{path}: {message}"));
    }

    fn into_result(self) -> Result<(), String> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.into_iter().next().unwrap_or_default()),
            n => Err(format!("{n} problems:\n  {}", self.0.join("\n  "))),
        }
    }
}

/// The path (`zones[1].racks`, `tiers.rtsw.hash`) of the field a TOML/serde error points at, so
/// that syntax and type errors name the field like the semantic ones do. `None` if the text does
/// not parse as TOML, or the error points at the whole document (a missing top-level field,
/// whose name the message already gives).
pub(super) fn toml_error_path(text: &str, err: &toml::de::Error) -> Option<String> {
    use std::ops::Range;

    use toml::de::{DeTable, DeValue};

    /// Finds the key or scalar value at `at` (exact), remembering in `container` the innermost
    /// table/array element whose span (for `[header]` tables: the header) contains it.
    fn search(value: &DeValue<'_>, path: &str, at: usize, container: &mut Option<String>) -> Option<String> {
        /// (path, key span (tables only), value span, value) of each child.
        type Child<'a, 'i> = (String, Option<Range<usize>>, Range<usize>, &'a DeValue<'i>);
        let children: Vec<Child<'_, '_>> = match value {
            DeValue::Table(t) => t
                .iter()
                .map(|(k, v)| {
                    let p = if path.is_empty() { k.get_ref().to_string() } else { format!("{path}.{}", k.get_ref()) };
                    (p, Some(k.span()), v.span(), v.get_ref())
                })
                .collect(),
            DeValue::Array(a) => {
                a.iter().enumerate().map(|(i, v)| (format!("{path}[{i}]"), None, v.span(), v.get_ref())).collect()
            }
            _ => return None,
        };
        for (p, key_span, value_span, v) in children {
            if key_span.is_some_and(|s| s.contains(&at)) {
                return Some(p);
            }
            let is_container = matches!(v, DeValue::Table(_) | DeValue::Array(_));
            if value_span.contains(&at) {
                if !is_container {
                    return Some(p);
                }
                *container = Some(p.clone());
            }
            if is_container && let Some(found) = search(v, &p, at, container) {
                return Some(found);
            }
        }
        None
    }

    let at = err.span()?;
    if at.is_empty() {
        return None;
    }
    let doc = DeTable::parse(text).ok()?;
    let mut container = None;
    search(&DeValue::Table(doc.into_inner()), "", at.start, &mut container).or(container)
}
