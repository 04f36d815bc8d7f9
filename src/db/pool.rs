//! The connection pool every query goes through (Postgres and SQLite): a `deadpool` of sqlx
//! connections that are **not pinged each time they are given back**.
//!
//! sqlx 0.8's pool pings every connection it takes back (`sqlx-core` 0.8.6,
//! `pool/connection.rs`, `return_to_pool` → `ping`: on Postgres a `Sync` and its
//! `ReadyForQuery`, on SQLite a hand-over to the connection's worker thread and back), a second
//! round trip per query or transaction that no option turns off; on Postgres a connect flow
//! would take about a third more round trips (BENCHMARKS.md). What that ping guards against is
//! kept here, by other means:
//!
//! - **A statement cut off half-way** (the request was dropped: client gone, timeout) may leave
//!   the connection mid-protocol. Every checkout is `clean` only once its statement finished (or
//!   failed in the statement, the session intact); a connection given back otherwise is pinged
//!   at once, in the background, and closed if that fails — the ping sqlx does always, done only
//!   when it can matter.
//! - **A transaction dropped without a commit** queues its `ROLLBACK` (sqlx's `start_rollback`);
//!   that same background ping sends it at once, so its locks (advisory locks included) are not
//!   held until the connection's next use.
//! - **A connection the server dropped** (a restart, `pg_terminate_backend`): a connection idle
//!   for [`PING_IF_IDLE_FOR`] or more is pinged before it is handed out, and a statement that
//!   fails because the session is gone empties the pool's idle connections, which went with it.
//! - Connections are replaced after [`MAX_LIFETIME`] (sqlx's own default).
//!
//! ## What a sqlx upgrade must re-check
//!
//! This module leans on sqlx internals that its semver does not promise:
//!
//! - **The ping on release**: whether `sqlx::Pool` still pings each connection it takes back
//!   (`pool/connection.rs`, `return_to_pool`). If a release makes it optional, this pool can
//!   give way to sqlx's own — measure the connect flow and the token fetch
//!   before and after (bench/README.md).
//! - **`TransactionManager`** (`begin`, `commit`, `rollback`, `start_rollback`): [`Tx`] drives it
//!   directly; check that `start_rollback` still only queues the `ROLLBACK` for the next round
//!   trip (the background ping then sends it) and that `begin` still takes a statement.
//! - **`AnyConnection::ping`** must still flush what is queued (the `ROLLBACK`, the rest of a
//!   cut-off statement) on both drivers; `tests/it/pool.rs` fails if locks stay held.
//! - **Error shapes**: `is_dropped_connection` (`super::error`) reads `sqlx::Error::Io` and
//!   SQLSTATE `57P*`, [`session_intact`] the variants that leave the session usable; a new
//!   variant or a changed mapping silently changes which connections are reused.
//! - **`Executor` for `&Pool`**: the trait's required methods (`fetch_many`, `fetch_optional`,
//!   `prepare_with`, `describe`) and their lifetimes; a new required method must check out and
//!   mark `finished` like the others.
//! - **`Any` drivers**: `install_default_drivers` and the SQLite pragmas run on each new
//!   connection (`Db::connect`) must still apply to connections opened outside `sqlx::Pool`.

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::any::{AnyConnectOptions, AnyQueryResult, AnyRow, AnyStatement, AnyTypeInfo};
use sqlx::{Any, AnyConnection, ConnectOptions, Connection, Either, Execute, Executor};
use sqlx::{Describe, TransactionManager};

use super::error::is_dropped_connection;

/// A connection idle for this long is pinged before it is handed out.
pub const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);
/// A connection this old is closed instead of reused.
pub const MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);
/// How long to wait for a connection (free or new) before answering "unavailable".
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

type AnyTx = <Any as sqlx::Database>::TransactionManager;

/// The pool: cheap to clone (shared).
#[derive(Clone)]
pub struct Pool(deadpool::managed::Pool<Manager>);

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("size", &self.size())
            .field("idle", &self.num_idle())
            .finish()
    }
}

/// A pooled connection as `deadpool` holds it.
pub struct Held {
    conn: AnyConnection,
    /// False while a statement or transaction is under way: given back in that state, the
    /// connection is pinged (or closed) before anyone else gets it.
    clean: bool,
    /// The server ended the session: closed when given back, with the pool's idle ones.
    gone: bool,
}

pub struct Manager {
    options: AnyConnectOptions,
    /// Run on every new connection (SQLite's pragmas).
    init: Option<&'static str>,
}

impl deadpool::managed::Manager for Manager {
    type Type = Held;
    type Error = sqlx::Error;

    async fn create(&self) -> Result<Held, sqlx::Error> {
        let mut conn = self.options.connect().await?;
        if let Some(init) = self.init {
            conn.execute(init).await?;
        }
        Ok(Held {
            conn,
            clean: true,
            gone: false,
        })
    }

