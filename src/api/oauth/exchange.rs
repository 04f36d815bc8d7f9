//! `POST /oauth2/token`: RFC 8693 token exchange. The MCP server trades its user's MCP access
//! token (`subject_token`) for that user's provider token, the standard way to ask what
//! `POST /v1/tokens` answers. Only the token-exchange grant is served.

use axum::extract::rejection::FormRejection;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::client::BasicClient;
use super::error::{OAuthCode, OAuthError};
use crate::AppState;
use crate::api::tokens::TokenResponse;
use crate::api::{ApiJson, ApiLang};
use crate::config::ClientConfig;
use crate::connect::token_exchange::{ExchangeAsk, Target};
use crate::grants::tokens::FreshToken;
use crate::providers::Provider;
use crate::server::middleware::RequestId;

pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
pub const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

/// RFC 6749 `scope` syntax (scope-token, space-separated), without commas, which `/v1/tokens`
/// `scopes` refuse as well.
pub const SCOPE_PATTERN: &str = r"^[!#-+\--\[\]-~]+( [!#-+\--\[\]-~]+)*$";

/// The form of a token exchange (`application/x-www-form-urlencoded`). An empty value counts as
/// absent and unknown parameters are ignored (RFC 6749 §3.2); a parameter sent twice is
/// `invalid_request`.
// No `Debug`: it holds the subject token.
#[derive(Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct ExchangeForm {
    /// Only `urn:ietf:params:oauth:grant-type:token-exchange`; any other is
    /// `unsupported_grant_type`.
    #[schema(value_type = String, pattern = r"^urn:ietf:params:oauth:grant-type:token-exchange$")]
    pub grant_type: Option<String>,
    /// The MCP access token the user presented to the MCP server, checked exactly as
    /// `subject_token` on `/v1/tokens` (JWT with this client's `subject_token_audience`, or
    /// introspection); a token that does not prove a subject is `invalid_grant`.
    #[schema(value_type = String, min_length = 1, max_length = 8192)]
    pub subject_token: Option<String>,
    /// `urn:ietf:params:oauth:token-type:access_token` or `urn:ietf:params:oauth:token-type:jwt`.
    #[schema(value_type = String, pattern = r"^urn:ietf:params:oauth:token-type:(access_token|jwt)$")]
    pub subject_token_type: Option<String>,
    /// The provider, by its configured name. Give this or `resource` (both: the same provider).
    /// Unknown, or not allowed for this client: `invalid_target`.
    #[schema(nullable = false, pattern = r"^[A-Za-z0-9_-]+$")]
    pub audience: Option<String>,
    /// RFC 8707: the provider by a URL it serves: its API base URL (the base or below it), or
    /// an upstream MCP server's `resource` URL (`kind = "mcp"`). No provider, or several:
    /// `invalid_target`.
    #[schema(nullable = false, max_length = 2048)]
    pub resource: Option<String>,
    /// Scopes the token must carry, space-separated (as `scopes` on `/v1/tokens`): when the
    /// grant lacks any, `invalid_scope` with `missing_scopes` (at most 50, each up to 200
    /// characters).
    #[schema(nullable = false, pattern = r"^[!#-+\--\[\]-~]+( [!#-+\--\[\]-~]+)*$")]
    pub scope: Option<String>,
    /// Only `urn:ietf:params:oauth:token-type:access_token` (the default).
    #[schema(
        nullable = false,
        pattern = r"^urn:ietf:params:oauth:token-type:access_token$"
    )]
    pub requested_token_type: Option<String>,
    /// Extension: which of the user's accounts at the provider, as `account` on `/v1/tokens`.
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]+$"
    )]
    pub account: Option<String>,
    /// Optional; when sent it must be the id in the Basic credentials.
    #[schema(nullable = false, max_length = 255)]
    pub client_id: Option<String>,
    /// Delegation is not supported: an `actor_token` is `invalid_request`.
    #[schema(ignore)]
    pub actor_token: Option<String>,
}

/// RFC 8693 §2.2.1.
// No `Debug`: it holds the token.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ExchangeResponse {
    pub access_token: String,
    /// Always `urn:ietf:params:oauth:token-type:access_token`.
    pub issued_token_type: &'static str,
    /// `Bearer`; `N_A` for a provider whose users typed a credential (an API key, or
    /// `username:password`): present it with `header_name` / `header_value`.
    pub token_type: String,
    /// Seconds until the token expires; absent when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<u64>,
    /// The scopes the token carries, space-separated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// `N_A` credentials only: the header to send it in and its whole value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_value: Option<String>,
}

