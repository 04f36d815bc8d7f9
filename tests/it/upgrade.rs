//! Rolling upgrade (issue 15): the previous release and this checkout's binary side by side on
//! one database migrated by the new binary, and the static check that keeps migrations
//! expand-only.
//!
//! The previous release is built by `scripts/previous-binary` (`MCP_CONNECT_PREVIOUS_REF`, cached
//! under target/previous). When it cannot be built (no git history, no network for a shallow
//! clone) the side-by-side tests say so on stderr and end without running, unless
//! `MCP_CONNECT_REQUIRE_PREVIOUS=1` (set by `.ci/run`), which makes that a failure.
//!
//! The sequence follows a real rolling upgrade: the old binary migrates a fresh database and
//! serves, users connect; the new binary's migrations run while the old one keeps serving; a new
//! replica joins; then the core flow (connect, token fetch, refresh, revoke) runs on each binary
//! and across them: rows the old binary wrote are used by the new one and the other way round.
//! Which migrations run is read from migrations/ of both trees, never listed here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use mcp_connect::db::Db;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::harness::*;
use crate::on_both_databases;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

// --- the previous release ----------------------------------------------------------------------

struct Previous {
    bin: PathBuf,
    /// Its source tree (its migrations/).
    src: PathBuf,
}

/// Builds (or finds cached) the previous release with scripts/previous-binary.
fn previous_release() -> Option<Previous> {
    let out = std::process::Command::new("bash")
        .arg(format!("{ROOT}/scripts/previous-binary"))
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bin = stdout.lines().last().map(PathBuf::from);
    match bin {
        Some(bin) if out.status.success() && bin.is_file() => Some(Previous {
            bin,
            src: PathBuf::from(ROOT).join("target/previous/src"),
        }),
        _ => {
            let why = format!(
                "the previous release could not be built by scripts/previous-binary ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            if std::env::var("MCP_CONNECT_REQUIRE_PREVIOUS").is_ok_and(|v| !v.is_empty()) {
                panic!("{why}");
            }
            eprintln!(
                "SKIPPED: old and new binary side by side not tested: {why}\n(set MCP_CONNECT_REQUIRE_PREVIOUS=1 to make this a failure)"
            );
            None
        }
    }
}

/// The migration versions in `tree`/migrations/`engine` (the numbers their file names start with).
fn migration_versions(tree: &Path, engine: &str) -> BTreeSet<i64> {
    let dir = tree.join("migrations").join(engine);
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let sql = name.strip_suffix(".sql")?;
            sql.split('_').next()?.parse().ok()
        })
        .collect()
}

