//! Where a proxied call goes: the provider's API base URL for one connection (its
//! `{placeholders}` filled from the connection's parameters and metadata, each checked), and the
//! caller's path confined below it. A path is taken as the caller sent it (still
//! percent-encoded) and refused, never repaired, when any segment could climb out of the base or
//! mean something else to the provider than to us: `.` and `..` (also percent-encoded, also
//! double-encoded), empty segments (`//`), backslashes, encoded `/` and `\`, control
//! characters, malformed escapes.

use std::collections::HashMap;

use url::Url;

use crate::config::catalog::{Entry, placeholders, safe_in_url};
use crate::db::connections::{ConnParams, Metadata};

/// A caller's path that stays below the base: as sent (to append) and decoded (for the
/// allow-lists; it starts with `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfinedPath {
    raw: String,
    pub decoded: String,
}

/// The longest path the proxy passes on.
const MAX_PATH: usize = 4096;

/// Checks `raw` (the part after `/v1/proxy/{provider}/`, as sent). `Err` says why, for a 400.
pub fn confine(raw: &str) -> Result<ConfinedPath, String> {
    if raw.len() > MAX_PATH {
        return Err(format!("the path is longer than {MAX_PATH} bytes"));
    }
    if raw.is_empty() {
        return Ok(ConfinedPath {
            raw: String::new(),
            decoded: "/".into(),
        });
    }
    let segments: Vec<&str> = raw.split('/').collect();
    let last = segments.len() - 1;
    let mut decoded = String::with_capacity(raw.len() + 1);
    for (i, seg) in segments.iter().enumerate() {
        decoded.push('/');
        // A trailing slash is the provider's business; an empty segment elsewhere is `//`.
        if seg.is_empty() && i == last {
            continue;
        }
        decoded.push_str(&segment(seg)?);
    }
    Ok(ConfinedPath {
        raw: raw.to_owned(),
        decoded,
    })
}

/// One segment, decoded, or why it is refused.
fn segment(seg: &str) -> Result<String, String> {
    if seg.is_empty() {
        return Err("the path has an empty segment (//)".into());
    }
    if seg.bytes().any(|b| b == b'\\') {
        return Err("the path has a backslash".into());
    }
    if seg.bytes().any(|b| b < 0x20 || b == 0x7f || b >= 0x80) {
        return Err("the path has control or unencoded non-ASCII characters".into());
    }
    let bytes = percent_decode(seg).ok_or("the path has a malformed percent-escape")?;
    let text = String::from_utf8(bytes).map_err(|_| "the path does not decode to UTF-8")?;
    if text == "." || text == ".." {
        return Err("the path has a . or .. segment (also percent-encoded)".into());
    }
    if text.contains('/') || text.contains('\\') {
        return Err("the path has a percent-encoded / or \\".into());
    }
    if text.chars().any(char::is_control) {
        return Err("the path has control characters".into());
    }
    // Decoded once more by a careless server, `%252e%252e` would be `..`.
    let lower = text.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c", "%25"]
        .iter()
        .any(|e| lower.contains(e))
    {
        return Err("the path has a double-encoded ., /, \\ or %".into());
    }
    Ok(text)
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            let hi = hex(*b.get(i + 1)?)?;
            let lo = hex(*b.get(i + 2)?)?;
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The API base URL of one connection: `template` with each `{name}` filled. A metadata value
/// at the very start stands for a whole origin (Salesforce `{instance_url}`) and must be one
/// (https off loopback, no credentials, path, query or fragment); any other value must be a
/// plain label (`catalog::safe_in_url`), parameters as their catalog entry checks them.
pub fn api_base(
    template: &str,
    entry: &Entry,
    params: &ConnParams,
    metadata: &Metadata,
    client_id: &str,
) -> Result<Url, String> {
    let mut filled = template.to_owned();
    for (i, ph) in placeholders(template).into_iter().enumerate() {
        let token = format!("{{{ph}}}");
        let value = match (entry.param(ph), metadata.get(ph).and_then(|v| v.as_str())) {
            (Some(_), _) => crate::providers::params::fill(&token, entry, params, client_id)
                .map_err(|e| format!("the API base URL cannot be made: {e}"))?,
            (None, Some(v)) if i == 0 && template.starts_with(&token) => {
                origin(v).ok_or_else(|| format!("the connection's {ph} is not an https origin"))?
            }
            (None, Some(v)) if safe_in_url(v) => v.to_owned(),
            (None, _) => {
                return Err(format!(
                    "the connection has no usable {ph} for the API base URL"
                ));
            }
        };
        filled = filled.replacen(&token, &value, 1);
    }
    checked_base(&filled)
}

/// A filled API base URL, parsed and held to what a base may be.
fn checked_base(filled: &str) -> Result<Url, String> {
    let url = Url::parse(filled).map_err(|_| "the API base URL is not a URL".to_owned())?;
    if !matches!(url.scheme(), "http" | "https")
        || !url.has_host()
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err("the API base URL is not an http(s) URL without query".into());
    }
    crate::config::require_https_off_loopback(&url).map_err(|m| format!("the API base URL {m}"))?;
    Ok(url)
}

