//! RFC 8693 token exchange at `/oauth2/token`, driven by a standard OAuth library (panva's
//! `openid-client`, `tests/peers/exchange.mjs`) that discovers the endpoint from our RFC 8414
//! metadata: the token is the one `/v1/tokens` gives, "not connected" carries the elicitation,
//! and every forged, expired or foreign MCP token, wrong client secret, unknown target, missing
//! scope, other grant type and malformed form is refused in OAuth's words, changing nothing.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::grants::{MCP_RESOURCE, approve, mcp_access_token, rsa_pem};
use crate::harness::*;
use crate::on_both_databases;

const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

fn options(audience: &str) -> Options {
    Options {
        demo_client_extra: format!("subject_token_audience = \"{audience}\""),
        ..Options::default()
    }
}

/// What openid-client made of one exchange as `demo-mcp` with `secret`.
async fn exchange_with(
    app: &TestApp,
    secret: &str,
    grant_type: Option<&str>,
    params: Value,
) -> Value {
    let input = json!({
        "server": app.url,
        "client_id": "demo-mcp",
        "client_secret": secret,
        "grant_type": grant_type,
        "params": params,
    });
    let script = testkit::repo_root().join("tests/peers/exchange.mjs");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .arg(script)
            .arg(input.to_string())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "exchange.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn exchange(app: &TestApp, params: Value) -> Value {
    exchange_with(app, API_KEY, None, params).await
}

fn params(subject_token: &str, extra: Value) -> Value {
    let mut p = json!({
        "subject_token": subject_token,
        "subject_token_type": ACCESS_TOKEN_TYPE,
        "audience": "acme",
    });
    for (k, v) in extra.as_object().unwrap() {
        match v {
            Value::Null => drop(p.as_object_mut().unwrap().remove(k)),
            v => p[k] = v.clone(),
        }
    }
    p
}

/// A refusal as the library reports it: status and `error`, with a description and no token.
fn refused(v: &Value, status: u16, error: &str) {
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(
        (v["status"].as_u64(), v["body"]["error"].as_str()),
        (Some(status.into()), Some(error)),
        "{v}"
    );
    assert!(
        !v["body"]["error_description"].as_str().unwrap().is_empty(),
        "{v}"
    );
    assert!(v["body"].get("access_token").is_none(), "{v}");
}

