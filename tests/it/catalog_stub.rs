//! A stub provider at the HTTP boundary that behaves as a catalog entry says the real one does:
//! its authorization endpoint redirects back with a code (and the entry's redirect metadata, such
//! as QuickBooks' `realmId`), its token endpoint answers in the entry's shape (token nested at
//! `token.path`, no `expires_in` where the entry assumes one, a new refresh token only where
//! they rotate, metadata fields at their paths), GitHub's answers are form-encoded, Slack's and
//! GitHub's errors come inside HTTP 200, and every request is recorded for the test to check
//! (client authentication, body encoding, parameters, revocation calls). One stub per entry,
//! each on its own loopback port; catalog URLs moved onto it keep their catalog paths.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use mcp_connect::config::catalog::{Entry, RefreshBehaviour, WhenMissing};
use serde_json::{Value, json};

/// The code the stub's authorization endpoint hands out.
pub const CODE: &str = "stub-code";

/// One request as the stub received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub headers: HeaderMap,
    /// The body's fields, from a form or a JSON object.
    pub fields: BTreeMap<String, String>,
    pub json_body: bool,
}

impl Seen {
    pub fn basic_auth(&self) -> Option<(String, String)> {
        use base64::Engine;
        let h = self.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(h.strip_prefix("Basic ")?)
            .ok()?;
        let (id, secret) = std::str::from_utf8(&raw)
            .ok()?
            .split_once(':')?
            .to_owned_pair();
        Some((id, secret))
    }

    pub fn bearer(&self) -> Option<String> {
        let h = self.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        h.strip_prefix("Bearer ").map(str::to_owned)
    }
}

trait OwnedPair {
    fn to_owned_pair(self) -> (String, String);
}

impl OwnedPair for (&str, &str) {
    fn to_owned_pair(self) -> (String, String) {
        (self.0.to_owned(), self.1.to_owned())
    }
}

pub struct Stub {
    pub entry: &'static Entry,
    pub base: String,
    pub seen: Vec<Seen>,
    /// Refresh tokens handed out, newest last; a rotating entry accepts only the newest.
    pub refresh_tokens: Vec<String>,
    pub issued: u32,
}

pub type Shared = Arc<Mutex<Stub>>;

/// The path of a catalog URL (placeholders filled as the app fills them), or `None`.
pub fn path_of(url: &Option<String>) -> Option<String> {
    let u = url.as_deref()?;
    let after = u.find("://")? + 3;
    let rest = &u[after..];
    Some(
        rest.find('/')
            .map(|i| rest[i..].to_owned())
            .unwrap_or_else(|| "/".into()),
    )
}

/// Sets `path` (dotted; numeric segments index arrays) to `value` inside `v`.
pub fn set_path(v: &mut Value, path: &str, value: Value) {
    let segs: Vec<&str> = path.split('.').collect();
    let mut cur = v;
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        if let Ok(n) = seg.parse::<usize>() {
            if !cur.is_array() {
                *cur = json!([]);
            }
            let a = cur.as_array_mut().unwrap();
            while a.len() <= n {
                a.push(json!({}));
            }
            cur = &mut a[n];
        } else {
            if !cur.is_object() {
                *cur = json!({});
            }
            cur = cur
                .as_object_mut()
                .unwrap()
                .entry(seg.to_string())
                .or_insert(Value::Null);
        }
        if last {
            *cur = value;
            return;
        }
    }
}

/// What a metadata or label field holds in the stub's answers.
pub fn meta_value(name: &str) -> String {
    format!("meta-{name}")
}

fn parse_fields(headers: &HeaderMap, body: &[u8]) -> (BTreeMap<String, String>, bool) {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let m = v
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        (m, true)
    } else {
        (
            url::form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
            false,
        )
    }
}

