//! Writes the seed corpus, `corpus/<target>/`, from real frames: one frame of each (opcode,
//! length) in the rxe capture (fabric-user/tests/data/rxe-rc-mixed.pcap), the frames
//! `fabric_testkit::fixture` builds for the switch tests (IPv4/IPv6, tagged or not, RoCE or plain
//! UDP, fragments, ARP), the endpoint's own packets (`RocePacketRepr::to_bytes`) and PFC frames
//! (`PauseFrame::emit`, an 802.3x PAUSE).
//!
//!   cd fabric-common/fuzz && AYA_BUILD_SKIP=1 cargo +nightly run --features user --example seeds [PCAP]
//!
//! (`cargo xtask fuzz --seeds` does this.) Each target's directory is emptied first, so the
//! result depends only on the inputs; file names say where each seed came from.
use std::{
    collections::BTreeSet,
    net::{Ipv4Addr, Ipv6Addr},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, ensure};
use fabric_common::{
    checksum::internet_checksum,
    pfc::{CLASSES, PauseFrame},
    wire::{ethernet, ipv4, udp},
};
use fabric_roce::{
    icrc::{IpPair, write_icrc},
    psn::Psn,
    wire::{AethRepr, Body, BthFields, NakCode, RethRepr, RocePacketRepr, Syndrome},
};
use fabric_testkit::{
    capture::read_pcap,
    fixture::{FrameSpec, frame, neighbour_mac, port_mac},
};

struct Corpus {
    root: PathBuf,
    written: usize,
    bytes: usize,
}

impl Corpus {
    fn add(&mut self, target: &str, name: &str, bytes: &[u8]) -> Result<()> {
        let path = self.root.join(target).join(name);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        self.written += 1;
        self.bytes += bytes.len();
        Ok(())
    }
}

fn main() -> Result<()> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let pcap = match std::env::args_os().nth(1) {
        Some(p) => PathBuf::from(p),
        None => manifest.join("../../fabric-user/tests/data/rxe-rc-mixed.pcap"),
    };
    let mut corpus = Corpus { root: manifest.join("corpus"), written: 0, bytes: 0 };
    for target in ["parse_packet", "icrc", "pfc", "roce_wire"] {
        let dir = corpus.root.join(target);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("emptying {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)?;
    }
    capture_seeds(&mut corpus, &pcap)?;
    fixture_seeds(&mut corpus)?;
    endpoint_seeds(&mut corpus)?;
    pfc_seeds(&mut corpus)?;
    println!("seeds: {} files, {} bytes under {}", corpus.written, corpus.bytes, corpus.root.display());
    Ok(())
}

/// Where the IP header and the UDP payload of an untagged IPv4 or IPv6 frame start.
fn offsets(f: &[u8]) -> (usize, usize) {
    let l3 = ethernet::HEADER_LEN;
    let l4 = if f[l3] >> 4 == 4 { l3 + (f[l3] & 0x0F) as usize * 4 } else { l3 + 40 };
    (l3, l4 + udp::HEADER_LEN)
}

fn capture_seeds(corpus: &mut Corpus, pcap: &Path) -> Result<()> {
    let frames = read_pcap(pcap).with_context(|| format!("the rxe capture {} is needed", pcap.display()))?;
    ensure!(!frames.is_empty(), "{}: no frames", pcap.display());
    let mut seen = BTreeSet::new();
    for (n, f) in frames.iter().enumerate() {
        let (l3, payload) = offsets(f);
        let opcode = f[payload];
        if !seen.insert((opcode, f.len())) {
            continue;
        }
        let name = format!("rxe-frame{:03}-op{opcode:02x}-{}", n + 1, f.len());
        corpus.add("parse_packet", &name, f)?;
        corpus.add("icrc", &name, &f[l3..])?;
        corpus.add("roce_wire", &name, &f[payload..])?;
    }
    Ok(())
}

fn set_ipv4_flags(f: &mut [u8], l3: usize, flags_frag: u16) {
    f[l3 + ipv4::FLAGS_FRAG.start..l3 + ipv4::FLAGS_FRAG.end].copy_from_slice(&flags_frag.to_be_bytes());
    f[l3 + ipv4::CHECKSUM.start..l3 + ipv4::CHECKSUM.end].fill(0);
    let c = internet_checksum(&f[l3..l3 + ipv4::MIN_HEADER_LEN]);
    f[l3 + ipv4::CHECKSUM.start..l3 + ipv4::CHECKSUM.end].copy_from_slice(&c.to_be_bytes());
}

