//! `fabric analyze CAPTURE`: the RoCEv2 flows and QPs of a packet capture, their entropy as ECMP
//! sees it and the uplink load each hash mode would give them.
//!
//! Everything the answer depends on is the switch's own code: each frame is parsed with
//! [`fabric_common::parse::parse_packet`] (the XDP program's parser) and each QP's member is
//! [`fabric_common::hash::select_member`] under a [`SwitchConfig`] with the given mode, seed and
//! `pin_shift`, for a group of `--uplinks` members — exactly what an RTSW configured that way
//! picks for those packets. A capture of a real fabric (a port mirror) therefore shows how its
//! traffic would spread over our switches' uplinks, and a capture of a testbed with the RTSW's
//! seed and group size (`--switch`) shows how it did.
//!
//! The analysis is pure over frames ([`classify`], [`Analyzer`]); [`read_capture`] feeds it pcap
//! or pcapng files (any mix of interfaces and link types). Frames are classified as:
//! - RoCE: parsed, UDP destination port 4791, the BTH captured in full. Link types other than
//!   Ethernet that carry IP with an EtherType or a version nibble (Linux cooked capture v1 and
//!   v2, raw IP, BSD loopback) are given an Ethernet header first (MAC addresses are not hashed).
//!   A frame cut by the snap length counts when its headers up to the BTH were captured: it is
//!   parsed padded to its original length, and its original length is what it weighs.
//! - skipped, by reason (the keys of [`Report::skipped`]): `not_ethernet_link_type` (a link type
//!   we cannot turn into Ethernet), `not_ip`, `not_roce` (IP that is not UDP to port 4791,
//!   including IPv6 with extension headers, which the switch does not walk either),
//!   `ip_fragment` (a non-first IPv4 fragment or an IPv6 fragment: no ports to classify it by),
//!   `truncated_before_bth` (the capture ends before the headers that say whether it is RoCE,
//!   or before the end of its BTH), and `malformed:<reason>` with the switch's
//!   [`DropReason`] name (a frame the switch would drop as malformed).
pub mod chart;
pub mod cli;
pub mod report;

use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet},
    io::Read,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::Path,
};

use anyhow::{Context as _, Result, bail, ensure};
use fabric_common::{
    config::{HashMode, SwitchConfig},
    counters::DropReason,
    hash::{FlowKey, select_member},
    parse::{IpHeader, ParseError, ParsedPacket, parse_packet},
    wire::{bth, ethernet, ipv4, udp},
};
use pcap_file::DataLink;
use serde::Serialize;

use crate::model::balance::imbalance;

/// The JSON schema of [`Report`] (documented in `docs` of each field and in README.md).
pub const SCHEMA: &str = "fabric.analyze/1";

/// Why a frame is not counted as RoCE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    NotEthernetLinkType,
    NotIp,
    NotRoce,
    IpFragment,
    TruncatedBeforeBth,
    Malformed(DropReason),
}

impl Skip {
    pub fn name(self) -> String {
        match self {
            Skip::NotEthernetLinkType => "not_ethernet_link_type".into(),
            Skip::NotIp => "not_ip".into(),
            Skip::NotRoce => "not_roce".into(),
            Skip::IpFragment => "ip_fragment".into(),
            Skip::TruncatedBeforeBth => "truncated_before_bth".into(),
            Skip::Malformed(r) => format!("malformed:{}", r.as_str()),
        }
    }
}

/// A frame counted as RoCE: the switch's parse of it and its length on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceFrame {
    pub pkt: ParsedPacket,
    /// The Ethernet frame's original length (without FCS): what the uplink carries.
    pub wire_len: u64,
}

/// The most a snap-length-truncated frame is padded by (larger "original lengths" are bogus).
const MAX_PAD: usize = 65_536;

