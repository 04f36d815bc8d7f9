//! Admin: pending elicitations, and recent ones with their outcome.

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;

use super::connections::provider_name;
use super::{Admin, PAGE_SIZE, Pager, filtered, page_number, when};
use crate::AppState;
use crate::db::elicitations::Elicitation;
use crate::error::Result;
use crate::time::now;
use crate::web::extract::QueryOrDefault;

pub struct Row {
    pub id: String,
    pub subject: String,
    pub provider: String,
    pub client: String,
    pub scopes: String,
    pub created: String,
    pub expires: String,
    pub outcome: &'static str,
    pub failure: String,
    pub connection_id: Option<String>,
}

impl Row {
    fn of(state: &AppState, e: &Elicitation) -> Self {
        Self {
            id: e.id.to_string(),
            subject: e.subject.clone(),
            provider: provider_name(state, &e.provider),
            client: state.connect.client_name(&e.client_id).to_owned(),
            scopes: e.scopes.join(" "),
            created: when(e.created_at),
            expires: when(e.expires_at),
            outcome: e.effective_status(now()).as_str(),
            failure: e.failure.clone().unwrap_or_default(),
            connection_id: e.connection_id.as_ref().map(ToString::to_string),
        }
    }
}

#[derive(Template)]
#[template(path = "admin/elicitations.html")]
pub struct ListPage<'a> {
    pub subject: &'a str,
    pub pending: Vec<Row>,
    pub recent: Vec<Row>,
    pub pager: Pager,
}

#[derive(Debug, Deserialize, Default)]
pub struct ListQuery {
    #[serde(default, deserialize_with = "filtered")]
    subject: Option<String>,
    page: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    admin: Admin,
    QueryOrDefault(q): QueryOrDefault<ListQuery>,
) -> Result<Response> {
    let page = page_number(&q.page);
    let pending = state
        .db
        .pending_elicitations(q.subject.as_deref(), 100)
        .await?;
    let recent = state
        .db
        .finished_elicitations(q.subject.as_deref(), PAGE_SIZE, (page - 1) * PAGE_SIZE)
        .await?;
    let pager = Pager::new(
        "/admin/elicitations",
        &[("subject", q.subject.as_deref())],
        page,
        recent.len(),
        PAGE_SIZE,
        None,
    );
    Ok(admin.page(
        "elicitations",
        "Elicitations",
        &ListPage {
            subject: q.subject.as_deref().unwrap_or(""),
            pending: pending.iter().map(|e| Row::of(&state, e)).collect(),
            recent: recent.iter().map(|e| Row::of(&state, e)).collect(),
            pager,
        },
    ))
}
