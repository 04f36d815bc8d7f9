//! The fleet (issue 15): three `mcp-connect serve` processes on one Postgres behind haproxy,
//! configured by deploy/haproxy/haproxy.cfg itself (only its server lines and its `bind` are
//! replaced by loopback ones). Every request of these tests goes to loopback.
//!
//! Which replica served what is read from haproxy's own request log (`option httplog`: one line
//! per request naming the server), so "the hops landed on different replicas" is checked, not
//! assumed. The refresh provider is a stub at the HTTP boundary (as in refresh_burst.rs) that
//! counts redemptions per grant.
//!
//! Run alone: `cargo nextest run --locked -E 'test(/topology/)'` (they run one at a time: the
//! `topology` test group in .config/nextest.toml).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use mcp_connect::config::Config;
use mcp_connect::db::Db;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::*;
use crate::private_postgres::PrivatePostgres;
use crate::rotating_provider::{Shared, seed_due_grant, stub};

const REPLICAS: usize = 3;

// --- the webhook receiver ----------------------------------------------------------------------

type Hooks = Arc<Mutex<Vec<(String, Value)>>>;

/// Records every delivery as (webhook-id, body).
async fn hook_receiver() -> (String, Hooks) {
    let seen: Hooks = Arc::default();
    let s = seen.clone();
    let app = Router::new().route(
        "/hook",
        post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let s = s.clone();
                async move {
                    let id = headers
                        .get("webhook-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    s.lock().unwrap().push((id, v));
                    axum::http::StatusCode::NO_CONTENT
                }
            },
        ),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (url, seen)
}

const WEBHOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

// --- the fleet ---------------------------------------------------------------------------------