/// Whether `resource` (an RFC 8707 resource indicator) names the API at `template`: the base
/// itself or a URL below it (on a segment boundary), each `{name}` standing for one URL-safe
/// label (`acme` in `https://{shop}.myshopify.com`). Scheme and host compare case-insensitively,
/// the path as written.
/// A template that starts with a placeholder (a whole origin from the connection, Salesforce
/// `{instance_url}`) names no URL in advance, so it matches none.
pub fn serves(template: &str, resource: &Url) -> bool {
    if template.starts_with('{') || resource.fragment().is_some() || resource.query().is_some() {
        return false;
    }
    // `Url` writes scheme and host in lower case; the template's origin may not be.
    let base = template.trim_end_matches('/');
    let origin_end = base
        .find("://")
        .map(|i| i + 3 + base[i + 3..].find('/').unwrap_or(base.len() - i - 3))
        .unwrap_or(0);
    let base = format!(
        "{}{}",
        base[..origin_end].to_ascii_lowercase(),
        &base[origin_end..]
    );
    let mut pieces = Vec::new();
    let mut rest = base.as_str();
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return false;
        };
        pieces.push(Piece::Literal(&rest[..open]));
        pieces.push(Piece::Label);
        rest = &rest[open + close + 1..];
    }
    pieces.push(Piece::Literal(rest));
    // `Url` writes a bare origin with a `/` path; the template may have none.
    let text = resource.as_str();
    let text = if resource.path() == "/" {
        text.trim_end_matches('/')
    } else {
        text
    };
    matches(&pieces, text)
}

/// A part of an API base template: text as written, or a `{placeholder}`.
enum Piece<'a> {
    Literal(&'a str),
    /// One URL-safe label (letters, digits, `-`, `_`).
    Label,
}

