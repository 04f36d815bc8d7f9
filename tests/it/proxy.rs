//! The proxy (`/v1/proxy/{provider}/{path}`) driven by an ordinary HTTP client (reqwest, and
//! raw HTTP/1.1 where reqwest would tidy the path) against a local upstream that records what
//! it received: the token reaches it and nothing of the caller's credentials, cookies or
//! hop-by-hop headers does; its cookies never come back; paths that try to leave the base,
//! redirects, oversized answers, a 401 with and without a replayable body, both directions of
//! streaming, allow-lists and proxy-only clients.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode as AxStatus};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::harness::*;
use crate::on_both_databases;

const PROXY_KEY: &str = "proxy-api-key-0123456789abcdefghij";
/// `[limits] proxy_response_body_bytes` in these tests.
const RESPONSE_LIMIT: usize = 4 * 1024 * 1024;

/// One request the upstream received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body_len: usize,
}

#[derive(Clone, Default)]
struct Upstream {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Answer 401 to this bearer token.
    refuse: Arc<Mutex<Option<String>>>,
    /// The first chunk of a request body arrived.
    first_in: Arc<Notify>,
    /// Send the rest of `/base/slow`.
    go: Arc<Notify>,
}

impl Upstream {
    fn calls(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn record(State(up): State<Upstream>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let mut body = body.into_data_stream();
    let mut body_len = 0;
    while let Some(chunk) = body.next().await {
        let Ok(chunk) = chunk else { break };
        if body_len == 0 {
            up.first_in.notify_one();
        }
        body_len += chunk.len();
    }
    let path = parts.uri.path().to_owned();
    up.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path: path.clone(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers.clone(),
        body_len,
    });
    let bearer = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    if bearer.is_some() && *up.refuse.lock().unwrap() == bearer {
        return (AxStatus::UNAUTHORIZED, "token refused").into_response();
    }
    match path.as_str() {
        "/base/echo" => {
            let mut r = axum::Json(json!({"ok": true, "received": body_len})).into_response();
            let h = r.headers_mut();
            h.insert(
                "set-cookie",
                HeaderValue::from_static("upstream=secret; Path=/"),
            );
            h.insert("connection", HeaderValue::from_static("x-up-hop"));
            h.insert("x-up-hop", HeaderValue::from_static("1"));
            h.insert("x-kept", HeaderValue::from_static("yes"));
            r
        }
        "/base/redirect" => (
            AxStatus::FOUND,
            [("location", "http://10.0.0.1/latest/meta-data/")],
        )
            .into_response(),
        "/base/big" => "a".repeat(RESPONSE_LIMIT + 1024 * 1024).into_response(),
        "/base/big-chunked" => {
            let chunks = (0..80).map(|_| Ok::<_, std::io::Error>(vec![b'a'; 64 * 1024]));
            Body::from_stream(futures_util::stream::iter(chunks)).into_response()
        }
        "/base/slow" => {
            let go = up.go.clone();
            let s =
                futures_util::stream::once(async { Ok::<_, std::io::Error>("first".to_owned()) })
                    .chain(futures_util::stream::once(async move {
                        go.notified().await;
                        Ok("rest".to_owned())
                    }));
            Body::from_stream(s).into_response()
        }
        _ => axum::Json(json!({"ok": true, "received": body_len})).into_response(),
    }
}

async fn start_upstream() -> (String, Upstream) {
    let up = Upstream::default();
    let app = axum::Router::new().fallback(record).with_state(up.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    (url, up)
}

fn options(upstream: &str) -> Options {
    Options {
        acme_api_base_url: Some(format!("{upstream}/base")),
        demo_client_extra: "grant_group = \"tools\"".into(),
        extra_toml: format!(
            "[limits]\nproxy_response_body_bytes = {RESPONSE_LIMIT}\nproxy_request_body_bytes = 67108864\n\n\
             [[clients]]\nid = \"proxy-mcp\"\napi_key = \"{PROXY_KEY}\"\nproviders = [\"acme\"]\n\
             grant_group = \"tools\"\ntoken_access = \"proxy\"\n\
             proxy = {{ acme = {{ paths = [\"/echo\"], methods = [\"GET\"] }} }}\n"
        ),
        ..Options::default()
    }
}

/// A client that follows no redirect.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn proxy(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    user: &str,
) -> reqwest::RequestBuilder {
    client()
        .request(method, format!("{}/v1/proxy/acme/{path}", app.url))
        .bearer_auth(API_KEY)
        .header("connect-subject", user)
}

async fn token(app: &TestApp, user: &str) -> String {
    let (s, v) = app.token(user).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["access_token"].as_str().unwrap().to_owned()
}

/// `GET target` sent as written (reqwest would resolve `..` and `%2e` itself): status, body.
async fn raw_get(app: &TestApp, target: &str, user: &str) -> (u16, String) {
    let addr = app.url.strip_prefix("http://").unwrap();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {target} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {API_KEY}\r\nConnect-Subject: {user}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

on_both_databases!(
    proxy_forwards_the_token_and_nothing_of_the_callers,
    |kind| async move {
        let (up_url, up) = start_upstream().await;
        let app = TestApp::spawn_with(kind, options(&up_url)).await;
        app.connect("alice").await;
        let t1 = token(&app, "alice").await;

        // The token goes; the caller's key, cookies, subject and hop-by-hop headers do not.
        let r = proxy(&app, reqwest::Method::POST, "echo?x=1&y=%20", "alice")
            .header("cookie", "session=caller")
            .header("proxy-authorization", "Basic eA==")
            .header("connection", "x-caller-hop")
            .header("x-caller-hop", "1")
            .header("keep-alive", "timeout=5")
            .header("te", "trailers")
            .header("upgrade", "websocket")
            .header("x-custom", "kept")
            .body("hello")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let h = r.headers().clone();
        assert!(h.get("set-cookie").is_none(), "{h:?}");
        assert!(h.get("x-up-hop").is_none(), "{h:?}");
        assert_eq!(h["x-kept"], "yes");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v, json!({"ok": true, "received": 5}));
        let seen = up.calls();
        assert_eq!(seen.len(), 1);
        let s = &seen[0];
        assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", "/base/echo"));
        assert_eq!(s.query.as_deref(), Some("x=1&y=%20"));
        assert_eq!(s.headers["authorization"], format!("Bearer {t1}").as_str());
        assert_eq!(s.headers["x-custom"], "kept");
        for gone in [
            "cookie",
            "proxy-authorization",
            "x-caller-hop",
            "keep-alive",
            "te",
            "upgrade",
            "connect-subject",
        ] {
            assert!(s.headers.get(gone).is_none(), "{gone} reached the upstream");
        }
        let all: String = format!("{:?}", s.headers);
        assert!(!all.contains(API_KEY), "the API key reached the upstream");

        // Paths that try to leave the base: refused before anything goes out.
        for bad in [
            "../x",
            "%2e%2e/x",
            ".%2E/x",
            "a/%2e/b",
            "a%2fb",
            "a%5cb",
            "a//b",
            "%252e%252e/x",
            "a%00b",
            "a%zzb",
        ] {
            let (status, text) = raw_get(&app, &format!("/v1/proxy/acme/{bad}"), "alice").await;
            assert_eq!(status, 400, "{bad}: {text}");
            assert!(text.contains("invalid_request"), "{bad}: {text}");
        }
        let (status, _) = raw_get(&app, "/v1/proxy/acme/a\\b", "alice").await;
        assert!(status == 400, "backslash: {status}");
        assert_eq!(up.calls().len(), 1, "a refused path reached the upstream");

        // A redirect (to a metadata address) is returned, never followed.
        let r = proxy(&app, reqwest::Method::GET, "redirect", "alice")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FOUND);
        assert_eq!(r.headers()["location"], "http://10.0.0.1/latest/meta-data/");
        assert_eq!(up.calls().len(), 2);

        // An answer over the limit: 502 with a clear error when its length is declared, and
        // nothing of it; a cut stream when it is not.
        let r = proxy(&app, reqwest::Method::GET, "big", "alice")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "upstream_error");
        assert!(
            v["message"].as_str().unwrap().contains("larger than"),
            "{v}"
        );
        let r = proxy(&app, reqwest::Method::GET, "big-chunked", "alice")
            .send()
            .await
            .unwrap();
        assert!(
            r.bytes().await.map_or(true, |b| b.len() <= RESPONSE_LIMIT),
            "a body over the limit came through whole"
        );