async fn applied_versions(db: &Db) -> BTreeSet<i64> {
    use sqlx::Row;
    sqlx::query("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<i64, _>(0))
        .collect()
}

// --- the browser's way in: a switchable reverse proxy at `public_url` --------------------------

#[derive(Clone, Copy)]
enum Route {
    To(usize),
    /// Each request to the next backend in turn.
    Alternate,
}

/// Both binaries have the same `public_url` (the identity issuer and the provider redirect
/// there): this proxy. The test points it at one binary to walk a flow on that binary alone,
/// or alternates so that each hop of one flow lands on the other binary.
#[derive(Clone)]
struct Proxy {
    url: String,
    backends: Arc<Mutex<Vec<String>>>,
    route: Arc<Mutex<Route>>,
    next: Arc<AtomicUsize>,
    /// Which backend served each request.
    served: Arc<Mutex<Vec<usize>>>,
    http: reqwest::Client,
}

impl Proxy {
    async fn start() -> Proxy {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = Proxy {
            url: format!("http://{}", l.local_addr().unwrap()),
            backends: Arc::default(),
            route: Arc::new(Mutex::new(Route::To(0))),
            next: Arc::default(),
            served: Arc::default(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
        };
        let app = Router::new().fallback(forward).with_state(p.clone());
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        p
    }

    fn route(&self, r: Route) {
        *self.route.lock().unwrap() = r;
    }
}

async fn forward(State(p): State<Proxy>, req: axum::extract::Request) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let n = p.backends.lock().unwrap().len();
    let i = match *p.route.lock().unwrap() {
        Route::To(i) => i,
        Route::Alternate => p.next.fetch_add(1, Ordering::SeqCst) % n,
    };
    p.served.lock().unwrap().push(i);
    let base = p.backends.lock().unwrap()[i].clone();
    let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let mut rb = p
        .http
        .request(parts.method, format!("{base}{path}"))
        .body(body);
    for (k, v) in &parts.headers {
        if k != axum::http::header::HOST && k != axum::http::header::CONTENT_LENGTH {
            rb = rb.header(k, v);
        }
    }
    match rb.send().await {
        Ok(r) => {
            let status = r.status();
            let mut headers = r.headers().clone();
            for h in [
                axum::http::header::CONTENT_LENGTH,
                axum::http::header::TRANSFER_ENCODING,
                axum::http::header::CONNECTION,
            ] {
                headers.remove(h);
            }
            let bytes = r.bytes().await.unwrap_or_default();
            (status, headers, bytes).into_response()
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

// --- one binary as a process -------------------------------------------------------------------

struct Server {
    label: &'static str,
    url: String,
    config: PathBuf,
    child: Child,
}

/// The environment of the binaries under test: this process's, without its `MCP_CONNECT_*`
/// variables (the test tooling's, e.g. `MCP_CONNECT_PREVIOUS_REF`, which a release that does
/// not know them would take for config keys).
fn base_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| !k.starts_with("MCP_CONNECT_"))
        .collect()
}

/// `bin migrate` with this config; its exit status and log.
async fn migrate(bin: &Path, config: &Path, log: &Path) -> (bool, String) {
    let status = Command::new(bin)
        .args(["migrate", "--config", config.to_str().unwrap()])
        .env_clear()
        .envs(base_env())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
        .status()
        .await
        .unwrap();
    (
        status.success(),
        std::fs::read_to_string(log).unwrap_or_default(),
    )
}

/// Config keys added since the previous release (`MCP_CONNECT_PREVIOUS_REF`), which it would
/// refuse as unknown: the harness writes them for this release.
const KEYS_SINCE_PREVIOUS_RELEASE: &[&str] = &["outbound_allow_cidrs", "api_base_url"];

/// `toml` without the keys the previous release does not know.
fn for_previous_release(toml: &str) -> String {
    toml.lines()
        .filter(|l| {
            let key = l.split('=').next().unwrap_or("").trim();
            !KEYS_SINCE_PREVIOUS_RELEASE.contains(&key)
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `bin serve` on a port of its own with the shared config; waits until /readyz is 200.
async fn serve(label: &'static str, bin: &Path, toml: &str, dir: &Path) -> Server {
    let port = free_port();
    let config = dir.join(format!("{label}.toml"));
    std::fs::write(&config, testkit::process::listening_on(toml, port)).unwrap();
    let log = dir.join(format!("{label}.log"));
    let child = testkit::process::serve(bin, &config)
        .env_clear()
        .envs(base_env())
        .env("RUST_LOG", "info")
        .stderr(Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .unwrap(),
        ))
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    if testkit::process::wait_ready(&url, 400, Duration::from_millis(50)).await {
        return Server {
            label,
            url,
            config,
            child,
        };
    }
    panic!(
        "the {label} binary did not become ready:\n{}",
        testkit::process::log_tail(&log, 30)
    );
}

// --- the core flow -----------------------------------------------------------------------------

struct World {
    proxy: Proxy,
    peers: Peers,
    db: Db,
    api: reqwest::Client,
}

impl World {
    async fn call(
        &self,
        s: &Server,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut rb = self
            .api
            .request(method, format!("{}{path}", s.url))
            .bearer_auth(API_KEY);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let r = rb.send().await.unwrap();
        let st = r.status();
        (st, r.json().await.unwrap_or(Value::Null))
    }

    /// The connect flow: the elicitation created on `api`, the browser's hops sent to `route`.
    async fn connect(&self, api: &Server, route: Route, subject: &str) -> String {
        let (s, e) = self
            .call(
                api,
                reqwest::Method::POST,
                "/v1/elicitations",
                Some(json!({"subject": subject, "provider": "acme"})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{}: {e}", api.label);
        self.proxy.route(route);
        let b = Browser::new();
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), subject)
            .await;
        let done = b.consent_and_allow(&consent, subject).await;
        assert_eq!(done.status, StatusCode::OK, "{subject}: {}", done.body);
        let (s, v) = self
            .call(
                api,
                reqwest::Method::GET,
                &format!("/v1/elicitations/{}", e["id"].as_str().unwrap()),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["status"], "completed", "{subject} on {}: {v}", api.label);
        v["connection_id"].as_str().unwrap().to_owned()
    }

    /// A token fetch on `s` that must succeed with a token the provider accepts.
    async fn token(&self, s: &Server, subject: &str, min_ttl: Option<u64>) -> String {
        let mut body = json!({"subject": subject, "provider": "acme"});
        if let Some(t) = min_ttl {
            body["min_ttl_seconds"] = json!(t);
        }
        let (st, v) = self
            .call(s, reqwest::Method::POST, "/v1/tokens", Some(body))
            .await;
        assert_eq!(st, StatusCode::OK, "{subject} on {}: {v}", s.label);
        let at = v["access_token"].as_str().unwrap().to_owned();
        assert_eq!(
            self.peers.whoami(&at).await.0,
            StatusCode::OK,
            "{subject} on {}: the provider refuses the token",
            s.label
        );
        at
    }

    /// A refresh on `s` (the connection's last refresh moved a minute back, a minimum TTL above
    /// the provider's 120 s): one more redemption at the provider, a new access token.
    async fn refresh(&self, s: &Server, subject: &str, before: &str) -> String {
        sqlx::query(
            "UPDATE connections SET last_refresh_at = last_refresh_at - 60 WHERE subject = $1",
        )
        .bind(subject)
        .execute(&self.db.pool)
        .await
        .unwrap();
        // A write outside the app reaches the new binary's token cache within its sync window
        // (100 ms by default, docs/token-cache.md).
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let n = self.peers.stats().await["refresh_token"].as_i64().unwrap();
        let at = self.token(s, subject, Some(300)).await;
        assert_ne!(at, before, "{subject} on {}: not refreshed", s.label);
        let stats = self.peers.stats().await;
        assert_eq!(
            stats["refresh_token"].as_i64().unwrap(),
            n + 1,
            "{subject} on {}: {stats}",
            s.label
        );
        at
    }

    async fn revoke(&self, s: &Server, subject: &str, connection: &str) {
        let (st, v) = self
            .call(
                s,
                reqwest::Method::DELETE,
                &format!("/v1/connections/{connection}"),
                None,
            )
            .await;
        assert_eq!(st, StatusCode::OK, "revoking {subject} on {}: {v}", s.label);
    }

    async fn assert_gone(&self, s: &Server, subject: &str) {
        let (st, v) = self
            .call(
                s,
                reqwest::Method::POST,
                "/v1/tokens",
                Some(json!({"subject": subject, "provider": "acme"})),
            )
            .await;
        assert!(
            st.is_client_error(),
            "{subject} revoked, yet {} answers {st} {v}",
            s.label
        );
        let (st, v) = self
            .call(
                s,
                reqwest::Method::GET,
                &format!("/v1/connections?subject={subject}"),
                None,
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        // A revoked connection stays listed as such, its tokens gone.
        for c in v["connections"].as_array().unwrap() {
            assert_eq!(c["status"], "revoked", "{subject} on {}: {c}", s.label);
            assert_eq!(
                c["has_refresh_token"], false,
                "{subject} on {}: {c}",
                s.label
            );
        }
    }
}

async fn old_and_new_side_by_side(kind: DbKind) {
    let Some(prev) = previous_release() else {
        return;
    };
    let engine = match kind {
        DbKind::Postgres => "postgres",
        DbKind::Sqlite => "sqlite",
    };
    let new_bin = PathBuf::from(env!("CARGO_BIN_EXE_mcp-connect"));
    let old_versions = migration_versions(&prev.src, engine);
    let new_versions = migration_versions(Path::new(ROOT), engine);
    let added: Vec<_> = new_versions.difference(&old_versions).collect();
    eprintln!(
        "upgrade on {engine}: the previous release has {} migrations, this tree {} (new: {added:?})",
        old_versions.len(),
        new_versions.len()
    );
    assert!(
        old_versions.is_subset(&new_versions),
        "a migration of the previous release is gone from migrations/{engine}: {:?}",
        old_versions.difference(&new_versions).collect::<Vec<_>>()
    );

    let dir = std::env::temp_dir().join(format!("mcp-connect-upgrade-{}", random_name()));
    std::fs::create_dir_all(&dir).unwrap();
    let proxy = Proxy::start().await;
    // Access tokens live 120 s: a fetch asking for 300 s refreshes.
    let peers = Peers::start(&proxy.url, 120).await;
    let db_url = db_url(kind);
    let opts = Options::default();
    let toml = config_toml(&proxy.url, &db_url, &peers, &opts);
    let shared = dir.join("shared.toml");
    std::fs::write(&shared, &toml).unwrap();
    // The previous release refuses keys it does not know: it keeps its own config, as old pods
    // do in a real rollout.
    let old_toml = for_previous_release(&toml);
    let shared_old = dir.join("shared-old.toml");
    std::fs::write(&shared_old, &old_toml).unwrap();

    // 1. The old release migrates a fresh database and serves; a user connects through it.
    let (ok, log) = migrate(&prev.bin, &shared_old, &dir.join("old-migrate.log")).await;
    assert!(ok, "the previous release's migrate failed:\n{log}");
    let db = Db::connect(&db_url.parse().unwrap()).await.unwrap();
    assert_eq!(applied_versions(&db).await, old_versions);
    let mut old = serve("old", &prev.bin, &old_toml, &dir).await;
    proxy.backends.lock().unwrap().push(old.url.clone());
    let w = World {
        proxy,
        peers,
        db,
        api: reqwest::Client::new(),
    };
    let alice = w.connect(&old, Route::To(0), "alice").await;
    let alice_at = w.token(&old, "alice", None).await;

    // 2. The new binary's migrations, while the old one serves.
    let (ok, log) = migrate(&new_bin, &shared, &dir.join("new-migrate.log")).await;
    assert!(ok, "the new binary's migrate failed:\n{log}");
    assert_eq!(applied_versions(&w.db).await, new_versions);
    assert_eq!(
        w.token(&old, "alice", None).await,
        alice_at,
        "the old binary lost alice's token on the migrated schema"
    );

    // 3. A new replica joins: both serve the same database.
    let new = serve("new", &new_bin, &toml, &dir).await;
    w.proxy.backends.lock().unwrap().push(new.url.clone());

    // The connect flow on each binary alone, and one whose hops alternate between them.
    let bob = w.connect(&old, Route::To(0), "bob").await;
    let carol = w.connect(&new, Route::To(1), "carol").await;
    let before = w.proxy.served.lock().unwrap().len();
    let dave = w.connect(&new, Route::Alternate, "dave").await;
    let hops: BTreeSet<usize> = w.proxy.served.lock().unwrap()[before..]
        .iter()
        .copied()
        .collect();
    assert_eq!(hops.len(), 2, "dave's flow did not cross the binaries");

    // Token fetches: every row on both binaries (old-written on the new, new-written on the old).
    let mut tokens = std::collections::HashMap::new();
    for subject in ["alice", "bob", "carol", "dave"] {
        let on_old = w.token(&old, subject, None).await;
        let on_new = w.token(&new, subject, None).await;
        assert_eq!(on_old, on_new, "{subject}: the binaries disagree");
        tokens.insert(subject, on_old);
    }

    // Refresh on one binary, the refreshed row read by the other.
    for (subject, by, reader) in [
        ("alice", &new, &old),
        ("bob", &new, &old),
        ("carol", &old, &new),
        ("dave", &old, &new),
    ] {
        let at = w.refresh(by, subject, &tokens[subject]).await;
        assert_eq!(
            w.token(reader, subject, None).await,
            at,
            "{subject} refreshed on {}, read on {}",
            by.label,
            reader.label
        );
        tokens.insert(subject, at);
    }

    // Revocation of the other binary's rows. A release before the token cache does not wait
    // out the cache's sync window after its DELETE (docs/token-cache.md): a new replica stops
    // serving a row the old one revoked within that window (100 ms by default), so the test
    // gives it that long before asking the new binary.
    let old_revoke_reaches_new = std::time::Duration::from_millis(300);
    w.revoke(&old, "carol", &carol).await;
    tokio::time::sleep(old_revoke_reaches_new).await;
    w.revoke(&new, "bob", &bob).await;
    for s in [&old, &new] {
        w.assert_gone(s, "carol").await;
        w.assert_gone(s, "bob").await;
    }
    w.revoke(&new, "alice", &alice).await;
    w.revoke(&old, "dave", &dave).await;
    tokio::time::sleep(old_revoke_reaches_new).await;
    w.assert_gone(&old, "alice").await;
    w.assert_gone(&new, "dave").await;

    // 4. An old replica that restarts now (a crash, a rollback of the rollout) migrates at
    // start-up against a schema with migrations it does not know.
    let _ = old.child.kill().await;
    let tolerant = std::fs::read_to_string(prev.src.join("src/db/mod.rs"))
        .unwrap_or_default()
        .contains("set_ignore_missing(true)");
    let (ok, log) = migrate(&prev.bin, &old.config, &dir.join("old-again.log")).await;
    if tolerant || added.is_empty() {
        assert!(
            ok,
            "the previous release refuses the migrated schema:\n{log}"
        );
        let old = serve("old", &prev.bin, &old_toml, &dir).await;
        w.proxy.backends.lock().unwrap().push(old.url.clone());
        w.connect(&old, Route::To(2), "erin").await;
        w.token(&new, "erin", None).await;
        eprintln!("upgrade on {engine}: the previous release restarts on the migrated schema");
    } else {
        // Releases before this one stop at migrations they do not know (sqlx's VersionMissing);
        // docs/deploy.md says what that means for an upgrade from them.
        assert!(
            !ok && log.contains("missing"),
            "expected the known refusal of the previous release:\n{log}"
        );
        eprintln!(
            "upgrade on {engine}: as documented, the previous release does not restart on the migrated schema (it predates ignore_missing)"
        );
    }
    drop(new);
    w.db.pool.close().await;
    let _ = drop_database(&db_url).await;
    let _ = std::fs::remove_dir_all(&dir);
}

on_both_databases!(upgrade_old_and_new_binary_side_by_side, |kind| async move {
    old_and_new_side_by_side(kind).await
});

// --- migrations are expand-only ----------------------------------------------------------------

/// The comment that marks a deliberate contract step (migrations/README.md).
const CONTRACT_MARKER: &str = "contract-step:";

/// The statements of `sql` that break the previous release (expand-only rule), as
/// (line, statement, why); a statement preceded by (or carrying) a `-- contract-step:` comment
/// is allowed.
fn contract_steps(sql: &str) -> Vec<(usize, String, &'static str)> {
    // Split into statements, leaving out comments and string literals (whose text may hold
    // anything), keeping the line each statement starts on and whether a marker precedes it.
    let mut found = Vec::new();
    let (mut stmt, mut start, mut marked) = (String::new(), 0usize, false);
    let mut line = 1;
    let chars: Vec<char> = sql.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '-' && chars.get(i + 1) == Some(&'-') {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p);
            let comment: String = chars[i..end].iter().collect();
            marked |= comment.contains(CONTRACT_MARKER);
            i = end;
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            let mut j = i + 2;
            while j + 1 < chars.len() && !(chars[j] == '*' && chars[j + 1] == '/') {
                j += 1;
            }
            let comment: String = chars[i..(j + 2).min(chars.len())].iter().collect();
            marked |= comment.contains(CONTRACT_MARKER);
            line += comment.matches('\n').count();
            i = j + 2;
            stmt.push(' ');
            continue;
        }
        if c == '\'' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            line += chars[i..j.min(chars.len())]
                .iter()
                .filter(|&&c| c == '\n')
                .count();
            stmt.push_str(" '' ");
            i = j + 1;
            continue;
        }
        if c == '\n' {
            line += 1;
        }
        if c == ';' {
            if let Some(why) = breaks_previous(&stmt)
                && !marked
            {
                found.push((
                    start,
                    stmt.split_whitespace().collect::<Vec<_>>().join(" "),
                    why,
                ));
            }
            stmt.clear();
            marked = false;
        } else {
            if stmt.trim().is_empty() && !c.is_whitespace() {
                start = line;
            }
            stmt.push(c);
        }
        i += 1;
    }
    if let Some(why) = breaks_previous(&stmt)
        && !marked
    {
        found.push((start, stmt.trim().to_owned(), why));
    }
    found
}

/// Why one statement (comments and literals removed) breaks a binary that still uses the
/// schema as it was, if it does.
fn breaks_previous(stmt: &str) -> Option<&'static str> {
    let words: Vec<String> = stmt
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase)
        .collect();
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let has = |seq: &[&str]| w.windows(seq.len()).any(|x| x == seq);
    let alter_table = w.starts_with(&["ALTER", "TABLE"]);
    if has(&["DROP", "TABLE"]) {
        return Some("drops a table");
    }
    if has(&["DROP", "COLUMN"]) {
        return Some("drops a column");
    }
    if w.contains(&"RENAME") {
        return Some("renames a table or column");
    }
    // ALTER [COLUMN] name [SET DATA] TYPE ...: the ALTER after ALTER TABLE's own.
    if alter_table
        && w.iter()
            .enumerate()
            .skip(2)
            .any(|(i, x)| *x == "ALTER" && w[i + 1..].iter().take(5).any(|y| *y == "TYPE"))
    {
        return Some("changes a column's type");
    }
    let default = w.contains(&"DEFAULT");
    if alter_table && has(&["SET", "NOT", "NULL"]) && !default {
        return Some("makes a column NOT NULL without a default");
    }
    if alter_table && w.contains(&"ADD") && has(&["NOT", "NULL"]) && !default {
        return Some(
            "adds a NOT NULL column without a default (the previous release's inserts fail)",
        );
    }
    None
}

