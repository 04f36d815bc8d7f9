//! The service's edges: https off loopback, HSTS, `/metrics` access, the header-read timeout and
//! connection cap, per-client caps on long-lived requests, and the rate limits.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::*;

/// A running app without OAuth peers (nothing here signs in), with `extra` appended to the
/// test configuration (e.g. a `[limits]` table) and `public_url` replaced when given.
struct Bare {
    url: String,
    /// Its SQLite database, removed by `stop`.
    db_url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Bare {
    async fn spawn(extra: &str, public_url: Option<&str>) -> Bare {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let peers = crate::operations::no_peers();
        let opts = Options {
            extra_toml: extra.to_owned(),
            ..Options::default()
        };
        let db_url = db_url(DbKind::Sqlite);
        let mut toml = config_toml(&url, &db_url, &peers, &opts)
            .replace("issuer = \"\"", "issuer = \"http://127.0.0.1:9\"");
        if let Some(p) = public_url {
            toml = toml.replace(
                &format!("public_url = \"{url}\""),
                &format!("public_url = \"{p}\""),
            );
        }
        let config = mcp_connect::config::Config::from_parts(&toml, &[])
            .unwrap_or_else(|e| panic!("{e}\n{toml}"));
        let app = mcp_connect::Application::build_with_listener(config, listener)
            .await
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.run_until(async {
            let _ = rx.await;
        }));
        Bare {
            url,
            db_url,
            stop: Some(tx),
            task: Some(task),
        }
    }

    fn addr(&self) -> String {
        self.url.trim_start_matches("http://").to_owned()
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
        let _ = drop_database(&self.db_url).await;
    }
}

/// A client whose connections come from `ip` (any 127.x address reaches the loopback listener
/// on Linux), so tests can be several addresses.
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn api(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Option<String>, Value) {
    let mut r = http
        .request(method, format!("{url}{path}"))
        .bearer_auth(key);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let s = r.status();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (s, retry, r.json().await.unwrap_or(Value::Null))
}

fn counter(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_sockets_are_closed_within_the_header_timeout() {
    let app = Bare::spawn("[limits]\nheader_read_timeout_seconds = 1\n", None).await;
    let started = Instant::now();
    let mut sockets = Vec::new();
    for _ in 0..200 {
        let mut s = tokio::net::TcpStream::connect(app.addr()).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        sockets.push(s);
    }
    let closed = futures_util::future::join_all(sockets.into_iter().map(|mut s| async move {
        let mut buf = Vec::new();
        // Closed by the server: EOF (possibly after a 408), well before the client gives up.
        tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut buf))
            .await
            .is_ok()
    }))
    .await;
    let elapsed = started.elapsed();
    assert!(
        closed.iter().all(|c| *c),
        "some slow sockets were left open"
    );
    assert!(
        elapsed < Duration::from_secs(10),
        "took {elapsed:?} to close 200 slow sockets"
    );
    // The service still answers whole requests.
    let r = reqwest::get(format!("{}/healthz", app.url)).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    app.stop().await;
}

