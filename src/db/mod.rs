//! Storage: one data-access layer over Postgres and SQLite (sqlx's `Any` driver with portable
//! SQL; times are Unix seconds), migrations for each engine, and the session store.

pub mod audit;
pub mod change;
pub mod changes;
pub mod connections;
pub mod dpop_keys;
pub mod elicitations;
mod error;
pub mod events;
pub mod flows;
pub mod grants;
pub mod mcp_clients;
pub mod organization_apps;
pub mod pool;
pub mod refresh_lock;
pub mod rotation;
pub mod sessions;
pub mod token_cache;

use crate::config::Engine;
use std::str::FromStr;

use sqlx::any::install_default_drivers;
use sqlx::migrate::{MigrateDatabase, Migrator};
use sqlx::{Any, AnyConnection};

pub use error::{Error, Result};
pub use pool::{Pool, Tx};

use crate::config::DatabaseUrl;

/// A table whose rows decode into `Self`: an error naming the row when one does not, never a
/// default.
trait Table: Sized + TryFrom<Self::Row, Error = Error> {
    /// A row as read, before decoding.
    type Row: for<'r> sqlx::FromRow<'r, sqlx::any::AnyRow> + Send + Unpin;
    const TABLE: &'static str;
    /// The columns `Row` reads.
    const COLUMNS: &'static str;

    /// `SELECT` of every column of the rows matching `filter` (what follows `WHERE`).
    fn select(filter: &str) -> String {
        format!(
            "SELECT {} FROM {} WHERE {filter}",
            Self::COLUMNS,
            Self::TABLE
        )
    }

    fn decode_all(rows: Vec<Self::Row>) -> Result<Vec<Self>> {
        rows.into_iter().map(Self::try_from).collect()
    }
}

/// A query over [`Table::select`], its parameters bound.
type Select<'q, R> = sqlx::query::QueryAs<'q, Any, R, sqlx::any::AnyArguments<'q>>;

/// Connections per process in the pool (Postgres).
pub const POOL_CONNECTIONS: usize = 16;
/// Connections per process in the pool (SQLite: one writer at a time in any case).
const SQLITE_CONNECTIONS: usize = 8;
/// Run on each new SQLite connection.
const SQLITE_PRAGMAS: &str = "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;";

/// See [`Db::no_flush_from`].
const NO_FLUSH_FROM: &str = "(SELECT set_config('synchronous_commit', 'off', true)) AS no_flush";

/// This binary's migrations for `engine`. Migrations a newer release already applied are
/// tolerated (`ignore_missing`): in a rolling upgrade the migration job runs first, and a replica
/// of this release that starts (or restarts) afterwards must still come up on that schema, which
/// expand-only migrations (migrations/README.md) keep usable for it. The checksums of the
/// migrations this binary knows are still verified.
fn migrator(engine: Engine) -> Migrator {
    let mut m = match engine {
        Engine::Postgres => sqlx::migrate!("migrations/postgres"),
        Engine::Sqlite => sqlx::migrate!("migrations/sqlite"),
    };
    m.set_ignore_missing(true);
    m
}

/// This binary's post-deploy migrations (`migrations/<engine>/post-deploy/`): contract steps
/// that the previous release cannot run on, applied only once every replica runs this one
/// (`mcp-connect migrate --post-deploy`), or at once on a database no release used before.
/// They share the migrations table (their numbers continue the same sequence), so each
/// migrator tolerates the other's rows.
fn post_deploy_migrator(engine: Engine) -> Migrator {
    let mut m = match engine {
        Engine::Postgres => sqlx::migrate!("migrations/postgres/post-deploy"),
        Engine::Sqlite => sqlx::migrate!("migrations/sqlite/post-deploy"),
    };
    m.set_ignore_missing(true);
    m
}

/// Which migrations [`Db::migrate`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrations {
    /// The expand-only ones; the post-deploy ones too on a database no release used before.
    Deploy,
    /// The expand-only ones and then the post-deploy ones: every replica runs this release.
    PostDeploy,
}

#[derive(Clone)]
pub struct Db {
    /// Every query (see `pool`).
    pub pool: Pool,
    pub engine: Engine,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("engine", &self.engine).finish()
    }
}

use crate::time::now;

