//! The domain's errors as the API answers them: an HTTP status, a JSON body with the stable
//! code and sentence, and the `RenderedError` extension from which browser routes render the
//! same error as a page. Causes of server-side failures go to the log, never to the body.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::{Error, Refusal};
use crate::server::limits::TooMany;
use crate::server::rendered::RenderedError;

/// Every API error body. Stable codes: `unauthorized`, `invalid_subject_token`,
/// `forbidden_provider`, `insufficient_scope` (with `missing_scopes`), `invalid_request`,
/// `invalid_request_state`, `not_found`, `not_connected`, `authorization_required`,
/// `reauthorization_required`, `authorization_declined`, `account_selection_required` (with
/// `accounts`), `rate_limited` (with a `Retry-After`
/// header), `unavailable`, `upstream_error`, `internal`, `forbidden` (a path or method the
/// proxy does not let through), `proxy_only` (a client with `token_access = "proxy"` asked for
/// a token).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// The stable error code.
    pub error: String,
    /// A human sentence.
    pub message: String,
    /// `invalid_request_state`: `invalid` (not ours, altered, or another client's),
    /// `foreign` (another subject or provider) or `expired`. `upstream_error` for an awaited
    /// elicitation that failed: `provider_misconfigured` (an operator must fix the provider;
    /// trying again will not help) or `provider_error`.
    pub reason: Option<String>,
    /// `authorization_required` / `reauthorization_required` with `elicit`: the elicitation to
    /// hand to the MCP client.
    #[schema(value_type = Option<Object>)]
    pub elicitation: Option<Value>,
    /// `authorization_declined`: the elicitation the user declined; `upstream_error` with
    /// `reason`: the awaited elicitation that failed.
    pub elicitation_id: Option<String>,
    /// `insufficient_scope`: the scopes the call needs that the grant does not hold (with
    /// `elicit`, the answer is `authorization_required` with the upgrade elicitation instead).
    pub missing_scopes: Option<Vec<String>>,
    /// `account_selection_required`: the accounts to choose from (never a token).
    pub accounts: Option<Vec<crate::error::AccountChoice>>,
}

/// The HTTP status an error is answered with.
pub fn status(e: &Error) -> StatusCode {
    match e {
        Error::Unauthorized | Error::InvalidSubjectToken(_) => StatusCode::UNAUTHORIZED,
        Error::ForbiddenProvider(_)
        | Error::NoOrganization(_)
        | Error::InsufficientScope { .. } => StatusCode::FORBIDDEN,
        Error::InvalidRequest(_) | Error::InvalidRequestState(_) => StatusCode::BAD_REQUEST,
        Error::NotFound(_) | Error::NotConnected { .. } => StatusCode::NOT_FOUND,
        Error::AuthorizationRequired { .. }
        | Error::ReauthorizationRequired { .. }
        | Error::AccountSelectionRequired { .. }
        | Error::AuthorizationDeclined { .. } => StatusCode::CONFLICT,
        Error::Refused { refusal, .. } => refusal_status(*refusal),
        Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        Error::Upstream(_) | Error::AuthorizationFailed { .. } => StatusCode::BAD_GATEWAY,
        Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        Error::ProxyOnly | Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::Gateway(crate::error::GatewayFailure::Timeout { .. }) => StatusCode::GATEWAY_TIMEOUT,
        Error::Gateway(_) => StatusCode::BAD_GATEWAY,
    }
}

fn refusal_status(r: Refusal) -> StatusCode {
    match r {
        Refusal::NotFound => StatusCode::NOT_FOUND,
        Refusal::InvalidRequest
        | Refusal::ConnectFailed
        | Refusal::InvalidState
        | Refusal::SignInFailed => StatusCode::BAD_REQUEST,
        Refusal::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Refusal::AlreadyRevoked | Refusal::ConnectConflict => StatusCode::CONFLICT,
        Refusal::NotPending | Refusal::ProviderRemoved => StatusCode::GONE,
        Refusal::CsrfFailed | Refusal::NotOrganizationAdmin => StatusCode::FORBIDDEN,
        Refusal::SignedOutDuringFlow | Refusal::NotSignedIn => StatusCode::UNAUTHORIZED,
        Refusal::ConnectUpstreamFailed
        | Refusal::IdentityUnavailable
        | Refusal::ProviderUnavailable
        | Refusal::ProviderMisconfigured => StatusCode::BAD_GATEWAY,
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = status(&self);
        match &self {
            Self::Unavailable(e) => {
                tracing::warn!(error = format!("{e:#}"), "dependency unavailable")
            }
            Self::Upstream(e) => tracing::warn!(error = format!("{e:#}"), "upstream failure"),
            Self::Internal(e) => tracing::error!(error = format!("{e:#}"), "internal error"),
            _ => {}
        }
        let mut body = json!({ "error": self.code().as_str(), "message": self.message() });
        match &self {
            Self::AuthorizationRequired { elicitation, .. } => {
                body["elicitation"] = (**elicitation).clone()
            }
            Self::ReauthorizationRequired {
                elicitation: Some(e),
                ..
            } => body["elicitation"] = (**e).clone(),
            Self::InvalidRequestState(r) => body["reason"] = json!(r.reason()),
            Self::InsufficientScope { missing_scopes, .. } => {
                body["missing_scopes"] = json!(missing_scopes)
            }
            Self::AccountSelectionRequired { accounts, .. } => body["accounts"] = json!(accounts),
            Self::AuthorizationDeclined { elicitation_id, .. } => {
                body["elicitation_id"] = json!(elicitation_id)
            }
            Self::AuthorizationFailed {
                elicitation_id,
                reason,
                ..
            } => {
                body["elicitation_id"] = json!(elicitation_id);
                body["reason"] = json!(reason.as_str());
            }
            _ => {}
        }
        let rendered = RenderedError {
            status,
            code: self.code(),
            title: self.title(),
            message: self.message_text(),
            next: None,
        };
        let mut resp = (status, Json(body)).into_response();
        resp.extensions_mut().insert(rendered);
        resp
    }
}

/// What an API handler answers instead of its result: the domain's error, or a refusal by one
/// of the edge's limits (a rate limit, the cap on long polls or streams), which answers itself.
#[derive(Debug)]
pub enum ApiError {
    Domain(Error),
    Limited(TooMany),
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        Self::Domain(e)
    }
}

impl From<TooMany> for ApiError {
    fn from(r: TooMany) -> Self {
        Self::Limited(r)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            Self::Domain(e) => e.into_response(),
            Self::Limited(r) => r.into_response(),
        }
    }
}
