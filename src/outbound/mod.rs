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

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::config::IpNet;

/// Which ranges may be called although their class is blocked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub allow: Vec<IpNet>,
}

/// Why an address is not called: the class it falls in, as a rule an operator can look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub rule: String,
}

/// A refused outbound call, naming the URL (without credentials or query) and the rule.
#[derive(Debug, Clone, thiserror::Error)]
#[error("refused to call {url}: {reason}")]
pub struct Refusal {
    pub url: String,
    pub reason: String,
}

/// The URL as it may be shown: scheme, host, port and path; no user information, query or
/// fragment (they may carry secrets).
pub fn shown_url(url: &Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

fn v4_in(a: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    u32::from(a) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn v6_in(a: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
    u128::from(a) & mask == u128::from(net) & mask
}

/// The blocked class of an IPv4 address, if any.
fn classify_v4(a: Ipv4Addr) -> Option<&'static str> {
    const RULES: &[([u8; 4], u32, &str)] = &[
        (
            [0, 0, 0, 0],
            8,
            "unspecified / \"this network\" (0.0.0.0/8)",
        ),
        ([127, 0, 0, 0], 8, "loopback (127.0.0.0/8)"),
        ([10, 0, 0, 0], 8, "private (10.0.0.0/8)"),
        ([172, 16, 0, 0], 12, "private (172.16.0.0/12)"),
        ([192, 168, 0, 0], 16, "private (192.168.0.0/16)"),
        (
            [169, 254, 0, 0],
            16,
            "link-local / cloud metadata (169.254.0.0/16)",
        ),
        ([100, 64, 0, 0], 10, "carrier-grade NAT (100.64.0.0/10)"),
        (
            [192, 0, 0, 0],
            24,
            "IETF protocol assignments (192.0.0.0/24)",
        ),
        ([192, 0, 2, 0], 24, "documentation (192.0.2.0/24)"),
        ([198, 18, 0, 0], 15, "benchmarking (198.18.0.0/15)"),
        ([198, 51, 100, 0], 24, "documentation (198.51.100.0/24)"),
        ([203, 0, 113, 0], 24, "documentation (203.0.113.0/24)"),
        ([224, 0, 0, 0], 4, "multicast (224.0.0.0/4)"),
        ([240, 0, 0, 0], 4, "reserved / broadcast (240.0.0.0/4)"),
    ];
    RULES
        .iter()
        .find(|(net, p, _)| v4_in(a, *net, *p))
        .map(|(_, _, r)| *r)
}

/// The IPv4 address an IPv6 address stands for, with the form's name: IPv4-mapped, IPv4-compatible,
/// NAT64 (well-known and local-use prefixes) and 6to4.
fn embedded_v4(a: Ipv6Addr) -> Option<(Ipv4Addr, &'static str)> {
    let o = a.octets();
    let last4 = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if let Some(v4) = a.to_ipv4_mapped() {
        return Some((v4, "IPv4-mapped"));
    }
    if v6_in(a, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        return Some((last4, "NAT64 (64:ff9b::/96)"));
    }
    if v6_in(a, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        return Some((last4, "local-use NAT64 (64:ff9b:1::/48)"));
    }
    if v6_in(a, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        return Some((Ipv4Addr::new(o[2], o[3], o[4], o[5]), "6to4 (2002::/16)"));
    }
    // IPv4-compatible (::a.b.c.d, deprecated); :: and ::1 are classified on their own.
    if v6_in(a, Ipv6Addr::UNSPECIFIED, 96) && u128::from(a) > 1 {
        return Some((last4, "IPv4-compatible (::/96)"));
    }
    None
}

fn classify_v6(a: Ipv6Addr) -> Option<&'static str> {
    if a.is_unspecified() {
        return Some("unspecified (::)");
    }
    if a.is_loopback() {
        return Some("loopback (::1)");
    }
    const RULES: &[(u16, u32, &str)] = &[
        (0xfe80, 10, "link-local (fe80::/10)"),
        (0xfec0, 10, "site-local (fec0::/10)"),
        (0xfc00, 7, "unique local (fc00::/7)"),
        (0xff00, 8, "multicast (ff00::/8)"),
    ];
    for (first, p, r) in RULES {
        if v6_in(a, Ipv6Addr::new(*first, 0, 0, 0, 0, 0, 0, 0), *p) {
            return Some(r);
        }
    }
    if v6_in(a, Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32) {
        return Some("documentation (2001:db8::/32)");
    }
    if v6_in(a, Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64) {
        return Some("discard-only (100::/64)");
    }
    // Teredo carries an obfuscated IPv4 address anyone can choose: refuse the whole prefix.
    if v6_in(a, Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32) {
        return Some("Teredo (2001::/32)");
    }
    None
}

