//! mcp-connect as an OAuth authorization server for its API clients, with one grant: RFC 8693
//! token exchange at `POST /oauth2/token` (HTTP Basic client authentication, form bodies, OAuth
//! error bodies), and its RFC 8414 metadata.

pub mod client;
pub mod error;
pub mod exchange;
pub mod metadata;

/// Every error body of the token endpoint (RFC 6749 §5.2).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct OAuthErrorBody {
    /// `invalid_request`, `invalid_client`, `invalid_grant`, `unauthorized_client`,
    /// `unsupported_grant_type`, `invalid_scope`, `invalid_target`, `interaction_required`,
    /// `account_selection_required`, `temporarily_unavailable` or `server_error`.
    pub error: String,
    /// A human sentence (never a token or a secret).
    pub error_description: String,
    /// `interaction_required`: the elicitation to hand to the MCP client, exactly as
    /// `/v1/tokens` with `elicit: true` carries it (`url`, `mcp` payloads for both protocol
    /// eras, `request_state`, ...).
    #[schema(value_type = Option<Object>)]
    pub elicitation: Option<serde_json::Value>,
    /// `invalid_scope`: the scopes the grant lacks.
    pub missing_scopes: Option<Vec<String>>,
    /// `account_selection_required`: the accounts to choose from (send one as `account`).
    pub accounts: Option<Vec<crate::error::AccountChoice>>,
}
