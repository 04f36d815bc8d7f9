//! Forwarding one proxied call to a provider's API: the headers that may cross (both ways),
//! the request body as it arrives (buffered only when small enough to replay after a refresh),
//! the response body as the provider sends it, each bounded, over the proxy's own connections
//! ([`Pool`]: SSRF checks on every address, no redirect followed, no proxy from the
//! environment; each call driven in the task that makes it).

mod pool;

pub use pool::Pool;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http_body::Body as _;
use http_body_util::{BodyExt, Empty, Full, StreamBody};

use pool::{BoxError, Incoming, OutBody};

/// The caller's headers that never reach the provider beyond the hop-by-hop ones: its
/// credentials for us and for anyone else, its cookies, and how it named the user.
const CALLER_ONLY: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "cookie2",
    "subject-token",
    "connect-subject",
    "connect-account",
    "host",
    "expect",
    // The provider learns nothing about the caller's network from us.
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
];

/// Hop-by-hop headers (RFC 9110 §7.6.1, and the older ones proxies still see).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
];

/// The provider's headers that never reach the caller beyond the hop-by-hop ones: cookies set
/// for the provider's origin would be the caller's to replay.
const PROVIDER_ONLY: &[&str] = &["set-cookie", "set-cookie2"];

/// `headers` without the hop-by-hop ones (those listed, and those named in `Connection`) and
/// without `also`.
fn without(headers: &HeaderMap, also: &[&str]) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n) || also.contains(&n) || named.iter().any(|x| x == n) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// What of the caller's headers goes to the provider.
pub fn request_headers(caller: &HeaderMap) -> HeaderMap {
    without(caller, CALLER_ONLY)
}

/// What of the provider's headers goes back to the caller: `provider` without the hop-by-hop
/// ones and cookies, in place.
pub fn keep_response_headers(provider: &mut HeaderMap) {
    // Most answers carry none of them: one pass over the names they have tells, where removing
    // each listed name would look every one up.
    let any = provider.keys().any(|n| {
        let n = n.as_str();
        HOP_BY_HOP.contains(&n) || PROVIDER_ONLY.contains(&n)
    });
    if !any {
        return;
    }
    let named: Vec<HeaderName> = provider
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in HOP_BY_HOP.iter().chain(PROVIDER_ONLY) {
        provider.remove(*n);
    }
    for n in named {
        provider.remove(n);
    }
}

/// The credential header, marked sensitive so no `Debug` of the request shows it.
pub fn credential(name: &str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
    let mut value = HeaderValue::from_str(value).ok()?;
    value.set_sensitive(true);
    Some((name, value))
}

/// A request body on its way to the provider.
pub enum Upload {
    Empty,
    /// Small enough to keep: sent again after a refresh.
    Buffered(Bytes),
    /// Passed on as it arrives; cannot be sent twice.
    Streaming {
        body: OutBody,
        over_limit: Arc<AtomicBool>,
    },
    /// A streaming body already sent.
    Spent,
}

impl Upload {
    /// A body passed on as it arrives, cut (and the call failed as `RequestTooLarge`) once
    /// more than `limit` bytes came.
    pub fn streaming<S, E>(stream: S, limit: u64) -> Self
    where
        S: Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let over_limit = Arc::new(AtomicBool::new(false));
        let flag = over_limit.clone();
        let mut seen: u64 = 0;
        let limited = stream.map(move |chunk| -> Result<Bytes, BoxError> {
            let chunk = chunk.map_err(|e| -> BoxError { Box::new(e) })?;
            seen += chunk.len() as u64;
            if seen > limit {
                flag.store(true, Ordering::Relaxed);
                return Err(Box::new(std::io::Error::other(
                    "request body over the limit",
                )));
            }
            Ok(chunk)
        });
        Self::Streaming {
            body: StreamBody::new(limited.map_ok(http_body::Frame::data)).boxed_unsync(),
            over_limit,
        }
    }

    /// Whether the call can be made again (after a refresh).
    pub fn replayable(&self) -> bool {
        !matches!(self, Self::Streaming { .. } | Self::Spent)
    }

    /// The body for one attempt, and the flag a streaming one raises when over its limit.
    fn take(&mut self) -> (Option<OutBody>, Option<Arc<AtomicBool>>) {
        match self {
            Self::Empty | Self::Spent => (None, None),
            Self::Buffered(b) => (
                Some(Full::new(b.clone()).map_err(never).boxed_unsync()),
                None,
            ),
            Self::Streaming { .. } => match std::mem::replace(self, Self::Spent) {
                Self::Streaming { body, over_limit } => (Some(body), Some(over_limit)),
                _ => (None, None),
            },
        }
    }
}

