//! Bad input gets a clear 4xx with a message, never a 500, and changes nothing.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::*;
use crate::on_both_databases;

async fn raw(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    body: Option<(&str, &str)>,
) -> (StatusCode, Value) {
    // A fresh connection per request: the server closes a connection whose oversized body it
    // refused unread, and a pooled client could otherwise reuse it for the next request.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut r = client.request(method, format!("{}{path}", app.url));
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    if let Some((ct, b)) = body {
        r = r.header("content-type", ct).body(b.to_owned());
    }
    let resp = r.send().await.unwrap();
    let s = resp.status();
    (s, resp.json().await.unwrap_or(Value::Null))
}

/// One bad request and the refusal it must get: `status`, the JSON `error` code, and a
/// non-empty `message`.
struct Case {
    what: &'static str,
    method: Method,
    path: String,
    key: Option<&'static str>,
    body: Option<(&'static str, String)>,
    status: StatusCode,
    code: &'static str,
}

const BAD: StatusCode = StatusCode::BAD_REQUEST;
const NOT_FOUND: StatusCode = StatusCode::NOT_FOUND;
const KEY: Option<&str> = Some(API_KEY);

fn json_body(b: &str) -> Option<(&'static str, String)> {
    Some(("application/json", b.to_owned()))
}

fn post(
    what: &'static str,
    path: &str,
    key: Option<&'static str>,
    body: Option<(&'static str, String)>,
    status: StatusCode,
    code: &'static str,
) -> Case {
    Case {
        what,
        method: Method::POST,
        path: path.to_owned(),
        key,
        body,
        status,
        code,
    }
}

fn bare(
    what: &'static str,
    method: Method,
    path: &str,
    key: Option<&'static str>,
    status: StatusCode,
    code: &'static str,
) -> Case {
    Case {
        what,
        method,
        path: path.to_owned(),
        key,
        body: None,
        status,
        code,
    }
}

/// Refused before anything exists.
#[rustfmt::skip]
fn without_elicitation() -> Vec<Case> {
    let (elicitations, tokens) = ("/v1/elicitations", "/v1/tokens");
    let big = format!(r#"{{"subject":"{}","provider":"acme"}}"#, "a".repeat(100_000));
    vec![
        post("no key", elicitations, None, json_body("{}"), StatusCode::UNAUTHORIZED, "unauthorized"),
        post("a wrong key", elicitations, Some("wrong-key"), json_body("{}"), StatusCode::UNAUTHORIZED, "unauthorized"),
        post("not JSON", elicitations, KEY, json_body("{not json"), BAD, "invalid_request"),
        post("not the JSON content type", elicitations, KEY, Some(("text/plain", "{}".into())), BAD, "invalid_request"),
        post("an unknown field", elicitations, KEY, json_body(r#"{"subject":"a","provider":"acme","extra":1}"#), BAD, "invalid_request"),
        post("an empty subject", elicitations, KEY, json_body(r#"{"subject":"","provider":"acme"}"#), BAD, "invalid_request"),
        // Whitespace-only subjects are refused, as the OpenAPI pattern says.
        post("a whitespace-only subject", tokens, KEY, json_body("{\"subject\":\" \\u3000\",\"provider\":\"acme\"}"), BAD, "invalid_request"),
        // A whole number written 0.0 is an integer (JSON Schema): accepted, so not connected.
        post("min_ttl_seconds 30.0 (accepted)", tokens, KEY, json_body(r#"{"subject":"a","provider":"acme","min_ttl_seconds":30.0}"#), NOT_FOUND, "not_connected"),
        post("a scope with a space", elicitations, KEY, json_body(r#"{"subject":"a","provider":"acme","scopes":["a b"]}"#), BAD, "invalid_request"),
        post("a body over 16 KiB", elicitations, KEY, Some(("application/json", big)), StatusCode::PAYLOAD_TOO_LARGE, "invalid_request"),
        post("an unknown provider", elicitations, KEY, json_body(r#"{"subject":"a","provider":"nope"}"#), NOT_FOUND, "not_found"),
        // "other" exists, but this client may not use it.
        post("a provider this client may not use", elicitations, KEY, json_body(r#"{"subject":"a","provider":"other"}"#), StatusCode::FORBIDDEN, "forbidden_provider"),
        bare("an elicitation that does not exist", Method::GET, "/v1/elicitations/AAAAAAAAAAAAAAAAAAAAAAAA", KEY, NOT_FOUND, "not_found"),
        bare("a path that cannot be an id", Method::GET, "/v1/elicitations/..%2F..%2Fetc", KEY, NOT_FOUND, "not_found"),
        bare("no such route", Method::GET, "/v1/nothing-here", KEY, NOT_FOUND, "not_found"),
    ]
}

/// Refused about the elicitation `id` (made by the client of `API_KEY` for alice).
#[rustfmt::skip]
fn with_elicitation(id: &str) -> Vec<Case> {
    let tokens = "/v1/tokens";
    vec![
        bare("wait over 60", Method::GET, &format!("/v1/elicitations/{id}?wait=61"), KEY, BAD, "invalid_request"),
        bare("wait not a number", Method::GET, &format!("/v1/elicitations/{id}?wait=soon"), KEY, BAD, "invalid_request"),
        // Another client cannot see it.
        bare("another client's elicitation", Method::GET, &format!("/v1/elicitations/{id}"), Some(OTHER_API_KEY), NOT_FOUND, "not_found"),
        post("a negative min_ttl_seconds", tokens, KEY, json_body(r#"{"subject":"alice","provider":"acme","min_ttl_seconds":-5}"#), BAD, "invalid_request"),
        post("wait_seconds without an elicitation", tokens, KEY, json_body(r#"{"subject":"alice","provider":"acme","wait_seconds":5}"#), BAD, "invalid_request"),
        bare("connections without a subject", Method::GET, "/v1/connections", KEY, BAD, "invalid_request"),
        bare("deleting a connection that does not exist", Method::DELETE, "/v1/connections/AAAAAAAAAAAAAAAAAAAAAA", KEY, NOT_FOUND, "not_found"),
    ]
}

async fn check_all(app: &TestApp, cases: &[Case]) {
    for c in cases {
        let body = c.body.as_ref().map(|(ct, b)| (*ct, b.as_str()));
        let (status, v) = raw(app, c.method.clone(), &c.path, c.key, body).await;
        assert_eq!(status, c.status, "{}: {v}", c.what);
        assert_eq!(v["error"], c.code, "{}: {v}", c.what);
        assert!(
            v["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}: {v}",
            c.what
        );
    }
}

on_both_databases!(
    bad_api_input_gets_clear_4xx_and_changes_nothing,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        check_all(&app, &without_elicitation()).await;
        let e = app.elicit("alice").await;
        check_all(&app, &with_elicitation(e["id"].as_str().unwrap())).await;
        // Nothing of the above created anything.
        let (_, v) = app.get("/v1/connections?subject=a").await;
        assert_eq!(v["connections"], json!([]));
        let n: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM elicitations")
            .fetch_one(&app.db().pool)
            .await
            .unwrap();
        assert_eq!(n.0, 1);
        app.shutdown().await;
    }
);

on_both_databases!(bad_browser_input_gets_a_page_not_a_500, |kind| async move {
    let app = TestApp::spawn(kind).await;
    let b = Browser::new();
    // (A well-formed id that names nothing is answered like any other link: see
    // signin_hardening.rs. One that cannot be an id is simply not found.)
    let p = b
        .get(&format!("{}/connect/not.a.real.elicitation.id", app.url))
        .await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    assert!(p.has("<html") && p.has("not valid"), "{}", p.body);
    assert!(
        p.has("Request id") || p.has("request id"),
        "error pages show a request id: {}",
        p.body
    );
    let p = b.get(&format!("{}/connect/x", app.url)).await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    let p = b
        .get(&format!("{}/oauth/nope/callback?code=a&state=b", app.url))
        .await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    let p = b
        .get(&format!("{}/auth/callback?code=a&state=b", app.url))
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    let p = b.get(&format!("{}/no/such/page", app.url)).await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    assert!(p.has("<html"));

    // A tampered session cookie is ignored: the connect page starts a fresh sign-in.
    let e = app.elicit("alice").await;
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(e["url"].as_str().unwrap())
        .header("cookie", "mcp-connect=tampered%20value%3B%3B; other=1")
        .send()
        .await
        .unwrap();
    assert_sent_to_sign_in(&r, &app);

    // A consent post without the CSRF token is refused.
    let consent = b
        .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
        .await;
    let (action, _) = consent.form("form.actions");
    let r = b
        .client
        .post(&action)
        .form(&[("csrf", "forged"), ("action", "continue")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = b
        .client
        .post(&action)
        .form(&[("action", "continue")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let (_, v) = app
        .get(&format!("/v1/elicitations/{}", e["id"].as_str().unwrap()))
        .await;
    assert_eq!(v["status"], "pending");
    app.shutdown().await;
});

on_both_databases!(
    pages_carry_security_headers_and_the_openapi_document_is_served,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e = app.elicit("alice").await;
        let r = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(e["url"].as_str().unwrap())
            .send()
            .await
            .unwrap();
        let h = r.headers();
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "no-referrer");
        assert!(
            h["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        assert!(h.contains_key("x-request-id"));
        let cookie = h["set-cookie"].to_str().unwrap();
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
            "{cookie}"
        );
        let (s, doc) = app.get("/openapi.json").await;
        assert_eq!(s, StatusCode::OK);
        assert!(doc["paths"]["/v1/tokens"]["post"].is_object());
        let (s, _) = app.get("/healthz").await;
        assert_eq!(s, StatusCode::OK);
        let (s, _) = app.get("/readyz").await;
        assert_eq!(s, StatusCode::OK);
        app.shutdown().await;
    }
);

#[tokio::test]
async fn https_public_url_gives_a_host_prefixed_secure_cookie() {
    let kind = DbKind::Sqlite;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let peers = Peers::start(&format!("http://{addr}"), 3600).await;
    let opts = Options::default();
    // Same app, but it believes it is served over https (a TLS-terminating proxy in front).
    let db = db_url(kind);
    let toml = config_toml(&format!("https://{addr}"), &db, &peers, &opts);
    let config = mcp_connect::config::Config::from_parts(&toml, &[]).unwrap();
    let app = mcp_connect::Application::build_with_listener(config, listener)
        .await
        .unwrap();
    tokio::spawn(app.run_until(std::future::pending()));
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/elicitations"))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!({"subject": "alice", "provider": "acme"}))
        .send()
        .await
        .unwrap();
    let e: Value = r.json().await.unwrap();
    let id = e["id"].as_str().unwrap();
    assert!(e["url"].as_str().unwrap().starts_with("https://"));
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("http://{addr}/connect/{id}"))
        .send()
        .await
        .unwrap();
    // Before sign-in the only cookie is the sealed pre-sign-in one; it is host-prefixed too.
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.starts_with("__Host-mcp-connect-signin="), "{cookie}");
    assert!(
        cookie.contains("Secure")
            && cookie.contains("HttpOnly")
            && cookie.contains("Path=/")
            && !cookie.contains("Domain"),
        "{cookie}"
    );
}
