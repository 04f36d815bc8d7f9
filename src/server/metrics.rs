//! Prometheus metrics: one registry per application (so replicas in one test process, or two apps
//! in one binary, never mix their numbers), rendered in the text exposition format at `/metrics`.
//!
//! Labels are always bounded: the matched route pattern (never the raw URI, which carries ids,
//! codes and states), configured provider names, and fixed outcome words. No label ever holds a
//! subject, an id or a token.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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
struct StateRefusalLabels {
    callback: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    state: String,
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
            "Requests refused with 429 by limit (browser, failed_auth, api_client, sse_streams, long_polls, per_address)",
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
        }))
    }

    pub fn record_request(&self, method: &'static str, route: Arc<str>, status: u16, seconds: f64) {
        self.0
            .requests
            .get_or_create(&RouteLabels {
                method,
                route: Route(route.clone()),
                status,
            })
            .inc();
        self.0
            .request_seconds
            .get_or_create(&RouteTimeLabels {
                method,
                route: Route(route),
            })
            .observe(seconds);
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

    /// The text exposition, with the pool gauges read now.
    pub fn render(&self, pool: &crate::db::Pool) -> String {
        let open = i64::from(pool.size());
        let idle = pool.num_idle() as i64;
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
        self.0.pool_max.set(i64::from(pool.max_connections()));
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.0.registry) {
            tracing::warn!(error = %e, "could not encode metrics");
        }
        out
    }
}

/// Counts and times every request by its route pattern; anything that matched no route is
/// `unmatched`, so probing random URLs cannot blow up the label space. A `tower` layer (no boxed
/// future, no clone of the inner service per request); added with `Router::layer`, it runs after
/// routing, so the request carries its `MatchedPath`.
#[derive(Clone)]
pub struct Track(pub Metrics);

impl<S> tower::Layer<S> for Track {
    type Service = TrackService<S>;
    fn layer(&self, inner: S) -> TrackService<S> {
        TrackService {
            inner,
            metrics: self.0.clone(),
            route: Arc::default(),
        }
    }
}

#[derive(Clone)]
pub struct TrackService<S> {
    inner: S,
    metrics: Metrics,
    /// The route pattern this service answers, kept from its first request. `Router::layer`
    /// wraps each route on its own, so it is one pattern (the fallback sees none); a request
    /// with another pattern still gets its own label, only not the shared copy.
    route: Arc<std::sync::OnceLock<Arc<str>>>,
}

impl<S> TrackService<S> {
    fn route_label(&self, matched: Option<&MatchedPath>) -> Arc<str> {
        let Some(m) = matched else {
            return UNMATCHED.with(Clone::clone);
        };
        let shared = self.route.get_or_init(|| Arc::from(m.as_str()));
        if &**shared == m.as_str() {
            shared.clone()
        } else {
            Arc::from(m.as_str())
        }
    }
}

thread_local! {
    static UNMATCHED: Arc<str> = Arc::from("unmatched");
}

impl<S> tower::Service<Request> for TrackService<S>
where
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = TrackFuture<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let method = match req.method().as_str() {
            "GET" => "GET",
            "POST" => "POST",
            "DELETE" => "DELETE",
            "PUT" => "PUT",
            "PATCH" => "PATCH",
            "HEAD" => "HEAD",
            "OPTIONS" => "OPTIONS",
            _ => "other",
        };
        let route = req
            .extensions()
            .get::<MatchedPath>()
            .map(|m| self.route_label(Some(m)));
        TrackFuture {
            started: Instant::now(),
            inner: self.inner.call(req),
            method,
            route,
            metrics: self.metrics.clone(),
        }
    }
}

pub struct TrackFuture<F> {
    inner: F,
    started: Instant,
    method: &'static str,
    route: Option<Arc<str>>,
    metrics: Metrics,
}

impl<F> Future for TrackFuture<F>
where
    F: Future<Output = Result<Response, std::convert::Infallible>> + Unpin,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let me = self.get_mut();
        let Ok(resp) = std::task::ready!(std::pin::Pin::new(&mut me.inner).poll(cx));
        if let Some(limit) = resp.extensions().get::<crate::server::limits::Limit>() {
            me.metrics.rate_limited(limit.label());
        }
        let route = match me.route.take() {
            Some(r) => r,
            None => match resp.extensions().get::<MatchedPath>() {
                Some(m) => Arc::from(m.as_str()),
                None => UNMATCHED.with(Clone::clone),
            },
        };
        me.metrics.record_request(
            me.method,
            route,
            resp.status().as_u16(),
            me.started.elapsed().as_secs_f64(),
        );
        std::task::Poll::Ready(Ok(resp))
    }
}
