//! The sandbox OAuth 2 provider (`/dev/sandbox`): RFC 8414 metadata, authorize with a sign-in
//! form (any user name) and an Allow / Deny consent page, a token endpoint with client
//! authentication, PKCE S256, single-use short-lived codes and rotating refresh tokens (reusing
//! a rotated one is `invalid_grant` and revokes the grant), RFC 7009 revocation, and a small
//! protected resource, `GET /api/whoami`. It plays a third-party provider for `mcp-connect demo`.
//!
//! Grants and tokens are kept in memory and, when given a file, written there (tokens as
//! SHA-256 hashes only) so a restarted demo keeps its connections working.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::oauth::{
    AuthRequest, AuthorizePolicy, AuthorizeQuery, CODE_TTL, ClientRequest, DevServer, Expiring,
    OAuthError, OAuthErrorCode, REQUEST_TTL, RegisteredClient, SignInForm, authorization,
    redirect_back, token_json, valid_login,
};
use super::pages::{ConsentPage, render_page};
use crate::crypto::{random_token, sha256_b64};
use crate::time::now;

mod tokens;

use tokens::*;

const SERVER: &str = "Sandbox provider";
/// What each scope lets the client do, shown on the consent page.
const SCOPES: &[(&str, &str)] = &[
    ("profile", "know your sandbox user name"),
    ("api", "call the sandbox API (whoami) as you"),
];
const REFRESH_TTL: i64 = 30 * 86_400;

/// A user's grant to the client. Revoking it ends every token it produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Grant {
    subject: String,
    client_id: String,
    scope: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct AccessToken {
    grant: String,
    scope: String,
    expires_at: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RefreshToken {
    grant: String,
    expires_at: i64,
    /// Set once it has been exchanged: presenting it again is reuse.
    used: bool,
}

/// Everything that outlives a request, keyed by token hash (never the token itself).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Tokens {
    grants: HashMap<String, Grant>,
    access: HashMap<String, AccessToken>,
    refresh: HashMap<String, RefreshToken>,
}

impl Tokens {
    fn revoke_grant(&mut self, grant: &str) {
        self.grants.remove(grant);
        self.access.retain(|_, t| t.grant != grant);
        self.refresh.retain(|_, t| t.grant != grant);
    }

    fn prune(&mut self, now: i64) {
        self.access.retain(|_, t| t.expires_at > now);
        self.refresh.retain(|_, t| t.expires_at > now);
        let live: std::collections::HashSet<&String> = self
            .access
            .values()
            .map(|t| &t.grant)
            .chain(self.refresh.values().map(|t| &t.grant))
            .collect();
        self.grants.retain(|id, _| live.contains(id));
    }

    /// New access and refresh tokens for `grant`.
    fn issue(&mut self, grant: &str, scope: &str, access_ttl: i64, now: i64) -> (String, String) {
        let access = random_token(32);
        let refresh = random_token(32);
        self.access.insert(
            sha256_b64(access.as_bytes()),
            AccessToken {
                grant: grant.to_owned(),
                scope: scope.to_owned(),
                expires_at: now + access_ttl,
            },
        );
        self.refresh.insert(
            sha256_b64(refresh.as_bytes()),
            RefreshToken {
                grant: grant.to_owned(),
                expires_at: now + REFRESH_TTL,
                used: false,
            },
        );
        (access, refresh)
    }
}

/// An authorization request on its way through sign-in and consent.
struct PendingAuth {
    request: AuthRequest,
    user: Option<String>,
}

struct IssuedCode {
    request: AuthRequest,
    subject: String,
}

/// A code after its first redemption, until it would have expired: a second redemption
/// revokes the grant the first one produced (RFC 6749 §4.1.2).
struct UsedCode {
    grant: Option<String>,
    expires_at: i64,
}

#[derive(Default)]
struct SandboxState {
    requests: Expiring<PendingAuth>,
    codes: Expiring<IssuedCode>,
    /// By code hash.
    used_codes: HashMap<String, UsedCode>,
    tokens: Tokens,
}

pub struct Sandbox {
    server: DevServer,
    access_ttl: i64,
    file: Option<PathBuf>,
    state: Mutex<SandboxState>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// `issuer` is this server's public URL (`http://127.0.0.1:PORT/dev/sandbox`); grants are
    /// loaded from and saved to `file` when given.
    pub fn new(
        issuer: String,
        client: RegisteredClient,
        access_ttl: i64,
        file: Option<PathBuf>,
    ) -> anyhow::Result<Arc<Self>> {
        let mut tokens = match &file {
            Some(p) if p.exists() => {
                let text = std::fs::read_to_string(p)?;
                serde_json::from_str::<Tokens>(&text).unwrap_or_else(|e| {
                    tracing::warn!(file = %p.display(), error = %e, "sandbox state unreadable; starting empty");
                    Tokens::default()
                })
            }
            _ => Tokens::default(),
        };
        tokens.prune(now());
        Ok(Arc::new(Self {
            server: DevServer {
                name: SERVER,
                issuer,
                client,
            },
            access_ttl,
            file,
            state: Mutex::new(SandboxState {
                tokens,
                ..SandboxState::default()
            }),
        }))
    }

