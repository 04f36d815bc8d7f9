//! Test harness: the real app on port 0 against a fresh database (Postgres or SQLite), the real
//! `oidc-provider` peers (identity issuer and upstream provider) on loopback, and a cookie-keeping
//! HTTP client that walks the browser pages.

use std::io::Write;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};

use mcp_connect::config::Config;
use mcp_connect::{AppState, Application};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const API_KEY: &str = "test-api-key-0123456789abcdefghij";
pub const OTHER_API_KEY: &str = "other-api-key-0123456789abcdefghij";
pub const IDENTITY_SECRET: &str = "identity-secret";
pub const UPSTREAM_SECRET: &str = "upstream-secret";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    Sqlite,
    Postgres,
}

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

/// The two `oidc-provider` instances.
pub struct Peers {
    pub identity: String,
    pub upstream: String,
    pub child: Option<Child>,
}

impl Peers {
    pub async fn start(connect_url: &str, access_token_ttl: u64) -> Peers {
        // One retry: a start that stalls under heavy parallel load should not fail a test.
        for attempt in 1..=2 {
            match Self::try_start(connect_url, access_token_ttl).await {
                Ok(p) => return p,
                Err(e) if attempt == 1 => eprintln!("peers did not start ({e}); retrying"),
                Err(e) => panic!("peers did not start: {e}"),
            }
        }
        unreachable!()
    }

