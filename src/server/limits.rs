//! Limits at the service's edge: per-address rate limits on browser routes and on failed API
//! authentication, per-client rate limits on the API, and per-client caps on long-lived
//! requests (SSE streams, long polls). Refusals are 429 `rate_limited` with `Retry-After`, JSON on
//! the API and a page on browser routes, and are counted in metrics by limit.
//!
//! Rates are GCRA (a token bucket kept as one timestamp per key). Memory is bounded: a key whose
//! bucket is full again is indistinguishable from a new one and is dropped, and each limiter
//! remembers at most `tracked_addresses` keys, so an attacker cycling addresses cannot grow it.
//! IPv6 clients are keyed by their /64, the block one subscriber usually holds.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::config::{IpNet, Limits as LimitsConfig};
use crate::error::ErrorCode;
use crate::i18n::{Msg, Text};
use crate::server::rendered::{RenderedError, edge_answer};

/// A keyed rate limiter (GCRA) with a bound on the keys it remembers.
pub struct RateLimiter<K> {
    /// Time between two requests at the sustained rate.
    interval: Duration,
    /// How far ahead of now a key's schedule may run: (burst - 1) intervals.
    tolerance: Duration,
    max_keys: usize,
    start: Instant,
    /// Per key, the theoretical arrival time of its next request, as an offset from `start`.
    tat: Mutex<HashMap<K, Duration, foldhash::quality::RandomState>>,
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    /// `per` requests every `period`, bursts of `burst`. `None` when `per` is 0 (no limit).
    pub fn new(per: u64, period: Duration, burst: u64, max_keys: usize) -> Option<Self> {
        if per == 0 {
            return None;
        }
        let interval = period / u32::try_from(per).unwrap_or(u32::MAX);
        Some(Self {
            interval,
            tolerance: interval * u32::try_from(burst.saturating_sub(1)).unwrap_or(u32::MAX),
            max_keys: max_keys.max(1),
            start: Instant::now(),
            tat: Mutex::new(HashMap::default()),
        })
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<K, Duration, foldhash::quality::RandomState>> {
        self.tat.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one request from `key`'s allowance, or says how long until it could. A key seen
    /// before is found with one lookup and not copied; only a new key is made owned.
    pub fn check<Q>(&self, key: &Q) -> Result<(), Duration>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.start.elapsed();
        let mut map = self.lock();
        if let Some(tat) = map.get_mut(key) {
            let at = (*tat).max(now);
            if at > now + self.tolerance {
                return Err(at - now - self.tolerance);
            }
            *tat = at + self.interval;
            return Ok(());
        }
        if map.len() >= self.max_keys {
            // Keys whose allowance is whole again carry no information: forget them first.
            map.retain(|_, t| *t > now);
            if map.len() >= self.max_keys {
                // Still full: an address flood. Forget an arbitrary key (its owner merely gets
                // a fresh allowance) rather than grow.
                if let Some(k) = map.keys().next().cloned() {
                    map.remove::<K>(&k);
                }
            }
        }
        // A new key starts with its whole allowance: `tolerance` is never negative.
        map.insert(key.to_owned(), now + self.interval);
        Ok(())
    }

    /// Whether `key` has allowance left, without taking any.
    pub fn peek(&self, key: &K) -> Result<(), Duration> {
        let now = self.start.elapsed();
        match self.lock().get(key) {
            Some(tat) if *tat > now + self.tolerance => Err(*tat - now - self.tolerance),
            _ => Ok(()),
        }
    }

    /// Keys remembered now (for tests of the memory bound).
    pub fn tracked(&self) -> usize {
        self.lock().len()
    }
}

/// A cap on requests held open at once per key (API client).
#[derive(Clone)]
pub struct Cap {
    max: usize,
    held: Arc<Mutex<HashMap<String, usize>>>,
}

/// One held slot; released when dropped (however the request ends).
pub struct Slot {
    held: Arc<Mutex<HashMap<String, usize>>>,
    key: String,
}

impl Cap {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            held: Arc::default(),
        }
    }

    pub fn acquire(&self, key: &str) -> Option<Slot> {
        let mut m = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(key.to_owned()).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Slot {
            held: self.held.clone(),
            key: key.to_owned(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut m = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}

/// The address a rate limit is keyed by: IPv4 addresses whole, IPv6 by /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddrKey {
    V4(u32),
    V6(u64),
}

impl From<IpAddr> for AddrKey {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(a) => Self::V4(u32::from(a)),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => Self::V4(u32::from(v4)),
                None => Self::V6((u128::from(a) >> 64) as u64),
            },
        }
    }
}

