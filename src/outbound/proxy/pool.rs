//! The proxy's HTTP/1.1 client: connections to providers' APIs, kept between calls and driven
//! by the task that uses them.
//!
//! A shared client (reqwest, hyper-util's pool) runs each connection in a task of its own: a
//! proxied call then hops from the handler to that task and back for the head, and again for
//! every chunk of the body, each hop a wake-up on possibly another thread. Here a call checks a
//! connection out of the pool and polls it itself, beside the response it waits for, and the
//! response body carries the connection along and polls it as the server writes the body out,
//! in the same task, so one proxied call stays on one task from the caller's request to the
//! provider's last byte. The connection goes back to the pool once its body has been read to
//! the end; one whose body was abandoned, or that failed, is closed.
//!
//! Every connection is opened through the SSRF guard: the host's addresses are resolved here,
//! filtered by the policy, and only those are dialled; https uses rustls with the webpki roots
//! (as reqwest does); no proxy from the environment.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::ForwardError;
use crate::config::ssrf::Policy;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body on its way out (empty, kept, or streamed).
pub type OutBody = UnsyncBoxBody<Bytes, BoxError>;

/// Idle connections kept per origin: enough for every connection a busy client holds open to
/// us to have one of its own.
const MAX_IDLE_PER_ORIGIN: usize = 256;
/// An idle connection older than this is closed rather than reused: providers close theirs
/// after a minute or so, and a stale one costs a failed first write.
const IDLE_TIMEOUT: Duration = Duration::from_secs(50);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most hyper buffers per connection when reading: a body chunk never needs more, and
/// each connection's buffer is memory held while it streams.
const MAX_READ_BUFFER: usize = 64 * 1024;

/// Where a new connection goes (only worked out when one is opened).
struct Origin {
    https: bool,
    host: String,
    port: u16,
}

impl Origin {
    fn of(url: &url::Url) -> Result<Self, ForwardError> {
        let host = url
            .host_str()
            .ok_or_else(|| ForwardError::Unreachable("the URL has no host".into()))?;
        Ok(Self {
            https: url.scheme() == "https",
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: url.port_or_known_default().unwrap_or(80),
        })
    }
}

/// The idle map's key for `url`: its scheme, host and port as the url crate serialises them
/// (the host lower-cased, a default port left out), so one origin has one key. A URL naming a
/// user (never one the proxy builds, but a configured base could) gets the same key as one
/// without.
fn origin_key(url: &url::Url) -> Cow<'_, str> {
    if url.username().is_empty() && url.password().is_none() {
        Cow::Borrowed(&url[..url::Position::AfterPort])
    } else {
        let authority = &url[url::Position::BeforeHost..url::Position::AfterPort];
        Cow::Owned(format!("{}://{authority}", url.scheme()))
    }
}

/// A TCP or TLS stream to a provider.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

type Driver = http1::Connection<TokioIo<Stream>, OutBody>;

/// One connection: the handle requests are sent on, and the future that does its I/O (polled
/// by whoever holds the connection).
struct Conn {
    /// The idle list it goes back to ([`origin_key`]).
    origin: Arc<str>,
    sender: http1::SendRequest<OutBody>,
    driver: Pin<Box<Driver>>,
    /// The driver finished (the connection closed); it must not be polled again.
    closed: bool,
    idle_since: Instant,
}

/// Lets a connection read and write what it can (`closed` once it has finished).
fn drive(driver: &mut Pin<Box<Driver>>, closed: &mut bool, cx: &mut Context<'_>) {
    if !*closed && driver.as_mut().poll(cx).is_ready() {
        *closed = true;
    }
}

impl Conn {
    fn drive(&mut self, cx: &mut Context<'_>) {
        drive(&mut self.driver, &mut self.closed, cx);
    }

    /// Ready for a request (`false`: it closed meanwhile).
    async fn ready(&mut self) -> bool {
        poll_fn(|cx| {
            self.drive(cx);
            if self.closed {
                return Poll::Ready(false);
            }
            self.sender.poll_ready(cx).map(|r| r.is_ok())
        })
        .await
    }
}

/// The pool, one per application (cheap to share).
pub struct Pool {
    /// Idle connections by [`origin_key`]: looked up by the URL's own text, so a call that
    /// finds one allocates nothing for it.
    idle: Mutex<HashMap<Arc<str>, Vec<Conn>>>,
    tls: tokio_rustls::TlsConnector,
    policy: Arc<Policy>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").finish_non_exhaustive()
    }
}

