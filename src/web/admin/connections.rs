//! Admin: the connection list (search, filters, pages), one connection with its history, and
//! revocation with a confirmation step.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::audit::Row as AuditEventRow;
use super::{Admin, PAGE_SIZE, Pager, filter_value, filtered, page_number, when, when_opt};
use crate::AppState;
use crate::connect::elicitations::is_valid_id;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::connections::{Connection, ConnectionFilter, ConnectionStatus};
use crate::error::{Error, Refusal, Result};
use crate::time::now;
use crate::web::extract::QueryOrDefault;
use crate::web::extract::{CsrfForm, CsrfProtected};

pub const STATUSES: &[(&str, &str)] = &[
    ("active", "Active"),
    ("needs_reauth", "Needs reconnecting"),
    ("revoked", "Revoked"),
];

pub fn status_text(s: ConnectionStatus) -> &'static str {
    match s {
        ConnectionStatus::Active => "Active",
        ConnectionStatus::NeedsReauth => "Needs reconnecting",
        ConnectionStatus::Revoked => "Revoked",
    }
}

pub struct Row {
    pub id: String,
    pub subject: String,
    /// The organisation that owns it, else the one whose own app issued it ('' for neither).
    pub organization: String,
    pub provider: String,
    /// Which account at the provider: its label, else its id (a user may hold several).
    pub account: String,
    pub status: &'static str,
    pub status_text: &'static str,
    pub scopes: String,
    pub expires: String,
    pub updated: String,
    pub last_error: Option<String>,
}

impl Row {
    fn of(state: &AppState, c: &Connection) -> Self {
        Self {
            id: c.id.to_string(),
            // An organisation's connection is no user's: its owner is named instead.
            subject: if c.subject.is_empty() {
                format!("organisation {}", c.organization)
            } else {
                c.subject.clone()
            },
            organization: if c.organization.is_empty() {
                c.client_organization.clone()
            } else {
                c.organization.clone()
            },
            provider: provider_name(state, &c.provider),
            account: c
                .account_label
                .clone()
                .or_else(|| (!c.account_id.is_empty()).then(|| c.account_id.clone()))
                .unwrap_or_else(|| "—".into()),
            status: c.status.as_str(),
            status_text: status_text(c.status),
            scopes: c.scopes.join(" "),
            expires: expiry_text(c),
            updated: when(c.updated_at),
            last_error: c.last_error.clone(),
        }
    }
}

pub fn provider_name(state: &AppState, name: &str) -> String {
    state
        .providers
        .get(name)
        .map(|p| p.display_name.clone())
        .unwrap_or_else(|| name.to_owned())
}

fn expiry_text(c: &Connection) -> String {
    match c.expires_at {
        None if c.status == ConnectionStatus::Revoked => "—".into(),
        None => "does not expire".into(),
        Some(t) if t <= now() => format!("{} (expired)", when(t)),
        Some(t) => when(t),
    }
}

pub struct Choice {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

#[derive(Template)]
#[template(path = "admin/connections.html")]
pub struct ListPage<'a> {
    pub q: &'a str,
    pub organization: &'a str,
    pub providers: Vec<Choice>,
    pub statuses: Vec<Choice>,
    pub rows: Vec<Row>,
    pub total: i64,
    pub pager: Pager,
}

#[derive(Debug, Deserialize, Default)]
pub struct ListQuery {
    #[serde(default, deserialize_with = "filtered")]
    q: Option<String>,
    #[serde(default, deserialize_with = "filtered")]
    provider: Option<String>,
    #[serde(default, deserialize_with = "filtered")]
    status: Option<String>,
    #[serde(default, deserialize_with = "filtered")]
    organization: Option<String>,
    page: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    admin: Admin,
    QueryOrDefault(q): QueryOrDefault<ListQuery>,
) -> Result<Response> {
    let filter = ConnectionFilter {
        subject: q.q,
        provider: q.provider,
        status: q.status.filter(|s| STATUSES.iter().any(|(v, _)| v == s)),
        organization: q.organization,
    };
    let page = page_number(&q.page);
    let (conns, total) = state
        .db
        .search_connections(&filter, PAGE_SIZE, (page - 1) * PAGE_SIZE)
        .await?;
    let rows: Vec<Row> = conns.iter().map(|c| Row::of(&state, c)).collect();
    let pager = Pager::new(
        "/admin/connections",
        &[
            ("q", filter.subject.as_deref()),
            ("provider", filter.provider.as_deref()),
            ("status", filter.status.as_deref()),
            ("organization", filter.organization.as_deref()),
        ],
        page,
        rows.len(),
        PAGE_SIZE,
        Some(total),
    );
    let providers = state
        .providers
        .iter()
        .map(|p| Choice {
            value: p.name.clone(),
            label: p.display_name.clone(),
            selected: filter.provider.as_deref() == Some(p.name.as_str()),
        })
        .collect();
    let statuses = STATUSES
        .iter()
        .map(|(v, l)| Choice {
            value: (*v).into(),
            label: (*l).into(),
            selected: filter.status.as_deref() == Some(*v),
        })
        .collect();
    Ok(admin.page(
        "connections",
        "Connections",
        &ListPage {
            q: filter.subject.as_deref().unwrap_or(""),
            organization: filter.organization.as_deref().unwrap_or(""),
            providers,
            statuses,
            rows,
            total,
            pager,
        },
    ))
}

