//! The audit log's record of proxy use: that a client used a connection through the proxy, at
//! most one row per client and connection per hour (with how many calls it counts), so a busy
//! MCP server does not write a row per request. Counts not yet written go out with the next use
//! after the hour, or from the cleanup task (`flush`).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::db::Db;
use crate::db::audit::{AuditAction, AuditEvent};

/// One row per client and connection per this many seconds.
pub const WINDOW_SECONDS: i64 = 3600;

/// Pairs remembered at most; past it, stale ones are forgotten first, then every call is its
/// own row rather than memory growing.
const MAX_PAIRS: usize = 100_000;

/// Who used which connection (the row's context; the connection names its user).
#[derive(Clone, Copy, Debug)]
pub struct Use<'a> {
    pub client_id: &'a str,
    pub connection_id: &'a str,
    pub provider: &'a str,
}

struct Window {
    provider: String,
    last_row_at: i64,
    pending: u64,
}

/// Windows by client, then connection: a call whose pair is known finds it by the names it
/// has, allocating nothing.
#[derive(Default)]
struct Windows {
    by_client: HashMap<String, HashMap<String, Window>>,
    pairs: usize,
}

impl Windows {
    /// Counts one call at `now`: the count a row must record now, if one is due (the first
    /// call of a pair, or the first after its hour, with the calls between).
    fn count(&mut self, u: Use<'_>, now: i64) -> Option<u64> {
        let known = self
            .by_client
            .get_mut(u.client_id)
            .and_then(|by_connection| by_connection.get_mut(u.connection_id));
        match known {
            Some(x) if now - x.last_row_at < WINDOW_SECONDS => {
                x.pending += 1;
                None
            }
            Some(x) => {
                x.last_row_at = now;
                Some(std::mem::take(&mut x.pending) + 1)
            }
            None => {
                if self.pairs >= MAX_PAIRS {
                    self.forget_stale(now);
                }
                if self.pairs < MAX_PAIRS {
                    let window = Window {
                        provider: u.provider.to_owned(),
                        last_row_at: now,
                        pending: 0,
                    };
                    self.by_client
                        .entry(u.client_id.to_owned())
                        .or_default()
                        .insert(u.connection_id.to_owned(), window);
                    self.pairs += 1;
                }
                Some(1)
            }
        }
    }

    /// The counts whose hour has passed at `now`, taken (as client, connection, provider,
    /// count); pairs with nothing left to write are forgotten.
    fn take_due(&mut self, now: i64) -> Vec<(String, String, String, u64)> {
        let mut due = Vec::new();
        for (client_id, by_connection) in &mut self.by_client {
            for (connection_id, x) in by_connection {
                if x.pending > 0 && now - x.last_row_at >= WINDOW_SECONDS {
                    x.last_row_at = now;
                    let count = std::mem::take(&mut x.pending);
                    let (c, k, p) = (client_id.clone(), connection_id.clone(), &x.provider);
                    due.push((c, k, p.clone(), count));
                }
            }
        }
        self.forget_stale(now);
        due
    }

    /// Forgets the pairs with no count pending whose hour has passed.
    fn forget_stale(&mut self, now: i64) {
        let mut pairs = 0;
        self.by_client.retain(|_, by_connection| {
            by_connection.retain(|_, x| x.pending > 0 || now - x.last_row_at < WINDOW_SECONDS);
            pairs += by_connection.len();
            !by_connection.is_empty()
        });
        self.pairs = pairs;
    }
}

/// Per application: the proxy use not yet in the audit log.
#[derive(Default)]
pub struct Usage {
    windows: Mutex<Windows>,
}

impl Usage {
    /// Counts one call; writes a row when none was written for this pair in the last hour.
    pub async fn note(&self, db: &Db, u: Use<'_>, request_id: Option<&str>) {
        let now = crate::time::now();
        let due = self.lock().count(u, now);
        if let Some(count) = due {
            write(db, u, count, request_id).await;
        }
    }

    /// Writes the counts whose hour has passed at `now` (the cleanup task calls this).
    pub async fn flush(&self, db: &Db, now: i64) {
        let due = self.lock().take_due(now);
        for (client_id, connection_id, provider, count) in due {
            let u = Use {
                client_id: &client_id,
                connection_id: &connection_id,
                provider: &provider,
            };
            write(db, u, count, None).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Windows> {
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn write(db: &Db, u: Use<'_>, count: u64, request_id: Option<&str>) {
    db.audit(AuditEvent {
        provider: Some(u.provider),
        client_id: Some(u.client_id),
        connection_id: Some(u.connection_id),
        request_id,
        detail: Some(&format!("proxy; count={count}")),
        ..AuditEvent::new(AuditAction::ConnectionProxied)
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of<'a>(client_id: &'a str, connection_id: &'a str) -> Use<'a> {
        Use {
            client_id,
            connection_id,
            provider: "acme",
        }
    }

    /// A pair's first call is a row; the calls within its hour are counted into the next row,
    /// written by the first call after the hour or by the cleanup's flush.
    #[test]
    fn one_row_per_pair_per_hour_carries_the_calls_between() {
        let mut w = Windows::default();
        let t = 1_000_000;
        assert_eq!(w.count(of("c1", "k1"), t), Some(1));
        assert_eq!(w.count(of("c1", "k1"), t + 1), None);
        assert_eq!(w.count(of("c1", "k1"), t + 2), None);
        // Another connection, or another client on the same connection, is its own pair.
        assert_eq!(w.count(of("c1", "k2"), t + 3), Some(1));
        assert_eq!(w.count(of("c2", "k1"), t + 3), Some(1));
        assert_eq!(w.count(of("c1", "k1"), t + WINDOW_SECONDS), Some(3));
        assert_eq!(w.count(of("c1", "k1"), t + WINDOW_SECONDS + 1), None);
        assert!(w.take_due(t + WINDOW_SECONDS + 2).is_empty());
        let due = w.take_due(t + 2 * WINDOW_SECONDS);
        assert_eq!(due, [("c1".into(), "k1".into(), "acme".into(), 1)]);
        // Nothing pending and the hour past: forgotten, so the next call is a row again.
        assert_eq!(w.pairs, 1);
        assert!(w.take_due(t + 3 * WINDOW_SECONDS).is_empty());
        assert_eq!(w.pairs, 0);
        assert_eq!(w.count(of("c1", "k2"), t + 3 * WINDOW_SECONDS), Some(1));
    }

    /// Past the most pairs remembered, a new pair's calls are each a row of their own.
    #[test]
    fn past_the_limit_each_call_is_a_row() {
        let mut w = Windows::default();
        let ids: Vec<String> = (0..MAX_PAIRS).map(|i| i.to_string()).collect();
        for id in &ids {
            assert_eq!(w.count(of("c", id), 0), Some(1));
        }
        assert_eq!(w.count(of("c", "new"), 1), Some(1));
        assert_eq!(w.count(of("c", "new"), 2), Some(1));
        assert_eq!(w.pairs, MAX_PAIRS);
        // Once the remembered pairs are stale, the new one takes a place.
        assert_eq!(w.count(of("c", "new"), WINDOW_SECONDS), Some(1));
        assert_eq!(w.count(of("c", "new"), WINDOW_SECONDS + 1), None);
        assert_eq!(w.pairs, 1);
    }
}
