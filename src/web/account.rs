//! `/account`: the signed-in user's own connections, with Disconnect (revokes upstream) and, for
//! broken or disconnected ones, Reconnect (a new connect flow for the same provider, started
//! right here instead of waiting for an app to send a link).

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::connect::shown_name;
use super::extract::QueryOrDefault;
use super::flow::start_sign_in;
use super::own::OwnConnection;
use super::pages::render;
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::connect::scopes::{ScopeView, describe};
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::connections::ConnectionStatus;
use crate::error::{Error, Refusal, Result};
use crate::i18n::Msg;
use crate::ids::ConnectionId;
use crate::web::extract::{CsrfForm, CsrfProtected, RequestId};

pub struct Row {
    pub id: ConnectionId,
    pub provider: String,
    /// The upstream account, as the provider names it (when it says).
    pub account: Option<String>,
    /// The user's own name for the account.
    pub nickname: Option<String>,
    /// The provider and the account, as buttons' labels name them ("GitHub octocat").
    pub name: String,
    /// The user's default account at this provider, among several.
    pub is_default: bool,
    /// Live, not the default, with another live account at the provider.
    pub can_make_default: bool,
    pub status: &'static str,
    pub status_text: String,
    pub scopes: Vec<ScopeView>,
    pub since: String,
    pub last_refresh: Option<String>,
    /// Why a broken connection needs the user, in words.
    pub problem: Option<String>,
    pub can_disconnect: bool,
    pub can_reconnect: bool,
    /// An API key or password (replaced by typing a new one, not by signing in again).
    pub is_credential: bool,
    /// The names of the apps that may use this grant (the ones named when it was approved).
    pub apps: Vec<String>,
}

/// One provider's accounts on the page, the default first.
pub struct Group {
    pub provider: String,
    /// What disconnecting does at this provider.
    pub revocation: Option<String>,
    pub rows: Vec<Row>,
}

#[derive(Template)]
#[template(path = "account.html")]
pub struct AccountPage<'a> {
    pub ui: &'a Ui,
    pub signed_in_as: Option<&'a str>,
    pub groups: Vec<Group>,
    pub csrf: &'a str,
    pub notice: Option<String>,
    /// The organisation the user administers (a link to manage it).
    pub organization: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
pub struct AccountQuery {
    done: Option<String>,
}

