//! The append-only audit log of security-relevant events. Never given a secret.

use sqlx::AnyConnection;

use super::{Db, Error, Result, now};
use crate::db::elicitations::ElicitationStatus;
use crate::names::named_enum;

named_enum! {
    /// What an audit row records, stored as its dotted name (`connection.revoked`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum AuditAction ("audit event") {
        ElicitationCreated = "elicitation.created",
        ElicitationCompleted = "elicitation.completed",
        ElicitationDeclined = "elicitation.declined",
        ElicitationExpired = "elicitation.expired",
        ElicitationFailed = "elicitation.failed",
        /// A signed-in user opened a connect link made for someone else (or an unknown one).
        ElicitationSubjectMismatchRefused = "elicitation.subject_mismatch_refused",
        StateUnknownRefused = "state.unknown_refused",
        StateReplayRefused = "state.replay_refused",
        StateSessionMismatchRefused = "state.session_mismatch_refused",
        StateExpiredRefused = "state.expired_refused",
        StateWrongProviderRefused = "state.wrong_provider_refused",
        ConnectionCreated = "connection.created",
        ConnectionReconnected = "connection.reconnected",
        ConnectionReconnectStarted = "connection.reconnect_started",
        ConnectionRefreshed = "connection.refreshed",
        ConnectionNeedsReauth = "connection.needs_reauth",
        ConnectionRevoked = "connection.revoked",
        /// The user made this account their default at the provider.
        ConnectionMadeDefault = "connection.made_default",
        /// The user named (or unnamed) this account.
        ConnectionNicknamed = "connection.nicknamed",
        /// An operator imported this grant from another token store (`connections import`).
        ConnectionImported = "connection.imported",
        AdminConnectionRevoked = "admin.connection_revoked",
        AdminAccessRefused = "admin.access_refused",
        KeysRotated = "keys.rotated",
        /// One app's use of a grant ended (`DELETE /v1/connections/{id}` by one of several apps).
        ConnectionClientRemoved = "connection.client_removed",
        /// A client used the connection through the proxy (one row per client and connection
        /// per hour, `detail` counting the calls).
        ConnectionProxied = "connection.proxied",
        /// A `subject_token` was refused (expired, foreign audience, forged, other subject).
        SubjectTokenRefused = "subject_token.refused",
        /// The provider's validation endpoint refused a typed API key or password.
        CredentialValidationRefused = "credential.validation_refused",
        /// The provider's validation endpoint could not be reached; nothing was stored.
        CredentialValidationUnavailable = "credential.validation_unavailable",
        /// An organisation's administrator set its own OAuth app at a provider.
        OrganizationAppSet = "organization.app_set",
        /// An organisation's administrator deleted its own app (its connections were revoked).
        OrganizationAppDeleted = "organization.app_deleted",
    }
}

impl AuditAction {
    /// The action recording that an elicitation reached `status`.
    pub fn elicitation(status: ElicitationStatus) -> Self {
        match status {
            ElicitationStatus::Pending => Self::ElicitationCreated,
            ElicitationStatus::Completed => Self::ElicitationCompleted,
            ElicitationStatus::Declined => Self::ElicitationDeclined,
            ElicitationStatus::Expired => Self::ElicitationExpired,
            ElicitationStatus::Failed => Self::ElicitationFailed,
        }
    }
}

impl std::fmt::Display for AuditAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, not `write_str`: the CLI lines up events with `{:<38}`.
        f.pad(self.as_str())
    }
}

