//! Credentials that are not OAuth: providers with `auth = "api_key"` or `"basic"`. After the same
//! sign-in and subject check as an OAuth connect, the connect page asks for the key (or username
//! and password), optionally checks it against `validation_url` (through the SSRF guard), and
//! stores it sealed like a token (in the connection's `access_token` column, AAD bound to the
//! row; `token_type` says which kind it is). `POST /v1/tokens` hands it back with its type and the
//! header to present it in. It never travels in a URL and is never logged.

use secrecy::{ExposeSecret, SecretString};

use crate::config::AuthKind;
use crate::providers::credential::CredentialSettings;

/// The longest key, username or password accepted.
pub const MAX_LEN: usize = 4096;

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