async fn counts(app: &TestApp) -> Vec<i64> {
    let mut n = Vec::new();
    for table in ["elicitations", "connections", "audit_events"] {
        let (c,): (i64,) = sqlx::query_as(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(&app.db().pool)
            .await
            .unwrap();
        n.push(c);
    }
    n
}

on_both_databases!(
    token_exchange_by_a_standard_client_gives_the_v1_token_or_the_elicitation,
    |kind| async move {
        let app = TestApp::spawn_with(kind, options(MCP_RESOURCE)).await;
        let alice = mcp_access_token(&app.peers.identity, "alice", MCP_RESOURCE).await;

        // Not connected: the refusal carries the elicitation /v1/tokens hands out.
        let v = exchange(&app, params(&alice, json!({}))).await;
        refused(&v, 400, "interaction_required");
        let offered = &v["body"]["elicitation"];
        let (s, t) = app
            .post(
                "/v1/tokens",
                json!({"subject_token": alice, "provider": "acme", "elicit": true}),
            )
            .await;
        assert_eq!(s, StatusCode::CONFLICT, "{t}");
        let e = &t["elicitation"];
        assert_eq!(offered["id"], e["id"], "the same pending elicitation: {v}");
        assert_eq!(offered["url"], e["url"]);
        assert_eq!(offered["mcp"], e["mcp"]);
        assert!(
            offered["mcp"]["2025-11-25"]["error"]["code"] == -32042,
            "{v}"
        );
        assert_eq!(offered["subject"], "alice");

        // The Rust client's helper reads the same refusal.
        let rust = mcp_connect_client::Client::new(&app.url, API_KEY);
        let ask = mcp_connect_client::ExchangeRequest::new(&alice, "acme");
        let e = rust.exchange("demo-mcp", &ask).await.unwrap_err();
        assert_eq!(e.code(), Some("interaction_required"), "{e}");
        assert_eq!(
            e.elicitation().map(|e| &e.id),
            offered["id"].as_str().map(String::from).as_ref()
        );

        approve(&app, offered, "alice").await;
        let v = exchange(&app, params(&alice, json!({}))).await;
        assert_eq!(v["ok"], true, "{v}");
        let secret = v["tokens"]["access_token"].as_str().unwrap().to_owned();
        let t = rust.exchange("demo-mcp", &ask).await.unwrap();
        assert_eq!(
            (t.access_token.as_str(), t.token_type.as_str()),
            (secret.as_str(), "Bearer")
        );
        let e = rust
            .exchange("demo-mcp", &ask.clone().scopes(["nope"]))
            .await
            .unwrap_err();
        assert_eq!(
            (e.code(), e.missing_scopes()),
            (Some("invalid_scope"), &["nope".to_owned()][..])
        );
        let (s, t) = app
            .post(
                "/v1/tokens",
                json!({"subject_token": alice, "provider": "acme"}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        let tokens = &v["tokens"];
        assert_eq!(tokens["access_token"], t["access_token"], "{v}");
        assert_eq!(tokens["issued_token_type"], ACCESS_TOKEN_TYPE);
        // The library lower-cases the type it read (`Bearer`).
        assert_eq!(tokens["token_type"], "bearer");
        assert!(tokens["expires_in"].as_f64().unwrap() > 0.0, "{v}");
        let scopes: Vec<&str> = t["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(tokens["scope"], scopes.join(" "));
        assert_eq!(v["token_endpoint"], format!("{}/oauth2/token", app.url));

        // The provider named by its API base URL (RFC 8707 `resource`), the base or below it.
        let api = format!("{}/api", app.peers.upstream);
        for resource in [api.clone(), format!("{api}/whoami")] {
            let v = exchange(
                &app,
                params(&alice, json!({"audience": null, "resource": resource})),
            )
            .await;
            assert_eq!(v["tokens"]["access_token"], t["access_token"], "{v}");
        }
        let v = exchange(&app, params(&alice, json!({"resource": api}))).await;
        assert_eq!(v["tokens"]["access_token"], t["access_token"], "{v}");

        // With the `jwt` token type, a scope the grant holds, the one token type we issue: the same.
        let v = exchange(
            &app,
            params(&alice, json!({"subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "scope": scopes[0], "requested_token_type": ACCESS_TOKEN_TYPE})),
        )
        .await;
        assert_eq!(v["tokens"]["access_token"], t["access_token"], "{v}");

        // A scope the grant lacks.
        let v = exchange(
            &app,
            params(&alice, json!({"scope": format!("{} nope", scopes[0])})),
        )
        .await;
        refused(&v, 400, "invalid_scope");
        assert_eq!(v["body"]["missing_scopes"], json!(["nope"]));
        let v = exchange(&app, params(&alice, json!({"scope": "a,b"}))).await;
        refused(&v, 400, "invalid_scope");

        // The `account` extension: an account not connected is offered as another one to add.
        let v = exchange(&app, params(&alice, json!({"account": "nobody"}))).await;
        refused(&v, 400, "interaction_required");
        assert!(v["body"]["elicitation"]["url"].is_string(), "{v}");
        let v = exchange(&app, params(&alice, json!({"account": "a\u{1}b"}))).await;
        refused(&v, 400, "invalid_request");

        // Unknown targets, and a provider this client may not use.
        for target in [
            json!({"audience": "nope"}),
            json!({"audience": "other"}),
            json!({"audience": null, "resource": "https://api.example.test/"}),
            json!({"resource": "https://api.example.test/"}),
            json!({"audience": null, "resource": format!("{}/apix", app.peers.upstream)}),
            json!({"audience": null, "resource": format!("{}/api?x=1", app.peers.upstream)}),
        ] {
            let v = exchange(&app, params(&alice, target.clone())).await;
            refused(&v, 400, "invalid_target");
        }

        // The wrong secret: 401 with a Basic challenge.
        for wrong in [OTHER_API_KEY, "not-the-key"] {
            let v = exchange_with(&app, wrong, None, params(&alice, json!({}))).await;
            refused(&v, 401, "invalid_client");
            assert!(
                v["www_authenticate"].as_str().unwrap().starts_with("Basic"),
                "{v}"
            );
        }
        // Another grant type.
        let v = exchange_with(
            &app,
            API_KEY,
            Some("urn:ietf:params:oauth:grant-type:jwt-bearer"),
            params(&alice, json!({})),
        )
        .await;
        refused(&v, 400, "unsupported_grant_type");
        // Token types this endpoint does not take or issue, delegation.
        for extra in [
            json!({"subject_token_type": "urn:ietf:params:oauth:token-type:id_token"}),
            json!({"requested_token_type": "urn:ietf:params:oauth:token-type:refresh_token"}),
            json!({"actor_token": "x", "actor_token_type": ACCESS_TOKEN_TYPE}),
        ] {
            let v = exchange(&app, params(&alice, extra.clone())).await;
            refused(&v, 400, "invalid_request");
        }
        let logs = captured_logs();
        assert!(
            !logs.contains(&secret) && !logs.contains(API_KEY),
            "a secret reached the log"
        );
        app.shutdown().await;
    }
);

/// A token with alice's claims made by someone else: HS256 with a made-up secret, RS256 with
/// another key under the issuer's `kid`, and RS256 from another issuer (its own `iss` and key).
fn forgeries(genuine: &str) -> Vec<String> {
    use base64::Engine;
    use jsonwebtoken::{EncodingKey, Header};
    let header = jsonwebtoken::decode_header(genuine).unwrap();
    let part = genuine.split('.').nth(1).unwrap();
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .unwrap(),
    )
    .unwrap();
    let pem = rsa_pem();
    let rsa = EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap();
    let mut hs = Header::new(jsonwebtoken::Algorithm::HS256);
    hs.kid = header.kid.clone();
    let mut rs = Header::new(jsonwebtoken::Algorithm::RS256);
    rs.kid = header.kid;
    let mut other = claims.clone();
    other["iss"] = json!("https://other-issuer.example.test");
    let mut theirs = Header::new(jsonwebtoken::Algorithm::RS256);
    theirs.kid = Some("other-issuer-key".into());
    vec![
        jsonwebtoken::encode(
            &hs,
            &claims,
            &EncodingKey::from_secret(b"not the issuer's key"),
        )
        .unwrap(),
        jsonwebtoken::encode(&rs, &claims, &rsa).unwrap(),
        jsonwebtoken::encode(&theirs, &other, &rsa).unwrap(),
    ]
}

on_both_databases!(
    token_exchange_refuses_forged_expired_and_foreign_subject_tokens,
    |kind| async move {
        let short = "https://mcp.example.test/short";
        let app = TestApp::spawn_with(kind, options(short)).await;
        let alice = mcp_access_token(&app.peers.identity, "alice", short).await;
        // Valid while fresh: the refusal is about the connection, not the token.
        let v = exchange(&app, params(&alice, json!({}))).await;
        refused(&v, 400, "interaction_required");

        let foreign = mcp_access_token(&app.peers.identity, "alice", MCP_RESOURCE).await;
        let mut bad = forgeries(&alice);
        bad.push(foreign);
        bad.push("not-a-token".into());
        for t in &bad {
            let v = exchange(&app, params(t, json!({}))).await;
            refused(&v, 400, "invalid_grant");
            assert!(
                !v["body"].to_string().contains(t.as_str()),
                "the token is not echoed"
            );
        }
        // Two seconds of life and five of leeway.
        tokio::time::sleep(std::time::Duration::from_secs(8)).await;
        let v = exchange(&app, params(&alice, json!({}))).await;
        refused(&v, 400, "invalid_grant");
        assert!(
            v["body"]["error_description"]
                .as_str()
                .unwrap()
                .contains("expired"),
            "{v}"
        );
        let logs = captured_logs();
        for t in bad.iter().chain([&alice]).filter(|t| t.len() > 20) {
            assert!(
                !logs.contains(t.as_str()),
                "a subject_token reached the log"
            );
        }
        app.shutdown().await;
    }
);

on_both_databases!(
    a_malformed_token_exchange_is_a_400_that_changes_nothing,
    |kind| async move {
        let app = TestApp::spawn_with(kind, options(MCP_RESOURCE)).await;
        let before = counts(&app).await;
        let url = format!("{}/oauth2/token", app.url);
        let form = "application/x-www-form-urlencoded";
        let grant = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange";
        let typ = "subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token";
        for (content_type, body, error) in [
            (form, String::new(), "invalid_request"),
            (
                form,
                "grant_type=%ZZ&&=".to_owned(),
                "unsupported_grant_type",
            ),
            (
                form,
                format!("{grant}&{grant}&subject_token=x&{typ}&audience=acme"),
                "invalid_request",
            ),
            (
                form,
                format!("{grant}&{typ}&audience=acme"),
                "invalid_request",
            ),
            (
                form,
                format!("{grant}&subject_token=x&audience=acme"),
                "invalid_request",
            ),
            (
                form,
                format!("{grant}&subject_token=x&{typ}"),
                "invalid_request",
            ),
            (
                form,
                "grant_type=client_credentials".to_owned(),
                "unsupported_grant_type",
            ),
            (
                "application/json",
                format!("{{\"grant_type\": \"{grant}\"}}"),
                "invalid_request",
            ),
            (
                form,
                format!("{grant}&subject_token={}&{typ}", "x".repeat(20_000)),
                "invalid_request",
            ),
        ] {
            let r = app
                .api
                .post(&url)
                .basic_auth("demo-mcp", Some(API_KEY))
                .header("content-type", content_type)
                .body(body.clone())
                .send()
                .await
                .unwrap();
            let status = r.status();
            let cache = r
                .headers()
                .get("cache-control")
                .map(|v| v.to_str().unwrap().to_owned());
            let v: Value = r.json().await.unwrap();
            assert!(
                status == StatusCode::BAD_REQUEST || status == StatusCode::PAYLOAD_TOO_LARGE,
                "{status} {v} for {body:.80}"
            );
            assert_eq!(v["error"], error, "{v} for {body:.80}");
            assert!(v["error_description"].is_string(), "{v}");
            assert_eq!(cache.as_deref(), Some("no-store"));
        }
        // No credentials, or a bearer key: the client is not authenticated.
        for auth in [None, Some(format!("Bearer {API_KEY}"))] {
            let mut r = app
                .api
                .post(&url)
                .header("content-type", form)
                .body(format!("{grant}&subject_token=x&{typ}&audience=acme"));
            if let Some(a) = auth {
                r = r.header("authorization", a);
            }
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
            assert!(
                r.headers()["www-authenticate"]
                    .to_str()
                    .unwrap()
                    .starts_with("Basic")
            );
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"], "invalid_client");
        }
        assert_eq!(counts(&app).await, before, "nothing was written");

        // The metadata a library discovers the endpoint by.
        let (s, m) = reply(app.api.get(format!(
            "{}/.well-known/oauth-authorization-server",
            app.url
        )))
        .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(m["issuer"], app.url.trim_end_matches('/'));
        assert_eq!(m["token_endpoint"], url);
        assert_eq!(
            m["grant_types_supported"],
            json!(["urn:ietf:params:oauth:grant-type:token-exchange"])
        );
        assert_eq!(
            m["token_endpoint_auth_methods_supported"],
            json!(["client_secret_basic"])
        );
        app.shutdown().await;
    }
);

/// Wrong Basic credentials count as failed authentications of their address, as wrong bearer
/// keys do, and never lock out the valid client behind the same address (SPEC invariant 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_client_secrets_are_limited_and_the_right_one_still_passes() {
    let app = TestApp::spawn_with(
        DbKind::Sqlite,
        Options {
            extra_toml: "[limits]\nfailed_auth_per_minute = 1\nfailed_auth_burst = 3\n".into(),
            ..options(MCP_RESOURCE)
        },
    )
    .await;
    let url = format!("{}/oauth2/token", app.url);
    let send = |secret: &'static str| {
        let r = app
            .api
            .post(&url)
            .basic_auth("demo-mcp", Some(secret))
            .form(&[
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ),
                ("subject_token", "not-a-token"),
                ("subject_token_type", ACCESS_TOKEN_TYPE),
                ("audience", "acme"),
            ]);
        async move {
            let r = r.send().await.unwrap();
            let status = r.status();
            let v: Value = r.json().await.unwrap();
            (status, v)
        }
    };
    for _ in 0..3 {
        let (s, v) = send("wrong-secret").await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("invalid_client"))
        );
    }
    let (s, v) = send("wrong-secret").await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    for _ in 0..5 {
        // Authenticated: the answer is about the (made-up) subject token.
        let (s, v) = send(API_KEY).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_grant")),
            "{v}"
        );
        let (s, _) = send("wrong-secret").await;
        assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    }
    app.shutdown().await;
}
