//! `/account/organization`: what an organisation's administrator manages — the connections the
//! organisation owns (Disconnect) and its own OAuth apps per provider (set, delete). Anyone
//! else gets the "only an organisation administrator" page.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use secrecy::SecretString;
use serde::Deserialize;

use super::account::ActionForm;
use super::connect::shown_name;
use super::extract::{CsrfForm, CsrfProtected, QueryOrDefault, RequestId, SignedIn};
use super::pages::render;
use super::ui::Ui;
use crate::AppState;
use crate::error::Result;
use crate::grants::apps::AppSource;

/// One connection the organisation owns.
pub struct ConnectionRow {
    pub id: String,
    pub provider: String,
    pub account: Option<String>,
    pub status: &'static str,
    pub status_text: String,
    pub live: bool,
}

/// The organisation's app at one provider (never its secret).
pub struct AppRow {
    pub provider: String,
    pub provider_name: String,
    pub client_id: String,
    /// Set in the operator's configuration: not changed here.
    pub configured: bool,
}

#[derive(Template)]
#[template(path = "organization.html")]
pub struct OrganizationPage<'a> {
    pub ui: &'a Ui,
    pub signed_in_as: Option<&'a str>,
    pub organization: String,
    pub connections: Vec<ConnectionRow>,
    pub apps: Vec<AppRow>,
    /// `(name, display name)` of the providers an app may be set for.
    pub providers: Vec<(String, String)>,
    pub csrf: &'a str,
    pub notice: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
pub struct PageQuery {
    done: Option<String>,
}

pub async fn show(
    State(state): State<AppState>,
    SignedIn { user, session }: SignedIn,
    ui: Ui,
    QueryOrDefault(q): QueryOrDefault<PageQuery>,
) -> Result<Response> {
    let view = state.connect.organization_view(&user).await?;
    let csrf = session.csrf_token().await?;
    let display = |name: &str| {
        state
            .providers
            .get(name)
            .map_or_else(|| name.to_owned(), |p| p.display_name.clone())
    };
    let connections = view
        .connections
        .iter()
        .map(|c| ConnectionRow {
            id: c.id.to_string(),
            provider: display(&c.provider),
            account: c.nickname.clone().or_else(|| c.account_label.clone()),
            status: c.status.as_str(),
            status_text: ui.t(&format!("account-status-{}", c.status.as_str())),
            live: c.status != crate::db::connections::ConnectionStatus::Revoked,
        })
        .collect();
    let apps = view
        .apps
        .into_iter()
        .map(|a| AppRow {
            provider: display(&a.provider),
            provider_name: a.provider,
            client_id: a.client_id,
            configured: a.source == AppSource::Configured,
        })
        .collect();
    let notice = match q.done.as_deref() {
        Some("disconnected") => Some(ui.t("organization-disconnected")),
        Some("app-set") => Some(ui.t("organization-app-set")),
        Some("app-deleted") => Some(ui.t("organization-app-deleted")),
        _ => None,
    };
    Ok(render(
        &OrganizationPage {
            ui: &ui,
            signed_in_as: Some(shown_name(&user)),
            organization: view.organization,
            connections,
            apps,
            providers: view.oauth_providers,
            csrf: &csrf,
            notice,
        },
        StatusCode::OK,
    ))
}

pub async fn disconnect(
    State(state): State<AppState>,
    rid: RequestId,
    SignedIn { user, .. }: SignedIn,
    Path(id): Path<String>,
    CsrfForm(_): CsrfForm<ActionForm>,
) -> Result<Response> {
    state
        .connect
        .revoke_organization_connection(&user, &id, rid.as_deref())
        .await?;
    Ok(Redirect::to("/account/organization?done=disconnected").into_response())
}

#[derive(Deserialize)]
pub struct AppForm {
    csrf: String,
    provider: String,
    client_id: String,
    #[serde(default)]
    client_secret: Option<SecretString>,
}

impl CsrfProtected for AppForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn set_app(
    State(state): State<AppState>,
    SignedIn { user, .. }: SignedIn,
    CsrfForm(form): CsrfForm<AppForm>,
) -> Result<Response> {
    state
        .connect
        .set_organization_app(
            &user,
            &form.provider,
            &form.client_id,
            form.client_secret.as_ref(),
        )
        .await?;
    Ok(Redirect::to("/account/organization?done=app-set").into_response())
}

pub async fn delete_app(
    State(state): State<AppState>,
    SignedIn { user, .. }: SignedIn,
    Path(provider): Path<String>,
    CsrfForm(_): CsrfForm<ActionForm>,
) -> Result<Response> {
    state
        .connect
        .delete_organization_app(&user, &provider)
        .await?;
    Ok(Redirect::to("/account/organization?done=app-deleted").into_response())
}
