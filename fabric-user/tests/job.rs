//! Job-attributed telemetry and the Prometheus exporter on a live testbed: a run is a job whose
//! report names the uplink a test congested on purpose; the exporter serves the counters.
//! Needs root.
mod common;

use std::io::{Read as _, Write as _};

use fabric_common::config::HashMode;
use fabric_testkit::fixture::in_private_netns;
use fabric_user::{
    endpoint::{EndpointOptions, SportPolicy},
    model::placement::Placement,
    model::workload::Collective,
    run::job::JobRecord,
    run::{RunOptions, run},
    sys::netns,
    testbed,
};

#[test]
fn the_job_report_names_the_uplink_a_test_congested_on_purpose() {
    let (_guard, state) = common::up(None, &common::unique_prefix('r', 0));
    let prefix = state.plan.topology.prefix.clone();
    // Rack z0r1 keeps one uplink of four: all its traffic crowds onto z0r1 -> z0c3.
    for spine in ["z0c0", "z0c1", "z0c2"] {
        testbed::set_link(&prefix, &format!("z0r1:{spine}"), false).unwrap();
    }
    let state = fabric_user::state::State::load(&prefix).unwrap();
    let o = RunOptions {
        collective: Collective::Allreduce,
        ranks: None,
        message_bytes: 512 * 1024,
        iterations: 1,
        placement: Placement::Contiguous,
        hash: Some(HashMode::Eecmp),
        hash_seed: Some(3),
        seed: 1,
        endpoint: EndpointOptions { qps: 8, sport: SportPolicy::PerQp, ..Default::default() },
    };
    let r = run(&state, &o, true).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(r.bytes_delivered, r.bytes_needed);
    let id = r.job_id.clone().expect("a run on our endpoints is a job");
    let rec = JobRecord::load(&id).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(rec.job_id, id);
    assert_eq!(rec.steps.len(), 14, "a ring over 8 ranks has 2(N-1) steps");
    assert_eq!(rec.diagnosis, r.diagnosis);
    let first = &rec.diagnosis[0];
    assert!(
        first.contains("on z0r1") && first.contains("z0c3"),
        "the diagnosis must name z0r1's only uplink: {:?}",
        rec.diagnosis
    );
    // The record says which links were already down, and its diagnosis repeats it.
    assert_eq!(rec.faulty_at_start, ["z0r1:z0c0 down", "z0r1:z0c1 down", "z0r1:z0c2 down"]);
    assert!(rec.faults.is_empty(), "no fault was injected while it ran: {:?}", rec.faults);
    assert!(rec.diagnosis.iter().any(|d| d.starts_with("links already faulty when the job started: z0r1:z0c0 down")));
    // The job's port deltas saw the traffic on that uplink and none on the failed ones.
    let up = rec.ports.iter().find(|p| p.switch == "z0r1" && p.port == "z0c3").expect("z0r1:z0c3 moved");
    assert!(up.tx_bytes > 0);
    assert!(
        !rec.ports
            .iter()
            .any(|p| p.switch == "z0r1" && ["z0c0", "z0c1", "z0c2"].contains(&p.port.as_str()) && p.tx_bytes > 0)
    );
    let _ = std::fs::remove_file(JobRecord::path(&id));

    // The exporter, on a loopback of its own namespace, serves the same counters.
    let text = in_private_netns(|| {
        netns::ip(&["link", "set", "lo", "up"])?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
        std::thread::scope(|s| {
            let server = s.spawn(|| fabric_user::telemetry::prometheus::serve(&prefix, addr, false, Some(1)));
            let mut conn = loop {
                match std::net::TcpStream::connect(addr) {
                    Ok(c) => break c,
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
                }
            };
            conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
            let mut body = String::new();
            conn.read_to_string(&mut body)?;
            server.join().unwrap()?;
            anyhow::Ok(body)
        })
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(text.starts_with("HTTP/1.") && text.lines().next().unwrap().contains(" 200 OK"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("fabric_port_tx_bytes_total{") && l.contains("switch=\"z0r1\",port=\"z0c3\""))
        .expect("the uplink's counter");
    let v: f64 = line.rsplit_once(' ').unwrap().1.parse().unwrap();
    assert!(v >= up.tx_bytes as f64, "{line}");
    let refused =
        fabric_user::telemetry::prometheus::serve(&prefix, "198.18.0.1:9464".parse().unwrap(), false, Some(1));
    assert!(refused.unwrap_err().to_string().contains("loopback"));
}
