//! Serving one listener: the accept loop with the service's connection caps and header-read
//! deadline, and a graceful drain when asked to stop.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use tokio::net::TcpListener;

use crate::config;
use crate::server::limits;

/// Serves `app` on `listener` until `stop` resolves, then lets open requests finish (at most
/// `DRAIN`). Unlike `axum::serve`, it bounds what slow or idle clients can hold: a connection
/// must send each request's header within `header_read_timeout_seconds` of opening or of its
/// previous answer (an idle keep-alive connection is closed after the same time; see
/// `HeaderWatch`), at most `max_connections` are open at once (the rest wait in the kernel's
/// backlog), and one address holds at most `max_connections_per_address` of them (more are
/// closed at once, so one stranger cannot keep everyone else waiting). Each request carries the peer address as `ConnectInfo<SocketAddr>`.
pub async fn serve<S, B>(
    listener: TcpListener,
    app: S,
    limits: &config::Limits,
    edge: &limits::Limits,
    stop: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()>
where
    S: tower::Service<Request, Response = Response<B>, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = bytes::Bytes, Error = axum::Error> + Send + Unpin + 'static,
{
    use hyper_util::rt::TokioIo;
    use tower::ServiceExt;

    const DRAIN: Duration = Duration::from_secs(90);
    let header_timeout = Duration::from_secs(limits.header_read_timeout_seconds);
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    // No hyper timer: the header deadline is `HeaderWatch`'s, one timer per connection instead
    // of one armed (and an extra read) per request.
    http.header_read_timeout(None);
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut stop => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let slot = match edge.connection_slot(peer.ip()) {
            limits::ConnectionSlot::Refused => {
                tracing::debug!("too many connections from one address: connection closed");
                continue;
            }
            held => held,
        };
        let _ = stream.set_nodelay(true);
        let watch = Arc::new(HeaderWatch::new());
        let (on_request, on_response) = (watch.clone(), watch.clone());
        let svc = app
            .clone()
            .map_request(move |req: Request<hyper::body::Incoming>| {
                let mut req = req.map(Body::new);
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                on_request.request_started();
                req
            })
            .map_response(move |resp: Response<B>| {
                let watch = on_response.clone();
                resp.map(|body| WatchedBody { body, watch })
            });
        let conn = http.serve_connection(
            TokioIo::new(stream),
            hyper_util::service::TowerToHyperService::new(svc),
        );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            tokio::pin!(conn);
            let timer = tokio::time::sleep(header_timeout);
            tokio::pin!(timer);
            loop {
                tokio::select! {
                    biased;
                    r = &mut conn => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    () = &mut timer => match watch.next_check(header_timeout) {
                        Some(after) => timer.as_mut().reset(tokio::time::Instant::now() + after),
                        None => {
                            tracing::debug!("no request header in time: connection closed");
                            break;
                        }
                    },
                }
            }
            drop((permit, slot));
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still open after the drain period were cut off");
    }
    Ok(())
}

/// The header-read deadline of one connection (slowloris): the connection is closed when no
/// request is in flight and none has started for `header_read_timeout_seconds` since it opened
/// or since its last answer's body ended (a request starts when its header is complete). One
/// timer per connection, checked when it fires; per request, only an atomic add and store.
struct HeaderWatch {
    opened: std::time::Instant,
    in_flight: std::sync::atomic::AtomicU32,
    /// Milliseconds after `opened` when the last answer ended (0: none yet).
    idle_since_ms: std::sync::atomic::AtomicU64,
}

impl HeaderWatch {
    fn new() -> Self {
        Self {
            opened: std::time::Instant::now(),
            in_flight: Default::default(),
            idle_since_ms: Default::default(),
        }
    }

    fn request_started(&self) {
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn answer_ended(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let at = self.opened.elapsed().as_millis() as u64;
        if self.in_flight.fetch_sub(1, Relaxed) == 1 {
            self.idle_since_ms.store(at, Relaxed);
        }
    }

    /// When to look again, or `None` when the connection waited too long for a header.
    fn next_check(&self, limit: Duration) -> Option<Duration> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.in_flight.load(Relaxed) > 0 {
            return Some(limit);
        }
        let idle = self
            .opened
            .elapsed()
            .saturating_sub(Duration::from_millis(self.idle_since_ms.load(Relaxed)));
        limit.checked_sub(idle).filter(|left| !left.is_zero())
    }
}

/// An answer's body that tells its connection's `HeaderWatch` when it is done (sent, or dropped
/// with the connection): a streamed answer (`/v1/events`) is a request in flight until it ends.
struct WatchedBody<B> {
    body: B,
    watch: Arc<HeaderWatch>,
}

impl<B> Drop for WatchedBody<B> {
    fn drop(&mut self) {
        self.watch.answer_ended();
    }
}

impl<B> hyper::body::Body for WatchedBody<B>
where
    B: hyper::body::Body<Data = bytes::Bytes, Error = axum::Error> + Unpin,
{
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
