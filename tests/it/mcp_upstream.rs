//! An upstream MCP server as a provider (`kind = "mcp"`): a stub protected resource and
//! authorization server on loopback implementing RFC 9728 (with the 401 `resource_metadata`
//! hint), RFC 8414 (path-inserted well-known form), Client ID Metadata Documents (it fetches our
//! document and checks the redirect URI against it) or RFC 7591 registration, RFC 8707
//! `resource` and PKCE, driven through the real browser walk.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Form, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::{Value, json};
use sha2::Digest;

use crate::harness::*;
use crate::on_both_databases;

#[derive(Default)]
struct Stub {
    base: String,
    cimd: bool,
    /// Codes issued: code -> (client_id, redirect_uri, challenge, resource).
    codes: Mutex<HashMap<String, (String, String, String, String)>>,
    registrations: Mutex<usize>,
    documents_fetched: Mutex<Vec<Value>>,
    authorize_scopes: Mutex<Vec<String>>,
    token_resources: Mutex<Vec<String>>,
}

type S = State<Arc<Stub>>;

async fn mcp(State(s): S) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            format!(
                "Bearer error=\"invalid_token\", resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
                s.base
            ),
        )],
    )
        .into_response()
}

async fn prm(State(s): S) -> axum::Json<Value> {
    axum::Json(json!({
        "resource": format!("{}/mcp", s.base),
        "authorization_servers": [format!("{}/as", s.base)],
        "scopes_supported": ["mcp:tools"],
    }))
}

async fn as_metadata(State(s): S) -> axum::Json<Value> {
    let b = &s.base;
    let mut m = json!({
        "issuer": format!("{b}/as"),
        "authorization_endpoint": format!("{b}/as/authorize"),
        "token_endpoint": format!("{b}/as/token"),
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": ["mcp:tools", "offline_access"],
    });
    if s.cimd {
        m["client_id_metadata_document_supported"] = json!(true);
    } else {
        m["registration_endpoint"] = json!(format!("{b}/as/register"));
    }
    axum::Json(m)
}

async fn register(State(s): S, axum::Json(body): axum::Json<Value>) -> Response {
    *s.registrations.lock().unwrap() += 1;
    let n = *s.registrations.lock().unwrap();
    (
        StatusCode::CREATED,
        axum::Json(json!({
            "client_id": format!("dcr-client-{n}"),
            "redirect_uris": body["redirect_uris"],
            "token_endpoint_auth_method": "none",
        })),
    )
        .into_response()
}

async fn authorize(State(s): S, Query(q): Query<HashMap<String, String>>) -> Response {
    let client_id = q.get("client_id").cloned().unwrap_or_default();
    let redirect_uri = q.get("redirect_uri").cloned().unwrap_or_default();
    let bad = |m: &str| (StatusCode::BAD_REQUEST, m.to_owned()).into_response();
    if s.cimd {
        // A CIMD client_id is a URL: fetch it, and accept only its redirect URIs.
        let doc: Value = match reqwest::get(&client_id).await {
            Ok(r) if r.status().is_success() => r.json().await.unwrap_or(Value::Null),
            _ => return bad("client metadata document unavailable"),
        };
        let listed = doc["redirect_uris"]
            .as_array()
            .is_some_and(|a| a.iter().any(|u| u == &json!(redirect_uri)));
        if doc["client_id"] != json!(client_id) || !listed {
            return bad("redirect_uri not in the client metadata document");
        }
        s.documents_fetched.lock().unwrap().push(doc);
    } else if !client_id.starts_with("dcr-client-") {
        return bad("unknown client");
    }
    if q.get("resource") != Some(&format!("{}/mcp", s.base)) {
        return bad("resource indicator missing or wrong");
    }
    if q.get("code_challenge_method").map(String::as_str) != Some("S256") {
        return bad("PKCE required");
    }
    s.authorize_scopes
        .lock()
        .unwrap()
        .push(q.get("scope").cloned().unwrap_or_default());
    let code = format!("code-{}", rand_hex());
    s.codes.lock().unwrap().insert(
        code.clone(),
        (
            client_id,
            redirect_uri.clone(),
            q.get("code_challenge").cloned().unwrap_or_default(),
            q.get("resource").cloned().unwrap_or_default(),
        ),
    );
    let state = q.get("state").cloned().unwrap_or_default();
    Redirect::to(&format!("{redirect_uri}?code={code}&state={state}")).into_response()
}

fn rand_hex() -> String {
    mcp_connect::crypto::random_token(12)
}

async fn token(State(s): S, Form(f): Form<HashMap<String, String>>) -> Response {
    let err = |e: &str| (StatusCode::BAD_REQUEST, axum::Json(json!({"error": e}))).into_response();
    let resource = f.get("resource").cloned().unwrap_or_default();
    s.token_resources.lock().unwrap().push(resource.clone());
    if resource != format!("{}/mcp", s.base) {
        return err("invalid_target");
    }
    match f.get("grant_type").map(String::as_str) {
        Some("authorization_code") => {
            let Some((client_id, redirect_uri, challenge, _)) = f
                .get("code")
                .and_then(|c| s.codes.lock().unwrap().remove(c))
            else {
                return err("invalid_grant");
            };
            let verifier = f.get("code_verifier").cloned().unwrap_or_default();
            let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(verifier.as_bytes()));
            if f.get("client_id") != Some(&client_id)
                || f.get("redirect_uri") != Some(&redirect_uri)
                || computed != challenge
            {
                return err("invalid_grant");
            }
        }
        Some("refresh_token") => {
            if !f
                .get("refresh_token")
                .is_some_and(|r| r.starts_with("mcp-rt-"))
            {
                return err("invalid_grant");
            }
        }
        _ => return err("unsupported_grant_type"),
    }
    axum::Json(json!({
        "access_token": format!("mcp-at-{}", rand_hex()),
        "refresh_token": format!("mcp-rt-{}", rand_hex()),
        "token_type": "Bearer",
        "expires_in": 3600,
        "scope": "mcp:tools offline_access",
    }))
    .into_response()
}

