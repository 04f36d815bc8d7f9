//! The API client at the token endpoint, authenticated with HTTP Basic (`client_secret_basic`,
//! RFC 6749 §2.3.1): its `[[clients]] id` and API key. The key is found exactly as the bearer
//! key of `/v1` is (by its SHA-256, under the same limits), and must belong to the named id.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use base64::Engine;

use super::error::OAuthError;
use crate::AppState;
use crate::api::ApiClient;
use crate::crypto::sha256;
use crate::error::Error;

/// The authenticated API client (from `Authorization: Basic base64(id:key)`).
#[derive(Debug, Clone)]
pub struct BasicClient(pub ApiClient);

impl FromRequestParts<AppState> for BasicClient {
    type Rejection = OAuthError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, OAuthError> {
        let found = authenticate(parts, state);
        Ok(Self(ApiClient::admit(parts, state, found)?))
    }
}

fn authenticate(parts: &Parts, state: &AppState) -> Result<ApiClient, Error> {
    let (id, key) = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(credentials)
        .ok_or(Error::Unauthorized)?;
    // RFC 6749 says both parts are form-encoded first; clients that skip it send the key as is.
    // Try the decoded key, then the raw one: both are the same owner's key or nobody's.
    let candidates = [form_decoded(&key), Some(key.clone())];
    candidates
        .iter()
        .flatten()
        .filter(|k| !k.is_empty())
        .find_map(|k| state.clients.by_key_sha256(&sha256(k.as_bytes())))
        .filter(|c| c.id == id || form_decoded(&id).is_some_and(|d| c.id == d))
        .map(|c| ApiClient(c.clone()))
        .ok_or(Error::Unauthorized)
}

/// The id and key of a `Basic` credential, as sent.
pub fn credentials(value: &str) -> Option<(String, String)> {
    let (scheme, b64) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (id, key) = text.split_once(':')?;
    Some((id.to_owned(), key.to_owned()))
}

/// `application/x-www-form-urlencoded` decoding of one value (`+` is a space).
fn form_decoded(s: &str) -> Option<String> {
    let plus = s.replace('+', " ");
    percent_encoding::percent_decode_str(&plus)
        .decode_utf8()
        .ok()
        .map(|d| d.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_read_per_rfc_6749() {
        let enc = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert_eq!(
            credentials(&enc("demo-mcp:k:ey")),
            Some(("demo-mcp".into(), "k:ey".into()))
        );
        assert_eq!(
            credentials(&enc("a:b").replace("Basic", "basic")),
            Some(("a".into(), "b".into()))
        );
        assert_eq!(credentials(&enc("no-colon")), None);
        assert_eq!(credentials("Bearer abc"), None);
        assert_eq!(credentials("Basic !!!"), None);
        assert_eq!(form_decoded("a%2Bb+c").as_deref(), Some("a+b c"));
        assert_eq!(form_decoded("%FF"), None);
    }
}