impl Pool {
    pub fn new(policy: Arc<Policy>) -> Result<Self, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            idle: Mutex::default(),
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
            policy,
        })
    }

    /// Sends `req` to `url` (its origin; the request's own URI is the path and query) and
    /// returns the head of the answer; the body follows in [`Incoming`].
    pub async fn send(
        self: &Arc<Self>,
        url: &url::Url,
        mut req: Request<OutBody>,
    ) -> Result<Response<Incoming>, ForwardError> {
        self.policy
            .check_url(url)
            .map_err(|_| ForwardError::Refused)?;
        // The URL's own `host[:port]`, as the url crate serialised it: a bracketed IPv6
        // address, no default port.
        let authority = &url[url::Position::BeforeHost..url::Position::AfterPort];
        let host = header::HeaderValue::from_str(authority)
            .map_err(|_| ForwardError::Unreachable("the host is not a header value".into()))?;
        req.headers_mut().insert(header::HOST, host);
        let key = origin_key(url);
        loop {
            let (mut conn, pooled) = match self.checkout(&key) {
                Some(c) => (c, true),
                None => (self.connect(url, &key).await?, false),
            };
            if !conn.ready().await {
                if pooled {
                    continue;
                }
                return Err(ForwardError::Unreachable(
                    "the provider closed the connection".into(),
                ));
            }
            let answer = {
                let mut answer = std::pin::pin!(conn.sender.try_send_request(req));
                let (driver, closed) = (&mut conn.driver, &mut conn.closed);
                poll_fn(|cx| {
                    drive(driver, closed, cx);
                    answer.as_mut().poll(cx)
                })
                .await
            };
            match answer {
                Ok(resp) => {
                    // Nothing to read (a HEAD, a 204, `Content-Length: 0`): the connection is
                    // free at once, even if the body is never polled.
                    let conn = if resp.body().is_end_stream() {
                        self.checkin(conn);
                        None
                    } else {
                        Some((conn, self.clone()))
                    };
                    return Ok(resp.map(|body| Incoming { body, conn }));
                }
                // Never written (a pooled connection that had closed): another connection.
                Err(mut e) => match e.take_message() {
                    Some(r) if pooled => req = r,
                    _ => return Err(ForwardError::Unreachable(e.into_error().to_string())),
                },
            }
        }
    }

    fn checkout(&self, key: &str) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(key)?;
        while let Some(c) = list.pop() {
            if c.idle_since.elapsed() < IDLE_TIMEOUT && !c.closed && !c.sender.is_closed() {
                return Some(c);
            }
        }
        None
    }

    fn checkin(&self, mut conn: Conn) {
        if conn.closed || conn.sender.is_closed() {
            return;
        }
        let now = Instant::now();
        conn.idle_since = now;
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.entry(conn.origin.clone()).or_default();
        // The oldest go first: they are the likeliest to have been closed by the provider.
        // Each connection joins at the end and `checkout` takes from the end, so the list runs
        // from the longest idle to the shortest and the ones past their time are a prefix.
        let expired = list.partition_point(|c| now.duration_since(c.idle_since) >= IDLE_TIMEOUT);
        list.drain(..expired);
        if list.len() < MAX_IDLE_PER_ORIGIN {
            list.push(conn);
        }
    }

    /// Closes the idle connections past their time and forgets origins with none left. Idle
    /// connections are not polled, so one the provider closed would otherwise stay open on our
    /// side until its origin is called again, which for a per-connection origin (a Shopify shop,
    /// a Salesforce instance) may be never. The cleanup task calls this every minute.
    pub fn sweep(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|_, list| {
            list.retain(|c| c.idle_since.elapsed() < IDLE_TIMEOUT && !c.sender.is_closed());
            !list.is_empty()
        });
    }

    /// Idle connections held, across origins.
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.values().map(Vec::len).sum()
    }

    /// A new connection to `url`'s origin (`key`), to an address the policy allows.
    async fn connect(&self, url: &url::Url, key: &str) -> Result<Conn, ForwardError> {
        let origin = &Origin::of(url)?;
        let addrs = super::super::resolve_allowed(&self.policy, &origin.host, origin.port)
            .await
            .map_err(|e| match e {
                super::super::Resolved::Refused(_) => ForwardError::Refused,
                super::super::Resolved::Failed(m) => ForwardError::Unreachable(m),
            })?;
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, dial(&addrs))
            .await
            .map_err(|_| ForwardError::Unreachable("connecting timed out".into()))?
            .map_err(|e| ForwardError::Unreachable(format!("connecting: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let stream = if origin.https {
            let name = rustls::pki_types::ServerName::try_from(origin.host.clone())
                .map_err(|_| ForwardError::Unreachable("the host is not a TLS name".into()))?;
            let tls = tokio::time::timeout(CONNECT_TIMEOUT, self.tls.connect(name, tcp))
                .await
                .map_err(|_| ForwardError::Unreachable("the TLS handshake timed out".into()))?
                .map_err(|e| ForwardError::Unreachable(format!("TLS: {e}")))?;
            Stream::Tls(Box::new(tls))
        } else {
            Stream::Plain(tcp)
        };
        let (sender, driver) = http1::Builder::new()
            .max_buf_size(MAX_READ_BUFFER)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ForwardError::Unreachable(e.to_string()))?;
        Ok(Conn {
            origin: Arc::from(key),
            sender,
            driver: Box::pin(driver),
            closed: false,
            idle_since: Instant::now(),
        })
    }
}