        // Streaming: the first chunk arrives while the upstream still holds the rest.
        let mut r = proxy(&app, reqwest::Method::GET, "slow", "alice")
            .send()
            .await
            .unwrap();
        let first = tokio::time::timeout(Duration::from_secs(10), r.chunk())
            .await
            .expect("the first chunk was held back")
            .unwrap()
            .unwrap();
        assert_eq!(&first[..], b"first");
        up.go.notify_one();
        assert_eq!(&r.chunk().await.unwrap().unwrap()[..], b"rest");
        // ... and a request body goes on as it comes: the upstream has its first chunk before
        // the caller sends the rest (32 MiB).
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
        let body = reqwest::Body::wrap_stream(tokio_stream_from(rx));
        let send = tokio::spawn(
            proxy(&app, reqwest::Method::PUT, "upload", "alice")
                .body(body)
                .send(),
        );
        tx.send(Ok(vec![b'x'; 64 * 1024])).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), up.first_in.notified())
            .await
            .expect("the request body was held back");
        for _ in 0..511 {
            tx.send(Ok(vec![b'x'; 64 * 1024])).await.unwrap();
        }
        drop(tx);
        let r = send.await.unwrap().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["received"], 32 * 1024 * 1024);

        // A 401: refreshed and retried once (no body)...
        let before = up.calls().len();
        *up.refuse.lock().unwrap() = Some(t1.clone());
        let r = proxy(&app, reqwest::Method::GET, "flaky", "alice")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().get("mcp-connect-token-refreshed").is_none());
        let calls = up.calls();
        assert_eq!(calls.len(), before + 2);
        let t2 = token(&app, "alice").await;
        assert_ne!(t1, t2);
        assert_eq!(
            calls[before + 1].headers["authorization"],
            format!("Bearer {t2}").as_str()
        );
        // ... and with a body too large to keep: the 401 comes back, saying the token was
        // refreshed, and the caller's retry passes.
        *up.refuse.lock().unwrap() = Some(t2.clone());
        let big = vec![b'y'; 100 * 1024];
        let r = proxy(&app, reqwest::Method::POST, "flaky", "alice")
            .body(big.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()["mcp-connect-token-refreshed"], "true");
        assert!(r.headers().get("mcp-connect-error").is_none());
        assert_eq!(up.calls().len(), before + 3);
        let r = proxy(&app, reqwest::Method::POST, "flaky", "alice")
            .body(big)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(up.calls().last().unwrap().body_len, 100 * 1024);

        // Bad input is a clear 4xx, never a 500.
        let r = proxy(&app, reqwest::Method::GET, "echo", "alice")
            .header("connect-account", "")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let r = proxy(&app, reqwest::Method::GET, "echo", "nobody")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        // Our own errors say so; the provider's never carry the header.
        assert_eq!(r.headers()["mcp-connect-error"], "not_connected");
        let r = client()
            .get(format!("{}/v1/proxy/nope/x", app.url))
            .bearer_auth(API_KEY)
            .header("connect-subject", "alice")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        let r = client()
            .get(format!("{}/v1/proxy/acme/echo", app.url))
            .header("connect-subject", "alice")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

        // Metrics by provider and status class; one audit row for all of this use.
        let m = app.metrics_text().await;
        assert!(
            m.contains("mcp_connect_proxy_requests_total{provider=\"acme\",class=\"2xx\"}"),
            "{m}"
        );
        assert!(m.contains("mcp_connect_proxy_upstream_duration_seconds_bucket"));
        let rows = app
            .db()
            .search_audit(
                &mcp_connect::db::audit::AuditFilter {
                    event: Some("connection.proxied".into()),
                    ..Default::default()
                },
                100,
                0,
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].client_id.as_deref(), Some("demo-mcp"));
        assert!(!format!("{rows:?}").contains(&t1));
        app.shutdown().await;
    }
);