    async fn try_start(connect_url: &str, access_token_ttl: u64) -> Result<Peers, String> {
        let root = env!("CARGO_MANIFEST_DIR");
        let log_path =
            std::env::temp_dir().join(format!("mcp-connect-peers-{}.log", random_name()));
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        let mut child = Command::new("node")
            .arg(format!("{root}/tests/peers/peers.mjs"))
            .args(["--connect-url", connect_url, "--provider-name", "acme", "--access-token-ttl", &access_token_ttl.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("node must be installed and tests/peers must have its npm packages (npm ci --prefix tests/peers): {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = match tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line())
            .await
        {
            Ok(Ok(Some(l))) => l,
            other => {
                let _ = child.kill().await;
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: String = log
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                return Err(format!("{other:?}; peers log:\n{tail}"));
            }
        };
        let v: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        Ok(Peers {
            identity: v["identity"].as_str().unwrap_or_default().to_owned(),
            upstream: v["upstream"].as_str().unwrap_or_default().to_owned(),
            child: Some(child),
        })
    }

    /// Takes the peers down (a provider outage).
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    pub async fn stats(&self) -> Value {
        reqwest::get(format!("{}/__stats", self.upstream))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn whoami(&self, token: &str) -> (StatusCode, Value) {
        let r = reqwest::Client::new()
            .get(format!("{}/api/whoami", self.upstream))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let s = r.status();
        (s, r.json().await.unwrap_or(Value::Null))
    }
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

pub fn random_name() -> String {
    mcp_connect::crypto::random_token(9)
        .to_ascii_lowercase()
        .replace(['-', '_'], "x")
}

pub fn db_url(kind: DbKind) -> String {
    match kind {
        DbKind::Sqlite => {
            let dir = std::env::temp_dir().join(format!("mcp-connect-test-{}", random_name()));
            format!("sqlite://{}/db.sqlite", dir.display())
        }
        DbKind::Postgres => {
            let base = std::env::var("MCP_CONNECT_TEST_PG")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
            format!("{base}/mcpc_test_{}", random_name())
        }
    }
}

/// Removes a test's database once the test is done with it (a failing test keeps its own, to
/// look at). Replicas in other processes may still be connected: `FORCE` ends their sessions.
pub async fn drop_database(db_url: &str) {
    if let Some(path) = db_url.strip_prefix("sqlite://") {
        if let Some(dir) = std::path::Path::new(path).parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
        return;
    }
    let Some((base, name)) = db_url.rsplit_once('/') else {
        return;
    };
    if !name.starts_with("mcpc_test_") {
        return;
    }
    if let Ok(admin) = sqlx::PgPool::connect(&format!("{base}/postgres")).await {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&admin)
            .await;
        admin.close().await;
    }
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
        drop_database(&db_url).await;
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
        let r = self
            .api
            .post(format!("{}{path}", self.url))
            .bearer_auth(API_KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        let s = r.status();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .api
            .get(format!("{}{path}", self.url))
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap();
        let s = r.status();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .api
            .delete(format!("{}{path}", self.url))
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap();
        let s = r.status();
        (s, r.json().await.unwrap_or(Value::Null))
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
        let b = self.browser();
        let page = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), subject)
            .await;
        let done = b.consent_and_allow(&page, subject).await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
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
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let opts = Options {
            key: self.key.clone(),
            ..opts.clone()
        };
        let toml = config_toml(&url, &self.db_url, &self.peers, &opts).replace(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"127.0.0.1:{port}\""),
        );
        let dir = std::env::temp_dir().join(format!("mcp-connect-replica-{}", random_name()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.toml");
        std::fs::write(&path, toml).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_mcp-connect"))
            .args(["serve", "--config", path.to_str().unwrap()])
            .envs(env.iter().copied())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let http = reqwest::Client::new();
        for _ in 0..200 {
            if http
                .get(format!("{url}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return (url, child);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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
pub async fn audit_log_secret_check(
    pool: &sqlx::AnyPool,
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
                    drop_database(&db_url).await;
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

[identity]
issuer = "{identity}"
client_id = "mcp-connect"
client_secret = "{IDENTITY_SECRET}"

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

[providers.acme]
display_name = "Acme"
issuer = "{upstream}"
client_id = "mcp-connect-upstream"
client_secret = "{UPSTREAM_SECRET}"
scopes = ["openid", "offline_access", "api"]

[providers.other]
{other}
{extra}
"#,
        identity = peers.identity,
        upstream = peers.upstream,
    )
}

/// A page as the browser got it.
pub struct Page {
    pub status: StatusCode,
    pub url: String,
    pub body: String,
}

impl Page {
    pub fn form(&self, selector: &str) -> (String, Vec<(String, String)>) {
        let doc = scraper::Html::parse_document(&self.body);
        let sel = scraper::Selector::parse(selector).unwrap();
        let form = doc
            .select(&sel)
            .next()
            .unwrap_or_else(|| panic!("no {selector} in {} {}", self.url, self.body));
        let action = form.value().attr("action").unwrap_or("");
        let action = reqwest::Url::parse(&self.url)
            .unwrap()
            .join(action)
            .unwrap()
            .to_string();
        let inputs = scraper::Selector::parse("input").unwrap();
        let fields = form
            .select(&inputs)
            .filter_map(|i| {
                Some((
                    i.value().attr("name")?.to_owned(),
                    i.value().attr("value").unwrap_or("").to_owned(),
                ))
            })
            .collect();
        (action, fields)
    }

    pub fn has(&self, text: &str) -> bool {
        self.body.contains(text)
    }
}

/// A cookie-keeping HTTP client that follows redirects like a browser.
pub struct Browser {
    pub client: reqwest::Client,
    pub jar: Arc<reqwest::cookie::Jar>,
}

impl Browser {
    pub fn new() -> Self {
        let jar = Arc::new(reqwest::cookie::Jar::default());
        let client = reqwest::Client::builder()
            .cookie_provider(jar.clone())
            .redirect(reqwest::redirect::Policy::limited(20))
            .build()
            .unwrap();
        Self { client, jar }
    }

    /// The cookies this browser would send to `url`.
    pub fn cookies(&self, url: &str) -> String {
        use reqwest::cookie::CookieStore;
        self.jar
            .cookies(&reqwest::Url::parse(url).unwrap())
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }

    /// Follows redirects except the one back to a provider callback, so a test can hold the
    /// callback URL (code and state) and present it as it likes.
    pub fn stopping_at_callback() -> Self {
        let policy = reqwest::redirect::Policy::custom(|a| {
            if a.url().path().starts_with("/oauth/") || a.previous().len() > 20 {
                a.stop()
            } else {
                a.follow()
            }
        });
        let jar = Arc::new(reqwest::cookie::Jar::default());
        Self {
            client: reqwest::Client::builder()
                .cookie_provider(jar.clone())
                .redirect(policy)
                .build()
                .unwrap(),
            jar,
        }
    }

    pub async fn get(&self, url: &str) -> Page {
        let r = self.client.get(url).send().await.unwrap();
        self.settle(r).await
    }

    pub async fn submit(&self, page: &Page, selector: &str, overrides: &[(&str, &str)]) -> Page {
        let (action, mut fields) = page.form(selector);
        for (k, v) in overrides {
            fields.retain(|(fk, _)| fk != k);
            fields.push((k.to_string(), v.to_string()));
        }
        let r = self
            .client
            .post(&action)
            .form(&fields)
            .send()
            .await
            .unwrap();
        self.settle(r).await
    }

    /// Reads the page, and does what a browser's JavaScript would do with the issuer's
    /// self-submitting forms (e.g. its end-session confirmation).
    async fn settle(&self, mut r: reqwest::Response) -> Page {
        for _ in 0..5 {
            let page = Page {
                status: r.status(),
                url: r.url().to_string(),
                body: r.text().await.unwrap(),
            };
            if !page.body.contains("document.forms[0].submit()") {
                return page;
            }
            let (action, fields) = page.form("form");
            r = self
                .client
                .post(&action)
                .form(&fields)
                .send()
                .await
                .unwrap();
        }
        panic!("too many self-submitting pages");
    }

    /// Opens a connect URL, signs in at the identity issuer as `user`, returns where it lands.
    pub async fn sign_in_to_consent(&self, connect_url: &str, user: &str) -> Page {
        let login = self.get(connect_url).await;
        if login.url.starts_with(connect_url) {
            return login; // already signed in
        }
        assert!(
            login.has("name=\"login\""),
            "expected the identity login page, got {} {}",
            login.url,
            login.body
        );
        self.submit(&login, "form", &[("login", user)]).await
    }

    /// On the consent page: Continue, then sign in and Allow at the provider. Returns the page
    /// mcp-connect shows at the end.
    pub async fn consent_and_allow(&self, consent: &Page, user: &str) -> Page {
        assert!(
            consent.has("Continue"),
            "not a consent page: {} {}",
            consent.url,
            consent.body
        );
        let upstream_login = self
            .submit(consent, "form.actions", &[("action", "continue")])
            .await;
        let upstream_consent = if upstream_login.has("name=\"login\"") {
            self.submit(&upstream_login, "form", &[("login", user)])
                .await
        } else {
            upstream_login
        };
        assert!(
            upstream_consent.has("Allow"),
            "expected the provider consent page: {} {}",
            upstream_consent.url,
            upstream_consent.body
        );
        self.submit(&upstream_consent, "form", &[("decision", "allow")])
            .await
    }
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
