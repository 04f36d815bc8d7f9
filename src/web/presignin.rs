//! The pre-sign-in cookie: what a sign-in at the identity issuer needs between leaving for the
//! issuer and coming back to `/auth/callback` (the hash of the `state`, the nonce, the PKCE
//! verifier and the local path to return to), sealed with the service's key ring (AES-256-GCM)
//! and kept by the browser for at most 10 minutes.
//!
//! Nothing is written server-side before a sign-in succeeds, so strangers cannot grow any table,
//! and a sign-in answer completes only in the browser that holds its flow's cookie. Over https the
//! cookie is `__Host-` prefixed: no other origin (a sibling subdomain, a plain-http origin on the
//! same host) can plant it.

use axum::http::{HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};

use crate::crypto::{KeyRing, ct_eq};

/// Associated data: a sealed value made for anything else does not open as this cookie.
const AAD: &str = "mcp-connect/v1/pre-sign-in";
/// How long a started sign-in may take (SPEC: at most 10 minutes); also the cookie's lifetime.
pub const TTL_SECONDS: i64 = super::flow::FLOW_TTL_SECONDS;
/// Sign-ins one browser may have under way at once (several tabs); the oldest is dropped.
const MAX_FLOWS: usize = 4;
/// Completed sign-ins remembered, so a replay in the same browser is told "already used".
const MAX_USED: usize = 4;
/// Longest return path kept; longer ones lose their query, or fall back to `/account`.
pub const MAX_RETURN_TO: usize = 256;
/// Longest cookie value we try to open; anything longer is not ours.
const MAX_SEALED_LEN: usize = 4096;

/// The cookie's name: `__Host-` (Secure, no Domain, Path=/) whenever served over https.
pub fn cookie_name(https: bool) -> &'static str {
    if https {
        "__Host-mcp-connect-signin"
    } else {
        "mcp-connect-signin"
    }
}

/// One sign-in under way. No `Debug`: it holds the PKCE verifier.
#[derive(Serialize, Deserialize, Clone)]
pub struct LoginFlow {
    /// SHA-256 (base64url) of the `state` sent to the issuer.
    pub state_hash: String,
    pub nonce: String,
    pub verifier: String,
    /// A local path (checked when the flow starts and again when it ends).
    pub return_to: String,
    pub expires_at: i64,
}

#[derive(Serialize, Deserialize, Clone)]
struct UsedState {
    state_hash: String,
    expires_at: i64,
}

/// What this browser's pre-sign-in cookie holds (empty when it sent none, or none that opens).
#[derive(Serialize, Deserialize, Default)]
pub struct PreSignIn {
    v: u8,
    #[serde(default)]
    flows: Vec<LoginFlow>,
    #[serde(default)]
    used: Vec<UsedState>,
    /// Set by sign-out: the next sign-in asks the issuer for a fresh login, instead of letting it
    /// silently sign the same account back in. Unix seconds until which it holds.
    #[serde(default)]
    fresh_login_until: Option<i64>,
}

/// What a callback's state is, as far as this browser's cookie knows.
pub enum Lookup {
    Found(LoginFlow),
    Expired,
    /// This browser completed that sign-in already.
    Used,
    /// Not a state this browser started (or no cookie, or one that does not open).
    Unknown,
}

impl PreSignIn {
    /// Opens every cookie of ours the request carries (a browser may send two with the same name);
    /// values that do not open are ignored, and expired entries dropped.
    pub fn from_headers(keys: &KeyRing, https: bool, headers: &HeaderMap, now: i64) -> Self {
        let name = cookie_name(https);
        let mut out = PreSignIn {
            v: 1,
            ..Default::default()
        };
        let values = super::cookie_values(headers, name)
            .filter(|v| !v.is_empty() && v.len() <= MAX_SEALED_LEN);
        for value in values {
            let opened = keys
                .open(value, AAD)
                .ok()
                .and_then(|plain| serde_json::from_slice::<PreSignIn>(&plain).ok())
                .filter(|c| c.v == 1);
            let Some(c) = opened else {
                tracing::info!(target: "security", "a pre-sign-in cookie that does not open was ignored");
                continue;
            };
            out.flows.extend(c.flows);
            out.used.extend(c.used);
            out.fresh_login_until = out.fresh_login_until.max(c.fresh_login_until);
        }
        out.prune(now);
        out
    }