    fn state(&self) -> MutexGuard<'_, SandboxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the grants and token hashes (called with the lock held, so writes stay ordered).
    fn save(&self, tokens: &mut Tokens) {
        let Some(path) = &self.file else { return };
        tokens.prune(now());
        let result = serde_json::to_vec(tokens)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                let tmp = path.with_extension("json.tmp");
                std::fs::write(&tmp, bytes)?;
                std::fs::rename(&tmp, path)
            });
        if let Err(e) = result {
            tracing::warn!(file = %path.display(), error = %e, "could not save the sandbox state");
        }
    }

    fn policy(&self) -> AuthorizePolicy<'_> {
        AuthorizePolicy {
            server: &self.server,
            scopes_supported: &["profile", "api"],
            default_scopes: &["profile"],
            require_openid: false,
        }
    }

    fn sign_in_page(&self, request: &str, error: Option<&str>, status: StatusCode) -> Response {
        self.server.sign_in_page(
            "/authorize/login",
            "Type any user name: it is who you are at the sandbox. There is no password.",
            request,
            error,
            status,
        )
    }

    fn consent_page(&self, request: &str, user: &str, scopes: &[String]) -> Response {
        render_page(
            &ConsentPage {
                server: SERVER,
                action: &self.server.path("/authorize/decision"),
                request,
                client: &self.server.client.client_id,
                user,
                scopes: scopes
                    .iter()
                    .map(|s| {
                        let what = SCOPES
                            .iter()
                            .find(|(n, _)| n == s)
                            .map(|(_, w)| *w)
                            .unwrap_or("");
                        (s.clone(), what)
                    })
                    .collect(),
            },
            StatusCode::OK,
        )
    }
}

pub fn router(sandbox: Arc<Sandbox>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/.well-known/oauth-authorization-server", get(metadata))
        .route("/authorize", get(authorize))
        .route("/authorize/login", post(sign_in))
        .route("/authorize/decision", post(decide))
        .route("/token", post(token))
        .route("/revoke", post(revoke))
        .route("/api/whoami", get(whoami))
        .with_state(sandbox)
}

async fn index(State(s): State<Arc<Sandbox>>) -> Response {
    s.server.index_page(
        "An OAuth 2 provider for trying mcp-connect: it plays a third-party service such as GitHub. Any user name signs in; you then Allow or Deny. Its one API, whoami, tells who an access token belongs to.",
        &[
                (
                    "metadata",
                    "/.well-known/oauth-authorization-server",
                ),
                ("authorize", "/authorize"),
                ("token", "/token"),
                ("revocation", "/revoke"),
                ("whoami (GET, Bearer)", "/api/whoami"),
        ],
    )
}

