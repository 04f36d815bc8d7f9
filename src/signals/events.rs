//! Completion signals for MCP servers: events recorded in a durable outbox (the `events` table),
//! delivered as signed webhooks (Standard Webhooks: `webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`) with retries and
//! exponential backoff, and streamed to listeners of `GET /v1/events`.
//!
//! An elicitation's events go to the client that created it. A connection's events
//! (`connection.needs_reauth`, `connection.revoked`) go to every client allowed to use its
//! provider, since a connection is the user's, not one client's.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use futures_util::StreamExt;
use hmac::{Hmac, Mac};
use rand::Rng;
use secrecy::ExposeSecret;
use serde::Serialize;
use sha2::Sha256;
use tokio::sync::{Notify, broadcast};

use crate::config::{ClientConfig, WebhookConfig};
use crate::crypto::random_token;
use crate::db::change::{Announce, Change};
use crate::db::connections::Connection;
use crate::db::elicitations::{Elicitation, ElicitationStatus};
use crate::db::events::{DueDelivery, NewEvent};
use crate::ids::{ConnectionId, ElicitationId};
use crate::signals::Signals;
use crate::time::now;
use crate::time::{now_ms, rfc3339};

/// Deliveries given up after this many attempts (about five hours of retrying).
pub const MAX_ATTEMPTS: i64 = 16;
/// The webhook client's whole-request timeout.
const SEND_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a replica holds a delivery it is sending before others may take it: the send's
/// timeout and a margin, so a replica killed mid-send delays that webhook by seconds, not a
/// minute.
const LEASE_MS: i64 = SEND_TIMEOUT.as_millis() as i64 + 5_000;
/// How often the outbox is looked at, whatever wakes it.
const SCAN_EVERY: Duration = Duration::from_secs(1);
/// Events are kept this long for `GET /v1/events` replays (`Last-Event-ID`).
const KEEP_SECONDS: i64 = 7 * 86_400;
/// Deliveries sent at once.
const CONCURRENCY: usize = 8;

/// The kinds of event, as named in `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub enum EventType {
    #[serde(rename = "elicitation.completed")]
    ElicitationCompleted,
    #[serde(rename = "elicitation.declined")]
    ElicitationDeclined,
    #[serde(rename = "elicitation.failed")]
    ElicitationFailed,
    #[serde(rename = "connection.needs_reauth")]
    ConnectionNeedsReauth,
    #[serde(rename = "connection.revoked")]
    ConnectionRevoked,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ElicitationCompleted => "elicitation.completed",
            Self::ElicitationDeclined => "elicitation.declined",
            Self::ElicitationFailed => "elicitation.failed",
            Self::ConnectionNeedsReauth => "connection.needs_reauth",
            Self::ConnectionRevoked => "connection.revoked",
        }
    }
}

/// The body of every webhook and of every `GET /v1/events` message.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventBody {
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// RFC 3339, when the event happened.
    pub timestamp: String,
    pub data: EventData,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EventData {
    /// The API client the event is addressed to.
    pub client_id: String,
    /// The user's `sub` at the identity issuer, as the MCP server knows it.
    pub subject: String,
    pub provider: String,
    /// The elicitation the event is about, if any: a 2025-11-25 server sends
    /// `notifications/elicitation/complete` with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub elicitation_id: Option<ElicitationId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub connection_id: Option<ConnectionId>,
    /// Which account at the provider the connection is (connection events, and a completed
    /// elicitation's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<crate::db::connections::AccountRef>,
    /// Elicitation events: the final status (`completed`, `declined`, `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// In-process wake-ups for the delivery task and event streams.
#[derive(Clone)]
pub struct Hub {
    /// Client ids with new events.
    tx: broadcast::Sender<String>,
    outbox: Arc<Notify>,
    http: crate::outbound::Http,
}

impl Hub {
    /// Fails (stopping start-up) if the webhook client cannot be built.
    /// Webhooks go through the SSRF guard like every configured URL.
    pub fn new(policy: crate::config::ssrf::Policy) -> Result<Self, reqwest::Error> {
        let (tx, _) = broadcast::channel(1024);
        let http = crate::outbound::Http::build(policy, SEND_TIMEOUT)?;
        Ok(Self {
            tx,
            outbox: Arc::new(Notify::new()),
            http,
        })
    }

    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.tx.subscribe()
    }
}

