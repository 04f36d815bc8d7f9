//! The SSRF guard's address rules: which addresses an outbound call may reach (none in a
//! blocked class unless `outbound_allow_cidrs` lists it), and how a URL is shown in a refusal.
//! Pure functions of an address or URL: the config loader checks every URL known at start-up
//! against them, and the guard in `outbound/` applies them to every call and resolved name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use url::Url;

use super::IpNet;

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

pub(crate) fn is_localhost(d: &str) -> bool {
    let d = d.trim_end_matches('.').to_ascii_lowercase();
    d == "localhost" || d.ends_with(".localhost")
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
}
