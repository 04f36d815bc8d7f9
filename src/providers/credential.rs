//! How a provider that is not OAuth (`auth = "api_key"` or `"basic"`) has its credential
//! presented: the header, its prefix, and the URL that checks a credential before it is stored.

use base64::Engine;
use url::Url;

use crate::config::{AuthKind, ProviderConfig};

/// What the connect page and the API need to know about a credential provider.
#[derive(Debug, Clone)]
pub struct CredentialSettings {
    pub kind: AuthKind,
    /// Where the user finds the key (shown under the input).
    pub hint: Option<String>,
    /// `api_key`: the header the key is presented in (default `Authorization`).
    pub header: String,
    /// `api_key`: written before the key in that header (default `Bearer ` for `Authorization`,
    /// nothing otherwise).
    pub prefix: String,
    /// Called with the credential (GET) before it is stored: 2xx accepts it, 401/403 refuses it.
    pub validation_url: Option<Url>,
}

impl CredentialSettings {
    /// `None` for OAuth providers.
    pub fn from_config(c: &ProviderConfig) -> Option<Self> {
        let kind = c.auth.unwrap_or_default();
        if kind == AuthKind::Oauth2 {
            return None;
        }
        let header = c
            .api_key_header
            .clone()
            .unwrap_or_else(|| "Authorization".into());
        let prefix = c.api_key_prefix.clone().unwrap_or_else(|| {
            if header.eq_ignore_ascii_case("authorization") {
                "Bearer ".into()
            } else {
                String::new()
            }
        });
        Some(Self {
            kind,
            hint: c.api_key_hint.clone(),
            header,
            prefix,
            validation_url: c.validation_url.clone(),
        })
    }

    /// The header name and value that present `secret` (the key, or `username:password`).
    pub fn header_for(&self, secret: &str) -> (String, String) {
        match self.kind {
            AuthKind::Basic => (
                "Authorization".into(),
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(secret.as_bytes())
                ),
            ),
            _ => (self.header.clone(), format!("{}{secret}", self.prefix)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_for_keys_and_basic() {
        let c: ProviderConfig = toml::from_str("auth = \"api_key\"").unwrap();
        let s = CredentialSettings::from_config(&c).unwrap();
        assert_eq!(
            s.header_for("k"),
            ("Authorization".into(), "Bearer k".into())
        );
        let c: ProviderConfig =
            toml::from_str("auth = \"api_key\"\napi_key_header = \"X-API-Key\"").unwrap();
        let s = CredentialSettings::from_config(&c).unwrap();
        assert_eq!(s.header_for("k"), ("X-API-Key".into(), "k".into()));
        let c: ProviderConfig = toml::from_str("auth = \"basic\"").unwrap();
        let s = CredentialSettings::from_config(&c).unwrap();
        assert_eq!(s.header_for("u:p").1, "Basic dTpw");
        let c: ProviderConfig = toml::from_str("client_id = \"x\"").unwrap();
        assert!(CredentialSettings::from_config(&c).is_none());
    }
}
