//! The SSRF guard: every outbound call whose URL comes from configuration or discovery
//! (discovery documents, JWKS, token, userinfo, revocation, webhooks, upstream MCP metadata and
//! registration, API-key validation) goes through [`Http`], which
//!
//! - refuses plain http off loopback;
//! - refuses an address literal in a blocked class (loopback, private, link-local and cloud
//!   metadata, CGNAT, ULA, unspecified, multicast, reserved, and the IPv4-mapped, IPv4-compatible,
//!   NAT64 and 6to4 forms of those) before anything is sent;
//! - resolves names itself ([`GuardedResolver`]) and connects only to the addresses that pass, so a
//!   name cannot be checked against one address and connected to another (DNS rebinding);
//! - follows no redirect (a hop would need the same check; none of the peers we call needs one);
//! - uses no proxy from the environment (a proxy would resolve names where we cannot check them).
//!
//! `outbound_allow_cidrs` (top level of the config) lets chosen ranges through: an on-premises
//! issuer on a private network, or loopback stand-ins in the demo and the tests.

pub mod http;
pub mod proxy;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::config::ssrf::{Policy, Refusal, is_localhost};

/// Resolves names and hands reqwest only the addresses the policy allows.
struct GuardedResolver {
    policy: Arc<Policy>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let ok = resolve_allowed(&policy, &host, 0).await.map_err(
                |e| -> Box<dyn std::error::Error + Send + Sync> {
                    match e {
                        Resolved::Refused(m) => Box::new(GuardError(format!("SSRF guard: {m}"))),
                        Resolved::Failed(m) => Box::new(std::io::Error::other(m)),
                    }
                },
            )?;
            let addrs: reqwest::dns::Addrs = Box::new(ok.into_iter());
            Ok(addrs)
        })
    }
}

/// Why a name gave no address to connect to.
#[derive(Debug)]
pub enum Resolved {
    /// The guard refused every address it has.
    Refused(String),
    /// It could not be resolved.
    Failed(String),
}

/// The addresses of `host` (a name or an address literal) that the policy allows, with `port`.
/// `localhost` never goes to DNS (RFC 6761).
pub async fn resolve_allowed(
    policy: &Policy,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Resolved> {
    let found: Vec<SocketAddr> = if is_localhost(host) {
        vec![
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
        ]
    } else if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        vec![SocketAddr::new(ip, port)]
    } else {
        tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| Resolved::Failed(format!("resolving {host}: {e}")))?
            .collect()
    };
    policy.filter(host, found).map_err(Resolved::Refused)
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct GuardError(String);

/// An outbound call that failed: refused by the guard before anything was sent, or failed at the
/// HTTP level (including the resolver's refusal of every address of a name).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

impl SendError {
    /// The message without the URL reqwest adds (callers that name the URL themselves).
    pub fn without_url(self) -> String {
        match self {
            Self::Refused(r) => r.reason,
            Self::Http(e) => e.without_url().to_string(),
        }
    }

    pub fn is_refused(&self) -> bool {
        match self {
            Self::Refused(_) => true,
            Self::Http(e) => {
                let mut cur: Option<&dyn std::error::Error> = Some(e);
                while let Some(c) = cur {
                    if c.is::<GuardError>() {
                        return true;
                    }
                    cur = c.source();
                }
                false
            }
        }
    }
}

