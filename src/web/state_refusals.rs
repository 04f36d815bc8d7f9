//! Refused callback `state` values (at `/auth/callback` and `/oauth/{provider}/callback`): every
//! one is counted in metrics, but the audit log gets at most one row per minute for each kind of
//! refusal, carrying how many there were, so a flood of forged or replayed callbacks cannot grow
//! the log. The first refusal after a quiet minute is written at once, with its context; the
//! ones after it are added to the next row (written by the next refusal of that kind a minute
//! later, or by the cleanup task).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::db::Db;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::server::metrics::Metrics;

/// At most one audit row per kind of refusal in this many seconds.
pub const AUDIT_WINDOW_SECONDS: i64 = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Callback {
    /// `/auth/callback`, the identity issuer's answer.
    Login,
    /// `/oauth/{provider}/callback`.
    Provider,
}

impl Callback {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Login => "login",
            Self::Provider => "provider",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// No `state` at all, or an absurd one.
    Missing,
    /// Not a state this service issued (or, at sign-in, not one this browser started).
    Unknown,
    /// Used already.
    Replayed,
    /// Started in another browser session.
    ForeignBrowser,
    /// Older than 10 minutes.
    Expired,
    /// Came back to another provider's callback than the one it was sent to.
    WrongProvider,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Unknown => "unknown",
            Self::Replayed => "replayed",
            Self::ForeignBrowser => "foreign_browser",
            Self::Expired => "expired",
            Self::WrongProvider => "wrong_provider",
        }
    }

    /// The audit event; a missing state is only counted (it is not even an attempt).
    pub fn audit_event(self) -> Option<AuditAction> {
        match self {
            Self::Missing => None,
            Self::Unknown => Some(AuditAction::StateUnknownRefused),
            Self::Replayed => Some(AuditAction::StateReplayRefused),
            Self::ForeignBrowser => Some(AuditAction::StateSessionMismatchRefused),
            Self::Expired => Some(AuditAction::StateExpiredRefused),
            Self::WrongProvider => Some(AuditAction::StateWrongProviderRefused),
        }
    }
}

/// Context for the audit row, when one is written for this refusal.
#[derive(Debug, Default, Clone, Copy)]
pub struct Context<'a> {
    pub provider: Option<&'a str>,
    pub elicitation_id: Option<&'a str>,
    pub request_id: Option<&'a str>,
}

#[derive(Default)]
struct Window {
    last_row_at: Option<i64>,
    /// Refusals not yet in an audit row.
    pending: u64,
}

/// Per application: the refusals not yet written to the audit log.
#[derive(Default)]
pub struct StateRefusals {
    windows: Mutex<HashMap<(Callback, Reason), Window>>,
}

fn detail(callback: Callback, count: u64) -> String {
    format!("{} callback; count={count}", callback.as_str())
}

impl StateRefusals {
    /// Counts one refusal, and writes an audit row if none was written for its kind in the last
    /// minute.
    pub async fn record(
        &self,
        db: &Db,
        metrics: &Metrics,
        callback: Callback,
        reason: Reason,
        ctx: Context<'_>,
    ) {
        metrics.state_refused(callback.as_str(), reason.as_str());
        let Some(event) = reason.audit_event() else {
            return;
        };
        tracing::info!(target: "security", callback = callback.as_str(), reason = reason.as_str(), request_id = ctx.request_id, "callback state refused");
        let now = crate::time::now();
        let due = {
            let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
            let w = windows.entry((callback, reason)).or_default();
            w.pending += 1;
            if w.last_row_at
                .is_none_or(|t| now - t >= AUDIT_WINDOW_SECONDS)
            {
                w.last_row_at = Some(now);
                Some(std::mem::take(&mut w.pending))
            } else {
                None
            }
        };
        if let Some(count) = due {
            db.audit(AuditEvent {
                provider: ctx.provider,
                elicitation_id: ctx.elicitation_id,
                request_id: ctx.request_id,
                detail: Some(&detail(callback, count)),
                ..AuditEvent::new(event)
            })
            .await;
        }
    }

    /// Writes the counts still pending whose window has passed at `now` (the cleanup task calls
    /// this every minute).
    pub async fn flush(&self, db: &Db, now: i64) {
        let due: Vec<(Callback, Reason, u64)> = {
            let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
            windows
                .iter_mut()
                .filter(|(_, w)| {
                    w.pending > 0
                        && w.last_row_at
                            .is_none_or(|t| now - t >= AUDIT_WINDOW_SECONDS)
                })
                .map(|(&(c, r), w)| {
                    w.last_row_at = Some(now);
                    (c, r, std::mem::take(&mut w.pending))
                })
                .collect()
        };
        for (callback, reason, count) in due {
            if let Some(event) = reason.audit_event() {
                db.audit(AuditEvent {
                    detail: Some(&detail(callback, count)),
                    ..AuditEvent::new(event)
                })
                .await;
            }
        }
    }
}