/// Turns a frame of `linktype` into an Ethernet frame, or says why not.
pub fn to_ethernet(linktype: DataLink, data: &[u8]) -> Result<Cow<'_, [u8]>, Skip> {
    let with_ethertype = |ethertype: u16, payload: &[u8]| {
        let mut f = Vec::with_capacity(ethernet::HEADER_LEN + payload.len());
        f.extend_from_slice(&[0; 12]);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        Cow::Owned(f)
    };
    let by_version = |payload: &[u8]| match payload.first().map(|b| b >> 4) {
        Some(4) => Ok(with_ethertype(ethernet::ETHERTYPE_IPV4, payload)),
        Some(6) => Ok(with_ethertype(ethernet::ETHERTYPE_IPV6, payload)),
        Some(_) => Err(Skip::NotIp),
        None => Err(Skip::TruncatedBeforeBth),
    };
    match linktype {
        DataLink::ETHERNET => Ok(Cow::Borrowed(data)),
        // Linux cooked capture v1: 16-byte header, the protocol (an EtherType) in its last two.
        DataLink::LINUX_SLL => match data.get(14..16) {
            Some(p) => Ok(with_ethertype(u16::from_be_bytes([p[0], p[1]]), &data[16..])),
            None => Err(Skip::TruncatedBeforeBth),
        },
        // v2: 20 bytes, the protocol first.
        DataLink::LINUX_SLL2 => match (data.get(0..2), data.get(20..)) {
            (Some(p), Some(rest)) => Ok(with_ethertype(u16::from_be_bytes([p[0], p[1]]), rest)),
            _ => Err(Skip::TruncatedBeforeBth),
        },
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => by_version(data),
        // BSD loopback: a 4-byte address family in host (NULL) or network (LOOP) order.
        DataLink::NULL | DataLink::LOOP => match data.get(4..) {
            Some(rest) => by_version(rest),
            None => Err(Skip::TruncatedBeforeBth),
        },
        _ => Err(Skip::NotEthernetLinkType),
    }
}

/// Offset of the L4 header of a parsed packet.
fn l4_offset(p: &ParsedPacket) -> usize {
    p.l3_offset
        + match p.ip {
            IpHeader::V4 { header_len, .. } => header_len as usize,
            IpHeader::V6 { .. } => 40,
        }
}

/// True for a packet that is a fragment without its L4 header (IPv4 offset non-zero, or any
/// IPv6 fragment).
fn later_fragment(frame: &[u8], p: &ParsedPacket) -> bool {
    match p.ip {
        IpHeader::V4 { .. } => {
            let at = p.l3_offset + ipv4::FLAGS_FRAG.start;
            frame.get(at..at + 2).is_some_and(|b| u16::from_be_bytes([b[0], b[1]]) & ipv4::FRAG_OFFSET_MASK != 0)
        }
        IpHeader::V6 { .. } => p.protocol == 44,
    }
}

/// Classifies one captured frame: `data` as captured (`linktype` framing), `orig_len` its length
/// before the snap length cut it.
pub fn classify(linktype: DataLink, data: &[u8], orig_len: u32) -> Result<RoceFrame, Skip> {
    let eth = to_ethernet(linktype, data)?;
    let missing = (orig_len as usize).saturating_sub(data.len()).min(MAX_PAD);
    let captured = eth.len();
    let wire_len = (captured + missing) as u64;
    if missing == 0 {
        return match parse_packet(&eth[..]) {
            Ok(p) if p.bth.is_some() => Ok(RoceFrame { pkt: p, wire_len }),
            Ok(p) if later_fragment(&eth, &p) => Err(Skip::IpFragment),
            Ok(_) => Err(Skip::NotRoce),
            Err(ParseError::NotIp { .. }) => Err(Skip::NotIp),
            Err(ParseError::Malformed(r)) => Err(Skip::Malformed(r)),
        };
    }
    // Cut by the snap length: parse it at its original length, then check that what decided
    // the answer was captured rather than padding.
    if captured < ethernet::HEADER_LEN {
        return Err(Skip::TruncatedBeforeBth);
    }
    let mut padded = eth.into_owned();
    padded.resize(captured + missing, 0);
    match parse_packet(&padded[..]) {
        Ok(p) => {
            let l4 = l4_offset(&p);
            if l4 > captured {
                return Err(Skip::TruncatedBeforeBth);
            }
            if p.bth.is_some() {
                return if l4 + udp::HEADER_LEN + bth::HEADER_LEN <= captured {
                    Ok(RoceFrame { pkt: p, wire_len })
                } else {
                    Err(Skip::TruncatedBeforeBth)
                };
            }
            if later_fragment(&padded, &p) {
                Err(Skip::IpFragment)
            } else if p.protocol == ipv4::PROTO_UDP && l4 + udp::DST_PORT.end > captured {
                Err(Skip::TruncatedBeforeBth)
            } else {
                Err(Skip::NotRoce)
            }
        }
        Err(ParseError::NotIp { .. }) => {
            if captured < ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN && padded[12..14] == [0x81, 0x00] {
                Err(Skip::TruncatedBeforeBth)
            } else {
                Err(Skip::NotIp)
            }
        }
        // The same complaint about what was captured: really malformed. Anything else: the
        // padding is to blame, the headers were not captured.
        Err(ParseError::Malformed(r)) => match parse_packet(&padded[..captured]) {
            Err(ParseError::Malformed(r2)) if r2 == r => Err(Skip::Malformed(r)),
            _ => Err(Skip::TruncatedBeforeBth),
        },
    }
}

