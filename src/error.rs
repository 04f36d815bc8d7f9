//! The domain's one error type: what went wrong, as the domain knows it. Every failure has a
//! stable code (`Error::code`) and a human sentence in the reader's language
//! (`Error::message_text`); causes of server-side failures stay in the error's source chain for
//! the log. How an error is answered — its HTTP status, a JSON body or a page — is the surfaces'
//! business (`api::error`, `web::pages`).

use serde_json::Value;

use crate::db::elicitations::FailureReason;
use crate::i18n::{Msg, Text};
use crate::ids::ElicitationId;
use crate::names::named_enum;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("missing or invalid API key")]
    Unauthorized,
    #[error("{0}")]
    ForbiddenProvider(String),
    /// An organisation's connection asked for without a proven membership (no organisation
    /// claim in the `subject_token`, a bare `subject`, or no organisations configured).
    #[error("{0}")]
    NoOrganization(String),
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
    /// The grant lacks scopes the call needs (`scopes` of a token request, without `elicit`).
    #[error("the {provider} grant lacks scopes this call needs: {}", missing_scopes.join(" "))]
    InsufficientScope {
        provider: String,
        missing_scopes: Vec<String>,
    },
    /// The user holds several accounts at the provider and this client must name one.
    #[error("{subject} has {} {provider} accounts: name one with `account` (its id or label)", accounts.len())]
    AccountSelectionRequired {
        subject: String,
        provider: String,
        accounts: Vec<AccountChoice>,
    },
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
    /// provider, or that has expired.
    #[error("{}", .0.message())]
    InvalidRequestState(RequestStateRefusal),
    /// The elicitation the caller waited for was declined by the user, and nothing is connected.
    #[error("the user declined to connect {provider}")]
    AuthorizationDeclined {
        provider: String,
        elicitation_id: ElicitationId,
    },
    /// The elicitation the caller waited for failed (`reason` as `ElicitationView::reason`
    /// says), and nothing is connected.
    #[error("{}", failed_message(provider, reason))]
    AuthorizationFailed {
        provider: String,
        elicitation_id: ElicitationId,
        reason: FailureReason,
    },
    /// A refusal with its own title and advice (catalog messages, so a page speaks the reader's
    /// language; the API gets the English).
    #[error("{message}")]
    Refused {
        refusal: Refusal,
        title: Text,
        message: Text,
    },
    /// The client has `token_access = "proxy"`: it never receives provider tokens.
    #[error(
        "this API client may use providers only through the proxy (token_access = \"proxy\"): call /v1/proxy/{{provider}}/{{path}} instead of asking for the token"
    )]
    ProxyOnly,
    /// Not allowed by the proxy's allow-lists (a path or method of the provider's API).
    #[error("{0}")]
    Forbidden(String),
    /// A proxied call to the provider's API failed: the message says how (never a URL or a
    /// token).
    #[error("{}", .0.message())]
    Gateway(GatewayFailure),
    #[error("a dependency is unavailable")]
    Unavailable(#[source] anyhow::Error),
    #[error("the provider failed")]
    Upstream(#[source] anyhow::Error),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

named_enum! {
    /// The stable code of every error answer: the `error` of a JSON body, whether the domain, the
    /// edge or the operations routes answer. One variant per code, so no answer can carry a code
    /// that is not listed here.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ErrorCode ("error code") {
        /// A missing or invalid API key, metrics token or the like.
        Unauthorized,
        /// A route this caller may not use from where it is (`/metrics` off loopback).
        Forbidden,
        ForbiddenProvider,
        InvalidSubjectToken,
        InvalidRequest,
        InvalidRequestState,
        NotFound,
        NotConnected,
        InsufficientScope,
        AccountSelectionRequired,
        AuthorizationRequired,
        ReauthorizationRequired,
        AuthorizationDeclined,
        /// A limit of the edge (`server::limits`).
        RateLimited,
        Unavailable,
        UpstreamError,
        Internal,
        AlreadyRevoked,
        NotPending,
        CsrfFailed,
        ProviderRemoved,
        ConnectFailed,
        IdentityUnavailable,
        ProviderUnavailable,
        ProviderMisconfigured,
        InvalidState,
        NotSignedIn,
        SignInFailed,
        /// `/v1/tokens` or `/oauth2/token` asked by a client with `token_access = "proxy"`.
        ProxyOnly,
    }
}

/// How a proxied call to a provider's API failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayFailure {
    /// The provider's answer says it is longer than the limit.
    ResponseTooLarge { limit: u64 },
    /// The provider did not answer (headers) within the time limit.
    Timeout { seconds: u64 },
    /// The SSRF guard refused the provider's address.
    Refused,
    /// The provider could not be reached.
    Unreachable,
    /// The connection's base URL could not be made (a stored parameter or metadata value
    /// does not check, or the provider has no API base URL).
    NoBase(String),
}

