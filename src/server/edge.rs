//! The per-route edge layer: counts and times every request by its matched route, applies the
//! per-address limits (the browser rate limit, the in-flight cap per client behind a trusted
//! proxy) and the route's deadline. Each route gets it with the bound it needs
//! (`Edge::deadline`): ordinary routes the configured request timeout, long polls their
//! longest wait on top, the event stream none.
//!
//! One hand-written `tower` layer rather than `from_fn` layers: no boxed future, no clone of
//! the inner service per request, and a timer only for requests not answered at their first
//! poll (most API answers from memory are).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ErrorCode;
use crate::i18n::Msg;
use crate::metrics::RouteRecorder;
use crate::server::RouteService;
use crate::server::limits::{self, Limit, Slot};
use crate::server::rendered::{RenderedError, edge_answer};

/// The edge of a route or a group of routes. It runs after routing, so the request carries its
/// `MatchedPath`: added to a group with `Router::layer`, which wraps each route once, or to
/// one handler (`for_handler`) with `Handler::layer`, which saves the API's hot routes a boxed
/// service and future per request.
#[derive(Clone)]
pub struct Edge {
    metrics: crate::metrics::Metrics,
    /// The limits' state; `None` in tests that drive routes without a service.
    state: Option<AppState>,
    deadline: Option<Duration>,
    browser: bool,
    /// For one handler: `Handler::layer` builds the service again for every request, so what
    /// it learns of its route is kept here instead of in the service.
    learned: Option<Arc<Learned>>,
}

/// What an `EdgeService` learns from its route's first answers.
#[derive(Default)]
struct Learned {
    /// The route pattern, kept from the first request. `Router::layer` wraps each route on its
    /// own, so it is one pattern (the fallback sees none); a request with another pattern still
    /// gets its own label, only not the shared copy.
    route: std::sync::OnceLock<Arc<str>>,
    /// The metrics of the first successful answer's method, route and status, which most
    /// answers share.
    recorder: std::sync::OnceLock<RouteRecorder>,
}

impl Edge {
    /// The edge with the configured request timeout as the deadline, no browser rate limit.
    pub fn new(state: &AppState) -> Self {
        Self {
            metrics: state.metrics.clone(),
            deadline: Some(Duration::from_secs(
                state.config.limits.request_timeout_seconds,
            )),
            state: Some(state.clone()),
            browser: false,
            learned: None,
        }
    }

    /// Metrics and a deadline only (for tests of routes without the service's state).
    pub fn without_limits(metrics: crate::metrics::Metrics, deadline: Duration) -> Self {
        Self {
            metrics,
            state: None,
            deadline: Some(deadline),
            browser: false,
            learned: None,
        }
    }

    /// How long a request may take before it is answered 503 `unavailable`; `None` for no
    /// deadline (a stream that ends with the service).
    pub fn deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Applies the per-address browser rate limit (`limits::browser_refusal`).
    pub fn browser(mut self) -> Self {
        self.browser = true;
        self
    }

    /// This edge for one handler only (`Handler::layer`): one route, whose label and metrics
    /// are learned once, not once per request.
    pub fn for_handler(mut self) -> Self {
        self.learned = Some(Arc::default());
        self
    }
}

