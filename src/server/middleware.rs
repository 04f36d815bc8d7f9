//! Middleware shared by every route: request ids, request tracing (paths only, never query
//! strings, which carry codes and states), and security headers (HSTS when served over https).
//! Metrics, per-address limits and deadlines are per route group (`server::edge`).

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::Response;
use tower::ServiceBuilder;
use tower::layer::util::{Identity, Stack};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId as TowerRequestId, SetRequestIdLayer,
};
use tracing::Span;

use crate::config::IpNet;
use crate::server::RouteService;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

#[derive(Clone, Copy, Default)]
pub struct RandomRequestId;

impl MakeRequestId for RandomRequestId {
    /// 12 random bytes, base64url: from the thread's CSPRNG (`rand::thread_rng`, seeded from
    /// the OS), not a system call per request — an id needs to be unguessable, not a key.
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<TowerRequestId> {
        use base64::Engine as _;
        use rand::RngCore as _;
        let mut raw = [0u8; 12];
        rand::thread_rng().fill_bytes(&mut raw);
        let mut text = [0u8; 16];
        let n = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode_slice(raw, &mut text)
            .ok()?;
        HeaderValue::from_bytes(&text[..n])
            .ok()
            .map(TowerRequestId::new)
    }
}

/// `request_id_layers`: keep a trusted id (`M`), make one, echo it.
type RequestIdStack<M> = Stack<
    PropagateRequestIdLayer,
    Stack<SetRequestIdLayer<RandomRequestId>, Stack<tower::util::MapRequestLayer<M>, Identity>>,
>;

/// Gives every request an `x-request-id` and echoes it. An incoming id is kept only when a
/// trusted proxy (`[limits] trusted_proxies`) sent it and it is well-formed: anyone else could
/// forge the correlation of audit rows and logs, and what is refused is never echoed.
pub fn request_id_layers(
    trusted_proxies: &[IpNet],
) -> ServiceBuilder<RequestIdStack<impl Fn(Request) -> Request + Clone + Send + Sync + 'static>> {
    ServiceBuilder::new()
        .map_request(keep_trusted_request_id(trusted_proxies.into()))
        .layer(SetRequestIdLayer::new(REQUEST_ID, RandomRequestId))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
}

/// Drops an incoming `x-request-id` unless a trusted proxy sent it and it is well-formed.
fn keep_trusted_request_id(
    trusted: std::sync::Arc<[IpNet]>,
) -> impl Fn(Request) -> Request + Clone + Send + Sync + 'static {
    move |mut req: Request| {
        let from_proxy = crate::server::limits::peer_ip(req.extensions())
            .is_some_and(|ip| trusted.iter().any(|n| n.contains(ip)));
        if !from_proxy || request_id_str(req.headers()).is_none() {
            req.headers_mut().remove(REQUEST_ID);
        }
        req
    }
}

/// The request id of a request, for error pages and audit records.
pub fn request_id(headers: &HeaderMap) -> Option<String> {
    request_id_str(headers).map(str::to_owned)
}

/// `request_id`, borrowed: a well-formed id only (at most 64 of `[A-Za-z0-9_-]`), so what a
/// client sent can never forge a log line.
fn request_id_str(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|s| {
            s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The request id (`x-request-id`, when well-formed), for pages, API audit rows and logs: an
/// extractor that reads one header instead of copying them all.
#[derive(Debug, Clone, Default)]
pub struct RequestId(pub Option<String>);

impl RequestId {
    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for RequestId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self(request_id(&parts.headers)))
    }
}

/// Each request's span (method, path, request id), entered whenever the request is worked
/// on, so every log line of it carries them; and an error line for an answer that is a server
/// error. A small layer rather than tower-http's `TraceLayer`: no classifier, no wrapper of the
/// answer's body, no per-request debug events (the default filter drops them anyway).
#[derive(Clone, Copy, Default)]
pub struct RequestSpan;

impl<S> tower::Layer<S> for RequestSpan {
    type Service = RequestSpanService<S>;
    fn layer(&self, inner: S) -> RequestSpanService<S> {
        RequestSpanService(inner)
    }
}

#[derive(Clone)]
pub struct RequestSpanService<S>(S);

