//! Admin: the overview (connections per status, waiting elicitations, latest events).

use askama::Template;
use axum::extract::State;
use axum::response::Response;

use super::Admin;
use super::audit::Row as AuditRow;
use super::connections::STATUSES;
use crate::AppState;
use crate::db::audit::AuditFilter;
use crate::error::Result;

pub struct Count {
    pub status: &'static str,
    pub label: &'static str,
    pub n: i64,
}

#[derive(Template)]
#[template(path = "admin/overview.html")]
pub struct Page {
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
    Ok(admin.page(
        "overview",
        "Administration",
        &Page {
            counts,
            pending,
            events,
        },
    ))
}