on_both_databases!(
    a_proxy_only_client_gets_no_token_and_keeps_to_its_allow_list,
    |kind| async move {
        let (up_url, up) = start_upstream().await;
        let app = TestApp::spawn_with(kind, options(&up_url)).await;
        app.connect("bob").await;
        let api = client();
        let r = api
            .post(format!("{}/v1/tokens", app.url))
            .bearer_auth(PROXY_KEY)
            .json(&json!({"subject": "bob", "provider": "acme"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "proxy_only", "{v}");
        let r = api
            .post(format!("{}/oauth2/token", app.url))
            .basic_auth("proxy-mcp", Some(PROXY_KEY))
            .form(&[
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ),
                ("subject_token", "x"),
                (
                    "subject_token_type",
                    "urn:ietf:params:oauth:token-type:access_token",
                ),
                ("audience", "acme"),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "unauthorized_client", "{v}");
        assert!(v.get("access_token").is_none());

        let through = |method: reqwest::Method, path: &str| {
            api.request(method, format!("{}/v1/proxy/acme/{path}", app.url))
                .bearer_auth(PROXY_KEY)
                .header("connect-subject", "bob")
        };
        let r = through(reqwest::Method::GET, "echo").send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let t = token(&app, "bob").await;
        assert_eq!(
            up.calls()[0].headers["authorization"],
            format!("Bearer {t}").as_str()
        );
        for (method, path) in [
            (reqwest::Method::GET, "redirect"),
            (reqwest::Method::GET, "echoes"),
            (reqwest::Method::POST, "echo"),
        ] {
            let r = through(method.clone(), path).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::FORBIDDEN, "{method} {path}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"], "forbidden", "{v}");
        }
        assert_eq!(up.calls().len(), 1);
        app.shutdown().await;
    }
);

