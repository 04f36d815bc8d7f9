//! An upstream MCP server as a provider (`kind = "mcp"`): a stub protected resource and
//! authorization server on loopback implementing RFC 9728 (with the 401 `resource_metadata`
//! hint), RFC 8414 (path-inserted well-known form), Client ID Metadata Documents (it fetches our
//! document and checks the redirect URI against it) or RFC 7591 registration, RFC 8707
//! `resource` and PKCE, driven through the real browser walk.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Form, Path, Query, State};
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
    /// A 2026-07-28 (stateless) server: GET answers 405, a request without
    /// `MCP-Protocol-Version` 400, and only `tools/list` with it gets the 401 (an unauthenticated
    /// `initialize` proves nothing here).
    stateless: bool,
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
    /// `Cache-Control` of every metadata document.
    cache_control: Option<&'static str>,
    /// After `migrate()`, the challenge still names the same metadata URL (only the document
    /// changes); otherwise it names a new one.
    migration_keeps_hint: bool,
    /// A server from before RFC 9728 (2025-03-26): no protected-resource metadata and no hint.
    legacy: Option<Legacy>,
    /// The protected-resource metadata is for another server.
    foreign_resource: bool,
    /// The authorization server metadata names another issuer.
    foreign_issuer: bool,
    /// The authorization server metadata answers 503.
    metadata_down: bool,
    /// The authorization server takes DPoP (ES256): token requests must carry a valid proof,
    /// and the tokens it issues are DPoP-bound.
    dpop: bool,
    /// ... and it wants its nonce in every proof (RFC 9449 §8).
    dpop_nonce: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Legacy {
    /// RFC 8414 metadata at the server's origin.
    Metadata,
    /// Nothing: the default endpoints `/authorize`, `/token`, `/register` at the origin.
    Defaults,
}

/// What the token endpoint was sent to authenticate the client.
#[derive(Debug, Clone)]
struct TokenCall {
    grant_type: String,
    basic: bool,
    client_secret_in_body: bool,
    /// The authorization server called (`as`, `as2`, `` for the origin).
    server: String,
    resource: Option<String>,
}

/// A registered client: where, how it authenticates, its secret.
struct Client {
    server: String,
    method: String,
    secret: Option<String>,
}

/// An issued code: the server, client, redirect URI and PKCE challenge.
type Code = (String, String, String, String);

#[derive(Default)]
struct Stub {
    base: String,
    setup: Setup,
    /// After `migrate()`: the server's metadata names `as2` instead of `as`.
    migrated: AtomicBool,
    codes: Mutex<HashMap<String, Code>>,
    clients: Mutex<HashMap<String, Client>>,
    /// Registration requests with the server they went to.
    registrations: Mutex<Vec<(String, Value)>>,
    documents_fetched: Mutex<Vec<Value>>,
    authorize_scopes: Mutex<Vec<String>>,
    /// The server and `resource` of every authorization request that was accepted.
    authorizations: Mutex<Vec<(String, Option<String>)>>,
    token_resources: Mutex<Vec<String>>,
    token_calls: Mutex<Vec<TokenCall>>,
    /// Fetches of protected-resource metadata.
    prm_fetches: AtomicUsize,
    /// DPoP: every proof's `jti` seen at a token endpoint, the `use_dpop_nonce` answers given,
    /// and the key thumbprint each issued token is bound to (with the grant type).
    dpop_jtis: Mutex<Vec<String>>,
    dpop_nonce_challenges: AtomicUsize,
    /// The resource's (`/api/whoami`) `use_dpop_nonce` answers, and the calls it accepted.
    api_nonce_challenges: AtomicUsize,
    api_calls: AtomicUsize,
    dpop_bound: Mutex<HashMap<String, (String, String)>>,
}

impl Stub {
    /// The resource the metadata advertises, and the only `resource=` the AS accepts (none
    /// for a legacy server, which has no metadata to advertise one).
    fn resource(&self) -> Option<String> {
        if self.setup.legacy.is_some() {
            None
        } else if self.setup.origin_resource {
            Some(self.base.clone())
        } else {
            Some(format!("{}/mcp", self.base))
        }
    }

    /// The authorization server the resource uses now.
    fn current(&self) -> &'static str {
        match (self.setup.legacy, self.migrated.load(Ordering::SeqCst)) {
            (Some(_), _) => "",
            (None, false) => "as",
            (None, true) => "as2",
        }
    }

    fn issuer(&self, server: &str) -> String {
        if server.is_empty() {
            self.base.clone()
        } else {
            format!("{}/{server}", self.base)
        }
    }

    /// The resource moves to another authorization server (`as2`).
    fn migrate(&self) {
        self.migrated.store(true, Ordering::SeqCst);
    }

    fn registrations_at(&self, server: &str) -> Vec<Value> {
        self.registrations
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, _)| s == server)
            .map(|(_, b)| b.clone())
            .collect()
    }

    fn documents(&self, doc: Value) -> Response {
        let mut r = axum::Json(doc).into_response();
        if let Some(cc) = self.setup.cache_control {
            r.headers_mut()
                .insert(header::CACHE_CONTROL, cc.parse().unwrap());
        }
        r
    }
}

type S = State<Arc<Stub>>;