async fn start_stub(cimd: bool) -> Arc<Stub> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stub = Arc::new(Stub {
        base: format!("http://{}", l.local_addr().unwrap()),
        cimd,
        ..Stub::default()
    });
    let app = axum::Router::new()
        .route("/mcp", get(mcp).post(mcp))
        .route("/.well-known/oauth-protected-resource/mcp", get(prm))
        .route(
            "/.well-known/oauth-authorization-server/as",
            get(as_metadata),
        )
        .route("/as/authorize", get(authorize))
        .route("/as/token", post(token))
        .route("/as/register", post(register))
        .with_state(stub.clone());
    tokio::spawn(async move { axum::serve(l, app).await });
    stub
}

async fn call(app: &TestApp, path: &str, body: Value) -> (StatusCode, Value) {
    reply(
        app.api
            .post(format!("{}{path}", app.url))
            .bearer_auth(OTHER_API_KEY)
            .json(&body),
    )
    .await
}

async fn walk(kind: DbKind, cimd: bool) {
    let stub = start_stub(cimd).await;
    let app = TestApp::spawn_with(
        kind,
        Options {
            other_provider: format!(
                "kind = \"mcp\"\ndisplay_name = \"Upstream MCP\"\nresource = \"{}/mcp\"",
                stub.base
            ),
            ..Options::default()
        },
    )
    .await;
    let (s, e) = call(
        &app,
        "/v1/elicitations",
        json!({"subject": "alice", "provider": "other"}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{e}");
    let b = app.browser();
    let consent = b
        .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
        .await;
    assert!(consent.has("Upstream MCP"), "{}", consent.body);
    let done = b
        .submit(&consent, "form.actions", &[("action", "continue")])
        .await;
    assert_eq!(done.status, StatusCode::OK, "{} {}", done.url, done.body);
    assert!(done.has("is connected"), "{}", done.body);

    // offline_access was asked for because the server lists it; the PRM's scopes by default.
    let scopes = stub.authorize_scopes.lock().unwrap().clone();
    assert_eq!(scopes.len(), 1);
    assert!(
        scopes[0].split(' ').any(|s| s == "offline_access")
            && scopes[0].split(' ').any(|s| s == "mcp:tools"),
        "{scopes:?}"
    );
    if cimd {
        let docs = stub.documents_fetched.lock().unwrap().clone();
        assert_eq!(
            docs.len(),
            1,
            "our client metadata document was not fetched"
        );
        assert_eq!(
            docs[0]["client_id"],
            json!(format!("{}/.well-known/oauth-client/other", app.url))
        );
        assert_eq!(*stub.registrations.lock().unwrap(), 0);
    } else {
        assert_eq!(*stub.registrations.lock().unwrap(), 1);
        let (client_id,): (String,) =
            sqlx::query_as("SELECT client_id FROM mcp_clients WHERE provider = 'other'")
                .fetch_one(&app.state.db.pool)
                .await
                .unwrap();
        assert_eq!(client_id, "dcr-client-1");
    }

    // The token, then a refresh: both token requests carried the resource indicator.
    let (s, v) = call(
        &app,
        "/v1/tokens",
        json!({"subject": "alice", "provider": "other"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let first = v["access_token"].as_str().unwrap().to_owned();
    assert!(first.starts_with("mcp-at-"), "{v}");
    let (s, v) = call(
        &app,
        "/v1/tokens",
        json!({"subject": "alice", "provider": "other", "force_refresh": true}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_ne!(v["access_token"].as_str().unwrap(), first);
    let resources = stub.token_resources.lock().unwrap().clone();
    assert_eq!(resources.len(), 2, "{resources:?}");
    assert!(
        resources.iter().all(|r| r == &format!("{}/mcp", stub.base)),
        "{resources:?}"
    );
    app.shutdown().await;
}

on_both_databases!(
    an_upstream_mcp_server_by_client_id_metadata_document,
    |kind| async move { walk(kind, true).await }
);

on_both_databases!(
    an_upstream_mcp_server_by_dynamic_registration,
    |kind| async move { walk(kind, false).await }
);

#[tokio::test]
async fn the_client_metadata_document_is_only_for_mcp_providers() {
    let app = TestApp::spawn_with(
        DbKind::Sqlite,
        Options {
            other_provider: "kind = \"mcp\"\nresource = \"http://127.0.0.1:9/mcp\"".into(),
            ..Options::default()
        },
    )
    .await;
    let r = reqwest::get(format!("{}/.well-known/oauth-client/other", app.url))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["redirect_uris"],
        json!([format!("{}/oauth/other/callback", app.url)])
    );
    assert_eq!(v["token_endpoint_auth_method"], "none");
    let r = reqwest::get(format!("{}/.well-known/oauth-client/acme", app.url))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    app.shutdown().await;
}