/// The previous release's ref (as scripts/previous-binary resolves it).
fn previous_ref() -> String {
    if let Ok(r) = std::env::var("MCP_CONNECT_PREVIOUS_REF") {
        return r;
    }
    let script = std::fs::read_to_string(format!("{ROOT}/scripts/previous-binary")).unwrap();
    script
        .lines()
        .find_map(|l| l.strip_prefix("ref=${MCP_CONNECT_PREVIOUS_REF:-"))
        .and_then(|r| r.strip_suffix('}'))
        .expect("scripts/previous-binary names its default ref")
        .to_owned()
}

/// Migration files (relative to the repository) that the previous release already had, or None
/// when git cannot tell (no history): then every file is checked.
fn previous_migration_files() -> Option<BTreeSet<String>> {
    let out = std::process::Command::new("git")
        .args([
            "ls-tree",
            "-r",
            "--name-only",
            &previous_ref(),
            "--",
            "migrations",
        ])
        .current_dir(ROOT)
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    })
}

#[test]
fn upgrade_migrations_since_the_previous_release_are_expand_only() {
    let known = previous_migration_files();
    if known.is_none() {
        eprintln!(
            "git does not know {}: checking every migration",
            previous_ref()
        );
    }
    let mut checked = Vec::new();
    let mut problems = Vec::new();
    for engine in ["postgres", "sqlite"] {
        let dir = Path::new(ROOT).join("migrations").join(engine);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        for name in files {
            let rel = format!("migrations/{engine}/{name}");
            if known.as_ref().is_some_and(|k| k.contains(&rel)) {
                continue;
            }
            let sql = std::fs::read_to_string(dir.join(&name)).unwrap();
            for (line, stmt, why) in contract_steps(&sql) {
                problems.push(format!("{rel}:{line}: {why}: {stmt}"));
            }
            checked.push(rel);
        }
    }
    eprintln!("expand-only check of {checked:?}");
    assert!(
        problems.is_empty(),
        "migrations must be expand-only: the previous release still runs on the migrated schema \
         during a rolling upgrade (migrations/README.md). Make the change additive, or mark a \
         deliberate contract step (for a column or table no supported release uses any more) \
         with a `-- {CONTRACT_MARKER} <why>` comment before the statement:\n{}",
        problems.join("\n")
    );
}

