//! `POST /v1/tokens`: a valid access token for a user's connection, or what to do instead.

use std::sync::Arc;

use axum::extract::State;
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

use super::{ApiClient, ApiJson, ApiLang};
use crate::AppState;
use crate::api::error::ApiError;
use crate::connect::token_request::{Awaited, ProofFor, TokenAsk, Whose};
use crate::error::Error;
use crate::grants::tokens::FreshToken;
use crate::ids::{ConnectionId, ProviderName};
use crate::providers::Provider;
use crate::server::middleware::RequestId;
use crate::time::rfc3339;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// The `sub` of the user's validated MCP access token: 1 to 255 characters, not only
    /// whitespace, without control characters. Required unless `subject_token` is given (then
    /// it must be the token's `sub`).
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000-\u001f\u007f-\u009f]*$",
        value_type = String
    )]
    #[serde(default)]
    pub subject: Option<String>,
    /// Proof of subject: the MCP access token the user presented to this MCP server, checked at
    /// the identity issuer (JWT with this client's `subject_token_audience`, or introspection);
    /// its `sub` is the subject. Required when the client has `require_subject_token`.
    #[schema(max_length = 8192)]
    pub subject_token: Option<String>,
    /// Scopes this call needs. When the stored grant lacks any of them, the answer is
    /// `insufficient_scope` (403) with `missing_scopes`; with `elicit`, `authorization_required`
    /// with an elicitation for the union of the stored and the asked scopes (the stored grant
    /// keeps working until the user approves). Same limits as on `/v1/elicitations`.
    #[schema(max_items = 50, value_type = Option<Vec<super::elicitations::Scope>>)]
    pub scopes: Option<Vec<String>>,
    /// A provider this API client may use (a configured provider name: letters, digits, - and _).
    #[schema(pattern = r"^[A-Za-z0-9_-]+$", value_type = String)]
    pub provider: ProviderName,
    /// Which of the user's accounts at the provider: its id (`account.id` in
    /// `/v1/connections`), or its label or nickname when no other account shares it. Without
    /// it: the user's default account (or, for a client with `account_selection = "explicit"`
    /// and a user with several accounts, `account_selection_required`). An account that is not
    /// connected is `not_connected` (with `elicit`, an elicitation to add it).
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]+$"
    )]
    pub account: Option<String>,
    /// Whose connection: `user` (the user's own only) or `organization` (their organisation's
    /// only, which needs a `subject_token` whose claims name the organisation). Without it: the
    /// user's own, and when they have none this client may use, their organisation's — only
    /// with a `subject_token`: a bare `subject` never reaches an organisation's connection.
    pub owner: Option<super::elicitations::OwnerKind>,
    /// Refresh first when the token expires within this many seconds (default 60, at most
    /// 86400).
    #[schema(minimum = 0, maximum = 86400)]
    #[serde(default, deserialize_with = "super::opt_i64")]
    pub min_ttl_seconds: Option<i64>,
    /// Refresh even if the token looks valid (e.g. the provider just refused it). Never answers
    /// with the token held before: when there is no refresh token, or the provider refuses the
    /// refresh, the answer is `reauthorization_required` (with `elicit`, carrying the
    /// elicitation); when the provider cannot be reached, `upstream_error`.
    #[serde(default)]
    pub force_refresh: bool,
    /// When not connected, answer `authorization_required` with a ready elicitation.
    #[serde(default)]
    pub elicit: bool,
    /// Wait for this elicitation to finish first (with `wait_seconds`).
    pub elicitation_id: Option<String>,
    /// Instead of `elicitation_id`: the `request_state` of an elicitation, exactly as handed out
    /// (and as echoed back by the MCP client in a 2026-07-28 retry). Refused with
    /// `invalid_request_state` when altered, expired, or issued to another client or subject.
    /// Not together with `elicitation_id`.
    #[schema(max_length = 4096)]
    pub request_state: Option<String>,
    /// With `elicitation_id` or `request_state`: hold the request up to this many seconds (at
    /// most 60) while the elicitation is pending. Refused without one of them.
    #[schema(maximum = 60)]
    #[serde(default, deserialize_with = "super::opt_u64")]
    pub wait_seconds: Option<u64>,
    /// For a DPoP-bound token (`token_type: "DPoP"`: an upstream MCP server whose authorization
    /// server uses DPoP, RFC 9449): the request you will make with it. The answer then carries
    /// `dpop_proof`, a proof for exactly that request, signed with mcp-connect's key (which never
    /// leaves it). Ask again for every request: each proof is for one request. Required for a
    /// DPoP-bound token (else `invalid_request`); ignored for other tokens.
    pub dpop: Option<DpopRequest>,
}