/// Comparing with a stored name (tests and filters read the log as text).
impl PartialEq<&str> for AuditAction {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for AuditAction {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl serde::Serialize for AuditAction {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Writes one audit row on `conn` (in the caller's transaction, if it has one) and mirrors it
/// to the log under the `audit` target.
pub async fn insert_audit(conn: &mut AnyConnection, e: &AuditEvent<'_>) -> Result<()> {
    NewAuditRow::logged(e)
        .bind(sqlx::query(&insert_sql(1, 1)))
        .execute(conn)
        .await?;
    Ok(())
}

/// The columns an audit row is written with, in [`NewAuditRow::bind`]'s order.
const AUDIT_COLUMNS: &str = "at, event, actor, issuer, subject, provider, client_id, connection_id, elicitation_id, request_id, detail, organization";
/// How many values [`NewAuditRow::bind`] binds.
pub(super) const AUDIT_COLUMN_COUNT: usize = 12;

/// The `INSERT` of `rows` audit rows, their placeholders numbered from `$first`.
pub(super) fn insert_sql(first: usize, rows: usize) -> String {
    format!(
        "INSERT INTO audit_events ({AUDIT_COLUMNS}) VALUES {}",
        super::change::placeholders(first, AUDIT_COLUMN_COUNT, rows)
    )
}

/// An audit row to write, its values owned (a change collects them until it commits).
#[derive(Debug, Clone)]
pub(super) struct NewAuditRow {
    at: i64,
    event: AuditAction,
    fields: [Option<String>; 10],
}

impl NewAuditRow {
    /// The row for `e`, mirrored to the log under the `audit` target.
    pub(super) fn logged(e: &AuditEvent<'_>) -> Self {
        tracing::info!(
            target: "audit",
            event = e.event.as_str(),
            actor = e.actor,
            subject = e.subject,
            provider = e.provider,
            client_id = e.client_id,
            connection_id = e.connection_id,
            elicitation_id = e.elicitation_id,
            request_id = e.request_id,
            detail = e.detail,
            organization = e.organization,
        );
        Self {
            at: now(),
            event: e.event,
            fields: [
                e.actor,
                e.issuer,
                e.subject,
                e.provider,
                e.client_id,
                e.connection_id,
                e.elicitation_id,
                e.request_id,
                e.detail,
                e.organization,
            ]
            .map(|f| f.map(str::to_owned)),
        }
    }

    /// Binds this row's values, in [`AUDIT_COLUMNS`]' order.
    pub(super) fn bind<'q>(
        &'q self,
        q: super::change::Statement<'q>,
    ) -> super::change::Statement<'q> {
        let q = q.bind(self.at).bind(self.event.as_str());
        self.fields.iter().fold(q, |q, f| q.bind(f.as_deref()))
    }
}

/// How many events [`Db::connection_history`] lists.
pub const CONNECTION_HISTORY: i64 = 100;

/// One event; every field but `event` is optional context.
#[derive(Debug, Clone)]
pub struct AuditEvent<'a> {
    pub event: AuditAction,
    pub actor: Option<&'a str>,
    pub issuer: Option<&'a str>,
    pub subject: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub client_id: Option<&'a str>,
    pub connection_id: Option<&'a str>,
    pub elicitation_id: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub detail: Option<&'a str>,
    /// The organisation the action concerns (its connection, its app, its member's flow).
    pub organization: Option<&'a str>,
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

impl<'a> AuditEvent<'a> {
    /// An event about connection `c`: its user, provider and id filled in.
    pub fn connection(event: AuditAction, c: &'a crate::db::connections::Connection) -> Self {
        let some = |v: &'a String| (!v.is_empty()).then_some(v.as_str());
        Self {
            issuer: Some(&c.issuer),
            subject: some(&c.subject),
            provider: Some(&c.provider),
            connection_id: Some(&c.id),
            // The organisation that owns it, else the one whose app issued it.
            organization: some(&c.organization).or_else(|| some(&c.client_organization)),
            ..Self::new(event)
        }
    }

