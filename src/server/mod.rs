//! The HTTP server's plumbing: the accept loop (`serve`), middleware (request ids, timeouts, security headers), rate limits
//! and caps, Prometheus metrics, tracing set-up, and the operations routes (health, readiness,
//! metrics, the OpenAPI document).

pub mod limits;
pub mod metrics;
pub mod middleware;
pub mod ops;
pub mod rendered;
pub mod serve;
pub mod telemetry;