/// Which limit refused a request. A 429 response carries it as an extension, and the metrics
/// layer counts it (`mcp_connect_rate_limited_total{limit}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Browser,
    FailedAuth,
    ApiClient,
    SseStreams,
    LongPolls,
    /// Requests in flight per forwarded client address (behind a trusted proxy).
    PerAddress,
    /// Proxied requests per API client.
    Proxy,
}

impl Limit {
    pub fn label(self) -> &'static str {
        match self {
            Self::Browser => "browser",
            Self::FailedAuth => "failed_auth",
            Self::ApiClient => "api_client",
            Self::SseStreams => "sse_streams",
            Self::LongPolls => "long_polls",
            Self::PerAddress => "per_address",
            Self::Proxy => "proxy",
        }
    }
}

/// A refusal by one of the limits: 429 `rate_limited` with `Retry-After`, counted in metrics by
/// `limit`; on browser routes the browser layer answers it as a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooMany {
    /// Whole seconds, at least one.
    pub retry_after: u64,
    pub limit: Limit,
}

impl IntoResponse for TooMany {
    fn into_response(self) -> Response {
        let message = Text::from(
            Msg::new("error-rate-limited-lead").arg("seconds", self.retry_after.to_string()),
        );
        let mut resp = edge_answer(
            &message.to_string(),
            RenderedError {
                status: StatusCode::TOO_MANY_REQUESTS,
                code: ErrorCode::RateLimited,
                title: Msg::new("error-title-too-many").into(),
                message: Msg::new("too-many-lead").into(),
                next: Some(Msg::new("too-many-next").into()),
            },
        );
        resp.headers_mut()
            .insert(header::RETRY_AFTER, self.retry_after.into());
        // For the metrics layer, which counts refusals by limit.
        resp.extensions_mut().insert(self.limit);
        resp
    }
}

/// The application's limits and their state.
pub struct Limits {
    browser: Option<RateLimiter<AddrKey>>,
    failed_auth: Option<RateLimiter<AddrKey>>,
    api: Option<RateLimiter<String>>,
    proxy: Option<RateLimiter<String>>,
    sse: Cap,
    long_polls: Cap,
    /// Connections per peer address, or requests in flight per forwarded client address.
    per_address: Cap,
    trusted_proxies: Vec<IpNet>,
}

/// What may hold one of the service's connections (see `Limits::connection_slot`).
pub enum ConnectionSlot {
    /// A peer within its cap: the slot is held for the connection's life.
    Held(Slot),
    /// A trusted proxy: its connections are shared by many clients and not counted.
    Proxy,
    /// A peer already holding its cap: close the connection.
    Refused,
}