/// Whether an address is in a class outbound calls may not reach, and which.
pub fn classify(ip: IpAddr) -> Option<Blocked> {
    match ip {
        IpAddr::V4(a) => classify_v4(a).map(|r| Blocked { rule: r.to_owned() }),
        IpAddr::V6(a) => {
            if let Some((v4, form)) = embedded_v4(a) {
                // Every form carrying a blocked IPv4 address is blocked as that address.
                return classify_v4(v4).map(|r| Blocked {
                    rule: format!("{form} form of {v4}, {r}"),
                });
            }
            classify_v6(a).map(|r| Blocked { rule: r.to_owned() })
        }
    }
}

impl Policy {
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self { allow }
    }

    fn allowed(&self, ip: IpAddr) -> bool {
        if self.allow.iter().any(|n| n.contains(ip)) {
            return true;
        }
        match ip {
            IpAddr::V6(a) => embedded_v4(a)
                .is_some_and(|(v4, _)| self.allow.iter().any(|n| n.contains(IpAddr::V4(v4)))),
            IpAddr::V4(_) => false,
        }
    }

    /// `Ok` when `ip` may be called, or the rule that refuses it.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), String> {
        match classify(ip) {
            Some(_) if self.allowed(ip) => Ok(()),
            Some(b) => Err(format!(
                "{ip} is {}; outbound_allow_cidrs does not include it",
                b.rule
            )),
            None => Ok(()),
        }
    }

    /// What can be checked without resolving: the scheme (https, or http on loopback), and the
    /// host when it is an address or `localhost`.
    pub fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        let refuse = |reason: String| Refusal {
            url: shown_url(url),
            reason,
        };
        crate::config::require_https_off_loopback(url).map_err(refuse)?;
        self.check_host(url).map_err(refuse)
    }

    /// The host alone, when it can be checked without resolving: an address, or `localhost`.
    /// Other names are checked by the resolver when they are resolved.
    pub fn check_host(&self, url: &Url) -> Result<(), String> {
        let ips: Vec<IpAddr> = match url.host() {
            Some(url::Host::Ipv4(a)) => vec![a.into()],
            Some(url::Host::Ipv6(a)) => vec![a.into()],
            Some(url::Host::Domain(d)) if is_localhost(d) => {
                vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()]
            }
            Some(url::Host::Domain(_)) => return Ok(()),
            None => return Err("it has no host".into()),
        };
        // `localhost` passes when either of its addresses may be called (the resolver then
        // connects only to that one).
        let mut why = None;
        for ip in ips {
            match self.check_ip(ip) {
                Ok(()) => return Ok(()),
                Err(m) => why = why.or(Some(m)),
            }
        }
        Err(why.unwrap_or_default())
    }

    /// The addresses of `addrs` that may be called, or why none may.
    pub fn filter(
        &self,
        host: &str,
        addrs: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, String> {
        let mut ok = Vec::new();
        let mut refused = Vec::new();
        for a in addrs {
            match self.check_ip(a.ip()) {
                Ok(()) => ok.push(a),
                Err(m) => refused.push(m),
            }
        }
        if ok.is_empty() {
            if refused.is_empty() {
                return Err(format!("{host} has no address"));
            }
            return Err(format!(
                "{host} resolves only to refused addresses: {}",
                refused.join("; ")
            ));
        }
        Ok(ok)
    }
}

fn is_localhost(d: &str) -> bool {
    let d = d.trim_end_matches('.').to_ascii_lowercase();
    d == "localhost" || d.ends_with(".localhost")
}

