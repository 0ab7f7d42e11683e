//! The live view in a real browser: the default testbed, `fabric ui` serving it, traffic forced
//! through one known uplink, and headless Chromium (Debian's `chromium`) reading the page. The
//! DOM must show every switch and link, the loaded uplink's colour and label must change while
//! the traffic runs, and a screenshot is kept under `results/ui/`. Then the view must follow a
//! dead switch agent and a testbed taken down and built again. Needs root.
mod common;

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    process::{Child, Command, Stdio},
    time::Duration,
};

use fabric_common::config::HashMode;
use fabric_user::run::jobs::{JobsFile, runner};
use fabric_user::{
    endpoint::{EndpointOptions, SportPolicy},
    model::{placement::Placement, workload::Collective},
    run::{RunOptions, run},
    state::State,
    testbed,
    ui::{layout::Layout, load},
};

/// One testbed at a time in this file (their host threads share the two cores).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The uplink that carries all of rack z0r1's traffic once its other three are down.
const HOT: &str = "z0r1:z0c3";

/// `fabric ui` as a child process, stopped when dropped.
struct Ui(Child);

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An HTTP GET on the view's address: the body, or None while it does not answer.
fn get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut conn = TcpStream::connect(addr).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    conn.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.contains(" 200 ").then(|| body.to_string())
}

fn view(addr: SocketAddr) -> serde_json::Value {
    serde_json::from_str(&get(addr, "/api/view").expect("the view answers")).expect("the view is JSON")
}

/// Polls the view (every 200 ms, at most `tries` times) until `ok` holds; panics with the last
/// view otherwise.
fn wait_for(addr: SocketAddr, tries: u32, what: &str, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    for _ in 0..tries {
        if let Some(v) = get(addr, "/api/view").and_then(|b| serde_json::from_str(&b).ok()) {
            if ok(&v) {
                return v;
            }
            last = v;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("the view never showed {what}; last view: {}", serde_json::to_string_pretty(&last).unwrap());
}

fn link<'v>(v: &'v serde_json::Value, id: &str) -> &'v serde_json::Value {
    v["links"].as_array().unwrap().iter().find(|l| l["id"] == id).unwrap_or_else(|| panic!("no link {id}"))
}

/// Headless Chromium with its own profile folder (concurrent runs must not share one).
fn chromium(args: &[&str]) -> String {
    let profile = tempfile::Builder::new().prefix("fabric-ui-chromium-").tempdir().unwrap();
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("chromium runs (installed by `cargo xtask setup`)");
    assert!(out.status.success(), "chromium failed: {}", out.status);
    String::from_utf8(out.stdout).expect("UTF-8 DOM")
}

/// The `stroke` and `data-util` of one direction's line, and the text of a link's label, in a DOM.
fn line_attr(dom: &str, id: &str, attr: &str) -> String {
    let start = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no element {id} in the DOM"));
    let tag = &dom[dom[..start].rfind('<').unwrap()..];
    let tag = &tag[..tag.find('>').unwrap()];
    let at = tag.find(&format!(" {attr}=\"")).unwrap_or_else(|| panic!("{id} has no {attr}: {tag}"));
    tag[at + attr.len() + 3..].split('"').next().unwrap().to_string()
}

fn text_of(dom: &str, id: &str) -> String {
    let start = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no element {id} in the DOM"));
    let rest = &dom[start..];
    rest[rest.find('>').unwrap() + 1..rest.find("</text>").unwrap()].to_string()
}