fn fixture_seeds(corpus: &mut Corpus) -> Result<()> {
    let specs = [
        ("v4-roce", FrameSpec::default()),
        ("v6-roce", FrameSpec { ipv6: true, ..Default::default() }),
        ("v4-vlan-roce", FrameSpec { vlan: Some(100), ..Default::default() }),
        ("v6-vlan-roce", FrameSpec { vlan: Some(7), ipv6: true, dest_qp: 0x99, ..Default::default() }),
        ("v4-udp9000", FrameSpec { dst_port: 9000, ..Default::default() }),
        ("v6-udp9000", FrameSpec { dst_port: 9000, ipv6: true, ..Default::default() }),
        ("v4-ttl1", FrameSpec { ttl: 1, ..Default::default() }),
        ("v4-roce-empty", FrameSpec { payload_len: 0, ..Default::default() }),
        ("v4-other-mac", FrameSpec { dst_mac: [0x02, 0xee, 0, 0, 0, 1], ..Default::default() }),
        ("v4-broadcast", FrameSpec { dst_mac: [0xff; 6], ..Default::default() }),
    ];
    for (name, spec) in &specs {
        let f = frame(spec);
        let name = format!("fixture-{name}");
        corpus.add("parse_packet", &name, &f)?;
        if spec.dst_port == udp::ROCEV2_PORT && spec.vlan.is_none() {
            let (l3, payload) = offsets(&f);
            corpus.add("icrc", &name, &f[l3..])?;
            corpus.add("roce_wire", &name, &f[payload..])?;
        }
    }
    // IPv4 fragments: the first carries the UDP header, a later one does not.
    let l3 = ethernet::HEADER_LEN;
    let mut first = frame(&FrameSpec::default());
    set_ipv4_flags(&mut first, l3, ipv4::FLAG_MORE_FRAGMENTS);
    corpus.add("parse_packet", "fixture-v4-first-fragment", &first)?;
    let mut later = frame(&FrameSpec::default());
    set_ipv4_flags(&mut later, l3, 0x0010);
    corpus.add("parse_packet", "fixture-v4-later-fragment", &later)?;
    // ARP request, as tests/xdp.rs sends it.
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&neighbour_mac(0));
    arp.extend_from_slice(&ethernet::ETHERTYPE_ARP.to_be_bytes());
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.resize(60, 0);
    corpus.add("parse_packet", "fixture-arp", &arp)?;
    // To the switch's own port MAC with Ethernet padding after a short datagram.
    let mut padded = frame(&FrameSpec { payload_len: 0, dst_port: 9000, ..Default::default() });
    padded[ethernet::DST].copy_from_slice(&port_mac(1));
    padded.resize(64, 0);
    corpus.add("parse_packet", "fixture-v4-padded", &padded)?;
    Ok(())
}

fn endpoint_seeds(corpus: &mut Corpus) -> Result<()> {
    let reth = RethRepr { virtual_addr: 0x5557_8a4f_8000, rkey: 0x29c, dma_len: 3000 };
    let bth = BthFields { pkey: 0xffff, dest_qp: 0x11, psn: Psn::new(0xF9_6E1A), ack_req: true, ..Default::default() };
    let data: Vec<u8> = (0..64).collect();
    let mut packets: Vec<(String, RocePacketRepr)> = Vec::new();
    for len in [0usize, 1, 5, 64] {
        let payload = &data[..len];
        packets.push((format!("write-first-{len}"), RocePacketRepr { bth, body: Body::WriteFirst { reth, payload } }));
        packets.push((format!("write-middle-{len}"), RocePacketRepr { bth, body: Body::WriteMiddle { payload } }));
        packets.push((format!("write-last-{len}"), RocePacketRepr { bth, body: Body::WriteLast { payload } }));
        packets.push((format!("write-only-{len}"), RocePacketRepr { bth, body: Body::WriteOnly { reth, payload } }));
    }
    for (name, syndrome) in [
        ("ack", Syndrome::Ack { credit: 0x1F }),
        ("rnr-nak", Syndrome::RnrNak { timer: 3 }),
        ("nak-psn", Syndrome::Nak(NakCode::PsnSequenceError)),
    ] {
        packets.push((name.into(), RocePacketRepr { bth, body: Body::Ack(AethRepr { syndrome, msn: 7 }) }));
    }
    packets.push(("cnp".into(), RocePacketRepr::cnp(0xd2, 0xffff)));
    let ip = IpPair::V4 { src: Ipv4Addr::new(198, 18, 0, 1), dst: Ipv4Addr::new(198, 18, 1, 7) };
    let ip6 =
        IpPair::V6 { src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1), dst: Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 7) };
    for (n, (name, repr)) in packets.iter().enumerate() {
        let mut bytes = repr.to_bytes();
        write_icrc(if n % 2 == 0 { ip } else { ip6 }, 0xC000, &mut bytes);
        corpus.add("roce_wire", &format!("endpoint-{name}"), &bytes)?;
    }
    Ok(())
}

fn pfc_seeds(corpus: &mut Corpus) -> Result<()> {
    let src = neighbour_mac(1);
    let mut one = [0; CLASSES];
    one[3] = 0xFFFF;
    let frames = [
        ("pfc-class3-xoff", PauseFrame { src, class_enable: 1 << 3, quanta: one }),
        ("pfc-all-xon", PauseFrame { src, class_enable: 0xFF, quanta: [0; CLASSES] }),
        ("pfc-mixed", PauseFrame { src, class_enable: 0b1010_0101, quanta: [1, 2, 0x100, 0xFFFF, 7, 0, 9, 0x8000] }),
    ];
    for (name, f) in frames {
        corpus.add("pfc", name, &f.emit())?;
    }
    corpus.add("parse_packet", "pfc-class3-xoff", &frames[0].1.emit())?;
    // 802.3x PAUSE: MAC control, opcode 0x0001 (not PFC).
    let mut pause = frames[0].1.emit();
    pause[14..16].copy_from_slice(&[0x00, 0x01]);
    corpus.add("pfc", "8023x-pause", &pause)?;
    Ok(())
}