fn challenge(s: &Stub) -> Response {
    let mut v = "Bearer error=\"invalid_token\"".to_owned();
    if !s.setup.origin_resource && s.setup.legacy.is_none() {
        let prm = if s.migrated.load(Ordering::SeqCst) && !s.setup.migration_keeps_hint {
            format!("{}/custom/prm-moved", s.base)
        } else if s.setup.post_only {
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
    if s.setup.post_only || s.setup.stateless {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    challenge(&s)
}

async fn mcp_post(State(s): S, headers: HeaderMap, body: String) -> Response {
    if s.setup.stateless {
        let rpc: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let version = headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok());
        if version != Some("2026-07-28") {
            return (
                StatusCode::BAD_REQUEST,
                "Missing MCP-Protocol-Version header",
            )
                .into_response();
        }
        if rpc["method"] != "tools/list" {
            return (StatusCode::BAD_REQUEST, "stateless: no initialize").into_response();
        }
        return challenge(&s);
    }
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

fn prm_document(s: &Stub) -> Response {
    s.prm_fetches.fetch_add(1, Ordering::SeqCst);
    let resource = if s.setup.foreign_resource {
        "https://elsewhere.example/mcp".to_owned()
    } else {
        s.resource().unwrap_or_default()
    };
    s.documents(json!({
        "resource": resource,
        "authorization_servers": [s.issuer(s.current())],
        "scopes_supported": ["mcp:tools"],
    }))
}

async fn prm(State(s): S) -> Response {
    if s.setup.post_only || s.setup.origin_resource || s.setup.legacy.is_some() {
        return StatusCode::NOT_FOUND.into_response();
    }
    prm_document(&s)
}

async fn prm_root(State(s): S) -> Response {
    if !s.setup.origin_resource {
        return StatusCode::NOT_FOUND.into_response();
    }
    prm_document(&s)
}

async fn prm_custom(State(s): S) -> Response {
    if s.setup.legacy.is_some() {
        return StatusCode::NOT_FOUND.into_response();
    }
    prm_document(&s)
}

/// RFC 8414 metadata of authorization server `server` (`` is the origin: legacy servers only).
fn as_metadata(s: &Stub, server: &str) -> Response {
    if s.setup.metadata_down {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    if server.is_empty() && s.setup.legacy != Some(Legacy::Metadata) {
        return StatusCode::NOT_FOUND.into_response();
    }
    let issuer = s.issuer(server);
    let mut m = json!({
        "issuer": if s.setup.foreign_issuer { format!("{issuer}/other") } else { issuer.clone() },
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": ["mcp:tools", "offline_access"],
    });
    if s.setup.cimd {
        m["client_id_metadata_document_supported"] = json!(true);
    } else {
        m["registration_endpoint"] = json!(format!("{issuer}/register"));
    }
    if let Some(methods) = &s.setup.auth_methods {
        m["token_endpoint_auth_methods_supported"] = json!(methods);
    }
    if s.setup.dpop {
        m["dpop_signing_alg_values_supported"] = json!(["ES256"]);
    }
    s.documents(m)
}

async fn register(s: Arc<Stub>, server: String, body: Value) -> Response {
    let n = {
        let mut r = s.registrations.lock().unwrap();
        r.push((server.clone(), body.clone()));
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
    s.clients.lock().unwrap().insert(
        client_id.clone(),
        Client {
            server,
            method: method.clone(),
            secret: secret.clone(),
        },
    );
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

async fn authorize(s: Arc<Stub>, server: String, q: HashMap<String, String>) -> Response {
    let client_id = q.get("client_id").cloned().unwrap_or_default();
    let redirect_uri = q.get("redirect_uri").cloned().unwrap_or_default();
    let bad = |m: &str| (StatusCode::BAD_REQUEST, m.to_owned()).into_response();
    if server != s.current() {
        return bad("this authorization server no longer serves the resource");
    }
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
    } else if s
        .clients
        .lock()
        .unwrap()
        .get(&client_id)
        .is_none_or(|c| c.server != server)
    {
        return bad("unknown client");
    }
    if q.get("resource") != s.resource().as_ref() {
        return bad("resource indicator missing or wrong");
    }
    if q.get("code_challenge_method").map(String::as_str) != Some("S256") {
        return bad("PKCE required");
    }
    s.authorize_scopes
        .lock()
        .unwrap()
        .push(q.get("scope").cloned().unwrap_or_default());
    s.authorizations
        .lock()
        .unwrap()
        .push((server.clone(), q.get("resource").cloned()));
    let code = format!("code-{}", rand_hex());
    s.codes.lock().unwrap().insert(
        code.clone(),
        (
            server,
            client_id,
            redirect_uri.clone(),
            q.get("code_challenge").cloned().unwrap_or_default(),
        ),
    );
    let state = q.get("state").cloned().unwrap_or_default();
    Redirect::to(&format!("{redirect_uri}?code={code}&state={state}")).into_response()
}

fn rand_hex() -> String {
    mcp_connect::crypto::random_token(12)
}

/// The client the token request authenticated as at `server`, by the method it registered
/// with: Basic (nothing in the body), the secret in the body, or a public client's bare
/// `client_id`.
fn authenticated_client(
    s: &Stub,
    server: &str,
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
    let registered = |id: &str| clients.get(id).filter(|c| c.server == server);
    match basic {
        Some(pair) => {
            let (id, secret) = pair.split_once(':')?;
            let c = registered(id)?;
            (c.method == "client_secret_basic"
                && c.secret.as_deref() == Some(secret)
                && !f.contains_key("client_secret"))
            .then(|| id.to_owned())
        }
        None => {
            let id = f.get("client_id")?;
            let c = registered(id)?;
            let ok = match c.method.as_str() {
                "client_secret_post" => f.get("client_secret") == c.secret.as_ref(),
                "none" => !f.contains_key("client_secret"),
                _ => false,
            };
            ok.then(|| id.clone())
        }
    }
}

async fn token(
    s: Arc<Stub>,
    server: String,
    headers: HeaderMap,
    f: HashMap<String, String>,
) -> Response {
    let err = |e: &str| (StatusCode::BAD_REQUEST, axum::Json(json!({"error": e}))).into_response();
    let resource = f.get("resource").cloned();
    s.token_resources
        .lock()
        .unwrap()
        .push(resource.clone().unwrap_or_default());
    s.token_calls.lock().unwrap().push(TokenCall {
        grant_type: f.get("grant_type").cloned().unwrap_or_default(),
        basic: headers.contains_key(header::AUTHORIZATION),
        client_secret_in_body: f.contains_key("client_secret"),
        server: server.clone(),
        resource: resource.clone(),
    });
    let mut bound_to = None;
    if s.setup.dpop {
        let proof = headers.get("dpop").and_then(|v| v.to_str().ok());
        let url = format!("{}/token", s.issuer(&server));
        let (claims, jkt) = match proof
            .ok_or("no DPoP proof".to_owned())
            .and_then(|p| verify_dpop_proof(p, "POST", &url))
        {
            Ok(ok) => ok,
            Err(e) => return err(&format!("invalid_dpop_proof: {e}")),
        };
        let jti = claims["jti"].as_str().unwrap_or_default().to_owned();
        if s.dpop_jtis.lock().unwrap().contains(&jti) {
            return err("invalid_dpop_proof: jti replayed");
        }
        s.dpop_jtis.lock().unwrap().push(jti);
        if s.setup.dpop_nonce && claims["nonce"] != STUB_DPOP_NONCE {
            s.dpop_nonce_challenges.fetch_add(1, Ordering::SeqCst);
            return (
                StatusCode::BAD_REQUEST,
                [("dpop-nonce", STUB_DPOP_NONCE)],
                axum::Json(json!({"error": "use_dpop_nonce"})),
            )
                .into_response();
        }
        bound_to = Some(jkt);
    }
    let Some(authenticated) = authenticated_client(&s, &server, &headers, &f) else {
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
            let Some((issued_by, client_id, redirect_uri, challenge)) = f
                .get("code")
                .and_then(|c| s.codes.lock().unwrap().remove(c))
            else {
                return err("invalid_grant");
            };
            let verifier = f.get("code_verifier").cloned().unwrap_or_default();
            let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(verifier.as_bytes()));
            if issued_by != server
                || authenticated != client_id
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
    let access_token = format!("mcp-at-{}", rand_hex());
    let mut answer = json!({
        "access_token": access_token,
        "token_type": if bound_to.is_some() { "DPoP" } else { "Bearer" },
        "expires_in": 3600,
        "scope": "mcp:tools offline_access",
    });
    if let Some(jkt) = bound_to {
        let grant = f.get("grant_type").cloned().unwrap_or_default();
        s.dpop_bound
            .lock()
            .unwrap()
            .insert(access_token, (jkt, grant));
    }
    if !s.setup.no_refresh_token {
        answer["refresh_token"] = json!(format!("mcp-rt-{}", rand_hex()));
    }
    axum::Json(answer).into_response()
}

/// The nonce the stub's token endpoint asks for with `dpop_nonce`.
const STUB_DPOP_NONCE: &str = "stub-as-nonce-1";

/// Checks a DPoP proof (RFC 9449 §4.3) the way a server does, with nothing of mcp-connect's
/// code: `typ`, `alg` ES256, a public `jwk` and the signature made with it, `htm`, `htu`, a
/// recent `iat` and a `jti`. Answers the claims and the key's RFC 7638 thumbprint.
fn verify_dpop_proof(proof: &str, htm: &str, htu: &str) -> Result<(Value, String), String> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let part = |i: usize| -> Result<Value, String> {
        let p = proof.split('.').nth(i).ok_or("not a JWS")?;
        serde_json::from_slice(&b64.decode(p).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())
    };
    let (h, claims) = (part(0)?, part(1)?);
    if h["typ"] != "dpop+jwt" || h["alg"] != "ES256" {
        return Err(format!("header {h}"));
    }
    let jwk = &h["jwk"];
    if jwk.get("d").is_some() || jwk["kty"] != "EC" || jwk["crv"] != "P-256" {
        return Err(format!("jwk {jwk}"));
    }
    let coord = |n: &str| {
        jwk[n]
            .as_str()
            .and_then(|c| b64.decode(c).ok())
            .ok_or(format!("jwk.{n}"))
    };
    let mut point = vec![4u8];
    point.extend(coord("x")?);
    point.extend(coord("y")?);
    let (input, sig) = proof.rsplit_once('.').ok_or("not a JWS")?;
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
        .verify(
            input.as_bytes(),
            &b64.decode(sig).map_err(|e| e.to_string())?,
        )
        .map_err(|_| "the signature does not verify".to_owned())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    if claims["htm"] != htm
        || claims["htu"] != htu
        || claims["jti"].as_str().is_none_or(|j| j.len() < 16)
        || claims["iat"].as_i64().is_none_or(|t| (t - now).abs() >= 60)
    {
        return Err(format!("claims {claims} for {htm} {htu}"));
    }
    let canonical = format!(
        r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
        jwk["x"].as_str().unwrap_or_default(),
        jwk["y"].as_str().unwrap_or_default()
    );
    Ok((
        claims,
        b64.encode(sha2::Sha256::digest(canonical.as_bytes())),
    ))
}

/// The nonce the stub's resource asks for with `dpop_nonce`.
const STUB_API_NONCE: &str = "stub-rs-nonce-1";

/// A resource of the MCP server's origin that takes only DPoP-bound tokens it issued, each
/// with a proof for this very request, made with the key the token is bound to (and, with
/// `dpop_nonce`, its nonce): answers the token's key thumbprint.
async fn api_whoami(State(s): S, headers: HeaderMap) -> Response {
    let refuse = |why: String| (StatusCode::UNAUTHORIZED, why).into_response();
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    let Some(token) = h("authorization").strip_prefix("DPoP ") else {
        return refuse(format!("not a DPoP token: {:?}", h("authorization")));
    };
    let Some((jkt, _)) = s.dpop_bound.lock().unwrap().get(token).cloned() else {
        return refuse("a token this server did not issue".into());
    };
    let url = format!("{}/api/whoami", s.base);
    let (claims, proof_jkt) = match verify_dpop_proof(h("dpop"), "GET", &url) {
        Ok(v) => v,
        Err(e) => return refuse(format!("bad proof: {e}")),
    };
    let ath = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(token.as_bytes()));
    if proof_jkt != jkt || claims["ath"] != ath.as_str() {
        return refuse("the proof is not for this token".into());
    }
    if s.setup.dpop_nonce && claims["nonce"] != STUB_API_NONCE {
        s.api_nonce_challenges.fetch_add(1, Ordering::SeqCst);
        return (
            StatusCode::UNAUTHORIZED,
            [
                ("www-authenticate", "DPoP error=\"use_dpop_nonce\""),
                ("dpop-nonce", STUB_API_NONCE),
            ],
        )
            .into_response();
    }
    s.api_calls.fetch_add(1, Ordering::SeqCst);
    axum::Json(json!({"jkt": jkt})).into_response()
}

async fn start_stub(setup: Setup) -> Arc<Stub> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stub = Arc::new(Stub {
        base: format!("http://{}", l.local_addr().unwrap()),
        setup,
        ..Stub::default()
    });
    // The authorization servers: `/as`, `/as2` (after a migration) and, for legacy servers,
    // the origin itself.
    let app = axum::Router::new()
        .route("/mcp", get(mcp_get).post(mcp_post))
        .route("/api/whoami", get(api_whoami))
        .route("/.well-known/oauth-protected-resource/mcp", get(prm))
        .route("/.well-known/oauth-protected-resource", get(prm_root))
        .route("/custom/prm", get(prm_custom))
        .route("/custom/prm-moved", get(prm_custom))
        .route(
            "/.well-known/oauth-authorization-server/{server}",
            get(|State(s): S, Path(server): Path<String>| async move { as_metadata(&s, &server) }),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(|State(s): S| async move { as_metadata(&s, "") }),
        )
        .route(
            "/{server}/authorize",
            get(
                |State(s): S,
                 Path(server): Path<String>,
                 Query(q): Query<HashMap<String, String>>| {
                    authorize(s, server, q)
                },
            ),
        )
        .route(
            "/authorize",
            get(|State(s): S, Query(q): Query<HashMap<String, String>>| {
                authorize(s, String::new(), q)
            }),
        )
        .route(
            "/{server}/token",
            post(
                |State(s): S,
                 Path(server): Path<String>,
                 headers: HeaderMap,
                 Form(f): Form<HashMap<String, String>>| {
                    token(s, server, headers, f)
                },
            ),
        )
        .route(
            "/token",
            post(
                |State(s): S, headers: HeaderMap, Form(f): Form<HashMap<String, String>>| {
                    token(s, String::new(), headers, f)
                },
            ),
        )
        .route(
            "/{server}/register",
            post(
                |State(s): S, Path(server): Path<String>, axum::Json(b): axum::Json<Value>| {
                    register(s, server, b)
                },
            ),
        )
        .route(
            "/register",
            post(|State(s): S, axum::Json(b): axum::Json<Value>| register(s, String::new(), b)),
        )
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

/// The app's options with `other` as the stub's MCP server (`extra` appended to its
/// configuration).
fn options(stub: &Stub, extra: &str) -> Options {
    Options {
        other_provider: format!(
            "kind = \"mcp\"\ndisplay_name = \"Upstream MCP\"\nresource = \"{}/mcp\"\n{extra}",
            stub.base
        ),
        ..Options::default()
    }
}

/// Starts the stub and the app (`extra` appended to the provider's configuration).
async fn spawn(kind: DbKind, setup: Setup, extra: &str) -> (Arc<Stub>, TestApp) {
    let stub = start_stub(setup).await;
    let app = TestApp::spawn_with(kind, options(&stub, extra)).await;
    (stub, app)
}

/// A new elicitation for alice, walked in a browser up to Continue: the elicitation and the
/// page that Continue led to.
async fn continue_connect(app: &TestApp) -> (Value, Page) {
    continue_connect_as(app, &app.browser(), "alice").await
}

async fn continue_connect_as(app: &TestApp, b: &Browser, subject: &str) -> (Value, Page) {
    let (s, e) = call(
        app,
        "/v1/elicitations",
        json!({"subject": subject, "provider": "other"}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{e}");
    let consent = b
        .sign_in_to_consent(e["url"].as_str().unwrap(), subject)
        .await;
    assert!(consent.has("Upstream MCP"), "{}", consent.body);
    let done = b
        .submit(&consent, "form.actions", &[("action", "continue")])
        .await;
    (e, done)
}

/// Walks alice's connect flow through to "is connected".
async fn walk_connect(app: &TestApp) {
    let (_, done) = continue_connect(app).await;
    assert_eq!(done.status, StatusCode::OK, "{} {}", done.url, done.body);
    assert!(done.has("is connected"), "{}", done.body);
}

/// Starts the stub and the app and walks a user's connect flow through to "is connected".
async fn connect(kind: DbKind, setup: Setup, extra: &str) -> (Arc<Stub>, TestApp) {
    let (stub, app) = spawn(kind, setup, extra).await;
    walk_connect(&app).await;
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
        let registrations = stub.registrations_at("as");
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
    a_stateless_server_is_asked_for_its_tools_and_its_challenge_scope_is_used,
    |kind| async move {
        let setup = Setup {
            stateless: true,
            challenge_scope: Some("mcp:basic"),
            ..Setup::default()
        };
        let (stub, app) = connect(kind, setup, "").await;
        // The challenge of the second probe (tools/list with MCP-Protocol-Version), not the
        // metadata's scopes_supported (mcp:tools).
        assert_eq!(asked_scopes(&stub), ["mcp:basic", "offline_access"]);
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
    let registrations = stub.registrations_at("as");
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
            .find_map(|c| c.secret.clone())
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

/// The registered clients stored for the provider, by issuer.
async fn stored_issuers(app: &TestApp) -> Vec<String> {
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT issuer FROM mcp_clients WHERE provider = 'other' ORDER BY issuer")
            .fetch_all(&app.state.db.pool)
            .await
            .unwrap();
    rows.into_iter().map(|(i,)| i).collect()
}

/// After a connect at `as`, the server moves to `as2`; the next flow must go there, register
/// there (client credentials are per issuer, SEP-2352) and connect.
async fn new_flows_follow_the_migration(stub: &Stub, app: &TestApp) {
    assert_eq!(stub.registrations_at("as").len(), 1);
    stub.migrate();
    walk_connect(app).await;
    let (s, v) = call(
        app,
        "/v1/tokens",
        json!({"subject": "alice", "provider": "other"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["metadata"]["authorization_server"], stub.issuer("as2"));
    assert_eq!(
        stub.registrations_at("as2").len(),
        1,
        "no registration at the new authorization server"
    );
    assert_eq!(stub.registrations_at("as").len(), 1);
    let servers: Vec<String> = stub
        .authorizations
        .lock()
        .unwrap()
        .iter()
        .map(|(s, _)| s.clone())
        .collect();
    assert_eq!(servers, ["as", "as2"]);
    let exchanged_at = stub
        .token_calls
        .lock()
        .unwrap()
        .last()
        .unwrap()
        .server
        .clone();
    assert_eq!(exchanged_at, "as2");
    assert_eq!(
        stored_issuers(app).await,
        [stub.issuer("as"), stub.issuer("as2")]
    );
    let (s, v) = call(
        app,
        "/v1/tokens",
        json!({"subject": "alice", "provider": "other"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

on_both_databases!(
    a_challenge_naming_other_metadata_moves_new_flows_to_the_new_authorization_server,
    |kind| async move {
        // The discovery result is fresh (default lifetime): only the challenge says it moved.
        let (stub, app) = connect(kind, Setup::default(), "").await;
        new_flows_follow_the_migration(&stub, &app).await;
        app.shutdown().await;
    }
);

on_both_databases!(
    discovery_is_read_again_after_its_max_age,
    |kind| async move {
        // The challenge names the same metadata URL throughout: only the lifetime (the
        // documents' max-age, 60 s, the shortest honoured) makes the move seen.
        let setup = Setup {
            cache_control: Some("public, max-age=60"),
            migration_keeps_hint: true,
            ..Setup::default()
        };
        let (stub, app) = connect(kind, setup, "").await;
        // A forced refresh reads the metadata once more (the server refused the token: it may
        // have moved), and the result read then is reused within its lifetime.
        let fetched = stub.prm_fetches.load(Ordering::SeqCst);
        token_then_refresh(&app).await;
        assert_eq!(stub.prm_fetches.load(Ordering::SeqCst), fetched + 1);
        let (s, v) = call(
            &app,
            "/v1/tokens",
            json!({"subject": "alice", "provider": "other"}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(stub.prm_fetches.load(Ordering::SeqCst), fetched + 1);
        tokio::time::sleep(std::time::Duration::from_secs(61)).await;
        // The grant was made at `as`: its refresh token never goes to `as2`.
        stub.migrate();
        let calls = stub.token_calls.lock().unwrap().len();
        let (s, v) = call(
            &app,
            "/v1/tokens",
            json!({"subject": "alice", "provider": "other", "force_refresh": true}),
        )
        .await;
        assert_eq!(s, StatusCode::CONFLICT, "{v}");
        assert_eq!(v["error"], "reauthorization_required", "{v}");
        assert_eq!(stub.token_calls.lock().unwrap().len(), calls);
        new_flows_follow_the_migration(&stub, &app).await;
        app.shutdown().await;
    }
);

on_both_databases!(
    a_forced_refresh_sees_a_move_behind_the_same_metadata_url,
    |kind| async move {
        // The challenge keeps naming the same metadata URL and the discovery result is fresh
        // (5 minutes): only reading the metadata again shows the move. The old authorization
        // server would still refresh the grant.
        let setup = Setup {
            migration_keeps_hint: true,
            ..Setup::default()
        };
        let (stub, app) = connect(kind, setup, "").await;
        let (s, v) = call(
            &app,
            "/v1/tokens",
            json!({"subject": "alice", "provider": "other"}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let refused = v["access_token"].as_str().unwrap().to_owned();
        stub.migrate();
        let calls = stub.token_calls.lock().unwrap().len();
        let (s, v) = call(
            &app,
            "/v1/tokens",
            json!({"subject": "alice", "provider": "other", "force_refresh": true, "elicit": true}),
        )
        .await;
        assert_eq!(s, StatusCode::CONFLICT, "{v}");
        assert_eq!(v["error"], "reauthorization_required", "{v}");
        assert!(v["elicitation"]["url"].is_string(), "{v}");
        assert!(!v.to_string().contains(&refused), "{v}");
        // The old grant's refresh token went nowhere, and the grant needs the user.
        assert_eq!(stub.token_calls.lock().unwrap().len(), calls);
        let (status,): (String,) =
            sqlx::query_as("SELECT status FROM connections WHERE provider = 'other'")
                .fetch_one(&app.state.db.pool)
                .await
                .unwrap();
        assert_eq!(status, "needs_reauth");
        new_flows_follow_the_migration(&stub, &app).await;
        app.shutdown().await;
    }
);

on_both_databases!(
    a_code_from_before_a_move_is_not_sent_to_the_new_authorization_server,
    |kind| async move {
        let (stub, app) = connect(kind, Setup::default(), "").await;
        // Alice's redirect goes to `as`; she comes back only after the server moved and
        // another user's flow made mcp-connect follow it to `as2`.
        let alice = Browser::stopping_at_callback();
        let (s, e) = call(
            &app,
            "/v1/elicitations",
            json!({"subject": "alice", "provider": "other"}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{e}");
        let consent = alice
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        let (action, mut fields) = consent.form("form.actions");
        fields.push(("action".into(), "continue".into()));
        let r = alice
            .client
            .post(&action)
            .form(&fields)
            .send()
            .await
            .unwrap();
        let callback = r.headers()["location"].to_str().unwrap().to_owned();
        assert!(
            callback.contains("/oauth/other/callback?code="),
            "{callback}"
        );
        stub.migrate();
        let (_, done) = continue_connect_as(&app, &app.browser(), "bob").await;
        assert!(done.has("is connected"), "{}", done.body);
        let exchanges_at_as2 = || {
            stub.token_calls
                .lock()
                .unwrap()
                .iter()
                .filter(|c| c.server == "as2" && c.grant_type == "authorization_code")
                .count()
        };
        assert_eq!(exchanges_at_as2(), 1);
        let page = alice.get(&callback).await;
        assert_eq!(page.status, StatusCode::CONFLICT, "{}", page.body);
        assert!(page.has("moved"), "{}", page.body);
        assert_eq!(exchanges_at_as2(), 1, "alice's code went to the new server");
        // Nothing was spent: her elicitation is still pending, to start again.
        let (s, v) = reply(
            app.api
                .get(format!(
                    "{}/v1/elicitations/{}",
                    app.url,
                    e["id"].as_str().unwrap()
                ))
                .bearer_auth(OTHER_API_KEY),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["status"], "pending", "{v}");
        app.shutdown().await;
    }
);

/// A security refusal during discovery: Continue shows "misconfigured" (not "try again"), the
/// elicitation ends `failed` with reason `provider_misconfigured`, and a token request waiting
/// for it says so instead of handing out another elicitation that would fail the same way.
async fn refusal_fails_the_elicitation(kind: DbKind, setup: Setup) {
    let (stub, app) = spawn(kind, setup, "").await;
    let (e, page) = continue_connect(&app).await;
    assert_eq!(page.status, StatusCode::BAD_GATEWAY, "{}", page.body);
    assert!(page.has("misconfigured"), "{}", page.body);
    assert!(!page.has("try again"), "{}", page.body);
    let id = e["id"].as_str().unwrap();
    let (s, v) = reply(
        app.api
            .get(format!("{}/v1/elicitations/{id}?wait=5", app.url))
            .bearer_auth(OTHER_API_KEY),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["reason"], "provider_misconfigured", "{v}");
    for extra in [json!({}), json!({"elicit": true})] {
        let mut body = json!({"subject": "alice", "provider": "other",
            "elicitation_id": id, "wait_seconds": 1});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (s, v) = call(&app, "/v1/tokens", body).await;
        assert_eq!(s, StatusCode::BAD_GATEWAY, "{v}");
        assert_eq!(v["error"], "upstream_error", "{v}");
        assert_eq!(v["reason"], "provider_misconfigured", "{v}");
        assert_eq!(v["elicitation_id"], id, "{v}");
        assert!(v.get("elicitation").is_none_or(Value::is_null), "{v}");
    }
    assert!(stub.authorizations.lock().unwrap().is_empty());
    app.shutdown().await;
}

on_both_databases!(
    a_resource_mismatch_fails_the_elicitation_as_misconfigured,
    |kind| async move {
        let setup = Setup {
            foreign_resource: true,
            ..Setup::default()
        };
        refusal_fails_the_elicitation(kind, setup).await;
    }
);

on_both_databases!(
    an_issuer_mismatch_fails_the_elicitation_as_misconfigured,
    |kind| async move {
        let setup = Setup {
            foreign_issuer: true,
            ..Setup::default()
        };
        refusal_fails_the_elicitation(kind, setup).await;
    }
);

on_both_databases!(
    an_unreachable_authorization_server_leaves_the_elicitation_pending,
    |kind| async move {
        let setup = Setup {
            metadata_down: true,
            ..Setup::default()
        };
        let (_stub, app) = spawn(kind, setup, "").await;
        let (e, page) = continue_connect(&app).await;
        assert_eq!(page.status, StatusCode::BAD_GATEWAY, "{}", page.body);
        assert!(page.has("try again"), "{}", page.body);
        assert!(!page.has("misconfigured"), "{}", page.body);
        let (s, v) = reply(
            app.api
                .get(format!(
                    "{}/v1/elicitations/{}",
                    app.url,
                    e["id"].as_str().unwrap()
                ))
                .bearer_auth(OTHER_API_KEY),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["status"], "pending", "{v}");
        assert!(v.get("reason").is_none(), "{v}");
        app.shutdown().await;
    }
);

/// A 2025-03-26 server: connected without protected-resource metadata, and no `resource=` in
/// any request (the stub refuses one).
async fn legacy_server_connects(kind: DbKind, legacy: Legacy) {
    let setup = Setup {
        legacy: Some(legacy),
        ..Setup::default()
    };
    let (stub, app) = connect(kind, setup, "").await;
    token_then_refresh(&app).await;
    assert_eq!(stub.registrations_at("").len(), 1);
    assert_eq!(
        *stub.authorizations.lock().unwrap(),
        [(String::new(), None)]
    );
    let calls = stub.token_calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(
        calls
            .iter()
            .all(|c| c.server.is_empty() && c.resource.is_none()),
        "{calls:?}"
    );
    assert_eq!(stored_issuers(&app).await, [stub.base.as_str()]);
    app.shutdown().await;
}

on_both_databases!(
    a_server_without_resource_metadata_uses_the_metadata_at_its_origin,
    |kind| async move { legacy_server_connects(kind, Legacy::Metadata).await }
);

on_both_databases!(
    a_server_without_any_metadata_uses_the_default_endpoints,
    |kind| async move { legacy_server_connects(kind, Legacy::Defaults).await }
);

/// Asks `POST /v1/tokens` for alice's token with a proof for `dpop` (if given).
async fn dpop_token(app: &TestApp, dpop: Option<Value>, extra: Value) -> (StatusCode, Value) {
    let mut body = json!({"subject": "alice", "provider": "other"});
    if let Some(d) = dpop {
        body["dpop"] = d;
    }
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    call(app, "/v1/tokens", body).await
}

/// An authorization server that takes DPoP: the code exchange and refreshes carry proofs (with
/// its nonce when it asks), the token is stored as DPoP-bound, and `POST /v1/tokens` hands the
/// MCP server a proof for each request it names, made with the key the token is bound to,
/// which is stored sealed and never handed out.
async fn dpop_flow(kind: DbKind, nonce: bool) {
    let setup = Setup {
        dpop: true,
        dpop_nonce: nonce,
        ..Setup::default()
    };
    let stub = start_stub(setup).await;
    let opts = options(&stub, "");
    let app = TestApp::spawn_with(kind, opts.clone()).await;
    walk_connect(&app).await;
    let mcp = format!("{}/mcp", stub.base);
    if nonce {
        assert_eq!(stub.dpop_nonce_challenges.load(Ordering::SeqCst), 1);
    }

    // Without naming the request, a DPoP-bound token is refused with what to send.
    let (s, v) = dpop_token(&app, None, json!({})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"], "invalid_request", "{v}");
    assert!(v["message"].as_str().unwrap().contains("dpop"), "{v}");
    assert!(v.get("access_token").is_none(), "{v}");

    let target = json!({"htm": "POST", "htu": format!("{mcp}?session=1")});
    let (s, v) = dpop_token(&app, Some(target.clone()), json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["token_type"], "DPoP", "{v}");
    let token = v["access_token"].as_str().unwrap().to_owned();
    let (jkt, grant) = stub.dpop_bound.lock().unwrap()[&token].clone();
    assert_eq!(grant, "authorization_code");
    let proof = v["dpop_proof"].as_str().unwrap();
    let (claims, proof_jkt) = verify_dpop_proof(proof, "POST", &mcp).unwrap();
    assert_eq!(
        proof_jkt, jkt,
        "the proof is not made with the key the token is bound to"
    );
    assert_eq!(
        claims["ath"],
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(sha2::Sha256::digest(token.as_bytes()))
    );
    assert!(claims.get("nonce").is_none(), "{claims}");

    // Every request gets its own proof; the MCP server's nonce goes into it.
    let with_nonce = json!({"htm": "GET", "htu": mcp.clone(), "nonce": "rs-nonce-7"});
    let (s, v) = dpop_token(&app, Some(with_nonce), json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (again, _) = verify_dpop_proof(v["dpop_proof"].as_str().unwrap(), "GET", &mcp).unwrap();
    assert_eq!(again["nonce"], "rs-nonce-7");
    assert_ne!(again["jti"], claims["jti"]);

    // Proofs only for the MCP server, and only for well-formed requests.
    for (bad, why) in [
        (
            json!({"htm": "POST", "htu": "https://elsewhere.example/mcp"}),
            "another origin",
        ),
        (
            json!({"htm": "post", "htu": mcp.clone()}),
            "a lower-case method",
        ),
        (json!({"htm": "POST", "htu": "/mcp"}), "a relative URL"),
        (
            json!({"htm": "POST", "htu": mcp.clone(), "nonce": "a b"}),
            "a nonce with a space",
        ),
    ] {
        let (s, v) = dpop_token(&app, Some(bad), json!({})).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{why}: {v}");
        assert_eq!(v["error"], "invalid_request", "{why}: {v}");
    }

    // A forced refresh proves possession of the same key, and the token stays bound to it.
    let (s, v) = dpop_token(&app, Some(target), json!({"force_refresh": true})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let refreshed = v["access_token"].as_str().unwrap().to_owned();
    assert_ne!(refreshed, token);
    assert_eq!(
        stub.dpop_bound.lock().unwrap()[&refreshed],
        (jkt.clone(), "refresh_token".to_owned())
    );
    let (_, proof_jkt) =
        verify_dpop_proof(v["dpop_proof"].as_str().unwrap(), "POST", &mcp).unwrap();
    assert_eq!(proof_jkt, jkt);
    if nonce {
        // The nonce the token endpoint gave is remembered: the refresh needed no second try.
        assert_eq!(stub.dpop_nonce_challenges.load(Ordering::SeqCst), 1);
    }

    // One key for the provider at that authorization server, sealed like every secret.
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT issuer, private_key FROM dpop_keys WHERE provider = 'other'")
            .fetch_all(&app.state.db.pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, stub.issuer("as"));
    let sealed = &rows[0].1;
    assert_eq!(
        mcp_connect::crypto::KeyRing::key_id_of(sealed),
        Some(app.state.config.keys.current_id())
    );
    app.state
        .config
        .keys
        .open(
            sealed,
            &mcp_connect::crypto::dpop_key_aad("other", &stub.issuer("as")),
        )
        .expect("the key is sealed for its own row");
    assert!(app.state.config.keys.open(sealed, "another place").is_err());

    // Another process (a restart, another replica) opens the stored key: the grant it holds is
    // still usable, with proofs from the key it is bound to.
    let mut app = app;
    let peers = std::mem::replace(&mut app.peers, crate::operations::no_peers());
    let db_url = app.db_url.clone();
    app.shutdown_keeping_database().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = TestApp::spawn_on(listener, peers, db_url, &opts).await;
    let (s, v) = dpop_token(
        &app,
        Some(json!({"htm": "POST", "htu": mcp.clone()})),
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["access_token"], refreshed.as_str());
    let (_, proof_jkt) =
        verify_dpop_proof(v["dpop_proof"].as_str().unwrap(), "POST", &mcp).unwrap();
    assert_eq!(proof_jkt, jkt, "a restart made another key");
    app.shutdown().await;
}

on_both_databases!(
    dpop_tokens_come_with_proofs_from_a_key_that_never_leaves,
    |kind| async move { dpop_flow(kind, false).await }
);

on_both_databases!(
    dpop_nonces_of_the_token_endpoint_are_honoured_and_remembered,
    |kind| async move { dpop_flow(kind, true).await }
);

/// The proxy presents a DPoP-bound token with a proof for each call it forwards, made with the
/// key that never leaves, and answers the resource's nonce challenge once by itself.
async fn dpop_through_the_proxy(kind: DbKind, nonce: bool) {
    let setup = Setup {
        dpop: true,
        dpop_nonce: nonce,
        ..Setup::default()
    };
    let stub = start_stub(setup).await;
    let extra = format!("api_base_url = \"{}/api\"", stub.base);
    let app = TestApp::spawn_with(kind, options(&stub, &extra)).await;
    walk_connect(&app).await;
    for round in 1..=2 {
        let r = app
            .api
            .get(format!("{}/v1/proxy/other/whoami", app.url))
            .bearer_auth(OTHER_API_KEY)
            .header("connect-subject", "alice")
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body = r.text().await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let bound: Vec<String> = stub
            .dpop_bound
            .lock()
            .unwrap()
            .values()
            .map(|(jkt, _)| jkt.clone())
            .collect();
        assert!(
            bound.contains(&v["jkt"].as_str().unwrap().to_owned()),
            "{v}"
        );
        assert_eq!(stub.api_calls.load(Ordering::SeqCst), round);
        let challenges = if nonce { round } else { 0 };
        assert_eq!(stub.api_nonce_challenges.load(Ordering::SeqCst), challenges);
    }
    app.shutdown().await;
}

on_both_databases!(
    dpop_bound_tokens_go_through_the_proxy_with_a_proof_per_call,
    |kind| async move { dpop_through_the_proxy(kind, false).await }
);

on_both_databases!(
    the_proxy_answers_a_resource_servers_dpop_nonce_challenge,
    |kind| async move { dpop_through_the_proxy(kind, true).await }
);
