//! The lock that keeps one refresh token from being redeemed twice at once, across replicas.
//!
//! Postgres: a transaction-scoped advisory lock. It lasts exactly as long as the holder's
//! transaction, however slow the provider is, and the server drops it when a crashed holder's
//! connection goes away. SQLite: a lease row renewed while the refresh runs, so a live holder
//! never loses it and a dead one's runs out. Stored tokens are also fenced by `token_version`.

use std::time::Duration;

use super::change::Change;
use super::connections::{Connection, get_connection};
use super::{Db, Engine, Error, Result, Tx};

const LEASE: Duration = Duration::from_secs(15);

/// What a caller that gave up waiting was waiting for.
const ANOTHER_REFRESH: &str = "another refresh of this connection";

/// Stops the lease renewal when the lock goes away, however it goes away.
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub enum RefreshLock {
    /// The transaction holding the advisory lock; `None` once handed to `change`.
    Postgres(Option<Tx>),
    Sqlite {
        db: Db,
        connection_id: String,
        owner: String,
        renew: AbortOnDrop,
    },
}

use crate::time::now_ms;

/// A 64-bit advisory lock key for a connection.
fn advisory_key(connection_id: &str) -> i64 {
    let h = crate::crypto::sha256(format!("mcp-connect/refresh/{connection_id}").as_bytes());
    i64::from_be_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]])
}

/// Waits (at most `wait`) for the refresh lock of a connection; [`Error::LockTimedOut`] when
/// another holder keeps it longer.
pub async fn acquire(db: &Db, connection_id: &str, wait: Duration) -> Result<RefreshLock> {
    match db.engine {
        Engine::Postgres => {
            let mut tx = db.pool.begin().await?;
            sqlx::query(&format!(
                "SET LOCAL lock_timeout = '{}ms'",
                wait.as_millis()
            ))
            .execute(&mut *tx)
            .await?;
            match sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(advisory_key(connection_id))
                .execute(&mut *tx)
                .await
            {
                Ok(_) => Ok(RefreshLock::Postgres(Some(tx))),
                Err(sqlx::Error::Database(d)) if d.code().as_deref() == Some("55P03") => {
                    Err(Error::LockTimedOut(ANOTHER_REFRESH))
                }
                Err(e) => Err(e.into()),
            }
        }
        Engine::Sqlite => {
            let owner = crate::crypto::random_token(12);
            let deadline = tokio::time::Instant::now() + wait;
            let mut pause = Duration::from_millis(10);
            loop {
                let now = now_ms();
                let got = sqlx::query(
                    "INSERT INTO refresh_leases (connection_id, owner, expires_at_ms) VALUES ($1, $2, $3) \
                     ON CONFLICT (connection_id) DO UPDATE SET owner = excluded.owner, expires_at_ms = excluded.expires_at_ms \
                     WHERE refresh_leases.expires_at_ms < $4",
                )
                .bind(connection_id)
                .bind(&owner)
                .bind(now + LEASE.as_millis() as i64)
                .bind(now)
                .execute(&db.pool)
                .await?
                .rows_affected()
                    == 1;
                if got {
                    let renew = AbortOnDrop(spawn_renewal(
                        db.clone(),
                        connection_id.to_owned(),
                        owner.clone(),
                    ));
                    return Ok(RefreshLock::Sqlite {
                        db: db.clone(),
                        connection_id: connection_id.to_owned(),
                        owner,
                        renew,
                    });
                }
                if tokio::time::Instant::now() + pause > deadline {
                    return Err(Error::LockTimedOut(ANOTHER_REFRESH));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
        }
    }
}

fn spawn_renewal(db: Db, connection_id: String, owner: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(LEASE / 3).await;
            let r = sqlx::query("UPDATE refresh_leases SET expires_at_ms = $3 WHERE connection_id = $1 AND owner = $2")
                .bind(&connection_id)
                .bind(&owner)
                .bind(now_ms() + LEASE.as_millis() as i64)
                .execute(&db.pool)
                .await;
            if let Err(e) = r {
                tracing::warn!(error = %e, "could not renew a refresh lease");
            }
        }
    })
}

impl RefreshLock {
    /// Reads the connection while holding the lock: on Postgres on the lock's own connection.
    pub async fn read(&mut self, db: &Db, id: &str) -> Result<Option<Connection>> {
        Ok(match self {
            RefreshLock::Postgres(Some(tx)) => get_connection(tx, id).await?,
            _ => db.get_connection(id).await?,
        })
    }

    /// The change in which to store what the refresh learned. On Postgres it is the lock's own
    /// transaction, so committing it releases the lock and no second connection is needed; on
    /// SQLite (or once the Postgres transaction was handed out) a new one.
    pub async fn change(&mut self, db: &Db) -> Result<Change> {
        match self {
            RefreshLock::Postgres(tx) => match tx.take() {
                Some(tx) => Ok(Change::on(tx, Engine::Postgres)),
                None => Change::begin(db).await,
            },
            RefreshLock::Sqlite { .. } => Change::begin(db).await,
        }
    }

    pub async fn release(self) {
        match self {
            RefreshLock::Postgres(None) => {}
            RefreshLock::Postgres(Some(tx)) => {
                if let Err(e) = tx.commit().await {
                    tracing::warn!(error = %e, "releasing a refresh lock failed (the server drops it with the connection)");
                }
            }
            RefreshLock::Sqlite {
                db,
                connection_id,
                owner,
                renew,
            } => {
                drop(renew);
                let r = sqlx::query(
                    "DELETE FROM refresh_leases WHERE connection_id = $1 AND owner = $2",
                )
                .bind(&connection_id)
                .bind(&owner)
                .execute(&db.pool)
                .await;
                if let Err(e) = r {
                    tracing::warn!(error = %e, "releasing a refresh lease failed (it runs out by itself)");
                }
            }
        }
    }
}