    /// An event with no context yet; fill the rest with `..AuditEvent::new(action)`.
    pub fn new(event: AuditAction) -> Self {
        Self {
            event,
            actor: None,
            issuer: None,
            subject: None,
            provider: None,
            client_id: None,
            connection_id: None,
            elicitation_id: None,
            request_id: None,
            detail: None,
            organization: None,
        }
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
#[cfg_attr(test, derive(Default))]
struct Row {
    id: i64,
    at: i64,
    event: String,
    actor: Option<String>,
    subject: Option<String>,
    provider: Option<String>,
    client_id: Option<String>,
    connection_id: Option<String>,
    elicitation_id: Option<String>,
    request_id: Option<String>,
    detail: Option<String>,
    organization: Option<String>,
}

/// A row whose event name does not decode is an error naming the row, never a default.
impl TryFrom<Row> for AuditRow {
    type Error = Error;

    fn try_from(r: Row) -> Result<Self> {
        let event: AuditAction = r
            .event
            .parse()
            .map_err(|e: String| Error::undecodable("audit_events", r.id, e))?;
        Ok(Self {
            id: r.id,
            at: r.at,
            event,
            actor: r.actor,
            subject: r.subject,
            provider: r.provider,
            client_id: r.client_id,
            connection_id: r.connection_id,
            elicitation_id: r.elicitation_id,
            request_id: r.request_id,
            detail: r.detail,
            organization: r.organization,
        })
    }
}

fn decode(rows: Vec<Row>) -> Result<Vec<AuditRow>> {
    rows.into_iter().map(AuditRow::try_from).collect()
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditRow {
    pub id: i64,
    pub at: i64,
    pub event: AuditAction,
    pub actor: Option<String>,
    pub subject: Option<String>,
    pub provider: Option<String>,
    pub client_id: Option<String>,
    pub connection_id: Option<String>,
    pub elicitation_id: Option<String>,
    pub request_id: Option<String>,
    pub detail: Option<String>,
    pub organization: Option<String>,
}

impl Db {
    /// Records an event outside any other change, mirroring it to the log under the `audit`
    /// target. A failure to write is logged, not raised: use it only for events that describe no
    /// state change of their own (a refused request, an admin looking at a page). An event that
    /// describes a change is written in that change's transaction (`Change::audit`).
    pub async fn audit(&self, e: AuditEvent<'_>) {
        let r = match self.pool.acquire().await {
            Ok(mut conn) => {
                let r = insert_audit(&mut conn, &e).await;
                conn.finished(&r);
                r
            }
            Err(err) => Err(err.into()),
        };
        if let Err(err) = r {
            tracing::warn!(error = %err, event = e.event.as_str(), "could not write the audit log");
        }
    }

    /// Retention: deletes events recorded before `cutoff` (Unix seconds).
    pub async fn delete_audit_before(&self, cutoff: i64) -> Result<u64> {
        Ok(sqlx::query("DELETE FROM audit_events WHERE at < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    /// The last [`CONNECTION_HISTORY`] events of connection `id`, newest first (what the admin
    /// page and `mcp-connect connections show` list).
    pub async fn connection_history(&self, id: &str) -> Result<Vec<AuditRow>> {
        self.search_audit(
            &AuditFilter {
                connection_id: Some(id.to_owned()),
                ..Default::default()
            },
            CONNECTION_HISTORY,
            0,
        )
        .await
    }

    /// One page of events matching `f`, newest first.
    pub async fn search_audit(
        &self,
        f: &AuditFilter,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<AuditRow>> {
        let event = f
            .event
            .as_deref()
            .map(|e| format!("{}%", super::connections::like_escape(e)));
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, at, event, actor, subject, provider, client_id, connection_id, elicitation_id, request_id, detail, organization \
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
        .await?;
        decode(rows)
    }

    pub async fn recent_audit(&self, subject: Option<&str>, limit: i64) -> Result<Vec<AuditRow>> {
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, at, event, actor, subject, provider, client_id, connection_id, elicitation_id, request_id, detail, organization \
             FROM audit_events WHERE ($1 IS NULL OR subject = $1) ORDER BY id DESC LIMIT $2",
        )
        .bind(subject)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        decode(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_with_an_unknown_event_is_an_error_naming_the_row() {
        let row = Row {
            id: 42,
            event: "connection.exploded".into(),
            ..Row::default()
        };
        let err = AuditRow::try_from(row).unwrap_err().to_string();
        assert!(
            err.contains("audit_events row 42") && err.contains("\"connection.exploded\""),
            "{err}"
        );
    }
}