impl<S: RouteService> tower::Service<Request> for RequestSpanService<S> {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = RequestSpanFuture<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let span = make_span(&req);
        // Outside the span: routing and the edge's limits, which log nothing. The request's
        // own work (extractors, handler, rendering) runs when the future is polled, inside it.
        let inner = self.0.call(req);
        RequestSpanFuture {
            inner,
            span,
            started: std::time::Instant::now(),
        }
    }
}

pub struct RequestSpanFuture<F> {
    inner: F,
    span: Span,
    started: std::time::Instant,
}

impl<F> std::future::Future for RequestSpanFuture<F>
where
    F: std::future::Future<Output = Result<Response, std::convert::Infallible>> + Unpin,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let me = self.get_mut();
        let _in = me.span.enter();
        let out = std::task::ready!(std::pin::Pin::new(&mut me.inner).poll(cx));
        if let Ok(resp) = &out {
            // For the exported span only: the logs have the status on the error line already.
            if crate::server::telemetry::exporting() {
                me.span.record("status", i64::from(resp.status().as_u16()));
            }
            if resp.status().is_server_error() {
                tracing::error!(
                    status = resp.status().as_u16(),
                    latency_ms = me.started.elapsed().as_millis() as u64,
                    "response failed"
                );
            }
        }
        std::task::Poll::Ready(out)
    }
}

fn make_span(req: &Request) -> Span {
    let span = tracing::info_span!(
        "request",
        otel.kind = "server",
        method = %req.method(),
        // The path only: query strings carry authorization codes and states.
        path = %req.uri().path(),
        request_id = request_id_str(req.headers()).unwrap_or(""),
        status = tracing::field::Empty,
    );
    join_callers_trace(&span, req.headers());
    span
}

/// A W3C `traceparent` from the caller makes the request's span a child of the caller's span
/// (when traces are exported; otherwise there is no trace to join and nothing is read). Only `traceparent` is
/// read: not `tracestate`, not baggage, nothing else the caller sends. A malformed value is
/// ignored and the request starts a trace of its own.
fn join_callers_trace(span: &Span, headers: &HeaderMap) {
    use opentelemetry::propagation::TextMapPropagator as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    struct OnlyTraceparent<'a>(&'a HeaderMap);
    impl opentelemetry::propagation::Extractor for OnlyTraceparent<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            (key == TRACEPARENT)
                .then(|| self.0.get(TRACEPARENT)?.to_str().ok())
                .flatten()
        }
        fn keys(&self) -> Vec<&str> {
            vec![TRACEPARENT]
        }
    }
    const TRACEPARENT: &str = "traceparent";

    if !crate::server::telemetry::exporting() || !headers.contains_key(TRACEPARENT) {
        return;
    }
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .extract(&OnlyTraceparent(headers));
    // Fails only for a span the exporter does not see: it then has no trace to join.
    let _ = span.set_parent(parent);
}

/// Two years: long enough to count for browsers' preload rules; subdomains of the service's own
/// host (not its parent domain) are included, so no sibling can be reached in clear either.
const HSTS: &str = "max-age=63072000; includeSubDomains";

/// The security headers every answer carries (`set_security_headers`), and
/// `Strict-Transport-Security` when `https` (`public_url` is https: once
/// a browser has seen the service over https it never tries plain http again), in one layer that
/// maps the response (no boxed future, no clone of the inner service per request).
pub fn response_headers(
    csp: HeaderValue,
    https: bool,
) -> tower::util::MapResponseLayer<impl Fn(Response) -> Response + Clone + Send + Sync + 'static> {
    tower::util::MapResponseLayer::new(move |mut resp: Response| {
        set_security_headers(&mut resp, &csp);
        // A refused request's body is never read, so the connection cannot carry another
        // request: say so, rather than let a keep-alive client find a broken pipe.
        if resp.status() == axum::http::StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if https {
            resp.headers_mut().insert(
                header::STRICT_TRANSPORT_SECURITY,
                HeaderValue::from_static(HSTS),
            );
        }
        resp
    })
}

fn set_security_headers(resp: &mut Response, csp: &HeaderValue) {
    let h = resp.headers_mut();
    // Room for all of them at once: one growth of the map instead of several.
    h.reserve(7);
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CONTENT_SECURITY_POLICY, csp.clone());
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}
