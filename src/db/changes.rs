//! The statements of the change feed (`signals::listener`): the heartbeat a Postgres replica
//! sends itself through `NOTIFY`, and SQLite's `connection_changes` log, read by every process.

use sqlx::Row;
use sqlx::postgres::PgConnection;

use super::Db;

/// Prepares the heartbeat's own connection: heartbeats carry no data, so their commits need not
/// wait for the disk.
pub async fn prepare_heartbeat(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SET synchronous_commit = off")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Sends one heartbeat: `payload` on `channel`.
pub async fn send_heartbeat(
    conn: &mut PgConnection,
    channel: &str,
    payload: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl Db {
    /// The newest entry of SQLite's change log (0 when it is empty).
    pub async fn latest_change(&self) -> Result<i64, sqlx::Error> {
        let (max,): (Option<i64>,) = sqlx::query_as("SELECT MAX(seq) FROM connection_changes")
            .fetch_one(&self.pool)
            .await?;
        Ok(max.unwrap_or(0))
    }

    /// The changes logged after `after`, oldest first: `(seq, connection id)`.
    pub async fn changes_after(&self, after: i64) -> Result<Vec<(i64, String)>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT seq, connection_id FROM connection_changes WHERE seq > $1 ORDER BY seq",
        )
        .bind(after)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }
}