impl GatewayFailure {
    pub fn message(&self) -> String {
        match self {
            Self::ResponseTooLarge { limit } => format!(
                "the provider's answer is larger than the proxy's limit of {limit} bytes; nothing of it was passed on"
            ),
            Self::Timeout { seconds } => {
                format!("the provider did not answer within {seconds} s")
            }
            Self::Refused => "the provider's API address is not allowed (SSRF guard)".into(),
            Self::Unreachable => "the provider's API could not be reached".into(),
            Self::NoBase(why) => why.clone(),
        }
    }
}

/// Why a request is refused, beyond the API's own codes: each variant is one code and one
/// answer (`api::error::status` gives its HTTP status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A link, connection or provider that does not exist (for this reader).
    NotFound,
    /// A form or query this service cannot use.
    InvalidRequest,
    /// A request body over the API's limit.
    TooLarge,
    /// A connection that an operator revoked before.
    AlreadyRevoked,
    /// An elicitation that is no longer pending (finished, declined, expired, failed).
    NotPending,
    /// A form posted from another site, or with a stale CSRF token.
    CsrfFailed,
    /// The provider was removed from the configuration.
    ProviderRemoved,
    /// The provider refused or failed the authorization (callback).
    ConnectFailed,
    /// The provider's callback reached a flow that another tab finished.
    ConnectConflict,
    /// The provider failed while exchanging the code, or answered wrongly.
    ConnectUpstreamFailed,
    /// The user signed out while the provider's page was open.
    SignedOutDuringFlow,
    /// The MCP authorization server (the identity issuer) could not be reached.
    IdentityUnavailable,
    /// The provider's metadata could not be read.
    ProviderUnavailable,
    /// The provider's metadata failed a security check; an operator must fix it.
    ProviderMisconfigured,
    /// An OAuth `state` that is unknown, used, expired or for another browser.
    InvalidState,
    /// A page that needs the user signed in.
    NotSignedIn,
    /// Signing in at the MCP authorization server failed.
    SignInFailed,
    /// An organisation's connection, for a user who does not administer that organisation.
    NotOrganizationAdmin,
}

impl Refusal {
    /// The stable code, as API bodies and the audit log carry it.
    pub fn code(self) -> ErrorCode {
        match self {
            Self::NotFound => ErrorCode::NotFound,
            Self::InvalidRequest | Self::TooLarge => ErrorCode::InvalidRequest,
            Self::AlreadyRevoked => ErrorCode::AlreadyRevoked,
            Self::NotPending => ErrorCode::NotPending,
            Self::CsrfFailed => ErrorCode::CsrfFailed,
            Self::ProviderRemoved => ErrorCode::ProviderRemoved,
            Self::ConnectFailed
            | Self::ConnectConflict
            | Self::ConnectUpstreamFailed
            | Self::SignedOutDuringFlow => ErrorCode::ConnectFailed,
            Self::IdentityUnavailable => ErrorCode::IdentityUnavailable,
            Self::ProviderUnavailable => ErrorCode::ProviderUnavailable,
            Self::ProviderMisconfigured => ErrorCode::ProviderMisconfigured,
            Self::InvalidState => ErrorCode::InvalidState,
            Self::NotSignedIn => ErrorCode::NotSignedIn,
            Self::SignInFailed => ErrorCode::SignInFailed,
            Self::NotOrganizationAdmin => ErrorCode::Forbidden,
        }
    }
}

/// Why a `request_state` was refused: the `reason` of an `invalid_request_state` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestStateRefusal {
    /// Not issued by this service to this API client, or altered.
    Invalid,
    /// Issued for another subject or provider than the request names.
    Foreign,
    Expired,
}

impl RequestStateRefusal {
    pub fn reason(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Foreign => "foreign",
            Self::Expired => "expired",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Self::Invalid => {
                "the request_state was not issued by this service to this API client, or it was altered; start again without it"
            }
            Self::Foreign => {
                "the request_state was issued for another subject or provider than this request names"
            }
            Self::Expired => {
                "the request_state has expired; ask for the token again with `elicit: true` to get a new elicitation"
            }
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One account a caller may name (`account_selection_required`): never a token.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct AccountChoice {
    /// The provider's id of the account (empty where the provider names none).
    pub id: String,
    pub label: Option<String>,
    pub nickname: Option<String>,
    pub connection_id: String,
    /// Whether it is the user's default account at the provider.
    pub default: bool,
}

fn failed_message(provider: &str, reason: &FailureReason) -> String {
    match reason {
        FailureReason::ProviderMisconfigured => format!(
            "connecting {provider} failed: the provider is misconfigured (a security check refused it); an operator must fix it, trying again will not help"
        ),
        FailureReason::ProviderError => {
            format!(
                "connecting {provider} failed: the provider refused or failed the authorization"
            )
        }
    }
}

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::InvalidRequest(msg.into())
    }