#[utoipa::path(post, path = "/oauth2/token",
    request_body(content = ExchangeForm, content_type = "application/x-www-form-urlencoded"),
    responses((status = 200, body = ExchangeResponse, description = "The provider token, with `Cache-Control: no-store`"),
        (status = 400, body = super::OAuthErrorBody, description = "`invalid_request` (a missing or repeated parameter, an unsupported `subject_token_type` or `requested_token_type`, an `actor_token`), `unsupported_grant_type`, `invalid_grant` (the `subject_token` is expired, for another audience or issuer, or not signed by the identity issuer), `invalid_target` (no such provider, or not for this client), `invalid_scope` (with `missing_scopes`), `unauthorized_client` (this client accepts no subject tokens), `interaction_required` (not connected, or the grant no longer works: with `elicitation`, exactly as `/v1/tokens` with `elicit: true` gives it), `account_selection_required` (with `accounts`)"),
        (status = 401, body = super::OAuthErrorBody, description = "`invalid_client`: missing or wrong Basic credentials (with `WWW-Authenticate: Basic`)"),
        (status = 413, body = super::OAuthErrorBody, description = "`invalid_request`: the body is larger than 16 KiB"),
        (status = 429, body = crate::api::error::ErrorBody, description = "`rate_limited`: retry after `Retry-After` seconds", headers(("Retry-After" = u64, description = "Seconds to wait before trying again"))),
        (status = 500, body = super::OAuthErrorBody, description = "`server_error`"),
        (status = 502, body = super::OAuthErrorBody, description = "`server_error`: the provider failed while refreshing; try again"),
        (status = 503, body = super::OAuthErrorBody, description = "`temporarily_unavailable`: try again shortly")),
    security(("client_basic" = [])))]
