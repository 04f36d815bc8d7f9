//! The one error type. Callers get a stable code and a human sentence; the log gets the cause
//! chain. API routes render it as JSON; browser routes turn the same error into a page
//! (see `web::pages::render_error_pages`).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::i18n::{Msg, Text};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("missing or invalid API key")]
    Unauthorized,
    #[error("{0}")]
    ForbiddenProvider(String),
    /// A `subject_token` that does not prove the subject (expired, another audience, another
    /// key, another subject), or none where the API client must send one.
    #[error("{0}")]
    InvalidSubjectToken(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{subject} has no {provider} connection")]
    NotConnected { subject: String, provider: String },
    /// The user must open the elicitation's URL; the body carries the ready elicitation.
    #[error("the user must connect {provider} first")]
    AuthorizationRequired {
        provider: String,
        elicitation: Box<Value>,
    },
    /// The connection exists but its grant no longer works; the user must connect again.
    #[error("the {provider} connection needs the user to connect again")]
    ReauthorizationRequired {
        provider: String,
        elicitation: Option<Box<Value>>,
    },
    /// A `request_state` that this service did not issue to this client for this subject and
    /// provider, or that has expired. `reason` is `invalid`, `foreign` or `expired`.
    #[error("{message}")]
    InvalidRequestState {
        reason: &'static str,
        message: String,
    },
    /// The elicitation the caller waited for was declined by the user, and nothing is connected.
    #[error("the user declined to connect {provider}")]
    AuthorizationDeclined {
        provider: String,
        elicitation_id: String,
    },
    /// The elicitation the caller waited for failed (`reason` as `ElicitationView::reason`
    /// says), and nothing is connected.
    #[error("{}", failed_message(provider, reason))]
    AuthorizationFailed {
        provider: String,
        elicitation_id: String,
        reason: &'static str,
    },
    /// A browser-facing refusal with its own title, status and advice (catalog messages, so the
    /// page speaks the reader's language; the API gets the English).
    #[error("{message}")]
    Page {
        status: StatusCode,
        code: &'static str,
        title: Text,
        message: Text,
    },
    /// Too many requests from this caller; try again after `retry_after` seconds.
    #[error("Too many requests. Try again in {retry_after} seconds.")]
    RateLimited {
        retry_after: u64,
        limit: crate::server::limits::Limit,
    },
    #[error("a dependency is unavailable")]
    Unavailable(#[source] anyhow::Error),
    #[error("the provider failed")]
    Upstream(#[source] anyhow::Error),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn failed_message(provider: &str, reason: &str) -> String {
    if reason == crate::db::elicitations::PROVIDER_MISCONFIGURED {
        format!(
            "connecting {provider} failed: the provider is misconfigured (a security check refused it); an operator must fix it, trying again will not help"
        )
    } else {
        format!("connecting {provider} failed: the provider refused or failed the authorization")
    }
}

/// Every API error body. Stable codes: `unauthorized`, `invalid_subject_token`,
/// `forbidden_provider`, `invalid_request`,
/// `invalid_request_state`, `not_found`, `not_connected`, `authorization_required`,
/// `reauthorization_required`, `authorization_declined`, `rate_limited` (with a `Retry-After`
/// header), `unavailable`, `upstream_error`, `internal`.
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
}

/// What a response carries so the browser layer can render it as a page, in the reader's
/// language.
#[derive(Debug, Clone)]
pub struct RenderedError {
    pub status: StatusCode,
    pub code: &'static str,
    pub title: Text,
    pub message: Text,
}

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::InvalidRequest(msg.into())
    }

    pub fn not_found(msg: impl Into<String>) -> Self {
        Self::NotFound(msg.into())
    }

    /// A page refusal. Give catalog messages (`Msg`) for pages users see; a plain string is
    /// shown as written in every language.
    pub fn page(
        status: StatusCode,
        code: &'static str,
        title: impl Into<Text>,
        message: impl Into<Text>,
    ) -> Self {
        Self::Page {
            status,
            code,
            title: title.into(),
            message: message.into(),
        }
    }

    pub fn internal(e: impl Into<anyhow::Error>) -> Self {
        Self::Internal(e.into())
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthorized | Self::InvalidSubjectToken(_) => StatusCode::UNAUTHORIZED,
            Self::ForbiddenProvider(_) => StatusCode::FORBIDDEN,
            Self::InvalidRequest(_) | Self::InvalidRequestState { .. } => StatusCode::BAD_REQUEST,
            Self::NotFound(_) | Self::NotConnected { .. } => StatusCode::NOT_FOUND,
            Self::AuthorizationRequired { .. }
            | Self::ReauthorizationRequired { .. }
            | Self::AuthorizationDeclined { .. } => StatusCode::CONFLICT,
            Self::Page { status, .. } => *status,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Upstream(_) | Self::AuthorizationFailed { .. } => StatusCode::BAD_GATEWAY,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::ForbiddenProvider(_) => "forbidden_provider",
            Self::InvalidSubjectToken(_) => "invalid_subject_token",
            Self::InvalidRequest(_) => "invalid_request",
            Self::InvalidRequestState { .. } => "invalid_request_state",
            Self::AuthorizationDeclined { .. } => "authorization_declined",
            Self::NotFound(_) => "not_found",
            Self::NotConnected { .. } => "not_connected",
            Self::AuthorizationRequired { .. } => "authorization_required",
            Self::ReauthorizationRequired { .. } => "reauthorization_required",
            Self::Page { code, .. } => code,
            Self::RateLimited { .. } => "rate_limited",
            Self::Unavailable(_) => "unavailable",
            Self::Upstream(_) | Self::AuthorizationFailed { .. } => "upstream_error",
            Self::Internal(_) => "internal",
        }
    }

    /// The sentence shown to the caller (English). Never includes causes of server-side
    /// failures.
    pub fn message(&self) -> String {
        self.message_text().to_string()
    }

    /// The sentence, as a page renders it in the reader's language.
    fn message_text(&self) -> Text {
        match self {
            Self::Unavailable(_) => Msg::new("error-unavailable-lead").into(),
            Self::Upstream(_) => Msg::new("error-upstream-lead").into(),
            Self::Internal(_) => Msg::new("error-internal-lead").into(),
            Self::RateLimited { retry_after, .. } => Msg::new("error-rate-limited-lead")
                .arg("seconds", retry_after.to_string())
                .into(),
            Self::Page { message, .. } => message.clone(),
            other => Text::Raw(other.to_string()),
        }
    }

    fn title(&self) -> Text {
        let key = match self {
            Self::Page { title, .. } => return title.clone(),
            Self::NotFound(_) => "error-title-not-found",
            Self::InvalidRequest(_) => "error-title-invalid",
            Self::RateLimited { .. } => "error-title-too-many",
            Self::Unavailable(_) => "error-title-unavailable",
            Self::Upstream(_) => "error-title-upstream",
            _ => "error-title-generic",
        };
        Msg::new(key).into()
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        match &self {
            Self::Unavailable(e) => {
                tracing::warn!(error = format!("{e:#}"), "dependency unavailable")
            }
            Self::Upstream(e) => tracing::warn!(error = format!("{e:#}"), "upstream failure"),
            Self::Internal(e) => tracing::error!(error = format!("{e:#}"), "internal error"),
            _ => {}
        }
        let mut body = json!({ "error": self.code(), "message": self.message() });
        match &self {
            Self::AuthorizationRequired { elicitation, .. } => {
                body["elicitation"] = (**elicitation).clone()
            }
            Self::ReauthorizationRequired {
                elicitation: Some(e),
                ..
            } => body["elicitation"] = (**e).clone(),
            Self::InvalidRequestState { reason, .. } => body["reason"] = json!(reason),
            Self::AuthorizationDeclined { elicitation_id, .. } => {
                body["elicitation_id"] = json!(elicitation_id)
            }
            Self::AuthorizationFailed {
                elicitation_id,
                reason,
                ..
            } => {
                body["elicitation_id"] = json!(elicitation_id);
                body["reason"] = json!(reason);
            }
            _ => {}
        }
        let rendered = RenderedError {
            status,
            code: self.code(),
            title: self.title(),
            message: self.message_text(),
        };
        let mut resp = (status, Json(body)).into_response();
        if let Self::RateLimited { retry_after, limit } = &self {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, (*retry_after).into());
            // For the metrics layer, which counts refusals by limit.
            resp.extensions_mut().insert(*limit);
        }
        resp.extensions_mut().insert(rendered);
        resp
    }
}

/// A storage failure: "unavailable" (503) when trying again later may succeed (the database is
/// unreachable or busy, a lock was not free in time), else "internal" (500) — a row that does
/// not decode included: it is never served as if it meant something.
impl From<crate::db::Error> for Error {
    fn from(e: crate::db::Error) -> Self {
        if e.is_transient() {
            Self::Unavailable(e.into())
        } else {
            Self::Internal(e.into())
        }
    }
}

impl From<crate::crypto::CryptoError> for Error {
    fn from(e: crate::crypto::CryptoError) -> Self {
        Self::Internal(e.into())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::Internal(e.into())
    }
}
