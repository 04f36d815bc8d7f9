//! An upstream MCP server as a provider (`kind = "mcp"`): a stub protected resource and
//! authorization server on loopback implementing RFC 9728 (with the 401 `resource_metadata`
//! hint), RFC 8414 (path-inserted well-known form), Client ID Metadata Documents (it fetches our
//! document and checks the redirect URI against it) or RFC 7591 registration, RFC 8707
//! `resource` and PKCE, driven through the real browser walk.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::{Value, json};
use sha2::Digest;

use crate::harness::*;
use crate::on_both_databases;

/// How the stub behaves beyond the defaults (path-inserted metadata, hint on GET and POST).
#[derive(Default, Clone)]
struct Setup {
    cimd: bool,
    /// Like most MCP servers: GET answers 405, only a JSON-RPC `initialize` POST gets the 401,
    /// whose hint names metadata at a path no well-known form finds.
    post_only: bool,
    /// `scope="..."` in the 401 challenge.
    challenge_scope: Option<&'static str>,
    /// No hint and no path-inserted metadata: the root metadata advertises the bare origin.
    origin_resource: bool,
    /// The authorization server's `token_endpoint_auth_methods_supported`.
    auth_methods: Option<Vec<&'static str>>,
    /// The method the registration answer names, whatever was asked for.
    registers_as: Option<&'static str>,
    /// The token endpoint issues no refresh token.
    no_refresh_token: bool,
    /// The token endpoint refuses refreshes with this OAuth error.
    refuses_refresh: Option<&'static str>,
}

/// What the token endpoint was sent to authenticate the client.
#[derive(Debug, Clone)]
struct TokenCall {
    grant_type: String,
    basic: bool,
    client_secret_in_body: bool,
}

#[derive(Default)]
struct Stub {
    base: String,
    setup: Setup,
    /// Codes issued: code -> (client_id, redirect_uri, challenge, resource).
    codes: Mutex<HashMap<String, (String, String, String, String)>>,
    /// Registered clients: client_id -> (token_endpoint_auth_method, secret).
    clients: Mutex<HashMap<String, (String, Option<String>)>>,
    registrations: Mutex<Vec<Value>>,
    documents_fetched: Mutex<Vec<Value>>,
    authorize_scopes: Mutex<Vec<String>>,
    token_resources: Mutex<Vec<String>>,
    token_calls: Mutex<Vec<TokenCall>>,
}

impl Stub {
    /// The resource the metadata advertises, and the only `resource=` the AS accepts.
    fn resource(&self) -> String {
        if self.setup.origin_resource {
            self.base.clone()
        } else {
            format!("{}/mcp", self.base)
        }
    }
}

type S = State<Arc<Stub>>;

fn challenge(s: &Stub) -> Response {
    let mut v = "Bearer error=\"invalid_token\"".to_owned();
    if !s.setup.origin_resource {
        let prm = if s.setup.post_only {
            format!("{}/custom/prm", s.base)
        } else {
            format!("{}/.well-known/oauth-protected-resource/mcp", s.base)
        };
        v.push_str(&format!(", resource_metadata=\"{prm}\""));
    }
    if let Some(scope) = s.setup.challenge_scope {
        v.push_str(&format!(", scope=\"{scope}\""));
    }
    (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, v)]).into_response()
}