/// The Standard Webhooks signature header value for one attempt.
pub fn sign(secret: &[u8], msg_id: &str, timestamp: i64, body: &str) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        // HMAC accepts keys of any length, so this is never taken; were it taken, an empty
        // signature is one every receiver refuses.
        return String::new();
    };
    mac.update(format!("{msg_id}.{timestamp}.").as_bytes());
    mac.update(body.as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// Delay before attempt `attempts + 1`: 1 s, 2 s, 4 s … capped at an hour, with a little jitter.
pub fn backoff_ms(attempts: i64) -> i64 {
    let base = 1000i64.saturating_mul(1 << attempts.clamp(1, 22).saturating_sub(1));
    base.min(3_600_000) + rand::thread_rng().gen_range(0..250)
}

impl Signals {
    /// The event rows for each of `clients`, to write in the transaction of the change they
    /// describe (`Change::events`).
    fn event_rows(
        &self,
        event_type: EventType,
        data: EventData,
        clients: &[&ClientConfig],
    ) -> Result<Vec<NewEvent>, serde_json::Error> {
        let timestamp = rfc3339(now());
        clients
            .iter()
            .map(|c| {
                let body = EventBody {
                    event_type,
                    timestamp: timestamp.clone(),
                    data: EventData {
                        client_id: c.id.clone(),
                        ..data.clone()
                    },
                };
                Ok(NewEvent {
                    id: format!("msg_{}", random_token(18)),
                    client_id: c.id.clone(),
                    event_type: event_type.as_str(),
                    payload: serde_json::to_string(&body)?,
                    deliver_at_ms: c.webhook.as_ref().map(|_| now_ms()),
                })
            })
            .collect()
    }

    /// The event for an elicitation that reached `status`, for the client that created it
    /// (none for `pending` and `expired`).
    pub fn elicitation_event_rows(
        &self,
        e: &Elicitation,
        status: ElicitationStatus,
        account: Option<&crate::db::connections::AccountRef>,
    ) -> Result<Vec<NewEvent>, serde_json::Error> {
        let event_type = match status {
            ElicitationStatus::Completed => EventType::ElicitationCompleted,
            ElicitationStatus::Declined => EventType::ElicitationDeclined,
            ElicitationStatus::Failed => EventType::ElicitationFailed,
            ElicitationStatus::Pending | ElicitationStatus::Expired => return Ok(Vec::new()),
        };
        let Some(client) = self.clients.get(&e.client_id) else {
            return Ok(Vec::new());
        };
        let data = EventData {
            client_id: client.id.clone(),
            subject: e.subject.clone(),
            provider: e.provider.clone(),
            elicitation_id: Some(e.id.clone()),
            connection_id: e.connection_id.clone(),
            account: account.cloned(),
            status: Some(status.as_str().to_owned()),
        };
        self.event_rows(event_type, data, &[client])
    }

    /// A connection event, for every client allowed to use the connection's provider.
    pub fn connection_event_rows(
        &self,
        event_type: EventType,
        c: &Connection,
        apps: &[String],
    ) -> Result<Vec<NewEvent>, serde_json::Error> {
        // Only the apps that may use the grant hear of it (others must not learn it exists).
        let clients: Vec<&ClientConfig> = self
            .clients
            .iter()
            .filter(|x| x.providers.contains(&c.provider) && apps.contains(&x.id))
            .collect();
        let data = EventData {
            client_id: String::new(),
            subject: c.subject.clone(),
            provider: c.provider.clone(),
            elicitation_id: None,
            connection_id: Some(c.id.clone()),
            account: Some(c.account()),
            status: None,
        };
        self.event_rows(event_type, data, &clients)
    }

    /// Commits a change with its audit rows and events, then wakes what waits on it here: the
    /// webhook deliverer, event streams and long polls (other replicas are told by the
    /// change's own notification).
    pub async fn commit(&self, change: Change) -> Result<(), crate::db::Error> {
        let announce = change.commit().await?;
        self.announce(announce);
        Ok(())
    }

    fn announce(&self, a: Announce) {
        let had_events = !a.event_clients.is_empty();
        for client_id in a.event_clients {
            tracing::debug!(client_id = %client_id, "event recorded");
            let _ = self.events.tx.send(client_id);
        }
        if had_events {
            self.events.outbox.notify_one();
        }
        for id in &a.elicitations {
            self.waiters.wake_local(id);
        }
        for id in &a.connections {
            self.token_cache.invalidate(id);
        }
    }

    /// Another process recorded events for `client_id` (`*`: perhaps for anyone): wake the
    /// event streams and the webhook deliverer here.
    pub fn events_arrived(&self, client_id: &str) {
        let _ = self.events.tx.send(client_id.to_owned());
        self.events.outbox.notify_one();
    }
}

/// Sends due webhooks until shutdown; old events are pruned on the way.
pub fn spawn_delivery(state: Signals) -> tokio::task::JoinHandle<()> {
    let mut shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        let mut last_prune = 0;
        loop {
            if *shutdown.borrow() {
                return;
            }
            // A delivery under way is finished rather than cut off (its lease would otherwise
            // hold it back for a minute after a restart).
            deliver_due(&state).await;
            if now() - last_prune > 3600 {
                last_prune = now();
                if let Err(e) = state.db.delete_old_events(now() - KEEP_SECONDS).await {
                    tracing::warn!(error = %e, "could not prune old events");
                }
            }
            tokio::select! {
                _ = state.events.outbox.notified() => {}
                _ = tokio::time::sleep(SCAN_EVERY) => {}
                _ = shutdown.changed() => return,
            }
        }
    })
}

