//! A per-process cache of recently used connection rows for `POST /v1/tokens`, with every
//! change made anywhere applied within a fixed window.
//!
//! **What it holds.** `Arc<Connection>` rows exactly as read from the database, each with the
//! ids of the API clients that may use it (its `connection_clients` rows), so a hit
//! makes no database round trip at all. The token fields are the sealed (AES-256-GCM)
//! strings, and `Connection` has no field that could hold a token in clear. Each hit opens the access token again (`Grants::token_of`); the clear
//! value lives in that request's `SecretString` and response only. Only `active` rows with an
//! access token are kept; bounded by `[cache] max_entries` and `max_bytes` (oldest first out),
//! and each row for at most `max_age_seconds`, never past its token's own expiry.
//!
//! **How it learns of changes.** Every write to the `connections` table (migration 0016) and to
//! `connection_clients` (migration 0017), by any process, is announced in the writing
//! transaction by a trigger, naming the connection: on Postgres a `NOTIFY`
//! on the channel replicas already listen on (one listener per process, `listener.rs`), on
//! SQLite a row in `connection_changes`, read by each process every few milliseconds. A change
//! committed by this process is also applied here right after its commit (`Change::
//! connection_changed`), so within one process the cache is exact.
//!
//! **The guarantee.** Let W be `[cache] sync_window_ms`. At any moment a process uses its cache
//! only if it has applied every change committed more than W ago; otherwise it reads the
//! database (*bypass*). It knows this without trusting clocks across machines:
//!
//! - Postgres: every W/5 the process sends a heartbeat `NOTIFY` on a channel of its own (from
//!   a second connection) and notes when it sent it. Postgres delivers notifications to a
//!   listener in commit order, so receiving heartbeat *h* back means every notification
//!   committed before *h* was sent has been received and applied (the listener applies them
//!   in order). The cache is usable while the newest heartbeat received was sent less than W
//!   ago (measured on this process's monotonic clock).
//! - SQLite: a read of `connection_changes` started at *t* sees every change committed before
//!   *t*; the cache is usable while the newest successful read started less than W ago.
//!
//! A listener that loses its connection (or a read that fails) makes the cache unusable at
//! once; it becomes usable again only after the listener is back, the cache was flushed (the
//! notifications in between are lost), and a heartbeat sent after that came back.
//!
//! Hence any change committed at *c* is seen by every replica's cache from *c* + W on (a
//! refresh, reconnect, status change, key rotation or grant to another app reaches every
//! replica within W). **Revocation is strict**: `revoke_connection` waits W after its commit
//! before it returns, so once `DELETE /v1/connections/{id}` (or the admin page, or
//! `connections revoke`) has answered, no replica hands the revoked token out; so does taking
//! one app's use of a grant away (`disconnect_client`), so no replica hands it to that app. That costs the revocation W (100 ms by default) and
//! each process a heartbeat round trip every W/5 on Postgres, a small read on SQLite. A process
//! of a previous version (rolling upgrade) does not wait W after revoking: its revocations are
//! seen within W, not strictly.
//!
//! Fills race with changes: a row read from the database just before a change commits must not
//! be stored after the change was applied. Every change and flush bumps a generation; a miss
//! takes a ticket (the generation) before reading, and the row is stored only if nothing was
//! applied in between.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::config::CacheConfig;
use crate::db::connections::{Connection, ConnectionStatus};

/// A connection row with the ids of the API clients that may use it (`connection_clients`),
/// both as read from the database (or the cache).
#[derive(Debug, Clone)]
pub struct Granted {
    pub row: Arc<Connection>,
    /// Empty for a row no client holds yet (see `AppState::may_use_granted`).
    pub clients: Arc<[Box<str>]>,
}

impl Granted {
    /// Whether `client_id` is among the clients the user approved.
    pub fn names(&self, client_id: &str) -> bool {
        self.clients.iter().any(|c| &**c == client_id)
    }
}