/// A stream over an mpsc receiver (no tokio-stream dependency).
fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

on_both_databases!(
    the_test_peer_answers_whoami_through_the_proxy,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        app.connect("carol").await;
        let r = proxy(&app, reqwest::Method::GET, "whoami", "carol")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let v: Value = r.json().await.unwrap();
        assert!(v.to_string().contains("carol"), "{v}");
        // The Rust client: the provider's answer, or mcp-connect's own refusal as an error.
        let c = mcp_connect_client::Client::new(&app.url, API_KEY);
        let r = c
            .proxy(mcp_connect_client::ProxyRequest::for_subject(
                reqwest::Method::GET,
                "acme",
                "whoami",
                "carol",
            ))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let e = c
            .proxy(mcp_connect_client::ProxyRequest::for_subject(
                reqwest::Method::GET,
                "acme",
                "whoami",
                "dave",
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some("not_connected"), "{e}");
        // The provider's own 404 is an answer, not an error of ours.
        let r = c
            .proxy(mcp_connect_client::ProxyRequest::for_subject(
                reqwest::Method::GET,
                "acme",
                "no-such-endpoint",
                "carol",
            ))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        // Dot segments never leave the client: a URL parser would resolve them, and
        // `../../connections` would reach mcp-connect's own API with the client's key.
        for escape in [
            "../../connections",
            "a/../../../connections",
            "%2e%2e/%2E%2e/connections",
            ".%2e/x",
            "./whoami",
            "whoami/..?x=1",
        ] {
            let e = c
                .proxy(mcp_connect_client::ProxyRequest::for_subject(
                    reqwest::Method::GET,
                    "acme",
                    escape,
                    "carol",
                ))
                .await
                .unwrap_err();
            // The client's own refusal: nothing was sent (the resolved path would have reached
            // another endpoint, whose answer would say something else).
            assert_eq!(e.code(), Some("invalid_request"), "{escape}: {e}");
            assert!(e.to_string().contains(". or .. segment"), "{escape}: {e}");
        }
        // A `#` is part of the path, not a fragment cut off.
        let r = c
            .proxy(mcp_connect_client::ProxyRequest::for_subject(
                reqwest::Method::GET,
                "acme",
                "whoami#x",
                "carol",
            ))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        app.shutdown().await;
    }
);