async fn deliver_due(state: &Signals) {
    loop {
        let due = match state.db.due_deliveries(now_ms(), 50).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the webhook outbox");
                return;
            }
        };
        if due.is_empty() {
            return;
        }
        let n = due.len();
        futures_util::stream::iter(due)
            .for_each_concurrent(CONCURRENCY, |d| deliver_one(state, d))
            .await;
        if n < 50 {
            return;
        }
    }
}

async fn deliver_one(state: &Signals, d: DueDelivery) {
    match state.db.claim_delivery(&d, now_ms() + LEASE_MS).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(error = %e, "could not claim a webhook delivery");
            return;
        }
    }
    let attempts = d.attempts + 1;
    let webhook = state
        .clients
        .get(&d.client_id)
        .and_then(|c| c.webhook.as_ref());
    let outcome = match webhook {
        None => Err("the client no longer has a webhook_url".to_owned()),
        Some(w) => send(&state.events.http, w, &d).await,
    };
    let r = match outcome {
        Ok(()) => {
            tracing::info!(client_id = %d.client_id, webhook_id = %d.id, attempts, "webhook delivered");
            state.db.delivery_succeeded(d.seq, attempts).await
        }
        Err(why) => {
            let retry = (attempts < MAX_ATTEMPTS && webhook.is_some())
                .then(|| now_ms() + backoff_ms(attempts));
            tracing::warn!(client_id = %d.client_id, webhook_id = %d.id, attempts, error = %why,
                gave_up = retry.is_none(), "webhook delivery failed");
            state.db.delivery_failed(d.seq, attempts, retry, &why).await
        }
    };
    if let Err(e) = r {
        tracing::warn!(error = %e, webhook_id = %d.id, "could not record a webhook attempt");
    }
}

async fn send(
    http: &crate::outbound::Http,
    w: &WebhookConfig,
    d: &DueDelivery,
) -> Result<(), String> {
    let ts = now();
    let signature = sign(w.secret.expose_secret(), &d.id, ts, &d.payload);
    let resp = http
        .post(w.url.clone())
        // Some receivers take a secret path for a credential.
        .private_path()
        .header("content-type", "application/json")
        .header("webhook-id", &d.id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signature)
        .body(d.payload.clone())
        .send()
        .await
        .map_err(|e| {
            // The URL is the operator's; reqwest's message names it, which is fine, but keep
            // the cause chain short.
            format!("request failed: {}", e.without_url())
        })?;
    let status = resp.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("the endpoint answered HTTP {}", status.as_u16()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_the_standard_webhooks_reference_vector() {
        // From the Standard Webhooks specification's reference implementation tests.
        let secret = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = sign(
            &secret,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!((1000..1250).contains(&backoff_ms(1)));
        assert!((2000..2250).contains(&backoff_ms(2)));
        assert!((8000..8250).contains(&backoff_ms(4)));
        assert!((3_600_000..3_600_250).contains(&backoff_ms(20)));
    }
}
