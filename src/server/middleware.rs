//! Middleware shared by every route: request ids, request tracing (paths only, never query
//! strings, which carry codes and states), security headers (HSTS when served over https), and
//! request timeouts.

use std::time::Duration;

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

/// How long a request may take: `base` for ordinary requests; requests that may long-poll
/// (`GET /v1/elicitations/{id}?wait=`, `POST /v1/tokens` with `wait_seconds`) get their longest
/// wait on top; the SSE stream `/v1/events` has no deadline (it ends with the service).
fn deadline(req: &Request, base: Duration) -> Option<Duration> {
    let path = req.uri().path();
    if path == "/v1/events" {
        return None;
    }
    let long_poll = (path == "/v1/tokens" && req.method() == axum::http::Method::POST)
        || (path.starts_with("/v1/elicitations/") && req.method() == axum::http::Method::GET);
    if long_poll {
        return Some(base + Duration::from_secs(crate::api::elicitations::MAX_WAIT_SECONDS));
    }
    Some(base)
}

/// Routes whose answer is never a page: the API and the probes.
fn never_a_page(path: &str) -> bool {
    path.starts_with("/v1/")
        || path == "/v1"
        || matches!(path, "/healthz" | "/readyz" | "/metrics" | "/openapi.json")
}

/// The per-request guards in one layer: the per-address browser rate limit
/// (`limits::browser_refusal`, browser routes only), the in-flight cap per client behind a
/// trusted proxy (`limits::forwarded_request_slot`) and the request deadline (`deadline`),
/// answered with 503 `unavailable` (a page on browser routes, in the reader's language) when a
/// request overruns it. Written out as a `tower` layer rather than two `from_fn` layers: no
/// boxed future, no clone of the inner service per request, and a timer only for requests not
/// answered at their first poll (most API answers from memory are). Without a state (unit
/// tests), no browser limit and plain English pages.
#[derive(Clone)]
pub struct Guard {
    base: Duration,
    state: Option<crate::AppState>,
}

impl Guard {
    pub fn new(base: Duration, state: Option<crate::AppState>) -> Self {
        Self { base, state }
    }
}

impl<S> tower::Layer<S> for Guard {
    type Service = GuardService<S>;
    fn layer(&self, inner: S) -> GuardService<S> {
        GuardService {
            inner,
            guard: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct GuardService<S> {
    inner: S,
    guard: Guard,
}

impl<S> tower::Service<Request> for GuardService<S>
where
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = GuardFuture<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let mut slot = None;
        if let Some(state) = &self.guard.state {
            if let Some(refused) = crate::server::limits::browser_refusal(state, &req) {
                return GuardFuture::Done(Some(refused));
            }
            match crate::server::limits::forwarded_request_slot(state, &req) {
                Ok(s) => slot = s,
                Err(refused) => return GuardFuture::Done(Some(*refused)),
            }
        }
        let Some(limit) = deadline(&req, self.guard.base) else {
            return GuardFuture::Open(self.inner.call(req), slot);
        };
        // What a timeout page needs, taken before the request moves on; API and probe answers
        // are never pages.
        let page = if never_a_page(req.uri().path()) {
            None
        } else {
            Some(Box::new(
                self.guard
                    .state
                    .as_ref()
                    .map(|s| {
                        crate::web::ui::Ui::for_request(
                            &s.config,
                            req.method(),
                            req.uri(),
                            req.headers(),
                        )
                    })
                    .unwrap_or_else(crate::web::ui::Ui::plain),
            ))
        };
        GuardFuture::Timed {
            inner: self.inner.call(req),
            limit,
            timer: None,
            page,
            _slot: slot,
        }
    }
}

/// The answer of `GuardService`.
pub enum GuardFuture<F> {
    /// Answered by the guard itself.
    Done(Option<Response>),
    /// No deadline (the event stream). Each variant holds its forwarded client's slot
    /// (`limits::forwarded_request_slot`) until answered.
    Open(F, Option<crate::server::limits::Slot>),
    Timed {
        inner: F,
        limit: Duration,
        /// Armed at the first poll that finds the answer not ready.
        timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
        /// `Some` on browser routes: the timeout page's frame.
        page: Option<Box<crate::web::ui::Ui>>,
        _slot: Option<crate::server::limits::Slot>,
    },
}

impl<F> std::future::Future for GuardFuture<F>
where
    F: std::future::Future<Output = Result<Response, std::convert::Infallible>> + Unpin,
{
    type Output = Result<Response, std::convert::Infallible>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        match self.get_mut() {
            GuardFuture::Done(r) => Poll::Ready(Ok(r.take().unwrap_or_else(|| {
                use axum::response::IntoResponse;
                axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response()
            }))),
            GuardFuture::Open(inner, _) => std::pin::Pin::new(inner).poll(cx),
            GuardFuture::Timed {
                inner,
                limit,
                timer,
                page,
                ..
            } => {
                if let Poll::Ready(r) = std::pin::Pin::new(inner).poll(cx) {
                    return Poll::Ready(r);
                }
                let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(*limit)));
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                tracing::warn!(
                    seconds = limit.as_secs(),
                    "request timed out before it was answered"
                );
                Poll::Ready(Ok(timeout_response(page.take())))
            }
        }
    }
}

/// 503 `unavailable`: JSON on API routes (`page` is `None`), else a page.
fn timeout_response(page: Option<Box<crate::web::ui::Ui>>) -> Response {
    use axum::response::IntoResponse;
    match page {
        None => crate::server::rendered::edge_refusal(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Took too long",
            "The request took too long to answer. Try again shortly.",
        )
        .into_response(),
        Some(ui) => {
            use crate::i18n::Msg;
            crate::web::pages::MessagePage::new(
                &ui,
                "error",
                Msg::new("timeout-title"),
                Msg::new("timeout-lead"),
            )
            .next(Msg::new("timeout-next"))
            .response(axum::http::StatusCode::SERVICE_UNAVAILABLE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::{get, post};
    use tower::ServiceExt;

    async fn slow() -> &'static str {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        "done"
    }

    #[tokio::test]
    async fn slow_requests_time_out_except_streams_and_long_polls() {
        let app = Router::new()
            .route("/v1/connections", get(slow))
            .route("/account", get(slow))
            .route("/v1/events", get(slow))
            .route("/v1/tokens", post(slow))
            .route("/v1/elicitations/{id}", get(slow))
            .layer(Guard::new(Duration::from_secs(1), None));
        let call = |method: &str, path: &str| {
            let req = axum::http::Request::builder()
                .method(method)
                .uri(path)
                .body(Body::empty())
                .unwrap();
            app.clone().oneshot(req)
        };
        let r = call("GET", "/v1/connections").await.unwrap();
        assert_eq!(r.status(), axum::http::StatusCode::SERVICE_UNAVAILABLE);
        let r = call("GET", "/account").await.unwrap();
        assert_eq!(r.status(), axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            r.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        for (m, p) in [
            ("GET", "/v1/events"),
            ("POST", "/v1/tokens"),
            ("GET", "/v1/elicitations/x"),
        ] {
            let r = call(m, p).await.unwrap();
            assert_eq!(r.status(), axum::http::StatusCode::OK, "{m} {p}");
        }
    }
}
