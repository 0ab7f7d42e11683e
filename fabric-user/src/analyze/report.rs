//! The table `fabric analyze` prints.
use std::fmt::Write as _;

use super::Report;

fn endpoint(ip: &std::net::IpAddr, port: u16) -> String {
    match ip {
        std::net::IpAddr::V4(a) => format!("{a}:{port}"),
        std::net::IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// Members as `0` or `0,2` (eecmp spreading a five-tuple's QPs).
fn members(v: Option<&Vec<u32>>) -> String {
    match v {
        Some(v) => v.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(","),
        None => "-".into(),
    }
}

/// The report as text.
pub fn render(r: &Report, per_qp: bool) -> String {
    let mut o = String::new();
    let links: Vec<String> = r.link_types.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        o,
        "{} ({}): {} frames, {} bytes captured; link types: {}",
        r.capture,
        r.format,
        r.frames,
        r.captured_bytes,
        if links.is_empty() { "-".into() } else { links.join(", ") }
    );
    if r.cut_short {
        let _ = writeln!(
            o,
            "note: the file ends inside a record, after {} whole packets (still being written, or cut short): \
             those are analysed",
            r.frames
        );
    }
    let _ = writeln!(
        o,
        "RoCEv2: {} packets, {} bytes, {} flows (five-tuples), {} QPs (five-tuple + destination QP)",
        r.roce_packets,
        r.roce_bytes,
        r.flows.len(),
        r.qps.len()
    );
    if r.skipped.is_empty() {
        let _ = writeln!(o, "skipped: none");
    } else {
        let s: Vec<String> = r.skipped.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(o, "skipped: {}", s.join(", "));
    }
    let g = &r.group;
    let _ = writeln!(
        o,
        "prediction: a group of {} uplinks, seed {:#010x}, pin_shift {} (fabric_common::hash::select_member)",
        g.uplinks, g.seed, g.pin_shift
    );
    let modes: Vec<&str> = r.modes.iter().map(|m| m.mode).collect();

    let _ = writeln!(o);
    let mut head = format!("{:<48} {:>4} {:>8} {:>11}", "flow (src -> dst)", "QPs", "packets", "bytes");
    for m in &modes {
        let _ = write!(head, " {:>10}", m);
    }
    let _ = writeln!(o, "{head}  opcodes");
    for f in &r.flows {
        let name = format!("{} -> {}", endpoint(&f.src, f.src_port), endpoint(&f.dst, f.dst_port));
        let mut line = format!("{name:<48} {:>4} {:>8} {:>11}", f.dest_qps.len(), f.packets, f.bytes);
        for m in &modes {
            let _ = write!(line, " {:>10}", members(f.members.get(m)));
        }
        let vlan = if f.vlans.is_empty() {
            String::new()
        } else {
            format!(" vlan {}", f.vlans.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","))
        };
        let _ = writeln!(o, "{line}  {}{vlan}", f.opcodes.join(" "));
    }

    if per_qp {
        let _ = writeln!(o);
        let mut head = format!("{:<48} {:>8} {:>8} {:>11}", "QP (src -> dst)", "dest QP", "packets", "bytes");
        for m in &modes {
            let _ = write!(head, " {:>10}", m);
        }
        let _ = writeln!(o, "{head}  opcodes");
        for q in &r.qps {
            let name = format!("{} -> {}", endpoint(&q.src, q.src_port), endpoint(&q.dst, q.dst_port));
            let mut line = format!("{name:<48} {:>#8x} {:>8} {:>11}", q.dest_qp, q.packets, q.bytes);
            for m in &modes {
                let _ = write!(line, " {:>10}", q.members.get(m).map_or("-".into(), |x| x.to_string()));
            }
            let _ = writeln!(o, "{line}  {}", q.opcodes.join(" "));
        }
    }

    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "{:<11} {:>7} {:>13} {:>14} {:>9} {:>6}  bytes per uplink (share)",
        "hash mode", "inputs", "input H(bits)", "member H(bits)", "max/mean", "jain"
    );
    for m in &r.modes {
        let total: u64 = m.uplink_bytes.iter().sum();
        let loads: Vec<String> = m
            .uplink_bytes
            .iter()
            .map(|&b| {
                let share = if total > 0 { 100.0 * b as f64 / total as f64 } else { 0.0 };
                format!("{b} ({share:.0}%)")
            })
            .collect();
        let _ = writeln!(
            o,
            "{:<11} {:>7} {:>13.2} {:>9.2}/{:<4.2} {:>9} {:>6}  {}",
            m.mode,
            m.hash_inputs,
            m.input_entropy_bits,
            m.member_entropy_bits,
            m.max_entropy_bits,
            measured(m.max_over_mean, 2),
            measured(m.jain, 3),
            loads.join("  ")
        );
    }
    o
}

/// `x` to `decimals` places, or `-` when nothing was measured (NaN: no RoCE bytes).
fn measured(x: f64, decimals: usize) -> String {
    if x.is_nan() { "-".into() } else { format!("{x:.decimals$}") }
}

pub fn print(r: &Report, per_qp: bool) {
    print!("{}", render(r, per_qp));
}
