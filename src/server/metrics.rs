//! The metrics layer: counts and times every request by its matched route (the registry is
//! `crate::metrics`).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::response::Response;

use crate::metrics::Metrics;

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
