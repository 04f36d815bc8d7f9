//! Middleware shared by every route: request ids, request tracing (paths only, never query
//! strings, which carry codes and states), and security headers (HSTS when served over https).
//! Metrics, per-address limits and deadlines are per route group (`server::edge`).

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use tower::ServiceBuilder;
use tower::layer::util::{Identity, Stack};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId as TowerRequestId, SetRequestIdLayer,
};
use tower_http::trace::{HttpMakeClassifier, TraceLayer};
use tracing::Span;

use crate::config::IpNet;

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

type MakeSpan = fn(&Request) -> Span;

pub fn trace_layer() -> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, MakeSpan> {
    let layer: TraceLayer<HttpMakeClassifier> = TraceLayer::new_for_http();
    layer.make_span_with(make_span as MakeSpan)
}

fn make_span(req: &Request) -> Span {
    tracing::info_span!(
        "request",
        method = %req.method(),
        // The path only: query strings carry authorization codes and states.
        path = %req.uri().path(),
        request_id = request_id_str(req.headers()).unwrap_or(""),
    )
}

/// Two years: long enough to count for browsers' preload rules; subdomains of the service's own
/// host (not its parent domain) are included, so no sibling can be reached in clear either.
const HSTS: &str = "max-age=63072000; includeSubDomains";

/// `security_headers`, and `Strict-Transport-Security` when `https` (`public_url` is https: once
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

/// Headers every response carries; pages additionally must never be cached or framed. `csp` is
/// the Content-Security-Policy (`Branding::content_security_policy`: our own origin, plus the
/// logo's when it is elsewhere).
pub async fn security_headers(
    axum::extract::State(csp): axum::extract::State<HeaderValue>,
    req: Request,
    next: Next,
) -> Response {
    let mut resp = next.run(req).await;
    set_security_headers(&mut resp, &csp);
    resp
}