struct Replica {
    name: String,
    url: String,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

struct Fleet {
    /// The balancer: the only address users and API clients are given (`public_url`).
    lb: String,
    replicas: Vec<Replica>,
    haproxy: Child,
    /// haproxy's log lines (requests and server state changes).
    lb_log: Arc<Mutex<Vec<String>>>,
    peers: Peers,
    db_url: String,
    db: Db,
    config: Config,
    env: Vec<(String, String)>,
    api: reqwest::Client,
    dir: PathBuf,
}

#[derive(Default)]
struct FleetOptions {
    /// The `other` provider is the stub at this URL.
    stub: Option<String>,
    /// demo-mcp's webhook.
    hook: Option<String>,
    /// Extra `MCP_CONNECT_*` variables for every replica.
    env: Vec<(String, String)>,
    /// Another Postgres server than the shared one (`postgres://user@host:port`).
    db_base: Option<String>,
}

/// The haproxy configuration of deploy/haproxy/haproxy.cfg with these servers and this bind
/// address, every other option kept (as tests/deploy/validate.sh derives it).
fn haproxy_config(bind: &str, servers: &[(String, String)]) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/haproxy/haproxy.cfg");
    let cfg = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut inside = false;
    let (mut begun, mut ended, mut bound) = (false, false, false);
    for line in cfg.lines() {
        let t = line.trim();
        if t == "# servers begin" {
            inside = true;
            begun = true;
            for (name, addr) in servers {
                out.push_str(&format!("    server {name} {addr}\n"));
            }
            continue;
        }
        if t == "# servers end" {
            inside = false;
            ended = true;
            continue;
        }
        if inside {
            continue;
        }
        if t.starts_with("bind ") {
            out.push_str(&format!("    bind {bind}\n"));
            bound = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    assert!(
        begun && ended && bound,
        "deploy/haproxy/haproxy.cfg lost its servers markers or its bind line"
    );
    out
}

impl Fleet {
    async fn start(opts: FleetOptions) -> Fleet {
        let dir = std::env::temp_dir().join(format!("mcp-connect-fleet-{}", random_name()));
        std::fs::create_dir_all(&dir).unwrap();
        let lb = format!("http://127.0.0.1:{}", free_port());
        let peers = Peers::start(&lb, 3600).await;
        let db_url = match &opts.db_base {
            Some(base) => format!("{base}/mcpc_test_{}", random_name()),
            None => db_url(DbKind::Postgres),
        };
        let mut o = Options {
            // Behind the balancer: its X-Forwarded-For is believed (per-address browser limits).
            extra_toml: "[limits]\ntrusted_proxies = [\"127.0.0.1\"]\n".into(),
            ..Options::default()
        };
        if let Some(url) = &opts.stub {
            o.other_provider = format!(
                "authorization_url = \"{url}/authorize\"\ntoken_url = \"{url}/token\"\nclient_id = \"stub\"\nclient_secret = \"stub-secret\"\ntoken_auth = \"post\"\npkce = false\nscopes = [\"read\"]"
            );
        }
        if let Some(hook) = &opts.hook {
            o.demo_client_extra =
                format!("webhook_url = \"{hook}\"\nwebhook_secret = \"{WEBHOOK_SECRET}\"");
        }
        let toml = config_toml(&lb, &db_url, &peers, &o);
        let config = Config::from_parts(&toml, &[]).unwrap_or_else(|e| panic!("{e}\n{toml}"));
        // Migrated once, here; each replica's own migration run then finds nothing to do.
        let db = Db::connect(&db_url.parse().unwrap()).await.unwrap();
        db.migrate(mcp_connect::db::Migrations::Deploy)
            .await
            .unwrap();

        let mut replicas = Vec::new();
        let mut servers = Vec::new();
        for i in 1..=REPLICAS {
            let port = free_port();
            let name = format!("r{i}");
            let config = dir.join(format!("{name}.toml"));
            std::fs::write(&config, testkit::process::listening_on(&toml, port)).unwrap();
            servers.push((name.clone(), format!("127.0.0.1:{port}")));
            replicas.push(Replica {
                log: dir.join(format!("{name}.log")),
                name,
                url: format!("http://127.0.0.1:{port}"),
                config,
                child: None,
            });
        }
        let cfg_path = dir.join("haproxy.cfg");
        std::fs::write(
            &cfg_path,
            haproxy_config(lb.trim_start_matches("http://"), &servers),
        )
        .unwrap();
        let mut fleet = Fleet {
            lb,
            replicas,
            haproxy: spawn_haproxy(&cfg_path, &dir),
            lb_log: Arc::default(),
            peers,
            db_url,
            db,
            config,
            env: opts.env,
            api: reqwest::Client::new(),
            dir,
        };
        let out = fleet.haproxy.stdout.take().unwrap();
        let log = fleet.lb_log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                log.lock().unwrap().push(l);
            }
        });
        for i in 0..REPLICAS {
            fleet.start_replica(i).await;
        }
        // The balancer answers once it is listening (servers start UP: they are ready).
        if testkit::process::wait_ready(&fleet.lb, 100, Duration::from_millis(100)).await {
            return fleet;
        }
        panic!("haproxy did not answer; see {}", fleet.dir.display());
    }

    /// Starts (or restarts) replica `i` on its port and waits until its /readyz is 200.
    async fn start_replica(&mut self, i: usize) {
        let r = &mut self.replicas[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&r.log)
            .unwrap();
        let child = testkit::process::serve(env!("CARGO_BIN_EXE_mcp-connect").as_ref(), &r.config)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RUST_LOG", "info")
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        r.child = Some(child);
        if testkit::process::wait_ready(&r.url, 400, Duration::from_millis(50)).await {
            return;
        }
        panic!(
            "replica {} did not become ready; see {}",
            r.name,
            r.log.display()
        );
    }

    fn pid(&self, i: usize) -> String {
        self.replicas[i]
            .child
            .as_ref()
            .and_then(|c| c.id())
            .expect("a running replica")
            .to_string()
    }

    fn signal(&self, i: usize, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([sig, &self.pid(i)])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// haproxy's request log lines so far, as (server, method, path).
    fn served(&self) -> Vec<(String, String, String)> {
        self.lb_log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| {
                let server = l
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("mcp_connect/"))?
                    .to_owned();
                let req = l.split_once('"')?.1;
                let mut parts = req.split_whitespace();
                let method = parts.next()?.to_owned();
                let path = parts.next()?.to_owned();
                Some((server, method, path))
            })
            .collect()
    }

    /// haproxy's verdicts on server `name` so far: (times marked DOWN, times marked UP).
    fn lb_verdicts(&self, name: &str) -> (usize, usize) {
        let (down, up) = (
            format!("Server mcp_connect/{name} is DOWN"),
            format!("Server mcp_connect/{name} is UP"),
        );
        let log = self.lb_log.lock().unwrap();
        (
            log.iter().filter(|l| l.contains(&down)).count(),
            log.iter().filter(|l| l.contains(&up)).count(),
        )
    }

    /// Waits until haproxy sends requests to `name` again: every DOWN it logged was followed by
    /// an UP (servers start UP).
    async fn wait_lb_says_up(&self, name: &str) {
        for _ in 0..300 {
            let (down, up) = self.lb_verdicts(name);
            if up >= down {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("haproxy never saw {name} come back UP");
    }

    async fn api_post(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        reply(
            self.api
                .post(format!("{}{path}", self.lb))
                .bearer_auth(key)
                .json(&body),
        )
        .await
    }

    async fn api_get(&self, base: &str, path: &str) -> (StatusCode, Value) {
        reply(self.api.get(format!("{base}{path}")).bearer_auth(API_KEY)).await
    }

    async fn elicit(&self, subject: &str) -> Value {
        let (s, v) = self
            .api_post(
                API_KEY,
                "/v1/elicitations",
                json!({"subject": subject, "provider": "acme"}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v
    }

    async fn elicitation_status(&self, id: &str) -> String {
        let (s, v) = self
            .api_get(&self.lb, &format!("/v1/elicitations/{id}"))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["status"].as_str().unwrap_or_default().to_owned()
    }

    /// Stores `n` grants of the stub provider due for a refresh (their access tokens expire in
    /// 30 s), registered at the stub as generation 0; grant `i` belongs to `<prefix>-g<i>`.
    async fn seed_due_grants(&self, provider: &Shared, prefix: &str, n: usize) {
        let issuer = self.config.identity.issuer.to_string();
        for i in 0..n {
            let grant = format!("{prefix}g{i}");
            let subject = format!("{prefix}-g{i}");
            seed_due_grant(
                &self.db,
                &self.config.keys,
                &issuer,
                provider,
                &grant,
                &subject,
            )
            .await;
        }
    }

    async fn stop(mut self) {
        let _ = self.haproxy.kill().await;
        for r in &mut self.replicas {
            if let Some(c) = r.child.as_mut() {
                let _ = c.kill().await;
            }
        }
        self.peers.kill().await;
        self.db.pool.close().await;
        let _ = drop_database(&self.db_url).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn_haproxy(cfg: &std::path::Path, dir: &std::path::Path) -> Child {
    let check = std::process::Command::new("haproxy")
        .args(["-q", "-c", "-f", cfg.to_str().unwrap()])
        .status()
        .expect("haproxy must be installed (apt-get install haproxy)");
    assert!(check.success(), "haproxy -c refused {}", cfg.display());
    // `-n`: global `maxconn` (20000) needs twice as many file descriptors as this machine's
    // hard limit allows; a test needs far fewer connections.
    Command::new("haproxy")
        .args(["-db", "-n", "2000", "-f", cfg.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("haproxy.stderr")).unwrap(),
        ))
        .kill_on_drop(true)
        .spawn()
        .expect("haproxy must be installed (apt-get install haproxy)")
}

// --- a user who retries ------------------------------------------------------------------------

/// What the balancer answers when no replica could answer (or one died mid-request), and what a
/// replica answers without its database: a user reloads.
fn worth_retrying(s: StatusCode) -> bool {
    matches!(
        s,
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    )
}

enum Action {
    Get,
    Post(Vec<(String, String)>),
}

/// One browser action (a link followed or a form sent, redirects followed), repeated by the
/// user while it fails for a reason a reload fixes. A failure in the middle of the redirect
/// chain is reloaded where it happened (the URL in the address bar). Self-submitting forms are
/// sent as a browser's JavaScript would.
async fn user_send(b: &Browser, mut url: String, mut send: Action) -> Page {
    for _ in 0..40 {
        let res = match &send {
            Action::Get => b.client.get(&url).send().await,
            Action::Post(f) => b.client.post(&url).form(f).send().await,
        };
        match res {
            Ok(r) if worth_retrying(r.status()) => {
                eprintln!("retry: {} at {} (sent to {url})", r.status(), r.url());
                if r.url().as_str() != url {
                    (url, send) = (r.url().to_string(), Action::Get);
                }
            }
            Ok(r) => {
                let page = Page {
                    status: r.status(),
                    url: r.url().to_string(),
                    body: r.text().await.unwrap_or_default(),
                };
                if !page.body.contains("document.forms[0].submit()") {
                    return page;
                }
                let (action, fields) = page.form("form");
                (url, send) = (action, Action::Post(fields));
                continue;
            }
            Err(e) => {
                eprintln!("retry: {e:?} (sent to {url})");
                if let Some(u) = e.url()
                    && u.as_str() != url
                {
                    (url, send) = (u.to_string(), Action::Get);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{url} kept failing");
}

async fn user_submit(b: &Browser, page: &Page, selector: &str, overrides: &[(&str, &str)]) -> Page {
    let (action, mut fields) = page.form(selector);
    for (k, v) in overrides {
        fields.retain(|(fk, _)| fk != k);
        fields.push((k.to_string(), v.to_string()));
    }
    user_send(b, action, Action::Post(fields)).await
}

/// A browser that opens a connection per request. A real browser resends a request whose reused
/// keep-alive connection the server closed at that moment; reqwest reports it (hyper's
/// IncompleteMessage) and a resent POST can no longer be told apart from a replay, so these
/// users never reuse a connection. (The OAuth peers close idle connections after 5 s.)
fn browser_without_keep_alive() -> Browser {
    let jar = Arc::new(reqwest::cookie::Jar::default());
    Browser {
        client: reqwest::Client::builder()
            .cookie_provider(jar.clone())
            .redirect(reqwest::redirect::Policy::limited(20))
            .pool_max_idle_per_host(0)
            .build()
            .unwrap(),
        jar,
    }
}

/// The whole flow for `user` from the connect link, through the balancer; a user whose flow
/// broke (a page that is not the next step) starts again from the link, as they would.
async fn user_connects(connect_url: &str, user: &str) -> usize {
    fn broke(user: &str, step: &str, p: &Page) {
        let doc = scraper::Html::parse_document(&p.body);
        let sel = scraper::Selector::parse("main, body").unwrap();
        let text: String = doc
            .select(&sel)
            .next()
            .map(|m| m.text().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(300)
            .collect();
        eprintln!(
            "{user}: the flow broke at {step} ({} {}): {text}",
            p.status, p.url
        );
    }
    for attempt in 1..=3 {
        let b = browser_without_keep_alive();
        let login = user_send(&b, connect_url.to_owned(), Action::Get).await;
        if !login.has("name=\"login\"") {
            broke(user, "the link", &login);
            continue;
        }
        let consent = user_submit(&b, &login, "form", &[("login", user)]).await;
        if !consent.has("Continue") {
            broke(user, "the sign-in", &consent);
            continue;
        }
        let up_login = user_submit(&b, &consent, "form.actions", &[("action", "continue")]).await;
        let up_consent = if up_login.has("name=\"login\"") {
            user_submit(&b, &up_login, "form", &[("login", user)]).await
        } else {
            up_login
        };
        if !up_consent.has("Allow") {
            broke(user, "the consent", &up_consent);
            continue;
        }
        let done = user_submit(&b, &up_consent, "form", &[("decision", "allow")]).await;
        if done.status == StatusCode::OK {
            return attempt;
        }
        broke(user, "the provider callback", &done);
    }
    panic!("{user} could not connect in 3 attempts");
}

/// A token request by an API client that retries failures (transport errors, 5xx) for up to
/// `patience`. Returns the final answer and how many attempts it took.
async fn fetch_retrying(
    api: &reqwest::Client,
    lb: &str,
    subject: &str,
    patience: Duration,
) -> (StatusCode, Value, usize) {
    let started = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let r = api
            .post(format!("{lb}/v1/tokens"))
            .bearer_auth(OTHER_API_KEY)
            .json(&json!({"subject": subject, "provider": "other", "min_ttl_seconds": 600}))
            .send()
            .await;
        let (s, v) = match r {
            Ok(r) => {
                let s = r.status();
                (s, r.json().await.unwrap_or(Value::Null))
            }
            Err(e) => (StatusCode::IM_A_TEAPOT, json!({"transport": e.to_string()})),
        };
        if s == StatusCode::OK || started.elapsed() > patience {
            return (s, v, attempts);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Each grant's access token fetched by `callers` clients at once, through the balancer.
async fn refresh_storm(
    lb: &str,
    prefix: &str,
    grants: usize,
    callers: usize,
    patience: Duration,
) -> Vec<(String, StatusCode, Value, usize)> {
    let api = reqwest::Client::new();
    let calls = (0..grants).flat_map(|g| {
        (0..callers).map({
            let api = api.clone();
            move |_| {
                let api = api.clone();
                let subject = format!("{prefix}-g{g}");
                async move {
                    let (s, v, n) = fetch_retrying(&api, lb, &subject, patience).await;
                    (subject, s, v, n)
                }
            }
        })
    });
    futures_util::future::join_all(calls).await
}

fn assert_each_grant_redeemed_once(provider: &Shared, prefix: &str, grants: usize) {
    let p = provider.lock().unwrap();
    assert!(p.refused.is_empty(), "refused: {:?}", p.refused);
    for g in 0..grants {
        let grant = format!("{prefix}g{g}");
        assert_eq!(
            p.redeemed.get(&grant),
            Some(&1),
            "grant {grant} redeemed {:?} times",
            p.redeemed.get(&grant)
        );
    }
}

/// Opens `GET /v1/events` at `base` and waits for its opening comment (the stream is live).
async fn open_stream(base: &str) -> reqwest::Response {
    let mut r = reqwest::Client::new()
        .get(format!("{base}/v1/events"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let first = r.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).starts_with(':'));
    r
}

/// Reads the stream until an `elicitation.completed` event for `id` arrives (20 s at most).
async fn wait_for_completion_event(mut r: reqwest::Response, id: &str) -> Value {
    let mut buf = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let Ok(Ok(Some(chunk))) = tokio::time::timeout(Duration::from_secs(20), r.chunk()).await
        else {
            break;
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        for line in buf.lines() {
            if let Some(data) = line.strip_prefix("data:") {
                let v: Value = serde_json::from_str(data.trim()).unwrap_or(Value::Null);
                if v["type"] == "elicitation.completed" && v["data"]["elicitation_id"] == id {
                    return v;
                }
            }
        }
    }
    panic!("no elicitation.completed for {id} on the stream; got {buf}");
}

// --- 1. behind a load balancer -----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_three_replicas_behind_haproxy_share_flows_refreshes_waiters_and_webhooks() {
    let (stub_url, provider) = stub(300).await;
    let (hook, hooks) = hook_receiver().await;
    let fleet = Fleet::start(FleetOptions {
        stub: Some(stub_url),
        hook: Some(hook),
        ..FleetOptions::default()
    })
    .await;

    // The browser flow, every hop through the balancer: consecutive hops land on different
    // replicas (round-robin), and all three take part.
    let e = fleet.elicit("alice").await;
    let before = fleet.served().len();
    let b = Browser::new();
    let consent = b
        .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
        .await;
    let done = b.consent_and_allow(&consent, "alice").await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let hops: Vec<_> = fleet.served()[before..].to_vec();
    eprintln!("browser hops (server, method, path):");
    for (s, m, p) in &hops {
        eprintln!("  {s} {m} {}", p.split('?').next().unwrap_or_default());
    }
    assert!(hops.len() >= 4, "{hops:?}");
    for w in hops.windows(2) {
        assert_ne!(w[0].0, w[1].0, "two hops in a row on one replica: {hops:?}");
    }
    let servers: HashSet<_> = hops.iter().map(|h| h.0.clone()).collect();
    assert_eq!(servers.len(), REPLICAS, "{hops:?}");
    let id = e["id"].as_str().unwrap();
    assert_eq!(fleet.elicitation_status(id).await, "completed");
    let (s, v) = fleet
        .api_post(
            API_KEY,
            "/v1/tokens",
            json!({"subject": "alice", "provider": "acme"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // A refresh storm through the balancer: 24 grants due, each asked for by 3 clients at once.
    let grants = 24;
    fleet.seed_due_grants(&provider, "storm", grants).await;
    let before = fleet.served().len();
    let answers = refresh_storm(&fleet.lb, "storm", grants, 3, Duration::ZERO).await;
    for (subject, s, v, _) in &answers {
        assert_eq!(*s, StatusCode::OK, "{subject}: {v}");
        let g = subject.trim_start_matches("storm-");
        assert_eq!(
            v["access_token"],
            format!("at-storm{g}-1"),
            "{subject}: {v}"
        );
    }
    assert_each_grant_redeemed_once(&provider, "storm", grants);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut per_replica: HashMap<String, usize> = HashMap::new();
    for (s, _, p) in &fleet.served()[before..] {
        if p == "/v1/tokens" {
            *per_replica.entry(s.clone()).or_default() += 1;
        }
    }
    eprintln!("refresh storm: token requests per replica {per_replica:?}");
    assert_eq!(per_replica.values().sum::<usize>(), grants * 3);
    assert_eq!(per_replica.len(), REPLICAS, "{per_replica:?}");

    // A long poll and an event stream held on r1, woken by a completion on r2: the provider
    // callback is presented to r2 directly (the rest of the flow went through the balancer).
    let e = fleet.elicit("bob").await;
    let id = e["id"].as_str().unwrap().to_owned();
    let (r1, r2) = (fleet.replicas[0].url.clone(), fleet.replicas[1].url.clone());
    let stream = open_stream(&r1).await;
    let poll = {
        let api = fleet.api.clone();
        let url = format!("{r1}/v1/elicitations/{id}?wait=30");
        tokio::spawn(async move {
            let t = Instant::now();
            let r = api.get(url).bearer_auth(API_KEY).send().await.unwrap();
            (r.status(), r.json::<Value>().await.unwrap(), t.elapsed())
        })
    };
    let b = Browser::stopping_at_callback();
    let callback = b
        .provider_callback_url(e["url"].as_str().unwrap(), "bob")
        .await;
    assert!(callback.starts_with(&fleet.lb), "{callback}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !poll.is_finished(),
        "the long poll returned before the completion"
    );
    let on_r2 = callback.replacen(&fleet.lb, &r2, 1);
    let done = b.get(&on_r2).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    let (s, v, took) = poll.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert!(took < Duration::from_secs(10), "woken late: {took:?}");
    let ev = wait_for_completion_event(stream, &id).await;
    assert_eq!(ev["data"]["subject"], "bob");

    // Webhooks: each completion delivered once although three replicas run dispatchers.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = hooks.lock().unwrap().clone();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for (hid, _) in &seen {
        *by_id.entry(hid.clone()).or_default() += 1;
    }
    let completions: Vec<_> = seen
        .iter()
        .filter(|(_, v)| v["type"] == "elicitation.completed")
        .map(|(_, v)| v["data"]["elicitation_id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(completions.len(), 2, "{seen:?}");
    assert!(completions.contains(&id.as_str()));
    assert!(
        by_id.values().all(|n| *n == 1),
        "a webhook delivered twice: {by_id:?}"
    );
    fleet.stop().await;
}

// --- 2. failures in the fleet ------------------------------------------------------------------

/// `kill -9` of a replica while users walk the flow and clients refresh through the balancer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_a_replica_killed_mid_flows_and_mid_refreshes_loses_nothing() {
    let (stub_url, provider) = stub(3000).await;
    let mut fleet = Fleet::start(FleetOptions {
        stub: Some(stub_url),
        ..FleetOptions::default()
    })
    .await;
    let grants = 18;
    fleet.seed_due_grants(&provider, "crash", grants).await;
    let users: Vec<_> = (0..6).map(|i| format!("user{i}")).collect();
    let mut links = Vec::new();
    for u in &users {
        let e = fleet.elicit(u).await;
        links.push((
            u.clone(),
            e["id"].as_str().unwrap().to_owned(),
            e["url"].as_str().unwrap().to_owned(),
        ));
    }

    let flows = tokio::spawn({
        let links = links.clone();
        async move {
            let walks = links.iter().map(|(u, _, url)| user_connects(url, u));
            futures_util::future::join_all(walks).await
        }
    });
    let storm = tokio::spawn({
        let lb = fleet.lb.clone();
        async move { refresh_storm(&lb, "crash", grants, 2, Duration::from_secs(40)).await }
    });
    // The stub holds every refresh 3 s: r2 dies with refreshes in flight, when the users are
    // about halfway through their flows (a third of the hops behind them).
    let browser_hops = |f: &Fleet| {
        f.served()
            .iter()
            .filter(|(_, _, p)| !p.starts_with("/v1/") && p != "/readyz")
            .count()
    };
    let waited = Instant::now();
    while browser_hops(&fleet) < users.len() * 5 / 3 && waited.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let hops_before = browser_hops(&fleet);
    fleet.signal(1, "-KILL");
    let killed_at = Instant::now();

    let attempts = flows.await.unwrap();
    let answers = storm.await.unwrap();
    eprintln!(
        "kill -9 of r2: flows done {:?} after the kill (attempts per user {attempts:?}); token requests retried: {}",
        killed_at.elapsed(),
        answers.iter().filter(|a| a.3 > 1).count()
    );
    // What the balancer saw of the crash: requests cut off on r2 (502) and the ones it
    // retried on another replica (a connection refused; `retries`, `option redispatch`).
    let cut: Vec<String> = fleet
        .lb_log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(" 502 ") || l.contains("/+"))
        .cloned()
        .collect();
    eprintln!(
        "browser hops: {hops_before} before the kill, {} after; balancer lines with a 502 or a retry: {}",
        browser_hops(&fleet) - hops_before,
        cut.len()
    );
    for l in cut.iter().take(30) {
        eprintln!("  {l}");
    }
    // The kill did land mid-way: refreshes were cut off and users still had hops to go.
    assert!(answers.iter().any(|a| a.3 > 1), "no refresh was cut off");
    assert!(browser_hops(&fleet) > hops_before, "the flows were over");
    for (subject, s, v, _) in &answers {
        assert_eq!(*s, StatusCode::OK, "{subject}: {v}");
        let g = subject.trim_start_matches("crash-");
        assert_eq!(
            v["access_token"],
            format!("at-crash{g}-1"),
            "{subject}: {v}"
        );
    }
    assert_each_grant_redeemed_once(&provider, "crash", grants);
    for (u, id, _) in &links {
        assert_eq!(fleet.elicitation_status(id).await, "completed", "{u}");
        let (s, v) = fleet
            .api_post(
                API_KEY,
                "/v1/tokens",
                json!({"subject": u, "provider": "acme"}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{u}: {v}");
    }
    // The killed replica comes back and serves again (its grants still redeemed once).
    fleet.start_replica(1).await;
    fleet.wait_lb_says_up("r2").await;
    let answers = refresh_storm(&fleet.lb, "crash", grants, 1, Duration::ZERO).await;
    assert!(answers.iter().all(|a| a.1 == StatusCode::OK));
    assert_each_grant_redeemed_once(&provider, "crash", grants);
    fleet.stop().await;
}

/// The test database refuses connections and its sessions are ended: every replica's /readyz
/// says so (and the balancer has nobody to send to), then all recover by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_a_database_outage_shows_on_every_replica_and_heals_by_itself() {
    let fleet = Fleet::start(FleetOptions::default()).await;
    let e = fleet.elicit("alice").await;
    user_connects(e["url"].as_str().unwrap(), "alice").await;

    let name = fleet.db_url.rsplit('/').next().unwrap().to_owned();
    let admin = postgres_admin().await;
    fleet.db.pool.close().await;
    sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&admin)
        .await
        .unwrap();
    for r in &fleet.replicas {
        let (s, v) = fleet.api_get(&r.url, "/readyz").await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{}: {v}", r.name);
        assert_eq!(v["status"], "unavailable", "{}: {v}", r.name);
    }
    // haproxy's checks take every replica out (2 failed checks 2 s apart): nobody to serve.
    let mut lb_down = false;
    for _ in 0..100 {
        let r = fleet
            .api
            .get(format!("{}/readyz", fleet.lb))
            .send()
            .await
            .unwrap();
        if r.status() == StatusCode::SERVICE_UNAVAILABLE
            && fleet
                .lb_log
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("has no server available"))
        {
            lb_down = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(lb_down, "haproxy never took the replicas out");

    sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
        .execute(&admin)
        .await
        .unwrap();
    let healed = Instant::now();
    for r in &fleet.replicas {
        let mut ok = false;
        for _ in 0..100 {
            let (s, _) = fleet.api_get(&r.url, "/readyz").await;
            if s == StatusCode::OK {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ok, "{} did not recover by itself", r.name);
    }
    for r in &fleet.replicas {
        fleet.wait_lb_says_up(&r.name).await;
    }
    eprintln!(
        "database back: every replica ready and UP at the balancer {:?} later",
        healed.elapsed()
    );
    for _ in 0..REPLICAS {
        let (s, v) = fleet
            .api_post(
                API_KEY,
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme"}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    admin.close().await;
    fleet.stop().await;
}

/// A Postgres server restart (`pg_ctl stop -m fast`, then start again), on a server of the
/// test's own (the shared one serves the other tests): while it is down every replica's
/// `/readyz` answers 503 and haproxy takes them out; once it is back every replica is ready
/// again by itself (no replica restarted), and tokens and new flows work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_a_postgres_restart_heals_every_replica_by_itself() {
    let pg = PrivatePostgres::start()
        .await
        .unwrap_or_else(|e| panic!("starting a private Postgres server: {e}"));
    let mut fleet = Fleet::start(FleetOptions {
        db_base: Some(pg.base_url.clone()),
        ..FleetOptions::default()
    })
    .await;
    let e = fleet.elicit("alice").await;
    user_connects(e["url"].as_str().unwrap(), "alice").await;
    let token_on = |base: String| {
        let api = fleet.api.clone();
        async move { fetch_token(&api, &base, json!({"subject": "alice", "provider": "acme"})).await }
    };
    let (_, before) = token_on(fleet.lb.clone()).await;

    let down = Instant::now();
    pg.stop_server().await.unwrap();
    pg.wait_until_gone().await;
    for r in &fleet.replicas {
        let mut seen = None;
        for _ in 0..50 {
            let (s, v) = fleet.api_get(&r.url, "/readyz").await;
            if s == StatusCode::SERVICE_UNAVAILABLE {
                seen = Some(v);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let v = seen.unwrap_or_else(|| panic!("{} still ready with Postgres down", r.name));
        assert_eq!(v["status"], "unavailable", "{}: {v}", r.name);
        // The API says 503 too (never a 500).
        let (s, v) = token_on(r.url.clone()).await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{}: {v}", r.name);
    }
    let mut lb_down = false;
    for _ in 0..100 {
        if fleet
            .lb_log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("has no server available"))
        {
            lb_down = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(lb_down, "haproxy never took the replicas out");

    pg.start_server()
        .await
        .unwrap_or_else(|e| panic!("restarting Postgres: {e}"));
    let was_down = down.elapsed();
    let back = Instant::now();
    for r in &fleet.replicas {
        let mut ok = false;
        for _ in 0..200 {
            let (s, _) = fleet.api_get(&r.url, "/readyz").await;
            if s == StatusCode::OK {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ok, "{} did not recover by itself:\n{}", r.name, pg.log());
    }
    let ready_after = back.elapsed();
    for r in &mut fleet.replicas {
        let c = r.child.as_mut().unwrap();
        assert!(
            c.try_wait().unwrap().is_none(),
            "{} exited during the outage",
            r.name
        );
    }
    for r in &fleet.replicas {
        fleet.wait_lb_says_up(&r.name).await;
    }
    eprintln!(
        "postgres restart: down {was_down:?}; every replica ready {ready_after:?} after it was back, UP at the balancer {:?} after",
        back.elapsed()
    );
    // Each replica serves the token (the same one: nothing was lost), and a new user connects.
    for r in &fleet.replicas {
        let (s, v) = token_on(r.url.clone()).await;
        assert_eq!(s, StatusCode::OK, "{}: {v}", r.name);
        assert_eq!(v["access_token"], before["access_token"], "{}", r.name);
    }
    let e = fleet.elicit("bob").await;
    user_connects(e["url"].as_str().unwrap(), "bob").await;
    assert_eq!(
        fleet.elicitation_status(e["id"].as_str().unwrap()).await,
        "completed"
    );
    fleet.stop().await;
    pg.remove().await;
}

// --- 3. rolling restart under load -------------------------------------------------------------

/// haproxy marks a replica down after `fall` (2) failed checks `inter` (2 s) apart, so 2–6 s
/// after the replica starts failing its checks, depending on where the check timer stood: the
/// drain delay is above that with a margin for a loaded machine (6 s failed once here with a
/// build running beside the suite: haproxy's verdict landed after the replica had exited), so no
/// new request reaches a replica once it stops serving.
const DRAIN_DELAY_SECONDS: &str = "8";

#[derive(Default)]
struct Load {
    sent: usize,
    long_polls: usize,
    failed: Vec<String>,
    max_latency: Duration,
}

/// One client of the load generator, through the balancer until `stop`: token fetches and
/// elicitation reads in turn, or (`long_polls`) elicitation long polls one after the other.
fn load_client(
    lb: String,
    elicitation: String,
    long_polls: bool,
    stop: Arc<AtomicBool>,
    restarting: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(Load, Load)> {
    tokio::spawn(async move {
        let api = reqwest::Client::new();
        let (mut all, mut during) = (Load::default(), Load::default());
        let mut n = 0u64;
        while !stop.load(Ordering::SeqCst) {
            n += 1;
            let t = Instant::now();
            let r = if long_polls {
                api.get(format!("{lb}/v1/elicitations/{elicitation}?wait=3"))
                    .bearer_auth(API_KEY)
                    .send()
                    .await
            } else if n % 2 == 0 {
                api.post(format!("{lb}/v1/tokens"))
                    .bearer_auth(API_KEY)
                    .json(&json!({"subject": "alice", "provider": "acme"}))
                    .send()
                    .await
            } else {
                api.get(format!("{lb}/v1/elicitations/{elicitation}"))
                    .bearer_auth(API_KEY)
                    .send()
                    .await
            };
            let outcome = match r {
                Ok(r) if r.status() == StatusCode::OK => match r.bytes().await {
                    Ok(_) => None,
                    Err(e) => Some(format!("body: {e}")),
                },
                Ok(r) => Some(format!(
                    "{} {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                )),
                Err(e) => Some(format!("transport: {e}")),
            };
            let took = t.elapsed();
            let loads: &mut [&mut Load] = if restarting.load(Ordering::SeqCst) {
                &mut [&mut all, &mut during]
            } else {
                &mut [&mut all]
            };
            for l in loads.iter_mut() {
                l.sent += 1;
                if long_polls {
                    l.long_polls += 1;
                } else {
                    l.max_latency = l.max_latency.max(took);
                }
                if let Some(f) = &outcome {
                    l.failed.push(f.clone());
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (all, during)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_rolling_restart_under_load_fails_no_request() {
    let mut fleet = Fleet::start(FleetOptions {
        env: vec![(
            "MCP_CONNECT_DRAIN_DELAY_SECONDS".into(),
            DRAIN_DELAY_SECONDS.into(),
        )],
        ..FleetOptions::default()
    })
    .await;
    let e = fleet.elicit("alice").await;
    user_connects(e["url"].as_str().unwrap(), "alice").await;
    let pending = fleet.elicit("bob").await["id"].as_str().unwrap().to_owned();

    let stop = Arc::new(AtomicBool::new(false));
    let restarting = Arc::new(AtomicBool::new(false));
    // Four clients of short requests; two more holding long polls (3 s each, answered early by
    // a draining replica), whose latency is the wait and is left out of the maximum.
    let clients: Vec<_> = (0..6)
        .map(|i| {
            load_client(
                fleet.lb.clone(),
                pending.clone(),
                i >= 4,
                stop.clone(),
                restarting.clone(),
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let started = Instant::now();
    restarting.store(true, Ordering::SeqCst);
    for i in 0..REPLICAS {
        let name = fleet.replicas[i].name.clone();
        let t = Instant::now();
        fleet.signal(i, "-TERM");
        let status = tokio::time::timeout(
            Duration::from_secs(30),
            fleet.replicas[i].child.as_mut().unwrap().wait(),
        )
        .await
        .unwrap_or_else(|_| panic!("{name} did not exit after SIGTERM"))
        .unwrap();
        assert!(status.success(), "{name}: {status:?}");
        let exited = t.elapsed();
        // haproxy took it out while it drained (before it stopped serving).
        assert_eq!(fleet.lb_verdicts(&name).0, 1, "{name} was not taken out");
        fleet.start_replica(i).await;
        // Ready at the balancer too (2 good checks) before the next one goes.
        fleet.wait_lb_says_up(&name).await;
        eprintln!(
            "rolling restart: {name} exited {exited:?} after SIGTERM, back UP {:?} after",
            t.elapsed()
        );
    }
    restarting.store(false, Ordering::SeqCst);
    let restart_took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let (mut all, mut during) = (Load::default(), Load::default());
    for c in clients {
        let (a, d) = c.await.unwrap();
        for (total, part) in [(&mut all, a), (&mut during, d)] {
            total.sent += part.sent;
            total.long_polls += part.long_polls;
            total.failed.extend(part.failed);
            total.max_latency = total.max_latency.max(part.max_latency);
        }
    }
    let per_server =
        fleet
            .served()
            .iter()
            .fold(HashMap::<String, usize>::new(), |mut m, (s, _, _)| {
                *m.entry(s.clone()).or_default() += 1;
                m
            });
    eprintln!(
        "ROLLING RESTART: {} requests sent ({} long polls; {} during the {:.1} s of restarts), {} failed, max latency {} ms during the restarts ({} ms overall); served per replica {per_server:?}",
        all.sent,
        all.long_polls,
        during.sent,
        restart_took.as_secs_f64(),
        all.failed.len(),
        during.max_latency.as_millis(),
        all.max_latency.as_millis(),
    );
    assert!(all.failed.is_empty(), "failed requests: {:?}", all.failed);
    assert!(during.sent > 100, "too little load: {}", during.sent);
    fleet.stop().await;
}
