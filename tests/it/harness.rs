//! Test harness: the real app on port 0 against a fresh database (Postgres or SQLite), with the
//! real `oidc-provider` peers (identity issuer and upstream provider) on loopback and a
//! cookie-keeping browser that walks the pages. The peers, the browser, the databases and the
//! binary as a process come from `testkit/` (the bench uses them too); the app, its config and
//! its checks are here.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use mcp_connect::config::Config;
use mcp_connect::{AppState, Application};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::process::Child;

pub use testkit::db::{DbKind, db_url, drop_database};
pub use testkit::peers::{IDENTITY_SECRET, UPSTREAM_SECRET};
pub use testkit::process::free_port;
pub use testkit::{Browser, Page, Peers, key_ring, random_name};

pub const API_KEY: &str = "test-api-key-0123456789abcdefghij";
pub const OTHER_API_KEY: &str = "other-api-key-0123456789abcdefghij";

/// Everything the app logged during this test process.
pub fn captured_logs() -> String {
    String::from_utf8_lossy(&log_buffer().lock().unwrap()).into_owned()
}

fn log_buffer() -> &'static Arc<Mutex<Vec<u8>>> {
    static BUF: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUF.get_or_init(|| Arc::new(Mutex::new(Vec::new())))
}

struct BufWriter(Arc<Mutex<Vec<u8>>>);

impl Write for BufWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn init_logs() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let buf = log_buffer().clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(// cookie_store is the test browser's own cookie jar (it logs the cookies it stores), not the app.
                "trace,hyper=info,h2=info,rustls=info,reqwest=debug,sqlx=debug,tower_sessions=trace,cookie_store=off")
            .with_ansi(false)
            .with_writer(move || BufWriter(buf.clone()))
            .try_init();
    });
}

pub struct TestApp {
    pub url: String,
    pub db_url: String,
    pub state: AppState,
    pub peers: Peers,
    pub api: reqwest::Client,
    pub key: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

#[derive(Clone)]
pub struct Options {
    pub access_token_ttl: u64,
    /// `refresh_ahead_seconds`; 0 (the default in tests) keeps the background refresher off so
    /// tests count upstream refreshes deterministically.
    pub refresh_ahead: u64,
    pub extra_toml: String,
    /// The body of `[providers.other]` (only the client `other-mcp` may use it).
    pub other_provider: String,
    /// Extra keys for the `demo-mcp` client (e.g. its webhook).
    pub demo_client_extra: String,
    /// Extra keys for `[identity]` (e.g. `organization_claim`).
    pub identity_extra: String,
    /// `api_base_url` of `[providers.acme]` (default: the peer's `/api`).
    pub acme_api_base_url: Option<String>,
    pub key: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            access_token_ttl: 3600,
            refresh_ahead: 0,
            extra_toml: String::new(),
            other_provider: "authorization_url = \"http://127.0.0.1:9/authorize\"\ntoken_url = \"http://127.0.0.1:9/token\"\nclient_id = \"x\"".into(),
            demo_client_extra: String::new(),
            identity_extra: String::new(),
            acme_api_base_url: None,
            key: mcp_connect::crypto::generate_key("k1"),
        }
    }
}

impl TestApp {
    pub async fn spawn(kind: DbKind) -> TestApp {
        Self::spawn_with(kind, Options::default()).await
    }

    pub async fn spawn_with(kind: DbKind, opts: Options) -> TestApp {
        init_logs();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let peers = Peers::start(&url, opts.access_token_ttl).await;
        let db_url = db_url(kind);
        Self::spawn_on(listener, peers, db_url, &opts).await
    }