/// A QP as the fabric sees it: one direction of a connection, i.e. the five-tuple plus the BTH
/// destination QP (the protocol is always UDP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QpKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub dest_qp: u32,
}

impl QpKey {
    pub fn of(pkt: &ParsedPacket) -> Option<Self> {
        let (src, dst) = match pkt.ip {
            IpHeader::V4 { src, dst, .. } => (IpAddr::V4(Ipv4Addr::from(src)), IpAddr::V4(Ipv4Addr::from(dst))),
            IpHeader::V6 { src, dst, .. } => (IpAddr::V6(Ipv6Addr::from(src)), IpAddr::V6(Ipv6Addr::from(dst))),
        };
        let (src_port, dst_port) = pkt.ports?;
        Some(QpKey { src, dst, src_port, dst_port, dest_qp: pkt.bth?.dest_qp })
    }
}

#[derive(Clone, Debug)]
struct QpAcc {
    /// The first packet's parse: every hash input of every mode is part of [`QpKey`], so the
    /// switch picks for each packet of the QP what it picks for this one.
    rep: ParsedPacket,
    packets: u64,
    bytes: u64,
    opcodes: BTreeSet<u8>,
    vlans: BTreeSet<u16>,
}

/// Accumulates frames; [`Analyzer::report`] computes the answer for a group.
#[derive(Clone, Debug, Default)]
pub struct Analyzer {
    frames: u64,
    captured_bytes: u64,
    link_types: BTreeMap<String, u64>,
    skipped: BTreeMap<String, u64>,
    qps: BTreeMap<QpKey, QpAcc>,
    roce_packets: u64,
    roce_bytes: u64,
    /// The capture ended inside a record (see [`Report::cut_short`]).
    cut_short: bool,
}

/// What to predict for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Group {
    /// ECMP group size (an RTSW's uplinks).
    pub uplinks: u32,
    /// The switch's hash seed.
    pub seed: u32,
    /// `pin` mode's shift (the testbed installs 1).
    pub pin_shift: u32,
    #[serde(serialize_with = "modes_ser")]
    pub modes: Vec<HashMode>,
}

fn modes_ser<S: serde::Serializer>(m: &[HashMode], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(m.iter().map(|m| m.as_str()))
}

impl Group {
    pub fn config(&self, mode: HashMode) -> SwitchConfig {
        SwitchConfig::new(mode, self.seed, self.pin_shift)
    }
}

/// One five-tuple (one direction), with the QPs it carries.
#[derive(Clone, Debug, Serialize)]
pub struct FlowReport {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    /// BTH destination QPs seen, ascending.
    pub dest_qps: Vec<u32>,
    pub packets: u64,
    /// Original frame lengths, summed.
    pub bytes: u64,
    /// Opcode names (e.g. `RC_WRITE_FIRST`; `0xNN` for others), ascending by value.
    pub opcodes: Vec<String>,
    /// VLAN ids seen (empty: untagged).
    pub vlans: Vec<u16>,
    /// Per hash mode, the distinct members its QPs are predicted on (one unless `eecmp` spreads
    /// them).
    pub members: BTreeMap<&'static str, Vec<u32>>,
}

/// One QP (five-tuple + destination QP).
#[derive(Clone, Debug, Serialize)]
pub struct QpReport {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub dest_qp: u32,
    pub packets: u64,
    pub bytes: u64,
    pub opcodes: Vec<String>,
    pub vlans: Vec<u16>,
    /// Per hash mode, the predicted member (`select_member` on the QP's packets).
    pub members: BTreeMap<&'static str, u32>,
}