#[derive(Template)]
#[template(path = "admin/connection.html")]
pub struct DetailPage<'a> {
    pub notice: Option<&'a str>,
    pub c: Row,
    pub issuer: String,
    pub account_label: String,
    pub has_refresh_token: bool,
    pub created: String,
    pub last_refresh: String,
    pub key_ids: String,
    pub requested_by: Vec<String>,
    pub can_revoke: bool,
    pub history: Vec<AuditEventRow>,
    /// Per-connection parameters and what was learned at the callback, as `name = value`.
    pub params: Vec<(String, String)>,
    pub metadata: Vec<(String, String)>,
}

#[derive(Debug, Deserialize, Default)]
pub struct DetailQuery {
    done: Option<String>,
}

async fn load(state: &AppState, id: &str) -> Result<Connection> {
    let missing = || {
        Error::refused(
            Refusal::NotFound,
            "No such connection",
            "There is no connection with this id. It may have been removed.",
        )
    };
    if !is_valid_id(id) {
        return Err(missing());
    }
    state.db.get_connection(id).await?.ok_or_else(missing)
}

pub async fn show(
    State(state): State<AppState>,
    admin: Admin,
    Path(id): Path<String>,
    QueryOrDefault(q): QueryOrDefault<DetailQuery>,
) -> Result<Response> {
    let c = load(&state, &id).await?;
    let history = state.db.connection_history(&c.id).await?;
    let mut requested_by: Vec<String> = Vec::new();
    for e in state.db.elicitations_of_connection(&c.id).await? {
        let name = state
            .clients
            .get(&e.client_id)
            .map(|x| {
                if x.name == x.id {
                    x.id.clone()
                } else {
                    format!("{} ({})", x.name, x.id)
                }
            })
            .unwrap_or(e.client_id);
        if !requested_by.contains(&name) {
            requested_by.push(name);
        }
    }
    let notice = match q.done.as_deref() {
        Some("revoked") => Some(
            "The connection was revoked: its tokens are deleted here, and revocation was sent to the provider where it supports it (see the history below).",
        ),
        _ => None,
    };
    Ok(admin.page(
        "connections",
        &format!("Connection of {}", c.subject),
        &DetailPage {
            notice,
            issuer: c.issuer.clone(),
            params: c
                .params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            metadata: c
                .metadata
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect(),
            account_label: {
                let mut a = c.account_label.clone().unwrap_or_else(|| "—".into());
                if !c.account_id.is_empty() {
                    a.push_str(&format!(" (provider's account id {})", c.account_id));
                }
                if let Some(n) = &c.nickname {
                    a.push_str(&format!(", named “{n}” by the user"));
                }
                a
            },
            has_refresh_token: c.has_refresh_token(),
            created: when(c.created_at),
            last_refresh: when_opt(c.last_refresh_at),
            key_ids: {
                let ids = c.key_ids();
                if ids.is_empty() {
                    "—".into()
                } else {
                    ids.join(", ")
                }
            },
            requested_by,
            can_revoke: c.status != ConnectionStatus::Revoked,
            history: history.iter().map(AuditEventRow::from).collect(),
            c: Row::of(&state, &c),
        },
    ))
}

#[derive(Template)]
#[template(path = "admin/revoke.html")]
pub struct ConfirmPage<'a> {
    pub csrf: &'a str,
    pub c: Row,
}

pub async fn confirm_revoke(
    State(state): State<AppState>,
    admin: Admin,
    Path(id): Path<String>,
) -> Result<Response> {
    let c = load(&state, &id).await?;
    if c.status == ConnectionStatus::Revoked {
        return Ok(Redirect::to(&format!("/admin/connections/{}", c.id)).into_response());
    }
    Ok(admin.page(
        "connections",
        "Revoke a connection",
        &ConfirmPage {
            csrf: &admin.csrf,
            c: Row::of(&state, &c),
        },
    ))
}

#[derive(Debug, Deserialize)]
pub struct RevokeForm {
    csrf: String,
    reason: Option<String>,
}

impl CsrfProtected for RevokeForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn revoke(
    State(state): State<AppState>,
    admin: Admin,
    Path(id): Path<String>,
    CsrfForm(form): CsrfForm<RevokeForm>,
) -> Result<Response> {
    let c = load(&state, &id).await?;
    if c.status == ConnectionStatus::Revoked {
        return Err(Error::refused(
            Refusal::AlreadyRevoked,
            "Already revoked",
            "This connection was revoked already. Nothing was changed.",
        ));
    }
    let reason = filter_value(&form.reason);
    let rid = admin.request_id.as_deref();
    let report = state
        .grants
        .revoke_connection(&c, &admin.user.subject, rid)
        .await?;
    let detail = format!(
        "refresh_token={} access_token={}{}",
        report.refresh_token,
        report.access_token,
        reason
            .as_deref()
            .map(|r| format!(" reason={r}"))
            .unwrap_or_default()
    );
    state
        .db
        .audit(AuditEvent {
            actor: Some(&admin.user.subject),
            request_id: rid,
            detail: Some(&detail),
            ..AuditEvent::connection(AuditAction::AdminConnectionRevoked, &c)
        })
        .await;
    Ok(Redirect::to(&format!("/admin/connections/{}?done=revoked", c.id)).into_response())
}
