//! The proxy's path confinement: the part of `/v1/proxy/{provider}/{path}` after the provider,
//! as any caller sends it (still percent-encoded), and the query. `confine` either refuses it
//! or gives a path that, joined to an API base, stays below that base on the same origin; the
//! decoded form (what the allow-lists read) starts with `/` and has no dot segment. Also the
//! RFC 8707 `resource` matcher of the token exchange against API base templates: a match is
//! on the template's origin.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_connect::connect::proxy::target::{confine, join, serves};
use url::Url;

const BASES: &[&str] = &[
    "https://api.example.com",
    "https://api.example.com/base",
    "https://api.example.com/base/",
    "http://127.0.0.1:8080/api/v2",
];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (raw, query) = match text.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (&*text, None),
    };
    if let Ok(path) = confine(raw) {
        assert!(path.decoded.starts_with('/'), "{:?}", path.decoded);
        for seg in path.decoded.split('/') {
            assert!(seg != "." && seg != "..", "dot segment in {:?}", path.decoded);
        }
        for base in BASES {
            let base = Url::parse(base).unwrap();
            if let Ok(url) = join(&base, &path, query) {
                assert_eq!(url.origin(), base.origin(), "{url}");
                let prefix = base.path().trim_end_matches('/');
                assert!(url.path().starts_with(&format!("{prefix}/")), "{url} leaves {base}");
                // Parsing the result again changes nothing: no segment a server would resolve.
                assert_eq!(Url::parse(url.as_str()).unwrap(), url);
            }
        }
    }
    if let Ok(resource) = Url::parse(&text) {
        for (template, origin) in [
            ("https://api.github.com", "https://api.github.com"),
            ("https://slack.com/api", "https://slack.com"),
        ] {
            if serves(template, &resource) {
                assert_eq!(resource.origin().ascii_serialization(), origin, "{resource}");
            }
        }
        if serves("https://{shop}.myshopify.com/admin/api", &resource) {
            let host = resource.host_str().unwrap_or_default();
            assert!(host.ends_with(".myshopify.com"), "{resource}");
            assert_eq!(host.matches('.').count(), 2, "{resource}");
        }
        assert!(!serves("{instance_url}", &resource));
    }
});
