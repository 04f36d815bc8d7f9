//! `GET /v1/connections?subject=`, `DELETE /v1/connections/{id}`.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

use super::{ApiClient, ApiJson, ApiQuery};
use crate::AppState;
use crate::connect::elicitations::is_valid_id;
use crate::db::connections::{Connection, ConnectionStatus};
use crate::error::{Error, Result};
use crate::grants::revoke::RevocationReport;
use crate::ids::ConnectionId;
use crate::server::middleware::request_id;
use crate::time::rfc3339;

/// A connection's metadata. Never carries a token.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ConnectionView {
    #[schema(value_type = String)]
    pub id: ConnectionId,
    pub subject: String,
    pub provider: String,
    pub status: ConnectionStatus,
    pub scopes: Vec<String>,
    /// The account's label (also `account.label`; kept for callers written before accounts).
    pub account_label: Option<String>,
    /// Which account at the provider this connection is: name it as `account` in
    /// `POST /v1/tokens` (its `id`, or its label or nickname when no other account shares it).
    pub account: crate::db::connections::AccountRef,
    /// Whether it is the user's default account at the provider (the one a token request
    /// without `account` gets).
    pub default: bool,
    /// When the access token expires (RFC 3339), if it does.
    pub expires_at: Option<String>,
    pub has_refresh_token: bool,
    pub created_at: String,
    pub updated_at: String,
    pub last_refresh_at: Option<String>,
    /// The last refresh error, without secrets.
    pub last_error: Option<String>,
}

impl From<&Connection> for ConnectionView {
    fn from(c: &Connection) -> Self {
        Self {
            id: c.id.clone(),
            subject: c.subject.clone(),
            provider: c.provider.clone(),
            status: c.status,
            scopes: c.scopes.clone(),
            account_label: c.account_label.clone(),
            account: c.account(),
            default: false,
            expires_at: c.expires_at.map(rfc3339),
            has_refresh_token: c.has_refresh_token(),
            created_at: rfc3339(c.created_at),
            updated_at: rfc3339(c.updated_at),
            last_refresh_at: c.last_refresh_at.map(rfc3339),
            last_error: c.last_error.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    subject: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ConnectionList {
    pub connections: Vec<ConnectionView>,
}

/// The `Subject-Token` header, if sent (a token never goes into a URL).
fn subject_token(headers: &HeaderMap) -> Result<Option<&str>> {
    headers
        .get(crate::connect::subject::SUBJECT_TOKEN_HEADER)
        .map(|v| {
            v.to_str()
                .map_err(|_| Error::invalid("the Subject-Token header must be ASCII"))
        })
        .transpose()
}

#[utoipa::path(get, path = "/v1/connections",
    params(("Subject-Token" = Option<String>, Header, description = "proof of subject: the user's MCP access token (see `subject_token` on `POST /v1/tokens`); required when this API client has `require_subject_token`"),
        ("subject" = String, Query, min_length = 1, max_length = 255, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000-\u001f\u007f-\u009f]*$",
        description = "the user's `sub`: 1 to 255 characters, not only whitespace, without control characters. With `Subject-Token`, it must be that token's `sub` (the header alone is accepted too)")),
    responses((status = 200, body = ConnectionList, description = "The subject's connections that this API client may use (those the user approved for it)"),
        (status = 400, body = crate::api::error::ErrorBody, description = "`invalid_request`: `subject` missing or out of bounds, or an unknown query parameter"),
        (status = 401, body = crate::api::error::ErrorBody, description = "`unauthorized` (API key) or `invalid_subject_token`")),
    security(("api_key" = [])))]
pub async fn list(
    State(state): State<AppState>,
    client: ApiClient,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<ApiJson<ConnectionList>> {
    let token = subject_token(&headers)?;
    if q.subject.is_none() && token.is_none() && !client.0.require_subject_token {
        return Err(Error::invalid("the subject query parameter is required"));
    }
    let subject = state
        .connect
        .resolve_subject(
            &client.0,
            q.subject.as_deref(),
            token,
            request_id(&headers).as_deref(),
        )
        .await?;
    let all = state
        .db
        .list_connections(state.identity.issuer(), &subject)
        .await?;
    let mut connections = Vec::new();
    for c in all
        .iter()
        .filter(|c| client.0.providers.contains(&c.provider))
    {
        if state.grants.may_use(&client.0, c).await? {
            let mut v = ConnectionView::from(c);
            // Listed default first per provider: the first live one is what a token request
            // without `account` gets.
            v.default = c.status != ConnectionStatus::Revoked
                && !connections.iter().any(|x: &ConnectionView| {
                    x.provider == v.provider && x.status != ConnectionStatus::Revoked
                });
            connections.push(v);
        }
    }
    Ok(ApiJson(ConnectionList { connections }))
}

#[utoipa::path(delete, path = "/v1/connections/{id}", params(("id" = String, Path, description = "the connection's id"),
        ("Subject-Token" = Option<String>, Header, description = "proof of subject (required when this API client has `require_subject_token`): the connection must be this subject's")),
    responses((status = 200, body = RevocationReport, description = "This API client (and its grant group) can no longer use the grant. When no other app the user approved uses it, it is revoked (at the provider where it can) and its tokens deleted; otherwise the tokens stay for those apps (`tokens_deleted: false`)"),
        (status = 401, body = crate::api::error::ErrorBody, description = "`unauthorized` (API key) or `invalid_subject_token`"),
        (status = 404, body = crate::api::error::ErrorBody, description = "`not_found`: no such connection for this API client (another app's grant is not found either)")),
    security(("api_key" = [])))]
pub async fn revoke(
    State(state): State<AppState>,
    client: ApiClient,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<ApiJson<RevocationReport>> {
    let not_found = || Error::not_found("no such connection");
    if !is_valid_id(&id) {
        return Err(not_found());
    }
    let rid = request_id(&headers);
    let token = subject_token(&headers)?;
    let proven = if token.is_some() || client.0.require_subject_token {
        Some(
            state
                .connect
                .resolve_subject(&client.0, None, token, rid.as_deref())
                .await?,
        )
    } else {
        None
    };
    let c = state.db.get_connection(&id).await?.ok_or_else(not_found)?;
    if !client.0.providers.contains(&c.provider)
        || c.issuer != state.identity.issuer()
        || proven.as_ref().is_some_and(|s| *s != c.subject)
        || !state.grants.may_use(&client.0, &c).await?
    {
        return Err(not_found());
    }
    let report = state
        .grants
        .disconnect_client(&c, &client.0, rid.as_deref())
        .await?;
    Ok(ApiJson(report))
}