impl Db {
    /// Connects (creating the database or SQLite file when missing) without migrating.
    pub async fn connect(url: &DatabaseUrl) -> Result<Self> {
        install_default_drivers();
        let engine = url.engine();
        let url = match engine {
            Engine::Sqlite => prepare_sqlite_url(url.expose_secret())?,
            Engine::Postgres => url.expose_secret().to_owned(),
        };
        if !Any::database_exists(&url).await.unwrap_or(false) {
            Any::create_database(&url)
                .await
                .map_err(|e| Error::setup("creating the database", e))?;
        }
        // A pool that pings a connection only when that can matter (`pool`). On SQLite a ping
        // is no network round trip but still a hand-over to the connection's worker thread and
        // back, per query.
        let pool = match engine {
            Engine::Postgres => Pool::direct(&url, POOL_CONNECTIONS, None),
            Engine::Sqlite => Pool::direct(&url, SQLITE_CONNECTIONS, Some(SQLITE_PRAGMAS)),
        }
        .map_err(|e| Error::setup("parsing the database URL", e))?;
        // Fail at start-up, as the sqlx pool did, when the database cannot be reached.
        sqlx::query("SELECT 1")
            .execute(&pool)
            .await
            .map_err(|e| Error::setup("connecting to the database", e))?;
        Ok(Self { pool, engine })
    }

    /// The rows `q` finds, decoded.
    async fn fetch_rows<T: Table>(&self, q: Select<'_, T::Row>) -> Result<Vec<T>> {
        T::decode_all(q.fetch_all(&self.pool).await?)
    }

    /// Closes the pool (at shutdown).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Applies this binary's migrations (`which`); returns the post-deploy migrations still
    /// pending afterwards (their descriptions), for the caller to report.
    pub async fn migrate(&self, which: Migrations) -> Result<Vec<String>> {
        let mut conn = self.pool.acquire().await?;
        let fresh = self.applied_versions(&mut conn).await?.is_empty();
        migrator(self.engine)
            .run_direct(&mut *conn)
            .await
            .map_err(|e| Error::setup("running migrations", e))?;
        let post = post_deploy_migrator(self.engine);
        if fresh || which == Migrations::PostDeploy {
            post.run_direct(&mut *conn)
                .await
                .map_err(|e| Error::setup("running post-deploy migrations", e))?;
        }
        let applied = self.applied_versions(&mut conn).await?;
        Ok(post
            .iter()
            .filter(|m| !applied.contains(&m.version))
            .map(|m| format!("{:04} {}", m.version, m.description))
            .collect())
    }

    /// Whether migration `version` (expand-only or post-deploy) has been applied here.
    pub async fn has_applied(&self, version: i64) -> Result<bool> {
        let mut conn = self.pool.acquire().await?;
        let applied = self.applied_versions(&mut conn).await;
        conn.finished(&applied);
        Ok(applied?.contains(&version))
    }

    /// The versions in the migrations table (none when it does not exist yet).
    async fn applied_versions(&self, conn: &mut AnyConnection) -> Result<Vec<i64>> {
        let exists = match self.engine {
            Engine::Postgres => {
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = '_sqlx_migrations'"
            }
            Engine::Sqlite => {
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'"
            }
        };
        let (n,): (i64,) = sqlx::query_as(exists).fetch_one(&mut *conn).await?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64,)> =
            sqlx::query_as("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&mut *conn)
                .await?;
        Ok(rows.into_iter().map(|(v,)| v).collect())
    }

    /// A transaction for writes to short-lived tables only (sign-in sessions, pending provider
    /// redirects): on Postgres it commits without waiting for its WAL record to reach the disk
    /// (`SET LOCAL synchronous_commit = off`). A crash can lose the last fraction of a second of
    /// such writes — a sign-in or a redirect in progress, which the user starts again — and
    /// nothing else: a grant (connections, their apps, audit, events) always commits
    /// synchronously, and its commit makes every earlier write durable with it. Visibility is not
    /// affected: other replicas see the write as soon as it commits.
    pub async fn begin_ephemeral(&self) -> Result<Tx> {
        Ok(match self.engine {
            // One round trip for both.
            Engine::Postgres => {
                self.pool
                    .begin_with(Some("BEGIN; SET LOCAL synchronous_commit = off".into()))
                    .await?
            }
            Engine::Sqlite => self.pool.begin().await?,
        })
    }

