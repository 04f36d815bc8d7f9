//! The append-only audit log of security-relevant events. Never given a secret.

use sqlx::AnyConnection;

use super::{Db, now};

/// Writes one audit row on `conn` (in the caller's transaction, if it has one) and mirrors it
/// to the log under the `audit` target.
pub async fn insert_audit(conn: &mut AnyConnection, e: &AuditEvent<'_>) -> Result<(), sqlx::Error> {
    tracing::info!(
        target: "audit",
        event = e.event,
        actor = e.actor,
        subject = e.subject,
        provider = e.provider,
        client_id = e.client_id,
        connection_id = e.connection_id,
        elicitation_id = e.elicitation_id,
        request_id = e.request_id,
        detail = e.detail,
    );
    sqlx::query(
        "INSERT INTO audit_events (at, event, actor, issuer, subject, provider, client_id, connection_id, elicitation_id, request_id, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(now())
    .bind(e.event)
    .bind(e.actor)
    .bind(e.issuer)
    .bind(e.subject)
    .bind(e.provider)
    .bind(e.client_id)
    .bind(e.connection_id)
    .bind(e.elicitation_id)
    .bind(e.request_id)
    .bind(e.detail)
    .execute(conn)
    .await?;
    Ok(())
}

/// One event; every field but `event` is optional context.
#[derive(Debug, Default, Clone)]
pub struct AuditEvent<'a> {
    pub event: &'a str,
    pub actor: Option<&'a str>,
    pub issuer: Option<&'a str>,
    pub subject: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub client_id: Option<&'a str>,
    pub connection_id: Option<&'a str>,
    pub elicitation_id: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub detail: Option<&'a str>,
}

/// Filters over the audit log. `event` matches as a prefix (`admin.` finds every admin action).
#[derive(Debug, Default, Clone)]
pub struct AuditFilter {
    pub subject: Option<String>,
    pub event: Option<String>,
    pub actor: Option<String>,
    /// Unix seconds, inclusive.
    pub from: Option<i64>,
    /// Unix seconds, exclusive.
    pub to: Option<i64>,
    pub connection_id: Option<String>,
    /// Only events with a larger id (for following the log).
    pub after_id: Option<i64>,
}

#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct AuditRow {
    pub id: i64,
    pub at: i64,
    pub event: String,
    pub actor: Option<String>,
    pub subject: Option<String>,
    pub provider: Option<String>,
    pub client_id: Option<String>,
    pub connection_id: Option<String>,
    pub elicitation_id: Option<String>,
    pub request_id: Option<String>,
    pub detail: Option<String>,
}

impl Db {
    /// Records an event outside any other change, mirroring it to the log under the `audit`
    /// target. A failure to write is logged, not raised: use it only for events that describe no
    /// state change of their own (a refused request, an admin looking at a page). An event that
    /// describes a change is written in that change's transaction (`Change::audit`).
    pub async fn audit(&self, e: AuditEvent<'_>) {
        let r = match self.pool.acquire().await {
            Ok(mut conn) => insert_audit(&mut conn, &e).await,
            Err(err) => Err(err),
        };
        if let Err(err) = r {
            tracing::warn!(error = %err, event = e.event, "could not write the audit log");
        }
    }

    /// Retention: deletes events recorded before `cutoff` (Unix seconds).
    pub async fn delete_audit_before(&self, cutoff: i64) -> Result<u64, sqlx::Error> {
        Ok(sqlx::query("DELETE FROM audit_events WHERE at < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    /// One page of events matching `f`, newest first.
    pub async fn search_audit(
        &self,
        f: &AuditFilter,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<AuditRow>, sqlx::Error> {
        let event = f
            .event
            .as_deref()
            .map(|e| format!("{}%", super::connections::like_escape(e)));
        sqlx::query_as(
            "SELECT id, at, event, actor, subject, provider, client_id, connection_id, elicitation_id, request_id, detail \
             FROM audit_events WHERE ($1 IS NULL OR subject = $1) AND ($2 IS NULL OR event LIKE $2 ESCAPE '\\') \
             AND ($3 IS NULL OR at >= $3) AND ($4 IS NULL OR at < $4) AND ($5 IS NULL OR connection_id = $5) \
             AND ($6 IS NULL OR id > $6) AND ($7 IS NULL OR actor = $7) \
             ORDER BY id DESC LIMIT $8 OFFSET $9",
        )
        .bind(f.subject.as_deref())
        .bind(event.as_deref())
        .bind(f.from)
        .bind(f.to)
        .bind(f.connection_id.as_deref())
        .bind(f.after_id)
        .bind(f.actor.as_deref())
        .bind(limit)
        .bind(offset)
        .fetch_all(&self.pool)
        .await
    }

    pub async fn recent_audit(
        &self,
        subject: Option<&str>,
        limit: i64,
    ) -> Result<Vec<AuditRow>, sqlx::Error> {
        sqlx::query_as(
            "SELECT id, at, event, actor, subject, provider, client_id, connection_id, elicitation_id, request_id, detail \
             FROM audit_events WHERE ($1 IS NULL OR subject = $1) ORDER BY id DESC LIMIT $2",
        )
        .bind(subject)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }
}
