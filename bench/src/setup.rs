//! What the scenarios share: the machine description, configs, databases (created fresh or
//! reused, bulk-loaded with sealed rows), the app served in this process and the real binary as a
//! second process. The `oidc-provider` peers, the browser, dropping databases and starting the
//! binary come from `testkit/`, which the integration tests use too.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use mcp_connect::crypto::{KeyRing, connection_aad};
use mcp_connect::{AppState, Application};
use serde_json::Value;
use sqlx::Connection;
use testkit::Peers;
use tokio::process::Child;

// Plain strings: the bench protects nothing. The key is fixed so that rows loaded in one run
// open in the next (large databases are reused between runs).
pub const API_KEY: &str = "bench-api-key-0123456789abcdefghijklmnop";
const BENCH_KEY: &str = "kbench:YmVuY2gta2V5LWJlbmNoLWtleS1iZW5jaC1rZXktISE=";

/// `target/release/mcp-connect`, or `$MCP_CONNECT_BIN` (a release build in another target
/// folder).
pub fn binary_path() -> PathBuf {
    std::env::var_os("MCP_CONNECT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| testkit::repo_root().join("target/release/mcp-connect"))
}

/// `nproc`, load average and a timestamp, for the line above every table.
pub fn machine() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{now} UTC; nproc {cpus} ({model}); load average {}",
        load.join(" "),
        now = now
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default()
    )
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    Postgres,
    Sqlite,
}

impl Engine {
    pub fn label(self) -> &'static str {
        match self {
            Engine::Postgres => "Postgres",
            Engine::Sqlite => "SQLite",
        }
    }
}

/// Where the identity issuer and upstream provider are. Token fetches never call them, so a
/// dead address is fine there.
#[derive(Clone)]
pub struct PeerUrls {
    pub identity: String,
    pub upstream: String,
}

impl PeerUrls {
    /// Where the running `peers` are.
    pub fn of(peers: &Peers) -> Self {
        Self {
            identity: peers.identity.clone(),
            upstream: peers.upstream.clone(),
        }
    }

