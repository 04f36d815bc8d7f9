//! Admin: the overview (connections per status, waiting elicitations, latest events).

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::Admin;
use super::audit::Row as AuditRow;
use super::connections::STATUSES;
use crate::AppState;
use crate::db::audit::AuditFilter;
use crate::error::Result;
use crate::web::pages::render;

pub struct Count {
    pub status: &'static str,
    pub label: &'static str,
    pub n: i64,
}

#[derive(Template)]
#[template(path = "admin/overview.html")]
pub struct Page<'a> {
    pub ui: &'a super::super::ui::Ui,
    pub signed_in_as: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub csrf: &'a str,
    pub nav: &'a str,
    pub counts: Vec<Count>,
    pub pending: usize,
    pub events: Vec<AuditRow>,
}

pub async fn show(State(state): State<AppState>, admin: Admin) -> Result<Response> {
    let by_status = state.db.count_connections_by_status().await?;
    let counts = STATUSES
        .iter()
        .map(|(s, l)| Count {
            status: s,
            label: l,
            n: by_status
                .iter()
                .find(|(x, _)| x == s)
                .map(|(_, n)| *n)
                .unwrap_or(0),
        })
        .collect();
    let pending = state.db.pending_elicitations(None, 1000).await?.len();
    let events = state
        .db
        .search_audit(&AuditFilter::default(), 10, 0)
        .await?
        .iter()
        .map(AuditRow::from)
        .collect();
    Ok(render(
        &Page {
            ui: &admin.ui,
            signed_in_as: Some(admin.name()),
            request_id: admin.request_id.as_deref(),
            csrf: &admin.csrf,
            nav: "overview",
            counts,
            pending,
            events,
        },
        StatusCode::OK,
    ))
}