pub async fn exchange(
    State(state): State<AppState>,
    BasicClient(client): BasicClient,
    rid: RequestId,
    ApiLang(lang): ApiLang,
    OAuthForm(form): OAuthForm<ExchangeForm>,
) -> Result<Response, OAuthError> {
    let asked = form.parse(&client.0)?;
    let ask = ExchangeAsk {
        client: &client.0,
        subject_token: &asked.subject_token,
        target: Target {
            audience: asked.audience.as_deref(),
            resource: asked.resource.as_deref(),
        },
        scopes: asked.scopes,
        account: asked.account.as_deref(),
        request_id: rid.0.clone(),
        lang,
    };
    let (token, provider) = state.connect.exchange_token(ask).await?;
    let mut resp = ApiJson(ExchangeResponse::new(token, &provider)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

/// A token exchange the service can run: every parameter checked, empty ones dropped.
pub struct Asked {
    pub subject_token: String,
    pub audience: Option<String>,
    pub resource: Option<String>,
    pub scopes: Option<Vec<String>>,
    pub account: Option<String>,
}

impl ExchangeForm {
    /// The exchange `client` asks for, or the OAuth error that says what is wrong with the form.
    pub fn parse(self, client: &ClientConfig) -> Result<Asked, OAuthError> {
        let given = |v: Option<String>| v.filter(|s| !s.is_empty());
        match given(self.grant_type).as_deref() {
            None => return Err(OAuthError::invalid_request("grant_type is missing")),
            Some(GRANT_TYPE) => {}
            Some(_) => {
                return Err(OAuthError::new(
                    OAuthCode::UnsupportedGrantType,
                    format!("only {GRANT_TYPE} is supported"),
                ));
            }
        }
        if given(self.client_id).is_some_and(|id| id != client.id) {
            return Err(OAuthError::new(
                OAuthCode::InvalidClient,
                "client_id is not the authenticated client",
            ));
        }
        // Before anything else about the form: this client never receives a token.
        if client.token_access == crate::config::TokenAccess::Proxy {
            return Err(crate::error::Error::ProxyOnly.into());
        }
        let subject_token = given(self.subject_token)
            .ok_or_else(|| OAuthError::invalid_request("subject_token is missing"))?;
        match given(self.subject_token_type).as_deref() {
            Some(ACCESS_TOKEN_TYPE | JWT_TYPE) => {}
            None => return Err(OAuthError::invalid_request("subject_token_type is missing")),
            Some(_) => {
                return Err(OAuthError::invalid_request(format!(
                    "subject_token_type must be {ACCESS_TOKEN_TYPE} or {JWT_TYPE}"
                )));
            }
        }
        if given(self.requested_token_type).is_some_and(|t| t != ACCESS_TOKEN_TYPE) {
            return Err(OAuthError::invalid_request(format!(
                "only {ACCESS_TOKEN_TYPE} can be issued"
            )));
        }
        if given(self.actor_token).is_some() {
            return Err(OAuthError::invalid_request(
                "delegation (actor_token) is not supported",
            ));
        }
        // RFC 6749's code for a client that may not use this grant, rather than the
        // `invalid_request` the shared subject check would answer.
        if client.subject_token_audience.is_none() && !client.subject_token_introspection {
            return Err(OAuthError::new(
                OAuthCode::UnauthorizedClient,
                "this API client accepts no subject_token: its operator sets subject_token_audience or subject_token_introspection",
            ));
        }
        let scopes = given(self.scope).map(|s| parse_scope(&s)).transpose()?;
        let account = given(self.account);
        crate::api::tokens::validate_account(account.as_deref())?;
        Ok(Asked {
            subject_token,
            audience: given(self.audience),
            resource: given(self.resource),
            scopes,
            account,
        })
    }
}

impl ExchangeResponse {
    fn new(token: FreshToken, provider: &Provider) -> Self {
        let expires_in = token
            .connection
            .expires_at
            .map(|at| u64::try_from(at - crate::time::now()).unwrap_or(0));
        let t = TokenResponse::new(&token, provider);
        let token_type = if t.credential_type != "oauth2" {
            // RFC 8693 §2.2.1: not usable as an OAuth access token.
            "N_A".into()
        } else if t.token_type.eq_ignore_ascii_case("bearer") {
            "Bearer".into()
        } else {
            t.token_type.to_owned()
        };
        Self {
            access_token: t.access_token.to_owned(),
            issued_token_type: ACCESS_TOKEN_TYPE,
            token_type,
            expires_in,
            scope: (!t.scopes.is_empty()).then(|| t.scopes.join(" ")),
            header_name: t.header_name,
            header_value: t.header_value,
        }
    }
}

/// `scope` as `/v1/tokens` `scopes`: RFC 6749 scope-tokens, one space apart, within the same
/// limits.
fn parse_scope(scope: &str) -> Result<Vec<String>, OAuthError> {
    let refused = |m: &str| OAuthError::new(OAuthCode::InvalidScope, m);
    let tokens: Vec<String> = scope.split(' ').map(str::to_owned).collect();
    let rfc_char = |c: char| matches!(c, '!' | '#'..='[' | ']'..='~') && c != ',';
    if tokens
        .iter()
        .any(|t| t.is_empty() || !t.chars().all(rfc_char))
    {
        return Err(refused(
            "scope must be scope tokens (printable ASCII without \", \\ or ,) one space apart",
        ));
    }
    let scopes = Some(tokens);
    crate::api::elicitations::validate_scopes(&scopes)
        .map_err(|_| refused("scope names at most 50 scopes of at most 200 characters"))?;
    Ok(scopes.into_iter().flatten().collect())
}

/// A form body whose rejections are `invalid_request` (413 when too large).
pub struct OAuthForm<T>(pub T);

impl<T: serde::de::DeserializeOwned + Send, S: Send + Sync> FromRequest<S> for OAuthForm<T> {
    type Rejection = OAuthError;

    async fn from_request(req: Request, state: &S) -> Result<Self, OAuthError> {
        match axum::Form::<T>::from_request(req, state).await {
            Ok(axum::Form(v)) => Ok(Self(v)),
            Err(FormRejection::BytesRejection(e))
                if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Err(crate::error::Error::refused(
                    crate::error::Refusal::TooLarge,
                    "Request too large",
                    "the request body is larger than 16384 bytes",
                )
                .into())
            }
            Err(FormRejection::InvalidFormContentType(_)) => Err(OAuthError::invalid_request(
                "send the body as application/x-www-form-urlencoded",
            )),
            Err(e) => Err(OAuthError::invalid_request(format!(
                "invalid form body: {}",
                e.body_text()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_follows_rfc_6749_and_the_v1_limits() {
        assert_eq!(
            parse_scope("repo read:org https://x.test/a").unwrap(),
            ["repo", "read:org", "https://x.test/a"]
        );
        for bad in ["a  b", " a", "a ", "a,b", "a\"b", "a\\b", "é", "a\tb"] {
            assert!(parse_scope(bad).is_err(), "{bad:?}");
        }
        let many = vec!["s"; 51].join(" ");
        assert!(parse_scope(&many).is_err());
    }

    /// The document's `scope` pattern accepts exactly what `parse_scope` does (within the
    /// count and length limits, which the description states).
    #[test]
    fn the_documented_scope_pattern_is_the_rule() {
        use utoipa::OpenApi;
        let doc = serde_json::to_value(crate::api::openapi::ApiDoc::openapi()).unwrap();
        let documented = &doc["components"]["schemas"]["ExchangeForm"]["properties"]["scope"];
        assert_eq!(documented["pattern"], SCOPE_PATTERN);
        let re = regex::Regex::new(SCOPE_PATTERN).unwrap();
        let mut samples: Vec<String> = (0u8..=127)
            .flat_map(|b| {
                let c = b as char;
                [format!("a{c}b"), format!("{c}"), format!("x {c}")]
            })
            .collect();
        samples.extend(["é", "a\u{a0}b", "read:org repo", "a  b", ""].map(String::from));
        for s in samples {
            assert_eq!(re.is_match(&s), parse_scope(&s).is_ok(), "{s:?}");
        }
    }

    #[test]
    fn a_repeated_parameter_is_refused_and_unknown_ones_are_ignored() {
        let f: Result<ExchangeForm, _> = serde_urlencoded::from_str("grant_type=a&grant_type=b");
        assert!(f.is_err());
        let f: ExchangeForm = serde_urlencoded::from_str("grant_type=a&whatever=1").unwrap();
        assert_eq!(f.grant_type.as_deref(), Some("a"));
    }
}
