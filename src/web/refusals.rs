//! Refusals that a caller can repeat at will, in the audit log without growing it: refused
//! callback `state` values (at `/auth/callback` and `/oauth/{provider}/callback`), a signed-in
//! user opening someone else's (or an unknown) connect link, and a signed-in non-administrator
//! opening `/admin`. Every one is counted in metrics or logs, but the audit log gets at most one
//! row per minute for each kind of refusal (per signed-in user where there is one), carrying how
//! many there were. The first refusal after a quiet minute is written at once, with its context;
//! the ones after it are added to the next row (written by the next refusal of that kind a
//! minute later, or by the cleanup task).
//!
//! Memory is bounded: at most `MAX_KINDS` kinds are remembered; a kind with nothing pending and
//! its minute over carries no information and is forgotten first.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::db::Db;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::metrics::Metrics;

/// At most one audit row per kind of refusal in this many seconds.
pub const AUDIT_WINDOW_SECONDS: i64 = 60;

/// Kinds of refusal remembered at most (each one small).
const MAX_KINDS: usize = 10_000;

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

/// One kind of refusal: its audit event, the signed-in user refused (none for anonymous
/// callbacks), and what else tells rows apart (the callback; the elicitation, or "unknown id").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Kind {
    event: AuditAction,
    user: Option<(String, String)>,
    about: String,
}

/// The row a kind's pending count is written with: the first refusal's context.
#[derive(Default)]
struct Window {
    last_row_at: Option<i64>,
    /// Refusals not yet in an audit row.
    pending: u64,
    label: String,
    subject: Option<String>,
    provider: Option<String>,
    client_id: Option<String>,
    elicitation_id: Option<String>,
}

/// Per application: the refusals not yet written to the audit log.
#[derive(Default)]
pub struct Refusals {
    windows: Mutex<HashMap<Kind, Window>>,
}

/// A refusal to aggregate: `row` is its audit row (its `detail` is replaced by `label` and the
/// count), `about` what tells it apart from others of its event and user.
pub struct RefusalRecord<'a> {
    pub row: AuditEvent<'a>,
    pub about: &'a str,
    pub label: &'a str,
}

impl Refusals {
    /// Counts one refused callback state, and writes an audit row if none was written for its
    /// kind in the last minute.
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
        let label = format!("{} callback", callback.as_str());
        self.note(
            db,
            RefusalRecord {
                row: AuditEvent {
                    provider: ctx.provider,
                    elicitation_id: ctx.elicitation_id,
                    request_id: ctx.request_id,
                    ..AuditEvent::new(event)
                },
                about: callback.as_str(),
                label: &label,
            },
        )
        .await;
    }

    /// Counts one refusal of a signed-in user (`row.actor` and `row.issuer` name them), and
    /// writes its audit row if none was written for its kind in the last minute.
    pub async fn record_user(&self, db: &Db, refusal: RefusalRecord<'_>) {
        self.note(db, refusal).await
    }

    async fn note(&self, db: &Db, r: RefusalRecord<'_>) {
        let now = crate::time::now();
        let kind = Kind {
            event: r.row.event,
            user: r
                .row
                .issuer
                .zip(r.row.actor)
                .map(|(i, a)| (i.to_owned(), a.to_owned())),
            about: r.about.to_owned(),
        };
        let due = {
            let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
            if !windows.contains_key(&kind) && windows.len() >= MAX_KINDS {
                windows.retain(|_, w| {
                    w.pending > 0 || w.last_row_at.is_none_or(|t| now - t < AUDIT_WINDOW_SECONDS)
                });
            }
            if !windows.contains_key(&kind) && windows.len() >= MAX_KINDS {
                // Every kind remembered is live: no aggregation for this one, rather than grow.
                Some(1)
            } else {
                // The later row repeats the first one's context only when every refusal it
                // counts shares it: a kind about one elicitation.
                let shared = r.row.elicitation_id == Some(r.about);
                let keep = |v: Option<&str>| v.filter(|_| shared).map(str::to_owned);
                let w = windows.entry(kind).or_insert_with(|| Window {
                    label: r.label.to_owned(),
                    subject: keep(r.row.subject),
                    provider: keep(r.row.provider),
                    client_id: keep(r.row.client_id),
                    elicitation_id: keep(r.row.elicitation_id),
                    ..Window::default()
                });
                w.pending += 1;
                if w.last_row_at
                    .is_none_or(|t| now - t >= AUDIT_WINDOW_SECONDS)
                {
                    w.last_row_at = Some(now);
                    Some(std::mem::take(&mut w.pending))
                } else {
                    None
                }
            }
        };
        if let Some(count) = due {
            db.audit(AuditEvent {
                detail: Some(&detail(r.label, count)),
                ..r.row
            })
            .await;
        }
    }

    /// Writes the counts still pending whose window has passed at `now` (the cleanup task calls
    /// this every minute).
    pub async fn flush(&self, db: &Db, now: i64) {
        struct Due {
            kind: Kind,
            count: u64,
            label: String,
            subject: Option<String>,
            provider: Option<String>,
            client_id: Option<String>,
            elicitation_id: Option<String>,
        }
        let due: Vec<Due> = {
            let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
            windows
                .iter_mut()
                .filter(|(_, w)| {
                    w.pending > 0
                        && w.last_row_at
                            .is_none_or(|t| now - t >= AUDIT_WINDOW_SECONDS)
                })
                .map(|(kind, w)| {
                    w.last_row_at = Some(now);
                    Due {
                        kind: kind.clone(),
                        count: std::mem::take(&mut w.pending),
                        label: w.label.clone(),
                        subject: w.subject.clone(),
                        provider: w.provider.clone(),
                        client_id: w.client_id.clone(),
                        elicitation_id: w.elicitation_id.clone(),
                    }
                })
                .collect()
        };
        for d in due {
            let user = d.kind.user.as_ref();
            db.audit(AuditEvent {
                actor: user.map(|(_, s)| s.as_str()),
                issuer: user.map(|(i, _)| i.as_str()),
                subject: d.subject.as_deref(),
                provider: d.provider.as_deref(),
                client_id: d.client_id.as_deref(),
                elicitation_id: d.elicitation_id.as_deref(),
                detail: Some(&detail(&d.label, d.count)),
                ..AuditEvent::new(d.kind.event)
            })
            .await;
        }
    }

    /// Kinds remembered now (for tests of the memory bound).
    pub fn tracked(&self) -> usize {
        self.windows.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

fn detail(label: &str, count: u64) -> String {
    format!("{label}; count={count}")
}