/// Why a proxied call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("the SSRF guard refused the address")]
    Refused,
    #[error("no answer in time")]
    Timeout,
    #[error("the request body is over the limit")]
    RequestTooLarge,
    /// The cause, without the URL (it carries the caller's path and query).
    #[error("{0}")]
    Unreachable(String),
}

/// One call: `headers` as they go (cleaned, the credential set), the whole call (headers and
/// body, both ways) bounded by `timeout`.
pub async fn send(
    pool: &Arc<Pool>,
    method: http::Method,
    url: &url::Url,
    headers: HeaderMap,
    upload: &mut Upload,
    timeout: Duration,
) -> Result<Answer, ForwardError> {
    let kept = matches!(upload, Upload::Buffered(_));
    let (body, over_limit) = upload.take();
    let target = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let mut req = http::Request::builder()
        .method(method)
        .uri(target)
        .body(body.unwrap_or_else(|| Empty::new().map_err(never).boxed_unsync()))
        .map_err(|_| ForwardError::Unreachable("the request could not be made".into()))?;
    let size = req.body().size_hint().exact();
    let mut headers = headers;
    // A kept body's length is ours to set (once); a streamed one keeps the caller's, so the
    // provider gets what it was told.
    if kept {
        headers.remove(header::CONTENT_LENGTH);
        if let Some(n) = size {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
    headers
        .entry(header::USER_AGENT)
        .or_insert(HeaderValue::from_static(concat!(
            "mcp-connect/",
            env!("CARGO_PKG_VERSION")
        )));
    *req.headers_mut() = headers;
    // One timer for the whole call: it bounds the head here, then the body (`Download`).
    let mut deadline = Box::pin(tokio::time::sleep(timeout));
    let mut head = std::pin::pin!(pool.send(url, req));
    let sent = std::future::poll_fn(|cx| match head.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(Some(r)),
        Poll::Pending => deadline.as_mut().poll(cx).map(|()| None),
    })
    .await;
    match sent {
        Some(Ok(r)) => Ok(Answer { head: r, deadline }),
        Some(Err(_)) if over_limit.is_some_and(|f| f.load(Ordering::Relaxed)) => {
            Err(ForwardError::RequestTooLarge)
        }
        Some(Err(e)) => Err(e),
        None => Err(ForwardError::Timeout),
    }
}

/// The provider's answer: its head now, its body to stream (see [`Download`]).
pub struct Answer {
    head: http::Response<Incoming>,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Answer {
    pub fn status(&self) -> http::StatusCode {
        self.head.status()
    }

    pub fn headers(&self) -> &HeaderMap {
        self.head.headers()
    }

    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        self.head.headers_mut()
    }
}

fn never(e: std::convert::Infallible) -> BoxError {
    match e {}
}

/// A provider's response body on its way to the caller: passed on chunk by chunk, and cut
/// with an error (so the caller never takes a partial body for a whole one) once more than
/// `limit` bytes came.
pub struct Download {
    body: Incoming,
    /// The whole call's end: a body still coming then is cut.
    deadline: Pin<Box<tokio::time::Sleep>>,
    seen: u64,
    limit: u64,
    done: bool,
}

impl Download {
    pub fn new(answer: Answer, limit: u64) -> Self {
        Self {
            body: answer.head.into_body(),
            deadline: answer.deadline,
            seen: 0,
            limit,
            done: false,
        }
    }
}

/// Why a response body stopped early.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("the provider's answer is larger than the proxy's limit of {0} bytes")]
    TooLarge(u64),
    #[error("the provider's answer broke off: {0}")]
    Broken(String),
}