async fn metadata(State(s): State<Arc<Sandbox>>) -> Response {
    Json(json!({
        "issuer": s.server.issuer,
        "authorization_endpoint": s.server.endpoint("/authorize"),
        "token_endpoint": s.server.endpoint("/token"),
        "revocation_endpoint": s.server.endpoint("/revoke"),
        // The service labels connections with it (on /account); whoami answers `sub`.
        "userinfo_endpoint": s.server.endpoint("/api/whoami"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "scopes_supported": SCOPES.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "revocation_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "authorization_response_iss_parameter_supported": true,
        "service_documentation": s.server.endpoint("/"),
    }))
    .into_response()
}

fn gone_page(s: &Sandbox) -> Response {
    s.server.error_page("This request has expired", "Authorization requests are single-use and last ten minutes. Go back to the application and start again.")
}

async fn authorize(
    State(s): State<Arc<Sandbox>>,
    q: Result<Query<AuthorizeQuery>, QueryRejection>,
) -> Response {
    let request = match s.policy().check(q) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let handle = s.state().requests.insert(
        PendingAuth {
            request,
            user: None,
        },
        REQUEST_TTL,
        now(),
    );
    s.sign_in_page(&handle, None, StatusCode::OK)
}

async fn sign_in(
    State(s): State<Arc<Sandbox>>,
    form: Result<Form<SignInForm>, FormRejection>,
) -> Response {
    let Ok(Form(form)) = form else {
        return gone_page(&s);
    };
    let now = now();
    if form.cancel.is_some() {
        let Some(p) = s.state().requests.take(&form.request, now) else {
            return gone_page(&s);
        };
        return deny(&s, &p.request);
    }
    let login = valid_login(&form.login);
    let mut st = s.state();
    let Some(pending) = st.requests.get_mut(&form.request, now) else {
        return gone_page(&s);
    };
    let Some(login) = login else {
        drop(st);
        return s.sign_in_page(
            &form.request,
            Some("Type a user name (up to 64 characters)."),
            StatusCode::BAD_REQUEST,
        );
    };
    pending.user = Some(login.clone());
    let scopes = pending.request.scopes.clone();
    drop(st);
    s.consent_page(&form.request, &login, &scopes)
}

fn deny(s: &Sandbox, request: &AuthRequest) -> Response {
    redirect_back(
        &request.redirect_uri,
        &[
            ("error", OAuthErrorCode::AccessDenied.as_str()),
            ("error_description", "the user denied the request"),
        ],
        request.state.as_deref(),
        &s.server.issuer,
    )
}

#[derive(Deserialize)]
struct DecisionForm {
    request: String,
    decision: Option<String>,
}

async fn decide(
    State(s): State<Arc<Sandbox>>,
    form: Result<Form<DecisionForm>, FormRejection>,
) -> Response {
    let Ok(Form(form)) = form else {
        return gone_page(&s);
    };
    let now = now();
    let mut st = s.state();
    // Taken even when not signed in yet: a decision without a sign-in is not a real browser.
    let Some(PendingAuth {
        request,
        user: Some(subject),
    }) = st.requests.take(&form.request, now)
    else {
        return gone_page(&s);
    };
    match form.decision.as_deref() {
        Some("allow") => {
            let redirect_uri = request.redirect_uri.clone();
            let state = request.state.clone();
            let code = st
                .codes
                .insert(IssuedCode { request, subject }, CODE_TTL, now);
            drop(st);
            redirect_back(
                &redirect_uri,
                &[("code", &code)],
                state.as_deref(),
                &s.server.issuer,
            )
        }
        _ => {
            drop(st);
            deny(&s, &request)
        }
    }
}

fn invalid_token(why: &'static str) -> Response {
    let mut r = OAuthError::new(OAuthErrorCode::InvalidToken, why).into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"sandbox\", error=\"invalid_token\""),
    );
    r
}

/// The protected resource: who the bearer access token belongs to.
async fn whoami(State(s): State<Arc<Sandbox>>, headers: HeaderMap) -> Response {
    let token = authorization(&headers, "bearer").filter(|t| !t.is_empty());
    let Some(token) = token else {
        let mut r = (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": OAuthErrorCode::InvalidRequest.as_str(), "error_description": "send Authorization: Bearer <access token>"})),
        )
            .into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"sandbox\""),
        );
        return r;
    };
    let st = s.state();
    let Some(at) = st.tokens.access.get(&sha256_b64(token.as_bytes())) else {
        return invalid_token("unknown or revoked access token");
    };
    if at.expires_at <= now() {
        return invalid_token("the access token has expired");
    }
    let Some(grant) = st.tokens.grants.get(&at.grant) else {
        return invalid_token("the grant is revoked");
    };
    Json(json!({
        "sub": grant.subject,
        "scope": at.scope,
        "client_id": grant.client_id,
        "exp": at.expires_at,
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoking_a_grant_ends_all_its_tokens_and_pruning_drops_expired_ones() {
        let mut t = Tokens::default();
        t.grants.insert(
            "g".into(),
            Grant {
                subject: "alice".into(),
                client_id: "c".into(),
                scope: "api".into(),
            },
        );
        let (a, r) = t.issue("g", "api", 60, 1000);
        assert!(t.access.contains_key(&sha256_b64(a.as_bytes())));
        assert!(t.refresh.contains_key(&sha256_b64(r.as_bytes())));
        t.prune(1061);
        assert!(t.access.is_empty(), "expired access token pruned");
        assert_eq!(t.refresh.len(), 1);
        assert!(t.grants.contains_key("g"), "grant lives while a token does");
        t.revoke_grant("g");
        assert!(t.refresh.is_empty() && t.grants.is_empty());
    }

    #[test]
    fn saved_state_holds_no_token_values() {
        let mut t = Tokens::default();
        let (a, r) = t.issue("g", "api", 60, 1000);
        let text = serde_json::to_string(&t).unwrap();
        assert!(!text.contains(&a) && !text.contains(&r));
    }
}