    async fn recycle(
        &self,
        held: &mut Held,
        metrics: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<sqlx::Error> {
        if metrics.age() >= MAX_LIFETIME {
            return Err(deadpool::managed::RecycleError::message(
                "past its lifetime",
            ));
        }
        if !held.clean || metrics.last_used() >= PING_IF_IDLE_FOR {
            tokio::time::timeout(ACQUIRE_TIMEOUT, held.conn.ping())
                .await
                .map_err(|_| deadpool::managed::RecycleError::message("ping timed out"))??;
            held.clean = true;
        }
        Ok(())
    }
}

impl Pool {
    /// The ping-free pool of at most `max` connections to the database at `url`, `init` run on
    /// each new one; connects lazily.
    pub fn direct(url: &str, max: usize, init: Option<&'static str>) -> Result<Self, sqlx::Error> {
        let options = AnyConnectOptions::from_str(url)?;
        let pool = deadpool::managed::Pool::builder(Manager { options, init })
            .max_size(max)
            .runtime(deadpool::Runtime::Tokio1)
            .wait_timeout(Some(ACQUIRE_TIMEOUT))
            .create_timeout(Some(ACQUIRE_TIMEOUT))
            .recycle_timeout(Some(ACQUIRE_TIMEOUT))
            .build()
            .map_err(|e| sqlx::Error::Configuration(e.to_string().into()))?;
        Ok(Self(pool))
    }

    pub fn max_connections(&self) -> u32 {
        self.0.status().max_size as u32
    }

    /// Connections open (idle or in use).
    pub fn size(&self) -> u32 {
        self.0.status().size as u32
    }

    /// Connections open and idle.
    pub fn num_idle(&self) -> usize {
        self.0.status().available
    }

    /// A connection of one's own, for as long as the returned value lives. Whatever is done on
    /// it, it is pinged before its next use (see the module's doc).
    pub async fn acquire(&self) -> Result<Conn, sqlx::Error> {
        Ok(Conn(checkout(&self.0).await?))
    }

    /// Begins a transaction (`BEGIN`).
    pub async fn begin(&self) -> Result<Tx, sqlx::Error> {
        self.begin_with(None).await
    }

    /// Begins a transaction with `statement` instead of a plain `BEGIN` (one round trip for
    /// both, e.g. `BEGIN; SET LOCAL ...`).
    pub async fn begin_with(
        &self,
        statement: Option<Cow<'static, str>>,
    ) -> Result<Tx, sqlx::Error> {
        let mut c = checkout(&self.0).await?;
        AnyTx::begin(&mut c.conn, statement).await?;
        // Clean only once committed or rolled back.
        Ok(Tx(Some(c)))
    }

    /// Closes every connection (at shutdown).
    pub async fn close(&self) {
        let idle = self.0.retain(|_, _| false).removed;
        self.0.close();
        for h in idle {
            let _ = h.conn.close().await;
        }
    }
}

/// A checked-out Postgres connection, marked clean before the statement and given back clean
/// only if the statement finished; see [`Drop`].
struct Checked(Option<deadpool::managed::Object<Manager>>);

async fn checkout(pool: &deadpool::managed::Pool<Manager>) -> Result<Checked, sqlx::Error> {
    match pool.get().await {
        Ok(mut o) => {
            o.clean = false;
            Ok(Checked(Some(o)))
        }
        Err(deadpool::managed::PoolError::Backend(e)) => Err(e),
        Err(deadpool::managed::PoolError::Closed) => Err(sqlx::Error::PoolClosed),
        Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}

impl Checked {
    /// After a statement: clean if it finished, or failed with the session intact; when the
    /// server dropped the session, every idle connection of the pool went with it.
    fn finished<T>(&mut self, r: &Result<T, sqlx::Error>) {
        let held: &mut Held = self;
        match r {
            Ok(_) => held.clean = true,
            Err(e) if is_dropped_connection(e) => {
                held.clean = false;
                held.gone = true;
            }
            Err(e) => held.clean = session_intact(e),
        }
    }
}

impl Checked {
    /// After a `COMMIT` or `ROLLBACK`: clean if it went through. If it failed, sqlx still counts
    /// the transaction as open: a `ROLLBACK` is queued (sent by the ping on drop), as sqlx's
    /// own `Transaction` does when dropped.
    fn ended(&mut self, r: &Result<(), sqlx::Error>) {
        match r {
            Err(e) if !is_dropped_connection(e) => {
                AnyTx::start_rollback(&mut self.conn);
                self.clean = false;
            }
            _ => self.finished(r),
        }
    }
}

// Only `drop` takes the object out: `None` cannot be seen through these.
impl Deref for Checked {
    type Target = Held;

    #[expect(clippy::unreachable, reason = "only `drop` takes the object out")]
    fn deref(&self) -> &Held {
        match &self.0 {
            Some(o) => o,
            None => unreachable!("a checked-out connection is held until dropped"),
        }
    }
}

impl DerefMut for Checked {
    #[expect(clippy::unreachable, reason = "only `drop` takes the object out")]
    fn deref_mut(&mut self) -> &mut Held {
        match &mut self.0 {
            Some(o) => o,
            None => unreachable!("a checked-out connection is held until dropped"),
        }
    }
}

impl Drop for Checked {
    fn drop(&mut self) {
        let Some(mut o) = self.0.take() else { return };
        if o.gone {
            let pool = deadpool::managed::Object::pool(&o);
            drop(deadpool::managed::Object::take(o));
            if let Some(p) = pool {
                p.retain(|_, _| false);
            }
            return;
        }
        if o.clean {
            return; // back to the pool as it is
        }
        // Flush what is pending (a queued ROLLBACK, the rest of a cut-off statement) now rather
        // than at the next checkout, so no lock stays held meanwhile; close it if that fails.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    match tokio::time::timeout(ACQUIRE_TIMEOUT, o.conn.ping()).await {
                        Ok(Ok(())) => o.clean = true,
                        _ => drop(deadpool::managed::Object::take(o)),
                    }
                });
            }
            Err(_) => drop(deadpool::managed::Object::take(o)),
        }
    }
}

