//! Middleware shared by every route: request ids, request tracing (paths only, never query
//! strings, which carry codes and states), and security headers (HSTS when served over https).
//! Metrics, per-address limits and deadlines are per route group (`server::edge`).

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::Response;
use tracing::Span;

use crate::config::IpNet;
use crate::server::RouteService;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request's id: an incoming `x-request-id` is kept only when a trusted proxy sent it and
/// it is well-formed (anyone else could forge the correlation of audit rows and logs, and what
/// is refused is never echoed); otherwise a new one is made. Set on the request, returned to
/// be echoed on the answer.
fn settle_request_id(req: &mut Request, trusted: &[IpNet]) -> Option<HeaderValue> {
    let from_proxy = crate::server::limits::peer_ip(req.extensions())
        .is_some_and(|ip| trusted.iter().any(|n| n.contains(ip)));
    if from_proxy && request_id_str(req.headers()).is_some() {
        return req.headers().get(REQUEST_ID).cloned();
    }
    let id = new_request_id();
    match &id {
        Some(v) => req.headers_mut().insert(REQUEST_ID, v.clone()),
        None => req.headers_mut().remove(REQUEST_ID),
    };
    id
}

/// 12 random bytes, base64url: from the thread's CSPRNG (`rand::thread_rng`, seeded from the
/// OS), not a system call per request — an id needs to be unguessable, not a key.
fn new_request_id() -> Option<HeaderValue> {
    use base64::Engine as _;
    use rand::RngCore as _;
    let mut raw = [0u8; 12];
    rand::thread_rng().fill_bytes(&mut raw);
    let mut text = [0u8; 16];
    let n = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode_slice(raw, &mut text)
        .ok()?;
    HeaderValue::from_bytes(&text[..n]).ok()
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

/// What every request and answer gets, in one layer around the router: its id (`x-request-id`,
/// see `settle_request_id`, echoed on the answer), its span (method, path, request id), entered
/// whenever the request is worked on so every log line of it carries them, an error line for an
/// answer that is a server error, and the security headers (`Strict-Transport-Security` when
/// `public_url` is https). One small layer rather than tower-http's request-id pair, `TraceLayer`
/// and a response map: no extensions, classifier, body wrapper or per-request debug events, and
/// one future per request instead of four.
#[derive(Clone)]
pub struct Envelope(std::sync::Arc<EnvelopeConfig>);

/// What the envelope needs, shared: each request's future holds one reference to it.
struct EnvelopeConfig {
    trusted_proxies: Vec<IpNet>,
    csp: HeaderValue,
    https: bool,
}

impl Envelope {
    pub fn new(trusted_proxies: &[IpNet], csp: HeaderValue, https: bool) -> Self {
        Self(std::sync::Arc::new(EnvelopeConfig {
            trusted_proxies: trusted_proxies.to_vec(),
            csp,
            https,
        }))
    }
}

impl<S> tower::Layer<S> for Envelope {
    type Service = EnvelopeService<S>;
    fn layer(&self, inner: S) -> EnvelopeService<S> {
        EnvelopeService {
            inner,
            envelope: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct EnvelopeService<S> {
    inner: S,
    envelope: Envelope,
}

impl<S: RouteService> tower::Service<Request> for EnvelopeService<S> {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = EnvelopeFuture<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let request_id = settle_request_id(&mut req, &self.envelope.0.trusted_proxies);
        let span = make_span(&req);
        // Outside the span: routing and the edge's limits, which log nothing. The request's
        // own work (extractors, handler, rendering) runs when the future is polled, inside it.
        let inner = self.inner.call(req);
        EnvelopeFuture {
            inner,
            span,
            started: std::time::Instant::now(),
            request_id,
            envelope: self.envelope.clone(),
        }
    }
}

pub struct EnvelopeFuture<F> {
    inner: F,
    span: Span,
    started: std::time::Instant,
    request_id: Option<HeaderValue>,
    envelope: Envelope,
}

impl<F> std::future::Future for EnvelopeFuture<F>
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
        let Ok(mut resp) = std::task::ready!(std::pin::Pin::new(&mut me.inner).poll(cx));
        me.envelope.seal(&mut resp);
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
        if let Some(id) = me.request_id.take() {
            resp.headers_mut().entry(REQUEST_ID).or_insert(id);
        }
        std::task::Poll::Ready(Ok(resp))
    }
}

fn make_span(req: &Request) -> Span {
    let method = req.method();
    // The path only: query strings carry authorization codes and states.
    let path = req.uri().path();
    let request_id = request_id_str(req.headers()).unwrap_or("");
    if !crate::server::telemetry::exporting() {
        // The logs show neither `otel.kind` nor `status`: without an exporter, the span is
        // made without them (one field fewer to visit on every request).
        return tracing::info_span!("request", method = %method, path = %path, request_id);
    }
    let span = tracing::info_span!(
        "request",
        otel.kind = "server",
        method = %method,
        path = %path,
        request_id,
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

impl Envelope {
    /// The security headers every answer carries (`set_security_headers`), and
    /// `Strict-Transport-Security` when https (once a browser has seen the service over https it
    /// never tries plain http again).
    fn seal(&self, resp: &mut Response) {
        set_security_headers(resp, &self.0.csp);
        // A refused request's body is never read, so the connection cannot carry another
        // request: say so, rather than let a keep-alive client find a broken pipe.
        if resp.status() == axum::http::StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if self.0.https {
            resp.headers_mut().insert(
                header::STRICT_TRANSPORT_SECURITY,
                HeaderValue::from_static(HSTS),
            );
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tower::ServiceExt as _;

    /// An answer whose body is the request id the handler saw, or 429 for `/busy`, or one that
    /// names its own id for `/own`.
    fn routes() -> axum::Router {
        axum::Router::new()
            .route(
                "/",
                get(|h: HeaderMap| async move { request_id(&h).unwrap_or_default() }),
            )
            .route(
                "/busy",
                get(|| async { axum::http::StatusCode::TOO_MANY_REQUESTS }),
            )
            .route("/own", get(|| async { ([(REQUEST_ID, "handler-id")], "") }))
    }

    async fn call(envelope: &Envelope, path: &str, sent_id: Option<&str>) -> (Response, String) {
        let mut req = axum::http::Request::builder().uri(path);
        if let Some(id) = sent_id {
            req = req.header(REQUEST_ID, id);
        }
        let peer: std::net::SocketAddr = "127.0.0.10:4000".parse().unwrap();
        let mut req = req.body(axum::body::Body::empty()).unwrap();
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        let resp = tower::Layer::layer(envelope, routes().with_state(()))
            .oneshot(req)
            .await
            .unwrap();
        let (parts, body) = resp.into_parts();
        let body = axum::body::to_bytes(body, 1024).await.unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        (Response::from_parts(parts, axum::body::Body::empty()), text)
    }

    fn envelope(trusted: &str, https: bool) -> Envelope {
        Envelope::new(
            &[IpNet::parse(trusted).unwrap()],
            HeaderValue::from_static("default-src 'none'"),
            https,
        )
    }

    /// The id the handler sees is the one echoed: new unless a trusted proxy sent a
    /// well-formed one; a handler's own id is left alone.
    #[tokio::test]
    async fn the_request_id_the_handler_sees_is_the_one_echoed() {
        let untrusted = envelope("10.0.0.0/8", false);
        for sent in [None, Some("forged-1"), Some("has spaces")] {
            let (resp, seen) = call(&untrusted, "/", sent).await;
            let echoed = resp.headers()[REQUEST_ID].to_str().unwrap();
            assert_eq!(echoed, seen, "sent {sent:?}");
            assert_eq!(echoed.len(), 16, "{echoed}");
            assert_ne!(Some(echoed), sent);
        }
        let (a, _) = call(&untrusted, "/", None).await;
        let (b, _) = call(&untrusted, "/", None).await;
        assert_ne!(a.headers()[REQUEST_ID], b.headers()[REQUEST_ID]);

        let trusted = envelope("127.0.0.10/32", false);
        let (resp, seen) = call(&trusted, "/", Some("proxy-id-1")).await;
        assert_eq!(
            (resp.headers()[REQUEST_ID].to_str().unwrap(), &*seen),
            ("proxy-id-1", "proxy-id-1")
        );
        let (resp, seen) = call(&trusted, "/", Some("has spaces")).await;
        assert_eq!(resp.headers()[REQUEST_ID].to_str().unwrap(), seen);
        assert_ne!(seen, "has spaces");

        let (resp, _) = call(&trusted, "/own", None).await;
        assert_eq!(resp.headers().get_all(REQUEST_ID).iter().count(), 1);
        assert_eq!(resp.headers()[REQUEST_ID], "handler-id");
    }

    /// Every answer carries the security headers; HSTS only over https; a 429 closes.
    #[tokio::test]
    async fn every_answer_is_sealed() {
        let (resp, _) = call(&envelope("10.0.0.0/8", false), "/", None).await;
        let h = resp.headers();
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "no-referrer");
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["content-security-policy"], "default-src 'none'");
        assert_eq!(h["cache-control"], "no-store");
        assert!(!h.contains_key(header::STRICT_TRANSPORT_SECURITY));
        assert!(!h.contains_key(header::CONNECTION));
        let (resp, _) = call(&envelope("10.0.0.0/8", true), "/busy", None).await;
        assert_eq!(resp.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::CONNECTION], "close");
        assert_eq!(resp.headers()[header::STRICT_TRANSPORT_SECURITY], HSTS);
        assert!(resp.headers().contains_key(REQUEST_ID));
    }
}