/// The first of `addrs` that answers.
async fn dial(addrs: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address");
    for a in addrs {
        match TcpStream::connect(a).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A provider's response body, carrying the connection it arrives on: polling the body drives
/// the connection, and the connection goes back to the pool when the body has ended.
pub struct Incoming {
    body: hyper::body::Incoming,
    conn: Option<(Conn, Arc<Pool>)>,
}

impl Body for Incoming {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some((conn, _)) = &mut this.conn {
            conn.drive(cx);
        }
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        // The end is known with the last chunk when the length was declared, and whoever
        // reads a body of known length (hyper writing it out) stops there: the connection is
        // free then, not at a `None` that may never be asked for.
        let ended = match &frame {
            None => true,
            Some(Err(_)) => {
                this.conn = None;
                false
            }
            Some(Ok(_)) => this.body.is_end_stream(),
        };
        if ended && let Some((conn, pool)) = this.conn.take() {
            pool.checkin(conn);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sweep closes idle connections past their time and forgets their origin.
    #[tokio::test]
    async fn the_sweep_closes_stale_idle_connections() {
        let (pool, url) = pool_with_upstream().await;
        let resp = pool.send(&url, Request::new(empty())).await.unwrap();
        use http_body_util::BodyExt as _;
        resp.into_body().collect().await.unwrap();
        assert_eq!(pool.idle_count(), 1);
        pool.sweep();
        assert_eq!(pool.idle_count(), 1, "a fresh idle connection stays");
        for list in pool.idle.lock().unwrap().values_mut() {
            for c in list {
                c.idle_since -= IDLE_TIMEOUT;
            }
        }
        pool.sweep();
        assert_eq!(pool.idle_count(), 0);
        assert!(pool.idle.lock().unwrap().is_empty());
    }

    /// A connection checked in drops those idle past their time (the longest idle first).
    #[tokio::test]
    async fn a_checkin_drops_connections_idle_past_their_time() {
        let (pool, url) = pool_with_upstream().await;
        use http_body_util::BodyExt as _;
        // Two answers held at once: two connections, checked in oldest first.
        let first = pool.send(&url, Request::new(empty())).await.unwrap();
        let second = pool.send(&url, Request::new(empty())).await.unwrap();
        first.into_body().collect().await.unwrap();
        second.into_body().collect().await.unwrap();
        assert_eq!(pool.idle_count(), 2);
        for list in pool.idle.lock().unwrap().values_mut() {
            list[0].idle_since -= IDLE_TIMEOUT;
        }
        // The next call takes the fresh one and, checking it in, drops the stale one.
        let third = pool.send(&url, Request::new(empty())).await.unwrap();
        third.into_body().collect().await.unwrap();
        assert_eq!(pool.idle_count(), 1);
    }

    /// A pool that may reach loopback, and the URL of an upstream answering `ok`.
    async fn pool_with_upstream() -> (Arc<Pool>, url::Url) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                let svc = hyper::service::service_fn(|_| async {
                    Ok::<_, std::convert::Infallible>(Response::new(http_body_util::Full::new(
                        Bytes::from_static(b"ok"),
                    )))
                });
                tokio::spawn(http1_server(s, svc));
            }
        });
        let policy = Policy::new(vec![crate::config::IpNet::parse("127.0.0.0/8").unwrap()]);
        let pool = Arc::new(Pool::new(Arc::new(policy)).unwrap());
        (pool, format!("http://{addr}/x").parse().unwrap())
    }

    fn empty() -> OutBody {
        use http_body_util::BodyExt as _;
        http_body_util::Empty::new()
            .map_err(|e: std::convert::Infallible| -> BoxError { match e {} })
            .boxed_unsync()
    }

    async fn http1_server<S>(s: TcpStream, svc: S)
    where
        S: hyper::service::Service<
                Request<hyper::body::Incoming>,
                Response = Response<http_body_util::Full<Bytes>>,
                Error = std::convert::Infallible,
            > + 'static,
        S::Future: 'static,
    {
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(s), svc)
            .await;
    }
}
