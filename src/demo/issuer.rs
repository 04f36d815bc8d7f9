//! The development OpenID Connect issuer (`/dev/issuer`): discovery, JWKS, an authorize step
//! with a sign-in form that accepts any user name, and a token endpoint with client
//! authentication and PKCE S256 that returns an ES256 ID token (nonce echoed) signed with a key
//! made at start. It plays the MCP authorization server for `mcp-connect demo`.

use std::sync::{Arc, Mutex};

use anyhow::{Context, anyhow};
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde::Deserialize;
use serde_json::{Value, json};

use super::oauth::{
    AuthRequest, AuthorizePolicy, AuthorizeQuery, CODE_TTL, ClientRequest, DevServer, Expiring,
    OAuthError, OAuthErrorCode, REQUEST_TTL, RegisteredClient, SignInForm, form_body,
    redirect_back, token_json, valid_login,
};
use crate::crypto::random_token;
use crate::time::now;

const SERVER: &str = "Development identity issuer";
const SCOPES: &[&str] = &["openid", "profile"];
const ID_TOKEN_TTL: i64 = 600;
/// Lifetime of the MCP access tokens `/mcp-token` issues.
const MCP_TOKEN_TTL: i64 = 3600;
/// The MCP resource (audience) the demo's MCP access tokens are for by default: the examples'
/// MCP endpoint on their default port, and the demo client's `subject_token_audience`.
pub const MCP_RESOURCE: &str = "http://127.0.0.1:8765/mcp";

/// The signing key, made at start and never written anywhere.
struct SigningKey {
    kid: String,
    key: EncodingKey,
    jwk: Value,
}

impl SigningKey {
    fn generate() -> anyhow::Result<Self> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| anyhow!("generating the issuer's P-256 key"))?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|_| anyhow!("reading the issuer's P-256 key"))?;
        // An uncompressed point: 0x04 || x || y.
        let point = pair.public_key().as_ref();
        if point.len() != 65 {
            return Err(anyhow!("unexpected P-256 public key length"));
        }
        let kid = random_token(9);
        let jwk = json!({
            "kty": "EC",
            "crv": "P-256",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
            "use": "sig",
            "alg": "ES256",
            "kid": kid,
        });
        Ok(Self {
            kid,
            key: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk,
        })
    }
}

/// A code waiting to be redeemed.
struct IssuedCode {
    request: AuthRequest,
    subject: String,
}

#[derive(Default)]
struct Pending {
    requests: Expiring<AuthRequest>,
    codes: Expiring<IssuedCode>,
}

pub struct Issuer {
    server: DevServer,
    key: SigningKey,
    pending: Mutex<Pending>,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Issuer {
    /// `issuer` is this server's public URL (`http://127.0.0.1:PORT/dev/issuer`).
    pub fn new(issuer: String, client: RegisteredClient) -> anyhow::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            server: DevServer {
                name: SERVER,
                issuer,
                client,
            },
            key: SigningKey::generate().context("development issuer key")?,
            pending: Mutex::new(Pending::default()),
        }))
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        // A panic while holding the lock leaves plain maps behind, still usable.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn policy(&self) -> AuthorizePolicy<'_> {
        AuthorizePolicy {
            server: &self.server,
            scopes_supported: SCOPES,
            default_scopes: &["openid"],
            require_openid: true,
        }
    }

    fn sign_in_page(&self, request: &str, error: Option<&str>, status: StatusCode) -> Response {
        self.server.sign_in_page(
            "/authorize",
            "Type any user name: it becomes your subject (sub). There is no password.",
            request,
            error,
            status,
        )
    }

    /// An MCP access token (RFC 9068 JWT) for `subject` at `resource`: what an MCP client holds
    /// after signing its user in at the MCP authorization server, and what an MCP server
    /// forwards to mcp-connect as `subject_token`.
    fn mcp_access_token(&self, subject: &str, resource: &str) -> anyhow::Result<String> {
        let now = now();
        let claims = json!({
            "iss": self.server.issuer,
            "sub": subject,
            "aud": resource,
            "client_id": "demo-mcp-client",
            "scope": "mcp",
            "iat": now,
            "exp": now + MCP_TOKEN_TTL,
            "jti": random_token(12),
        });
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.key.kid.clone());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, &claims, &self.key.key).context("signing the access token")
    }

    fn id_token(&self, subject: &str, nonce: Option<&str>) -> anyhow::Result<String> {
        let now = now();
        let mut claims = json!({
            "iss": self.server.issuer,
            "sub": subject,
            "aud": self.server.client.client_id,
            "azp": self.server.client.client_id,
            "iat": now,
            "auth_time": now,
            "exp": now + ID_TOKEN_TTL,
            "name": subject,
            "preferred_username": subject,
        });
        if let Some(n) = nonce {
            claims["nonce"] = Value::String(n.to_owned());
        }
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.key.kid.clone());
        jsonwebtoken::encode(&header, &claims, &self.key.key).context("signing the ID token")
    }
}

