//! Middleware shared by every route: request ids, request tracing (paths only, never query
//! strings, which carry codes and states), and security headers.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use tower::ServiceBuilder;
use tower::layer::util::{Identity, Stack};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::{HttpMakeClassifier, TraceLayer};
use tracing::Span;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

#[derive(Clone, Copy, Default)]
pub struct RandomRequestId;

impl MakeRequestId for RandomRequestId {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        HeaderValue::from_str(&crate::crypto::random_token(12))
            .ok()
            .map(RequestId::new)
    }
}

type RequestIdLayers = ServiceBuilder<
    Stack<PropagateRequestIdLayer, Stack<SetRequestIdLayer<RandomRequestId>, Identity>>,
>;

/// Gives every request an `x-request-id` (keeping a well-formed incoming one) and echoes it.
pub fn request_id_layers() -> RequestIdLayers {
    ServiceBuilder::new()
        .layer(SetRequestIdLayer::new(REQUEST_ID, RandomRequestId))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
}

/// The request id of a request, for error pages and audit records.
pub fn request_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|s| {
            s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_owned)
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
        request_id = request_id(req.headers()).as_deref().unwrap_or(""),
    )
}

/// Headers every response carries; pages additionally must never be cached or framed.
pub async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
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
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        // No form-action: Chrome applies it to the redirect that follows a form post, and the
        // consent form's answer is a redirect to the provider.
        HeaderValue::from_static("default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}
