//! Bad input gets a clear 4xx with a message, never a 500, and changes nothing.

use reqwest::StatusCode;
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

fn assert_error(got: (StatusCode, Value), status: StatusCode, code: &str) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["error"], code, "{}", got.1);
    assert!(
        got.1["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{}",
        got.1
    );
}

on_both_databases!(
    bad_api_input_gets_clear_4xx_and_changes_nothing,
    |kind| async move {
        use reqwest::Method;
        let app = TestApp::spawn(kind).await;
        let json_ct = "application/json";
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/elicitations",
                None,
                Some((json_ct, "{}")),
            )
            .await,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        );
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/elicitations",
                Some("wrong-key"),
                Some((json_ct, "{}")),
            )
            .await,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        );
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/elicitations",
                Some(API_KEY),
                Some((json_ct, "{not json")),
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/elicitations",
                Some(API_KEY),
                Some(("text/plain", "{}")),
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/elicitations",
                Some(API_KEY),
                Some((json_ct, r#"{"subject":"a","provider":"acme","extra":1}"#)),
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/elicitations",
                Some(API_KEY),
                Some((json_ct, r#"{"subject":"","provider":"acme"}"#)),
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        // Whitespace-only subjects are refused, as the OpenAPI pattern says.
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/tokens",
                Some(API_KEY),
                Some((json_ct, "{\"subject\":\" \\u3000\",\"provider\":\"acme\"}")),
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        // A whole number written 0.0 is an integer (JSON Schema): accepted, so not connected.
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/tokens",
                Some(API_KEY),
                Some((
                    json_ct,
                    r#"{"subject":"a","provider":"acme","min_ttl_seconds":30.0}"#,
                )),
            )
            .await,
            StatusCode::NOT_FOUND,
            "not_connected",
        );
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/elicitations",
                Some(API_KEY),
                Some((
                    json_ct,
                    r#"{"subject":"a","provider":"acme","scopes":["a b"]}"#,
                )),
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        let big = format!(
            r#"{{"subject":"{}","provider":"acme"}}"#,
            "a".repeat(100_000)
        );
        let (s, v) = raw(
            &app,
            Method::POST,
            "/v1/elicitations",
            Some(API_KEY),
            Some((json_ct, &big)),
        )
        .await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
        assert_eq!(v["error"], "invalid_request");
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/elicitations",
                Some(API_KEY),
                Some((json_ct, r#"{"subject":"a","provider":"nope"}"#)),
            )
            .await,
            StatusCode::NOT_FOUND,
            "not_found",
        );
        // "other" exists, but this client may not use it.
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/elicitations",
                Some(API_KEY),
                Some((json_ct, r#"{"subject":"a","provider":"other"}"#)),
            )
            .await,
            StatusCode::FORBIDDEN,
            "forbidden_provider",
        );
        assert_error(
            raw(
                &app,
                Method::GET,
                "/v1/elicitations/AAAAAAAAAAAAAAAAAAAAAAAA",
                Some(API_KEY),
                None,
            )
            .await,
            StatusCode::NOT_FOUND,
            "not_found",
        );
        assert_error(
            raw(
                &app,
                Method::GET,
                "/v1/elicitations/..%2F..%2Fetc",
                Some(API_KEY),
                None,
            )
            .await,
            StatusCode::NOT_FOUND,
            "not_found",
        );
        assert_error(
            raw(&app, Method::GET, "/v1/nothing-here", Some(API_KEY), None).await,
            StatusCode::NOT_FOUND,
            "not_found",
        );
        let e = app.elicit("alice").await;
        let id = e["id"].as_str().unwrap();
        assert_error(
            raw(
                &app,
                Method::GET,
                &format!("/v1/elicitations/{id}?wait=61"),
                Some(API_KEY),
                None,
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        assert_error(
            raw(
                &app,
                Method::GET,
                &format!("/v1/elicitations/{id}?wait=soon"),
                Some(API_KEY),
                None,
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        // Another client cannot see it.
        assert_error(
            raw(
                &app,
                Method::GET,
                &format!("/v1/elicitations/{id}"),
                Some(OTHER_API_KEY),
                None,
            )
            .await,
            StatusCode::NOT_FOUND,
            "not_found",
        );
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/tokens",
                Some(API_KEY),
                Some((
                    json_ct,
                    r#"{"subject":"alice","provider":"acme","min_ttl_seconds":-5}"#,
                )),
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        assert_error(
            raw(
                &app,
                Method::POST,
                "/v1/tokens",
                Some(API_KEY),
                Some((
                    json_ct,
                    r#"{"subject":"alice","provider":"acme","wait_seconds":5}"#,
                )),
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        assert_error(
            raw(&app, Method::GET, "/v1/connections", Some(API_KEY), None).await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
        assert_error(
            raw(
                &app,
                Method::DELETE,
                "/v1/connections/AAAAAAAAAAAAAAAAAAAAAA",
                Some(API_KEY),
                None,
            )
            .await,
            StatusCode::NOT_FOUND,
            "not_found",
        );
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
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(
        r.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with(&app.peers.identity)
    );

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