#[test]
fn upgrade_expand_only_check_finds_contract_steps() {
    let sql = "-- a comment: DROP TABLE in a comment is fine\n\
        CREATE TABLE t (id TEXT PRIMARY KEY, note TEXT NOT NULL);\n\
        ALTER TABLE connections ADD COLUMN note TEXT;\n\
        ALTER TABLE connections ADD COLUMN n BIGINT NOT NULL DEFAULT 0;\n\
        INSERT INTO t VALUES ('drop table; rename', 'x');\n\
        ALTER TABLE connections DROP COLUMN scopes;\n\
        ALTER TABLE connections\n  RENAME COLUMN status TO state;\n\
        DROP TABLE sessions;\n\
        ALTER TABLE connections ALTER COLUMN scopes TYPE JSONB;\n\
        ALTER TABLE connections ALTER COLUMN note SET NOT NULL;\n\
        ALTER TABLE connections ADD COLUMN m BIGINT NOT NULL;\n\
        -- contract-step: nothing reads flows.kind since 0.3\n\
        ALTER TABLE flows DROP COLUMN kind;\n\
        ALTER TABLE connections ALTER COLUMN note SET DEFAULT '';\n\
        ALTER TABLE events ADD COLUMN type TEXT;\n";
    let found: Vec<(usize, &str)> = contract_steps(sql)
        .iter()
        .map(|(l, _, why)| (*l, *why))
        .collect();
    assert_eq!(
        found,
        vec![
            (6, "drops a column"),
            (7, "renames a table or column"),
            (9, "drops a table"),
            (10, "changes a column's type"),
            (11, "makes a column NOT NULL without a default"),
            (
                12,
                "adds a NOT NULL column without a default (the previous release's inserts fail)"
            ),
        ]
    );
}

