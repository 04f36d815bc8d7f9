//! The HTTP server's plumbing: the accept loop (`serve`), the per-route edge (metrics, limits,
//! deadlines), shared middleware (request ids, tracing, security headers), rate limits and
//! caps, tracing set-up, and the operations routes (health, readiness, metrics).

pub mod edge;
pub mod limits;
pub mod middleware;
pub mod ops;
pub mod rendered;
pub mod serve;
pub mod telemetry;