/// Resolves names and hands reqwest only the addresses the policy allows.
struct GuardedResolver {
    policy: Arc<Policy>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> = if is_localhost(&host) {
                // RFC 6761: never ask DNS about localhost.
                vec![
                    SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                    SocketAddr::from((Ipv6Addr::LOCALHOST, 0)),
                ]
            } else {
                tokio::net::lookup_host((host.as_str(), 0))
                    .await
                    .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> {
                        Box::new(std::io::Error::other(format!("resolving {host}: {e}")))
                    })?
                    .collect()
            };
            let ok = policy.filter(&host, found).map_err(
                |m| -> Box<dyn std::error::Error + Send + Sync> {
                    Box::new(GuardError(format!("SSRF guard: {m}")))
                },
            )?;
            let addrs: reqwest::dns::Addrs = Box::new(ok.into_iter());
            Ok(addrs)
        })
    }
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
        <reqwest::header::HeaderName as TryFrom<K>>::Error: Into<axum::http::Error>,
        reqwest::header::HeaderValue: TryFrom<V>,
        <reqwest::header::HeaderValue as TryFrom<V>>::Error: Into<axum::http::Error>,
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

    /// Checks the URL (scheme; the address when the host is one), then sends. Names are checked
    /// by the resolver as they are resolved.
    ///
    /// Each call runs in an `outbound` span (debug level: free when not enabled) naming the
    /// method and host, never the path or query, which can carry codes; operators see slow peers
    /// with `RUST_LOG=mcp_connect::outbound=debug` and a span-timing subscriber, and the
    /// connect-flow benchmark subtracts these spans from the request time to get server time.
    pub async fn send(self) -> Result<reqwest::Response, SendError> {
        use tracing::Instrument as _;
        let req = self.inner.build()?;
        self.policy.check_url(req.url())?;
        let span = tracing::debug_span!(
            "outbound",
            method = %req.method(),
            host = req.url().host_str().unwrap_or(""),
        );
        Ok(self.client.execute(req).instrument(span).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn address_classes() {
        for (a, rule) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.2", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "metadata"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.255", "carrier-grade NAT"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "this network"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::1", "link-local"),
            ("fc00::1", "unique local"),
            ("fd12:3456::1", "unique local"),
            ("ff02::1", "multicast"),
            (
                "::ffff:127.0.0.1",
                "IPv4-mapped form of 127.0.0.1, loopback",
            ),
            ("::ffff:169.254.169.254", "metadata"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::7f00:1", "NAT64 (64:ff9b::/96) form of 127.0.0.1"),
            ("64:ff9b::a9fe:a9fe", "link-local / cloud metadata"),
            ("64:ff9b:1::a00:1", "local-use NAT64"),
            ("2002:7f00:1::", "6to4 (2002::/16) form of 127.0.0.1"),
            ("2002:a9fe:a9fe::1", "metadata"),
            ("2002:c0a8:101::", "192.168.1.1, private"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("2001::1", "Teredo"),
            ("2001:db8::1", "documentation"),
        ] {
            let b = classify(ip(a)).unwrap_or_else(|| panic!("{a} should be blocked"));
            assert!(b.rule.contains(rule), "{a}: {} lacks {rule}", b.rule);
        }
        for a in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "169.255.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::",
        ] {
            assert_eq!(classify(ip(a)), None, "{a} should pass");
        }
    }

    #[test]
    fn the_allow_list_is_narrow() {
        let p = Policy::new(vec![IpNet::parse("127.0.0.1/32").unwrap()]);
        assert!(p.check_ip(ip("127.0.0.1")).is_ok());
        assert!(p.check_ip(ip("::ffff:127.0.0.1")).is_ok());
        let e = p.check_ip(ip("127.0.0.2")).unwrap_err();
        assert!(
            e.contains("127.0.0.2") && e.contains("loopback") && e.contains("outbound_allow_cidrs"),
            "{e}"
        );
        assert!(p.check_ip(ip("::1")).is_err());
        assert!(p.check_ip(ip("10.0.0.1")).is_err());
        assert!(p.check_ip(ip("8.8.8.8")).is_ok());
        let none = Policy::default();
        assert!(none.check_ip(ip("127.0.0.1")).is_err());
    }

    #[test]
    fn urls_are_checked_by_scheme_and_literal_address() {
        let p = Policy::new(vec![IpNet::parse("127.0.0.1/32").unwrap()]);
        let u = |s: &str| Url::parse(s).unwrap();
        assert!(p.check_url(&u("http://127.0.0.1:8080/token")).is_ok());
        assert!(p.check_url(&u("http://localhost:8080/token")).is_ok());
        assert!(p.check_url(&u("https://idp.example.com/token")).is_ok());
        let e = p
            .check_url(&u("http://127.0.0.2:8080/token?code=secret"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("http://127.0.0.2:8080/token") && e.contains("loopback"),
            "{e}"
        );
        assert!(!e.contains("secret"), "{e}");
        let e = p
            .check_url(&u("https://169.254.169.254/latest/meta-data"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("metadata"), "{e}");
        let e = p
            .check_url(&u("https://[::ffff:a9fe:a9fe]/"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("metadata"), "{e}");
        let e = p
            .check_url(&u("http://idp.example.com/token"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be https"), "{e}");
        let e = Policy::default()
            .check_url(&u("http://localhost:8080/"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("loopback"), "{e}");
    }

    #[test]
    fn resolved_addresses_are_filtered() {
        let p = Policy::new(vec![IpNet::parse("127.0.0.1/32").unwrap()]);
        let sa = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let ok = p
            .filter("h", [sa("127.0.0.1:0"), sa("[::1]:0"), sa("8.8.8.8:0")])
            .unwrap();
        assert_eq!(ok, vec![sa("127.0.0.1:0"), sa("8.8.8.8:0")]);
        let e = p
            .filter(
                "rebind.example",
                [sa("10.0.0.1:0"), sa("169.254.169.254:0")],
            )
            .unwrap_err();
        assert!(
            e.contains("rebind.example") && e.contains("private") && e.contains("metadata"),
            "{e}"
        );
    }

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