/// The request a DPoP proof is made for (RFC 9449 §4.2).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DpopRequest {
    /// The HTTP method, in capitals (`POST`).
    #[schema(max_length = 16, pattern = r"^[A-Z]+$")]
    pub htm: String,
    /// The absolute http(s) URL the request goes to, at the MCP server (its origin); a query or
    /// fragment is left out of the proof. A URL that does not parse is refused with
    /// `invalid_request`.
    #[schema(max_length = 2048, pattern = r"^https?://")]
    pub htu: String,
    /// The `DPoP-Nonce` the MCP server answered with (a `401` with `error="use_dpop_nonce"`),
    /// exactly: printable ASCII without `"` or `\` (RFC 9449 §8).
    #[schema(max_length = 1024, pattern = r"^[!#-\[\]-~]+$")]
    pub nonce: Option<String>,
}

// Borrowed from the token and its connection: nothing is copied to write it. (A plain comment:
// a doc comment would become the schema's description.)
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TokenResponse<'a> {
    /// The OAuth access token; for `api_key` and `basic` credentials, the key or
    /// `username:password` (use `header_name` and `header_value` to present it).
    pub access_token: &'a str,
    pub token_type: &'a str,
    /// RFC 3339; absent when the provider's token does not expire.
    pub expires_at: Option<String>,
    pub scopes: &'a [String],
    #[schema(value_type = String)]
    pub connection_id: &'a ConnectionId,
    /// Which of the user's accounts at the provider this token is for.
    pub account: crate::db::connections::AccountRef,
    /// What was learned about the connection when it was made, by the names the provider's
    /// catalog entry gives them: Salesforce `instance_url`, QuickBooks `realm_id`, Slack
    /// `team_id`, Atlassian `cloud_id`, ... Empty for providers without any. Upstream MCP
    /// servers (`kind = "mcp"`): `authorization_server`, the one that issued the grant.
    #[schema(value_type = Object)]
    pub metadata: &'a crate::db::connections::Metadata,
    /// The connection's per-connection parameters (`tenant`, `subdomain`, `shop`, `region`).
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub params: &'a crate::db::connections::ConnParams,
    /// `oauth2`, or `api_key` / `basic` for providers whose users type a credential.
    pub credential_type: &'static str,
    /// `api_key` only: the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<&'a str>,
    /// `basic` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<&'a str>,
    /// `basic` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<&'a str>,
    /// `api_key` and `basic`: the header to send the credential in (e.g. `Authorization`,
    /// `X-API-Key`) and its whole value (e.g. `Bearer <key>`, `Basic <base64>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_value: Option<String>,
    /// DPoP-bound tokens only (`token_type: "DPoP"`): the proof for the request named in `dpop`.
    /// Send `Authorization: DPoP <access_token>` and `DPoP: <dpop_proof>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpop_proof: Option<&'a str>,
}

impl<'a> TokenResponse<'a> {
    pub(crate) fn new(t: &'a FreshToken, provider: &crate::providers::Provider) -> Self {
        let c = &*t.connection;
        let secret = t.access_token.expose_secret();
        let mut r = TokenResponse {
            access_token: secret,
            token_type: &c.token_type,
            expires_at: c.expires_at.map(rfc3339),
            scopes: &c.scopes,
            connection_id: &c.id,
            account: c.account(),
            metadata: &c.metadata,
            params: &c.params,
            credential_type: "oauth2",
            api_key: None,
            username: None,
            password: None,
            header_name: None,
            header_value: None,
            dpop_proof: t.dpop_proof.as_deref(),
        };
        let settings = provider
            .credential
            .as_ref()
            .filter(|_| crate::config::AuthKind::is_credential_type(&c.token_type));
        if let Some(s) = settings {
            let (name, value) = s.header_for(secret);
            r.header_name = Some(name);
            r.header_value = Some(value);
            if c.token_type == "basic" {
                r.credential_type = "basic";
                let (u, p) = secret.split_once(':').unwrap_or((secret, ""));
                r.username = Some(u);
                r.password = Some(p);
            } else {
                r.credential_type = "api_key";
                r.api_key = Some(secret);
            }
        }
        r
    }
}

/// What `fetch` answers with: the token and its provider, written as a [`TokenResponse`]
/// that borrows from them.
pub struct TokenAnswer(FreshToken, Arc<Provider>);

