//! Event rows: the feed behind `GET /v1/events` and the webhook delivery outbox.

use sqlx::FromRow;

use super::{Db, Result, now};

/// An event to record for one client.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The Standard Webhooks message id (`webhook-id`), also the idempotency key.
    pub id: String,
    pub client_id: String,
    pub event_type: &'static str,
    /// The JSON body, exactly as it is signed and sent.
    pub payload: String,
    /// When a webhook delivery is due (Unix ms); `None` for clients without a webhook.
    pub deliver_at_ms: Option<i64>,
}

#[derive(Debug, Clone, FromRow)]
pub struct EventRow {
    pub seq: i64,
    pub id: String,
    pub client_id: String,
    pub event_type: String,
    pub payload: String,
    pub created_at: i64,
}

/// An event whose webhook delivery is due.
#[derive(Debug, Clone, FromRow)]
pub struct DueDelivery {
    pub seq: i64,
    pub id: String,
    pub client_id: String,
    pub payload: String,
    pub attempts: i64,
    pub next_attempt_ms: i64,
}

/// The columns an event row is written with, in [`NewEvent::bind`]'s order.
const EVENT_COLUMNS: &str = "id, client_id, event_type, payload, created_at, next_attempt_ms";
/// How many values [`NewEvent::bind`] binds.
pub(super) const EVENT_COLUMN_COUNT: usize = 6;

/// The `INSERT` of `rows` events, their placeholders numbered from `$first`.
pub(super) fn insert_sql(first: usize, rows: usize) -> String {
    format!(
        "INSERT INTO events ({EVENT_COLUMNS}) VALUES {}",
        super::change::placeholders(first, EVENT_COLUMN_COUNT, rows)
    )
}

impl NewEvent {
    /// Binds this event's values (recorded at `at`), in [`EVENT_COLUMNS`]' order.
    pub(super) fn bind<'q>(
        &'q self,
        q: super::change::Statement<'q>,
        at: i64,
    ) -> super::change::Statement<'q> {
        q.bind(&self.id)
            .bind(&self.client_id)
            .bind(self.event_type)
            .bind(&self.payload)
            .bind(at)
            .bind(self.deliver_at_ms)
    }
}

impl Db {
    /// The client's events after `seq`, oldest first.
    pub async fn events_after(
        &self,
        client_id: &str,
        seq: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>> {
        Ok(sqlx::query_as(
            "SELECT seq, id, client_id, event_type, payload, created_at FROM events \
             WHERE client_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(client_id)
        .bind(seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The newest event sequence number of the client (0 when none).
    pub async fn last_event_seq(&self, client_id: &str) -> Result<i64> {
        let (n,): (Option<i64>,) =
            sqlx::query_as("SELECT MAX(seq) FROM events WHERE client_id = $1")
                .bind(client_id)
                .fetch_one(&self.pool)
                .await?;
        Ok(n.unwrap_or(0))
    }

    pub async fn due_deliveries(&self, now_ms: i64, limit: i64) -> Result<Vec<DueDelivery>> {
        Ok(sqlx::query_as(
            "SELECT seq, id, client_id, payload, attempts, next_attempt_ms FROM events \
             WHERE next_attempt_ms IS NOT NULL AND next_attempt_ms <= $1 ORDER BY next_attempt_ms LIMIT $2",
        )
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Takes a due delivery for `lease_ms`, so no other replica sends it meanwhile. False when
    /// someone else took it first.
    pub async fn claim_delivery(&self, d: &DueDelivery, lease_until_ms: i64) -> Result<bool> {
        let r = sqlx::query(
            "UPDATE events SET next_attempt_ms = $3 WHERE seq = $1 AND next_attempt_ms = $2",
        )
        .bind(d.seq)
        .bind(d.next_attempt_ms)
        .bind(lease_until_ms)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn delivery_succeeded(&self, seq: i64, attempts: i64) -> Result<()> {
        sqlx::query(
            "UPDATE events SET next_attempt_ms = NULL, delivered_at = $2, attempts = $3, last_error = NULL WHERE seq = $1",
        )
        .bind(seq)
        .bind(now())
        .bind(attempts)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records a failed attempt: retried at `retry_at_ms`, or given up when that is `None`.
    pub async fn delivery_failed(
        &self,
        seq: i64,
        attempts: i64,
        retry_at_ms: Option<i64>,
        error: &str,
    ) -> Result<()> {
        let failed_at = retry_at_ms.is_none().then(now);
        sqlx::query(
            "UPDATE events SET next_attempt_ms = $2, attempts = $3, last_error = $4, failed_at = $5 WHERE seq = $1",
        )
        .bind(seq)
        .bind(retry_at_ms)
        .bind(attempts)
        .bind(error)
        .bind(failed_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Delivery bookkeeping for tests and operators: (attempts, delivered, last_error).
    pub async fn event_delivery(&self, id: &str) -> Result<Option<(i64, bool, Option<String>)>> {
        let row: Option<(i64, Option<i64>, Option<String>)> =
            sqlx::query_as("SELECT attempts, delivered_at, last_error FROM events WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(a, d, e)| (a, d.is_some(), e)))
    }

    /// Forgets events older than `before` that have nothing left to deliver.
    pub async fn delete_old_events(&self, before: i64) -> Result<u64> {
        Ok(
            sqlx::query("DELETE FROM events WHERE created_at < $1 AND next_attempt_ms IS NULL")
                .bind(before)
                .execute(&self.pool)
                .await?
                .rows_affected(),
        )
    }
}
