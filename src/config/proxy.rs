//! What the proxy (`/v1/proxy/{provider}/{path}`) lets through: per provider
//! (`[providers.NAME.proxy]`) and per client (`[clients.proxy.NAME]`), allow-lists of path
//! prefixes and methods, and whether a client may hold provider tokens at all
//! (`[[clients]] token_access`).

use serde::Deserialize;

use super::Report;

/// Whether an API client receives provider tokens (`[[clients]] token_access`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenAccess {
    /// `/v1/tokens`, `/oauth2/token` and the proxy.
    #[default]
    Token,
    /// The proxy only: this client never sees a provider token.
    Proxy,
}

/// An allow-list as written: path prefixes (relative to the provider's API base, starting with
/// `/`) and methods. Empty lists allow everything.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProxyRules {
    #[serde(default)]
    pub paths: Vec<String>,
    #[serde(default)]
    pub methods: Vec<String>,
}

impl ProxyRules {
    /// Whether `method` is allowed (`methods` empty: any).
    pub fn allows_method(&self, method: &str) -> bool {
        self.methods.is_empty() || self.methods.iter().any(|m| m == method)
    }

    /// Whether `path` (decoded, starting with `/`) lies under an allowed prefix (`paths` empty:
    /// any). A prefix matches whole segments: `/repos` allows `/repos` and `/repos/x`, never
    /// `/repositories`; a prefix ending in `/` allows only what lies below it.
    pub fn allows_path(&self, path: &str) -> bool {
        self.paths.is_empty()
            || self.paths.iter().any(|p| {
                path == p
                    || (path.starts_with(p.as_str())
                        && (p.ends_with('/') || path.as_bytes().get(p.len()) == Some(&b'/')))
            })
    }

    /// Reports what does not make sense, under `key`.
    pub(super) fn check(&self, key: &str, r: &mut Report) {
        for p in &self.paths {
            let bad = !p.starts_with('/')
                || p.contains("//")
                || p.contains('\\')
                || p.contains('%')
                || p.contains('?')
                || p.contains('#')
                || p.chars().any(char::is_control)
                || p.split('/').any(|s| s == "." || s == "..");
            if bad {
                r.err(
                    format!("{key}.paths"),
                    format!(
                        "{p:?} must be a path prefix starting with /, without //, . or .. segments, %, ?, # or backslashes"
                    ),
                );
            }
        }
        for m in &self.methods {
            if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
                r.err(
                    format!("{key}.methods"),
                    format!("{m:?} must be an HTTP method in capitals (GET, POST, ...)"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_whole_segments() {
        let r = ProxyRules {
            paths: vec!["/repos".into(), "/user/".into()],
            methods: vec![],
        };
        assert!(r.allows_path("/repos"));
        assert!(r.allows_path("/repos/a/b"));
        assert!(!r.allows_path("/repositories"));
        assert!(r.allows_path("/user/x"));
        assert!(r.allows_path("/user/"));
        assert!(!r.allows_path("/user"));
        assert!(!r.allows_path("/users"));
        assert!(ProxyRules::default().allows_path("/anything"));
        assert!(ProxyRules::default().allows_method("DELETE"));
    }
}