/// A migration that shipped is never edited, not even a comment: sqlx records each applied
/// migration's checksum and refuses to start on a database whose applied migration no longer
/// matches ("migration N was previously applied but has been modified"), so every existing
/// deployment would stop coming up. `migrations/SHA256SUMS` records each migration's SHA-256;
/// a new migration is added to it (`sha256sum migrations/*/*.sql migrations/*/post-deploy/*.sql
/// > migrations/SHA256SUMS`) and an existing line never changes.
#[test]
fn upgrade_shipped_migrations_are_never_edited() {
    use sha2::Digest;
    let recorded = std::fs::read_to_string(Path::new(ROOT).join("migrations/SHA256SUMS")).unwrap();
    let mut listed = std::collections::BTreeSet::new();
    for line in recorded.lines().filter(|l| !l.trim().is_empty()) {
        let (sum, path) = line.split_once("  ").expect("sha256sum format: SUM  PATH");
        let bytes = std::fs::read(Path::new(ROOT).join(path))
            .unwrap_or_else(|e| panic!("{path} is recorded but cannot be read: {e}"));
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&bytes)),
            sum,
            "{path} was edited after it was recorded in migrations/SHA256SUMS: databases that \
             applied it would refuse to start. Put the change in a new migration instead."
        );
        listed.insert(path.to_owned());
    }
    for dir in [
        "postgres",
        "sqlite",
        "postgres/post-deploy",
        "sqlite/post-deploy",
    ] {
        for entry in std::fs::read_dir(Path::new(ROOT).join("migrations").join(dir)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let path = format!("migrations/{dir}/{name}");
            assert!(
                !name.ends_with(".sql") || listed.contains(&path),
                "{path} is not recorded in migrations/SHA256SUMS: add its line"
            );
        }
    }
}
