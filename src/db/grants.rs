//! Which API clients may use a connection (`connection_clients`): the apps the user named when
//! approving it. A connection is one provider grant per user and provider (what the provider
//! itself holds for our OAuth client); the apps that share it are rows here.

use sqlx::AnyConnection;

use super::connections::ConnectionStatus;
use super::error::retry_dropped;
use super::{Db, Error, Result, now};
use crate::ids::ConnectionId;

/// Lets `clients` use connection `id` (recording the elicitation that the user approved).
pub async fn grant_clients(
    conn: &mut AnyConnection,
    id: &str,
    clients: &[String],
    elicitation_id: Option<&str>,
) -> Result<()> {
    let at = now();
    for client in clients {
        sqlx::query(
            "INSERT INTO connection_clients (connection_id, client_id, elicitation_id, granted_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (connection_id, client_id) \
             DO UPDATE SET elicitation_id = excluded.elicitation_id, granted_at = excluded.granted_at",
        )
        .bind(id)
        .bind(client)
        .bind(elicitation_id)
        .bind(at)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Forgets every client of connection `id` (it was revoked: a later grant names its own apps).
pub async fn clear_clients(conn: &mut AnyConnection, id: &str) -> Result<()> {
    sqlx::query("DELETE FROM connection_clients WHERE connection_id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Takes `client`'s use of connection `id` away; returns how many clients still use it.
pub async fn remove_client(conn: &mut AnyConnection, id: &str, client: &str) -> Result<i64> {
    sqlx::query("DELETE FROM connection_clients WHERE connection_id = $1 AND client_id = $2")
        .bind(id)
        .bind(client)
        .execute(&mut *conn)
        .await?;
    count_clients(conn, id).await
}

/// How many clients may use connection `id`.
async fn count_clients(conn: &mut AnyConnection, id: &str) -> Result<i64> {
    let (n,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM connection_clients WHERE connection_id = $1")
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
    Ok(n)
}

/// The id and status of connection `(issuer, subject, provider)` before a connect flow stores
/// its tokens, if the row exists. A status this binary does not know is an error naming the row.
pub async fn existing_status(
    conn: &mut AnyConnection,
    issuer: &str,
    subject: &str,
    provider: &str,
) -> Result<Option<(ConnectionId, ConnectionStatus)>> {
    let row: Option<(ConnectionId, String)> = sqlx::query_as(
        "SELECT id, status FROM connections WHERE issuer = $1 AND subject = $2 AND provider = $3",
    )
    .bind(issuer)
    .bind(subject)
    .bind(provider)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|(id, status)| match status.parse() {
        Ok(status) => Ok((id, status)),
        Err(problem) => Err(Error::undecodable("connections", id, problem)),
    })
    .transpose()
}

impl Db {
    /// The clients that may use connection `id`, sorted.
    pub async fn connection_clients(&self, id: &str) -> Result<Vec<String>> {
        let read = || {
            sqlx::query_as::<_, (String,)>(
                "SELECT client_id FROM connection_clients WHERE connection_id = $1 ORDER BY client_id",
            )
            .bind(id)
            .fetch_all(&self.pool)
        };
        // On the token path (a cache miss) like `find_connection`: a pooled connection the
        // server dropped since its last use fails here and leaves the pool; a read is safe to
        // repeat.
        let rows = retry_dropped(4, read).await?;
        Ok(rows.into_iter().map(|(c,)| c).collect())
    }

    /// Whether `client` may use connection `id` (one indexed read on the token path).
    pub async fn client_may_use(&self, id: &str, client: &str) -> Result<bool> {
        const SQL: &str =
            "SELECT 1 FROM connection_clients WHERE connection_id = $1 AND client_id = $2";
        let read = || {
            sqlx::query_as::<_, (i64,)>(SQL)
                .bind(id)
                .bind(client)
                .fetch_optional(&self.pool)
        };
        // On the token hot path like `find_connection`: a pooled connection the server dropped
        // since its last use fails here and leaves the pool; a read is safe to repeat.
        Ok(retry_dropped(4, read).await?.is_some())
    }

    /// A live connection that no client holds (written before this table existed, or by an
    /// older replica during a rolling upgrade) is adopted by the clients the user approved
    /// (completed elicitations for it since its last revocation) or, when none is known, by
    /// `fallback` (every client whose `providers` lists the provider: the rule before grants
    /// belonged to apps), so no grant is lost. Returns the clients it has now.
    pub async fn adopt_orphan(&self, id: &str, fallback: &[String]) -> Result<Vec<String>> {
        let mut tx = self.pool.begin().await?;
        // Write first: on SQLite a transaction that reads and then writes cannot take the write
        // lock once another writer committed after its read (SQLITE_BUSY, not retried by the
        // busy timeout); a write statement, even one that changes nothing, takes the lock up
        // front and waits for it. A no-op on Postgres.
        sqlx::query("DELETE FROM connection_clients WHERE connection_id = $1 AND 1 = 0")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if count_clients(&mut tx, id).await? == 0 {
            let approved: Vec<(String, String)> = sqlx::query_as(
                "SELECT e.client_id, MAX(e.id) FROM elicitations e \
                 WHERE e.connection_id = $1 AND e.status = 'completed' \
                 AND COALESCE(e.finished_at, 0) >= COALESCE((SELECT MAX(a.at) FROM audit_events a \
                     WHERE a.connection_id = $1 AND a.event = 'connection.revoked'), 0) \
                 GROUP BY e.client_id",
            )
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
            if approved.is_empty() {
                grant_clients(&mut tx, id, fallback, None).await?;
            } else {
                for (client, eid) in &approved {
                    grant_clients(&mut tx, id, std::slice::from_ref(client), Some(eid)).await?;
                }
            }
            tracing::info!(connection_id = %id, "connection without clients adopted");
        }
        tx.commit().await?;
        self.connection_clients(id).await
    }
}
