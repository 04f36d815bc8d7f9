//! Admin: the audit log, filtered by subject, event, actor and time.

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;

use super::{Admin, Pager, filtered, page_number, when};
use crate::AppState;
use crate::db::audit::{AuditFilter, AuditRow};
use crate::error::Result;
use crate::web::extract::QueryOrDefault;

const PER_PAGE: i64 = 50;

/// Event names an operator filters by (a prefix also works, e.g. `admin.`).
pub const EVENTS: &[&str] = &[
    "elicitation.created",
    "elicitation.completed",
    "elicitation.declined",
    "elicitation.expired",
    "elicitation.failed",
    "elicitation.subject_mismatch_refused",
    "state.replay_refused",
    "state.unknown_refused",
    "state.session_mismatch_refused",
    "connection.created",
    "connection.reconnected",
    "connection.reconnect_started",
    "connection.refreshed",
    "connection.needs_reauth",
    "connection.revoked",
    "connection.client_removed",
    "connection.proxied",
    "subject_token.refused",
    "admin.",
    "admin.connection_revoked",
    "admin.access_refused",
    "keys.rotated",
];

pub struct Row {
    pub at: String,
    pub event: String,
    pub actor: String,
    pub subject: String,
    pub provider: String,
    pub client: String,
    pub connection_id: String,
    pub elicitation_id: String,
    pub request_id: String,
    pub detail: String,
}

impl From<&AuditRow> for Row {
    fn from(r: &AuditRow) -> Self {
        let s = |v: &Option<String>| v.clone().unwrap_or_default();
        Self {
            at: when(r.at),
            event: r.event.as_str().to_owned(),
            actor: s(&r.actor),
            subject: s(&r.subject),
            provider: s(&r.provider),
            client: s(&r.client_id),
            connection_id: s(&r.connection_id),
            elicitation_id: s(&r.elicitation_id),
            request_id: s(&r.request_id),
            detail: s(&r.detail),
        }
    }
}

#[derive(Template)]
#[template(path = "admin/audit.html")]
pub struct ListPage<'a> {
    pub subject: &'a str,
    pub event: &'a str,
    pub actor: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub events: &'a [&'a str],
    pub problem: Option<&'a str>,
    pub rows: Vec<Row>,
    pub pager: Pager,
}

#[derive(Debug, Deserialize, Default)]
pub struct ListQuery {
    #[serde(default, deserialize_with = "filtered")]
    subject: Option<String>,
    #[serde(default, deserialize_with = "filtered")]
    event: Option<String>,
    #[serde(default, deserialize_with = "filtered")]
    actor: Option<String>,
    #[serde(default, deserialize_with = "filtered")]
    from: Option<String>,
    #[serde(default, deserialize_with = "filtered")]
    to: Option<String>,
    page: Option<String>,
}

/// `YYYY-MM-DD` (start of that day, UTC) or `YYYY-MM-DDTHH:MM[:SS]` (UTC) as Unix seconds.
pub fn parse_time(s: &str) -> Option<i64> {
    let (date, clock) = match s.split_once(['T', ' ']) {
        Some((d, c)) => (d, Some(c)),
        None => (s, None),
    };
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i32>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let month = time::Month::try_from(u8::try_from(m).ok()?).ok()?;
    let date = time::Date::from_calendar_date(y, month, u8::try_from(day).ok()?).ok()?;
    let (h, min, sec) = match clock {
        None => (0, 0, 0),
        Some(c) => {
            let mut p = c.splitn(3, ':').map(|x| x.parse::<u8>().ok());
            (p.next()??, p.next()??, p.next().flatten().unwrap_or(0))
        }
    };
    let t = time::Time::from_hms(h, min, sec).ok()?;
    Some(
        time::PrimitiveDateTime::new(date, t)
            .assume_utc()
            .unix_timestamp(),
    )
}

pub async fn list(
    State(state): State<AppState>,
    admin: Admin,
    QueryOrDefault(q): QueryOrDefault<ListQuery>,
) -> Result<Response> {
    let mut problem = None;
    let from = q.from.as_deref().and_then(|s| {
        let t = parse_time(s);
        if t.is_none() {
            problem = Some("The start time is not a date like 2026-12-01 (it was ignored).");
        }
        t
    });
    // A bare date as the end means "through that day".
    let to = q.to.as_deref().and_then(|s| {
        let t = parse_time(s).map(|t| if s.len() == 10 { t + 86_400 } else { t });
        if t.is_none() {
            problem = Some("The end time is not a date like 2026-12-01 (it was ignored).");
        }
        t
    });
    let page = page_number(&q.page);
    let rows = state
        .db
        .search_audit(
            &AuditFilter {
                subject: q.subject.clone(),
                event: q.event.clone(),
                actor: q.actor.clone(),
                from,
                to,
                ..Default::default()
            },
            PER_PAGE,
            (page - 1) * PER_PAGE,
        )
        .await?;
    let pager = Pager::new(
        "/admin/audit",
        &[
            ("subject", q.subject.as_deref()),
            ("event", q.event.as_deref()),
            ("actor", q.actor.as_deref()),
            ("from", q.from.as_deref()),
            ("to", q.to.as_deref()),
        ],
        page,
        rows.len(),
        PER_PAGE,
        None,
    );
    Ok(admin.page(
        "audit",
        "Audit log",
        &ListPage {
            subject: q.subject.as_deref().unwrap_or(""),
            event: q.event.as_deref().unwrap_or(""),
            actor: q.actor.as_deref().unwrap_or(""),
            from: q.from.as_deref().unwrap_or(""),
            to: q.to.as_deref().unwrap_or(""),
            events: EVENTS,
            problem,
            rows: rows.iter().map(Row::from).collect(),
            pager,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn dates_and_times_parse_as_utc() {
        assert_eq!(parse_time("1970-01-02"), Some(86_400));
        assert_eq!(parse_time("1970-01-01T01:00"), Some(3_600));
        assert_eq!(parse_time("1970-01-01 00:00:30"), Some(30));
        assert_eq!(parse_time("2026-02-30"), None);
        assert_eq!(parse_time("yesterday"), None);
    }
}
