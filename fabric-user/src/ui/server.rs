//! `fabric ui`: serves the live view. One thread reads the testbed's counters every interval
//! (with [`stats::collect_each`], the code behind `fabric stats`) and keeps the latest view;
//! the HTTP side only hands out what that thread built, so any number of open pages cost one
//! reading per interval, and a slow reading of a large fabric never blocks a page.
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Result;
use axum::{
    Json, Router,
    extract::{Path, State as AxumState},
    http::{StatusCode, header},
    response::{Html, IntoResponse, Response},
    routing::get,
};

use crate::{
    model::plan::Plan,
    run::job::JobProgress,
    state::State,
    telemetry::{http, prometheus, stats},
    ui::{
        graph,
        layout::Layout,
        load,
        view::{self, Reading, Snapshot, View},
    },
};

const INDEX: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/app.js");
const STYLE: &str = include_str!("page/style.css");

/// How `fabric ui` runs.
#[derive(Clone, Debug)]
pub struct UiOptions {
    pub prefix: String,
    pub listen: SocketAddr,
    pub allow_remote: bool,
    /// Between two readings of the counters.
    pub interval: Duration,
}

/// What the reader thread last built.
struct Latest {
    view: View,
    /// The picture, with the latest load on it.
    svg: String,
    report: Option<stats::StatsReport>,
}

type Shared = Arc<Mutex<Latest>>;

/// Reads a testbed again and again, keeping what the previous reading needs.
struct Reader {
    prefix: String,
    start: Instant,
    drawn: Option<(Plan, Layout)>,
    prev: Option<Snapshot>,
}

impl Reader {
    fn read(&mut self) -> Latest {
        let state = match State::load(&self.prefix) {
            Ok(s) => s,
            Err(e) => return self.down(&e.to_string()),
        };
        if self.drawn.as_ref().is_none_or(|(p, _)| *p != state.plan) {
            // A new testbed (or a rebuilt one): a new picture, and no rates across the change.
            self.drawn = Some((state.plan.clone(), Layout::of(&state.plan)));
            self.prev = None;
        }
        let (report, unreadable) = stats::collect_each(&state);
        let status = crate::testbed::status(&self.prefix).ok();
        let reading = Reading {
            report,
            unreadable: unreadable.into_iter().map(|(s, e)| (s, format!("{e:#}"))).collect(),
            missing_namespaces: status.as_ref().map(|s| s.missing_namespaces.clone()).unwrap_or_default(),
            agent_expected: status.as_ref().is_some_and(|s| s.agent_expected),
            agent_running: status.as_ref().is_some_and(|s| s.agent_running),
            now_ns: crate::agent::monotonic_ns(),
            job: JobProgress::read(&self.prefix),
        };
        let (plan, layout) = self.drawn.as_ref().expect("drawn above");
        let (view, snap) = view::build(plan, layout, &reading, self.prev.as_ref(), self.start.elapsed().as_secs_f64());
        self.prev = Some(snap);
        Latest { svg: graph::svg(layout, Some(&view)), view, report: Some(reading.report) }
    }

    /// The testbed cannot be read: say so, and keep the last picture (greyed by the page).
    fn down(&mut self, why: &str) -> Latest {
        self.prev = None;
        let (key, svg) = match &self.drawn {
            Some((_, layout)) => (view::layout_key(layout), graph::svg(layout, None)),
            None => (String::new(), String::new()),
        };
        Latest { view: View::down(&self.prefix, why, &key), svg, report: None }
    }
}

