//! Forwarding one proxied call to a provider's API: the headers that may cross (both ways),
//! the request body as it arrives (buffered only when small enough to replay after a refresh),
//! the response body as the provider sends it, each bounded, through the guarded client
//! ([`Http`]: SSRF checks on every address, no redirect followed, no proxy from the
//! environment).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::{Http, SendError};

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

/// What of the provider's headers goes back to the caller.
pub fn response_headers(provider: &HeaderMap) -> HeaderMap {
    without(provider, PROVIDER_ONLY)
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
        body: reqwest::Body,
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
        type BoxError = Box<dyn std::error::Error + Send + Sync>;
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
            body: reqwest::Body::wrap_stream(limited),
            over_limit,
        }
    }

    /// Whether the call can be made again (after a refresh).
    pub fn replayable(&self) -> bool {
        !matches!(self, Self::Streaming { .. } | Self::Spent)
    }

    /// The body for one attempt, and the flag a streaming one raises when over its limit.
    fn take(&mut self) -> (Option<reqwest::Body>, Option<Arc<AtomicBool>>) {
        match self {
            Self::Empty | Self::Spent => (None, None),
            Self::Buffered(b) => (Some(reqwest::Body::from(b.clone())), None),
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
    http: &Http,
    method: http::Method,
    url: url::Url,
    headers: HeaderMap,
    upload: &mut Upload,
    timeout: Duration,
) -> Result<reqwest::Response, ForwardError> {
    let kept = matches!(upload, Upload::Buffered(_));
    let (body, over_limit) = upload.take();
    let mut req = http.request(method, url).timeout(timeout);
    for (name, value) in &headers {
        // A kept body's length is the client's to set (once); a streamed one keeps the
        // caller's, so the provider gets what it was told.
        if kept && name == header::CONTENT_LENGTH {
            continue;
        }
        req = req.header(name, value);
    }
    if let Some(b) = body {
        req = req.body(b);
    }
    match req.send().await {
        Ok(r) => Ok(r),
        Err(_) if over_limit.is_some_and(|f| f.load(Ordering::Relaxed)) => {
            Err(ForwardError::RequestTooLarge)
        }
        Err(e) if e.is_refused() => Err(ForwardError::Refused),
        Err(SendError::Http(e)) if e.is_timeout() => Err(ForwardError::Timeout),
        Err(e) => Err(ForwardError::Unreachable(e.without_url())),
    }
}

/// A provider's response body on its way to the caller: passed on chunk by chunk, and cut
/// with an error (so the caller never takes a partial body for a whole one) once more than
/// `limit` bytes came.
pub struct Download {
    inner: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    seen: u64,
    limit: u64,
    done: bool,
}

impl Download {
    pub fn new(resp: reqwest::Response, limit: u64) -> Self {
        Self {
            inner: Box::pin(resp.bytes_stream()),
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
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                self.seen += chunk.len() as u64;
                if self.seen > self.limit {
                    self.done = true;
                    return Poll::Ready(Some(Err(DownloadError::TooLarge(self.limit))));
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                Poll::Ready(Some(Err(DownloadError::Broken(
                    e.without_url().to_string(),
                ))))
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
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
        let h = response_headers(&map(&[
            ("set-cookie", "session=1"),
            ("connection", "close"),
            ("content-type", "application/json"),
            ("location", "http://10.0.0.1/"),
        ]));
        let names: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["content-type", "location"]);
    }

    /// A streamed body with a declared length arrives whole.
    #[tokio::test]
    async fn a_streamed_body_with_a_declared_length_arrives() {
        let app = axum::Router::new()
            .fallback(|body: axum::body::Bytes| async move { body.len().to_string() });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/x", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        let http = Http::build(
            crate::config::ssrf::Policy::new(vec![
                crate::config::IpNet::parse("127.0.0.0/8").unwrap(),
            ]),
            Duration::from_secs(5),
        )
        .unwrap();
        let chunks = (0..10).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'y'; 10_240])));
        let mut up = Upload::streaming(futures_util::stream::iter(chunks), 1 << 20);
        let headers = map(&[("content-length", "102400")]);
        let r = send(
            &http,
            http::Method::POST,
            url.parse().unwrap(),
            headers,
            &mut up,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(r.text().await.unwrap(), "102400");
    }
}
