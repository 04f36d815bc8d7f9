//! The token path's two reads on Postgres (`find_connection`, `client_may_use`) on a small
//! `deadpool` of sqlx connections of their own, beside the main pool (`super::pool`).
//!
//! They stay apart so a burst of token reads never waits behind the connect flow's
//! transactions, and they use `PgConnection` rather than the main pool's `AnyConnection`: on a
//! cache miss this is the one statement of the request (BENCHMARKS.md has the measurements).
//! SQLite has no such pool: it has no network round trip to save, and one writer at a time.
//!
//! Like the main pool, these connections are never pinged when given back:
//!
//! - a connection is `clean` only once its query finished (or failed in the statement, the
//!   session intact); one whose query was dropped half-way (client gone, request timeout) is not
//!   recycled, so none is reused in an unknown protocol state;
//! - a query that fails because the session is gone (the server restarted or ended it) empties
//!   the idle connections, which went with it, and is repeated once on a new connection; when
//!   that fails too, the error is the caller's (a 503, as from the main pool). Both reads are
//!   safe to repeat.
//!
//! `bench/` compares this placement against the main pool by building each (bench/README.md).

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::time::Duration;

use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use super::error::is_dropped_connection;
use super::pool::session_intact;

/// Connections for the hot reads, per process (beside the pool's 16).
pub const HOT_CONNECTIONS: usize = 4;
/// As the pool's `acquire_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A query on a borrowed connection.
pub(super) type Query<'c, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'c>>;

/// A connection as `deadpool` holds it: `clean` is false while a query runs, so one whose query
/// was dropped half-way is not recycled.
pub struct Held {
    conn: PgConnection,
    clean: bool,
}

pub struct Manager(PgConnectOptions);

impl deadpool::managed::Manager for Manager {
    type Type = Held;
    type Error = sqlx::Error;

    async fn create(&self) -> Result<Held, sqlx::Error> {
        Ok(Held {
            conn: self.0.connect().await?,
            clean: true,
        })
    }

    async fn recycle(
        &self,
        held: &mut Held,
        _: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<sqlx::Error> {
        if held.clean {
            Ok(())
        } else {
            Err(deadpool::managed::RecycleError::message(
                "a query was dropped half-way",
            ))
        }
    }
}

/// The pool of the hot reads' connections.
pub struct HotReads {
    deadpool: deadpool::managed::Pool<Manager>,
}

impl std::fmt::Debug for HotReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.deadpool.status();
        f.debug_struct("HotReads")
            .field("size", &status.size)
            .field("idle", &status.available)
            .finish()
    }
}

impl HotReads {
    /// For the Postgres database at `url`; connects lazily, on first use.
    pub(super) fn new(url: &str) -> Result<Self, sqlx::Error> {
        let options = PgConnectOptions::from_str(url)?;
        let deadpool = deadpool::managed::Pool::builder(Manager(options))
            .max_size(HOT_CONNECTIONS)
            .runtime(deadpool::Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| sqlx::Error::Configuration(e.to_string().into()))?;
        Ok(Self { deadpool })
    }

    /// Closes the connections (at shutdown; a later read opens new ones).
    pub async fn close(&self) {
        self.deadpool.retain(|_, _| false);
    }

    /// Runs `query` on one of these connections.
    pub(super) async fn run<T>(
        &self,
        query: impl for<'c> Fn(&'c mut PgConnection) -> Query<'c, T>,
    ) -> Result<T, sqlx::Error> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut held = self.deadpool.get().await.map_err(|e| match e {
                deadpool::managed::PoolError::Backend(e) => e,
                _ => sqlx::Error::PoolTimedOut,
            })?;
            held.clean = false;
            match query(&mut held.conn).await {
                Ok(v) => {
                    held.clean = true;
                    return Ok(v);
                }
                Err(e) if is_dropped_connection(&e) => {
                    // The server went away: so did every idle connection with it.
                    drop(deadpool::managed::Object::take(held));
                    self.deadpool.retain(|_, _| false);
                    if attempt >= 2 {
                        return Err(e);
                    }
                }
                Err(e) => {
                    held.clean = session_intact(&e);
                    return Err(e);
                }
            }
        }
    }
}
