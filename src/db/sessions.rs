//! The tower-sessions store, in the same database as everything else (no Redis needed). Rows
//! are keyed by the SHA-256 of the session id, so reading the table does not yield live cookies.
//! Creating and saving a session are short-lived writes (`Db::no_flush_from`: on Postgres
//! they do not wait for the disk; a crash can only sign someone out); deleting one (sign-out)
//! commits synchronously, so a crash never brings a signed-out session back.

use async_trait::async_trait;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};

use super::Db;

#[derive(Debug, Clone)]
pub struct DbSessionStore {
    db: Db,
}

impl DbSessionStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

/// Signed-in sessions kept per user: signing in once more removes the user's least recently
/// used session beyond this, so a script signing in over and over cannot grow the table.
pub const MAX_SESSIONS_PER_USER: i64 = 10;

/// The record field that names the signed-in user (`web::session` writes it), read for the
/// row's `user_key`.
const USER_FIELD: &str = "user";

fn key(id: &Id) -> String {
    crate::crypto::sha256_b64(id.to_string().as_bytes())
}

/// Whose session a record is: a hash of the signed-in user's issuer and subject (the table's
/// `user_key`), or `None` before sign-in.
fn user_key(record: &Record) -> Option<String> {
    let user = record.data.get(USER_FIELD)?;
    let issuer = user.get("issuer")?.as_str()?;
    let subject = user.get("subject")?.as_str()?;
    Some(crate::crypto::sha256_b64(
        format!("{}\n{issuer}\n{subject}", issuer.len()).as_bytes(),
    ))
}

/// The session row's upsert: one statement, on Postgres without waiting for the disk
/// (`Db::no_flush_from`).
fn upsert(no_flush: Option<&str>, on_conflict: &str) -> String {
    let values = match no_flush {
        Some(from) => format!("SELECT $1, $2, $3, $4 FROM {from}"),
        None => "VALUES ($1, $2, $3, $4)".to_owned(),
    };
    format!(
        "INSERT INTO sessions (id, data, expires_at, user_key) {values} ON CONFLICT (id) {on_conflict}"
    )
}

fn backend(e: impl std::fmt::Display) -> session_store::Error {
    session_store::Error::Backend(e.to_string())
}

#[async_trait]
impl SessionStore for DbSessionStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        let data = serde_json::to_string(record)
            .map_err(|e| session_store::Error::Encode(e.to_string()))?;
        let sql = upsert(self.db.no_flush_from(), "DO NOTHING");
        let user = user_key(record);
        loop {
            let r = sqlx::query(&sql)
                .bind(key(&record.id))
                .bind(&data)
                .bind(record.expiry_date.unix_timestamp())
                .bind(user.as_deref())
                .execute(&self.db.pool)
                .await
                .map_err(backend)?;
            if r.rows_affected() == 1 {
                break;
            }
            record.id = Id::default();
        }
        // A session is created at sign-in (`web::session` makes no row before): the moment to
        // keep the user's sessions bounded.
        if let Some(user) = user {
            self.db
                .keep_newest_sessions(&user, &key(&record.id), MAX_SESSIONS_PER_USER)
                .await
                .map_err(backend)?;
        }
        Ok(())
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let data = serde_json::to_string(record)
            .map_err(|e| session_store::Error::Encode(e.to_string()))?;
        sqlx::query(&upsert(
            self.db.no_flush_from(),
            "DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at, user_key = excluded.user_key",
        ))
        .bind(key(&record.id))
        .bind(data)
        .bind(record.expiry_date.unix_timestamp())
        .bind(user_key(record))
        .execute(&self.db.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT data FROM sessions WHERE id = $1 AND expires_at > $2")
                .bind(key(id))
                .bind(super::now())
                .fetch_optional(&self.db.pool)
                .await
                .map_err(backend)?;
        row.map(|(d,)| {
            serde_json::from_str(&d).map_err(|e| session_store::Error::Decode(e.to_string()))
        })
        .transpose()
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        sqlx::query("DELETE FROM sessions WHERE id = $1")
            .bind(key(id))
            .execute(&self.db.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }
}

impl Db {
    /// Deletes the sessions of `user_key` beyond its `keep` most recently used (latest expiry:
    /// each use extends it), never `current` (expiries are whole seconds: a tie must not sign
    /// out the browser that just signed in).
    pub async fn keep_newest_sessions(
        &self,
        user_key: &str,
        current: &str,
        keep: i64,
    ) -> super::Result<u64> {
        Ok(sqlx::query(
            "DELETE FROM sessions WHERE user_key = $1 AND id <> $2 AND id NOT IN \
             (SELECT id FROM sessions WHERE user_key = $1 AND id <> $2 \
              ORDER BY expires_at DESC, id LIMIT $3)",
        )
        .bind(user_key)
        .bind(current)
        .bind(keep - 1)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}