    fn prune(&mut self, now: i64) {
        self.used.retain(|u| u.expires_at >= now);
        let n = self.used.len();
        if n > MAX_USED {
            self.used.drain(..n - MAX_USED);
        }
        let n = self.flows.len();
        if n > MAX_FLOWS {
            self.flows.drain(..n - MAX_FLOWS);
        }
        if self.fresh_login_until.is_some_and(|t| t < now) {
            self.fresh_login_until = None;
        }
    }

    /// Whether the next sign-in must ask for a fresh login (consumes the flag).
    pub fn take_fresh_login(&mut self, now: i64) -> bool {
        self.fresh_login_until.take().is_some_and(|t| t >= now)
    }

    pub fn ask_fresh_login(&mut self, now: i64) {
        self.fresh_login_until = Some(now + TTL_SECONDS);
    }

    pub fn start(&mut self, flow: LoginFlow, now: i64) {
        self.flows.push(flow);
        self.prune(now);
    }

    /// The flow `state_hash` names, compared in constant time.
    pub fn lookup(&self, state_hash: &str, now: i64) -> Lookup {
        let same = |h: &str| ct_eq(h.as_bytes(), state_hash.as_bytes());
        if let Some(f) = self.flows.iter().find(|f| same(&f.state_hash)) {
            return if f.expires_at < now {
                Lookup::Expired
            } else {
                Lookup::Found(f.clone())
            };
        }
        if self.used.iter().any(|u| same(&u.state_hash)) {
            Lookup::Used
        } else {
            Lookup::Unknown
        }
    }

    /// Marks a flow done: forgotten, remembered only as used until it would have expired.
    pub fn finish(&mut self, state_hash: &str, now: i64) {
        let mut expires_at = now + TTL_SECONDS;
        self.flows.retain(|f| {
            if f.state_hash == state_hash {
                expires_at = f.expires_at;
                false
            } else {
                true
            }
        });
        self.used.push(UsedState {
            state_hash: state_hash.to_owned(),
            expires_at,
        });
        self.fresh_login_until = None;
        self.prune(now);
    }

