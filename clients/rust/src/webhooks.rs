//! Verifying mcp-connect's webhooks (the Standard Webhooks scheme): the signature is
//! `v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">` under the client's
//! `whsec_` secret, and the timestamp must be recent (replays are refused).
//!
//! ```
//! use mcp_connect_client::webhooks::Verifier;
//! let v = Verifier::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
//! let body = br#"{"test": 2432232314}"#;
//! let sig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
//! assert!(v.verify_at("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", sig, body, 1614265330).is_ok());
//! ```

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// How far a webhook's timestamp may be from now, either way.
pub const TOLERANCE_SECONDS: i64 = 5 * 60;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WebhookError {
    #[error("the webhook secret must be `whsec_` followed by base64")]
    BadSecret,
    #[error("the {0} header is missing")]
    MissingHeader(&'static str),
    #[error("the webhook-timestamp header is not a Unix time in seconds")]
    BadTimestamp,
    #[error("the webhook is too old or too far in the future")]
    Stale,
    #[error("no signature matches: the body or headers were altered, or the secret is wrong")]
    BadSignature,
    #[error("the body is not an mcp-connect event: {0}")]
    BadBody(String),
}

/// An mcp-connect event, as webhooks and `GET /v1/events` carry it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Event {
    /// `elicitation.completed`, `elicitation.declined`, `elicitation.failed`,
    /// `connection.needs_reauth` or `connection.revoked`.
    #[serde(rename = "type")]
    pub event_type: String,
    pub timestamp: String,
    pub data: EventData,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct EventData {
    pub client_id: String,
    pub subject: String,
    pub provider: String,
    pub elicitation_id: Option<String>,
    pub connection_id: Option<String>,
    /// Which account the connection is: on connection events and a completed elicitation's.
    #[serde(default)]
    pub account: Option<crate::Account>,
    pub status: Option<String>,
}

/// Checks webhook signatures with one client's secret.
#[derive(Clone)]
pub struct Verifier {
    key: Vec<u8>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier([redacted])")
    }
}

impl Verifier {
    /// `secret` as configured for the client: `whsec_` + base64.
    pub fn new(secret: &str) -> Result<Self, WebhookError> {
        let b64 = secret
            .strip_prefix("whsec_")
            .ok_or(WebhookError::BadSecret)?;
        let key = STANDARD
            .decode(b64.trim())
            .map_err(|_| WebhookError::BadSecret)?;
        if key.is_empty() {
            return Err(WebhookError::BadSecret);
        }
        Ok(Self { key })
    }

    /// Verifies a request as received (headers and the raw body bytes) and parses the event.
    pub fn verify(&self, headers: &http::HeaderMap, body: &[u8]) -> Result<Event, WebhookError> {
        let h = |name: &'static str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .ok_or(WebhookError::MissingHeader(name))
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        self.verify_at(
            h("webhook-id")?,
            h("webhook-timestamp")?,
            h("webhook-signature")?,
            body,
            now,
        )?;
        serde_json::from_slice(body).map_err(|e| WebhookError::BadBody(e.to_string()))
    }

    /// The signature check alone, at a given time (for tests and other HTTP stacks).
    pub fn verify_at(
        &self,
        id: &str,
        timestamp: &str,
        signatures: &str,
        body: &[u8],
        now: i64,
    ) -> Result<(), WebhookError> {
        let ts: i64 = timestamp
            .trim()
            .parse()
            .map_err(|_| WebhookError::BadTimestamp)?;
        if (now - ts).abs() > TOLERANCE_SECONDS {
            return Err(WebhookError::Stale);
        }
        let expected = self.sign(id, ts, body);
        // The header may list several space-separated signatures (key rotation); any v1 match wins.
        let ok = signatures.split(' ').any(|s| {
            s.strip_prefix("v1,")
                .and_then(|b64| STANDARD.decode(b64).ok())
                .is_some_and(|sig| bool::from(sig.ct_eq(&expected)))
        });
        if ok {
            Ok(())
        } else {
            Err(WebhookError::BadSignature)
        }
    }

    fn sign(&self, id: &str, ts: i64, body: &[u8]) -> Vec<u8> {
        // HMAC accepts keys of any length, so this cannot fail.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return Vec::new();
        };
        mac.update(format!("{id}.{ts}.").as_bytes());
        mac.update(body);
        mac.finalize().into_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn reference_vector_verifies_and_any_change_is_refused() {
        let v = Verifier::new(SECRET).unwrap();
        assert_eq!(v.verify_at(ID, "1614265330", SIG, BODY, TS), Ok(()));
        assert_eq!(
            v.verify_at(ID, "1614265330", &format!("v1,bm9wZQ== {SIG}"), BODY, TS),
            Ok(())
        );
        let tampered = br#"{"test": 2432232315}"#;
        assert_eq!(
            v.verify_at(ID, "1614265330", SIG, tampered, TS),
            Err(WebhookError::BadSignature)
        );
        assert_eq!(
            v.verify_at("msg_other", "1614265330", SIG, BODY, TS),
            Err(WebhookError::BadSignature)
        );
        assert_eq!(
            v.verify_at(ID, "1614265330", SIG, BODY, TS + 301),
            Err(WebhookError::Stale)
        );
        assert_eq!(
            Verifier::new("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap_err(),
            WebhookError::BadSecret
        );
        let other = Verifier::new("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").unwrap();
        assert_eq!(
            other.verify_at(ID, "1614265330", SIG, BODY, TS),
            Err(WebhookError::BadSignature)
        );
    }
}