/// How long a refused caller is told to wait: whole seconds, at least one.
fn retry_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl Limits {
    pub fn new(c: &LimitsConfig) -> Self {
        let minute = Duration::from_secs(60);
        Self {
            browser: RateLimiter::new(
                c.browser_requests_per_minute,
                minute,
                c.browser_burst,
                c.tracked_addresses,
            ),
            failed_auth: RateLimiter::new(
                c.failed_auth_per_minute,
                minute,
                c.failed_auth_burst,
                c.tracked_addresses,
            ),
            // Keys are configured client ids: bounded by the configuration.
            api: RateLimiter::new(
                c.api_requests_per_second,
                Duration::from_secs(1),
                c.api_burst,
                usize::MAX,
            ),
            proxy: RateLimiter::new(
                c.proxy_requests_per_second,
                Duration::from_secs(1),
                c.proxy_burst,
                usize::MAX,
            ),
            sse: Cap::new(c.sse_streams_per_client),
            long_polls: Cap::new(c.long_polls_per_client),
            per_address: Cap::new(c.max_connections_per_address),
            trusted_proxies: c.trusted_proxies.clone(),
        }
    }

    fn refuse(&self, limit: Limit, retry_after: Duration) -> TooMany {
        TooMany {
            retry_after: retry_secs(retry_after).max(1),
            limit,
        }
    }

    /// Before checking an API key: refuses an address that failed too often lately.
    pub fn check_auth_allowed(&self, ip: Option<IpAddr>) -> Result<(), TooMany> {
        match (&self.failed_auth, ip) {
            (Some(l), Some(ip)) => l
                .peek(&ip.into())
                .map_err(|d| self.refuse(Limit::FailedAuth, d)),
            _ => Ok(()),
        }
    }

    /// After a failed API authentication: counts it against the address.
    pub fn auth_failed(&self, ip: Option<IpAddr>) {
        if let (Some(l), Some(ip)) = (&self.failed_auth, ip) {
            let _ = l.check(&ip.into());
        }
    }

    /// One API request by `client_id`.
    pub fn check_api(&self, client_id: &str) -> Result<(), TooMany> {
        match &self.api {
            Some(l) => l
                .check(client_id)
                .map_err(|d| self.refuse(Limit::ApiClient, d)),
            None => Ok(()),
        }
    }

    /// One proxied request by `client_id` (on top of `check_api`).
    pub fn check_proxy(&self, client_id: &str) -> Result<(), TooMany> {
        match &self.proxy {
            Some(l) => l.check(client_id).map_err(|d| self.refuse(Limit::Proxy, d)),
            None => Ok(()),
        }
    }

    /// A slot for one more SSE stream of `client_id`, held for the stream's life.
    pub fn sse_stream(&self, client_id: &str) -> Result<Slot, TooMany> {
        self.sse
            .acquire(client_id)
            .ok_or_else(|| self.refuse(Limit::SseStreams, Duration::from_secs(5)))
    }

    /// A slot for one more long poll of `client_id`, held while it waits.
    pub fn long_poll(&self, client_id: &str) -> Result<Slot, TooMany> {
        self.long_polls
            .acquire(client_id)
            .ok_or_else(|| self.refuse(Limit::LongPolls, Duration::from_secs(1)))
    }

    fn is_trusted_proxy(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|n| n.contains(ip))
    }

    /// A new connection from `peer`: one address (IPv6: one /64) holds at most
    /// `max_connections_per_address` connections, so no stranger can take every slot of
    /// `max_connections` with sockets that never send a header.
    pub fn connection_slot(&self, peer: IpAddr) -> ConnectionSlot {
        if self.is_trusted_proxy(peer) {
            return ConnectionSlot::Proxy;
        }
        match self.per_address.acquire(&addr_label(peer)) {
            Some(slot) => ConnectionSlot::Held(slot),
            None => ConnectionSlot::Refused,
        }
    }

    /// A request that arrived through a trusted proxy: its forwarded client holds at most
    /// `max_connections_per_address` requests in flight, the proxy's stand-in for a connection
    /// cap. `None` for any other request (its connection is counted instead).
    pub fn forwarded_request_slot(
        &self,
        peer: Option<IpAddr>,
        headers: &HeaderMap,
    ) -> Result<Option<Slot>, TooMany> {
        let Some(peer) = peer.filter(|p| self.is_trusted_proxy(*p)) else {
            return Ok(None);
        };
        let client = self.client_ip(Some(peer), headers).unwrap_or(peer);
        self.per_address
            .acquire(&addr_label(client))
            .map(Some)
            .ok_or_else(|| self.refuse(Limit::PerAddress, Duration::from_secs(1)))
    }

    /// The client's address: the peer's, or, when the peer is a trusted proxy, the nearest
    /// `X-Forwarded-For` entry that is not itself a trusted proxy.
    pub fn client_ip(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = peer?;
        if !self.is_trusted_proxy(peer) {
            return Some(peer);
        }
        let mut hops: Vec<IpAddr> = Vec::new();
        for v in headers.get_all("x-forwarded-for") {
            let Ok(v) = v.to_str() else {
                return Some(peer);
            };
            for part in v.split(',') {
                match part.trim().parse::<IpAddr>() {
                    Ok(ip) => hops.push(ip),
                    // A malformed chain: trust none of it.
                    Err(_) => return Some(peer),
                }
            }
        }
        Some(
            hops.into_iter()
                .rev()
                .find(|ip| !self.trusted_proxies.iter().any(|n| n.contains(*ip)))
                .unwrap_or(peer),
        )
    }
}

/// A per-address cap's key: the address as `AddrKey` counts it (IPv6 by /64).
fn addr_label(ip: IpAddr) -> String {
    match AddrKey::from(ip) {
        AddrKey::V4(a) => format!("4:{a:x}"),
        AddrKey::V6(p) => format!("6:{p:x}"),
    }
}

/// The peer address of a request (absent when a test drives the router without a listener).
pub fn peer_ip(ext: &axum::http::Extensions) -> Option<IpAddr> {
    ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip())
}

/// Routes with no per-address limit: probes and the API (limited per client and on failed
/// authentication instead).
fn exempt(path: &str) -> bool {
    path.starts_with("/v1/")
        || path == "/v1"
        || matches!(path, "/healthz" | "/readyz" | "/metrics" | "/openapi.json")
}

/// Per-address rate limit on browser routes (and anything unmatched outside `/v1`): the
/// refusal when `req`'s address is over it. API and probe paths return at once.
pub fn browser_refusal(state: &AppState, req: &Request) -> Option<TooMany> {
    let l = state.limits.browser.as_ref()?;
    if exempt(req.uri().path()) {
        return None;
    }
    let ip = state
        .limits
        .client_ip(peer_ip(req.extensions()), req.headers())?;
    let d = l.check(&ip.into()).err()?;
    Some(TooMany {
        retry_after: retry_secs(d).max(1),
        limit: Limit::Browser,
    })
}

