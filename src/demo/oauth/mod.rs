//! What the development issuer and the sandbox provider share: the registered client and its
//! authentication, checking an authorization request, PKCE S256, OAuth error answers, and
//! short-lived single-use records.

use std::collections::HashMap;

use axum::Json;
use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::json;
use url::Url;

use super::pages::{self, ErrorPage, IndexPage, SignInPage};
use crate::crypto::{ct_eq, random_token, sha256_b64};

mod authorize;

pub use authorize::*;

/// Pending sign-ins and consents live this long.
pub const REQUEST_TTL: i64 = 600;
/// Authorization codes live this long (RFC 6749 §4.1.2 recommends at most ten minutes).
pub const CODE_TTL: i64 = 60;

/// The one client registered at a development server: mcp-connect itself.
pub struct RegisteredClient {
    pub client_id: String,
    pub client_secret: SecretString,
    /// Compared exactly, as real servers must.
    pub redirect_uri: String,
}

impl std::fmt::Debug for RegisteredClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredClient")
            .field("client_id", &self.client_id)
            .field("redirect_uri", &self.redirect_uri)
            .finish_non_exhaustive()
    }
}

/// What both development servers are: a name on their pages, a public URL (the issuer), and the
/// one client registered there.
pub struct DevServer {
    pub name: &'static str,
    /// `http://127.0.0.1:PORT/dev/NAME`.
    pub issuer: String,
    pub client: RegisteredClient,
}

impl std::fmt::Debug for DevServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevServer")
            .field("issuer", &self.issuer)
            .field("client", &self.client)
            .finish()
    }
}

impl DevServer {
    /// The URL of `path` on this server.
    pub fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.issuer)
    }

    /// `path` on this server as a path on this host (a form's action).
    pub fn path(&self, path: &str) -> String {
        let base = Url::parse(&self.issuer)
            .map(|u| u.path().trim_end_matches('/').to_owned())
            .unwrap_or_default();
        format!("{base}{path}")
    }

    /// The sign-in form of a pending request (`hint` says what the user name becomes); it posts
    /// to `action` on this server.
    pub fn sign_in_page(
        &self,
        action: &str,
        hint: &str,
        request: &str,
        error: Option<&str>,
        status: StatusCode,
    ) -> Response {
        pages::render_page(
            &SignInPage {
                server: self.name,
                action: &self.path(action),
                request,
                client: &self.client.client_id,
                hint,
                error,
            },
            status,
        )
    }

    /// The server's home page: what it is for, and its endpoints as `(label, path)`.
    pub fn index_page(&self, what: &str, endpoints: &[(&'static str, &str)]) -> Response {
        pages::render_page(
            &IndexPage {
                server: self.name,
                what,
                issuer: &self.issuer,
                endpoints: endpoints
                    .iter()
                    .map(|(label, path)| (*label, self.endpoint(path)))
                    .collect(),
            },
            StatusCode::OK,
        )
    }

    /// A page saying the request cannot go on (400).
    pub fn error_page(&self, title: &str, message: &str) -> Response {
        pages::render_page(
            &ErrorPage {
                server: self.name,
                title,
                message,
            },
            StatusCode::BAD_REQUEST,
        )
    }
}

/// The OAuth error codes the development servers answer with: at the token, revocation and
/// resource endpoints (RFC 6749 §5.2, RFC 6750 §3.1, RFC 8707 §2) and back at the client after
/// an authorization request (RFC 6749 §4.1.2.1, OpenID Connect Core §3.1.2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthErrorCode {
    InvalidRequest,
    InvalidClient,
    InvalidGrant,
    UnsupportedGrantType,
    InvalidScope,
    InvalidTarget,
    InvalidToken,
    ServerError,
    UnsupportedResponseType,
    LoginRequired,
    AccessDenied,
}

impl OAuthErrorCode {
    /// The code as the `error` parameter carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::InvalidClient => "invalid_client",
            Self::InvalidGrant => "invalid_grant",
            Self::UnsupportedGrantType => "unsupported_grant_type",
            Self::InvalidScope => "invalid_scope",
            Self::InvalidTarget => "invalid_target",
            Self::InvalidToken => "invalid_token",
            Self::ServerError => "server_error",
            Self::UnsupportedResponseType => "unsupported_response_type",
            Self::LoginRequired => "login_required",
            Self::AccessDenied => "access_denied",
        }
    }
}

