//! The HTTP server's plumbing: the accept loop (`serve`), the per-route edge (metrics, limits,
//! deadlines), shared middleware (request ids, tracing, security headers), rate limits and
//! caps, tracing set-up, and the operations routes (health, readiness, metrics).

pub mod edge;
pub mod limits;
pub mod middleware;
pub mod ops;
mod plain_fields;
pub mod rendered;
pub mod serve;
pub mod telemetry;

use std::convert::Infallible;

use axum::extract::Request;
use axum::response::Response;

/// What the hand-written layers (`edge::Edge`, `middleware::Envelope`) wrap: the routes as a
/// service that never fails and whose answer is `Unpin`, so the layers' futures poll it in place
/// instead of boxing it.
pub trait RouteService:
    tower::Service<Request, Response = Response, Error = Infallible, Future: Unpin>
{
}

impl<S> RouteService for S where
    S: tower::Service<Request, Response = Response, Error = Infallible, Future: Unpin>
{
}