fn token_answer(s: &mut Stub, refresh: bool) -> Value {
    let e = s.entry;
    s.issued += 1;
    let n = s.issued;
    let mut tok = json!({
        "access_token": format!("at-{}-{n}", e.name),
        "token_type": "bearer",
    });
    // Providers without refresh tokens (GitHub OAuth apps, Notion) issue tokens that do not
    // expire; those whose entry assumes a lifetime say none.
    if e.token.expiry.when_missing != WhenMissing::Assume
        && e.refresh.behaviour != RefreshBehaviour::None
    {
        tok["expires_in"] = json!(3600);
    }
    let new_rt = match (e.refresh.behaviour, refresh) {
        (RefreshBehaviour::None, _) => false,
        (_, false) => true,
        (RefreshBehaviour::Rotating, true) => true,
        (RefreshBehaviour::Stable, true) => false,
    };
    if new_rt {
        let rt = format!("rt-{}-{n}", e.name);
        s.refresh_tokens.push(rt.clone());
        tok["refresh_token"] = json!(rt);
    }
    let mut body = match &e.token.path {
        Some(p) => {
            let mut b = json!({"ok": true});
            set_path(&mut b, p, tok);
            b
        }
        None => tok,
    };
    if let Some(p) = &e.account.id_from_token {
        set_path(&mut body, p, json!(meta_value("account_id")));
    }
    if let Some(p) = &e.account.label_from_token {
        set_path(&mut body, p, json!(meta_value("label")));
    }
    // A label path that is also a metadata field holds the field's value.
    for (name, path) in &e.metadata.from_token {
        set_path(&mut body, path, json!(meta_value(name)));
    }
    body
}

fn error_answer(e: &Entry, error: &str) -> Response {
    // GitHub and Slack put errors inside a 200.
    match e.name.as_str() {
        "slack" => Json200(json!({"ok": false, "error": error})).into_response(),
        "github" => form_answer(&json!({"error": error, "error_description": "stub"})),
        _ => (StatusCode::BAD_REQUEST, axum::Json(json!({"error": error}))).into_response(),
    }
}

struct Json200(Value);

impl IntoResponse for Json200 {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// GitHub answers form-encoded unless asked otherwise: the stub always does.
fn form_answer(v: &Value) -> Response {
    let pairs: Vec<(String, String)> = v
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    (
        [(header::CONTENT_TYPE, "application/x-www-form-urlencoded")],
        serde_urlencoded::to_string(pairs).unwrap(),
    )
        .into_response()
}

async fn handle(State(shared): State<Shared>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body: Bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let (fields, json_body) = parse_fields(&parts.headers, &body);
    let query: BTreeMap<String, String> = parts
        .uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default();
    let path = parts.uri.path().to_owned();
    let mut s = shared.lock().unwrap();
    s.seen.push(Seen {
        method: parts.method.clone(),
        path: path.clone(),
        query: query.clone(),
        headers: parts.headers.clone(),
        fields: fields.clone(),
        json_body,
    });
    let e = s.entry;
    let base = s.base.clone();
    if path == "/.well-known/openid-configuration" {
        return axum::Json(json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/authorize"),
            "token_endpoint": format!("{base}/token"),
            "revocation_endpoint": format!("{base}/revoke"),
            "userinfo_endpoint": format!("{base}/userinfo"),
        }))
        .into_response();
    }
    if path.ends_with("/authorize")
        || Some(&path) == path_of(&e.endpoints.authorization_url).as_ref()
    {
        let Some(redirect) = query.get("redirect_uri") else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let mut target = url::Url::parse(redirect).unwrap();
        {
            let mut q = target.query_pairs_mut();
            q.append_pair("code", CODE);
            if let Some(st) = query.get("state") {
                q.append_pair("state", st);
            }
            for (name, param) in &e.metadata.from_redirect {
                q.append_pair(param, &meta_value(name));
            }
        }
        return Redirect::to(target.as_str()).into_response();
    }
    let refresh_path = path_of(&e.endpoints.refresh_url);
    let is_token =
        path.ends_with("/token") || Some(&path) == path_of(&e.endpoints.token_url).as_ref();
    if is_token || Some(&path) == refresh_path.as_ref() {
        let answer = match fields.get("grant_type").map(String::as_str) {
            Some("authorization_code") if fields.get("code").map(String::as_str) == Some(CODE) => {
                token_answer(&mut s, false)
            }
            Some("refresh_token")
                if fields
                    .get("refresh_token")
                    .is_some_and(|rt| match e.refresh.behaviour {
                        RefreshBehaviour::Rotating => s.refresh_tokens.last() == Some(rt),
                        _ => s.refresh_tokens.contains(rt),
                    }) =>
            {
                token_answer(&mut s, true)
            }
            Some("authorization_code") => return error_answer(e, "bad_verification_code"),
            _ => return error_answer(e, "invalid_grant"),
        };
        return if e.name == "github" {
            form_answer(&answer)
        } else {
            axum::Json(answer).into_response()
        };
    }
    if Some(&path) == path_of(&e.endpoints.userinfo_url).as_ref() || path == "/userinfo" {
        let mut info = json!({});
        if let Some(f) = e.account.id_fields.first() {
            set_path(&mut info, f, json!(meta_value("account_id")));
        }
        if let Some(f) = e.account.label_fields.first() {
            set_path(&mut info, f, json!(meta_value("label")));
        }
        for (name, p) in &e.metadata.from_userinfo {
            set_path(&mut info, p, json!(meta_value(name)));
        }
        return axum::Json(info).into_response();
    }
    for f in &e.metadata.fetch {
        if Some(&path) == path_of(&Some(f.url.clone())).as_ref() {
            let mut v = json!({});
            for (name, p) in &f.fields {
                set_path(&mut v, p, json!(meta_value(name)));
            }
            return axum::Json(v).into_response();
        }
    }
    // Anything else is a revocation call.
    if e.name == "slack" {
        return axum::Json(json!({"ok": true, "revoked": true})).into_response();
    }
    if parts.method == Method::DELETE {
        return StatusCode::NO_CONTENT.into_response();
    }
    axum::Json(json!({})).into_response()
}