async fn mcp_get(State(s): S) -> Response {
    if s.setup.post_only {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    challenge(&s)
}

async fn mcp_post(State(s): S, headers: HeaderMap, body: String) -> Response {
    if s.setup.post_only {
        let h = |n: header::HeaderName| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let accept = h(header::ACCEPT);
        let rpc: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if !h(header::CONTENT_TYPE).starts_with("application/json")
            || !accept.contains("application/json")
            || !accept.contains("text/event-stream")
            || rpc["jsonrpc"] != "2.0"
            || rpc["method"] != "initialize"
        {
            return (StatusCode::BAD_REQUEST, "not a JSON-RPC initialize").into_response();
        }
    }
    challenge(&s)
}

fn prm_document(s: &Stub) -> axum::Json<Value> {
    axum::Json(json!({
        "resource": s.resource(),
        "authorization_servers": [format!("{}/as", s.base)],
        "scopes_supported": ["mcp:tools"],
    }))
}

async fn prm(State(s): S) -> Response {
    if s.setup.post_only || s.setup.origin_resource {
        return StatusCode::NOT_FOUND.into_response();
    }
    prm_document(&s).into_response()
}

async fn prm_root(State(s): S) -> Response {
    if !s.setup.origin_resource {
        return StatusCode::NOT_FOUND.into_response();
    }
    prm_document(&s).into_response()
}

async fn prm_custom(State(s): S) -> Response {
    prm_document(&s).into_response()
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
    if s.setup.cimd {
        m["client_id_metadata_document_supported"] = json!(true);
    } else {
        m["registration_endpoint"] = json!(format!("{b}/as/register"));
    }
    if let Some(methods) = &s.setup.auth_methods {
        m["token_endpoint_auth_methods_supported"] = json!(methods);
    }
    axum::Json(m)
}

async fn register(State(s): S, axum::Json(body): axum::Json<Value>) -> Response {
    let n = {
        let mut r = s.registrations.lock().unwrap();
        r.push(body.clone());
        r.len()
    };
    let client_id = format!("dcr-client-{n}");
    let method = s
        .setup
        .registers_as
        .map(str::to_owned)
        .or_else(|| {
            body["token_endpoint_auth_method"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "client_secret_basic".to_owned());
    let secret = (method != "none").then(|| format!("dcr-secret-{}", rand_hex()));
    s.clients
        .lock()
        .unwrap()
        .insert(client_id.clone(), (method.clone(), secret.clone()));
    let mut answer = json!({
        "client_id": client_id,
        "redirect_uris": body["redirect_uris"],
        "token_endpoint_auth_method": method,
    });
    if let Some(secret) = secret {
        answer["client_secret"] = json!(secret);
    }
    (StatusCode::CREATED, axum::Json(answer)).into_response()
}

async fn authorize(State(s): S, Query(q): Query<HashMap<String, String>>) -> Response {
    let client_id = q.get("client_id").cloned().unwrap_or_default();
    let redirect_uri = q.get("redirect_uri").cloned().unwrap_or_default();
    let bad = |m: &str| (StatusCode::BAD_REQUEST, m.to_owned()).into_response();
    if s.setup.cimd {
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
    } else if !s.clients.lock().unwrap().contains_key(&client_id) {
        return bad("unknown client");
    }
    if q.get("resource") != Some(&s.resource()) {
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

/// The client the token request authenticated as, by the method it registered with: Basic
/// (nothing in the body), the secret in the body, or a public client's bare `client_id`.
fn authenticated_client(
    s: &Stub,
    headers: &HeaderMap,
    f: &HashMap<String, String>,
) -> Option<String> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok());
    if s.setup.cimd {
        return f.get("client_id").cloned().filter(|_| basic.is_none());
    }
    let clients = s.clients.lock().unwrap();
    match basic {
        Some(pair) => {
            let (id, secret) = pair.split_once(':')?;
            let (method, expected) = clients.get(id)?;
            (method == "client_secret_basic"
                && expected.as_deref() == Some(secret)
                && !f.contains_key("client_secret"))
            .then(|| id.to_owned())
        }
        None => {
            let id = f.get("client_id")?;
            let (method, expected) = clients.get(id)?;
            let ok = match method.as_str() {
                "client_secret_post" => f.get("client_secret") == expected.as_ref(),
                "none" => !f.contains_key("client_secret"),
                _ => false,
            };
            ok.then(|| id.clone())
        }
    }
}

async fn token(
    State(s): S,
    headers: HeaderMap,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    let err = |e: &str| (StatusCode::BAD_REQUEST, axum::Json(json!({"error": e}))).into_response();
    let resource = f.get("resource").cloned().unwrap_or_default();
    s.token_resources.lock().unwrap().push(resource.clone());
    s.token_calls.lock().unwrap().push(TokenCall {
        grant_type: f.get("grant_type").cloned().unwrap_or_default(),
        basic: headers.contains_key(header::AUTHORIZATION),
        client_secret_in_body: f.contains_key("client_secret"),
    });
    let Some(authenticated) = authenticated_client(&s, &headers, &f) else {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    };
    if resource != s.resource() {
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
            if authenticated != client_id
                || f.get("redirect_uri") != Some(&redirect_uri)
                || computed != challenge
            {
                return err("invalid_grant");
            }
        }
        Some("refresh_token") => {
            if let Some(e) = s.setup.refuses_refresh {
                return err(e);
            }
            if !f
                .get("refresh_token")
                .is_some_and(|r| r.starts_with("mcp-rt-"))
            {
                return err("invalid_grant");
            }
        }
        _ => return err("unsupported_grant_type"),
    }
    let mut answer = json!({
        "access_token": format!("mcp-at-{}", rand_hex()),
        "token_type": "Bearer",
        "expires_in": 3600,
        "scope": "mcp:tools offline_access",
    });
    if !s.setup.no_refresh_token {
        answer["refresh_token"] = json!(format!("mcp-rt-{}", rand_hex()));
    }
    axum::Json(answer).into_response()
}

async fn start_stub(setup: Setup) -> Arc<Stub> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stub = Arc::new(Stub {
        base: format!("http://{}", l.local_addr().unwrap()),
        setup,
        ..Stub::default()
    });
    let app = axum::Router::new()
        .route("/mcp", get(mcp_get).post(mcp_post))
        .route("/.well-known/oauth-protected-resource/mcp", get(prm))
        .route("/.well-known/oauth-protected-resource", get(prm_root))
        .route("/custom/prm", get(prm_custom))
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

/// Starts the stub and the app (`extra` appended to the provider's configuration) and walks a
/// user's connect flow through to "is connected".
async fn connect(kind: DbKind, setup: Setup, extra: &str) -> (Arc<Stub>, TestApp) {
    let stub = start_stub(setup).await;
    let app = TestApp::spawn_with(
        kind,
        Options {
            other_provider: format!(
                "kind = \"mcp\"\ndisplay_name = \"Upstream MCP\"\nresource = \"{}/mcp\"\n{extra}",
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
    (stub, app)
}

/// The token, then a forced refresh, which must bring a new one.
async fn token_then_refresh(app: &TestApp) {
    let (s, v) = call(
        app,
        "/v1/tokens",
        json!({"subject": "alice", "provider": "other"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let first = v["access_token"].as_str().unwrap().to_owned();
    assert!(first.starts_with("mcp-at-"), "{v}");
    let (s, v) = call(
        app,
        "/v1/tokens",
        json!({"subject": "alice", "provider": "other", "force_refresh": true}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_ne!(v["access_token"].as_str().unwrap(), first);
}

/// The scopes of the one authorization request, as a sorted list.
fn asked_scopes(stub: &Stub) -> Vec<String> {
    let scopes = stub.authorize_scopes.lock().unwrap().clone();
    assert_eq!(scopes.len(), 1, "{scopes:?}");
    let mut v: Vec<String> = scopes[0].split(' ').map(str::to_owned).collect();
    v.sort();
    v
}

async fn walk(kind: DbKind, cimd: bool) {
    let (stub, app) = connect(
        kind,
        Setup {
            cimd,
            ..Setup::default()
        },
        "",
    )
    .await;

    // offline_access was asked for because the server lists it; the PRM's scopes by default.
    assert_eq!(asked_scopes(&stub), ["mcp:tools", "offline_access"]);
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
        assert!(stub.registrations.lock().unwrap().is_empty());
    } else {
        assert_eq!(stub.registrations.lock().unwrap().len(), 1);
        let (client_id,): (String,) =
            sqlx::query_as("SELECT client_id FROM mcp_clients WHERE provider = 'other'")
                .fetch_one(&app.state.db.pool)
                .await
                .unwrap();
        assert_eq!(client_id, "dcr-client-1");
    }

    // The token, then a refresh: both token requests carried the resource indicator.
    token_then_refresh(&app).await;
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
    assert_eq!(v["application_type"], "web");
    let r = reqwest::get(format!("{}/.well-known/oauth-client/acme", app.url))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    app.shutdown().await;
}

on_both_databases!(
    dynamic_registration_declares_a_web_application,
    |kind| async move {
        let (stub, app) = connect(kind, Setup::default(), "").await;
        let registrations = stub.registrations.lock().unwrap().clone();
        assert_eq!(registrations.len(), 1);
        // SEP-837: a server-side client with its own redirect URI, even on loopback.
        assert_eq!(
            registrations[0]["application_type"], "web",
            "{registrations:?}"
        );
        app.shutdown().await;
    }
);

on_both_databases!(
    the_first_challenge_answers_a_json_rpc_post_and_its_scope_is_asked_for,
    |kind| async move {
        let setup = Setup {
            post_only: true,
            challenge_scope: Some("mcp:read mcp:write"),
            ..Setup::default()
        };
        let (stub, app) = connect(kind, setup, "").await;
        // The challenge's scope, not the metadata's scopes_supported (mcp:tools).
        assert_eq!(
            asked_scopes(&stub),
            ["mcp:read", "mcp:write", "offline_access"]
        );
        token_then_refresh(&app).await;
        app.shutdown().await;
    }
);

on_both_databases!(
    configured_scopes_win_over_the_challenge_scope,
    |kind| async move {
        let setup = Setup {
            post_only: true,
            challenge_scope: Some("mcp:read mcp:write"),
            ..Setup::default()
        };
        let (stub, app) = connect(kind, setup, "scopes = [\"mcp:admin\"]").await;
        assert_eq!(asked_scopes(&stub), ["mcp:admin", "offline_access"]);
        app.shutdown().await;
    }
);

on_both_databases!(
    root_metadata_for_the_origin_is_accepted_and_its_resource_sent_as_advertised,
    |kind| async move {
        let setup = Setup {
            origin_resource: true,
            ..Setup::default()
        };
        // The stub accepts `resource=` only exactly as advertised: the origin, no slash.
        let (stub, app) = connect(kind, setup, "").await;
        token_then_refresh(&app).await;
        let resources = stub.token_resources.lock().unwrap().clone();
        assert_eq!(resources, [stub.base.clone(), stub.base.clone()]);
        app.shutdown().await;
    }
);

/// The methods of the registration and of every token request.
fn token_auth_seen(stub: &Stub) -> (String, Vec<TokenCall>) {
    let registrations = stub.registrations.lock().unwrap().clone();
    assert_eq!(registrations.len(), 1, "{registrations:?}");
    let asked = registrations[0]["token_endpoint_auth_method"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (asked, stub.token_calls.lock().unwrap().clone())
}

on_both_databases!(
    registration_asks_for_the_best_token_auth_the_server_supports,
    |kind| async move {
        let setup = Setup {
            auth_methods: Some(vec!["none", "client_secret_post"]),
            ..Setup::default()
        };
        let (stub, app) = connect(kind, setup, "").await;
        token_then_refresh(&app).await;
        let (asked, calls) = token_auth_seen(&stub);
        assert_eq!(asked, "client_secret_post");
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert!(
            calls.iter().all(|c| !c.basic && c.client_secret_in_body),
            "{calls:?}"
        );
        app.shutdown().await;
    }
);

on_both_databases!(
    the_token_auth_the_registration_names_is_used,
    |kind| async move {
        // No list means client_secret_basic (RFC 8414); the server registers post anyway.
        let setup = Setup {
            registers_as: Some("client_secret_post"),
            ..Setup::default()
        };
        let (stub, app) = connect(kind, setup, "").await;
        token_then_refresh(&app).await;
        let (asked, calls) = token_auth_seen(&stub);
        assert_eq!(asked, "client_secret_basic");
        assert_eq!(
            calls
                .iter()
                .map(|c| c.grant_type.as_str())
                .collect::<Vec<_>>(),
            ["authorization_code", "refresh_token"]
        );
        assert!(
            calls.iter().all(|c| !c.basic && c.client_secret_in_body),
            "never Basic when the registration said client_secret_post: {calls:?}"
        );
        let (method,): (Option<String>,) = sqlx::query_as(
            "SELECT token_endpoint_auth_method FROM mcp_clients WHERE provider = 'other'",
        )
        .fetch_one(&app.state.db.pool)
        .await
        .unwrap();
        assert_eq!(method.as_deref(), Some("client_secret_post"));
        // The issued secret is stored sealed and never logged.
        let secret = stub
            .clients
            .lock()
            .unwrap()
            .values()
            .find_map(|(_, s)| s.clone())
            .unwrap();
        let (stored,): (Option<String>,) =
            sqlx::query_as("SELECT client_secret FROM mcp_clients WHERE provider = 'other'")
                .fetch_one(&app.state.db.pool)
                .await
                .unwrap();
        assert!(!stored.unwrap().contains(&secret), "stored in clear");
        let logs = captured_logs();
        assert!(
            logs.contains("registered at the upstream MCP"),
            "logs were captured"
        );
        assert!(
            !logs.contains(&secret),
            "the client secret appears in the logs"
        );
        app.shutdown().await;
    }
);

/// After a connect whose token the caller says was refused: `force_refresh` answers 409
/// `reauthorization_required` (with the elicitation when asked), never the same token, and the
/// grant itself is left as it was.
async fn forced_refresh_needs_the_user(kind: DbKind, setup: Setup) {
    let (_stub, app) = connect(kind, setup, "").await;
    let fetch = |extra: Value| {
        let mut body = json!({"subject": "alice", "provider": "other"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let app = &app;
        async move { call(app, "/v1/tokens", body).await }
    };
    let (s, v) = fetch(json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let first = v["access_token"].as_str().unwrap().to_owned();
    let (s, v) = fetch(json!({"force_refresh": true})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["error"], "reauthorization_required", "{v}");
    assert!(!v.to_string().contains(&first), "{v}");
    let (s, v) = fetch(json!({"force_refresh": true, "elicit": true})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["error"], "reauthorization_required", "{v}");
    assert!(v["elicitation"]["url"].is_string(), "{v}");
    assert!(!v.to_string().contains(&first), "{v}");
    let (s, v) = fetch(json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["access_token"], first.as_str());
    app.shutdown().await;
}

on_both_databases!(
    force_refresh_without_a_refresh_token_asks_for_reauthorization,
    |kind| async move {
        let setup = Setup {
            no_refresh_token: true,
            ..Setup::default()
        };
        forced_refresh_needs_the_user(kind, setup).await;
    }
);

on_both_databases!(
    force_refresh_refused_by_the_provider_asks_for_reauthorization,
    |kind| async move {
        let setup = Setup {
            refuses_refresh: Some("unauthorized_client"),
            ..Setup::default()
        };
        forced_refresh_needs_the_user(kind, setup).await;
    }
);
