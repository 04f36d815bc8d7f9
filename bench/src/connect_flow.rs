//! Scenario 2: the server-side cost of the browser flow (connect, sign-in callback, consent,
//! provider callback), without the peers' own time, and the database round trips of each hop.
//!
//! How it is measured, all in this process:
//! - the app runs here with a `tracing` layer that times each `request` span (opened by the
//!   app's own trace middleware, closed when the response is done) and counts `sqlx::query`
//!   events inside it (SQLite runs queries on its worker threads, outside the request span; the
//!   flow is sequential, so such events go to the one request that is open);
//! - every call the app makes to the identity issuer or the provider runs in an `outbound` span
//!   (`src/outbound/mod.rs`, `Request::send`: from handing the request to the client to having
//!   the answer's head; the peers here answer with small bodies in one write). Server time of a
//!   hop = its span time − the time of the `outbound` spans inside it. (Until December 2026 a
//!   forward proxy timed these calls; the SSRF-guarded client ignores `HTTP_PROXY`, so its
//!   figures then included the peers' time.)
//! - query counting makes sqlx format every statement, which costs time; so timing flows run with
//!   the query events off and counting flows run separately with them on.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber, field::Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, reload};

use crate::setup::{self, ConfigOpts, Engine, InProcessApp, PeerUrls, ServerRuntime};
use testkit::{Browser, Peers};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[arg(long, value_delimiter = ',', default_values = ["postgres", "sqlite"])]
    pub engines: Vec<Engine>,
    /// Flows timed per engine (after one cold flow).
    #[arg(long, default_value_t = 20)]
    pub flows: usize,
}

/// One finished request of the app.
#[derive(Debug, Clone)]
pub struct Hop {
    pub method: String,
    pub path: String,
    pub start: Instant,
    pub end: Instant,
    pub queries: u32,
    pub statements: Vec<String>,
}

/// One outbound call (an `outbound` span of the app).
#[derive(Debug, Clone)]
struct Outbound {
    start: Instant,
    end: Instant,
}

#[derive(Default)]
struct Recorder {
    hops: Vec<Hop>,
    outbound: Vec<Outbound>,
    open: Vec<Id>,
    unattributed: u32,
}

fn recorder() -> &'static Mutex<Recorder> {
    static R: OnceLock<Mutex<Recorder>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Recorder::default()))
}

fn rec() -> std::sync::MutexGuard<'static, Recorder> {
    recorder().lock().unwrap_or_else(|p| p.into_inner())
}

/// When an `outbound` span opened.
struct OutboundStart(Instant);

struct SpanData {
    method: String,
    path: String,
    start: Instant,
    queries: u32,
    statements: Vec<String>,
}

/// The first words of a statement as sqlx logs it (`summary`), e.g. "UPDATE auth_flows SET …".
#[derive(Default)]
struct Summary(String);

impl Visit for Summary {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" {
            self.0 = format!("{value:?}").trim_matches('"').to_owned();
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "summary" {
            self.0 = value.to_owned();
        }
    }
}

/// "UPDATE auth_flows SET used_at …" → "UPDATE auth_flows".
fn short_statement(s: &str) -> String {
    let w: Vec<&str> = s.split_whitespace().collect();
    let table = |kw: &str| {
        w.iter()
            .position(|x| x.eq_ignore_ascii_case(kw))
            .and_then(|i| w.get(i + 1))
            .map(|t| t.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_'))
            .unwrap_or("")
            .to_owned()
    };
    match w.first().map(|x| x.to_ascii_uppercase()).as_deref() {
        Some("SELECT") if s.contains("pg_notify") => "SELECT pg_notify".into(),
        Some("SELECT") => format!("SELECT {}", table("FROM")).trim().to_owned(),
        Some("INSERT") => format!("INSERT {}", table("INTO")),
        Some("UPDATE") => format!("UPDATE {}", table("UPDATE")),
        Some("DELETE") => format!("DELETE {}", table("FROM")),
        Some(k) => k.to_owned(),
        None => "?".into(),
    }
}

#[derive(Default)]
struct Fields {
    method: String,
    path: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "method" => self.method = format!("{value:?}"),
            "path" => self.path = format!("{value:?}"),
            _ => {}
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "method" => self.method = value.to_owned(),
            "path" => self.path = value.to_owned(),
            _ => {}
        }
    }
}

