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
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Use {
    pub client_id: String,
    pub connection_id: String,
    pub provider: String,
}

struct Window {
    last_row_at: i64,
    pending: u64,
}

/// Per application: the proxy use not yet in the audit log.
#[derive(Default)]
pub struct Usage {
    windows: Mutex<HashMap<Use, Window>>,
}

impl Usage {
    /// Counts one call; writes a row when none was written for this pair in the last hour.
    pub async fn note(&self, db: &Db, u: Use, request_id: Option<&str>) {
        let now = crate::time::now();
        let due = {
            let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
            if !w.contains_key(&u) && w.len() >= MAX_PAIRS {
                w.retain(|_, x| x.pending > 0 || now - x.last_row_at < WINDOW_SECONDS);
            }
            let full = w.len() >= MAX_PAIRS;
            match w.get_mut(&u) {
                Some(x) if now - x.last_row_at < WINDOW_SECONDS => {
                    x.pending += 1;
                    None
                }
                Some(x) => {
                    x.last_row_at = now;
                    Some(std::mem::take(&mut x.pending) + 1)
                }
                None if full => Some(1),
                None => {
                    w.insert(
                        u.clone(),
                        Window {
                            last_row_at: now,
                            pending: 0,
                        },
                    );
                    Some(1)
                }
            }
        };
        if let Some(count) = due {
            write(db, &u, count, request_id).await;
        }
    }

    /// Writes the counts whose hour has passed at `now` (the cleanup task calls this).
    pub async fn flush(&self, db: &Db, now: i64) {
        let due: Vec<(Use, u64)> = {
            let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
            let due = w
                .iter_mut()
                .filter(|(_, x)| x.pending > 0 && now - x.last_row_at >= WINDOW_SECONDS)
                .map(|(u, x)| {
                    x.last_row_at = now;
                    (u.clone(), std::mem::take(&mut x.pending))
                })
                .collect();
            w.retain(|_, x| x.pending > 0 || now - x.last_row_at < WINDOW_SECONDS);
            due
        };
        for (u, count) in due {
            write(db, &u, count, None).await;
        }
    }
}

async fn write(db: &Db, u: &Use, count: u64, request_id: Option<&str>) {
    db.audit(AuditEvent {
        provider: Some(&u.provider),
        client_id: Some(&u.client_id),
        connection_id: Some(&u.connection_id),
        request_id,
        detail: Some(&format!("proxy; count={count}")),
        ..AuditEvent::new(AuditAction::ConnectionProxied)
    })
    .await;
}