    pub fn unreachable() -> Self {
        Self {
            identity: "http://127.0.0.1:9/identity".into(),
            upstream: "http://127.0.0.1:9/upstream".into(),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ConfigOpts {
    pub refresh_ahead_seconds: Option<u64>,
    /// The bench client's `subject_token_audience`: it accepts MCP access tokens for it.
    pub subject_token_audience: Option<String>,
    /// `api_base_url` of `acme`: where `/v1/proxy/acme/...` goes.
    pub api_base_url: Option<String>,
}

pub fn config_toml(
    public: &str,
    listen: &str,
    db_url: &str,
    peers: &PeerUrls,
    o: &ConfigOpts,
) -> String {
    let refresh_ahead = o
        .refresh_ahead_seconds
        .map(|s| format!("refresh_ahead_seconds = {s}"))
        .unwrap_or_default();
    let audience = o
        .subject_token_audience
        .as_ref()
        .map(|a| format!("subject_token_audience = \"{a}\""))
        .unwrap_or_default();
    let api = o
        .api_base_url
        .as_ref()
        .map(|u| format!("api_base_url = \"{u}\"\n"))
        .unwrap_or_default();
    // `BENCH_CACHE_MAX_ENTRIES=0` runs the app without its token cache (an A/B in one build).
    let cache = std::env::var("BENCH_CACHE_MAX_ENTRIES")
        .map(|n| format!("\n[cache]\nmax_entries = {n}\n"))
        .unwrap_or_default();
    let toml = format!(
        r#"
public_url = "{public}"
listen = "{listen}"
database_url = "{db_url}"
encryption_keys = ["{BENCH_KEY}"]
outbound_allow_cidrs = ["127.0.0.0/8"]
{refresh_ahead}

# The bench's one API client sends more than the default 20,000 requests a second: the
# limiter still runs on every request, with a limit the load cannot reach.
[limits]
api_requests_per_second = 1000000
api_burst = 1000000
proxy_requests_per_second = 1000000
proxy_burst = 1000000
proxy_response_body_bytes = 4294967296
proxy_timeout_seconds = 600

{identity}
[[clients]]
id = "bench-mcp"
name = "Bench MCP"
api_key = "{API_KEY}"
providers = ["acme"]
{audience}

{acme}{api}"#,
        identity = testkit::peers::identity_toml(&peers.identity),
        acme = testkit::peers::provider_toml(&peers.upstream),
    );
    toml + &cache
}

/// A database URL for `name`: a Postgres database, or a SQLite file under the temp folder.
pub fn db_url(engine: Engine, name: &str) -> String {
    match engine {
        Engine::Postgres => format!("{}/{name}", testkit::db::postgres_base()),
        Engine::Sqlite => {
            let dir = std::env::temp_dir().join("mcp-connect-bench");
            format!("sqlite://{}/{name}.sqlite", dir.display())
        }
    }
}

/// Drops the database `name` (or removes the SQLite file and its WAL).
pub async fn drop_db(engine: Engine, name: &str) -> anyhow::Result<()> {
    Ok(testkit::db::drop_database(&db_url(engine, name)).await?)
}

/// Opens the database through the library (creating and migrating it), then makes sure it holds
/// exactly `n` active connections `user0..user{n-1}` for `issuer`/`acme`, loading them if not.
/// Returns the URL and how long the load took (None when reused).
pub async fn prepare_connections(
    engine: Engine,
    name: &str,
    n: u64,
    issuer: &str,
    fresh: bool,
) -> anyhow::Result<(String, Option<Duration>)> {
    if fresh {
        drop_db(engine, name).await?;
    }
    let url = db_url(engine, name);
    let db = mcp_connect::db::Db::connect(&url.parse().map_err(anyhow::Error::msg)?).await?;
    db.migrate(mcp_connect::db::Migrations::Deploy).await?;
    let (count,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM connections")
        .fetch_one(&db.pool)
        .await?;
    let (same_issuer,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM connections WHERE issuer = $1 AND subject = 'user0'")
            .bind(issuer)
            .fetch_one(&db.pool)
            .await?;
    let (granted,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM connection_clients")
        .fetch_one(&db.pool)
        .await?;
    if count as u64 == n && same_issuer == 1 {
        if granted as u64 != n {
            grant_all(&db).await?;
        }
        // Still valid for a day from the load; refresh the expiry so nothing is due.
        let now = mcp_connect::time::now();
        sqlx::query(
            "UPDATE connections SET expires_at = $1, last_refresh_at = $2 WHERE expires_at < $3",
        )
        .bind(now + 86_400 * 7)
        .bind(now)
        .bind(now + 86_400)
        .execute(&db.pool)
        .await?;
        db.pool.close().await;
        return Ok((url, None));
    }
    sqlx::query("DELETE FROM connections")
        .execute(&db.pool)
        .await?;
    db.pool.close().await;
    let t = Instant::now();
    match engine {
        Engine::Postgres => load_postgres(&url, n, issuer).await?,
        Engine::Sqlite => load_sqlite(&url, n, issuer).await?,
    }
    let db = mcp_connect::db::Db::connect(&url.parse().map_err(anyhow::Error::msg)?).await?;
    grant_all(&db).await?;
    db.pool.close().await;
    Ok((url, Some(t.elapsed())))
}

/// Every stored connection usable by the bench's API client, as the user's approval would have
/// made it (`connection_clients`): otherwise each first fetch of a connection adopts it (a
/// write) and the token path measured is not the read.
async fn grant_all(db: &mcp_connect::db::Db) -> anyhow::Result<()> {
    sqlx::query("DELETE FROM connection_clients")
        .execute(&db.pool)
        .await?;
    sqlx::query(
        "INSERT INTO connection_clients (connection_id, client_id, elicitation_id, granted_at) \
         SELECT id, 'bench-mcp', NULL, $1 FROM connections",
    )
    .bind(mcp_connect::time::now())
    .execute(&db.pool)
    .await?;
    sqlx::query("ANALYZE connection_clients")
        .execute(&db.pool)
        .await?;
    Ok(())
}

/// One connection row with sealed tokens, as the library would have stored it.
struct RowValues {
    id: String,
    subject: String,
    access: String,
    refresh: String,
}

fn make_rows(keys: &KeyRing, from: u64, to: u64) -> Vec<RowValues> {
    (from..to)
        .map(|i| {
            let id = format!("bench{i:012}");
            let access = keys
                .seal(
                    format!("at-{i:012}-0123456789abcdefghijklmnopqrstuv").as_bytes(),
                    &connection_aad(&id, "access_token"),
                )
                .expect("sealing a bench token");
            let refresh = keys
                .seal(
                    format!("rt-{i:012}-0123456789abcdefghijklmnopqrstuv").as_bytes(),
                    &connection_aad(&id, "refresh_token"),
                )
                .expect("sealing a bench token");
            RowValues {
                id,
                subject: format!("user{i}"),
                access,
                refresh,
            }
        })
        .collect()
}

/// Seals rows on every core while the database takes the previous chunk.
fn sealed_chunks(n: u64, chunk: u64) -> tokio::sync::mpsc::Receiver<Vec<RowValues>> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    std::thread::spawn(move || {
        let keys = testkit::key_ring(&[BENCH_KEY]);
        let threads = std::thread::available_parallelism()
            .map(|n| n.get() as u64)
            .unwrap_or(1);
        let mut from = 0;
        while from < n {
            let to = (from + chunk).min(n);
            let per = (to - from).div_ceil(threads);
            let parts: Vec<Vec<RowValues>> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads)
                    .map(|t| {
                        let keys = keys.clone();
                        let a = (from + t * per).min(to);
                        let b = (a + per).min(to);
                        s.spawn(move || make_rows(&keys, a, b))
                    })
                    .collect();
                hs.into_iter().filter_map(|h| h.join().ok()).collect()
            });
            if tx
                .blocking_send(parts.into_iter().flatten().collect())
                .is_err()
            {
                return;
            }
            from = to;
        }
    });
    rx
}

const SCOPES: &str = "openid offline_access api";

/// `COPY ... FROM STDIN` in text format.
async fn load_postgres(url: &str, n: u64, issuer: &str) -> anyhow::Result<()> {
    let mut c = sqlx::PgConnection::connect(url).await?;
    let now = mcp_connect::time::now();
    let expires = now + 86_400 * 7;
    let mut rx = sealed_chunks(n, 50_000);
    let mut copy = c
        .copy_in_raw(
            "COPY connections (id, issuer, subject, provider, status, scopes, token_type, access_token, \
             refresh_token, expires_at, created_at, updated_at, last_refresh_at) FROM STDIN",
        )
        .await?;
    while let Some(rows) = rx.recv().await {
        let mut buf = String::with_capacity(rows.len() * 400);
        for r in rows {
            use std::fmt::Write;
            let _ = writeln!(
                buf,
                "{}\t{issuer}\t{}\tacme\tactive\t{SCOPES}\tBearer\t{}\t{}\t{expires}\t{now}\t{now}\t{now}",
                r.id, r.subject, r.access, r.refresh
            );
        }
        copy.send(buf.into_bytes()).await?;
    }
    copy.finish().await?;
    sqlx::query("ANALYZE connections").execute(&mut c).await?;
    Ok(())
}

/// Multi-row INSERTs (500 rows, 13 parameters each), 50,000 rows per transaction.
async fn load_sqlite(url: &str, n: u64, issuer: &str) -> anyhow::Result<()> {
    use sqlx::sqlite::SqliteConnectOptions;
    use std::str::FromStr;
    let opts = SqliteConnectOptions::from_str(url)?
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Off);
    let mut c = sqlx::SqliteConnection::connect_with(&opts).await?;
    let now = mcp_connect::time::now();
    let expires = now + 86_400 * 7;
    let mut rx = sealed_chunks(n, 50_000);
    while let Some(rows) = rx.recv().await {
        let mut tx = c.begin().await?;
        for batch in rows.chunks(500) {
            let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO connections (id, issuer, subject, provider, status, scopes, token_type, access_token, \
                 refresh_token, expires_at, created_at, updated_at, last_refresh_at) ",
            );
            q.push_values(batch, |mut b, r| {
                b.push_bind(&r.id)
                    .push_bind(issuer)
                    .push_bind(&r.subject)
                    .push_bind("acme")
                    .push_bind("active")
                    .push_bind(SCOPES)
                    .push_bind("Bearer")
                    .push_bind(&r.access)
                    .push_bind(&r.refresh)
                    .push_bind(expires)
                    .push_bind(now)
                    .push_bind(now)
                    .push_bind(now);
            });
            q.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
    }
    sqlx::query("ANALYZE").execute(&mut c).await?;
    Ok(())
}

/// A tokio runtime on its own threads for the server side, configured like the binary's
/// `#[tokio::main]` (one worker per core), so the load generator's runtime does not share it.
pub struct ServerRuntime {
    pub rt: Arc<tokio::runtime::Runtime>,
}

impl ServerRuntime {
    /// With `pin`, one worker on the server's CPU (threads it starts, SQLite's included,
    /// inherit the CPU).
    pub fn new(pin: Option<Pin>) -> anyhow::Result<Self> {
        let mut rt = tokio::runtime::Builder::new_multi_thread();
        rt.enable_all().thread_name("server");
        if let Some(pin) = pin {
            rt.worker_threads(1)
                .on_thread_start(move || pin_this_thread(pin.server));
        }
        Ok(Self {
            rt: Arc::new(rt.build()?),
        })
    }
}

/// Which CPU the load generator and the server run on (`--pin`).
#[derive(Clone, Copy, Debug)]
pub struct Pin {
    pub client: usize,
    pub server: usize,
}

/// Restricts the calling thread (and threads it starts later) to one CPU.
pub fn pin_this_thread(cpu: usize) {
    // SAFETY: `set` is a zeroed cpu_set_t owned by this frame; CPU_SET writes within it, and
    // sched_setaffinity(0, ...) reads it for the calling thread only.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    if !ok {
        eprintln!(
            "could not pin a thread to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
        std::process::exit(2);
    }
}

/// The app served in this process (on the server runtime).
pub struct InProcessApp {
    pub addr: SocketAddr,
    pub url: String,
    pub state: AppState,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl InProcessApp {
    pub async fn start(
        rt: &ServerRuntime,
        db_url: &str,
        peers: &PeerUrls,
        opts: &ConfigOpts,
        listener: Option<std::net::TcpListener>,
    ) -> anyhow::Result<Self> {
        let db_url = db_url.to_owned();
        let peers = peers.clone();
        let opts = opts.clone();
        let (addr, state, stop, done) = rt
            .rt
            .spawn(async move {
                let listener = match listener {
                    Some(l) => {
                        l.set_nonblocking(true)?;
                        tokio::net::TcpListener::from_std(l)?
                    }
                    None => tokio::net::TcpListener::bind("127.0.0.1:0").await?,
                };
                let addr = listener.local_addr()?;
                let url = format!("http://{addr}");
                let toml = config_toml(&url, "127.0.0.1:0", &db_url, &peers, &opts);
                let config = mcp_connect::config::Config::from_parts(&toml, &[])
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let app = Application::build_with_listener(config, listener).await?;
                let state = app.state();
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                let done = tokio::spawn(async move {
                    if let Err(e) = app
                        .run_until(async {
                            let _ = rx.await;
                        })
                        .await
                    {
                        eprintln!("app stopped: {e:#}");
                    }
                });
                anyhow::Ok((addr, state, tx, done))
            })
            .await??;
        Ok(Self {
            addr,
            url: format!("http://{addr}"),
            state,
            stop: Some(stop),
            done: Some(done),
        })
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            let _ = d.await;
        }
    }
}

/// The fixed-JSON baseline: an axum handler that only returns a fixed body of the size of the
/// token answer the bench's connection gets (the same fields, 290 bytes), on the server
/// runtime.
pub async fn start_fixed_json(rt: &ServerRuntime) -> anyhow::Result<SocketAddr> {
    rt.rt
        .spawn(async {
            let body: &'static str = r#"{"access_token":"at-000000000042-0123456789abcdefghijklmnopqrstuv","token_type":"Bearer","expires_at":"2026-12-31T23:59:59Z","scopes":["openid","offline_access","api"],"connection_id":"bench000000000042","account":{"id":"","label":null},"metadata":{},"params":{},"credential_type":"oauth2"}"#;
            let app = axum::Router::new().route(
                "/v1/tokens",
                axum::routing::post(move || async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        body,
                    )
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            anyhow::Ok(addr)
        })
        .await?
}

/// The real binary, `mcp-connect serve --config <file>`, as its own process.
pub struct BinaryProcess {
    pub url: String,
    pub addr: SocketAddr,
    pub child: Child,
    pub started_to_ready: Duration,
}

impl BinaryProcess {
    pub async fn start(db_url: &str, peers: &PeerUrls, opts: &ConfigOpts) -> anyhow::Result<Self> {
        let bin = binary_path();
        if !bin.exists() {
            bail!(
                "{} is missing: run `cargo build --release` at the repository root first",
                bin.display()
            );
        }
        let port = testkit::process::free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let url = format!("http://{addr}");
        let toml = config_toml(&url, &addr.to_string(), db_url, peers, opts);
        let dir = std::env::temp_dir().join("mcp-connect-bench");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("config-{port}.toml"));
        std::fs::write(&path, toml)?;
        let t0 = Instant::now();
        let child = testkit::process::serve(&bin, &path)
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        // Every 2 ms (the start-up time is measured), for about 30 s.
        if !testkit::process::wait_ready(&url, 15_000, Duration::from_millis(2)).await {
            bail!("{} did not become ready in 30 s", bin.display());
        }
        Ok(Self {
            url,
            addr,
            started_to_ready: t0.elapsed(),
            child,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// (VmRSS, VmHWM) in KiB.
    pub fn rss_kib(&self) -> (u64, u64) {
        self.pid().map(rss_of).unwrap_or((0, 0))
    }

    pub async fn stop(mut self) {
        if let Some(pid) = self.pid() {
            // SIGTERM: let it shut down gracefully.
            unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        let _ = self.child.kill().await;
    }
}

/// (VmRSS, VmHWM) of a process, KiB.
pub fn rss_of(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Raises this process's open-file limit to its hard limit (children inherit it).
pub fn raise_fd_limit() -> u64 {
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 {
            l.rlim_cur = l.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &l);
            return l.rlim_cur;
        }
    }
    0
}

/// An API client for the JSON API (never through a proxy).
pub fn api_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(1024)
        .build()?)
}

/// `POST /v1/elicitations` for `subject`; returns (id, url).
pub async fn elicit(
    api: &reqwest::Client,
    base: &str,
    subject: &str,
) -> anyhow::Result<(String, String)> {
    let v: Value = api
        .post(format!("{base}/v1/elicitations"))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!({"subject": subject, "provider": "acme"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok((
        v["id"].as_str().unwrap_or_default().to_owned(),
        v["url"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// Percentile of a sorted slice (nearest rank).
pub fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