/// Whether this engine runs queries outside the caller's span (SQLite's worker threads), so
/// that a query event outside any request span belongs to the one request open.
static OUTSIDE_SPANS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Per hop, the counted flow with fewer queries: a background task's query (the webhook outbox
/// scan, the long-poll sweep) can only add to a request's count, never take from it.
fn fewest(a: Vec<HopCost>, b: Vec<HopCost>) -> Vec<HopCost> {
    let mut b = b.into_iter();
    a.into_iter()
        .map(|x| match b.next() {
            Some(y) if y.label == x.label && y.queries < x.queries => y,
            _ => x,
        })
        .collect()
}

/// Times the app's `request` spans and counts the queries made inside them.
struct FlowLayer;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for FlowLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let m = attrs.metadata();
        if !m.target().starts_with("mcp_connect") {
            return;
        }
        if m.name() == "outbound" {
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(OutboundStart(Instant::now()));
            }
            return;
        }
        if m.name() != "request" {
            return;
        }
        let mut f = Fields::default();
        attrs.record(&mut f);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanData {
                method: f.method,
                path: f.path,
                start: Instant::now(),
                queries: 0,
                statements: Vec::new(),
            });
        }
        rec().open.push(id.clone());
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if !event.metadata().target().starts_with("sqlx::query") {
            return;
        }
        let mut summary = Summary::default();
        event.record(&mut summary);
        let statement = short_statement(&summary.0);
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope {
                if let Some(d) = span.extensions_mut().get_mut::<SpanData>() {
                    d.queries += 1;
                    d.statements.push(statement);
                    return;
                }
            }
        }
        // Not inside a request span (SQLite's worker threads): the one open request, if any.
        let open = rec().open.clone();
        if OUTSIDE_SPANS.load(std::sync::atomic::Ordering::Relaxed)
            && let [only] = open.as_slice()
            && let Some(span) = ctx.span(only)
            && let Some(d) = span.extensions_mut().get_mut::<SpanData>()
        {
            d.queries += 1;
            d.statements.push(statement);
            return;
        }
        rec().unattributed += 1;
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        if let Some(OutboundStart(start)) = span.extensions_mut().remove::<OutboundStart>() {
            rec().outbound.push(Outbound {
                start,
                end: Instant::now(),
            });
            return;
        }
        let Some(d) = span.extensions_mut().remove::<SpanData>() else {
            return;
        };
        let mut r = rec();
        r.open.retain(|x| *x != id);
        r.hops.push(Hop {
            method: d.method,
            path: d.path,
            start: d.start,
            end: Instant::now(),
            queries: d.queries,
            statements: d.statements,
        });
    }
}

type FilterHandle = reload::Handle<EnvFilter, tracing_subscriber::Registry>;

const TIMING_FILTER: &str =
    "info,mcp_connect::outbound=debug,sqlx=warn,tower_sessions=warn,hyper=warn";
const COUNTING_FILTER: &str =
    "info,mcp_connect::outbound=debug,sqlx=warn,sqlx::query=trace,tower_sessions=warn,hyper=warn";

/// Installs the recording subscriber; returns the handle that switches query events on and off.
pub fn install_subscriber() -> FilterHandle {
    let (filter, handle) = reload::Layer::new(EnvFilter::new(TIMING_FILTER));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(FlowLayer)
        .try_init();
    handle
}

/// A hop as reported: which request, how long in total, how much of it was the peers.
#[derive(Debug, Clone)]
struct HopCost {
    label: String,
    total: Duration,
    peers: Duration,
    peer_calls: u32,
    queries: u32,
    statements: Vec<String>,
}

impl HopCost {
    fn server(&self) -> Duration {
        self.total.saturating_sub(self.peers)
    }
    /// Statements that commit a write (each its own transaction: on Postgres, a WAL flush).
    fn writes(&self) -> usize {
        self.statements
            .iter()
            .filter(|s| {
                s.starts_with("INSERT") || s.starts_with("UPDATE") || s.starts_with("DELETE")
            })
            .count()
    }
}

/// The median time of one committed single-row INSERT on the app's pool: what a write costs
/// on this machine's disk (Postgres flushes the WAL at every commit; SQLite in WAL mode with
/// `synchronous = NORMAL` does not).
async fn commit_latency(app: &InProcessApp) -> anyhow::Result<f64> {
    let pool = &app.state.db.pool;
    sqlx::query("CREATE TABLE IF NOT EXISTS bench_commit (i BIGINT)")
        .execute(pool)
        .await?;
    let mut t = Vec::new();
    for i in 0..40i64 {
        let t0 = Instant::now();
        sqlx::query("INSERT INTO bench_commit (i) VALUES ($1)")
            .bind(i)
            .execute(pool)
            .await?;
        t.push(ms(t0.elapsed()));
    }
    t.sort_by(f64::total_cmp);
    Ok(setup::pct(&t, 0.5))
}

