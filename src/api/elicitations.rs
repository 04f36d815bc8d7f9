//! `POST /v1/elicitations`, `GET /v1/elicitations/{id}?wait=`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::{ApiClient, ApiJson, ApiLang, ApiQuery};
use crate::AppState;
use crate::api::error::ApiError;
use crate::connect::elicitations::ElicitationView;
use crate::error::{Error, Result};
use crate::server::middleware::RequestId;

pub use crate::connect::token_request::MAX_WAIT_SECONDS;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateElicitation {
    /// The `sub` of the user's validated MCP access token: 1 to 255 characters, not only
    /// whitespace, without control characters. Required unless `subject_token` is given (then
    /// it must be the token's `sub`).
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    #[serde(default)]
    pub subject: Option<String>,
    /// Proof of subject: the MCP access token the user presented to this MCP server (see
    /// `POST /v1/tokens`).
    #[schema(max_length = 8192)]
    pub subject_token: Option<String>,
    /// A provider this API client may use (`forbidden_provider` otherwise; `not_found` when no
    /// such provider is configured).
    #[schema(pattern = r"^[A-Za-z0-9_-]+$")]
    pub provider: String,
    /// Defaults to the provider's configured scopes; the scopes the user already granted for the
    /// account being reconnected are added (one grant per account). At most 50, each 1 to 200
    /// characters without whitespace, control characters or commas.
    #[schema(max_items = 50, value_type = Option<Vec<Scope>>)]
    pub scopes: Option<Vec<String>>,
    /// Per-connection parameters the provider's catalog entry declares (`tenant`, `subdomain`,
    /// `shop`, `region`, ...), each validated against the entry's pattern or choices; the
    /// consent page asks the user for those not given. Unknown names are refused.
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
    pub params: Option<crate::db::connections::ConnParams>,
    /// Ask the user to connect another account at the provider rather than reconnect the one
    /// they have: the consent page says "Add another ... account", and the provider is asked to
    /// let the user pick an account where its catalog entry says how. Which account it becomes
    /// is the provider's answer: connecting one that is already connected reconnects it.
    #[serde(default)]
    pub add_account: bool,
    /// Whose connection this makes: `user` (the default), or `organization` — a connection the
    /// user's organisation owns and every member's apps use, which only an administrator of
    /// that organisation can complete (the consent page says so). The organisation is the one
    /// the `subject_token` names; without one, the administrator's own at sign-in.
    #[serde(default)]
    pub owner: OwnerKind,
}

/// Whose connection an elicitation makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OwnerKind {
    #[default]
    User,
    Organization,
}

/// One OAuth scope as `scopes` takes it (for the OpenAPI document; `validate_scopes` checks).
pub struct Scope;

impl utoipa::PartialSchema for Scope {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .min_length(Some(1))
            .max_length(Some(200))
            .pattern(Some(r"^[^,\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$"))
            .description(Some("1 to 200 characters without whitespace, control characters or commas"))
            .into()
    }
}

impl utoipa::ToSchema for Scope {}

pub fn validate_scopes(scopes: &Option<Vec<String>>) -> Result<()> {
    if let Some(s) = scopes {
        if s.len() > 50
            || s.iter().any(|x| {
                x.is_empty()
                    || x.chars().count() > 200
                    || x.chars()
                        .any(|c| c.is_whitespace() || c.is_control() || c == ',')
            })
        {
            return Err(Error::invalid(
                "scopes must be at most 50 non-empty strings without spaces or commas",
            ));
        }
    }
    Ok(())
}