/// The header deadline holds for every request of a kept-alive connection, counted from the
/// previous answer's end; answers in flight (a long poll, an event stream) are not cut by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_timeout_holds_between_requests_and_spares_answers_in_flight() {
    let app = Bare::spawn("[limits]\nheader_read_timeout_seconds = 1\n", None).await;
    let mut s = tokio::net::TcpStream::connect(app.addr()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    for _ in 0..3 {
        // Whole requests, each well within the deadline, on one connection for longer than it.
        tokio::time::sleep(Duration::from_millis(600)).await;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
    }
    // Then a header that never ends: closed within the deadline of the last answer.
    let started = Instant::now();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest))
        .await
        .expect("a stalled header on a kept-alive connection was left open")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));

    // A long poll of 2 s and an event stream outlive the 1 s header deadline.
    let http = reqwest::Client::new();
    let (s, _, e) = api(
        &http,
        &app.url,
        API_KEY,
        reqwest::Method::POST,
        "/v1/elicitations",
        Some(json!({"subject": "alice", "provider": "acme"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{e}");
    let mut stream = http
        .get(format!("{}/v1/events", app.url))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let (s, _, body) = api(
        &http,
        &app.url,
        API_KEY,
        reqwest::Method::GET,
        &format!("/v1/elicitations/{}?wait=2", e["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Still open: nothing more to read yet (or a keep-alive comment), not the end.
    match tokio::time::timeout(Duration::from_millis(300), stream.chunk()).await {
        Err(_) | Ok(Ok(Some(_))) => {}
        Ok(r) => panic!("the event stream was cut: {r:?}"),
    }
    drop(stream);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_until_one_closes() {
    let app = Bare::spawn("[limits]\nmax_connections = 4\n", None).await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(tokio::net::TcpStream::connect(app.addr()).await.unwrap());
    }
    // Let the server accept all four.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{}/healthz", app.url))
        .timeout(Duration::from_millis(700))
        .send()
        .await;
    assert!(r.is_err(), "a fifth connection was served: {r:?}");
    idle.pop();
    let r = http
        .get(format!("{}/healthz", app.url))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    drop(idle);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_hold_every_connection_slot() {
    let app = Bare::spawn(
        "[limits]\nmax_connections = 5\nmax_connections_per_address = 3\n",
        None,
    )
    .await;
    let from = |ip: &str| {
        let ip: std::net::IpAddr = ip.parse().unwrap();
        let addr = app.addr();
        async move {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind((ip, 0).into()).unwrap();
            s.connect(addr.parse().unwrap()).await.unwrap()
        }
    };
    // A user's keep-alive client, connected before the attack.
    let user = client_from("127.0.0.14");
    let ok = |c: &reqwest::Client| {
        c.get(format!("{}/healthz", app.url))
            .timeout(Duration::from_secs(5))
            .send()
    };
    assert_eq!(ok(&user).await.unwrap().status(), StatusCode::OK);
    // A stranger opens sockets that never send a header: past its cap they are closed at once.
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(from("127.0.0.12").await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut closed = 0;
    for s in &mut held {
        let mut buf = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(
            Duration::from_millis(300),
            tokio::io::AsyncReadExt::read(s, &mut buf),
        )
        .await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 2, "the sockets past the cap of 3 are closed");
    // The user's connection is still answered, and so is a newcomer from another address.
    assert_eq!(ok(&user).await.unwrap().status(), StatusCode::OK);
    let newcomer = client_from("127.0.0.13");
    assert_eq!(ok(&newcomer).await.unwrap().status(), StatusCode::OK);
    drop(held);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_and_event_streams_are_capped_per_client() {
    let app = Bare::spawn(
        "[limits]\nlong_polls_per_client = 2\nsse_streams_per_client = 1\n",
        None,
    )
    .await;
    let http = reqwest::Client::new();
    let (s, _, e) = api(
        &http,
        &app.url,
        API_KEY,
        reqwest::Method::POST,
        "/v1/elicitations",
        Some(json!({"subject": "alice", "provider": "acme"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{e}");
    let id = e["id"].as_str().unwrap().to_owned();
    let poll = |key: &'static str, wait: u64| {
        let http = http.clone();
        let url = format!("{}/v1/elicitations/{id}?wait={wait}", app.url);
        async move {
            let r = http.get(url).bearer_auth(key).send().await.unwrap();
            let s = r.status();
            let retry = r.headers().get("retry-after").cloned();
            (s, retry, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let held: Vec<_> = (0..2).map(|_| tokio::spawn(poll(API_KEY, 6))).collect();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (s, retry, body) = poll(API_KEY, 3).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"], "rate_limited");
    assert!(retry.is_some(), "429 without Retry-After");
    // A token request that would wait counts as a long poll too.
    let (s, retry, body) = api(
        &http,
        &app.url,
        API_KEY,
        reqwest::Method::POST,
        "/v1/tokens",
        Some(json!({"subject": "alice", "provider": "acme", "elicitation_id": id, "wait_seconds": 3})),
    )
    .await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(retry.is_some());
    // Without a wait it is an ordinary request.
    let (s, _, body) = poll(API_KEY, 0).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    for h in held {
        let (s, _, body) = h.await.unwrap();
        assert_eq!(s, StatusCode::OK, "{body}");
    }
    // Slots are released when the polls end.
    let (s, _, body) = poll(API_KEY, 1).await;
    assert_eq!(s, StatusCode::OK, "{body}");

    // One event stream per client here; a second is refused, another client's is not.
    let stream = http
        .get(format!("{}/v1/events", app.url))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let (s, retry, body) = api(
        &http,
        &app.url,
        API_KEY,
        reqwest::Method::GET,
        "/v1/events",
        None,
    )
    .await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"], "rate_limited");
    assert!(retry.is_some());
    let other = http
        .get(format!("{}/v1/events", app.url))
        .bearer_auth(OTHER_API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);

    let m = scrape_metrics(&app.url).await;
    assert_eq!(
        counter(&m, "mcp_connect_rate_limited_total{limit=\"long_polls\"}"),
        2.0,
        "{m}"
    );
    assert_eq!(
        counter(&m, "mcp_connect_rate_limited_total{limit=\"sse_streams\"}"),
        1.0,
        "{m}"
    );
    drop(stream);
    drop(other);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_requests_are_limited_per_client() {
    let app = Bare::spawn(
        "[limits]\napi_requests_per_second = 1\napi_burst = 3\n",
        None,
    )
    .await;
    let http = reqwest::Client::new();
    let token = |key: &'static str| {
        api(
            &http,
            &app.url,
            key,
            reqwest::Method::POST,
            "/v1/tokens",
            Some(json!({"subject": "alice", "provider": "acme"})),
        )
    };
    for _ in 0..3 {
        let (s, _, body) = token(API_KEY).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    }
    // The refused POST's body is never read: the answer says the connection closes, so a
    // keep-alive client opens a new one instead of writing into a broken pipe.
    let r = http
        .post(format!("{}/v1/tokens", app.url))
        .bearer_auth(API_KEY)
        .json(&json!({"subject": "alice", "provider": "acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.headers()["connection"], "close");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(body["message"], "Too many requests. Try again in 1 second.");
    // Another client has its own allowance.
    let (s, _, body) = token(OTHER_API_KEY).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    // The allowance comes back at the configured rate.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (s, _, body) = token(API_KEY).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    let m = scrape_metrics(&app.url).await;
    assert_eq!(
        counter(&m, "mcp_connect_rate_limited_total{limit=\"api_client\"}"),
        1.0,
        "{m}"
    );
    assert!(m.contains("route=\"/v1/tokens\",status=\"429\""), "{m}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_limits_never_throttle_a_busy_trusted_client() {
    let app = Bare::spawn("", None).await;
    let http = reqwest::Client::new();
    let started = Instant::now();
    let statuses = futures_util::future::join_all((0..32).map(|_| {
        let http = http.clone();
        let url = format!("{}/v1/tokens", app.url);
        async move {
            let mut seen = Vec::new();
            for _ in 0..60 {
                let r = http
                    .post(&url)
                    .bearer_auth(API_KEY)
                    .json(&json!({"subject": "alice", "provider": "acme"}))
                    .send()
                    .await
                    .unwrap();
                seen.push(r.status());
            }
            seen
        }
    }))
    .await;
    let all: Vec<StatusCode> = statuses.into_iter().flatten().collect();
    assert_eq!(all.len(), 1920);
    assert!(
        all.iter().all(|s| *s == StatusCode::NOT_FOUND),
        "some of 1920 requests in {:?} were refused",
        started.elapsed()
    );
    // And a user's browser opening pages for several flows in a minute.
    let b = client_from("127.0.0.1");
    for _ in 0..60 {
        let r = b.get(format!("{}/", app.url)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_api_authentication_is_limited_per_address() {
    let app = Bare::spawn(
        "[limits]\nfailed_auth_per_minute = 1\nfailed_auth_burst = 3\n",
        None,
    )
    .await;
    let attacker = client_from("127.0.0.2");
    let neighbour = client_from("127.0.0.3");
    let get = |http: &reqwest::Client, key: &'static str| {
        let http = http.clone();
        let url = app.url.clone();
        async move {
            api(
                &http,
                &url,
                key,
                reqwest::Method::GET,
                "/v1/connections?subject=alice",
                None,
            )
            .await
        }
    };
    // Requests without credentials guess nothing and are not counted.
    for _ in 0..5 {
        let r = attacker
            .get(format!("{}/v1/connections?subject=alice", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
    for _ in 0..3 {
        let (s, _, body) = get(&attacker, "wrong-key-wrong-key-wrong-key").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{body}");
    }
    let (s, retry, body) = get(&attacker, "wrong-key-wrong-key-wrong-key").await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"], "rate_limited");
    let wait: u64 = retry.unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    // A valid key from the same address (the MCP server behind the attacker's NAT) is never
    // refused by this limit, however many failures keep arriving beside it; the failures stay
    // refused.
    for _ in 0..20 {
        let (s, _, body) = get(&attacker, API_KEY).await;
        assert_eq!(s, StatusCode::OK, "a valid key was refused: {body}");
        let (s, _, _) = get(&attacker, "wrong-key-wrong-key-wrong-key").await;
        assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    }
    // Another address, and successful requests, are not affected.
    let (s, _, body) = get(&neighbour, API_KEY).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    for _ in 0..5 {
        let (s, _, _) = get(&neighbour, API_KEY).await;
        assert_eq!(s, StatusCode::OK);
    }
    let m = scrape_metrics(&app.url).await;
    assert_eq!(
        counter(&m, "mcp_connect_rate_limited_total{limit=\"failed_auth\"}"),
        21.0,
        "{m}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_routes_are_limited_per_address_with_a_page() {
    let app = Bare::spawn(
        "[limits]\nbrowser_requests_per_minute = 1\nbrowser_burst = 5\n",
        None,
    )
    .await;
    let stranger = client_from("127.0.0.4");
    let other = client_from("127.0.0.5");
    for path in ["/", "/account", "/connect/nope", "/no/such/page", "/"] {
        let r = stranger
            .get(format!("{}{path}", app.url))
            .send()
            .await
            .unwrap();
        assert_ne!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
    }
    let r = stranger
        .get(format!("{}/account", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(r.headers()["connection"], "close");
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = r.text().await.unwrap();
    assert!(page.contains("Too many requests"), "{page}");
    // Probes, the API, and other addresses are not affected.
    let r = stranger
        .get(format!("{}/healthz", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let (s, _, body) = api(
        &stranger,
        &app.url,
        API_KEY,
        reqwest::Method::GET,
        "/v1/connections?subject=alice",
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let r = other.get(format!("{}/", app.url)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let m = scrape_metrics(&app.url).await;
    assert_eq!(
        counter(&m, "mcp_connect_rate_limited_total{limit=\"browser\"}"),
        1.0,
        "{m}"
    );
    app.stop().await;
}

/// A browser route past its deadline is answered with the timeout page, in HTML: the edge's
/// answer as the browser layer (`web::pages::render_edge_pages`) renders it, never the edge's
/// JSON. `/account` signs the reader in first, which asks the identity issuer for its
/// metadata; this issuer accepts connections and never answers, so the request outlives the
/// one-second request timeout (the outbound call would wait five, then answer 502).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_route_past_its_deadline_is_answered_with_a_page() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", silent.local_addr().unwrap());
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let app = Bare::spawn_patched(|t| {
        t.replace(
            "issuer = \"http://127.0.0.1:9\"",
            &format!("issuer = \"{issuer}\""),
        ) + "\n[limits]\nrequest_timeout_seconds = 1\n"
    })
    .await;
    let r = client_from("127.0.0.6")
        .get(format!("{}/account", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/html"), "{content_type}");
    let page = r.text().await.unwrap();
    assert!(page.contains("This took too long"), "{page}");
    app.stop().await;
    holder.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hsts_is_sent_only_when_public_url_is_https() {
    let https = Bare::spawn("", Some("https://connect.example.com")).await;
    let r = reqwest::get(format!("{}/healthz", https.url))
        .await
        .unwrap();
    assert_eq!(
        r.headers()["strict-transport-security"],
        "max-age=63072000; includeSubDomains"
    );
    let r = reqwest::get(format!("{}/", https.url)).await.unwrap();
    assert!(r.headers().contains_key("strict-transport-security"));
    https.stop().await;
    let http = Bare::spawn("", None).await;
    let r = reqwest::get(format!("{}/healthz", http.url)).await.unwrap();
    assert!(!r.headers().contains_key("strict-transport-security"));
    http.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_the_main_listener_need_loopback_or_the_metrics_token() {
    let app = Bare::spawn("", None).await;
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{}/metrics", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "loopback, no proxy");
    // A reverse proxy on the same host makes strangers look local: forwarded requests are refused.
    for h in ["x-forwarded-for", "forwarded", "x-real-ip"] {
        let r = http
            .get(format!("{}/metrics", app.url))
            .header(h, "for=203.0.113.7")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{h}");
    }
    app.stop().await;

    let token = "metrics-token-0123456789abcdef";
    let app = Bare::spawn_with_top(&format!("metrics_token = \"{token}\"")).await;
    let r = http
        .get(format!("{}/metrics", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let r = http
        .get(format!("{}/metrics", app.url))
        .bearer_auth("metrics-token-0123456789abcdeX")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = http
        .get(format!("{}/metrics", app.url))
        .bearer_auth(token)
        .header("x-forwarded-for", "203.0.113.7")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the token works from anywhere");
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("mcp_connect_http_requests_total")
    );
    app.stop().await;
}

impl Bare {
    /// Like `spawn`, with `top` added as top-level keys.
    async fn spawn_with_top(top: &str) -> Bare {
        // Top-level keys must come before the first table; `database_url` is the first line's
        // neighbour in the test configuration.
        Bare::spawn_patched(|t| t.replacen("database_url", &format!("{top}\ndatabase_url"), 1))
            .await
    }

    async fn spawn_patched(patch: impl Fn(String) -> String) -> Bare {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let peers = crate::operations::no_peers();
        let db_url = db_url(DbKind::Sqlite);
        let toml = patch(
            config_toml(&url, &db_url, &peers, &Options::default())
                .replace("issuer = \"\"", "issuer = \"http://127.0.0.1:9\""),
        );
        let config = mcp_connect::config::Config::from_parts(&toml, &[])
            .unwrap_or_else(|e| panic!("{e}\n{toml}"));
        let app = mcp_connect::Application::build_with_listener(config, listener)
            .await
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.run_until(async {
            let _ = rx.await;
        }));
        Bare {
            url,
            db_url,
            stop: Some(tx),
            task: Some(task),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whitespace_only_subjects_are_refused() {
    let app = Bare::spawn("", None).await;
    let http = reqwest::Client::new();
    for subject in [" ", "   ", "\u{3000}", " \u{a0} "] {
        for path in ["/v1/tokens", "/v1/elicitations"] {
            let (s, _, body) = api(
                &http,
                &app.url,
                API_KEY,
                reqwest::Method::POST,
                path,
                Some(json!({"subject": subject, "provider": "acme"})),
            )
            .await;
            assert_eq!(s, StatusCode::BAD_REQUEST, "{path} {subject:?}: {body}");
            assert_eq!(body["error"], "invalid_request");
        }
        let q: String = url::form_urlencoded::byte_serialize(subject.as_bytes()).collect();
        let (s, _, body) = api(
            &http,
            &app.url,
            API_KEY,
            reqwest::Method::GET,
            &format!("/v1/connections?subject={q}"),
            None,
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{subject:?}: {body}");
    }
    app.stop().await;
}

/// `check-config` (and so `serve`, which loads the same way) refuses plain http off loopback,
/// naming the key.
#[test]
fn check_config_refuses_plain_http_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let key = mcp_connect::crypto::generate_key("k1");
    let write = |public_url: &str, issuer: &str, token_url: &str| {
        let p = dir.path().join("c.toml");
        std::fs::write(
            &p,
            format!(
                r#"
public_url = "{public_url}"
database_url = "sqlite://{}/db.sqlite"
encryption_keys = ["{key}"]
outbound_allow_cidrs = ["127.0.0.0/8", "::1"]
[identity]
issuer = "{issuer}"
client_id = "mcp-connect"
[providers.acme]
authorization_url = "https://id.acme.test/authorize"
token_url = "{token_url}"
client_id = "x"
"#,
                dir.path().display()
            ),
        )
        .unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_mcp-connect"))
            .args(["check-config", "--config", p.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let out = write(
        "http://connect.example.com",
        "http://auth.example.com",
        "http://id.acme.test/token",
    );
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    for k in [
        "`public_url`",
        "`identity.issuer`",
        "`providers.acme.token_url`",
    ] {
        assert!(text.contains(k), "{k} not named in: {text}");
    }
    let out = write(
        "http://127.0.0.1:8080",
        "http://localhost:9000",
        "http://[::1]:9001/token",
    );
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_allowance() {
    let app = Bare::spawn(
        "[limits]\nbrowser_requests_per_minute = 1\nbrowser_burst = 2\ntrusted_proxies = [\"127.0.0.8\"]\n",
        None,
    )
    .await;
    let proxy = client_from("127.0.0.8");
    let get = |c: &reqwest::Client, xff: &str| {
        c.get(format!("{}/", app.url))
            .header("x-forwarded-for", xff)
            .send()
    };
    for _ in 0..2 {
        assert_eq!(
            get(&proxy, "198.51.100.1").await.unwrap().status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        get(&proxy, "198.51.100.1").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another user behind the same proxy is not throttled with the first.
    assert_eq!(
        get(&proxy, "198.51.100.2").await.unwrap().status(),
        StatusCode::OK
    );
    // A peer that is not a trusted proxy cannot choose its address by the header.
    let stranger = client_from("127.0.0.9");
    for i in 0..2 {
        let xff = format!("203.0.113.{i}");
        assert_eq!(get(&stranger, &xff).await.unwrap().status(), StatusCode::OK);
    }
    assert_eq!(
        get(&stranger, "203.0.113.250").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_are_taken_only_from_trusted_proxies_and_never_echoed_when_refused() {
    let app = Bare::spawn("[limits]\ntrusted_proxies = [\"127.0.0.10\"]\n", None).await;
    let echoed = |from: &'static str, id: &'static str| {
        let url = format!("{}/healthz", app.url);
        async move {
            let r = client_from(from)
                .get(url)
                .header("x-request-id", id)
                .send()
                .await
                .unwrap();
            r.headers()["x-request-id"].to_str().unwrap().to_owned()
        }
    };
    // A trusted proxy's well-formed id is kept: one id across the proxy's log and ours.
    assert_eq!(echoed("127.0.0.10", "proxy-id-1").await, "proxy-id-1");
    // Anyone else's is replaced, so no caller can forge the correlation of audit rows and logs.
    let forged = echoed("127.0.0.11", "forged-id-1").await;
    assert_ne!(forged, "forged-id-1");
    assert!(!forged.is_empty());
    // A malformed id is never echoed, not even from the proxy.
    let malformed = echoed("127.0.0.10", "has spaces;and=more").await;
    assert_ne!(malformed, "has spaces;and=more");
    assert!(
        malformed
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{malformed}"
    );
    app.stop().await;
}
