//! `/account`: the signed-in user's own connections, with Disconnect.

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::connect::shown_name;
use super::flow::start_sign_in;
use super::pages::render;
use super::session::BrowserSession;
use crate::AppState;
use crate::db::connections::ConnectionStatus;
use crate::elicitations::{is_valid_id, rfc3339};
use crate::error::{Error, Result};
use crate::middleware::request_id;

pub struct Row {
    pub id: String,
    pub provider: String,
    pub status: &'static str,
    pub status_text: &'static str,
    pub scopes: Vec<String>,
    pub since: String,
    pub can_disconnect: bool,
}

#[derive(Template)]
#[template(path = "account.html")]
pub struct AccountPage<'a> {
    pub signed_in_as: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub rows: Vec<Row>,
    pub csrf: &'a str,
    pub notice: Option<&'a str>,
}

#[derive(Debug, Deserialize, Default)]
pub struct AccountQuery {
    done: Option<String>,
}

pub async fn show(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    q: Result<Query<AccountQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let q = q.map(|q| q.0).unwrap_or_default();
    let Some(user) = session.user().await? else {
        return start_sign_in(&state, &session, "/account").await;
    };
    let rid = request_id(&headers);
    let rows = state
        .db
        .list_connections(&user.issuer, &user.subject)
        .await?
        .into_iter()
        .map(|c| Row {
            provider: state
                .providers
                .get(&c.provider)
                .map(|p| p.display_name.clone())
                .unwrap_or(c.provider.clone()),
            status: c.status.as_str(),
            status_text: match c.status {
                ConnectionStatus::Active => "Connected",
                ConnectionStatus::NeedsReauth => "Needs reconnecting",
                ConnectionStatus::Revoked => "Disconnected",
            },
            can_disconnect: c.status != ConnectionStatus::Revoked,
            scopes: c.scopes,
            since: rfc3339(c.created_at).replace('T', " ").replace('Z', " UTC"),
            id: c.id,
        })
        .collect();
    let csrf = session.csrf_token().await?;
    let notice =
        (q.done.as_deref() == Some("disconnected")).then_some("The account was disconnected.");
    Ok(render(
        &AccountPage {
            signed_in_as: Some(shown_name(&user)),
            request_id: rid.as_deref(),
            rows,
            csrf: &csrf,
            notice,
        },
        StatusCode::OK,
    ))
}

#[derive(Debug, Deserialize)]
pub struct DisconnectForm {
    csrf: String,
}

pub async fn disconnect(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<DisconnectForm>, FormRejection>,
) -> Result<Response> {
    let Form(form) = form.map_err(|_| {
        Error::page(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "This form is incomplete",
            "Go back, reload the page and try again.",
        )
    })?;
    session.check_csrf(&form.csrf).await?;
    let user = session.user().await?.ok_or_else(|| {
        Error::page(
            StatusCode::UNAUTHORIZED,
            "not_signed_in",
            "You are not signed in",
            "Open /account to sign in first.",
        )
    })?;
    let not_yours = || {
        Error::page(
            StatusCode::NOT_FOUND,
            "not_found",
            "No such connection",
            "This connection does not exist or is not yours.",
        )
    };
    if !is_valid_id(&id) {
        return Err(not_yours());
    }
    let c = state.db.get_connection(&id).await?.ok_or_else(not_yours)?;
    if c.issuer != user.issuer || c.subject != user.subject {
        return Err(not_yours());
    }
    state
        .revoke_connection(&c, &user.subject, request_id(&headers).as_deref())
        .await?;
    Ok(Redirect::to("/account?done=disconnected").into_response())
}