pub async fn show(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    ui: Ui,
    QueryOrDefault(q): QueryOrDefault<AccountQuery>,
) -> Result<Response> {
    let Some(user) = session.user().await? else {
        return start_sign_in(&state, &headers, "/account").await;
    };
    let connections = state
        .db
        .list_connections(&user.issuer, &user.subject)
        .await?;
    let mut apps = Vec::with_capacity(connections.len());
    for c in &connections {
        apps.push(
            state
                .grants
                .connection_apps(c)
                .await?
                .iter()
                .map(|id| state.connect.client_name(id).to_owned())
                .collect::<Vec<_>>(),
        );
    }
    // Listed by provider, each provider's default account first (`list_connections`).
    let mut seen = std::collections::HashSet::new();
    let live_at = |provider: &str| {
        connections
            .iter()
            .filter(|c| c.provider == provider && c.status != ConnectionStatus::Revoked)
            .count()
    };
    let live: Vec<usize> = connections.iter().map(|c| live_at(&c.provider)).collect();
    let mut groups: Vec<Group> = Vec::new();
    for ((c, apps), live) in connections.into_iter().zip(apps).zip(live) {
        let p = state.providers.get(&c.provider);
        let first_of_provider = seen.insert(c.provider.clone());
        if first_of_provider {
            groups.push(Group {
                provider: p
                    .map(|p| p.display_name.clone())
                    .unwrap_or(c.provider.clone()),
                revocation: p.map(|p| p.revocation_summary()),
                rows: Vec::new(),
            });
        }
        let row = {
            let is_credential = crate::config::AuthKind::is_credential_type(&c.token_type);
            // Listed default first per provider (`DEFAULT_FIRST`).
            let is_default = first_of_provider && live > 1 && c.status != ConnectionStatus::Revoked;
            let display = p
                .map(|p| p.display_name.clone())
                .unwrap_or(c.provider.clone());
            let shown = c.nickname.clone().or_else(|| c.account_label.clone());
            Row {
                name: match &shown {
                    Some(a) => format!("{display} {a}"),
                    None => display.clone(),
                },
                nickname: c.nickname.clone(),
                is_default,
                can_make_default: !is_default && live > 1 && c.status != ConnectionStatus::Revoked,
                apps,
                provider: p
                    .map(|p| p.display_name.clone())
                    .unwrap_or(c.provider.clone()),
                account: c.account_label.clone(),
                status: c.status.as_str(),
                status_text: ui.t(match c.status {
                    ConnectionStatus::Active => "account-status-active",
                    ConnectionStatus::NeedsReauth => "account-status-needs-reauth",
                    ConnectionStatus::Revoked => "account-status-revoked",
                }),
                problem: match c.status {
                    ConnectionStatus::NeedsReauth => Some(ui.t("account-problem-needs-reauth")),
                    _ => None,
                },
                can_disconnect: c.status != ConnectionStatus::Revoked,
                can_reconnect: (c.status != ConnectionStatus::Active || is_credential)
                    && p.is_some(),
                is_credential,
                scopes: describe(p.map(|p| p.as_ref()), &c.scopes, ui.lang),
                since: ui.when(c.created_at),
                last_refresh: c.last_refresh_at.map(|t| ui.when(t)),
                id: c.id,
            }
        };
        if let Some(g) = groups.last_mut() {
            g.rows.push(row);
        }
    }
    let csrf = session.csrf_token().await?;
    let notice = match q.done.as_deref() {
        Some("disconnected") => Some(ui.t("account-notice-disconnected")),
        Some("default") => Some(ui.t("account-notice-default")),
        Some("nickname") => Some(ui.t("account-notice-nickname")),
        _ => None,
    };
    Ok(render(
        &AccountPage {
            ui: &ui,
            signed_in_as: Some(shown_name(&user)),
            groups,
            csrf: &csrf,
            notice,
            organization: state
                .connect
                .membership_of(&user)
                .filter(|m| m.admin)
                .map(|m| m.organization),
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

pub async fn disconnect(
    State(state): State<AppState>,
    rid: RequestId,
    own: OwnConnection<CsrfForm<ActionForm>>,
) -> Result<Response> {
    let (user, c) = (own.user, own.item);
    if c.status != ConnectionStatus::Revoked {
        state
            .grants
            .revoke_connection(&c, &user.subject, rid.as_deref())
            .await?;
    }
    Ok(Redirect::to("/account?done=disconnected").into_response())
}

/// Makes the account the user's default at its provider.
pub async fn make_default(
    State(state): State<AppState>,
    rid: RequestId,
    own: OwnConnection<CsrfForm<ActionForm>>,
) -> Result<Response> {
    let (user, c) = (own.user, own.item);
    state
        .grants
        .make_default(&c, &user.subject, rid.as_deref())
        .await?;
    Ok(Redirect::to("/account?done=default").into_response())
}

#[derive(Debug, Deserialize)]
pub struct NicknameForm {
    csrf: String,
    #[serde(default)]
    nickname: String,
}

impl CsrfProtected for NicknameForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// Names the account (an empty name removes it).
pub async fn nickname(
    State(state): State<AppState>,
    rid: RequestId,
    own: OwnConnection<CsrfForm<NicknameForm>>,
) -> Result<Response> {
    let (user, c) = (own.user, own.item);
    state
        .grants
        .set_nickname(
            &c,
            Some(&own.form.0.nickname),
            &user.subject,
            rid.as_deref(),
        )
        .await?;
    Ok(Redirect::to("/account?done=nickname").into_response())
}

/// Starts a new connect flow for a broken or disconnected connection: an elicitation for the
/// app that asked for it before (same provider and scopes), then straight to its consent page.
/// The user's apps see the connection working again as soon as it completes.
pub async fn reconnect(
    State(state): State<AppState>,
    rid: RequestId,
    own: OwnConnection<CsrfForm<ActionForm>>,
) -> Result<Response> {
    let (user, c) = (own.user, own.item);
    // An active connection is only "reconnected" to replace its typed credential.
    if c.status == ConnectionStatus::Active
        && !crate::config::AuthKind::is_credential_type(&c.token_type)
    {
        return Ok(Redirect::to("/account").into_response());
    }
    let unavailable = || {
        Error::refused(
            Refusal::ProviderRemoved,
            Msg::new("reconnect-unavailable-title"),
            Msg::new("reconnect-unavailable-lead"),
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
            .get(client_id)
            .map(|x| &**x)
            .filter(|x| x.providers.contains(&c.provider))
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
        .connect
        .create_or_reuse_elicitation_with(
            client,
            &user.subject,
            &provider,
            crate::connect::elicitations::ElicitationAsk {
                scopes,
                params: c.params.clone(),
                account: crate::db::elicitations::AccountAsk {
                    owner: Default::default(),
                    add: false,
                    reconnect: Some(c.id.clone()),
                },
            },
            rid.as_deref(),
        )
        .await?;
    state
        .db
        .audit(AuditEvent {
            actor: Some(&user.subject),
            client_id: Some(&client.id),
            elicitation_id: Some(&e.id),
            request_id: rid.as_deref(),
            detail: Some("from /account"),
            ..AuditEvent::connection(AuditAction::ConnectionReconnectStarted, &c)
        })
        .await;
    Ok(Redirect::to(&format!("/connect/{}", e.id)).into_response())
}