#[utoipa::path(post, path = "/v1/elicitations", request_body = CreateElicitation,
    responses((status = 201, body = ElicitationView, description = "A new elicitation, or the pending one for the same subject and provider"),
        (status = 400, body = crate::api::error::ErrorBody, description = "`invalid_request`: the body is not JSON, lacks a field, breaks a limit, or gives an unknown or invalid parameter"),
        (status = 401, body = crate::api::error::ErrorBody, description = "`unauthorized` (API key) or `invalid_subject_token`"),
        (status = 403, body = crate::api::error::ErrorBody, description = "`forbidden_provider`: this API client may not use the provider; `forbidden`: `owner: \"organization\"` where organisations are not configured, or with a `subject_token` that names no organisation"),
        (status = 404, body = crate::api::error::ErrorBody, description = "`not_found`: no such provider is configured"),
        (status = 413, body = crate::api::error::ErrorBody, description = "`invalid_request`: the body is larger than 16 KiB")),
    security(("api_key" = [])))]
pub async fn create(
    State(state): State<AppState>,
    client: ApiClient,
    rid: RequestId,
    ApiLang(lang): ApiLang,
    ApiJson(body): ApiJson<CreateElicitation>,
) -> Result<(StatusCode, ApiJson<ElicitationView>)> {
    validate_scopes(&body.scopes)?;
    let principal = state
        .connect
        .resolve_principal(
            &client.0,
            body.subject.as_deref(),
            body.subject_token.as_deref(),
            rid.as_deref(),
        )
        .await?;
    let owner = match body.owner {
        OwnerKind::User => crate::db::elicitations::Owner::User,
        OwnerKind::Organization => state
            .connect
            .organization_owner(&principal, body.subject_token.is_some())?,
    };
    let subject = principal.subject;
    let provider = client.provider(&state, &body.provider)?;
    let params = body.params.unwrap_or_default();
    crate::providers::params::check_given(provider, &params)
        .map_err(|e| Error::invalid(format!("params: {e}")))?;
    let e = state
        .connect
        .create_or_reuse_elicitation_with(
            &client.0,
            &subject,
            provider,
            crate::connect::elicitations::ElicitationAsk {
                scopes: body.scopes,
                params,
                account: crate::db::elicitations::AccountAsk {
                    add: body.add_account,
                    reconnect: None,
                    owner,
                },
            },
            rid.as_deref(),
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        ApiJson(state.connect.elicitation_view_in(&e, lang)?),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowQuery {
    /// Seconds to hold the request while the elicitation is pending (at most 60).
    wait: Option<u64>,
}

#[utoipa::path(get, path = "/v1/elicitations/{id}",
    params(("id" = String, Path, description = "the elicitation's id"),
        ("wait" = Option<u64>, Query, maximum = 60, description = "hold up to this many seconds (max 60) while pending")),
    responses((status = 200, body = ElicitationView),
        (status = 400, body = crate::api::error::ErrorBody, description = "`invalid_request`: an unknown query parameter or a bad `wait`"),
        (status = 404, body = crate::api::error::ErrorBody, description = "`not_found`: no such elicitation for this API client")),
    security(("api_key" = [])))]
pub async fn show(
    State(state): State<AppState>,
    client: ApiClient,
    ApiLang(lang): ApiLang,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ShowQuery>,
) -> std::result::Result<ApiJson<ElicitationView>, ApiError> {
    let e = state.connect.client_elicitation(&client.0, &id).await?;
    let e = match q.wait {
        Some(w) if w > MAX_WAIT_SECONDS => {
            return Err(
                Error::invalid(format!("wait must be at most {MAX_WAIT_SECONDS} seconds")).into(),
            );
        }
        Some(w) if w > 0 => {
            // Nothing of the request is kept while waiting (see `ApiLang`), nor this first
            // read: the wait reads the elicitation again once it changes.
            drop(e);
            let _slot = state.limits.long_poll(&client.0.id)?;
            state
                .waiters
                .wait(&state.db, &id, Duration::from_secs(w))
                .await?
                .ok_or_else(|| Error::not_found("no such elicitation"))?
        }
        _ => e,
    };
    Ok(ApiJson(state.connect.elicitation_view_in(&e, lang)?))
}
