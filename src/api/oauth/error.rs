//! The token endpoint's errors, in OAuth's vocabulary (RFC 6749 §5.2, RFC 8693 §2.2.2): a
//! status, `{error, error_description}` and, where the caller can act on more, extension
//! members (`elicitation`, `missing_scopes`, `accounts`). A standard client reads the code; an
//! MCP server also finds the elicitation to show. Causes of server-side failures go to the log.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::api::error::ApiError;
use crate::error::{Error, Refusal};
use crate::server::limits::TooMany;

/// The `error` codes this endpoint answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthCode {
    InvalidRequest,
    InvalidClient,
    InvalidGrant,
    UnauthorizedClient,
    UnsupportedGrantType,
    InvalidScope,
    InvalidTarget,
    /// OpenID Connect's code for "the user must act first" (registered in IANA's OAuth
    /// Extensions Error registry); Microsoft's on-behalf-of exchange answers it from its token
    /// endpoint too, and its clients treat it as "ask the user" rather than "the grant is bad".
    InteractionRequired,
    /// OpenID Connect's code: the user holds several accounts and the caller must name one.
    AccountSelectionRequired,
    TemporarilyUnavailable,
    ServerError,
}

impl OAuthCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::InvalidClient => "invalid_client",
            Self::InvalidGrant => "invalid_grant",
            Self::UnauthorizedClient => "unauthorized_client",
            Self::UnsupportedGrantType => "unsupported_grant_type",
            Self::InvalidScope => "invalid_scope",
            Self::InvalidTarget => "invalid_target",
            Self::InteractionRequired => "interaction_required",
            Self::AccountSelectionRequired => "account_selection_required",
            Self::TemporarilyUnavailable => "temporarily_unavailable",
            Self::ServerError => "server_error",
        }
    }
}

/// An answer of the token endpoint other than a token.
#[derive(Debug)]
pub enum OAuthError {
    Refused {
        status: StatusCode,
        code: OAuthCode,
        description: String,
        /// Extension members (never a token or a secret).
        extra: serde_json::Map<String, Value>,
    },
    /// A rate limit or cap of the edge, which answers itself (429 with `Retry-After`).
    Limited(TooMany),
}

impl OAuthError {
    pub fn new(code: OAuthCode, description: impl Into<String>) -> Self {
        let status = match code {
            OAuthCode::InvalidClient => StatusCode::UNAUTHORIZED,
            OAuthCode::TemporarilyUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            OAuthCode::ServerError => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        Self::Refused {
            status,
            code,
            description: description.into(),
            extra: Default::default(),
        }
    }

    pub fn invalid_request(description: impl Into<String>) -> Self {
        Self::new(OAuthCode::InvalidRequest, description)
    }

    fn with(mut self, key: &str, value: Value) -> Self {
        if let Self::Refused { extra, .. } = &mut self {
            extra.insert(key.to_owned(), value);
        }
        self
    }

    fn status(mut self, s: StatusCode) -> Self {
        if let Self::Refused { status, .. } = &mut self {
            *status = s;
        }
        self
    }
}

impl From<Error> for OAuthError {
    fn from(e: Error) -> Self {
        use OAuthCode::*;
        let description = e.to_string();
        match e {
            Error::Unauthorized => Self::new(InvalidClient, "unknown client or wrong API key"),
            // Expired, another audience or issuer, not signed by the identity issuer, malformed.
            Error::InvalidSubjectToken(m) => Self::new(InvalidGrant, m),
            // The subject_token proves no organisation: it grants nothing of one.
            Error::NoOrganization(m) => Self::new(InvalidGrant, m),
            Error::InvalidRequest(m) => Self::new(InvalidRequest, m),
            Error::InvalidRequestState(_) => Self::new(InvalidRequest, description),
            Error::NotFound(m) | Error::ForbiddenProvider(m) => Self::new(InvalidTarget, m),
            Error::InsufficientScope { missing_scopes, .. } => {
                Self::new(InvalidScope, description).with("missing_scopes", json!(missing_scopes))
            }
            Error::AuthorizationRequired { elicitation, .. } => {
                Self::new(InteractionRequired, description).with("elicitation", *elicitation)
            }
            Error::ReauthorizationRequired { elicitation, .. } => {
                let e = Self::new(InteractionRequired, description);
                match elicitation {
                    Some(v) => e.with("elicitation", *v),
                    None => e,
                }
            }
            Error::NotConnected { .. } => Self::new(InteractionRequired, description),
            Error::AccountSelectionRequired { accounts, .. } => {
                Self::new(AccountSelectionRequired, description).with("accounts", json!(accounts))
            }
            Error::AuthorizationDeclined { .. } => Self::new(InvalidGrant, description),
            Error::Refused {
                refusal: Refusal::TooLarge,
                ..
            } => Self::new(InvalidRequest, description).status(StatusCode::PAYLOAD_TOO_LARGE),
            Error::Refused { .. } => Self::new(InvalidRequest, description),
            Error::Unavailable(cause) => {
                tracing::warn!(error = format!("{cause:#}"), "dependency unavailable");
                Self::new(
                    TemporarilyUnavailable,
                    "a dependency is unavailable; try again",
                )
            }
            Error::Upstream(cause) => {
                tracing::warn!(error = format!("{cause:#}"), "upstream failure");
                Self::new(ServerError, "the provider failed; try again")
                    .status(StatusCode::BAD_GATEWAY)
            }
            Error::AuthorizationFailed { .. } => {
                Self::new(ServerError, description).status(StatusCode::BAD_GATEWAY)
            }
            Error::Internal(cause) => {
                tracing::error!(error = format!("{cause:#}"), "internal error");
                Self::new(ServerError, "internal error")
            }
            Error::ProxyOnly => {
                Self::new(UnauthorizedClient, description).status(StatusCode::FORBIDDEN)
            }
            // Not answered by the token endpoint; mapped for completeness.
            Error::Forbidden(m) => Self::new(InvalidRequest, m).status(StatusCode::FORBIDDEN),
            Error::Gateway(_) => {
                Self::new(ServerError, description).status(StatusCode::BAD_GATEWAY)
            }
        }
    }
}

impl From<ApiError> for OAuthError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Domain(e) => e.into(),
            ApiError::Limited(r) => Self::Limited(r),
        }
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let (status, code, description, extra) = match self {
            Self::Limited(r) => return r.into_response(),
            Self::Refused {
                status,
                code,
                description,
                extra,
            } => (status, code, description, extra),
        };
        let mut body = json!({"error": code.as_str(), "error_description": description});
        if let Value::Object(b) = &mut body {
            b.extend(extra);
        }
        let mut resp = (status, Json(body)).into_response();
        let h = resp.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if code == OAuthCode::InvalidClient {
            // RFC 6749 §5.2: a 401 names the scheme the client should authenticate with.
            h.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"mcp-connect\""),
            );
        }
        resp
    }
}
