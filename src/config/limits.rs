//! `[limits]`: timeouts, caps and rate limits at the service's edge, and the trusted proxies.

use super::network::IpNet;
use super::{Report, Section};

/// Timeouts, caps and rate limits at the service's edge (`[limits]`). The defaults are aimed at
/// strangers and runaway clients: a trusted MCP server fetching thousands of tokens a second, or
/// a user completing several connect flows in a minute, never meets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// A connection that has not sent a whole request header within this is closed.
    pub header_read_timeout_seconds: u64,
    /// Non-streaming requests are answered within this (long polls get their wait on top).
    pub request_timeout_seconds: u64,
    /// Open connections accepted at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Open connections at once per client address (IPv6 by /64); more are closed at once. A
    /// trusted proxy's connections are not counted; its forwarded clients are held to this
    /// many requests in flight each instead.
    pub max_connections_per_address: usize,
    /// `GET /v1/events` streams open at once per API client.
    pub sse_streams_per_client: usize,
    /// Long polls (`?wait=`, `wait_seconds`) held at once per API client.
    pub long_polls_per_client: usize,
    /// API requests per second per API client (0 = no limit), with this burst.
    pub api_requests_per_second: u64,
    pub api_burst: u64,
    /// Browser-route requests per minute per client address (0 = no limit), with this burst.
    pub browser_requests_per_minute: u64,
    pub browser_burst: u64,
    /// Failed API authentications per minute per client address (0 = no limit), with this burst.
    pub failed_auth_per_minute: u64,
    pub failed_auth_burst: u64,
    /// Addresses each per-address limit remembers at most (its memory bound).
    pub tracked_addresses: usize,
    /// Peers whose `X-Forwarded-For` is believed (reverse proxies). Empty (the default): the
    /// client address is always the peer address.
    pub trusted_proxies: Vec<IpNet>,
    /// Proxied requests per second per API client (0 = no limit beyond the API's), with this
    /// burst.
    pub proxy_requests_per_second: u64,
    pub proxy_burst: u64,
    /// The largest request body the proxy forwards (413 above it).
    pub proxy_request_body_bytes: u64,
    /// The largest response body the proxy passes back: above it, 502 when the provider says
    /// its length, else the stream is cut (the caller never gets a whole body).
    pub proxy_response_body_bytes: u64,
    /// The longest a proxied call may take, response body included.
    pub proxy_timeout_seconds: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout_seconds: 20,
            request_timeout_seconds: 30,
            max_connections: 20_000,
            max_connections_per_address: 256,
            sse_streams_per_client: 50,
            long_polls_per_client: 10_000,
            api_requests_per_second: 20_000,
            api_burst: 20_000,
            browser_requests_per_minute: 600,
            browser_burst: 300,
            failed_auth_per_minute: 60,
            failed_auth_burst: 30,
            tracked_addresses: 100_000,
            trusted_proxies: Vec::new(),
            proxy_requests_per_second: 2_000,
            proxy_burst: 4_000,
            proxy_request_body_bytes: 16 * 1024 * 1024,
            proxy_response_body_bytes: 256 * 1024 * 1024,
            proxy_timeout_seconds: 60,
        }
    }
}

pub(super) fn read(t: Option<Section>, r: &mut Report) -> Limits {
    let d = Limits::default();
    let Some(mut t) = t else {
        return d;
    };
    let mut l = Limits {
        header_read_timeout_seconds: t.bounded(
            r,
            "header_read_timeout_seconds",
            d.header_read_timeout_seconds,
            1,
            30,
        ),
        request_timeout_seconds: t.bounded(
            r,
            "request_timeout_seconds",
            d.request_timeout_seconds,
            1,
            300,
        ),
        max_connections: t.bounded(r, "max_connections", d.max_connections as u64, 1, 1_000_000)
            as usize,
        max_connections_per_address: t.bounded(
            r,
            "max_connections_per_address",
            d.max_connections_per_address as u64,
            1,
            1_000_000,
        ) as usize,
        sse_streams_per_client: t.bounded(
            r,
            "sse_streams_per_client",
            d.sse_streams_per_client as u64,
            1,
            100_000,
        ) as usize,
        long_polls_per_client: t.bounded(
            r,
            "long_polls_per_client",
            d.long_polls_per_client as u64,
            1,
            1_000_000,
        ) as usize,
        api_requests_per_second: t.bounded(
            r,
            "api_requests_per_second",
            d.api_requests_per_second,
            0,
            1_000_000,
        ),
        api_burst: t.bounded(r, "api_burst", d.api_burst, 1, 1_000_000),
        browser_requests_per_minute: t.bounded(
            r,
            "browser_requests_per_minute",
            d.browser_requests_per_minute,
            0,
            1_000_000,
        ),
        browser_burst: t.bounded(r, "browser_burst", d.browser_burst, 1, 1_000_000),
        failed_auth_per_minute: t.bounded(
            r,
            "failed_auth_per_minute",
            d.failed_auth_per_minute,
            0,
            1_000_000,
        ),
        failed_auth_burst: t.bounded(r, "failed_auth_burst", d.failed_auth_burst, 1, 1_000_000),
        tracked_addresses: t.bounded(
            r,
            "tracked_addresses",
            d.tracked_addresses as u64,
            100,
            10_000_000,
        ) as usize,
        trusted_proxies: Vec::new(),
        proxy_requests_per_second: t.bounded(
            r,
            "proxy_requests_per_second",
            d.proxy_requests_per_second,
            0,
            1_000_000,
        ),
        proxy_burst: t.bounded(r, "proxy_burst", d.proxy_burst, 1, 1_000_000),
        proxy_request_body_bytes: t.bounded(
            r,
            "proxy_request_body_bytes",
            d.proxy_request_body_bytes,
            0,
            1 << 40,
        ),
        proxy_response_body_bytes: t.bounded(
            r,
            "proxy_response_body_bytes",
            d.proxy_response_body_bytes,
            1024,
            1 << 40,
        ),
        proxy_timeout_seconds: t.bounded(
            r,
            "proxy_timeout_seconds",
            d.proxy_timeout_seconds,
            1,
            3600,
        ),
    };
    for p in t.get::<Vec<String>>(r, "trusted_proxies") {
        match IpNet::parse(&p) {
            Ok(n) => l.trusted_proxies.push(n),
            Err(m) => r.err("limits.trusted_proxies", m),
        }
    }
    t.finish(r);
    l
}