/// An error answered by a token, revocation or resource endpoint: JSON, never cached.
#[derive(Debug)]
pub struct OAuthError {
    pub status: StatusCode,
    pub error: OAuthErrorCode,
    pub description: String,
}

impl OAuthError {
    pub fn new(error: OAuthErrorCode, description: impl Into<String>) -> Self {
        let status = match error {
            OAuthErrorCode::InvalidClient | OAuthErrorCode::InvalidToken => {
                StatusCode::UNAUTHORIZED
            }
            _ => StatusCode::BAD_REQUEST,
        };
        Self {
            status,
            error,
            description: description.into(),
        }
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let mut r = (
            self.status,
            Json(json!({"error": self.error.as_str(), "error_description": self.description})),
        )
            .into_response();
        let h = r.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
        if self.error == OAuthErrorCode::InvalidClient {
            h.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"development only\""),
            );
        }
        r
    }
}

/// A JSON answer from a token endpoint (RFC 6749 §5.1: never cached).
pub fn token_json(value: serde_json::Value) -> Response {
    let mut r = Json(value).into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    r
}

/// The form body of a token or revocation request, or the OAuth error for a malformed one.
pub fn form_body<T>(
    form: Result<axum::Form<T>, axum::extract::rejection::FormRejection>,
) -> Result<T, OAuthError> {
    form.map(|axum::Form(f)| f).map_err(|_| {
        OAuthError::new(
            OAuthErrorCode::InvalidRequest,
            "send an application/x-www-form-urlencoded body",
        )
    })
}

/// A token or revocation request: the client's credentials when it sends them in the body
/// (`client_secret_post`), beside the endpoint's own parameters `T`.
#[derive(Deserialize)]
pub struct ClientRequest<T> {
    client_id: Option<String>,
    client_secret: Option<String>,
    #[serde(flatten)]
    params: T,
}

impl RegisteredClient {
    /// The parameters of a token or revocation request once its client has authenticated, or
    /// the OAuth error to answer.
    pub fn authenticated<T>(
        &self,
        headers: &HeaderMap,
        form: Result<axum::Form<ClientRequest<T>>, axum::extract::rejection::FormRejection>,
    ) -> Result<T, OAuthError> {
        let r = form_body(form)?;
        authenticate_client(
            self,
            headers,
            r.client_id.as_deref(),
            r.client_secret.as_deref(),
        )?;
        Ok(r.params)
    }
}

/// The credentials of the request's `Authorization: <scheme> ...` header, when it uses `scheme`
/// (compared without case).
pub fn authorization<'a>(headers: &'a HeaderMap, scheme: &str) -> Option<&'a str> {
    let (given, rest) = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .split_once(' ')?;
    given.eq_ignore_ascii_case(scheme).then_some(rest.trim())
}

/// Client authentication at the token and revocation endpoints (RFC 6749 §2.3.1):
/// `client_secret_basic` or `client_secret_post`, exactly one of them.
pub fn authenticate_client(
    client: &RegisteredClient,
    headers: &HeaderMap,
    form_id: Option<&str>,
    form_secret: Option<&str>,
) -> Result<(), OAuthError> {
    let basic = authorization(headers, "basic");
    let (id, secret) = match (basic, form_secret) {
        (Some(_), Some(_)) => {
            return Err(OAuthError::new(
                OAuthErrorCode::InvalidRequest,
                "use one client authentication method, not two",
            ));
        }
        (Some(b64), None) => {
            let decoded = STANDARD
                .decode(b64)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    OAuthError::new(OAuthErrorCode::InvalidClient, "malformed Basic credentials")
                })?;
            let (id, secret) = decoded.split_once(':').ok_or_else(|| {
                OAuthError::new(OAuthErrorCode::InvalidClient, "malformed Basic credentials")
            })?;
            // Both parts are form-url-encoded before Basic encoding (RFC 6749 §2.3.1).
            (form_decode(id), form_decode(secret))
        }
        (None, Some(secret)) => (form_id.unwrap_or_default().to_owned(), secret.to_owned()),
        (None, None) => {
            return Err(OAuthError::new(
                OAuthErrorCode::InvalidClient,
                "client authentication is required",
            ));
        }
    };
    if let Some(fid) = form_id {
        if fid != id {
            return Err(OAuthError::new(
                OAuthErrorCode::InvalidRequest,
                "client_id does not match the authenticated client",
            ));
        }
    }
    let id_ok = ct_eq(id.as_bytes(), client.client_id.as_bytes());
    let secret_ok = ct_eq(
        secret.as_bytes(),
        client.client_secret.expose_secret().as_bytes(),
    );
    if id_ok && secret_ok {
        Ok(())
    } else {
        Err(OAuthError::new(
            OAuthErrorCode::InvalidClient,
            "unknown client or wrong secret",
        ))
    }
}

