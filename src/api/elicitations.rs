//! `POST /v1/elicitations`, `GET /v1/elicitations/{id}?wait=`.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;

use super::{ApiClient, ApiJson, ApiQuery, validate_subject};
use crate::AppState;
use crate::elicitations::ElicitationView;
use crate::error::{Error, Result};
use crate::middleware::request_id;

/// The longest a long-poll is held.
pub const MAX_WAIT_SECONDS: u64 = 60;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateElicitation {
    /// The `sub` of the user's validated MCP access token.
    pub subject: String,
    pub provider: String,
    /// Defaults to the provider's configured scopes.
    pub scopes: Option<Vec<String>>,
}

pub fn validate_scopes(scopes: &Option<Vec<String>>) -> Result<()> {
    if let Some(s) = scopes {
        if s.len() > 50
            || s.iter().any(|x| {
                x.is_empty()
                    || x.len() > 200
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
    responses((status = 201, body = ElicitationView), (status = 400), (status = 401), (status = 403)),
    security(("api_key" = [])))]
pub async fn create(
    State(state): State<AppState>,
    client: ApiClient,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CreateElicitation>,
) -> Result<(StatusCode, Json<ElicitationView>)> {
    validate_subject(&body.subject)?;
    validate_scopes(&body.scopes)?;
    let provider = client.provider(&state, &body.provider)?;
    let e = state
        .create_or_reuse_elicitation(
            &client.0,
            &body.subject,
            provider,
            body.scopes,
            request_id(&headers).as_deref(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(state.elicitation_view(&e)?)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowQuery {
    /// Seconds to hold the request while the elicitation is pending (at most 60).
    wait: Option<u64>,
}

#[utoipa::path(get, path = "/v1/elicitations/{id}",
    params(("id" = String, Path), ("wait" = Option<u64>, Query, description = "hold up to this many seconds (max 60) while pending")),
    responses((status = 200, body = ElicitationView), (status = 404)),
    security(("api_key" = [])))]
pub async fn show(
    State(state): State<AppState>,
    client: ApiClient,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ShowQuery>,
) -> Result<Json<ElicitationView>> {
    let e = state.client_elicitation(&client.0, &id).await?;
    let e = match q.wait {
        Some(w) if w > MAX_WAIT_SECONDS => {
            return Err(Error::invalid(format!(
                "wait must be at most {MAX_WAIT_SECONDS} seconds"
            )));
        }
        Some(w) if w > 0 => {
            let _slot = state.limits.long_poll(&client.0.id)?;
            state
                .waiters
                .wait(&state.db, &e.id, Duration::from_secs(w))
                .await?
                .ok_or_else(|| Error::not_found("no such elicitation"))?
        }
        _ => e,
    };
    Ok(Json(state.elicitation_view(&e)?))
}
