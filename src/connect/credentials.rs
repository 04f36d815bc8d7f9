//! Credentials that are not OAuth: providers with `auth = "api_key"` or `"basic"`. After the same
//! sign-in and subject check as an OAuth connect, the connect page asks for the key (or username
//! and password), optionally checks it against `validation_url` (through the SSRF guard), and
//! stores it sealed like a token (in the connection's `access_token` column, AAD bound to the
//! row; `token_type` says which kind it is). `POST /v1/tokens` hands it back with its type and the
//! header to present it in. It never travels in a URL and is never logged.

use base64::Engine;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use url::Url;

use crate::config::ProviderConfig;

/// How a provider is connected. Configured as `auth = "oauth2"` (the default), `"api_key"` or
/// `"basic"`; any other value is refused by the config loader, naming the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthKind {
    #[default]
    Oauth2,
    ApiKey,
    Basic,
}

impl AuthKind {
    /// The `token_type` stored with the connection and the `credential_type` of the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Oauth2 => "oauth2",
            Self::ApiKey => "api_key",
            Self::Basic => "basic",
        }
    }
}

/// Whether a stored connection's `token_type` is a non-OAuth credential (never refreshed).
pub fn is_credential_type(token_type: &str) -> bool {
    token_type == "api_key" || token_type == "basic"
}

/// The longest key, username or password accepted.
pub const MAX_LEN: usize = 4096;

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

/// Checks a typed value: present, not too long, no control characters. Returns it trimmed.
pub fn clean(value: Option<&str>, what: &str) -> Result<String, String> {
    let v = value.map(str::trim).unwrap_or_default();
    if v.is_empty() {
        return Err(format!("Enter the {what}."));
    }
    if v.len() > MAX_LEN {
        return Err(format!(
            "The {what} is too long (at most {MAX_LEN} characters)."
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(format!(
            "The {what} contains characters that cannot be in it."
        ));
    }
    Ok(v.to_owned())
}

/// The value to store for what the user typed: the key, or `username:password` (RFC 7617: a
/// username cannot contain a colon).
pub fn secret_from_form(
    kind: AuthKind,
    api_key: Option<&SecretString>,
    username: Option<&str>,
    password: Option<&SecretString>,
) -> Result<SecretString, String> {
    match kind {
        AuthKind::Basic => {
            let user = clean(username, "username")?;
            if user.contains(':') {
                return Err("A username cannot contain a colon (:).".into());
            }
            let pass = clean(password.map(|p| p.expose_secret()), "password")?;
            Ok(SecretString::from(format!("{user}:{pass}")))
        }
        _ => Ok(SecretString::from(clean(
            api_key.map(|k| k.expose_secret()),
            "API key",
        )?)),
    }
}

/// Why a credential was not stored after the validation call.
#[derive(Debug)]
pub enum Validation {
    /// The provider refused it (HTTP status).
    Rejected(u16),
    /// The provider could not be asked (the reason, safe to show: no credential in it).
    Unavailable(String),
}

/// Calls `validation_url` with the credential, if one is configured.
pub async fn validate(
    http: &crate::outbound::Http,
    settings: &CredentialSettings,
    secret: &SecretString,
) -> Result<(), Validation> {
    let Some(url) = &settings.validation_url else {
        return Ok(());
    };
    let (name, value) = settings.header_for(secret.expose_secret());
    let resp = http
        .get(url.clone())
        .header(name.as_str(), value.as_str())
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| Validation::Unavailable(e.without_url()))?;
    let status = resp.status();
    if status.is_success() {
        Ok(())
    } else if status == reqwest::StatusCode::UNAUTHORIZED
        || status == reqwest::StatusCode::FORBIDDEN
    {
        Err(Validation::Rejected(status.as_u16()))
    } else {
        Err(Validation::Unavailable(format!(
            "the check answered HTTP {}",
            status.as_u16()
        )))
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

    #[test]
    fn typed_values_are_checked() {
        let k = SecretString::from(" key-1 ".to_owned());
        let s = secret_from_form(AuthKind::ApiKey, Some(&k), None, None).unwrap();
        assert_eq!(s.expose_secret(), "key-1");
        assert!(secret_from_form(AuthKind::ApiKey, None, None, None).is_err());
        let bad = SecretString::from("a\nb".to_owned());
        assert!(secret_from_form(AuthKind::ApiKey, Some(&bad), None, None).is_err());
        let p = SecretString::from("pw".to_owned());
        let s = secret_from_form(AuthKind::Basic, None, Some("u"), Some(&p)).unwrap();
        assert_eq!(s.expose_secret(), "u:pw");
        assert!(secret_from_form(AuthKind::Basic, None, Some("u:x"), Some(&p)).is_err());
        assert!(secret_from_form(AuthKind::Basic, None, Some("u"), None).is_err());
    }
}