#[test]
fn the_live_view_shows_the_fabric_its_load_and_its_failures_in_a_browser() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = common::unique_prefix('u', 0);
    assert!(fabric_user::telemetry::http::absent_testbed_note(&prefix).is_some(), "a server would warn before up");
    let (guard, state) = common::up(None, &prefix);
    assert_eq!(fabric_user::telemetry::http::absent_testbed_note(&prefix), None, "and not once it is up");
    // Rack z0r1 keeps one uplink of four: all its traffic crowds onto z0r1 -> z0c3.
    for spine in ["z0c0", "z0c1", "z0c2"] {
        testbed::set_link(&prefix, &format!("z0r1:{spine}"), false).unwrap();
    }
    // A gray failure elsewhere, which the picture must tell apart from a healthy link.
    testbed::fault::degrade(&prefix, "z0r2:z0c0", Some(100.0), None, Some(0)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let _ui = Ui(Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(["ui", "--prefix", &prefix, "--listen", &addr.to_string(), "--interval-ms", "300"])
        .stderr(Stdio::null())
        .spawn()
        .expect("fabric ui starts"));
    wait_for(addr, 100, "the testbed up", |v| v["status"] == "up");
    let url = format!("http://{addr}/");
    // A switch's ports and queues (what hovering shows), and the Prometheus text beside the page.
    let detail: serde_json::Value = serde_json::from_str(&get(addr, "/api/switch/z0r1").unwrap()).unwrap();
    let ports: Vec<&str> =
        detail["stats"]["ports"].as_array().unwrap().iter().map(|p| p["port"].as_str().unwrap()).collect();
    assert_eq!(ports, ["z0r1h0", "z0r1h1", "z0c0", "z0c1", "z0c2", "z0c3"]);
    assert!(get(addr, "/api/switch/nonesuch").is_none(), "an unknown switch is a 404");
    let metrics = get(addr, "/metrics").unwrap();
    assert!(
        metrics.contains(&format!("fabric_port_tx_bytes_total{{testbed=\"{prefix}\",switch=\"z0r1\",port=\"z0c3\"}}"))
    );
    // A second view on the same address, and one on another host's address, are refused.
    let refused = |listen: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_fabric"))
            .args(["ui", "--prefix", &prefix, "--listen", listen])
            .output()
            .unwrap();
        assert!(!out.status.success(), "fabric ui --listen {listen} must fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(refused(&addr.to_string()).contains("already in use"));
    assert!(refused("198.18.0.1:8080").contains("--allow-remote"));

    // Idle: every switch and link of the topology is in the DOM, the hot uplink idle-coloured.
    let dom = chromium(&["--dump-dom", &url]);
    let plan = &state.plan;
    for n in &plan.nodes {
        assert!(dom.contains(&format!("id=\"node-{}\"", n.name)), "{} is not on the page", n.name);
    }
    let layout = Layout::of(plan);
    assert_eq!(layout.edges.len(), plan.links.len());
    for e in &layout.edges {
        assert!(dom.contains(&format!("id=\"link-{}\"", e.id)), "link {} is not on the page", e.id);
    }
    assert_eq!(line_attr(&dom, &format!("{HOT}/up"), "stroke"), load::BANDS[0].colour);
    assert_eq!(text_of(&dom, &format!("{HOT}/label")), "");
    assert_eq!(line_attr(&dom, "z0r1:z0c0/up", "stroke"), load::DOWN_COLOUR, "a failed link is drawn apart");
    assert!(dom.contains(r#"<g class="link degraded" id="link-z0r2:z0c0""#), "a degraded link is drawn apart");
    assert_eq!(text_of(&dom, "z0r2:z0c0/label"), "degraded");

    // Traffic through the hot uplink, long enough to be seen by a few readings.
    let state = State::load(&prefix).unwrap();
    let opts = RunOptions {
        collective: Collective::Allreduce,
        ranks: None,
        message_bytes: 4 << 20,
        iterations: 20,
        placement: Placement::Contiguous,
        hash: Some(HashMode::Eecmp),
        hash_seed: Some(3),
        seed: 1,
        endpoint: EndpointOptions { qps: 8, sport: SportPolicy::PerQp, ..Default::default() },
    };
    std::thread::scope(|s| {
        let job = s.spawn(|| run(&state, &opts, true).unwrap_or_else(|e| panic!("{e:#}")));
        let busy = wait_for(addr, 300, "load on the hot uplink and the job", |v| {
            link(v, HOT)["up_dir"]["util"].as_f64().unwrap() > 0.005 && !v["job"].is_null()
        });
        assert!(!job.is_finished(), "the run ended before the view was read: make it longer");
        assert!(busy["job"]["collective"] == "allreduce", "{}", busy["job"]);
        let dom = chromium(&["--dump-dom", &url]);
        let colour = line_attr(&dom, &format!("{HOT}/up"), "stroke");
        assert_ne!(colour, load::BANDS[0].colour, "the loaded uplink must change colour");
        assert!(line_attr(&dom, &format!("{HOT}/up"), "data-util").parse::<f64>().unwrap() > 0.005);
        assert!(text_of(&dom, &format!("{HOT}/label")).starts_with('\u{2191}'), "the loaded uplink gets a label");
        let shots = concat!(env!("CARGO_MANIFEST_DIR"), "/../results/ui");
        std::fs::create_dir_all(shots).unwrap();
        let shot = format!("{shots}/fabric-ui.png");
        let _ = std::fs::remove_file(&shot);
        // With z0r1 selected, as a click would: the script fetches and lists its ports (virtual
        // time lets the page's requests finish before the DOM is taken).
        let selected = format!("{url}?switch=z0r1");
        let dom = chromium(&["--virtual-time-budget=3000", "--dump-dom", &selected]);
        assert!(dom.contains("Switch z0r1</h2>") && dom.contains("<td>z0c3</td>"), "no port table for z0r1");
        chromium(&[
            &format!("--screenshot={shot}"),
            "--window-size=1400,660",
            "--hide-scrollbars",
            "--virtual-time-budget=3000",
            &selected,
        ]);
        assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000), "no screenshot at {shot}");
        let r = job.join().unwrap();
        assert_eq!(r.bytes_delivered, r.bytes_needed);
        let _ = std::fs::remove_file(fabric_user::run::job::JobRecord::path(&r.job_id.unwrap()));
    });
    wait_for(addr, 100, "the job gone", |v| v["job"].is_null());

    // A dead switch agent: its switches are shown unhealthy.
    assert!(fabric_user::agent::stop(&prefix).unwrap(), "the agent was running");
    let v = wait_for(addr, 100, "unhealthy switches", |v| v["status"] == "degraded");
    assert!(v["switches"].as_array().unwrap().iter().all(|s| s["healthy"] == false));
    // The picture marks them (the status line says "unhealthy" too: the boxes themselves).
    let page = get(addr, "/").unwrap();
    assert!(page.contains(r#"<g class="node rtsw unhealthy" id="node-z0r1""#), "z0r1 is not drawn unhealthy");
    assert!(page.contains(r#"<g class="node ctsw unhealthy" id="node-z0c0""#), "z0c0 is not drawn unhealthy");

    // The testbed goes down: the view says so; it is built again: the view recovers.
    testbed::down(&prefix).unwrap();
    let v = wait_for(addr, 100, "the testbed down", |v| v["status"] == "down");
    assert!(v["message"].as_str().unwrap().contains("down"));
    assert!(get(addr, "/").unwrap().contains("class=\"status down\""));
    testbed::up(&common::topology(None, &prefix), true).unwrap_or_else(|e| panic!("{e:#}"));
    wait_for(addr, 150, "the rebuilt testbed up", |v| v["status"] == "up");
    assert_eq!(link(&view(addr), HOT)["up"], true, "the rebuilt testbed has all its links");
    drop(guard);
}

/// `fabric ui` on a testbed where `fabric run --jobs` ran two independent jobs: the view's API,
/// the page as served and the page as its script renders it list both jobs, done, with their
/// steps and iterations.
#[test]
fn every_job_of_a_jobs_run_is_on_the_page() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = common::unique_prefix('w', 0);
    let (_guard, state) = common::up(None, &prefix);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let _ui = Ui(Command::new(env!("CARGO_BIN_EXE_fabric"))
        .args(["ui", "--prefix", &prefix, "--listen", &addr.to_string(), "--interval-ms", "200"])
        .stderr(Stdio::null())
        .spawn()
        .expect("fabric ui starts"));
    let v = wait_for(addr, 100, "the testbed up", |v| v["status"] == "up");
    assert_eq!(v["jobs"], serde_json::json!([]), "no jobs run yet");
    let file: JobsFile = toml::from_str(
        r#"
[run]
qps = 2
[[job]]
name = "alpha"
workload = "allreduce"
ranks = 4
message = "256Ki"
placement = "hosts:z0r0h0,z0r1h0,z0r2h0,z0r3h0"
iterations = 2
[[job]]
name = "beta"
workload = "allreduce"
ranks = 2
message = "128Ki"
placement = "hosts:z0r0h1,z0r1h1"
start_ms = 10
"#,
    )
    .unwrap();
    let plan = file.resolve(&state.plan, HashMode::Eecmp).unwrap_or_else(|e| panic!("{e:#}"));
    let out = runner::run_jobs(&state, &plan, true).unwrap_or_else(|e| panic!("{e:#}"));
    let v = wait_for(addr, 100, "both jobs done", |v| {
        v["jobs"].as_array().is_some_and(|j| j.len() == 2 && j.iter().all(|j| j["state"] == "done"))
    });
    let jobs = v["jobs"].as_array().unwrap();
    let got: Vec<(&str, u64, u64, u64)> = jobs
        .iter()
        .map(|j| {
            let n = |k: &str| j[k].as_u64().unwrap();
            (j["name"].as_str().unwrap(), n("steps_done"), n("steps"), n("iterations_done"))
        })
        .collect();
    // alpha: a 4-rank ring's 6 steps, twice; beta: a 2-rank ring's 2 steps, once.
    assert_eq!(got, [("alpha", 12, 12, 2), ("beta", 2, 2, 1)]);
    let page = get(addr, "/").unwrap();
    assert!(page.contains("<tr id=\"job-alpha\" class=\"done\"><td>alpha</td><td>done</td><td>12/12"), "{page}");
    assert!(page.contains("<tr id=\"job-beta\" class=\"done\">"));
    // The script renders the same rows from the view it polls.
    let dom = chromium(&["--virtual-time-budget=2000", "--dump-dom", &format!("http://{addr}/")]);
    assert!(dom.contains("id=\"jobs\" data-rendered=\"script\""), "the script did not render the jobs");
    for name in ["alpha", "beta"] {
        let row = &dom[dom.find(&format!("id=\"job-{name}\"")).unwrap_or_else(|| panic!("no row {name}"))..];
        assert!(row[..row.find("</tr>").unwrap()].contains("<td>done</td>"), "{name}: {row}");
    }
    for j in &out.summary.jobs {
        let _ = std::fs::remove_file(fabric_user::run::job::JobRecord::path(&j.job_id));
    }
}