/// How a change names a user's accounts at a provider rather than one connection (a new
/// account: the triggers of migration 0022, and `user_key`).
pub const USER_PREFIX: &str = "user:";

/// The change key of `subject`'s accounts at `provider`.
pub fn user_key(provider: &str, subject: &str) -> String {
    format!("{USER_PREFIX}{provider}/{subject}")
}

/// One user's accounts at one provider, the default first (`DEFAULT_FIRST`), as read together.
pub type Accounts = Arc<[Granted]>;

/// What a lookup found.
pub enum Lookup {
    /// The user's accounts, to use as if just read.
    Hit(Accounts),
    /// Not cached: read the database, then `fill` with this ticket.
    Miss(Ticket),
    /// The cache cannot be trusted right now (or is off): read the database, store nothing.
    Bypass,
}

/// The generation a miss saw before reading the database.
#[derive(Debug, Clone, Copy)]
pub struct Ticket(u64);

/// The cache's counters and size, for `/metrics`, tests and the benchmark (a foundation type:
/// the metrics render it without knowing the cache).
pub use crate::metrics::CacheReading as CacheStats;

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    bypasses: AtomicU64,
    fills: AtomicU64,
    invalidations: AtomicU64,
    flushes: AtomicU64,
    sync_losses: AtomicU64,
}

struct Entry {
    accounts: Accounts,
    expires: Instant,
    bytes: usize,
    serial: u64,
}

/// Subjects come from API callers: a seeded hasher of good quality, and fast on short keys.
type Hasher = foldhash::quality::RandomState;

/// provider → subject → accounts: looked up with the request's `&str`s, no allocation.
#[derive(Default)]
struct Inner {
    rows: HashMap<Box<str>, HashMap<Box<str>, Entry, Hasher>, Hasher>,
    /// connection id (each account's) → (provider, subject), for changes, which name the id.
    by_id: HashMap<Box<str>, (Box<str>, Box<str>), Hasher>,
    /// Insertion order for eviction; entries replaced or removed since are skipped.
    order: VecDeque<(Box<str>, Box<str>, u64)>,
    entries: usize,
    bytes: usize,
    generation: u64,
    serial: u64,
    /// Every change committed before this instant has been applied; `None` while the change
    /// feed is down or not yet confirmed.
    synced_as_of: Option<Instant>,
}

impl Inner {
    fn remove(&mut self, provider: &str, subject: &str) {
        let Some(by_subject) = self.rows.get_mut(provider) else {
            return;
        };
        if let Some(e) = by_subject.remove(subject) {
            self.entries -= 1;
            self.bytes -= e.bytes;
            for g in e.accounts.iter() {
                self.by_id.remove(g.row.id.as_str());
            }
        }
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.by_id.clear();
        self.order.clear();
        self.entries = 0;
        self.bytes = 0;
    }
}