    /// A `FROM` item for one statement on a short-lived table, outside any transaction: on
    /// Postgres it sets `synchronous_commit = off` for that statement's own transaction, so a
    /// single write commits without waiting for the disk in one round trip (where
    /// [`Db::begin_ephemeral`] takes three: `BEGIN; SET LOCAL ...`, the statement, `COMMIT`).
    /// The setting ends with that transaction. SQLite needs nothing: `None`. Used as
    /// `INSERT ... SELECT $1, ... FROM <it> ON CONFLICT ...` or `UPDATE ... FROM <it> WHERE ...`.
    pub fn no_flush_from(&self) -> Option<&'static str> {
        match self.engine {
            Engine::Postgres => Some(NO_FLUSH_FROM),
            Engine::Sqlite => None,
        }
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Deletes expired sessions and auth flows. (Pending elicitations past their expiry are moved
    /// to `expired` by `AppState::expire_elicitations`, which records each one.)
    pub async fn delete_expired(&self) -> Result<u64> {
        let now = now();
        let mut n = 0;
        n += sqlx::query("DELETE FROM sessions WHERE expires_at < $1")
            .bind(now)
            .execute(&self.pool)
            .await?
            .rows_affected();
        // Keep used states a while so a replay is recognised as such.
        n += sqlx::query("DELETE FROM auth_flows WHERE expires_at < $1")
            .bind(now - 3600)
            .execute(&self.pool)
            .await?
            .rows_affected();
        // The connection change log (SQLite; see `listener`): every process reads it within
        // milliseconds, or starts over from a flushed cache.
        if self.engine == Engine::Sqlite {
            sqlx::query("DELETE FROM connection_changes WHERE changed_at < $1")
                .bind(now - 600)
                .execute(&self.pool)
                .await?;
        }
        Ok(n)
    }
}

/// Makes sure a SQLite file can be created: `mode=rwc` and an existing parent folder.
fn prepare_sqlite_url(url: &str) -> Result<String> {
    let opts = sqlx::sqlite::SqliteConnectOptions::from_str(url)
        .map_err(|e| Error::setup("parsing the SQLite URL", e))?;
    let path = opts.get_filename();
    if let Some(parent) = path.parent() {
        if !parent.as_os_str().is_empty() && path.as_os_str() != ":memory:" {
            std::fs::create_dir_all(parent).map_err(|e| {
                Error::setup(format!("creating the folder {}", parent.display()), e)
            })?;
        }
    }
    Ok(if url.contains("mode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    })
}

#[cfg(test)]
mod tests {
    use super::audit::AuditAction;
    use super::connections::ConnectionStatus;
    use super::elicitations::ElicitationStatus;
    use super::flows::FlowKind;

    /// Every value of `$t` comes back from its stored name; each of `$bad` is refused with an
    /// error that names it.
    macro_rules! round_trips_and_refuses {
        ($t:ty, $what:literal, [$($bad:literal),* $(,)?]) => {
            assert!(!<$t>::ALL.is_empty());
            for v in <$t>::ALL {
                assert_eq!(v.as_str().parse::<$t>(), Ok(*v));
                assert_eq!(<$t>::try_from(v.as_str()), Ok(*v));
            }
            for bad in [$($bad),*] {
                let e = <$t>::try_from(bad).unwrap_err();
                assert_eq!(e, format!(concat!("unknown ", $what, " {:?}"), bad));
                assert_eq!(bad.parse::<$t>(), Err(e));
            }
        };
    }

    /// Rows carry these names: a value keeps its name when its variant is renamed or moved.
    #[test]
    fn stored_names_stay_the_names_rows_carry() {
        fn names<T: Copy>(all: &[T], name: fn(T) -> &'static str) -> Vec<&'static str> {
            all.iter().map(|v| name(*v)).collect::<Vec<_>>()
        }
        assert_eq!(
            names(ConnectionStatus::ALL, ConnectionStatus::as_str),
            ["active", "needs_reauth", "revoked"]
        );
        assert_eq!(
            names(ElicitationStatus::ALL, ElicitationStatus::as_str),
            ["pending", "completed", "declined", "expired", "failed"]
        );
        assert_eq!(
            names(FlowKind::ALL, FlowKind::as_str),
            ["provider", "login"]
        );
    }

    #[test]
    fn every_stored_name_round_trips_and_an_unknown_one_is_an_error_naming_it() {
        round_trips_and_refuses!(
            ConnectionStatus,
            "connection status",
            ["", "Active", "paused", "active "]
        );
        round_trips_and_refuses!(
            ElicitationStatus,
            "elicitation status",
            ["", "Pending", "cancelled", "done"]
        );
        round_trips_and_refuses!(
            FlowKind,
            "auth flow kind",
            ["", "Provider", "signin", "provider "]
        );
        round_trips_and_refuses!(
            AuditAction,
            "audit event",
            [
                "",
                "connection.deleted",
                "Connection.revoked",
                "admin.",
                "connection.revoked ",
            ]
        );
        assert_eq!(ConnectionStatus::ALL.len(), 3);
        assert_eq!(ElicitationStatus::ALL.len(), 5);
    }
}