    /// A second app (replica) on the same database and peers.
    pub async fn spawn_on(
        listener: tokio::net::TcpListener,
        peers: Peers,
        db_url: String,
        opts: &Options,
    ) -> TestApp {
        let url = format!("http://{}", listener.local_addr().unwrap());
        let toml = config_toml(&url, &db_url, &peers, opts);
        let config = Config::from_parts(&toml, &[]).unwrap_or_else(|e| panic!("{e}\n{toml}"));
        let app = Application::build_with_listener(config, listener)
            .await
            .unwrap();
        let state = app.state();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            app.run_until(async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        *live_apps().entry(db_url.clone()).or_default() += 1;
        TestApp {
            url,
            db_url,
            state,
            peers,
            api: reqwest::Client::new(),
            key: opts.key.clone(),
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub async fn shutdown(self) {
        let db_url = self.db_url.clone();
        self.shutdown_keeping_database().await;
        let _ = drop_database(&db_url).await;
    }

    /// `shutdown`, leaving the database for a restarted app.
    pub async fn shutdown_keeping_database(mut self) {
        self.assert_audit_log_holds_no_secret().await;
        if let Some(tx) = self.stop.take() {
            release(&self.db_url);
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        self.state.db.pool.close().await;
    }

    /// Stops the app but keeps its peers running; returns what a restarted app needs (its
    /// database URL, peers and encryption key).
    pub async fn stop_keeping_peers(mut self) -> (String, Peers, String) {
        if let Some(tx) = self.stop.take() {
            release(&self.db_url);
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        let peers = std::mem::replace(
            &mut self.peers,
            Peers {
                identity: String::new(),
                upstream: String::new(),
                child: None,
            },
        );
        (self.db_url.clone(), peers, self.key.clone())
    }

    pub fn browser(&self) -> Browser {
        Browser::new()
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        reply(
            self.api
                .post(format!("{}{path}", self.url))
                .bearer_auth(API_KEY)
                .json(&body),
        )
        .await
    }

    /// The `/metrics` exposition, as a scraper on loopback gets it.
    pub async fn metrics_text(&self) -> String {
        scrape_metrics(&self.url).await
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        reply(
            self.api
                .get(format!("{}{path}", self.url))
                .bearer_auth(API_KEY),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        reply(
            self.api
                .delete(format!("{}{path}", self.url))
                .bearer_auth(API_KEY),
        )
        .await
    }

    pub async fn elicit(&self, subject: &str) -> Value {
        let (s, v) = self
            .post(
                "/v1/elicitations",
                json!({"subject": subject, "provider": "acme"}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v
    }

    pub async fn token(&self, subject: &str) -> (StatusCode, Value) {
        self.post(
            "/v1/tokens",
            json!({"subject": subject, "provider": "acme"}),
        )
        .await
    }

    /// Runs the whole flow for `subject` in a new browser and returns the connection id.
    pub async fn connect(&self, subject: &str) -> String {
        let e = self.elicit(subject).await;
        self.browser()
            .connect(e["url"].as_str().unwrap(), subject)
            .await;
        let (s, v) = self
            .get(&format!("/v1/elicitations/{}", e["id"].as_str().unwrap()))
            .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(v["status"], "completed", "{v}");
        v["connection_id"].as_str().unwrap().to_owned()
    }

    /// Starts another replica of this app as its own `mcp-connect serve` process, on the same
    /// database, peers and keys. Returns its base URL and the process (killed on drop).
    pub async fn spawn_replica_process(&self, opts: &Options) -> (String, Child) {
        self.spawn_replica_process_with_env(opts, &[]).await
    }

    /// `spawn_replica_process` with extra `MCP_CONNECT_*` environment overrides.
    pub async fn spawn_replica_process_with_env(
        &self,
        opts: &Options,
        env: &[(&str, &str)],
    ) -> (String, Child) {
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let opts = Options {
            key: self.key.clone(),
            ..opts.clone()
        };
        let toml = config_toml(&url, &self.db_url, &self.peers, &opts);
        let dir = std::env::temp_dir().join(format!("mcp-connect-replica-{}", random_name()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.toml");
        std::fs::write(&path, testkit::process::listening_on(&toml, port)).unwrap();
        let child = testkit::process::serve(env!("CARGO_BIN_EXE_mcp-connect").as_ref(), &path)
            .envs(env.iter().copied())
            // Its log, with the test's output.
            .stdout(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        if testkit::process::wait_ready(&url, 200, std::time::Duration::from_millis(50)).await {
            return (url, child);
        }
        panic!("the replica process did not become ready");
    }

    /// Moves a connection's last refresh a minute into the past (time passing, as far as the
    /// "just refreshed" rule is concerned).
    pub async fn age(&self, subject: &str) {
        sqlx::query(
            "UPDATE connections SET last_refresh_at = last_refresh_at - 60 WHERE subject = $1",
        )
        .bind(subject)
        .execute(&self.state.db.pool)
        .await
        .unwrap();
        // A write outside the app reaches token caches within their sync window.
        tokio::time::sleep(self.state.token_cache.window() + std::time::Duration::from_millis(20))
            .await;
    }

    /// Every test that shuts its app down checks this: no audit event holds a secret, a token
    /// or a code that this test's peers issued (so the whole test run is covered).
    /// Waits until a write made outside the app (raw SQL) has reached the token cache: its sync
    /// window and a little more (docs/token-cache.md).
    pub async fn wait_for_cache_sync(&self) {
        tokio::time::sleep(self.state.token_cache.window() + std::time::Duration::from_millis(20))
            .await;
    }

    pub async fn assert_audit_log_holds_no_secret(&self) {
        if let Err(problem) =
            audit_log_secret_check(&self.state.db.pool, &self.secret_sources()).await
        {
            panic!("{problem}");
        }
    }

    /// What the audit check compares the log against (values, or where to fetch them).
    fn secret_sources(&self) -> SecretSources {
        SecretSources {
            key: self.key.clone(),
            peers: self
                .peers
                .child
                .is_some()
                .then(|| (self.peers.identity.clone(), self.peers.upstream.clone())),
        }
    }

    /// Raw SQL against the app's database, for invariant checks.
    pub fn db(&self) -> &mcp_connect::db::Db {
        &self.state.db
    }
}

/// The encryption key and, when this test runs the OAuth peers, their base URLs (whose
/// `/__issued` lists every code and token they handed out).
pub struct SecretSources {
    key: String,
    peers: Option<(String, String)>,
}

/// Fails (with what it found, never the value) if any audit row holds a secret: an API key, a
/// client secret, the encryption key, or any code or token the peers issued.
pub async fn audit_log_secret_check<'p>(
    pool: impl sqlx::Executor<'p, Database = sqlx::Any>,
    sources: &SecretSources,
) -> Result<(), String> {
    use sqlx::Row;
    let rows: Vec<sqlx::any::AnyRow> = sqlx::query(
        "SELECT event, COALESCE(actor, ''), COALESCE(issuer, ''), COALESCE(subject, ''), COALESCE(provider, ''), \
         COALESCE(client_id, ''), COALESCE(connection_id, ''), COALESCE(elicitation_id, ''), COALESCE(request_id, ''), \
         COALESCE(detail, '') FROM audit_events",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    let mut dump = String::new();
    for r in rows {
        for i in 0..r.len() {
            dump.push_str(&r.try_get::<String, _>(i).unwrap_or_default());
            dump.push('\n');
        }
    }
    let key_b64 = sources.key.split_once(':').map(|k| k.1).unwrap_or_default();
    let mut secrets: Vec<(String, String)> = [
        ("API key", API_KEY),
        ("other API key", OTHER_API_KEY),
        ("identity secret", IDENTITY_SECRET),
        ("upstream secret", UPSTREAM_SECRET),
        ("encryption key", key_b64),
    ]
    .iter()
    .map(|(l, v)| (l.to_string(), v.to_string()))
    .collect();
    if let Some((identity, upstream)) = &sources.peers {
        for (peer, base) in [("identity", identity), ("upstream", upstream)] {
            let Ok(r) = reqwest::get(format!("{base}/__issued")).await else {
                continue;
            };
            let issued: Value = r.json().await.unwrap_or(Value::Null);
            for kind in ["authorization_code", "access_token", "refresh_token"] {
                for v in issued[kind].as_array().into_iter().flatten() {
                    if let Some(v) = v.as_str() {
                        secrets.push((format!("{peer} {kind}"), v.to_owned()));
                    }
                }
            }
        }
    }
    match secrets
        .iter()
        .find(|(_, v)| v.len() >= 8 && dump.contains(v.as_str()))
    {
        Some((label, _)) => Err(format!("the audit log holds a secret ({label})")),
        None => Ok(()),
    }
}

/// How many running apps use each test database (an app and its replicas share one).
fn live_apps() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, usize>> {
    static LIVE: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, usize>>> =
        std::sync::OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// One app stopped using `db_url`; how many still do.
fn release(db_url: &str) -> usize {
    let mut live = live_apps();
    let n = live.get(db_url).copied().unwrap_or(1).saturating_sub(1);
    if n == 0 {
        live.remove(db_url);
    } else {
        live.insert(db_url.to_owned(), n);
    }
    n
}

impl Drop for TestApp {
    /// A test that ends without `shutdown` leaves nothing behind either: the app is told to stop,
    /// the audit log is checked for secrets, and the database is dropped. A failing (panicking)
    /// test keeps its database, to look at. The work runs on a thread of its own with its own
    /// runtime and connection, so it needs nothing from the test's runtime.
    fn drop(&mut self) {
        let Some(stop) = self.stop.take() else {
            return;
        };
        let _ = stop.send(());
        // Another app (a replica) still uses this database: it is dropped with the last one.
        let last = release(&self.db_url) == 0;
        if std::thread::panicking() {
            return;
        }
        let db_url = self.db_url.clone();
        let sources = self.secret_sources();
        let outcome = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cleanup runtime: {e}"))?;
            rt.block_on(async move {
                let checked = match sqlx::AnyPool::connect(&db_url).await {
                    Ok(pool) => {
                        let r = audit_log_secret_check(&pool, &sources).await;
                        pool.close().await;
                        r
                    }
                    // Gone already: an app that shared it (a replica) was shut down with
                    // `shutdown`, which checked the log and dropped the database.
                    Err(_) => Ok(()),
                };
                if last {
                    let _ = drop_database(&db_url).await;
                }
                checked
            })
        })
        .join();
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(problem)) => panic!("{problem}"),
            Err(_) => panic!("the test database's clean-up panicked"),
        }
    }
}

/// Sends an API request; its status and JSON body (`Null` when the body is not JSON).
pub async fn reply(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let r = request.send().await.unwrap();
    let s = r.status();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// The Postgres server's `postgres` database, to act on a test database from outside (cut it
/// off, end its sessions).
pub async fn postgres_admin() -> sqlx::PgPool {
    sqlx::PgPool::connect(&format!("{}/postgres", testkit::db::postgres_base()))
        .await
        .unwrap()
}

/// `r` sends the browser to sign in at `app`'s identity issuer (303 to it).
pub fn assert_sent_to_sign_in(r: &reqwest::Response, app: &TestApp) {
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(
        r.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with(&app.peers.identity)
    );
}

/// `POST {base}/v1/tokens` as `demo-mcp` (to any replica, with `api`).
pub async fn fetch_token(api: &reqwest::Client, base: &str, body: Value) -> (StatusCode, Value) {
    reply(
        api.post(format!("{base}/v1/tokens"))
            .bearer_auth(API_KEY)
            .json(&body),
    )
    .await
}

pub fn config_toml(url: &str, db_url: &str, peers: &Peers, opts: &Options) -> String {
    let key = &opts.key;
    let extra = &opts.extra_toml;
    let other = &opts.other_provider;
    let refresh_ahead = opts.refresh_ahead;
    let demo_extra = &opts.demo_client_extra;
    format!(
        r#"
public_url = "{url}"
listen = "127.0.0.1:0"
database_url = "{db_url}"
encryption_keys = ["{key}"]
refresh_ahead_seconds = {refresh_ahead}
refresh_scan_seconds = 1
outbound_allow_cidrs = ["127.0.0.0/8"]

{identity}{identity_extra}
[[clients]]
id = "demo-mcp"
name = "Demo MCP"
api_key = "{API_KEY}"
providers = ["acme"]
{demo_extra}

[[clients]]
id = "other-mcp"
api_key = "{OTHER_API_KEY}"
providers = ["acme", "other"]

{acme}{acme_api}
[providers.other]
{other}
{extra}
"#,
        identity = testkit::peers::identity_toml(&peers.identity),
        identity_extra = opts.identity_extra,
        acme = testkit::peers::provider_toml(&peers.upstream),
        acme_api =
            testkit::peers::api_base_toml(opts.acme_api_base_url.as_deref(), &peers.upstream),
    )
}

/// Declares one test per database engine.
#[macro_export]
macro_rules! on_both_databases {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                ($body)($crate::harness::DbKind::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                ($body)($crate::harness::DbKind::Postgres).await
            }
        }
    };
}

/// A database at `db_url` migrated as an older release left it: this tree's migrations up to
/// `version` only (what `Db::migrate` would apply after it is the upgrade under test).
pub async fn migrated_up_to(kind: DbKind, db_url: &str, version: i64) -> mcp_connect::db::Db {
    let db = mcp_connect::db::Db::connect(&db_url.parse().unwrap())
        .await
        .unwrap();
    let engine = if kind == DbKind::Sqlite {
        "sqlite"
    } else {
        "postgres"
    };
    let dir = format!("{}/migrations/{engine}", env!("CARGO_MANIFEST_DIR"));
    let mut old = sqlx::migrate::Migrator::new(std::path::Path::new(&dir))
        .await
        .unwrap();
    old.migrations = old
        .migrations
        .iter()
        .filter(|m| m.version <= version)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    old.run(&mut *db.pool.acquire().await.unwrap())
        .await
        .unwrap();
    db
}

/// The `/metrics` exposition of the service at `url`, as a scraper on loopback gets it.
pub async fn scrape_metrics(url: &str) -> String {
    reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