impl axum::response::IntoResponse for TokenAnswer {
    fn into_response(self) -> axum::response::Response {
        ApiJson(TokenResponse::new(&self.0, &self.1)).into_response()
    }
}

/// The rule for `account` (also the token exchange's extension parameter).
pub(crate) fn validate_account(account: Option<&str>) -> Result<(), Error> {
    match account {
        Some(a) if a.is_empty() || a.chars().count() > 255 || a.chars().any(char::is_control) => {
            Err(Error::invalid(
                "account must be 1 to 255 characters without control characters",
            ))
        }
        _ => Ok(()),
    }
}

#[utoipa::path(post, path = "/v1/tokens", request_body = TokenRequest,
    responses((status = 200, body = TokenResponse),
        (status = 400, body = crate::api::error::ErrorBody, description = "`invalid_request` (also: a DPoP-bound token asked for without `dpop`, or a `dpop` naming a URL off the MCP server), or `invalid_request_state` (with `reason`: `invalid`, `foreign` or `expired`)"),
        (status = 401, body = crate::api::error::ErrorBody, description = "`unauthorized` (API key), or `invalid_subject_token`: the subject_token is expired, for another audience, not signed by the identity issuer, or for another subject; or missing where this client must send one"),
        (status = 403, body = crate::api::error::ErrorBody, description = "`forbidden_provider`: this API client may not use the provider; `insufficient_scope` (with `missing_scopes`): the grant lacks scopes named in `scopes` (without `elicit`); `forbidden`: `owner: \"organization\"` without a `subject_token` whose claims name the user's organisation"),
        (status = 404, body = crate::api::error::ErrorBody, description = "`not_connected`; `not_found` when no such provider is configured or the awaited elicitation does not exist"),
        (status = 409, body = crate::api::error::ErrorBody, description = "`authorization_required` or `reauthorization_required`, with `elicitation` when `elicit` was set (with `scopes` the grant lacks: an elicitation for the union); `authorization_declined` (with `elicitation_id`) when the awaited elicitation was declined and nothing is connected; `account_selection_required` (with `accounts`) when the user holds several accounts at the provider and this client must name one"),
        (status = 413, body = crate::api::error::ErrorBody, description = "`invalid_request`: the body is larger than 16 KiB"),
        (status = 502, body = crate::api::error::ErrorBody, description = "`upstream_error`: the provider failed while refreshing; try again. With `reason` `provider_misconfigured` and `elicitation_id`: the awaited elicitation failed because the provider is misconfigured, and nothing is connected; an operator must fix it (a new elicitation would fail the same way)")),
    security(("api_key" = [])))]
pub async fn fetch(
    State(state): State<AppState>,
    client: ApiClient,
    rid: RequestId,
    ApiLang(lang): ApiLang,
    ApiJson(req): ApiJson<TokenRequest>,
) -> std::result::Result<TokenAnswer, ApiError> {
    super::elicitations::validate_scopes(&req.scopes)?;
    validate_account(req.account.as_deref())?;
    let dpop = req
        .dpop
        .map(|d| {
            crate::providers::mcp::ProofTarget::parse(&d.htm, &d.htu, d.nonce.as_deref())
                .map_err(Error::invalid)
        })
        .transpose()?
        .map_or(ProofFor::Unnamed, ProofFor::Request);
    let ask = TokenAsk {
        client: &client.0,
        subject: req.subject.as_deref(),
        subject_token: req.subject_token.as_deref(),
        provider: &req.provider,
        account: req.account.as_deref(),
        whose: match req.owner {
            None => Whose::Any,
            Some(super::elicitations::OwnerKind::User) => Whose::Own,
            Some(super::elicitations::OwnerKind::Organization) => Whose::Organization,
        },
        scopes: req.scopes,
        min_ttl_seconds: req.min_ttl_seconds,
        force_refresh: req.force_refresh,
        elicit: req.elicit,
        elicit_scopes: true,
        awaited: match (req.elicitation_id, req.request_state) {
            (Some(_), Some(_)) => {
                return Err(
                    Error::invalid("give elicitation_id or request_state, not both").into(),
                );
            }
            (Some(id), None) => Some(Awaited::Id(id)),
            (None, Some(sealed)) => Some(Awaited::RequestState(sealed)),
            (None, None) => None,
        },
        wait_seconds: req.wait_seconds,
        request_id: rid.0,
        lang,
        dpop,
    };
    let (token, provider) = state
        .connect
        .token_for(ask, || state.limits.long_poll(&client.0.id))
        .await??;
    Ok(TokenAnswer(token, provider))
}
