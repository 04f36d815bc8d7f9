//! Sealed request state: the opaque `request_state` an MCP server may put verbatim into a
//! 2026-07-28 `InputRequiredResult.requestState` and later hand back to `POST /v1/tokens`.
//!
//! It is attacker-controlled input once it leaves the MCP server (the MCP client echoes it), so it
//! is sealed with the service's key ring (AES-256-GCM). The associated data names the API client,
//! so a state issued to one client does not even open for another; the sealed claims bind the
//! identity issuer, the subject, the provider and the elicitation, and carry a short expiry (the
//! elicitation's own).

use serde::{Deserialize, Serialize};

use crate::crypto::KeyRing;
use crate::db::elicitations::Elicitation;
use crate::error::{Error, RequestStateRefusal};
use crate::ids::UserRef;

/// Longest sealed value accepted; anything longer is not ours.
const MAX_LEN: usize = 4096;

/// Associated data: where a sealed request state may be opened.
fn aad(client_id: &str) -> String {
    format!("mcp-connect/v1/request-state/{client_id}")
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    v: u8,
    iss: String,
    sub: String,
    prv: String,
    eid: String,
    exp: i64,
}

/// What an opened, checked request state says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestState {
    pub elicitation_id: String,
    pub expires_at: i64,
}

/// Seals a request state for `e`, to be opened only by `e.client_id`.
pub fn seal(keys: &KeyRing, e: &Elicitation) -> Result<String, crate::error::Error> {
    let claims = Claims {
        v: 1,
        iss: e.issuer.clone(),
        sub: e.subject.clone(),
        prv: e.provider.clone(),
        eid: e.id.to_string(),
        exp: e.expires_at,
    };
    let json = serde_json::to_vec(&claims)?;
    Ok(keys.seal(&json, &aad(&e.client_id))?)
}

/// The caller as the API authenticated it, and what it asks about.
pub struct Expected<'a> {
    pub client_id: &'a str,
    /// The user the request names, at the identity issuer this service trusts.
    pub user: UserRef,
    pub provider: &'a str,
    pub now: i64,
}

/// Opens and checks a request state. Every refusal is `invalid_request_state` with a reason
/// (`invalid`, `foreign`, `expired`) and a sentence that says what to do.
pub fn open(keys: &KeyRing, sealed: &str, want: &Expected<'_>) -> Result<RequestState, Error> {
    let invalid = || Error::InvalidRequestState(RequestStateRefusal::Invalid);
    if sealed.is_empty() || sealed.len() > MAX_LEN {
        return Err(invalid());
    }
    let plain = keys.open(sealed, &aad(want.client_id)).map_err(|e| {
        tracing::info!(client_id = want.client_id, error = %e, "request_state refused");
        invalid()
    })?;
    let c: Claims = serde_json::from_slice(&plain).map_err(|_| invalid())?;
    if c.v != 1 {
        return Err(invalid());
    }
    if !want.user.is(&c.iss, &c.sub) || c.prv != want.provider {
        return Err(Error::InvalidRequestState(RequestStateRefusal::Foreign));
    }
    if c.exp <= want.now {
        return Err(Error::InvalidRequestState(RequestStateRefusal::Expired));
    }
    Ok(RequestState {
        elicitation_id: c.eid,
        expires_at: c.exp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::elicitations::ElicitationStatus;
    use secrecy::SecretString;

    fn ring() -> KeyRing {
        KeyRing::parse(&[SecretString::from(crate::crypto::generate_key("k1"))]).unwrap()
    }

    fn elicitation() -> Elicitation {
        Elicitation {
            id: "e".repeat(24).into(),
            client_id: "demo".into(),
            issuer: "https://id.example".into(),
            subject: "alice".into(),
            provider: "acme".into(),
            scopes: vec![],
            status: ElicitationStatus::Pending,
            connection_id: None,
            failure: None,
            created_at: 1000,
            expires_at: 2000,
            params: Default::default(),
            add_account: false,
            account_connection_id: None,
            owner: Default::default(),
            client_organization: None,
        }
    }

    fn want<'a>(client_id: &'a str, subject: &'a str, now: i64) -> Expected<'a> {
        Expected {
            client_id,
            user: UserRef::new("https://id.example", subject),
            provider: "acme",
            now,
        }
    }

    fn reason(r: Result<RequestState, Error>) -> &'static str {
        match r {
            Err(Error::InvalidRequestState(r)) => r.reason(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_then_every_kind_of_refusal() {
        let keys = ring();
        let e = elicitation();
        let s = seal(&keys, &e).unwrap();
        assert!(!s.contains("alice"), "the subject is not readable in {s}");
        let ok = open(&keys, &s, &want("demo", "alice", 1500)).unwrap();
        assert_eq!(ok.elicitation_id, e.id);
        assert_eq!(
            reason(open(&keys, &s, &want("other", "alice", 1500))),
            "invalid"
        );
        assert_eq!(
            reason(open(&keys, &s, &want("demo", "bob", 1500))),
            "foreign"
        );
        assert_eq!(
            reason(open(&keys, &s, &want("demo", "alice", 2000))),
            "expired"
        );
        assert_eq!(
            reason(open(&ring(), &s, &want("demo", "alice", 1500))),
            "invalid"
        );
        let mut t = s.clone().into_bytes();
        let i = t.len() / 2;
        t[i] = if t[i] == b'A' { b'B' } else { b'A' };
        let t = String::from_utf8(t).unwrap();
        assert_eq!(
            reason(open(&keys, &t, &want("demo", "alice", 1500))),
            "invalid"
        );
        assert_eq!(
            reason(open(&keys, "", &want("demo", "alice", 1500))),
            "invalid"
        );
    }
}