/// Whether a connection is still usable after `e`: the statement failed (or its row did not
/// decode), the session did not.
pub(super) fn session_intact(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Database(_)
            | sqlx::Error::RowNotFound
            | sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::Decode(_)
    ) && !is_dropped_connection(e)
}

/// A connection of one's own ([`Pool::acquire`]).
pub struct Conn(Checked);

impl Conn {
    /// Says the caller's last statement on this connection finished: given back without a
    /// ping if it went through (else pinged, or closed, first).
    pub fn finished<T, E>(&mut self, r: &Result<T, E>) {
        if r.is_ok() {
            self.0.clean = true;
        }
    }
}

impl Deref for Conn {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        &self.0.conn
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.0.conn
    }
}

/// A transaction: rolled back if dropped before [`Tx::commit`]. `None` once committed or
/// rolled back.
pub struct Tx(Option<Checked>);

impl Tx {
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.end(true).await
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.end(false).await
    }

    /// `COMMIT` (`commit`) or `ROLLBACK`.
    async fn end(mut self, commit: bool) -> Result<(), sqlx::Error> {
        let Some(mut c) = self.0.take() else {
            return Ok(());
        };
        let r = if commit {
            AnyTx::commit(&mut c.conn).await
        } else {
            AnyTx::rollback(&mut c.conn).await
        };
        c.ended(&r);
        r
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            // Queued; `Checked`'s drop sends it at once (the connection is not clean).
            AnyTx::start_rollback(&mut c.conn);
        }
    }
}

impl Deref for Tx {
    type Target = AnyConnection;

    #[expect(clippy::unreachable, reason = "commit and rollback consume the `Tx`")]
    fn deref(&self) -> &AnyConnection {
        match &self.0 {
            Some(c) => &c.conn,
            None => unreachable!("a finished transaction is consumed"),
        }
    }
}

impl DerefMut for Tx {
    #[expect(clippy::unreachable, reason = "commit and rollback consume the `Tx`")]
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match &mut self.0 {
            Some(c) => &mut c.conn,
            None => unreachable!("a finished transaction is consumed"),
        }
    }
}

impl<'p> Executor<'p> for &'_ Pool {
    type Database = Any;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Any>,
    {
        let p = self.0.clone();
        // Whole results are small here (`fetch_all` collects them anyway): collect, so the
        // connection is back before the caller reads the first row.
        futures_util::stream::once(async move {
            let mut c = checkout(&p).await?;
            let r: Result<Vec<_>, sqlx::Error> = c.conn.fetch_many(query).try_collect().await;
            c.finished(&r);
            r.map(|v| futures_util::stream::iter(v.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Any>,
    {
        let p = self.0.clone();
        Box::pin(async move {
            let mut c = checkout(&p).await?;
            let r = c.conn.fetch_optional(query).await;
            c.finished(&r);
            r
        })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [AnyTypeInfo],
    ) -> BoxFuture<'e, Result<AnyStatement<'q>, sqlx::Error>> {
        let p = self.0.clone();
        Box::pin(async move {
            let mut c = checkout(&p).await?;
            let r = c.conn.prepare_with(sql, parameters).await;
            c.finished(&r);
            r
        })
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Any>, sqlx::Error>> {
        let p = self.0.clone();
        Box::pin(async move {
            let mut c = checkout(&p).await?;
            let r = c.conn.describe(sql).await;
            c.finished(&r);
            r
        })
    }
}