    /// The `Set-Cookie` value that stores this state (or removes the cookie when there is
    /// nothing left to keep).
    pub fn set_cookie(
        &self,
        keys: &KeyRing,
        https: bool,
        now: i64,
    ) -> Result<HeaderValue, crate::error::Error> {
        let name = cookie_name(https);
        let secure = if https { "; Secure" } else { "" };
        let latest = self
            .flows
            .iter()
            .map(|f| f.expires_at)
            .chain(self.used.iter().map(|u| u.expires_at))
            .chain(self.fresh_login_until)
            .max();
        let (value, max_age) = match latest {
            Some(t) if t > now => {
                let json = serde_json::to_vec(self)?;
                (keys.seal(&json, AAD)?, (t - now).min(TTL_SECONDS))
            }
            _ => (String::new(), 0),
        };
        let cookie =
            format!("{name}={value}; Max-Age={max_age}; Path=/; HttpOnly; SameSite=Lax{secure}");
        // Key ids and base64url are cookie-safe, so this is always a valid header value.
        HeaderValue::from_str(&cookie).map_err(crate::error::Error::internal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;
    use secrecy::SecretString;

    fn ring(id: &str) -> KeyRing {
        KeyRing::parse(&[SecretString::from(crate::crypto::generate_key(id))]).unwrap()
    }

    fn flow(hash: &str, exp: i64) -> LoginFlow {
        LoginFlow {
            state_hash: hash.into(),
            nonce: "n".into(),
            verifier: "v".repeat(43),
            return_to: "/account".into(),
            expires_at: exp,
        }
    }

    fn headers(set_cookie: &HeaderValue) -> HeaderMap {
        let pair = set_cookie.to_str().unwrap().split(';').next().unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_str(pair).unwrap());
        h
    }

    #[test]
    fn a_flow_round_trips_and_is_used_once() {
        let keys = ring("k1");
        let mut c = PreSignIn::from_headers(&keys, false, &HeaderMap::new(), 1000);
        c.start(flow("h1", 1600), 1000);
        let set = c.set_cookie(&keys, false, 1000).unwrap();
        let s = set.to_str().unwrap();
        assert!(s.starts_with("mcp-connect-signin=k1."), "{s}");
        assert!(s.contains("Max-Age=600") && s.contains("HttpOnly") && s.contains("SameSite=Lax"));
        assert!(!s.contains("vvvv"), "the verifier is sealed");
        let mut back = PreSignIn::from_headers(&keys, false, &headers(&set), 1100);
        assert!(
            matches!(back.lookup("h1", 1100), Lookup::Found(f) if f.verifier == "v".repeat(43))
        );
        assert!(matches!(back.lookup("h2", 1100), Lookup::Unknown));
        assert!(matches!(back.lookup("h1", 1601), Lookup::Expired));
        back.finish("h1", 1100);
        let again = PreSignIn::from_headers(
            &keys,
            false,
            &headers(&back.set_cookie(&keys, false, 1100).unwrap()),
            1200,
        );
        assert!(matches!(again.lookup("h1", 1200), Lookup::Used));
    }

    #[test]
    fn foreign_or_tampered_cookies_hold_nothing() {
        let keys = ring("k1");
        let mut c = PreSignIn {
            v: 1,
            ..Default::default()
        };
        c.start(flow("h1", 1600), 1000);
        let set = c.set_cookie(&keys, false, 1000).unwrap();
        // Another deployment's key, a tampered value, another name: all ignored.
        let other = PreSignIn::from_headers(&ring("k1"), false, &headers(&set), 1000);
        assert!(matches!(other.lookup("h1", 1000), Lookup::Unknown));
        let mut h = HeaderMap::new();
        let tampered = set
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .replace(".", ".A");
        h.insert(header::COOKIE, HeaderValue::from_str(&tampered).unwrap());
        assert!(matches!(
            PreSignIn::from_headers(&keys, false, &h, 1000).lookup("h1", 1000),
            Lookup::Unknown
        ));
        assert!(matches!(
            PreSignIn::from_headers(&keys, true, &headers(&set), 1000).lookup("h1", 1000),
            Lookup::Unknown
        ));
    }

    #[test]
    fn flows_are_bounded_and_https_cookies_are_host_prefixed() {
        let keys = ring("k1");
        let mut c = PreSignIn {
            v: 1,
            ..Default::default()
        };
        for i in 0..10 {
            c.start(flow(&format!("h{i}"), 1600 + i), 1000);
        }
        assert_eq!(c.flows.len(), MAX_FLOWS);
        assert!(matches!(c.lookup("h0", 1000), Lookup::Unknown));
        assert!(matches!(c.lookup("h9", 1000), Lookup::Found(_)));
        let set = c.set_cookie(&keys, true, 1000).unwrap();
        let s = set.to_str().unwrap();
        assert!(
            s.starts_with("__Host-mcp-connect-signin=")
                && s.contains("; Secure")
                && s.contains("Path=/")
        );
        assert!(s.len() < 4000, "{}", s.len());
        // Nothing left: the cookie is removed.
        let empty = PreSignIn::default().set_cookie(&keys, false, 1000).unwrap();
        assert!(empty.to_str().unwrap().contains("Max-Age=0"));
    }
}
