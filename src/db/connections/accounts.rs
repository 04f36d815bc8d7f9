//! The token path's reads of a user's (or an organisation's) accounts at one provider, each
//! with the clients that may use it, in one statement.

use super::{COLUMNS, Connection, DEFAULT_FIRST, Row, RowWithClients};
use sqlx::FromRow;

use crate::db::{Db, Error, Result, Table};

/// A user's own accounts: `$1` issuer, `$2` subject, `$3` provider.
const USER_ACCOUNTS: &str = "issuer = $1 AND organization = '' AND subject = $2 AND provider = $3";
/// An organisation's accounts: `$1` issuer, `$2` organisation, `$3` provider.
const ORGANIZATION_ACCOUNTS: &str =
    "issuer = $1 AND organization = $2 AND subject = '' AND provider = $3";

/// The accounts `filter` selects, the default first, each with the clients that may use it as
/// a JSON array of strings (any client id survives the trip).
fn with_clients(engine: crate::db::Engine, filter: &str) -> String {
    let clients = match engine {
        crate::db::Engine::Postgres => "COALESCE(json_agg(client_id), '[]'::json)::text",
        crate::db::Engine::Sqlite => "json_group_array(client_id)",
    };
    format!(
        "SELECT {COLUMNS}, (SELECT {clients} FROM connection_clients WHERE connection_id = connections.id) AS clients \
         FROM connections WHERE {filter} ORDER BY {DEFAULT_FIRST}"
    )
}

fn decode_with_clients(rows: Vec<RowWithClients>) -> Result<Vec<(Connection, Vec<String>)>> {
    rows.into_iter()
        .map(|r| {
            let mut clients: Vec<String> =
                serde_json::from_str(r.clients.as_deref().unwrap_or("[]")).map_err(|e| {
                    Error::undecodable(Connection::TABLE, &r.row.id, format!("clients: {e}"))
                })?;
            clients.sort_unstable();
            Ok((r.row.try_into()?, clients))
        })
        .collect()
}

impl Db {
    /// The user's accounts at `provider`, the default first (see [`DEFAULT_FIRST`]).
    pub async fn find_accounts(
        &self,
        issuer: &str,
        subject: &str,
        provider: &str,
    ) -> Result<Vec<Connection>> {
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            Connection::select(&format!(
                "issuer = $1 AND organization = '' AND subject = $2 AND provider = $3 ORDER BY {DEFAULT_FIRST}"
            ))
        });
        let rows: Vec<Row> = self.token_read(&SQL, issuer, subject, provider).await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The token path's read on a cache miss: the user's accounts at `provider` (the default
    /// first), each with the ids of the clients that may use it (sorted), in one statement —
    /// one round trip, however many accounts.
    pub async fn find_accounts_with_clients(
        &self,
        issuer: &str,
        subject: &str,
        provider: &str,
    ) -> Result<Vec<(Connection, Vec<String>)>> {
        static PG: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| with_clients(crate::db::Engine::Postgres, USER_ACCOUNTS));
        static SQLITE: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| with_clients(crate::db::Engine::Sqlite, USER_ACCOUNTS));
        let sql = match self.engine {
            crate::db::Engine::Postgres => &PG,
            crate::db::Engine::Sqlite => &SQLITE,
        };
        decode_with_clients(self.token_read(sql, issuer, subject, provider).await?)
    }

    /// As [`Self::find_accounts_with_clients`], for the connections organisation
    /// `organization` owns at `provider`.
    pub async fn find_organization_accounts_with_clients(
        &self,
        issuer: &str,
        organization: &str,
        provider: &str,
    ) -> Result<Vec<(Connection, Vec<String>)>> {
        static PG: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            with_clients(crate::db::Engine::Postgres, ORGANIZATION_ACCOUNTS)
        });
        static SQLITE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            with_clients(crate::db::Engine::Sqlite, ORGANIZATION_ACCOUNTS)
        });
        let sql = match self.engine {
            crate::db::Engine::Postgres => &PG,
            crate::db::Engine::Sqlite => &SQLITE,
        };
        decode_with_clients(self.token_read(sql, issuer, organization, provider).await?)
    }

    /// A read on the token path by `(issuer, subject, provider)`, repeated once on another
    /// connection when the first was dropped by the server.
    async fn token_read<T>(
        &self,
        sql: &'static str,
        issuer: &str,
        subject: &str,
        provider: &str,
    ) -> Result<Vec<T>>
    where
        T: for<'r> FromRow<'r, sqlx::any::AnyRow> + Send + Unpin + 'static,
    {
        let read = || {
            sqlx::query_as::<_, T>(sql)
                .bind(issuer)
                .bind(subject)
                .bind(provider)
                .fetch_all(&self.pool)
        };
        // A pooled connection used in the last second is not pinged before use (see
        // `Db::connect`), so one the server dropped since fails here. The failed one leaves the
        // pool; a read is safe to repeat on another.
        Ok(crate::db::error::retry_dropped(2, read).await?)
    }
}
