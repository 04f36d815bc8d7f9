//! Prometheus metrics: one registry per application (so replicas in one test process, or two apps
//! in one binary, never mix their numbers), rendered in the text exposition format at `/metrics`.
//!
//! Labels are always bounded: the matched route pattern (never the raw URI, which carries ids,
//! codes and states), configured provider names, and fixed outcome words. No label ever holds a
//! subject, an id or a token.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric as _};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Per request, no allocation: the method is a fixed word, the route pattern shared (see
/// `TrackService::route`), the status a number (encoded as its digits).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: Route,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteTimeLabels {
    method: &'static str,
    route: Route,
}

/// A route pattern as a label value, shared (prometheus-client encodes `Arc<T>` only for sized
/// `T`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Route(Arc<str>);

impl prometheus_client::encoding::EncodeLabelValue for Route {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder,
    ) -> Result<(), std::fmt::Error> {
        prometheus_client::encoding::EncodeLabelValue::encode(&&*self.0, encoder)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderOutcomeLabels {
    provider: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    provider: String,
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProxyLabels {
    provider: String,
    /// `2xx` .. `5xx`, or `error` when the provider gave no answer.
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

/// The status classes of `proxy_requests`, in the order of [`ProxyHandles::classes`].
const PROXY_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "error"];

/// One provider's proxy series; a class's counter joins its family at its first call, so the
/// scrape shows only the classes seen.
struct ProxyHandles {
    seconds: Histogram,
    classes: [std::sync::OnceLock<Counter>; 6],
}

/// Proxied calls are often a few milliseconds: 0.5 ms .. ~16 s.
fn proxy_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateRefusalLabels {
    callback: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    state: String,
}

/// One method, route and status's series of `mcp_connect_http_requests_total` and
/// `mcp_connect_http_request_duration_seconds`, held as the families' own handles (which are
/// never removed from them): a route's edge keeps the one of its first successful answer, which
/// most of its answers share (`server::edge`), and counts each of those with two atomic updates
/// instead of two hashed lookups under the families' locks.
#[derive(Clone)]
pub struct RouteRecorder {
    method: &'static str,
    route: Arc<str>,
    status: u16,
    requests: Counter,
    seconds: Histogram,
}

impl RouteRecorder {
    /// Whether a request with these labels is this recorder's.
    pub fn is_for(&self, method: &'static str, route: &Arc<str>, status: u16) -> bool {
        self.status == status
            && self.method == method
            && (Arc::ptr_eq(&self.route, route) || *self.route == **route)
    }

    pub fn record(&self, seconds: f64) {
        self.requests.inc();
        self.seconds.observe(seconds);
    }
}

fn latency_histogram() -> Histogram {
    // 5 ms .. ~20 s
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

struct Inner {
    registry: Registry,
    requests: Family<RouteLabels, Counter>,
    request_seconds: Family<RouteTimeLabels, Histogram, fn() -> Histogram>,
    elicitations: Family<OutcomeLabels, Counter>,
    rate_limited: Family<LimitLabels, Counter>,
    refreshes: Family<ProviderOutcomeLabels, Counter>,
    upstream_seconds: Family<UpstreamLabels, Histogram, fn() -> Histogram>,
    upstream_errors: Family<UpstreamLabels, Counter>,
    pool: Family<PoolLabels, Gauge>,
    pool_max: Gauge,
    state_refusals: Family<StateRefusalLabels, Counter>,
    proxied: Family<ProxyLabels, Counter>,
    proxy_upstream_seconds: Family<ProviderLabels, Histogram, fn() -> Histogram>,
    /// Handles into the two proxy families per provider, so a proxied call is counted without
    /// building and hashing label sets under the families' locks.
    proxy_handles: std::sync::RwLock<HashMap<String, ProxyHandles>>,
    /// The token cache's figures as read for the scrape in progress (`render`).
    cache: Arc<std::sync::Mutex<CacheReading>>,
}

/// The database pool's gauges, read when the metrics are scraped.
pub struct PoolReading {
    /// Connections open, idle or in use.
    pub open: u32,
    pub idle: usize,
    /// The most the pool opens.
    pub max: u32,
}

/// The token cache's counters and size, read when the metrics are scraped. The counters count
/// from the process's start.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheReading {
    /// Token-path lookups answered from the cache.
    pub hits: u64,
    /// Lookups that read the database because the cache had no current row.
    pub misses: u64,
    /// Lookups that read the database because the cache was not in use (its change feed not
    /// current, or the cache turned off).
    pub bypasses: u64,
    /// Rows stored after a miss.
    pub fills: u64,
    /// Rows dropped because a change to their connection was applied.
    pub invalidations: u64,
    /// Times the whole cache was emptied (its change feed started, or came back after a loss).
    pub flushes: u64,
    /// Times the change feed (Postgres listener, SQLite change log read) was lost.
    pub sync_losses: u64,
    pub entries: u64,
    pub bytes: u64,
    /// Whether the cache is in use right now.
    pub usable: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    result: &'static str,
}

/// Writes the reading `render` leaves for it: the cache's counters live in the cache (storage
/// keeps no handle on the metrics), so they are copied here at each scrape.
#[derive(Debug)]
struct CacheCollector(Arc<std::sync::Mutex<CacheReading>>);

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut lookups = encoder.encode_descriptor(
            "token_cache_lookups",
            "Token-path lookups of the token cache, by result (hit; miss: no current row, the database was read; bypass: the cache was not in use)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (result, n) in [("hit", r.hits), ("miss", r.misses), ("bypass", r.bypasses)] {
            ConstCounter::new(n).encode(lookups.encode_family(&LookupLabels { result })?)?;
        }
        for (name, help, n) in [
            (
                "token_cache_fills",
                "Rows stored in the token cache after a miss",
                r.fills,
            ),
            (
                "token_cache_invalidations",
                "Token cache rows dropped because their connection changed",
                r.invalidations,
            ),
            (
                "token_cache_flushes",
                "Times the token cache was emptied (its change feed started, or came back after a loss)",
                r.flushes,
            ),
            (
                "token_cache_sync_losses",
                "Times the token cache's change feed was lost (the cache is bypassed until it is back)",
                r.sync_losses,
            ),
        ] {
            let c = ConstCounter::new(n);
            c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
        }
        for (name, help, v) in [
            (
                "token_cache_entries",
                "Users' rows held in the token cache",
                r.entries as i64,
            ),
            (
                "token_cache_bytes",
                "Approximate size of the rows held in the token cache",
                r.bytes as i64,
            ),
            (
                "token_cache_usable",
                "1 while the token cache is in use (its change feed is current), else 0",
                i64::from(r.usable),
            ),
        ] {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

/// The application's metrics. Cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mcp_connect");
        let requests = Family::<RouteLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by method, matched route and status",
            requests.clone(),
        );
        let request_seconds =
            Family::<RouteTimeLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        registry.register(
            "http_request_duration_seconds",
            "Time to answer HTTP requests, by method and matched route",
            request_seconds.clone(),
        );
        let elicitations = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "elicitations",
            "Elicitations by outcome (created, completed, declined, expired, failed)",
            elicitations.clone(),
        );
        let rate_limited = Family::<LimitLabels, Counter>::default();
        registry.register(
            "rate_limited",
            "Requests refused with 429 by limit (browser, failed_auth, api_client, sse_streams, long_polls, per_address, proxy)",
            rate_limited.clone(),
        );
        let refreshes = Family::<ProviderOutcomeLabels, Counter>::default();
        registry.register(
            "token_refreshes",
            "Refresh-token redemptions by provider and outcome (success, invalid_grant, error)",
            refreshes.clone(),
        );
        let upstream_seconds =
            Family::<UpstreamLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        registry.register(
            "upstream_request_duration_seconds",
            "Time provider endpoints took to answer, by provider and operation",
            upstream_seconds.clone(),
        );
        let upstream_errors = Family::<UpstreamLabels, Counter>::default();
        registry.register(
            "upstream_errors",
            "Provider calls that failed (network, 5xx, OAuth error), by provider and operation",
            upstream_errors.clone(),
        );
        let pool = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "db_pool_connections",
            "Database pool connections by state (open, idle, in_use)",
            pool.clone(),
        );
        let pool_max = Gauge::default();
        registry.register(
            "db_pool_max_connections",
            "The database pool's size limit",
            pool_max.clone(),
        );
        let state_refusals = Family::<StateRefusalLabels, Counter>::default();
        registry.register(
            "callback_state_refusals",
            "Callback `state` values refused, by callback (login, provider) and reason (missing, unknown, replayed, foreign_browser, expired, wrong_provider)",
            state_refusals.clone(),
        );
        let proxied = Family::<ProxyLabels, Counter>::default();
        registry.register(
            "proxy_requests",
            "Calls forwarded by the proxy, by provider and the provider's status class (2xx..5xx, or error: no answer)",
            proxied.clone(),
        );
        let proxy_upstream_seconds =
            Family::<ProviderLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                proxy_histogram,
            );
        registry.register(
            "proxy_upstream_duration_seconds",
            "Time the provider took to answer a proxied call (until its headers), by provider",
            proxy_upstream_seconds.clone(),
        );
        let cache = Arc::new(std::sync::Mutex::new(CacheReading::default()));
        registry.register_collector(Box::new(CacheCollector(cache.clone())));
        Self(Arc::new(Inner {
            registry,
            requests,
            request_seconds,
            elicitations,
            rate_limited,
            refreshes,
            upstream_seconds,
            upstream_errors,
            pool,
            pool_max,
            state_refusals,
            proxied,
            proxy_upstream_seconds,
            proxy_handles: Default::default(),
            cache,
        }))
    }

    /// The request counter and latency histogram of one method, route and status, as handles
    /// that count without the families' label lookups (`RouteRecorder`).
    pub fn route_recorder(
        &self,
        method: &'static str,
        route: Arc<str>,
        status: u16,
    ) -> RouteRecorder {
        let requests = self
            .0
            .requests
            .get_or_create(&RouteLabels {
                method,
                route: Route(route.clone()),
                status,
            })
            .clone();
        let seconds = self
            .0
            .request_seconds
            .get_or_create(&RouteTimeLabels {
                method,
                route: Route(route.clone()),
            })
            .clone();
        RouteRecorder {
            method,
            route,
            status,
            requests,
            seconds,
        }
    }

    /// `outcome` is `created` or a final elicitation status.
    pub fn elicitation(&self, outcome: &str) {
        self.0
            .elicitations
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// A request refused by `limit` (a fixed word, see `limits::Limit::label`).
    pub fn rate_limited(&self, limit: &str) {
        self.0
            .rate_limited
            .get_or_create(&LimitLabels {
                limit: limit.to_owned(),
            })
            .inc();
    }

    pub fn refresh(&self, provider: &str, outcome: &str) {
        self.0
            .refreshes
            .get_or_create(&ProviderOutcomeLabels {
                provider: provider.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// One refused callback `state`; `callback` and `reason` are fixed words.
    pub fn state_refused(&self, callback: &str, reason: &str) {
        self.0
            .state_refusals
            .get_or_create(&StateRefusalLabels {
                callback: callback.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// One proxied call: the provider's status (`None`: no answer) and how long its answer
    /// took to start.
    pub fn proxied(&self, provider: &str, status: Option<u16>, seconds: f64) {
        let class = match status {
            Some(100..=199) => 0,
            Some(200..=299) => 1,
            Some(300..=399) => 2,
            Some(400..=499) => 3,
            Some(500..=599) => 4,
            _ => 5,
        };
        {
            let known = self.0.proxy_handles.read();
            let known = known.unwrap_or_else(|p| p.into_inner());
            if let Some(h) = known.get(provider) {
                self.count_proxied(h, provider, class, seconds);
                return;
            }
        }
        let histogram = self
            .0
            .proxy_upstream_seconds
            .get_or_create(&ProviderLabels {
                provider: provider.to_owned(),
            })
            .clone();
        let mut all = self
            .0
            .proxy_handles
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let h = all
            .entry(provider.to_owned())
            .or_insert_with(|| ProxyHandles {
                seconds: histogram,
                classes: Default::default(),
            });
        self.count_proxied(h, provider, class, seconds);
    }

    fn count_proxied(&self, h: &ProxyHandles, provider: &str, class: usize, seconds: f64) {
        h.classes[class]
            .get_or_init(|| {
                self.0
                    .proxied
                    .get_or_create(&ProxyLabels {
                        provider: provider.to_owned(),
                        class: PROXY_CLASSES[class],
                    })
                    .clone()
            })
            .inc();
        h.seconds.observe(seconds);
    }

    /// Times one call to a provider endpoint, counting it as an error when it fails.
    pub async fn upstream<T, E>(
        &self,
        provider: &str,
        operation: &str,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let r = call.await;
        let labels = UpstreamLabels {
            provider: provider.to_owned(),
            operation: operation.to_owned(),
        };
        self.0
            .upstream_seconds
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        if r.is_err() {
            self.0.upstream_errors.get_or_create(&labels).inc();
        }
        r
    }

    /// The text exposition, with the pool gauges and the token cache's figures as read now.
    pub fn render(&self, pool: PoolReading, cache: CacheReading) -> String {
        *self.0.cache.lock().unwrap_or_else(|e| e.into_inner()) = cache;
        let open = i64::from(pool.open);
        let idle = pool.idle as i64;
        for (state, v) in [
            ("open", open),
            ("idle", idle),
            ("in_use", (open - idle).max(0)),
        ] {
            self.0
                .pool
                .get_or_create(&PoolLabels {
                    state: state.to_owned(),
                })
                .set(v);
        }
        self.0.pool_max.set(i64::from(pool.max));
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.0.registry) {
            tracing::warn!(error = %e, "could not encode metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proxied calls count per provider and status class, a class showing once seen; the
    /// upstream histogram counts every call, answered or not.
    #[test]
    fn proxied_calls_count_by_provider_and_class() {
        let m = Metrics::new();
        for (provider, status) in [("acme", Some(200)), ("acme", Some(204)), ("acme", None)] {
            m.proxied(provider, status, 0.01);
        }
        m.proxied("beta", Some(503), 0.02);
        let (open, idle, max) = (0, 0, 1);
        let text = m.render(PoolReading { open, idle, max }, CacheReading::default());
        for line in [
            r#"mcp_connect_proxy_requests_total{provider="acme",class="2xx"} 2"#,
            r#"mcp_connect_proxy_requests_total{provider="acme",class="error"} 1"#,
            r#"mcp_connect_proxy_requests_total{provider="beta",class="5xx"} 1"#,
            r#"mcp_connect_proxy_upstream_duration_seconds_count{provider="acme"} 3"#,
            r#"mcp_connect_proxy_upstream_duration_seconds_count{provider="beta"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in {text}");
        }
        assert!(!text.contains(r#"provider="acme",class="4xx""#), "{text}");
    }
}