impl<S> tower::Layer<S> for Edge {
    type Service = EdgeService<S>;
    fn layer(&self, inner: S) -> EdgeService<S> {
        EdgeService {
            inner,
            learned: self.learned.clone().unwrap_or_default(),
            edge: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct EdgeService<S> {
    inner: S,
    edge: Edge,
    learned: Arc<Learned>,
}

impl<S> EdgeService<S> {
    fn route_label(&self, m: &MatchedPath) -> Arc<str> {
        let shared = self.learned.route.get_or_init(|| Arc::from(m.as_str()));
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

fn method_label(m: &axum::http::Method) -> &'static str {
    match m.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "DELETE" => "DELETE",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

impl<S: RouteService> tower::Service<Request> for EdgeService<S> {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let started = Instant::now();
        let method = method_label(req.method());
        let route = req
            .extensions()
            .get::<MatchedPath>()
            .map(|m| self.route_label(m));
        let guarded = match &self.edge.state {
            None => Ok(None),
            Some(state) => match self
                .edge
                .browser
                .then(|| limits::browser_refusal(state, &req))
                .flatten()
            {
                Some(refused) => Err(refused),
                None => limits::forwarded_request_slot(state, &req),
            },
        };
        let answer = match guarded {
            Ok(slot) => Answer::Inner {
                inner: self.inner.call(req),
                timer: None,
                _slot: slot,
            },
            Err(refused) => Answer::Refused(Some(refused)),
        };
        EdgeFuture {
            answer,
            deadline: self.edge.deadline,
            started,
            method,
            route,
            metrics: self.edge.metrics.clone(),
            learned: self.learned.clone(),
        }
    }
}

pub struct EdgeFuture<F> {
    answer: Answer<F>,
    deadline: Option<Duration>,
    started: Instant,
    method: &'static str,
    route: Option<Arc<str>>,
    metrics: crate::metrics::Metrics,
    learned: Arc<Learned>,
}

enum Answer<F> {
    /// Refused by a limit before the route saw it.
    Refused(Option<limits::TooMany>),
    Inner {
        inner: F,
        /// Armed at the first poll that finds the answer not ready.
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
        /// The forwarded client's slot (`limits::forwarded_request_slot`), held until answered.
        _slot: Option<Slot>,
    },
}

impl<F> Future for EdgeFuture<F>
where
    F: Future<Output = Result<Response, std::convert::Infallible>> + Unpin,
{
    type Output = Result<Response, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.get_mut();
        let resp = match &mut me.answer {
            Answer::Refused(r) => r.take().map_or_else(
                || StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                IntoResponse::into_response,
            ),
            Answer::Inner { inner, timer, .. } => match Pin::new(inner).poll(cx) {
                Poll::Ready(Ok(resp)) => resp,
                Poll::Pending => {
                    let Some(limit) = me.deadline else {
                        return Poll::Pending;
                    };
                    let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                    if timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    tracing::warn!(
                        seconds = limit.as_secs(),
                        "request timed out before it was answered"
                    );
                    timed_out()
                }
            },
        };
        if let Some(limit) = resp.extensions().get::<Limit>() {
            me.metrics.rate_limited(limit.label());
        }
        let route = match me.route.take() {
            Some(r) => r,
            None => match resp.extensions().get::<MatchedPath>() {
                Some(m) => Arc::from(m.as_str()),
                None => UNMATCHED.with(Clone::clone),
            },
        };
        let status = resp.status().as_u16();
        let seconds = me.started.elapsed().as_secs_f64();
        match me.learned.recorder.get() {
            Some(r) if r.is_for(me.method, &route, status) => r.record(seconds),
            _ => {
                let r = me.metrics.route_recorder(me.method, route, status);
                r.record(seconds);
                // Kept for a success only: a route's first answer may be a refusal (a client
                // with a wrong key at start-up) that its later answers do not share.
                if resp.status().is_success() {
                    let _ = me.learned.recorder.set(r);
                }
            }
        }
        Poll::Ready(Ok(resp))
    }
}

/// 503 `unavailable`: JSON on API routes, a page (in the reader's language) on browser routes.
fn timed_out() -> Response {
    edge_answer(
        "The request took too long to answer. Try again shortly.",
        RenderedError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: ErrorCode::Unavailable,
            title: Msg::new("timeout-title").into(),
            message: Msg::new("timeout-lead").into(),
            next: Some(Msg::new("timeout-next").into()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::http::header;
    use axum::routing::{get, post};
    use tower::ServiceExt;

    async fn slow() -> &'static str {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        "done"
    }

    /// Grouped as `api::router` and `app::router` group them: ordinary routes get the request
    /// timeout, the routes that may long-poll a minute on top, the event stream no deadline.
    #[tokio::test]
    async fn slow_requests_time_out_except_streams_and_long_polls() {
        let edge = Edge::without_limits(crate::metrics::Metrics::new(), Duration::from_secs(1));
        let app = Router::new()
            .route("/v1/connections", get(slow))
            .route("/account", get(slow))
            .layer(edge.clone())
            .merge(
                Router::new()
                    .route("/v1/tokens", post(slow))
                    .route("/v1/elicitations/{id}", get(slow))
                    .layer(edge.clone().deadline(Some(Duration::from_secs(61)))),
            )
            .merge(
                Router::new()
                    .route("/v1/events", get(slow))
                    .layer(edge.deadline(None)),
            );
        let call = |method: &str, path: &str| {
            let req = axum::http::Request::builder()
                .method(method)
                .uri(path)
                .body(Body::empty())
                .unwrap();
            app.clone().oneshot(req)
        };
        let r = call("GET", "/v1/connections").await.unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            r.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        let r = call("GET", "/account").await.unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        // Marked as the edge's answer, which the browser layer (`web::pages::render_edge_pages`)
        // turns into a page: `tests/it/edges.rs` checks that page through the whole app.
        assert!(
            r.extensions()
                .get::<crate::server::rendered::FromEdge>()
                .is_some()
        );
        assert_eq!(
            r.extensions().get::<RenderedError>().unwrap().code,
            ErrorCode::Unavailable
        );
        for (m, p) in [
            ("GET", "/v1/events"),
            ("POST", "/v1/tokens"),
            ("GET", "/v1/elicitations/x"),
        ] {
            let r = call(m, p).await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{m} {p}");
        }
    }

    /// Each answer counted under its own method, route and status, whether it is the route's
    /// kept series (its first success) or not: a refusal first, then successes, another status,
    /// another method.
    #[tokio::test]
    async fn every_answer_is_counted_under_its_own_labels() {
        async fn answer(axum::extract::Path(code): axum::extract::Path<u16>) -> StatusCode {
            StatusCode::from_u16(code).unwrap()
        }
        let metrics = crate::metrics::Metrics::new();
        // With its state given, as the service's router is: the routes (and their edges, with
        // the series they keep) are made once, not for each request.
        let app = Router::new()
            .route("/n/{code}", post(answer).get(answer))
            .layer(Edge::without_limits(
                metrics.clone(),
                Duration::from_secs(5),
            ))
            .with_state(());
        for (m, code) in [
            ("POST", 401),
            ("POST", 200),
            ("POST", 200),
            ("POST", 200),
            ("POST", 404),
            ("GET", 200),
            ("POST", 200),
        ] {
            let req = axum::http::Request::builder()
                .method(m)
                .uri(format!("/n/{code}"))
                .body(Body::empty())
                .unwrap();
            let r = app.clone().oneshot(req).await.unwrap();
            assert_eq!(r.status().as_u16(), code);
        }
        let text = metrics.render(
            crate::metrics::PoolReading {
                open: 0,
                idle: 0,
                max: 0,
            },
            crate::metrics::CacheReading::default(),
        );
        // The value of one series, named as the exposition writes it.
        let value = |series: String| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{series} ")))
                .map(|v| v.trim().to_owned())
        };
        let series = |m: &str, status: u16| {
            value(format!(
                "mcp_connect_http_requests_total{{method=\"{m}\",route=\"/n/{{code}}\",status=\"{status}\"}}"
            ))
        };
        assert_eq!(series("POST", 401).as_deref(), Some("1"), "{text}");
        assert_eq!(series("POST", 200).as_deref(), Some("4"), "{text}");
        assert_eq!(series("POST", 404).as_deref(), Some("1"), "{text}");
        assert_eq!(series("GET", 200).as_deref(), Some("1"), "{text}");
        let timed = |m: &str| {
            value(format!(
                "mcp_connect_http_request_duration_seconds_count{{method=\"{m}\",route=\"/n/{{code}}\"}}"
            ))
        };
        assert_eq!(timed("POST").as_deref(), Some("6"), "{text}");
        assert_eq!(timed("GET").as_deref(), Some("1"), "{text}");
    }
}