fn form_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// RFC 7636: a verifier is 43–128 unreserved characters, and its S256 is the challenge.
pub fn pkce_matches(verifier: &str, challenge: &str) -> bool {
    (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
        && ct_eq(
            sha256_b64(verifier.as_bytes()).as_bytes(),
            challenge.as_bytes(),
        )
}

/// Records that expire and are taken at most once (pending requests, codes). Keyed by a
/// random handle.
pub struct Expiring<T> {
    items: HashMap<String, (T, i64)>,
}

impl<T> Default for Expiring<T> {
    fn default() -> Self {
        Self {
            items: HashMap::new(),
        }
    }
}

impl<T> Expiring<T> {
    /// Stores `value` for `ttl` seconds under a new random handle, which it returns.
    pub fn insert(&mut self, value: T, ttl: i64, now: i64) -> String {
        self.items.retain(|_, (_, exp)| *exp > now);
        let handle = random_token(24);
        self.items.insert(handle.clone(), (value, now + ttl));
        handle
    }

    pub fn get_mut(&mut self, handle: &str, now: i64) -> Option<&mut T> {
        match self.items.get_mut(handle) {
            Some((v, exp)) if *exp > now => Some(v),
            _ => None,
        }
    }

    /// Removes and returns the value; `None` when unknown, already taken or expired.
    pub fn take(&mut self, handle: &str, now: i64) -> Option<T> {
        match self.items.remove(handle) {
            Some((v, exp)) if exp > now => Some(v),
            _ => None,
        }
    }
}

/// What the sign-in form (`dev/signin.html`) posts.
#[derive(Deserialize)]
pub struct SignInForm {
    /// The pending request's handle.
    pub request: String,
    #[serde(default)]
    pub login: String,
    pub cancel: Option<String>,
}

/// A user name typed at a development sign-in form: any non-empty printable name.
pub fn valid_login(login: &str) -> Option<String> {
    let l = login.trim();
    (!l.is_empty() && l.chars().count() <= 64 && !l.chars().any(char::is_control))
        .then(|| l.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> RegisteredClient {
        RegisteredClient {
            client_id: "mcp-connect".into(),
            client_secret: SecretString::from("s3cret&x".to_owned()),
            redirect_uri: "http://127.0.0.1:1/cb".into(),
        }
    }

    #[test]
    fn pkce_checks_the_s256_of_the_verifier() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"; // RFC 7636 appendix B
        assert!(pkce_matches(verifier, challenge));
        assert!(!pkce_matches(challenge, challenge));
        assert!(!pkce_matches("short", &sha256_b64(b"short")));
    }

    #[test]
    fn basic_credentials_are_form_decoded_and_post_is_accepted() {
        let c = client();
        let mut h = HeaderMap::new();
        let b = STANDARD.encode("mcp-connect:s3cret%26x");
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {b}")).unwrap(),
        );
        assert!(authenticate_client(&c, &h, None, None).is_ok());
        assert!(
            authenticate_client(&c, &HeaderMap::new(), Some("mcp-connect"), Some("s3cret&x"))
                .is_ok()
        );
        let e = authenticate_client(&c, &HeaderMap::new(), Some("mcp-connect"), Some("nope"))
            .unwrap_err();
        assert_eq!(e.error, OAuthErrorCode::InvalidClient);
        let e = authenticate_client(&c, &h, None, Some("s3cret&x")).unwrap_err();
        assert_eq!(e.error, OAuthErrorCode::InvalidRequest);
        let e = authenticate_client(&c, &HeaderMap::new(), Some("mcp-connect"), None).unwrap_err();
        assert_eq!(e.error, OAuthErrorCode::InvalidClient);
    }

    #[test]
    fn expiring_records_are_single_use_and_short_lived() {
        let mut e = Expiring::default();
        let h = e.insert("v", 60, 1000);
        assert!(e.get_mut(&h, 1059).is_some());
        assert_eq!(e.take(&h, 1010), Some("v"));
        assert_eq!(e.take(&h, 1010), None);
        let h = e.insert("w", 60, 1000);
        assert_eq!(e.take(&h, 1060), None);
    }
}