/// The prediction for one hash mode.
#[derive(Clone, Debug, Serialize)]
pub struct ModeReport {
    pub mode: &'static str,
    /// Distinct hash inputs among the QPs: FlowKeys (`five-tuple`, `eecmp`), destination
    /// slices `dst >> pin_shift` (`pin`).
    pub hash_inputs: usize,
    /// Shannon entropy (bits) of the hash inputs, weighted by bytes.
    pub input_entropy_bits: f64,
    /// Shannon entropy (bits) of the member choice, weighted by bytes; at most `log2(uplinks)`.
    pub member_entropy_bits: f64,
    pub max_entropy_bits: f64,
    /// Predicted RoCE packets, bytes and QPs per member (index = member of the group).
    pub uplink_packets: Vec<u64>,
    pub uplink_bytes: Vec<u64>,
    pub uplink_qps: Vec<u64>,
    /// Bytes of the busiest member over the mean (1 is perfect); NaN (null in JSON) when the
    /// capture holds no RoCE bytes.
    pub max_over_mean: f64,
    /// Jain's fairness index of the bytes (1 is perfect, 1/uplinks is everything on one); NaN
    /// (null) when the capture holds no RoCE bytes.
    pub jain: f64,
}

/// The answer, as `--json` writes it (schema [`SCHEMA`]).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub capture: String,
    /// `pcap` or `pcapng`.
    pub format: String,
    pub frames: u64,
    /// Bytes as captured (after any snap length).
    pub captured_bytes: u64,
    /// Frames per link type (`ETHERNET`, `LINUX_SLL`, ...).
    pub link_types: BTreeMap<String, u64>,
    pub roce_packets: u64,
    pub roce_bytes: u64,
    /// Frames not counted, by reason (see the module docs).
    pub skipped: BTreeMap<String, u64>,
    pub group: Group,
    pub flows: Vec<FlowReport>,
    pub qps: Vec<QpReport>,
    pub modes: Vec<ModeReport>,
    /// The file ends inside a record (a capture still being written, or cut short by a copy or
    /// a kill): the whole records before it are analysed, and the cut one is not.
    pub cut_short: bool,
}

/// A readable name of a BTH opcode.
pub fn opcode_name(op: u8) -> String {
    use bth::opcode::*;
    let name = match op {
        RC_SEND_FIRST => "RC_SEND_FIRST",
        RC_SEND_MIDDLE => "RC_SEND_MIDDLE",
        RC_SEND_LAST => "RC_SEND_LAST",
        0x03 => "RC_SEND_LAST_IMM",
        RC_SEND_ONLY => "RC_SEND_ONLY",
        0x05 => "RC_SEND_ONLY_IMM",
        RC_WRITE_FIRST => "RC_WRITE_FIRST",
        RC_WRITE_MIDDLE => "RC_WRITE_MIDDLE",
        RC_WRITE_LAST => "RC_WRITE_LAST",
        0x09 => "RC_WRITE_LAST_IMM",
        RC_WRITE_ONLY => "RC_WRITE_ONLY",
        0x0B => "RC_WRITE_ONLY_IMM",
        RC_READ_REQUEST => "RC_READ_REQUEST",
        RC_READ_RESPONSE_FIRST => "RC_READ_RESPONSE_FIRST",
        RC_READ_RESPONSE_MIDDLE => "RC_READ_RESPONSE_MIDDLE",
        RC_READ_RESPONSE_LAST => "RC_READ_RESPONSE_LAST",
        RC_READ_RESPONSE_ONLY => "RC_READ_RESPONSE_ONLY",
        RC_ACK => "RC_ACK",
        0x12 => "RC_ATOMIC_ACK",
        0x13 => "RC_CMP_SWAP",
        0x14 => "RC_FETCH_ADD",
        0x64 => "UD_SEND_ONLY",
        0x65 => "UD_SEND_ONLY_IMM",
        CNP => "CNP",
        _ => return format!("0x{op:02X}"),
    };
    name.to_string()
}

/// Shannon entropy in bits of a distribution given by weights.
pub fn entropy_bits(weights: impl IntoIterator<Item = u64>) -> f64 {
    let w: Vec<f64> = weights.into_iter().filter(|&x| x > 0).map(|x| x as f64).collect();
    let total: f64 = w.iter().sum();
    if total == 0.0 {
        return 0.0;
    }
    let h: f64 = w.iter().map(|x| x / total).map(|p| -p * p.log2()).sum();
    // One outcome gives -0.0 (and rounding a hair below zero): print it as 0.
    if h > 0.0 { h } else { 0.0 }
}

