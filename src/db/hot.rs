//! The token path's reads on Postgres (`find_connection`, `client_may_use`) on a few
//! connections of their own, outside `sqlx::Pool`.
//!
//! sqlx 0.8's pool pings every connection it takes back (`sqlx-core` 0.8.6, `pool/connection.rs`,
//! `return_to_pool` → `ping`, a `Sync` and its `ReadyForQuery`): a second round trip per query
//! that no pool option turns off. The connections here are never pinged. Instead:
//!
//! - a connection is taken out of its slot for the query and put back only when the query
//!   finished (or failed in the statement, the session intact); a request dropped mid-query
//!   (client gone, request timeout) drops the connection with it, so none is ever reused in an
//!   unknown protocol state — what the pool's ping on release was guarding against;
//! - a query that fails because the session is gone (the server restarted or ended it) is
//!   repeated once on a new connection; when that connect fails, the error is the caller's
//!   (a 503, as from the pool). Both reads are safe to repeat.
//!
//! Everything else (writes, transactions, `/readyz`) goes through the main pool (`pool`), which
//! on Postgres no longer pings on release either; these few connections stay apart so a burst
//! of token reads never waits behind the connect flow's transactions. SQLite keeps the pool: it
//! has no network round trip to save.
//!
//! [`HotMode`] switches between the three ways measured in `bench/` (`token-fetch --hot-modes`)
//! at run time, for an A/B in one process: the pool, these slots, and a `deadpool` pool managing
//! sqlx connections without a ping. **The service uses [`HotMode::Deadpool`]**: once a miss was
//! one statement, both ping-free ways beat the pool by 40-65% in two runs on a quieter machine,
//! and deadpool also had the best p99 (BENCHMARKS.md, "Issue 14, third round";
//! bench/results/2026-12-03/round3/miss-modes-2.md). On a loaded machine earlier that day neither
//! way won clearly (bench/results/2026-12-03/miss-*.md).

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::Mutex;

use super::error::is_dropped_connection;
use super::pool::session_intact;

/// Connections for the hot reads, per process (beside the pool's 16).
pub const HOT_CONNECTIONS: usize = 4;
/// The most [`HotReads::set_width`] allows.
const MAX_SLOTS: usize = 16;
/// As the pool's `acquire_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A query on a borrowed connection.
pub(super) type Query<'c, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'c>>;

/// Where the hot reads go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HotMode {
    /// The main pool, like every other query (`pool`: on Postgres no ping on release since
    /// 2026-12-03 evening; before, sqlx's pool with a ping on every release).
    Pool,
    /// [`HOT_CONNECTIONS`] connections in slots taken round-robin.
    Dedicated,
    /// A `deadpool` pool of as many sqlx connections, recycled without a ping. The default.
    Deadpool,
}

impl HotMode {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Pool,
            2 => Self::Deadpool,
            _ => Self::Dedicated,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Pool => "main pool",
            Self::Dedicated => "dedicated",
            Self::Deadpool => "deadpool",
        }
    }
}

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

pub struct HotReads {
    options: PgConnectOptions,
    slots: Vec<Mutex<Option<PgConnection>>>,
    width: AtomicUsize,
    next: AtomicUsize,
    mode: AtomicU8,
    deadpool: deadpool::managed::Pool<Manager>,
}

impl std::fmt::Debug for HotReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotReads")
            .field("mode", &self.mode())
            .field("width", &self.width.load(Ordering::Relaxed))
            .finish()
    }
}

impl HotReads {
    /// For the Postgres database at `url`; connects lazily, on first use.
    pub(super) fn new(url: &str) -> Result<Self, sqlx::Error> {
        let options = PgConnectOptions::from_str(url)?;
        let deadpool = deadpool::managed::Pool::builder(Manager(options.clone()))
            .max_size(HOT_CONNECTIONS)
            .runtime(deadpool::Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| sqlx::Error::Configuration(e.to_string().into()))?;
        Ok(Self {
            options,
            slots: (0..MAX_SLOTS).map(|_| Mutex::new(None)).collect(),
            width: AtomicUsize::new(HOT_CONNECTIONS),
            next: AtomicUsize::new(0),
            mode: AtomicU8::new(HotMode::Deadpool as u8),
            deadpool,
        })
    }

    pub fn mode(&self) -> HotMode {
        HotMode::from_u8(self.mode.load(Ordering::Relaxed))
    }

    /// Sends the hot reads elsewhere from now on (for the bench's A/B in one process).
    pub fn set_mode(&self, mode: HotMode) {
        self.mode.store(mode as u8, Ordering::Relaxed);
    }

    /// Uses `n` (1 to 16) connections from now on, in either mode (for the bench).
    pub fn set_width(&self, n: usize) {
        let n = n.clamp(1, MAX_SLOTS);
        self.width.store(n, Ordering::Relaxed);
        self.deadpool.resize(n);
    }

    /// Closes the connections (at shutdown; a later read opens new ones).
    pub async fn close(&self) {
        for s in &self.slots {
            if let Some(c) = s.lock().await.take() {
                let _ = sqlx::Connection::close(c).await;
            }
        }
        self.deadpool.retain(|_, _| false);
    }

    async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        tokio::time::timeout(CONNECT_TIMEOUT, self.options.connect())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
    }

    /// Runs `query` on one of these connections (not in [`HotMode::Pool`]: the caller's).
    pub(super) async fn run<T>(
        &self,
        query: impl for<'c> Fn(&'c mut PgConnection) -> Query<'c, T>,
    ) -> Result<T, sqlx::Error> {
        match self.mode() {
            HotMode::Deadpool => self.run_deadpool(query).await,
            _ => self.run_dedicated(query).await,
        }
    }

    async fn run_dedicated<T>(
        &self,
        query: impl for<'c> Fn(&'c mut PgConnection) -> Query<'c, T>,
    ) -> Result<T, sqlx::Error> {
        let n = self.width.load(Ordering::Relaxed).clamp(1, MAX_SLOTS);
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        // A free slot if there is one, else wait for the next in turn.
        let free = (0..n).find_map(|i| self.slots[(start + i) % n].try_lock().ok());
        let mut slot = match free {
            Some(s) => s,
            None => self.slots[start % n].lock().await,
        };
        loop {
            let (mut conn, fresh) = match slot.take() {
                Some(c) => (c, false),
                None => (self.connect().await?, true),
            };
            match query(&mut conn).await {
                Ok(v) => {
                    *slot = Some(conn);
                    return Ok(v);
                }
                Err(e) if is_dropped_connection(&e) => {
                    drop(conn);
                    if fresh {
                        return Err(e);
                    }
                }
                Err(e) => {
                    if session_intact(&e) {
                        *slot = Some(conn);
                    }
                    return Err(e);
                }
            }
        }
    }

    async fn run_deadpool<T>(
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
