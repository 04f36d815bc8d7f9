//! The network rules of the file: plain http only on loopback, and `outbound_allow_cidrs`, the
//! ranges the SSRF guard lets outbound calls reach although their class is refused. Every URL
//! this service will call that is known at load is checked against the guard here.

use url::Url;

use super::{Report, Section};

/// An address range such as `10.0.0.0/8` or `fd00::/8` (a bare address is a single host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl IpNet {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: std::net::IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an address or a range like 10.0.0.0/8"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| format!("{s:?} has a bad prefix length"))?,
        };
        Ok(Self { addr, prefix })
    }

    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Whether `url`'s host is loopback: `localhost`, 127.0.0.0/8 or ::1.
pub fn is_loopback_url(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

/// Plain http is only for loopback (development, the demo, tests): anywhere else tokens, codes,
/// ID-token keys and cookies would cross the network in clear.
pub fn require_https_off_loopback(url: &Url) -> Result<(), String> {
    if url.scheme() == "https" || (url.scheme() == "http" && is_loopback_url(url)) {
        return Ok(());
    }
    if url.scheme() == "http" {
        // The host only: a URL may carry credentials.
        return Err(format!(
            "must be https: plain http is only allowed on loopback (localhost, 127.0.0.0/8, ::1), and {} is not",
            url.host_str().unwrap_or("(no host)")
        ));
    }
    Err(format!("must be an https URL, not {:?}", url.scheme()))
}

/// `outbound_allow_cidrs`: the SSRF guard's policy.
pub(super) fn read(t: &mut Section, r: &mut Report) -> super::ssrf::Policy {
    let mut outbound = super::ssrf::Policy::default();
    for c in t.get::<Vec<String>>(r, "outbound_allow_cidrs") {
        match IpNet::parse(&c) {
            Ok(n) if n.prefix < if n.addr.is_ipv4() { 8 } else { 16 } => r.err(
                "outbound_allow_cidrs",
                format!("{c:?} is too wide: list only the ranges your on-premises peers use"),
            ),
            Ok(n) => outbound.allow.push(n),
            Err(m) => r.err("outbound_allow_cidrs", m),
        }
    }
    outbound
}

/// Every URL we call that is known now, against the SSRF guard's address rules.
pub(super) fn check_called(outbound: &super::ssrf::Policy, r: &mut Report) {
    for (key, url) in std::mem::take(&mut r.called) {
        if let Err(m) = outbound.check_host(&url) {
            r.err(
                key,
                format!(
                    "{} is refused by the SSRF guard: {m}",
                    super::ssrf::shown_url(&url)
                ),
            );
        }
    }
}