/// What `pin` mode indexes by: the destination's low 32 bits, shifted.
fn pin_input(pkt: &ParsedPacket, shift: u32) -> u32 {
    let low = match pkt.ip {
        IpHeader::V4 { dst, .. } => u32::from_be_bytes(dst),
        IpHeader::V6 { dst, .. } => u32::from_be_bytes([dst[12], dst[13], dst[14], dst[15]]),
    };
    low >> (shift & 31)
}

impl Analyzer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one captured frame.
    pub fn push(&mut self, linktype: DataLink, data: &[u8], orig_len: u32) {
        self.frames += 1;
        self.captured_bytes += data.len() as u64;
        *self.link_types.entry(format!("{linktype:?}")).or_default() += 1;
        match classify(linktype, data, orig_len) {
            Ok(f) => self.push_roce(&f),
            Err(s) => *self.skipped.entry(s.name()).or_default() += 1,
        }
    }

    /// Adds a frame already classified as RoCE.
    pub fn push_roce(&mut self, f: &RoceFrame) {
        let (Some(key), Some(b)) = (QpKey::of(&f.pkt), f.pkt.bth) else { return };
        let acc = self.qps.entry(key).or_insert_with(|| QpAcc {
            rep: f.pkt,
            packets: 0,
            bytes: 0,
            opcodes: BTreeSet::new(),
            vlans: BTreeSet::new(),
        });
        acc.packets += 1;
        acc.bytes += f.wire_len;
        acc.opcodes.insert(b.opcode);
        if let Some(tci) = f.pkt.vlan_tci {
            acc.vlans.insert(ethernet::tci_vid(tci));
        }
        self.roce_packets += 1;
        self.roce_bytes += f.wire_len;
    }

    pub fn skipped(&self) -> BTreeMap<String, u64> {
        self.skipped.clone()
    }

    /// The report for `group` (uplinks must be at least 1).
    pub fn report(&self, capture: &str, format: &str, group: &Group) -> Report {
        let n = group.uplinks.max(1);
        let modes: Vec<HashMode> = if group.modes.is_empty() { HashMode::ALL.to_vec() } else { group.modes.clone() };
        // Member of every QP under every mode: the kernel's function on the kernel's parse.
        let member = |mode: HashMode, acc: &QpAcc| select_member(&group.config(mode), &acc.rep, n);

        let qps: Vec<QpReport> = self
            .qps
            .iter()
            .map(|(k, a)| QpReport {
                src: k.src,
                dst: k.dst,
                src_port: k.src_port,
                dst_port: k.dst_port,
                dest_qp: k.dest_qp,
                packets: a.packets,
                bytes: a.bytes,
                opcodes: a.opcodes.iter().map(|&o| opcode_name(o)).collect(),
                vlans: a.vlans.iter().copied().collect(),
                members: modes.iter().map(|&m| (m.as_str(), member(m, a))).collect(),
            })
            .collect();

        let mut flows: BTreeMap<(IpAddr, IpAddr, u16, u16), FlowReport> = BTreeMap::new();
        let mut flow_opcodes: BTreeMap<(IpAddr, IpAddr, u16, u16), BTreeSet<u8>> = BTreeMap::new();
        for (k, a) in &self.qps {
            let fk = (k.src, k.dst, k.src_port, k.dst_port);
            let f = flows.entry(fk).or_insert_with(|| FlowReport {
                src: k.src,
                dst: k.dst,
                src_port: k.src_port,
                dst_port: k.dst_port,
                dest_qps: Vec::new(),
                packets: 0,
                bytes: 0,
                opcodes: Vec::new(),
                vlans: Vec::new(),
                members: BTreeMap::new(),
            });
            f.dest_qps.push(k.dest_qp);
            f.packets += a.packets;
            f.bytes += a.bytes;
            for v in &a.vlans {
                if !f.vlans.contains(v) {
                    f.vlans.push(*v);
                }
            }
            for &m in &modes {
                let v = f.members.entry(m.as_str()).or_default();
                let x = member(m, a);
                if !v.contains(&x) {
                    v.push(x);
                }
            }
            flow_opcodes.entry(fk).or_default().extend(a.opcodes.iter().copied());
        }
        let flows: Vec<FlowReport> = flows
            .into_iter()
            .map(|(fk, mut f)| {
                f.opcodes = flow_opcodes[&fk].iter().map(|&o| opcode_name(o)).collect();
                f.vlans.sort_unstable();
                f.members.values_mut().for_each(|v| v.sort_unstable());
                f
            })
            .collect();

        let mode_reports = modes
            .iter()
            .map(|&mode| {
                let mut packets = vec![0u64; n as usize];
                let mut bytes = vec![0u64; n as usize];
                let mut qp_count = vec![0u64; n as usize];
                let mut inputs: BTreeMap<[u8; FlowKey::LEN], u64> = BTreeMap::new();
                for a in self.qps.values() {
                    let m = member(mode, a) as usize;
                    packets[m] += a.packets;
                    bytes[m] += a.bytes;
                    qp_count[m] += 1;
                    let input = match mode {
                        HashMode::Pin => {
                            let mut b = [0u8; FlowKey::LEN];
                            b[..4].copy_from_slice(&pin_input(&a.rep, group.pin_shift).to_be_bytes());
                            b
                        }
                        _ => FlowKey::for_packet(mode, &a.rep).to_bytes(),
                    };
                    *inputs.entry(input).or_default() += a.bytes;
                }
                // No RoCE bytes: no balance to speak of (not a perfect one).
                let carried = bytes.iter().any(|&b| b > 0);
                let (max_over_mean, jain) = if carried { imbalance(&bytes) } else { (f64::NAN, f64::NAN) };
                ModeReport {
                    mode: mode.as_str(),
                    hash_inputs: inputs.len(),
                    input_entropy_bits: entropy_bits(inputs.values().copied()),
                    member_entropy_bits: entropy_bits(bytes.iter().copied()),
                    max_entropy_bits: (n as f64).log2(),
                    uplink_packets: packets,
                    uplink_bytes: bytes,
                    uplink_qps: qp_count,
                    max_over_mean,
                    jain,
                }
            })
            .collect();

        Report {
            schema: SCHEMA,
            capture: capture.to_string(),
            format: format.to_string(),
            frames: self.frames,
            captured_bytes: self.captured_bytes,
            link_types: self.link_types.clone(),
            roce_packets: self.roce_packets,
            roce_bytes: self.roce_bytes,
            skipped: self.skipped(),
            group: Group { modes, ..group.clone() },
            flows,
            qps,
            modes: mode_reports,
            cut_short: self.cut_short,
        }
    }
}