fn label(method: &str, path: &str, elicitation_id: &str, seen_connect_get: &mut bool) -> String {
    let p = path.replace(elicitation_id, "{id}");
    if method == "GET" && p == "/connect/{id}" {
        let l = if *seen_connect_get {
            "GET /connect/{id} (consent page)"
        } else {
            "GET /connect/{id} (no session → sign in)"
        };
        *seen_connect_get = true;
        return l.into();
    }
    if method == "POST" && p == "/connect/{id}" {
        return "POST /connect/{id} (Continue → provider)".into();
    }
    format!("{method} {p}")
}

/// Runs one flow and returns its hops (the browser hops, then the API hops).
async fn one_flow(
    app: &InProcessApp,
    api: &reqwest::Client,
    user: &str,
) -> anyhow::Result<(Vec<HopCost>, Vec<HopCost>)> {
    {
        let mut r = rec();
        r.hops.clear();
        r.outbound.clear();
    }
    let (id, url) = setup::elicit(api, &app.url, user).await?;
    Browser::new().connect(&url, user).await;
    let v: serde_json::Value = api
        .get(format!("{}/v1/elicitations/{id}", app.url))
        .bearer_auth(setup::API_KEY)
        .send()
        .await?
        .json()
        .await?;
    anyhow::ensure!(v["status"] == "completed", "flow did not complete: {v}");
    // Spans close just after the response is written; give the last one a moment.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let r = rec();
    let mut hops = r.hops.clone();
    hops.sort_by_key(|h| h.start);
    let mut seen = false;
    let (mut browser, mut apis) = (Vec::new(), Vec::new());
    for h in hops {
        let inside: Vec<&Outbound> = r
            .outbound
            .iter()
            .filter(|o| o.start >= h.start && o.end <= h.end)
            .collect();
        let cost = HopCost {
            label: label(&h.method, &h.path, &id, &mut seen),
            total: h.end - h.start,
            peers: inside.iter().map(|o| o.end - o.start).sum(),
            peer_calls: inside.len() as u32,
            queries: h.queries,
            statements: h.statements.clone(),
        };
        if h.path.starts_with("/v1/") {
            apis.push(cost);
        } else {
            browser.push(cost);
        }
    }
    Ok((browser, apis))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub async fn run(args: Args, server: &ServerRuntime, filter: FilterHandle) -> anyhow::Result<()> {
    let api = setup::api_client()?;
    for &engine in &args.engines {
        OUTSIDE_SPANS.store(
            engine == Engine::Sqlite,
            std::sync::atomic::Ordering::Relaxed,
        );
        let name = "mcpc_bench_flow";
        setup::drop_db(engine, name).await?;
        let db_url = setup::db_url(engine, name);
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr: SocketAddr = listener.local_addr()?;
        let peers = Peers::start(&format!("http://{addr}"), 3600).await;
        let app = InProcessApp::start(
            server,
            &db_url,
            &PeerUrls::of(&peers),
            &ConfigOpts {
                refresh_ahead_seconds: None,
                ..ConfigOpts::default()
            },
            Some(listener),
        )
        .await?;
        let load = setup::load_average();

        // Cold: the first flow after start (discovery and JWKS fetched on first use).
        let (cold, _) = one_flow(&app, &api, "cold-user").await?;
        // Timing flows.
        let mut flows = Vec::new();
        let mut api_hops = Vec::new();
        for i in 0..args.flows {
            let (b, a) = one_flow(&app, &api, &format!("timed-user-{i}")).await?;
            flows.push(b);
            api_hops.push(a);
        }
        // Counting flows, with sqlx's query events on.
        filter.modify(|f| *f = EnvFilter::new(COUNTING_FILTER))?;
        rec().unattributed = 0;
        let (counted, counted_api) = one_flow(&app, &api, "counted-user").await?;
        let (counted2, counted_api2) = one_flow(&app, &api, "counted-user-2").await?;
        let counted = fewest(counted, counted2);
        let counted_api = fewest(counted_api, counted_api2);
        let unattributed = rec().unattributed;
        filter.modify(|f| *f = EnvFilter::new(TIMING_FILTER))?;
        let commit = commit_latency(&app).await?;

        print_engine(
            engine,
            &cold,
            &flows,
            &counted,
            &api_hops,
            &counted_api,
            unattributed,
            (&load, commit),
            args.flows,
        );
        app.stop().await;
        drop(peers);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn print_engine(
    engine: Engine,
    cold: &[HopCost],
    flows: &[Vec<HopCost>],
    counted: &[HopCost],
    api_hops: &[Vec<HopCost>],
    counted_api: &[HopCost],
    unattributed: u32,
    (load, commit): (&str, f64),
    n: usize,
) {
    println!(
        "### Connect flow on {} (load average {load})\n",
        engine.label()
    );
    println!(
        "Server time = time inside the app's request span − time of the app's calls to the identity issuer / provider (the app's `outbound` spans). Median and p90 over {n} warm flows; \"cold\" is the first flow after start.\n"
    );
    println!(
        "One committed single-row INSERT on this database, measured alongside: **{commit:.2} ms** (median of 40).\n"
    );
    println!(
        "| hop | server ms, median | p90 | cold | peer calls | peers' ms, median | DB queries | of which writes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut by_label: BTreeMap<usize, (String, Vec<f64>, Vec<f64>, u32)> = BTreeMap::new();
    for f in flows {
        for (i, h) in f.iter().enumerate() {
            let e = by_label
                .entry(i)
                .or_insert_with(|| (h.label.clone(), Vec::new(), Vec::new(), h.peer_calls));
            e.1.push(ms(h.server()));
            e.2.push(ms(h.peers));
        }
    }
    let mut totals: Vec<f64> = flows
        .iter()
        .map(|f| f.iter().map(|h| ms(h.server())).sum())
        .collect();
    totals.sort_by(f64::total_cmp);
    let mut peer_totals: Vec<f64> = flows
        .iter()
        .map(|f| f.iter().map(|h| ms(h.peers)).sum())
        .collect();
    peer_totals.sort_by(f64::total_cmp);
    let queries_total: u32 = counted.iter().map(|h| h.queries).sum();
    for (i, (label, mut server, mut peers, calls)) in by_label {
        server.sort_by(f64::total_cmp);
        peers.sort_by(f64::total_cmp);
        let q = counted
            .get(i)
            .filter(|h| h.label == label)
            .map(|h| h.queries.to_string())
            .unwrap_or_else(|| "?".into());
        let w = counted
            .get(i)
            .filter(|h| h.label == label)
            .map(|h| h.writes().to_string())
            .unwrap_or_else(|| "?".into());
        let c = cold
            .get(i)
            .filter(|h| h.label == label)
            .map(|h| format!("{:.2}", ms(h.server())))
            .unwrap_or_else(|| "–".into());
        println!(
            "| {label} | {:.2} | {:.2} | {c} | {calls} | {:.2} | {q} | {w} |",
            setup::pct(&server, 0.5),
            setup::pct(&server, 0.9),
            setup::pct(&peers, 0.5),
        );
    }
    let cold_total: f64 = cold.iter().map(|h| ms(h.server())).sum();
    let writes_total: usize = counted.iter().map(HopCost::writes).sum();
    println!(
        "| **whole flow** | **{:.2}** | {:.2} | {cold_total:.2} | {} | {:.2} | **{queries_total}** | **{writes_total}** |",
        setup::pct(&totals, 0.5),
        setup::pct(&totals, 0.9),
        flows
            .first()
            .map(|f| f.iter().map(|h| h.peer_calls).sum::<u32>())
            .unwrap_or(0),
        setup::pct(&peer_totals, 0.5),
    );
    println!(
        "\nQueries are counted in two more flows with sqlx's statement events on; per hop the lower count is shown (a background task's query can land in a request's count, never leave it). The statements of each hop:\n"
    );
    for h in counted.iter().chain(counted_api) {
        println!("- {}: {}", h.label, h.statements.join(", "));
    }
    let mut api_rows: BTreeMap<String, (Vec<f64>, u32)> = BTreeMap::new();
    for f in api_hops {
        for h in f {
            api_rows
                .entry(h.label.clone())
                .or_default()
                .0
                .push(ms(h.server()));
        }
    }
    for h in counted_api {
        if let Some(e) = api_rows.get_mut(&h.label) {
            e.1 = h.queries;
        }
    }
    println!("\nAround the flow (API calls by the MCP server):\n");
    println!("| call | server ms, median | DB queries |");
    println!("|---|---:|---:|");
    for (label, (mut v, q)) in api_rows {
        v.sort_by(f64::total_cmp);
        println!("| {label} | {:.2} | {q} |", setup::pct(&v, 0.5));
    }
    if unattributed > 0 {
        println!("\n({unattributed} query events could not be attributed to a request.)");
    }
    println!();
}
