//! The statements of the change feed (`signals::listener`): on Postgres the `LISTEN` connection
//! and the heartbeat a replica sends itself through `NOTIFY`, each on a connection of its own;
//! SQLite's `connection_changes` log, read by every process.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgNotification, PgPoolOptions};
use sqlx::{ConnectOptions, Row};

use super::{Db, Result};
use crate::config::DatabaseUrl;

/// A connection of the feed's own, named `application_name` in `pg_stat_activity`.
fn options(url: &DatabaseUrl, application_name: &str) -> Result<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(url.expose_secret())?.application_name(application_name))
}

/// A `LISTEN` connection (Postgres), outside the pool.
pub struct Listener(PgListener);

impl Listener {
    /// Connects and listens on `channels`.
    pub async fn connect(
        url: &DatabaseUrl,
        application_name: &str,
        channels: &[&str],
    ) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_with(options(url, application_name)?)
            .await?;
        let mut l = PgListener::connect_with(&pool).await?;
        l.eager_reconnect(false);
        l.listen_all(channels.iter().copied()).await?;
        Ok(Self(l))
    }

    /// The next notification; `None` when the connection ended.
    pub async fn recv(&mut self) -> Result<Option<PgNotification>> {
        Ok(self.0.try_recv().await?)
    }
}

/// Opens the heartbeat's own connection (Postgres): heartbeats carry no data, so their commits
/// need not wait for the disk.
pub async fn heartbeat_connection(
    url: &DatabaseUrl,
    application_name: &str,
) -> Result<PgConnection> {
    let mut conn = options(url, application_name)?.connect().await?;
    sqlx::query("SET synchronous_commit = off")
        .execute(&mut conn)
        .await?;
    Ok(conn)
}

/// Sends one heartbeat: `payload` on `channel`.
pub async fn send_heartbeat(conn: &mut PgConnection, channel: &str, payload: &str) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl Db {
    /// The newest entry of SQLite's change log (0 when it is empty).
    pub async fn latest_change(&self) -> Result<i64> {
        let (max,): (Option<i64>,) = sqlx::query_as("SELECT MAX(seq) FROM connection_changes")
            .fetch_one(&self.pool)
            .await?;
        Ok(max.unwrap_or(0))
    }

    /// The changes logged after `after`, oldest first: `(seq, connection id)`.
    pub async fn changes_after(&self, after: i64) -> Result<Vec<(i64, String)>> {
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