/// Reads a pcap or pcapng file (told apart by their magic numbers) into `a`; returns the format.
pub fn read_capture(path: &Path, a: &mut Analyzer) -> Result<&'static str> {
    let mut file = std::fs::File::open(path).with_context(|| format!("opening capture {}", path.display()))?;
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic).with_context(|| format!("{}: too short for a capture", path.display()))?;
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    match magic {
        [0x0A, 0x0D, 0x0D, 0x0A] => {
            read_pcapng(path, file, a).with_context(|| format!("{}: corrupt pcapng", path.display()))?;
            Ok("pcapng")
        }
        [0xD4, 0xC3, 0xB2, 0xA1] | [0xA1, 0xB2, 0xC3, 0xD4] | [0x4D, 0x3C, 0xB2, 0xA1] | [0xA1, 0xB2, 0x3C, 0x4D] => {
            // pcap-file 2.0 rejects a record longer on the wire than the snap length, which is
            // every record a snap length cut: present it a header without a limit.
            let mut r = pcap_file::pcap::PcapReader::new(NoSnaplen { inner: file, pos: 0 })
                .with_context(|| format!("{} is not a pcap file", path.display()))?;
            let linktype = r.header().datalink;
            let little_endian = matches!(magic, [0xD4, 0xC3, 0xB2, 0xA1] | [0x4D, 0x3C, 0xB2, 0xA1]);
            // Where the next record starts: the file header, then each record's 16-byte header
            // and captured bytes.
            let mut at = 24u64;
            while let Some(pkt) = r.next_packet() {
                match pkt {
                    Ok(pkt) => {
                        at += 16 + pkt.data.len() as u64;
                        a.push(linktype, &pkt.data, pkt.orig_len);
                    }
                    Err(e) => {
                        if cut_inside(&e, path, at, LengthAt::PCAP, little_endian)? {
                            a.cut_short = true;
                            break;
                        }
                        return Err(e).with_context(|| {
                            format!(
                                "{}: corrupt record {} (after {} whole ones)",
                                path.display(),
                                a.frames + 1,
                                a.frames
                            )
                        });
                    }
                }
            }
            Ok("pcap")
        }
        other => bail!("{}: not a pcap or pcapng file (magic {:02x?})", path.display(), other),
    }
}