pub fn router(issuer: Arc<Issuer>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/.well-known/openid-configuration", get(discovery))
        .route("/jwks", get(jwks))
        .route("/authorize", get(authorize).post(sign_in))
        .route("/token", post(token))
        .route("/mcp-token", post(mcp_token))
        .with_state(issuer)
}

async fn index(State(s): State<Arc<Issuer>>) -> Response {
    s.server.index_page(
        "An OpenID Connect issuer for trying mcp-connect: it plays the MCP authorization server. Any user name signs in; the ID tokens are signed with a key made when the demo started.",
        &[
                (
                    "discovery",
                    "/.well-known/openid-configuration",
                ),
                ("authorize", "/authorize"),
                ("token", "/token"),
                ("jwks", "/jwks"),
                (
                    "MCP access tokens (POST user=NAME)",
                    "/mcp-token",
                ),
        ],
    )
}

async fn discovery(State(s): State<Arc<Issuer>>) -> Response {
    Json(json!({
        "issuer": s.server.issuer,
        "authorization_endpoint": s.server.endpoint("/authorize"),
        "token_endpoint": s.server.endpoint("/token"),
        "jwks_uri": s.server.endpoint("/jwks"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
        "scopes_supported": SCOPES,
        "claims_supported": ["sub", "name", "preferred_username", "nonce", "auth_time"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "authorization_response_iss_parameter_supported": true,
        "service_documentation": s.server.endpoint("/"),
    }))
    .into_response()
}

async fn jwks(State(s): State<Arc<Issuer>>) -> Response {
    Json(json!({ "keys": [s.key.jwk] })).into_response()
}

async fn authorize(
    State(s): State<Arc<Issuer>>,
    q: Result<Query<AuthorizeQuery>, QueryRejection>,
) -> Response {
    let request = match s.policy().check(q) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let handle = s.pending().requests.insert(request, REQUEST_TTL, now());
    s.sign_in_page(&handle, None, StatusCode::OK)
}

fn expired_page(s: &Issuer) -> Response {
    s.server.error_page("This sign-in has expired", "Sign-in requests are single-use and last ten minutes. Go back to the application and start again.")
}

async fn sign_in(
    State(s): State<Arc<Issuer>>,
    form: Result<Form<SignInForm>, FormRejection>,
) -> Response {
    let Ok(Form(form)) = form else {
        return expired_page(&s);
    };
    let now = now();
    if form.cancel.is_some() {
        let Some(req) = s.pending().requests.take(&form.request, now) else {
            return expired_page(&s);
        };
        return redirect_back(
            &req.redirect_uri,
            &[
                ("error", OAuthErrorCode::AccessDenied.as_str()),
                ("error_description", "the user cancelled the sign-in"),
            ],
            req.state.as_deref(),
            &s.server.issuer,
        );
    }
    let Some(login) = valid_login(&form.login) else {
        if s.pending().requests.get_mut(&form.request, now).is_none() {
            return expired_page(&s);
        }
        return s.sign_in_page(
            &form.request,
            Some("Type a user name (up to 64 characters)."),
            StatusCode::BAD_REQUEST,
        );
    };
    let mut pending = s.pending();
    let Some(request) = pending.requests.take(&form.request, now) else {
        return expired_page(&s);
    };
    let redirect_uri = request.redirect_uri.clone();
    let state = request.state.clone();
    let code = pending.codes.insert(
        IssuedCode {
            request,
            subject: login,
        },
        CODE_TTL,
        now,
    );
    drop(pending);
    redirect_back(
        &redirect_uri,
        &[("code", &code)],
        state.as_deref(),
        &s.server.issuer,
    )
}

#[derive(Deserialize)]
struct TokenForm {
    grant_type: Option<String>,
    code: Option<String>,
    redirect_uri: Option<String>,
    code_verifier: Option<String>,
}

/// The answer when a token cannot be signed (`what` names it).
fn signing_failed(what: &'static str) -> impl FnOnce(anyhow::Error) -> OAuthError {
    move |e| {
        tracing::error!(
            error = format!("{e:#}"),
            "development issuer could not sign"
        );
        OAuthError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error: OAuthErrorCode::ServerError,
            description: format!("could not sign the {what}"),
        }
    }
}

async fn token(
    State(s): State<Arc<Issuer>>,
    headers: HeaderMap,
    form: Result<Form<ClientRequest<TokenForm>>, FormRejection>,
) -> Result<Response, OAuthError> {
    let f = s.server.client.authenticated(&headers, form)?;
    if f.grant_type.as_deref() != Some("authorization_code") {
        return Err(OAuthError::new(
            OAuthErrorCode::UnsupportedGrantType,
            "only authorization_code is supported",
        ));
    }
    let code = f
        .code
        .as_deref()
        .ok_or_else(|| OAuthError::new(OAuthErrorCode::InvalidRequest, "code is required"))?;
    // Taken whatever happens next: a code gets one attempt.
    let issued = s.pending().codes.take(code, now()).ok_or_else(|| {
        OAuthError::new(
            OAuthErrorCode::InvalidGrant,
            "unknown, used or expired code",
        )
    })?;
    issued
        .request
        .check_redemption(f.redirect_uri.as_deref(), f.code_verifier.as_deref())?;
    let id_token = s
        .id_token(&issued.subject, issued.request.nonce.as_deref())
        .map_err(signing_failed("ID token"))?;
    Ok(token_json(json!({
        "access_token": random_token(32),
        "token_type": "Bearer",
        "expires_in": ID_TOKEN_TTL,
        "id_token": id_token,
        "scope": issued.request.scopes.join(" "),
    })))
}

#[derive(Deserialize)]
struct McpTokenForm {
    user: Option<String>,
    resource: Option<String>,
}

/// `POST /mcp-token` (`user=NAME`, optional `resource=` [`MCP_RESOURCE`], the only audience it
/// issues for): an MCP access token for that user,
/// as if an MCP client had signed them in. Development only, like everything here: it asks for
/// no password. The examples' users present it to the example MCP servers, which validate it
/// against the JWKS and forward it to mcp-connect as `subject_token`.
async fn mcp_token(
    State(s): State<Arc<Issuer>>,
    form: Result<Form<McpTokenForm>, FormRejection>,
) -> Result<Response, OAuthError> {
    let f = form_body(form)?;
    let user = f.user.as_deref().and_then(valid_login).ok_or_else(|| {
        OAuthError::new(
            OAuthErrorCode::InvalidRequest,
            "user=NAME is required (1 to 64 characters)",
        )
    })?;
    // One audience only: the demo rewrites its configuration at every start, so `demo-mcp`
    // accepts no other as `subject_token`, and a token for another resource would only be
    // refused later, less clearly.
    if f.resource.as_deref().is_some_and(|r| r != MCP_RESOURCE) {
        return Err(OAuthError::new(
            OAuthErrorCode::InvalidTarget,
            format!(
                "the demo issues MCP access tokens for {MCP_RESOURCE} only, the one audience its client demo-mcp accepts as subject_token: give your MCP server that audience (MCP_AUDIENCE in the examples), whatever port it listens on"
            ),
        ));
    }
    let token = s
        .mcp_access_token(&user, MCP_RESOURCE)
        .map_err(signing_failed("access token"))?;
    Ok(token_json(json!({
        "access_token": token,
        "token_type": "Bearer",
        "expires_in": MCP_TOKEN_TTL,
        "scope": "mcp",
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::jwk::Jwk;
    use jsonwebtoken::{DecodingKey, Validation};
    use secrecy::SecretString;

    fn issuer() -> Arc<Issuer> {
        Issuer::new(
            "http://127.0.0.1:1/dev/issuer".into(),
            RegisteredClient {
                client_id: "mcp-connect".into(),
                client_secret: SecretString::from("x".to_owned()),
                redirect_uri: "http://127.0.0.1:1/auth/callback".into(),
            },
        )
        .unwrap()
    }

    /// The key that verifies the issuer's tokens, read from the JWK it publishes.
    fn published_key(issuer: &Issuer) -> DecodingKey {
        let jwk: Jwk = serde_json::from_value(issuer.key.jwk.clone()).unwrap();
        DecodingKey::from_jwk(&jwk).unwrap()
    }

    #[test]
    fn id_tokens_verify_with_the_published_jwk() {
        let issuer = issuer();
        let token = issuer.id_token("alice", Some("n-1")).unwrap();
        let mut v = Validation::new(Algorithm::ES256);
        v.set_audience(&["mcp-connect"]);
        v.set_issuer(&["http://127.0.0.1:1/dev/issuer"]);
        let data = jsonwebtoken::decode::<Value>(&token, &published_key(&issuer), &v).unwrap();
        assert_eq!(data.claims["sub"], "alice");
        assert_eq!(data.claims["nonce"], "n-1");
        assert_eq!(data.header.kid.as_deref(), Some(issuer.key.kid.as_str()));
    }

    #[test]
    fn mcp_access_tokens_are_for_the_resource_and_verify_with_the_published_jwk() {
        let issuer = issuer();
        let token = issuer.mcp_access_token("alice", MCP_RESOURCE).unwrap();
        let key = published_key(&issuer);
        let mut v = Validation::new(Algorithm::ES256);
        v.set_audience(&[MCP_RESOURCE]);
        v.set_issuer(&["http://127.0.0.1:1/dev/issuer"]);
        let data = jsonwebtoken::decode::<Value>(&token, &key, &v).unwrap();
        assert_eq!(data.claims["sub"], "alice");
        assert_eq!(data.header.typ.as_deref(), Some("at+jwt"));
        v.set_audience(&["https://elsewhere.example/mcp"]);
        assert!(jsonwebtoken::decode::<Value>(&token, &key, &v).is_err());
    }
}