/// Starts a stub for `entry` on a loopback port.
pub async fn start(entry: &'static Entry) -> Shared {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let shared: Shared = Arc::new(Mutex::new(Stub {
        entry,
        base,
        seen: Vec::new(),
        refresh_tokens: Vec::new(),
        issued: 0,
    }));
    let app = Router::new().fallback(handle).with_state(shared.clone());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    shared
}

/// The provider config keys that point `entry` at `stub` (the operator's override keys): the
/// authorization and token endpoints, the userinfo endpoint on its catalog path, the issuer for
/// discovery entries, and the revocation endpoint where no overridden endpoint shares its host.
pub fn override_toml(entry: &Entry, base: &str) -> String {
    use mcp_connect::config::catalog::{AuthKind, RevocationMethod};
    let ep = &entry.endpoints;
    let mut t = String::new();
    if entry.auth == AuthKind::Oidc {
        t.push_str(&format!("issuer = \"{base}\"\n"));
        return t;
    }
    t.push_str(&format!(
        "authorization_url = \"{base}/authorize\"\ntoken_url = \"{base}/token\"\n"
    ));
    let origin = |u: &str| -> String {
        let after = u.find("://").map(|i| i + 3).unwrap_or(0);
        u[..after + u[after..].find('/').unwrap_or(u.len() - after)].to_owned()
    };
    let mut moved: Vec<String> = [&ep.authorization_url, &ep.token_url]
        .into_iter()
        .flatten()
        .map(|u| origin(u))
        .collect();
    if let Some(p) = path_of(&ep.userinfo_url) {
        if !p.contains('{') {
            t.push_str(&format!("userinfo_url = \"{base}{p}\"\n"));
            moved.push(origin(ep.userinfo_url.as_deref().unwrap()));
        }
    }
    match (&entry.revocation.method, &entry.revocation.url) {
        (RevocationMethod::Unsupported, _) => {}
        (_, None) => t.push_str(&format!("revocation_url = \"{base}/revoke\"\n")),
        (_, Some(u)) if !moved.contains(&origin(u)) => {
            let p = path_of(&Some(u.clone())).unwrap();
            t.push_str(&format!("revocation_url = \"{base}{p}\"\n"));
        }
        _ => {}
    }
    t
}
