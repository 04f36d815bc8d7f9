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

/// Two years: long enough to count for browsers' preload rules; subdomains of the service's own
/// host (not its parent domain) are included, so no sibling can be reached in clear either.
const HSTS: &str = "max-age=63072000; includeSubDomains";

/// `Strict-Transport-Security` on every response when `https` (`public_url` is https): once a
/// browser has seen the service over https it never tries plain http again.
pub async fn hsts(
    axum::extract::State(https): axum::extract::State<bool>,
    req: Request,
    next: Next,
) -> Response {
    let mut resp = next.run(req).await;
    if https {
        resp.headers_mut().insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(HSTS),
        );
    }
    resp
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
    h.insert(header::CONTENT_SECURITY_POLICY, csp);
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
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

/// Answers 503 `unavailable` (a page on browser routes, in the reader's language) when a request
/// overruns its deadline. Without a config (unit tests), pages are plain English.
pub async fn request_timeout(
    axum::extract::State((base, config)): axum::extract::State<(
        Duration,
        Option<std::sync::Arc<crate::config::Config>>,
    )>,
    req: Request,
    next: Next,
) -> Response {
    let Some(limit) = deadline(&req, base) else {
        return next.run(req).await;
    };
    let api = req.uri().path().starts_with("/v1/");
    let ui =
        config.map(|c| crate::web::ui::Ui::for_request(&c, req.method(), req.uri(), req.headers()));
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => {
            tracing::warn!(
                seconds = limit.as_secs(),
                "request timed out before it was answered"
            );
            if api {
                use axum::response::IntoResponse;
                crate::error::Error::page(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "Took too long",
                    "The request took too long to answer. Try again shortly.",
                )
                .into_response()
            } else {
                let ui = ui.unwrap_or_else(crate::web::ui::Ui::plain);
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
            .layer(axum::middleware::from_fn_with_state(
                (Duration::from_secs(1), None),
                request_timeout,
            ));
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