/// `fabric ui`: serves the view until the process is stopped.
pub fn serve(opts: &UiOptions) -> Result<()> {
    let listener = http::bind(opts.listen, opts.allow_remote)?;
    let mut reader = Reader { prefix: opts.prefix.clone(), start: Instant::now(), drawn: None, prev: None };
    let shared: Shared = Arc::new(Mutex::new(reader.read()));
    {
        let shared = shared.clone();
        let interval = opts.interval;
        std::thread::Builder::new().name("ui-reader".into()).spawn(move || {
            loop {
                std::thread::sleep(interval);
                let latest = reader.read();
                *shared.lock().unwrap_or_else(|p| p.into_inner()) = latest;
            }
        })?;
    }
    eprintln!("fabric ui: http://{}/ (testbed {}; Ctrl-C stops it)", listener.local_addr()?, opts.prefix);
    if let Some(note) = http::absent_testbed_note(&opts.prefix) {
        eprintln!("{note}");
    }
    http::serve(listener, router(shared, &opts.prefix), None)
}

fn router(shared: Shared, prefix: &str) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/app.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT) }))
        .route("/style.css", get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE) }))
        .route("/api/view", get(view_json))
        .route("/api/topology.svg", get(topology_svg))
        .route("/api/switch/{name}", get(switch_detail))
        .with_state(shared)
        .merge(prometheus::router(prefix.to_string()))
}

fn latest<T>(shared: &Shared, f: impl FnOnce(&Latest) -> T) -> T {
    f(&shared.lock().unwrap_or_else(|p| p.into_inner()))
}

async fn index(AxumState(shared): AxumState<Shared>) -> Html<String> {
    Html(latest(&shared, page))
}

/// The page, complete as served: the picture with the current load and the view's data are
/// in it, so it shows the fabric before (and without) its script's first poll.
fn page(l: &Latest) -> String {
    let view = serde_json::to_string(&l.view).unwrap_or_default().replace("</", "<\\/");
    INDEX
        .replace("{{TESTBED}}", &graph::esc(&l.view.testbed))
        .replace("{{STATUS}}", status_class(&l.view))
        .replace("{{MESSAGE}}", &graph::esc(&l.view.message))
        .replace("{{LEGEND}}", &legend())
        .replace("{{SVG}}", &l.svg)
        .replace("{{JOBS}}", &jobs_table(&l.view.jobs))
        .replace("{{VIEW}}", &view)
}

/// The jobs table as the page first shows it (its script renders the same from each view).
fn jobs_table(jobs: &[view::JobsRow]) -> String {
    if jobs.is_empty() {
        return "<tr><td>no jobs run</td></tr>".into();
    }
    let mut out = String::from("<tr><th>job</th><th>state</th><th>steps</th><th>iterations</th><th>last ms</th></tr>");
    for j in jobs {
        let last = j.last_completion_ms.map_or(String::new(), |ms| format!("{ms:.1}"));
        out.push_str(&format!(
            "<tr id=\"job-{name}\" class=\"{state}\"><td>{name}</td><td>{state}</td><td>{}/{} \
             <span class=\"progress inline\"><span style=\"width:{:.1}%\"></span></span></td><td>{}</td><td>{last}</td></tr>",
            j.steps_done,
            j.steps,
            100.0 * j.fraction,
            j.iterations_done,
            name = graph::esc(&j.name),
            state = j.state,
        ));
    }
    out
}

fn status_class(v: &View) -> &'static str {
    match v.status {
        view::Status::Up => "up",
        view::Status::Degraded => "degraded",
        view::Status::Down => "down",
    }
}