impl Stream for Download {
    type Item = Result<Bytes, DownloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        loop {
            let this = &mut *self;
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers are not passed on.
                    let Ok(chunk) = frame.into_data() else {
                        continue;
                    };
                    this.seen += chunk.len() as u64;
                    if this.seen > this.limit {
                        this.done = true;
                        return Poll::Ready(Some(Err(DownloadError::TooLarge(this.limit))));
                    }
                    return Poll::Ready(Some(Ok(chunk)));
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(DownloadError::Broken(e.to_string()))));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    if this.deadline.as_mut().poll(cx).is_ready() {
                        this.done = true;
                        return Poll::Ready(Some(Err(DownloadError::Broken(
                            "no end of the answer in time".into(),
                        ))));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }

    #[test]
    fn caller_credentials_cookies_and_hop_by_hop_headers_stay_behind() {
        let h = request_headers(&map(&[
            ("authorization", "Bearer api-key"),
            ("cookie", "a=b"),
            ("subject-token", "jwt"),
            ("connect-subject", "alice"),
            ("connection", "keep-alive, X-Secret-Hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic x"),
            ("accept", "application/json"),
            ("x-custom", "kept"),
        ]));
        let names: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["accept", "x-custom"]);
    }

    #[test]
    fn provider_cookies_and_hop_by_hop_headers_stay_behind() {
        let mut h = map(&[
            ("set-cookie", "session=1"),
            ("connection", "close"),
            ("content-type", "application/json"),
            ("location", "http://10.0.0.1/"),
        ]);
        keep_response_headers(&mut h);
        let names: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["content-type", "location"]);
    }

    #[test]
    fn an_answer_with_nothing_to_drop_keeps_every_header() {
        let before = map(&[
            ("content-type", "application/json"),
            ("x-ratelimit-remaining", "4999"),
            ("link", "<https://api.example/next>; rel=\"next\""),
            ("vary", "accept"),
            ("vary", "authorization"),
        ]);
        let mut h = before.clone();
        keep_response_headers(&mut h);
        assert_eq!(h, before);
        // The same answer with one cookie: only the cookie goes.
        let mut h = before.clone();
        h.append("set-cookie", HeaderValue::from_static("s=1"));
        keep_response_headers(&mut h);
        assert_eq!(h, before);
    }

    fn pool() -> Arc<Pool> {
        Arc::new(
            Pool::new(Arc::new(crate::config::ssrf::Policy::new(vec![
                crate::config::IpNet::parse("127.0.0.0/8").unwrap(),
            ])))
            .unwrap(),
        )
    }

    /// An upstream that answers with the request body's length and counts the connections
    /// it accepted.
    async fn upstream() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", l.local_addr().unwrap());
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let svc = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        let n = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes().len())
                            .unwrap_or(0);
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(n.to_string()),
                        )))
                    },
                );
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc),
                );
            }
        });
        (base, accepted)
    }

    async fn read(answer: Answer) -> String {
        let chunks: Vec<Bytes> = Download::new(answer, 1 << 20)
            .map(|c| c.unwrap())
            .collect()
            .await;
        String::from_utf8(chunks.concat()).unwrap()
    }

    async fn call(pool: &Arc<Pool>, url: &str, up: &mut Upload, headers: HeaderMap) -> Answer {
        send(
            pool,
            http::Method::POST,
            &url.parse().unwrap(),
            headers,
            up,
            Duration::from_secs(5),
        )
        .await
        .unwrap()
    }

    /// Bodies arrive whole, streamed (with the caller's declared length) or kept (with ours).
    #[tokio::test]
    async fn streamed_and_kept_bodies_arrive_whole() {
        let (base, _) = upstream().await;
        let pool = pool();
        let chunks = (0..10).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'y'; 10_240])));
        let mut up = Upload::streaming(futures_util::stream::iter(chunks), 1 << 20);
        let headers = map(&[("content-length", "102400")]);
        let a = call(&pool, &format!("{base}/x"), &mut up, headers).await;
        assert_eq!(read(a).await, "102400");
        let mut up = Upload::Buffered(Bytes::from_static(b"hello"));
        let a = call(
            &pool,
            &format!("{base}/x"),
            &mut up,
            map(&[("content-length", "99")]),
        )
        .await;
        assert_eq!(read(a).await, "5");
        assert!(up.replayable());
    }

    /// A connection whose answer was read to the end serves the next call; one whose answer
    /// was abandoned does not; one the provider closed while idle is replaced unnoticed.
    #[tokio::test]
    async fn connections_are_reused_only_when_whole() {
        let (base, accepted) = upstream().await;
        let pool = pool();
        let url = format!("{base}/x");
        for _ in 0..5 {
            let a = call(&pool, &url, &mut Upload::Empty, HeaderMap::new()).await;
            assert_eq!(read(a).await, "0");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        // Read as hyper writes a body of declared length out: up to its last byte, and no
        // further poll for an end.
        for _ in 0..3 {
            let a = call(&pool, &url, &mut Upload::Empty, HeaderMap::new()).await;
            let mut d = Download::new(a, 1 << 20);
            assert_eq!(d.next().await.unwrap().unwrap(), "0");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        drop(call(&pool, &url, &mut Upload::Empty, HeaderMap::new()).await);
        let a = call(&pool, &url, &mut Upload::Empty, HeaderMap::new()).await;
        assert_eq!(read(a).await, "0");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    /// An address the policy does not allow is never dialled.
    #[tokio::test]
    async fn refused_addresses_are_not_dialled() {
        let pool = Arc::new(Pool::new(Arc::new(crate::config::ssrf::Policy::new(vec![]))).unwrap());
        for url in [
            "http://127.0.0.1:9/x",
            "http://localhost:9/x",
            "http://10.0.0.1/x",
        ] {
            let e = send(
                &pool,
                http::Method::GET,
                &url.parse().unwrap(),
                HeaderMap::new(),
                &mut Upload::Empty,
                Duration::from_secs(5),
            )
            .await
            .err();
            assert!(matches!(e, Some(ForwardError::Refused)), "{url}: {e:?}");
        }
    }
}
