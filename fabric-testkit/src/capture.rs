//! Reading packet captures, and decoding them with tshark as an independent reference.
use std::{path::Path, process::Command};

use anyhow::{Context as _, Result, bail, ensure};

/// Every frame of a pcap file (Ethernet link type).
pub fn read_pcap(path: &Path) -> Result<Vec<Vec<u8>>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening capture {}", path.display()))?;
    let mut reader =
        pcap_file::pcap::PcapReader::new(file).with_context(|| format!("{} is not a pcap file", path.display()))?;
    ensure!(
        reader.header().datalink == pcap_file::DataLink::ETHERNET,
        "{}: link type {:?}, expected Ethernet",
        path.display(),
        reader.header().datalink
    );
    let mut frames = Vec::new();
    while let Some(pkt) = reader.next_packet() {
        frames.push(pkt.with_context(|| format!("{}: corrupt record", path.display()))?.data.into_owned());
    }
    Ok(frames)
}

/// A BTH as tshark decodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsharkBth {
    pub opcode: u8,
    pub dest_qp: u32,
    pub psn: u32,
}

fn number(field: &str) -> Result<u64> {
    Ok(match field.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16)?,
        None => field.parse()?,
    })
}

/// Decodes every frame with `tshark -d udp.port==4791,infiniband`; `None` for frames without
/// a BTH. Fails if tshark is missing (install it: `apt-get install tshark`).
pub fn tshark_bth(path: &Path) -> Result<Vec<Option<TsharkBth>>> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args(["-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=,"])
        .args(["-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"])
        .output()
        .context("running tshark (apt-get install tshark)")?;
    if !out.status.success() {
        bail!("tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8(out.stdout)?
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            if f.len() < 3 || f[0].is_empty() {
                return Ok(None);
            }
            Ok(Some(TsharkBth {
                opcode: number(f[0])? as u8,
                dest_qp: number(f[1])? as u32,
                psn: number(f[2])? as u32,
            }))
        })
        .collect()
}