/// Where a record's length field is: bytes 8..12 of a pcap record (its captured length),
/// bytes 4..8 of a pcapng block (its total length).
#[derive(Clone, Copy)]
struct LengthAt(u64);

impl LengthAt {
    const PCAP: Self = Self(8);
    const PCAPNG: Self = Self(4);
}

/// The largest record a cut may leave unfinished; a record claiming more is corrupt, not cut
/// (tcpdump's largest snap length is 256 KiB, and a pcapng block holds one such packet).
const MAX_CUT_RECORD: u64 = 1 << 20;

/// Whether reading the record at byte `at` of capture `path` failed because the file ended
/// inside it (a cut capture, or one still being written) rather than because it is corrupt:
/// the reader ran out of bytes (`e`), and the length the record declares, if the file holds it,
/// is one a record may have. What the reader met decides, not the file's size now, which a
/// capture still being written may have grown since. (A corrupt length too large for the
/// reader's buffer also runs it out of bytes: the length tells the two apart.)
fn cut_inside(
    e: &pcap_file::PcapError,
    path: &Path,
    at: u64,
    length_at: LengthAt,
    little_endian: bool,
) -> Result<bool> {
    use std::io::{Seek as _, SeekFrom};
    let out_of_bytes = match e {
        pcap_file::PcapError::IncompleteBuffer => true,
        pcap_file::PcapError::IoError(io) => io.kind() == std::io::ErrorKind::UnexpectedEof,
        _ => false,
    };
    if !out_of_bytes {
        return Ok(false);
    }
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(at + length_at.0))?;
    let mut field = [0u8; 4];
    if file.read_exact(&mut field).is_err() {
        // The file ends before the length: inside the record's header.
        return Ok(true);
    }
    Ok(u64::from(u32_in(field, little_endian)) <= MAX_CUT_RECORD)
}

/// A capture's 32-bit field in the byte order of its file (pcap) or section (pcapng).
fn u32_in(field: [u8; 4], little_endian: bool) -> u32 {
    if little_endian { u32::from_le_bytes(field) } else { u32::from_be_bytes(field) }
}

/// Where block `n` (0: the first section header) of pcapng capture `path` starts, and whether
/// its length field is little-endian; `None` if the file ends inside a section header's first
/// 12 bytes, where its byte order is (a cut, whatever its length says). The blocks before it
/// were read whole, so their lengths hold. A section header states its own byte order, which a
/// concatenation of captures from hosts of both orders may change.
fn pcapng_block(path: &Path, n: u64) -> Result<Option<(u64, bool)>> {
    use std::io::{Seek as _, SeekFrom};
    const SECTION_HEADER: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];
    let mut file = std::fs::File::open(path)?;
    let (mut at, mut little_endian) = (0u64, true);
    for block in 0..=n {
        file.seek(SeekFrom::Start(at))?;
        // The block type, its length and (in a section header) the byte-order magic.
        let mut head = [0u8; 12];
        let whole = file.read_exact(&mut head).is_ok();
        if block == n {
            if head[..4] == SECTION_HEADER {
                if !whole {
                    return Ok(None);
                }
                little_endian = head[8..] == [0x4D, 0x3C, 0x2B, 0x1A];
            }
            return Ok(Some((at, little_endian)));
        }
        ensure!(whole, "block {} was read whole but the file ends inside it", block + 1);
        if head[..4] == SECTION_HEADER {
            little_endian = head[8..] == [0x4D, 0x3C, 0x2B, 0x1A];
        }
        at += u64::from(u32_in(head[4..8].try_into().expect("4 bytes"), little_endian));
    }
    unreachable!("the loop returns at block n")
}

/// A pcap stream with the global header's snap length (bytes 16..20) read as 0xFFFFFFFF.
struct NoSnaplen<R> {
    inner: R,
    pos: u64,
}