/// The guarded client. Cheap to clone.
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
    policy: Arc<Policy>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Http {
    /// Redirects off, no proxy, the guarded resolver, and the given whole-request timeout.
    pub fn build(policy: Policy, timeout: Duration) -> Result<Self, reqwest::Error> {
        let policy = Arc::new(policy);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver {
                policy: policy.clone(),
            }))
            .connect_timeout(Duration::from_secs(5))
            .timeout(timeout)
            .user_agent(concat!("mcp-connect/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { client, policy })
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn request(&self, method: reqwest::Method, url: impl reqwest::IntoUrl) -> Request {
        Request {
            client: self.client.clone(),
            policy: self.policy.clone(),
            inner: self.client.request(method, url),
            private_path: false,
        }
    }

    pub fn get(&self, url: impl reqwest::IntoUrl) -> Request {
        self.request(reqwest::Method::GET, url)
    }

    pub fn post(&self, url: impl reqwest::IntoUrl) -> Request {
        self.request(reqwest::Method::POST, url)
    }

    pub fn delete(&self, url: impl reqwest::IntoUrl) -> Request {
        self.request(reqwest::Method::DELETE, url)
    }
}

/// A request being built; `send` checks its URL before anything leaves.
pub struct Request {
    client: reqwest::Client,
    policy: Arc<Policy>,
    inner: reqwest::RequestBuilder,
    private_path: bool,
}

impl Request {
    fn map(self, f: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder) -> Self {
        Self {
            inner: f(self.inner),
            ..self
        }
    }

    pub fn header<K, V>(self, key: K, value: V) -> Self
    where
        reqwest::header::HeaderName: TryFrom<K>,
        <reqwest::header::HeaderName as TryFrom<K>>::Error: Into<::http::Error>,
        reqwest::header::HeaderValue: TryFrom<V>,
        <reqwest::header::HeaderValue as TryFrom<V>>::Error: Into<::http::Error>,
    {
        self.map(|r| r.header(key, value))
    }

    pub fn bearer_auth(self, token: impl std::fmt::Display) -> Self {
        self.map(|r| r.bearer_auth(token))
    }

    pub fn basic_auth(
        self,
        user: impl std::fmt::Display,
        pass: Option<impl std::fmt::Display>,
    ) -> Self {
        self.map(|r| r.basic_auth(user, pass))
    }

    pub fn body(self, body: impl Into<reqwest::Body>) -> Self {
        self.map(|r| r.body(body))
    }

    pub fn json<T: serde::Serialize + ?Sized>(self, json: &T) -> Self {
        self.map(|r| r.json(json))
    }

    pub fn timeout(self, t: Duration) -> Self {
        self.map(|r| r.timeout(t))
    }

    /// Keeps the URL's path out of the call's span (`send`): for URLs whose path may itself be
    /// a credential (a webhook receiver that authenticates by a secret path).
    pub fn private_path(self) -> Self {
        Self {
            private_path: true,
            ..self
        }
    }

    /// Checks the URL (scheme; the address when the host is one), then sends. Names are checked
    /// by the resolver as they are resolved.
    ///
    /// Each call runs in an `outbound` span, a client span under the request's in exported
    /// traces, naming the method, host, path (never the query, which can carry codes; not the
    /// path either for `private_path`) and the answer's status. It is at debug level: free when
    /// neither the trace exporter nor the log filter wants it; operators see slow peers with
    /// `RUST_LOG=mcp_connect::outbound=debug` and a span-timing subscriber, and the connect-flow
    /// benchmark subtracts these spans from the request time to get server time.
    pub async fn send(self) -> Result<reqwest::Response, SendError> {
        use tracing::Instrument as _;
        let req = self.inner.build()?;
        self.policy.check_url(req.url())?;
        let span = tracing::debug_span!(
            "outbound",
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            method = %req.method(),
            host = req.url().host_str().unwrap_or(""),
            path = if self.private_path { "(private)" } else { req.url().path() },
            status = tracing::field::Empty,
        );
        let answer = self.client.execute(req).instrument(span.clone()).await;
        match &answer {
            Ok(resp) => {
                // As an i64: tracing-opentelemetry exports unsigned numbers as text.
                span.record("status", i64::from(resp.status().as_u16()));
            }
            // The error is not recorded: reqwest's message names the URL, query included.
            Err(_) => {
                span.record("otel.status_code", "error");
            }
        }
        Ok(answer?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IpNet;

    /// Nothing reaches a listener on a refused address: the literal is refused before sending, and
    /// a name that resolves only to refused addresses never connects.
    #[tokio::test]
    async fn refused_addresses_receive_no_connection() {
        let l = match tokio::net::TcpListener::bind("127.0.0.2:0").await {
            Ok(l) => l,
            Err(_) => return, // no 127.0.0.2 on this host
        };
        let port = l.local_addr().unwrap().port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let a = accepted.clone();
        tokio::spawn(async move {
            while l.accept().await.is_ok() {
                a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let http = Http::build(
            Policy::new(vec![IpNet::parse("127.0.0.1/32").unwrap()]),
            Duration::from_secs(5),
        )
        .unwrap();
        let e = http
            .post(format!("http://127.0.0.2:{port}/token"))
            .send()
            .await
            .unwrap_err();
        assert!(e.is_refused(), "{e}");
        let e = http
            .get(format!("http://[::ffff:127.0.0.2]:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert!(e.is_refused(), "{e}");
        // `localhost` passes through the resolver: ::1 is not allowed, 127.0.0.1 is; the
        // listener on 127.0.0.2 is never among the addresses tried.
        let strict = Http::build(Policy::default(), Duration::from_secs(5)).unwrap();
        let e = strict
            .get(format!("http://localhost:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert!(e.is_refused(), "{e:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn the_resolver_refuses_a_name_with_only_blocked_addresses() {
        let r = GuardedResolver {
            policy: Arc::new(Policy::default()),
        };
        use reqwest::dns::Resolve;
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let e = match r.resolve(name).await {
            Ok(_) => panic!("localhost must be refused without an allow list"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("localhost") && e.contains("loopback"), "{e}");
        let r = GuardedResolver {
            policy: Arc::new(Policy::new(vec![IpNet::parse("127.0.0.0/8").unwrap()])),
        };
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let addrs: Vec<SocketAddr> = r.resolve(name).await.unwrap().collect();
        assert_eq!(addrs, vec![SocketAddr::from((Ipv4Addr::LOCALHOST, 0))]);
    }
}