/// The per-address cap on requests in flight for a client behind a trusted proxy
/// (`Limits::forwarded_request_slot`): the slot to hold until answered, or the refusal.
pub fn forwarded_request_slot(state: &AppState, req: &Request) -> Result<Option<Slot>, TooMany> {
    state
        .limits
        .forwarded_request_slot(peer_ip(req.extensions()), req.headers())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_allowed_then_the_rate() {
        let l = RateLimiter::new(60, Duration::from_secs(60), 3, 10).unwrap();
        let k = "a".to_string();
        assert!(l.check(&k).is_ok());
        assert!(l.check(&k).is_ok());
        assert!(l.check(&k).is_ok());
        let wait = l.check(&k).unwrap_err();
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        assert!(l.peek(&k).is_err());
        assert!(l.check(&"b".to_string()).is_ok(), "keys are independent");
    }

    #[test]
    fn remembered_keys_are_bounded() {
        let l = RateLimiter::new(1, Duration::from_secs(3600), 5, 100).unwrap();
        for i in 0..10_000u32 {
            let _ = l.check(&AddrKey::V4(i));
        }
        assert!(l.tracked() <= 100, "{}", l.tracked());
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(AddrKey::from(a), AddrKey::from(b));
        assert_ne!(AddrKey::from(a), AddrKey::from(c));
    }

    #[test]
    fn slots_are_capped_and_released() {
        let cap = Cap::new(2);
        let a = cap.acquire("c").unwrap();
        let _b = cap.acquire("c").unwrap();
        assert!(cap.acquire("c").is_none());
        assert!(cap.acquire("d").is_some());
        drop(a);
        assert!(cap.acquire("c").is_some());
    }

    #[test]
    fn connections_are_capped_per_address_but_not_for_trusted_proxies() {
        let c = LimitsConfig {
            max_connections_per_address: 2,
            trusted_proxies: vec![IpNet::parse("10.0.0.0/8").unwrap()],
            ..LimitsConfig::default()
        };
        let l = Limits::new(&c);
        let held = |ip: &str| l.connection_slot(ip.parse().unwrap());
        let a = held("198.51.100.7");
        let _b = held("198.51.100.7");
        assert!(matches!(a, ConnectionSlot::Held(_)));
        assert!(matches!(held("198.51.100.7"), ConnectionSlot::Refused));
        // One /64 is one address; the next /64 is another.
        let _c = held("2001:db8:1:2::1");
        let _d = held("2001:db8:1:2::2");
        assert!(matches!(held("2001:db8:1:2::3"), ConnectionSlot::Refused));
        assert!(matches!(held("2001:db8:1:3::1"), ConnectionSlot::Held(_)));
        assert!(matches!(held("198.51.100.8"), ConnectionSlot::Held(_)));
        for _ in 0..5 {
            assert!(matches!(held("10.1.1.1"), ConnectionSlot::Proxy));
        }
        drop(a);
        assert!(matches!(held("198.51.100.7"), ConnectionSlot::Held(_)));
        // Behind the proxy, each forwarded client holds at most the cap in flight.
        let proxy: Option<IpAddr> = Some("10.1.1.1".parse().unwrap());
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
        let r1 = l.forwarded_request_slot(proxy, &h).unwrap();
        let _r2 = l.forwarded_request_slot(proxy, &h).unwrap();
        assert!(r1.is_some());
        assert!(l.forwarded_request_slot(proxy, &h).is_err());
        h.insert("x-forwarded-for", "203.0.113.10".parse().unwrap());
        assert!(l.forwarded_request_slot(proxy, &h).unwrap().is_some());
        drop(r1);
        h.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
        assert!(l.forwarded_request_slot(proxy, &h).unwrap().is_some());
        // A direct peer's requests are not counted here (its connections are).
        let direct: Option<IpAddr> = Some("198.51.100.9".parse().unwrap());
        assert!(l.forwarded_request_slot(direct, &h).unwrap().is_none());
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let c = LimitsConfig {
            trusted_proxies: vec![IpNet::parse("10.0.0.0/8").unwrap()],
            ..LimitsConfig::default()
        };
        let l = Limits::new(&c);
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "203.0.113.9, 10.1.1.1".parse().unwrap());
        let proxy: IpAddr = "10.2.2.2".parse().unwrap();
        let stranger: IpAddr = "198.51.100.7".parse().unwrap();
        assert_eq!(
            l.client_ip(Some(proxy), &h),
            Some("203.0.113.9".parse().unwrap())
        );
        assert_eq!(l.client_ip(Some(stranger), &h), Some(stranger));
        let off = Limits::new(&LimitsConfig::default());
        assert_eq!(
            off.client_ip(Some(proxy), &h),
            Some(proxy),
            "off by default"
        );
    }
}
