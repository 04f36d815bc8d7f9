//! `/account`: the signed-in user's own connections, with Disconnect (revokes upstream) and, for
//! broken or disconnected ones, Reconnect (a new connect flow for the same provider, started
//! right here instead of waiting for an app to send a link).

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::connect::shown_name;
use super::pages::render;
use super::session::BrowserSession;
use crate::AppState;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::connections::Connection;
use crate::db::connections::ConnectionStatus;
use crate::elicitations::is_valid_id;
use crate::error::{Error, Result};
use crate::identity::SignedInUser;
use crate::web::admin::when;
use crate::web::extract::{CsrfForm, CsrfProtected, RequestId, SignedIn, not_signed_in};

pub struct Row {
    pub id: String,
    pub provider: String,
    /// The upstream account, as the provider names it (when it says).
    pub account: Option<String>,
    pub status: &'static str,
    pub status_text: &'static str,
    pub scopes: Vec<String>,
    pub since: String,
    pub last_refresh: Option<String>,
    /// Why a broken connection needs the user, in words.
    pub problem: Option<&'static str>,
    pub can_disconnect: bool,
    pub can_reconnect: bool,
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
    SignedIn { user, session }: SignedIn,
    rid: RequestId,
    q: Result<Query<AccountQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let q = q.map(|q| q.0).unwrap_or_default();
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
            account: c.account_label.clone(),
            status: c.status.as_str(),
            status_text: match c.status {
                ConnectionStatus::Active => "Connected",
                ConnectionStatus::NeedsReauth => "Needs reconnecting",
                ConnectionStatus::Revoked => "Disconnected",
            },
            problem: match c.status {
                ConnectionStatus::NeedsReauth => Some(
                    "The service no longer accepts this connection (it may have expired or been revoked there). Your apps cannot use it until you reconnect.",
                ),
                _ => None,
            },
            can_disconnect: c.status != ConnectionStatus::Revoked,
            can_reconnect: c.status != ConnectionStatus::Active
                && state.providers.get(&c.provider).is_some(),
            scopes: c.scopes,
            since: when(c.created_at),
            last_refresh: c.last_refresh_at.map(when),
            id: c.id,
        })
        .collect();
    let csrf = session.csrf_token().await?;
    let notice = match q.done.as_deref() {
        Some("disconnected") => Some(
            "The account was disconnected: access was revoked at the service where it supports that, and the stored tokens were deleted.",
        ),
        _ => None,
    };
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
pub struct ActionForm {
    csrf: String,
}

impl CsrfProtected for ActionForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The signed-in user's own connection `id`, or a page saying no. The form was checked already
/// (`CsrfForm`), so a post without a session failed there first, as before.
async fn own_connection(
    state: &AppState,
    session: &BrowserSession,
    id: &str,
) -> Result<(SignedInUser, Connection)> {
    let user = session.user().await?.ok_or_else(not_signed_in)?;
    let not_yours = || {
        Error::page(
            StatusCode::NOT_FOUND,
            "not_found",
            "No such connection",
            "This connection does not exist or is not yours.",
        )
    };
    if !is_valid_id(id) {
        return Err(not_yours());
    }
    let c = state.db.get_connection(id).await?.ok_or_else(not_yours)?;
    if c.user_ref() != user.user_ref() {
        return Err(not_yours());
    }
    Ok((user, c))
}

pub async fn disconnect(
    State(state): State<AppState>,
    session: BrowserSession,
    rid: RequestId,
    Path(id): Path<String>,
    CsrfForm(_): CsrfForm<ActionForm>,
) -> Result<Response> {
    let (user, c) = own_connection(&state, &session, &id).await?;
    if c.status != ConnectionStatus::Revoked {
        state
            .revoke_connection(&c, &user.subject, rid.as_deref())
            .await?;
    }
    Ok(Redirect::to("/account?done=disconnected").into_response())
}

/// Starts a new connect flow for a broken or disconnected connection: an elicitation for the
/// app that asked for it before (same provider and scopes), then straight to its consent page.
/// The user's apps see the connection working again as soon as it completes.
pub async fn reconnect(
    State(state): State<AppState>,
    session: BrowserSession,
    rid: RequestId,
    Path(id): Path<String>,
    CsrfForm(_): CsrfForm<ActionForm>,
) -> Result<Response> {
    let (user, c) = own_connection(&state, &session, &id).await?;
    if c.status == ConnectionStatus::Active {
        return Ok(Redirect::to("/account").into_response());
    }
    let unavailable = || {
        Error::page(
            StatusCode::GONE,
            "provider_removed",
            "This service can no longer be connected",
            "None of the apps that use this service is configured for it any more. Nothing was changed.",
        )
    };
    let provider = state
        .providers
        .get(&c.provider)
        .cloned()
        .ok_or_else(unavailable)?;
    // The app that asked before, if it may still use this provider; else any app that may.
    let earlier = state.db.elicitations_of_connection(&c.id).await?;
    let usable = |client_id: &str| {
        state
            .clients
            .iter()
            .find(|x| x.id == client_id && x.providers.contains(&c.provider))
    };
    let (client, scopes) = match earlier
        .iter()
        .find_map(|e| usable(&e.client_id).map(|x| (x, e)))
    {
        Some((client, e)) => (client, Some(e.scopes.clone())),
        None => (
            state
                .clients
                .iter()
                .find(|x| x.providers.contains(&c.provider))
                .ok_or_else(unavailable)?,
            None,
        ),
    };
    let e = state
        .create_or_reuse_elicitation(client, &user.subject, &provider, scopes, rid.as_deref())
        .await?;
    state
        .db
        .audit(AuditEvent {
            event: AuditAction::ConnectionReconnectStarted,
            actor: Some(&user.subject),
            issuer: Some(&c.issuer),
            subject: Some(&c.subject),
            provider: Some(&c.provider),
            client_id: Some(&client.id),
            connection_id: Some(&c.id),
            elicitation_id: Some(&e.id),
            request_id: rid.as_deref(),
            detail: Some("from /account"),
        })
        .await;
    Ok(Redirect::to(&format!("/connect/{}", e.id)).into_response())
}