    pub fn not_found(msg: impl Into<String>) -> Self {
        Self::NotFound(msg.into())
    }

    /// A refusal. Give catalog messages (`Msg`) for pages users see; a plain string is shown as
    /// written in every language.
    pub fn refused(refusal: Refusal, title: impl Into<Text>, message: impl Into<Text>) -> Self {
        Self::Refused {
            refusal,
            title: title.into(),
            message: message.into(),
        }
    }

    pub fn internal(e: impl Into<anyhow::Error>) -> Self {
        Self::Internal(e.into())
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Unauthorized => ErrorCode::Unauthorized,
            Self::ForbiddenProvider(_) => ErrorCode::ForbiddenProvider,
            Self::NoOrganization(_) => ErrorCode::Forbidden,
            Self::InvalidSubjectToken(_) => ErrorCode::InvalidSubjectToken,
            Self::InvalidRequest(_) => ErrorCode::InvalidRequest,
            Self::InvalidRequestState(_) => ErrorCode::InvalidRequestState,
            Self::AuthorizationDeclined { .. } => ErrorCode::AuthorizationDeclined,
            Self::NotFound(_) => ErrorCode::NotFound,
            Self::NotConnected { .. } => ErrorCode::NotConnected,
            Self::InsufficientScope { .. } => ErrorCode::InsufficientScope,
            Self::AccountSelectionRequired { .. } => ErrorCode::AccountSelectionRequired,
            Self::AuthorizationRequired { .. } => ErrorCode::AuthorizationRequired,
            Self::ReauthorizationRequired { .. } => ErrorCode::ReauthorizationRequired,
            Self::Refused { refusal, .. } => refusal.code(),
            Self::Unavailable(_) => ErrorCode::Unavailable,
            Self::Upstream(_) | Self::AuthorizationFailed { .. } => ErrorCode::UpstreamError,
            Self::Internal(_) => ErrorCode::Internal,
            Self::ProxyOnly => ErrorCode::ProxyOnly,
            Self::Forbidden(_) => ErrorCode::Forbidden,
            Self::Gateway(_) => ErrorCode::UpstreamError,
        }
    }

    /// The sentence shown to the caller (English). Never includes causes of server-side
    /// failures.
    pub fn message(&self) -> String {
        self.message_text().to_string()
    }

    /// The sentence, as a page renders it in the reader's language.
    pub fn message_text(&self) -> Text {
        match self {
            Self::Unavailable(_) => Msg::new("error-unavailable-lead").into(),
            Self::Upstream(_) => Msg::new("error-upstream-lead").into(),
            Self::Internal(_) => Msg::new("error-internal-lead").into(),
            Self::Refused { message, .. } => message.clone(),
            other => Text::Raw(other.to_string()),
        }
    }

    /// The title of a page that shows this error, in the reader's language.
    pub fn title(&self) -> Text {
        let key = match self {
            Self::Refused { title, .. } => return title.clone(),
            Self::NotFound(_) => "error-title-not-found",
            Self::InvalidRequest(_) => "error-title-invalid",
            Self::Unavailable(_) => "error-title-unavailable",
            Self::Upstream(_) => "error-title-upstream",
            _ => "error-title-generic",
        };
        Msg::new(key).into()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes are the API's: each keeps the string it is documented as.
    #[test]
    fn error_codes_keep_their_wire_names() {
        let names: Vec<_> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "unauthorized",
                "forbidden",
                "forbidden_provider",
                "invalid_subject_token",
                "invalid_request",
                "invalid_request_state",
                "not_found",
                "not_connected",
                "insufficient_scope",
                "account_selection_required",
                "authorization_required",
                "reauthorization_required",
                "authorization_declined",
                "rate_limited",
                "unavailable",
                "upstream_error",
                "internal",
                "already_revoked",
                "not_pending",
                "csrf_failed",
                "provider_removed",
                "connect_failed",
                "identity_unavailable",
                "provider_unavailable",
                "provider_misconfigured",
                "invalid_state",
                "not_signed_in",
                "sign_in_failed",
                "proxy_only",
            ]
        );
    }
}
