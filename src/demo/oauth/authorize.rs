//! The development servers' authorization requests: what a client may ask for, the checks
//! an authorization server owes it (redirect URI, PKCE, scopes), and the redirect back.

use super::*;

/// The query of an authorization request.
#[derive(Debug, Default, Deserialize)]
pub struct AuthorizeQuery {
    pub response_type: Option<String>,
    pub client_id: Option<String>,
    pub redirect_uri: Option<String>,
    pub scope: Option<String>,
    pub state: Option<String>,
    pub nonce: Option<String>,
    pub code_challenge: Option<String>,
    pub code_challenge_method: Option<String>,
    pub prompt: Option<String>,
}

/// A checked authorization request, waiting for the user.
#[derive(Debug, Clone)]
pub struct AuthRequest {
    pub redirect_uri: String,
    pub scopes: Vec<String>,
    pub state: Option<String>,
    pub nonce: Option<String>,
    pub code_challenge: String,
}

impl AuthRequest {
    /// A code's redemption against the request the code was issued for: the same redirect URI
    /// (RFC 6749 §4.1.3) and the verifier of its PKCE challenge (RFC 7636 §4.6).
    pub fn check_redemption(
        &self,
        redirect_uri: Option<&str>,
        code_verifier: Option<&str>,
    ) -> Result<(), OAuthError> {
        if redirect_uri != Some(self.redirect_uri.as_str()) {
            return Err(OAuthError::new(
                OAuthErrorCode::InvalidGrant,
                "redirect_uri does not match the authorization request",
            ));
        }
        let verifier = code_verifier.ok_or_else(|| {
            OAuthError::new(
                OAuthErrorCode::InvalidGrant,
                "code_verifier is required (PKCE)",
            )
        })?;
        if !pkce_matches(verifier, &self.code_challenge) {
            return Err(OAuthError::new(
                OAuthErrorCode::InvalidGrant,
                "PKCE verification failed",
            ));
        }
        Ok(())
    }
}

/// What an authorization server knows when it checks a request.
pub struct AuthorizePolicy<'a> {
    pub server: &'a DevServer,
    pub scopes_supported: &'a [&'a str],
    pub default_scopes: &'a [&'a str],
    pub require_openid: bool,
}

impl AuthorizePolicy<'_> {
    /// Checks an authorization request (RFC 6749 §4.1.1, RFC 7636). A bad client or redirect
    /// URI gets a page and no redirect (§4.1.2.1: never redirect to an unchecked URI); every
    /// other problem goes back to the client as `error=`. The refusal is the response to send.
    pub fn check(
        &self,
        q: Result<Query<AuthorizeQuery>, QueryRejection>,
    ) -> Result<AuthRequest, Box<Response>> {
        let page = |title: &str, message: &str| Box::new(self.server.error_page(title, message));
        let Ok(Query(q)) = q else {
            return Err(page(
                "Malformed request",
                "The authorization request could not be read.",
            ));
        };
        match q.client_id.as_deref() {
            Some(id) if id == self.server.client.client_id => {}
            Some(_) => {
                return Err(page(
                    "Unknown client",
                    "No application with this client_id is registered here.",
                ));
            }
            None => return Err(page("Missing client_id", "The request names no client.")),
        }
        let Some(redirect_uri) = q.redirect_uri.clone() else {
            return Err(page(
                "Missing redirect_uri",
                "The request names no redirect_uri.",
            ));
        };
        if redirect_uri != self.server.client.redirect_uri {
            return Err(page(
                "Unregistered redirect_uri",
                "The redirect_uri is not the one registered for this client (it must match exactly).",
            ));
        }
        let back = |error: OAuthErrorCode, description: &str| {
            Box::new(redirect_back(
                &redirect_uri,
                &[
                    ("error", error.as_str()),
                    ("error_description", description),
                ],
                q.state.as_deref(),
                &self.server.issuer,
            ))
        };
        if q.response_type.as_deref() != Some("code") {
            return Err(back(
                OAuthErrorCode::UnsupportedResponseType,
                "only response_type=code is supported",
            ));
        }
        // Nobody stays signed in here, so a sign-in without a page cannot happen; `login` and
        // `consent` are what every request gets anyway.
        if q.prompt
            .as_deref()
            .is_some_and(|p| p.split(' ').any(|x| x == "none"))
        {
            return Err(back(
                OAuthErrorCode::LoginRequired,
                "this server always asks the user",
            ));
        }
        let Some(code_challenge) = q.code_challenge.clone().filter(|c| !c.is_empty()) else {
            return Err(back(
                OAuthErrorCode::InvalidRequest,
                "PKCE is required: send code_challenge with code_challenge_method=S256",
            ));
        };
        if q.code_challenge_method.as_deref() != Some("S256") {
            return Err(back(
                OAuthErrorCode::InvalidRequest,
                "code_challenge_method must be S256",
            ));
        }
        if code_challenge.len() != 43
            || !code_challenge
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(back(
                OAuthErrorCode::InvalidRequest,
                "code_challenge must be a base64url SHA-256",
            ));
        }
        let mut scopes: Vec<String> = q
            .scope
            .as_deref()
            .unwrap_or_default()
            .split(' ')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        scopes.dedup();
        if scopes.is_empty() {
            scopes = self.default_scopes.iter().map(|s| s.to_string()).collect();
        }
        if let Some(bad) = scopes
            .iter()
            .find(|s| !self.scopes_supported.contains(&s.as_str()))
        {
            return Err(back(
                OAuthErrorCode::InvalidScope,
                &format!("unknown scope {bad}"),
            ));
        }
        if self.require_openid && !scopes.iter().any(|s| s == "openid") {
            return Err(back(
                OAuthErrorCode::InvalidScope,
                "the openid scope is required",
            ));
        }
        Ok(AuthRequest {
            redirect_uri,
            scopes,
            state: q.state,
            nonce: q.nonce,
            code_challenge,
        })
    }
}

/// The authorization response: back to the client with `params`, its `state`, and our `iss`
/// (RFC 9207).
pub fn redirect_back(
    redirect_uri: &str,
    params: &[(&str, &str)],
    state: Option<&str>,
    issuer: &str,
) -> Response {
    let Ok(mut url) = Url::parse(redirect_uri) else {
        return (StatusCode::BAD_REQUEST, "bad redirect_uri").into_response();
    };
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in params {
            q.append_pair(k, v);
        }
        if let Some(s) = state {
            q.append_pair("state", s);
        }
        q.append_pair("iss", issuer);
    }
    Redirect::to(url.as_str()).into_response()
}
