//! The append-only audit log of security-relevant events. Never given a secret.

use super::{Db, now};

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
    /// Records an event, and mirrors it to the log under the `audit` target. A failure to write
    /// is logged, not raised: the action it describes has already happened.
    pub async fn audit(&self, e: AuditEvent<'_>) {
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
        let r = sqlx::query(
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
        .execute(&self.pool)
        .await;
        if let Err(err) = r {
            tracing::warn!(error = %err, event = e.event, "could not write the audit log");
        }
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