pub struct TokenCache {
    max_entries: usize,
    max_bytes: usize,
    max_age: Duration,
    window: Duration,
    inner: Mutex<Inner>,
    counters: Counters,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Heap bytes an entry takes, roughly: its rows' strings and a fixed overhead.
fn size_of(accounts: &[Granted]) -> usize {
    accounts.iter().map(size_of_one).sum()
}

fn size_of_one(g: &Granted) -> usize {
    let c = &g.row;
    256 + g.clients.iter().map(|id| id.len() + 16).sum::<usize>()
        + c.id.len()
        + c.issuer.len()
        + 2 * (c.subject.len() + c.provider.len())
        + c.scopes.iter().map(|s| s.len() + 24).sum::<usize>()
        + c.token_type.len()
        + c.sealed_len()
        + c.account_label.as_ref().map_or(0, String::len)
        + c.account_id.len()
        + c.nickname.as_ref().map_or(0, String::len)
        + c.last_error.as_ref().map_or(0, String::len)
}

impl TokenCache {
    pub fn new(cfg: &CacheConfig) -> Self {
        Self {
            max_entries: cfg.max_entries,
            max_bytes: cfg.max_bytes,
            max_age: Duration::from_secs(cfg.max_age_seconds),
            window: Duration::from_millis(cfg.sync_window_ms),
            inner: Mutex::default(),
            counters: Counters::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// W: how far behind the committed state a usable cache may be.
    pub fn window(&self) -> Duration {
        self.window
    }

    pub fn enabled(&self) -> bool {
        self.max_entries > 0
    }

    fn usable(&self, inner: &Inner, now: Instant) -> bool {
        self.enabled()
            && inner
                .synced_as_of
                .is_some_and(|t| now.saturating_duration_since(t) <= self.window)
    }

    /// Whether the cache is in use right now (its change feed is up and current).
    pub fn is_usable(&self) -> bool {
        self.usable(&self.lock(), Instant::now())
    }

    /// Whether every change committed before `t` has been applied (the change feed lags its
    /// writers by up to one beat: an entry filled before then may still be dropped by an older
    /// change).
    pub fn is_synced_since(&self, t: Instant) -> bool {
        self.lock().synced_as_of.is_some_and(|s| s >= t)
    }

    pub fn get(&self, subject: &str, provider: &str) -> Lookup {
        let now = Instant::now();
        let mut inner = self.lock();
        if !self.usable(&inner, now) {
            drop(inner);
            self.counters.bypasses.fetch_add(1, Ordering::Relaxed);
            return Lookup::Bypass;
        }
        let found = inner
            .rows
            .get(provider)
            .and_then(|m| m.get(subject))
            .map(|e| (e.expires > now, e.accounts.clone()));
        match found {
            Some((true, row)) => {
                drop(inner);
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Hit(row)
            }
            Some((false, _)) => {
                inner.remove(provider, subject);
                let t = Ticket(inner.generation);
                drop(inner);
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                Lookup::Miss(t)
            }
            None => {
                let t = Ticket(inner.generation);
                drop(inner);
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                Lookup::Miss(t)
            }
        }
    }

    /// Stores one user's `accounts` at a provider, read after `ticket` was taken, unless a
    /// change was applied since (a row may predate it), the cache is not usable, or a row is not
    /// worth keeping (only live rows with an access token are: the others are read each time).
    pub fn fill(&self, ticket: Ticket, accounts: &Accounts) {
        let Some(first) = accounts.first() else {
            return;
        };
        let now_s = crate::time::now();
        let mut ttl = self.max_age;
        for g in accounts.iter() {
            let row = &g.row;
            if row.status != ConnectionStatus::Active || !row.has_access_token() {
                return;
            }
            match row.expires_at {
                Some(e) if e <= now_s => return,
                Some(e) => ttl = ttl.min(Duration::from_secs((e - now_s) as u64)),
                None => {}
            }
        }
        let row = &first.row;
        let bytes = size_of(accounts);
        if bytes > self.max_bytes {
            return;
        }
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.generation != ticket.0 || !self.usable(&inner, now) {
            return;
        }
        inner.remove(&row.provider, &row.subject);
        // An id is one (provider, subject) for life; a stale mapping is replaced below.
        while inner.entries + 1 > self.max_entries || inner.bytes + bytes > self.max_bytes {
            let Some((p, s, serial)) = inner.order.pop_front() else {
                break;
            };
            let current = inner
                .rows
                .get(&p)
                .and_then(|m| m.get(&s))
                .is_some_and(|e| e.serial == serial);
            if current {
                inner.remove(&p, &s);
            }
        }
        inner.serial += 1;
        let serial = inner.serial;
        let provider: Box<str> = row.provider.as_str().into();
        let subject: Box<str> = row.subject.as_str().into();
        for g in accounts.iter() {
            inner.by_id.insert(
                g.row.id.as_str().into(),
                (provider.clone(), subject.clone()),
            );
        }
        inner
            .order
            .push_back((provider.clone(), subject.clone(), serial));
        inner.rows.entry(provider).or_default().insert(
            subject,
            Entry {
                accounts: accounts.clone(),
                expires: now + ttl,
                bytes,
                serial,
            },
        );
        inner.entries += 1;
        inner.bytes += bytes;
        // Keep the order queue from filling up with replaced and removed entries.
        if inner.order.len() > 2 * self.max_entries.max(16) {
            let Inner { order, rows, .. } = &mut *inner;
            order.retain(|(p, s, serial)| {
                rows.get(p)
                    .and_then(|m| m.get(s))
                    .is_some_and(|e| e.serial == *serial)
            });
        }
        drop(inner);
        self.counters.fills.fetch_add(1, Ordering::Relaxed);
    }

    /// Connection `id` changed — or, for `user:<provider>/<subject>` (a new account, whose id
    /// no entry holds yet), that user's accounts at that provider: drop the entry, and any fill
    /// in flight.
    pub fn invalidate(&self, id: &str) {
        let mut inner = self.lock();
        inner.generation += 1;
        if let Some((p, s)) = id.strip_prefix(USER_PREFIX).and_then(|u| u.split_once('/')) {
            inner.remove(p, s);
        } else if let Some((p, s)) = inner.by_id.get(id).cloned() {
            inner.remove(&p, &s);
        }
        drop(inner);
        self.counters.invalidations.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops everything (and any fill in flight).
    pub fn flush(&self) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.clear();
        drop(inner);
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Every change committed before `as_of` has been applied.
    pub fn synced(&self, as_of: Instant) {
        let mut inner = self.lock();
        if inner.synced_as_of.is_none_or(|t| t < as_of) {
            inner.synced_as_of = Some(as_of);
        }
    }

    /// The change feed is down: stop using the cache now, and drop it (it cannot learn of
    /// changes until the feed is back, when it starts empty).
    pub fn lost_sync(&self) {
        let mut inner = self.lock();
        inner.synced_as_of = None;
        inner.generation += 1;
        inner.clear();
        drop(inner);
        self.counters.sync_losses.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits out the window: afterwards every replica's cache has applied what this process
    /// committed before the call.
    pub async fn wait_for_replicas(&self) {
        tokio::time::sleep(self.window).await;
    }

    pub fn stats(&self) -> CacheStats {
        let (entries, bytes, usable) = {
            let inner = self.lock();
            let usable = self.usable(&inner, Instant::now());
            (inner.entries as u64, inner.bytes as u64, usable)
        };
        let c = &self.counters;
        CacheStats {
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            bypasses: c.bypasses.load(Ordering::Relaxed),
            fills: c.fills.load(Ordering::Relaxed),
            invalidations: c.invalidations.load(Ordering::Relaxed),
            flushes: c.flushes.load(Ordering::Relaxed),
            sync_losses: c.sync_losses.load(Ordering::Relaxed),
            entries,
            bytes,
            usable,
        }
    }

    /// The rows held, as their `Debug` text (for tests that check nothing in clear is kept).
    pub fn dump(&self) -> Vec<String> {
        let inner = self.lock();
        inner
            .rows
            .values()
            .flat_map(|m| m.values())
            .flat_map(|e| e.accounts.iter().map(|g| format!("{:?}", g.row)))
            .collect()
    }

    /// Whether connection `id` is cached.
    pub fn holds(&self, id: &str) -> bool {
        self.lock().by_id.contains_key(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(max_entries: usize, max_bytes: usize) -> TokenCache {
        let c = TokenCache::new(&CacheConfig {
            max_entries,
            max_bytes,
            ..CacheConfig::default()
        });
        c.synced(Instant::now());
        c
    }

    fn granted(c: Connection) -> Accounts {
        Arc::new([Granted {
            row: Arc::new(c),
            clients: Arc::new(["demo-mcp".into()]),
        }])
    }

    fn row(n: usize) -> Accounts {
        granted(Connection::for_tests(
            &format!("c{n}"),
            &format!("user{n}"),
            "acme",
            "k1.sealed",
        ))
    }

    fn ticket(c: &TokenCache, n: usize) -> Ticket {
        match c.get(&format!("user{n}"), "acme") {
            Lookup::Miss(t) => t,
            Lookup::Hit(_) => panic!("user{n} is cached"),
            Lookup::Bypass => panic!("bypass"),
        }
    }

    fn is_hit(c: &TokenCache, n: usize) -> bool {
        matches!(c.get(&format!("user{n}"), "acme"), Lookup::Hit(_))
    }

    #[test]
    fn bounded_by_entries_and_bytes_oldest_out_first() {
        let c = cache(3, 1 << 20);
        for n in 0..5 {
            let t = ticket(&c, n);
            c.fill(t, &row(n));
        }
        let s = c.stats();
        assert_eq!(s.entries, 3);
        assert!(!is_hit(&c, 0) && !is_hit(&c, 1));
        assert!(is_hit(&c, 2) && is_hit(&c, 3) && is_hit(&c, 4));

        let one = size_of(&row(0));
        let c = cache(100, 2 * one + one / 2);
        for n in 0..4 {
            let t = ticket(&c, n);
            c.fill(t, &row(n));
        }
        assert_eq!(c.stats().entries, 2);
        assert!(c.stats().bytes <= (2 * one + one / 2) as u64);
    }

    #[test]
    fn a_change_applied_during_a_read_keeps_the_read_row_out() {
        let c = cache(10, 1 << 20);
        let t = ticket(&c, 1);
        // The row was read, then a change to some connection was applied before the fill.
        c.invalidate("c-anything");
        c.fill(t, &row(1));
        assert!(!c.holds("c1"));
        let t = ticket(&c, 1);
        c.fill(t, &row(1));
        assert!(c.holds("c1"));
        c.invalidate("c1");
        assert!(!c.holds("c1") && !is_hit(&c, 1));
    }

    #[test]
    fn a_new_account_drops_its_users_cached_accounts() {
        let c = cache(10, 1 << 20);
        let t = ticket(&c, 1);
        c.fill(t, &row(1));
        let t = ticket(&c, 2);
        c.fill(t, &row(2));
        // A new row's id is in no entry: only the user key reaches the entry.
        c.invalidate("c-new");
        assert!(is_hit(&c, 1));
        c.invalidate(&user_key("acme", "user1"));
        assert!(!is_hit(&c, 1) && !c.holds("c1"));
        assert!(is_hit(&c, 2), "another user's entry stays");
    }

    #[test]
    fn without_a_current_feed_the_cache_is_bypassed_and_starts_empty() {
        let c = cache(10, 1 << 20);
        let t = ticket(&c, 1);
        c.fill(t, &row(1));
        assert!(is_hit(&c, 1));
        c.lost_sync();
        assert!(matches!(c.get("user1", "acme"), Lookup::Bypass));
        assert_eq!(c.stats().entries, 0);
        // Confirmed, but longer ago than the window: still bypassed.
        c.synced(Instant::now() - c.window() - Duration::from_millis(1));
        assert!(matches!(c.get("user1", "acme"), Lookup::Bypass));
        c.synced(Instant::now());
        assert!(matches!(c.get("user1", "acme"), Lookup::Miss(_)));
    }

    #[test]
    fn rows_not_worth_keeping_are_not_kept() {
        let c = cache(10, 1 << 20);
        let mut expired = Connection::for_tests("c1", "user1", "acme", "k1.x");
        expired.expires_at = Some(crate::time::now() - 1);
        let t = ticket(&c, 1);
        c.fill(t, &granted(expired));
        let mut revoked = Connection::for_tests("c1", "user1", "acme", "k1.x");
        revoked.status = ConnectionStatus::Revoked;
        c.fill(t, &granted(revoked));
        assert_eq!(c.stats().entries, 0);
        let off = TokenCache::new(&CacheConfig {
            max_entries: 0,
            ..CacheConfig::default()
        });
        off.synced(Instant::now());
        assert!(matches!(off.get("user1", "acme"), Lookup::Bypass));
    }
}