impl<R: Read> Read for NoSnaplen<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for (i, b) in buf[..n].iter_mut().enumerate() {
            if (16..20).contains(&(self.pos + i as u64)) {
                *b = 0xFF;
            }
        }
        self.pos += n as u64;
        Ok(n)
    }
}

fn read_pcapng<R: Read>(path: &Path, r: R, a: &mut Analyzer) -> Result<()> {
    use pcap_file::pcapng::{Block, PcapNgReader};
    let mut r = PcapNgReader::new(r)?;
    // Blocks read whole: the first section header, read by `new`, and those `next_block` gave.
    let mut blocks = 1u64;
    // Link type per interface of the current section (the first section's header is read by
    // `new`; a later one starts a new interface list).
    let mut interfaces: Vec<DataLink> = r.interfaces().iter().map(|i| i.linktype).collect();
    while let Some(block) = r.next_block() {
        let block = match block {
            Ok(block) => block,
            Err(e) => {
                let cut = match pcapng_block(path, blocks)? {
                    None => true,
                    Some((at, little_endian)) => cut_inside(&e, path, at, LengthAt::PCAPNG, little_endian)?,
                };
                if cut {
                    a.cut_short = true;
                    break;
                }
                return Err(e).with_context(|| format!("block {} (after {} whole packets)", blocks + 1, a.frames));
            }
        };
        blocks += 1;
        match block {
            Block::SectionHeader(_) => interfaces.clear(),
            Block::InterfaceDescription(i) => interfaces.push(i.linktype),
            Block::EnhancedPacket(p) => {
                let lt = *interfaces.get(p.interface_id as usize).context("packet of an undeclared interface")?;
                a.push(lt, &p.data, p.original_len);
            }
            Block::SimplePacket(p) => {
                ensure!(!interfaces.is_empty(), "simple packet before any interface");
                a.push(interfaces[0], &p.data, p.original_len);
            }
            Block::Packet(p) => {
                let lt = *interfaces.get(p.interface_id as usize).context("packet of an undeclared interface")?;
                a.push(lt, &p.data, p.original_len);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads and analyses a capture.
pub fn analyze_file(path: &Path, group: &Group) -> Result<Report> {
    let mut a = Analyzer::new();
    let format = read_capture(path, &mut a)?;
    Ok(a.report(&path.display().to_string(), format, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_of_simple_distributions() {
        assert_eq!(entropy_bits([]), 0.0);
        assert!(entropy_bits([5, 0, 0]).is_sign_positive() && entropy_bits([5]) == 0.0);
        assert!((entropy_bits([1, 1, 1, 1]) - 2.0).abs() < 1e-12);
        assert!((entropy_bits([3, 1]) - 0.811_278_124_459_132_8).abs() < 1e-12);
    }

    #[test]
    fn link_types_become_ethernet_or_are_skipped() {
        let ip = [0x45u8, 0, 0, 20];
        assert_eq!(to_ethernet(DataLink::RAW, &ip).unwrap()[12..14], [0x08, 0x00]);
        assert_eq!(to_ethernet(DataLink::RAW, &[0x60]).unwrap()[12..14], [0x86, 0xDD]);
        assert_eq!(to_ethernet(DataLink::RAW, &[0x10]), Err(Skip::NotIp));
        assert_eq!(to_ethernet(DataLink::LINUX_SLL, &[0; 10]), Err(Skip::TruncatedBeforeBth));
        assert_eq!(to_ethernet(DataLink::IEEE802_11, &[0; 40]), Err(Skip::NotEthernetLinkType));
        assert!(matches!(to_ethernet(DataLink::ETHERNET, &[1, 2]), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn skip_names_use_the_switch_drop_reasons() {
        assert_eq!(Skip::Malformed(DropReason::IpLength).name(), "malformed:ip_length");
        assert_eq!(Skip::TruncatedBeforeBth.name(), "truncated_before_bth");
        // A frame cut inside its Ethernet header.
        assert_eq!(classify(DataLink::ETHERNET, &[0; 10], 100), Err(Skip::TruncatedBeforeBth));
        assert_eq!(classify(DataLink::ETHERNET, &[0; 10], 10), Err(Skip::Malformed(DropReason::TruncatedEthernet)));
    }
}