/// Whether `text` is the template `pieces` spell, or a URL below it (on a segment boundary).
fn matches(pieces: &[Piece<'_>], text: &str) -> bool {
    match pieces.split_first() {
        None => text.is_empty() || text.starts_with('/'),
        Some((Piece::Literal(l), rest)) => text.strip_prefix(l).is_some_and(|t| matches(rest, t)),
        Some((Piece::Label, rest)) => {
            let run = text
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
                .count();
            (1..=run).any(|i| matches(rest, &text[i..]))
        }
    }
}

/// `v` as a bare origin (`https://host[:port]`), if it is one.
fn origin(v: &str) -> Option<String> {
    let u = Url::parse(v).ok()?;
    let bare = matches!(u.scheme(), "http" | "https")
        && u.has_host()
        && u.username().is_empty()
        && u.password().is_none()
        && matches!(u.path(), "" | "/")
        && u.query().is_none()
        && u.fragment().is_none();
    bare.then(|| u.origin().ascii_serialization())
}

/// `path` (and the caller's query, as sent) below `base`. The result is checked to lie below
/// the base again, whatever the URL parser made of it.
pub fn join(base: &Url, path: &ConfinedPath, query: Option<&str>) -> Result<Url, String> {
    let prefix = base.path().trim_end_matches('/');
    let mut full = String::with_capacity(prefix.len() + 1 + path.raw.len());
    full.push_str(prefix);
    full.push('/');
    full.push_str(&path.raw);
    let mut url = base.clone();
    url.set_path(&full);
    url.set_query(query.filter(|q| !q.is_empty()));
    let below = url
        .path()
        .strip_prefix(prefix)
        .is_some_and(|rest| rest.starts_with('/'));
    // The base is http(s), whose origin is scheme, host and port.
    let same_origin = url.scheme() == base.scheme()
        && url.host() == base.host()
        && url.port_or_known_default() == base.port_or_known_default();
    if !same_origin || !below {
        return Err("the path leaves the provider's API base".into());
    }
    Ok(url)
}

/// The API base URLs that are the same for every connection (templates without
/// `{placeholders}`), parsed and checked once rather than on every proxied call.
#[derive(Debug)]
pub struct FixedBases(HashMap<String, Result<Url, String>>);

impl FixedBases {
    /// From each provider's name and API base template.
    pub fn of<'a>(templates: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self(
            templates
                .into_iter()
                .filter(|(_, template)| placeholders(template).is_empty())
                .map(|(name, template)| (name.to_owned(), checked_base(template)))
                .collect(),
        )
    }

    /// The provider's base when it is fixed (`Err`: why it cannot be used); `None` when it
    /// depends on the connection.
    pub fn get(&self, provider: &str) -> Option<&Result<Url, String>> {
        self.0.get(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_could_leave_the_base_are_refused() {
        for bad in [
            "..",
            "a/../b",
            "a/./b",
            ".",
            "a//b",
            "/a",
            "%2e%2e/x",
            "%2E%2E",
            ".%2e",
            "a%2fb",
            "a%2Fb",
            "a%5cb",
            "a\\b",
            "%252e%252e/x",
            "a%252fb",
            "a%00b",
            "a%0d%0ab",
            "a%zz",
            "a%2",
            "a%ff",
        ] {
            assert!(confine(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn ordinary_paths_pass_as_sent() {
        let p = confine("repos/o/r/issues").unwrap();
        assert_eq!(p.decoded, "/repos/o/r/issues");
        let p = confine("files/a%20b.txt/").unwrap();
        assert_eq!(p.decoded, "/files/a b.txt/");
        assert_eq!(confine("").unwrap().decoded, "/");
        let base = Url::parse("https://slack.com/api").unwrap();
        let u = join(&base, &confine("chat.postMessage").unwrap(), Some("x=1")).unwrap();
        assert_eq!(u.as_str(), "https://slack.com/api/chat.postMessage?x=1");
        let base = Url::parse("https://api.github.com").unwrap();
        let u = join(&base, &confine("user").unwrap(), None).unwrap();
        assert_eq!(u.as_str(), "https://api.github.com/user");
        let u = join(&base, &confine("a%20b").unwrap(), None).unwrap();
        assert_eq!(u.as_str(), "https://api.github.com/a%20b");
    }

    #[test]
    fn a_resource_names_the_api_at_its_base_or_below() {
        let url = |s: &str| Url::parse(s).unwrap();
        let gh = "https://api.github.com";
        assert!(serves(gh, &url("https://api.github.com")));
        assert!(serves(gh, &url("HTTPS://API.GitHub.com/")));
        assert!(serves(gh, &url("https://api.github.com/user")));
        assert!(!serves(gh, &url("https://api.github.com.evil.test/")));
        assert!(!serves(gh, &url("https://api.github.com?x=1")));
        assert!(!serves(gh, &url("http://api.github.com")));
        let slack = "https://slack.com/api/";
        assert!(serves(slack, &url("https://slack.com/api")));
        assert!(serves(
            slack,
            &url("https://slack.com/api/chat.postMessage")
        ));
        assert!(!serves(slack, &url("https://slack.com/apix")));
        assert!(!serves(slack, &url("https://slack.com/")));
        let shop = "https://{shop}.myshopify.com/admin/api";
        assert!(serves(shop, &url("https://acme.myshopify.com/admin/api")));
        assert!(!serves(shop, &url("https://a.b.myshopify.com/admin/api")));
        assert!(!serves(shop, &url("https://myshopify.com/admin/api")));
        assert!(!serves(shop, &url("https://acme.myshopify.com/admin/API")));
        assert!(serves(
            "https://API.GitHub.com/",
            &url("https://api.github.com/user")
        ));
        assert!(serves("https://{a}-{b}.test", &url("https://x-y-z.test")));
        assert!(!serves(
            "{instance_url}",
            &url("https://acme.my.salesforce.com")
        ));
    }

    #[test]
    fn metadata_origins_and_parameters_fill_the_base() {
        let sf = crate::config::catalog::lookup("salesforce").unwrap();
        let mut meta = Metadata::new();
        meta.insert(
            "instance_url".into(),
            serde_json::json!("https://acme.my.salesforce.com"),
        );
        let u = api_base("{instance_url}", sf, &ConnParams::new(), &meta, "c").unwrap();
        assert_eq!(u.as_str(), "https://acme.my.salesforce.com/");
        for evil in [
            "https://user@evil.test",
            "https://acme.my.salesforce.com/x",
            "http://acme.my.salesforce.com",
            "javascript:alert(1)",
        ] {
            meta.insert("instance_url".into(), serde_json::json!(evil));
            assert!(
                api_base("{instance_url}", sf, &ConnParams::new(), &meta, "c").is_err(),
                "{evil}"
            );
        }
        let shop = crate::config::catalog::lookup("shopify").unwrap();
        let mut params = ConnParams::new();
        params.insert("shop".into(), "acme".into());
        let u = api_base(
            "https://{shop}.myshopify.com/admin/api",
            shop,
            &params,
            &Metadata::new(),
            "c",
        )
        .unwrap();
        assert_eq!(u.as_str(), "https://acme.myshopify.com/admin/api");
    }

    /// A fixed base is what `api_base` makes of the same template, taken once; one with
    /// placeholders is left to each connection.
    #[test]
    fn fixed_bases_are_what_each_call_would_make() {
        let gh = crate::config::catalog::lookup("github").unwrap();
        let templates = [
            ("github", "https://api.github.com"),
            ("plain", "http://api.example.com/v2"),
            ("local", "http://127.0.0.1:9/api"),
            ("junk", "not a url"),
            ("shop", "https://{shop}.myshopify.com/admin/api"),
        ];
        let fixed = FixedBases::of(templates);
        for (name, template) in &templates[..4] {
            let each_call = api_base(template, gh, &ConnParams::new(), &Metadata::new(), "c");
            assert_eq!(fixed.get(name), Some(&each_call), "{name}");
        }
        assert!(fixed.get("github").unwrap().is_ok());
        assert!(fixed.get("plain").unwrap().is_err());
        assert_eq!(fixed.get("shop"), None);
        assert_eq!(fixed.get("unknown"), None);
    }
}