/// The colour key of the load bands, the down link, and the degraded link's dash.
pub fn legend() -> String {
    let mut out = String::new();
    for b in load::BANDS.iter().map(|b| (b.colour, b.label)).chain([(load::DOWN_COLOUR, "down")]) {
        out.push_str(&format!(r#"<span class="key"><i style="background:{}"></i>{}</span>"#, b.0, graph::esc(b.1)));
    }
    // A degraded link keeps its load colour; its dash says it is degraded.
    out.push_str(r##"<span class="key"><svg width="22" height="8"><line x1="0" y1="4" x2="22" y2="4" stroke="#888" stroke-width="3" stroke-dasharray="2 3"/></svg>degraded</span>"##);
    out
}

async fn view_json(AxumState(shared): AxumState<Shared>) -> Response {
    let body = latest(&shared, |l| serde_json::to_string(&l.view));
    match body {
        Ok(b) => ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], b).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn topology_svg(AxumState(shared): AxumState<Shared>) -> Response {
    let svg = latest(&shared, |l| l.svg.clone());
    ([(header::CONTENT_TYPE, "image/svg+xml"), (header::CACHE_CONTROL, "no-store")], svg).into_response()
}

/// One switch: its ports' counters and queues (the latest reading) and its health.
#[derive(serde::Serialize)]
struct SwitchDetail {
    health: Option<view::SwitchHealth>,
    stats: Option<stats::SwitchStats>,
    agent: Option<crate::agent::SwitchTelemetry>,
}

async fn switch_detail(AxumState(shared): AxumState<Shared>, Path(name): Path<String>) -> Response {
    let detail = latest(&shared, |l| {
        let report = l.report.as_ref();
        SwitchDetail {
            health: l.view.switches.iter().find(|s| s.name == name).cloned(),
            stats: report.and_then(|r| r.switches.iter().find(|s| s.switch == name).cloned()),
            agent: report.and_then(|r| r.agents.iter().find(|a| a.node == name).cloned()),
        }
    });
    if detail.health.is_none() {
        return (StatusCode::NOT_FOUND, format!("no switch {name:?} in the testbed now")).into_response();
    }
    Json(detail).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ui::view::tests as fixtures;

    #[test]
    fn the_page_is_complete_without_its_script() {
        let plan = fixtures::default_plan();
        let layout = Layout::of(&plan);
        let (v, _) = view::build(&plan, &layout, &fixtures::reading(&plan, 0), None, 0.0);
        let l = Latest { svg: graph::svg(&layout, Some(&v)), view: v, report: None };
        let html = page(&l);
        assert!(!html.contains("{{"), "a placeholder is left");
        assert!(html.contains("id=\"node-z0r1\"") && html.contains("id=\"link-z0r1:z0c3\""));
        assert!(html.contains("testbed fab is up"));
        assert!(html.contains("no jobs run"));
        let mut r = fixtures::reading(&plan, 0);
        r.report.jobs = ["a", "b<"]
            .iter()
            .enumerate()
            .map(|(i, n)| crate::telemetry::jobs::JobGauge {
                job: n.to_string(),
                steps: 6,
                steps_done: 6 * i as u64,
                done: i == 1,
                ..Default::default()
            })
            .collect();
        let (v, _) = view::build(&plan, &layout, &r, None, 0.0);
        let html = page(&Latest { svg: String::new(), view: v, report: None });
        assert!(html.contains("<tr id=\"job-a\" class=\"waiting\"><td>a</td><td>waiting</td><td>0/6"), "{html}");
        assert!(html.contains("<tr id=\"job-b&lt;\" class=\"done\"><td>b&lt;</td><td>done</td><td>6/6"), "{html}");
        // Nothing is fetched from elsewhere: the page works offline.
        for text in [html.as_str(), SCRIPT, STYLE] {
            for external in ["src=\"http", "href=\"http", "https://", "url(http", "@import"] {
                assert!(!text.contains(external), "an external resource: {external}");
            }
        }
        assert_eq!(html.matches("<script").count(), 2, "the view's data and the script");
    }

    #[test]
    fn a_down_testbed_keeps_its_last_picture() {
        let mut reader = Reader { prefix: "no-such-testbed-ui".into(), start: Instant::now(), drawn: None, prev: None };
        let l = reader.read();
        assert_eq!(l.view.status, view::Status::Down);
        assert!(l.view.message.contains("no-such-testbed-ui") && l.svg.is_empty());
        let plan = fixtures::default_plan();
        reader.drawn = Some((plan.clone(), Layout::of(&plan)));
        let l = reader.read();
        assert_eq!(l.view.status, view::Status::Down);
        assert!(l.svg.contains("node-z0r1"), "the last picture stays");
        assert_eq!(l.view.layout_key, view::layout_key(&Layout::of(&plan)));
    }
}
