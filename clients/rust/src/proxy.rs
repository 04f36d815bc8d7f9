//! The proxy (`/v1/proxy/{provider}/{path}`): call the provider's API through mcp-connect,
//! which adds the user's token; this server never holds it. With `token_access = "proxy"` on
//! its `[[clients]]` entry, the proxy is the only way this client reaches a provider.

use crate::{ApiError, Client, Error};

/// Who the call is for.
#[derive(Clone)]
enum Who {
    /// The user's MCP access token (proof of subject).
    SubjectToken(String),
    /// The user's `sub`, for clients allowed to name it.
    Subject(String),
}

/// One call to a provider's API, made through the proxy.
pub struct ProxyRequest {
    method: reqwest::Method,
    provider: String,
    path: String,
    who: Who,
    account: Option<String>,
    headers: reqwest::header::HeaderMap,
    body: Option<reqwest::Body>,
}

impl std::fmt::Debug for ProxyRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyRequest")
            .field("method", &self.method)
            .field("provider", &self.provider)
            .field("path", &self.path)
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

impl ProxyRequest {
    /// `method` on `path` (below the provider's API base, with any query:
    /// `"repos/o/r/issues?state=open"`) for the user whose MCP access token is `subject_token`.
    pub fn new(
        method: reqwest::Method,
        provider: impl Into<String>,
        path: impl Into<String>,
        subject_token: impl Into<String>,
    ) -> Self {
        Self {
            method,
            provider: provider.into(),
            path: path.into(),
            who: Who::SubjectToken(subject_token.into()),
            account: None,
            headers: Default::default(),
            body: None,
        }
    }

    /// For a client allowed to name the subject: `subject` instead of a token.
    pub fn for_subject(
        method: reqwest::Method,
        provider: impl Into<String>,
        path: impl Into<String>,
        subject: impl Into<String>,
    ) -> Self {
        Self {
            who: Who::Subject(subject.into()),
            ..Self::new(method, provider, path, String::new())
        }
    }

    /// Which of the user's accounts at the provider (its id or label).
    pub fn account(mut self, account: impl Into<String>) -> Self {
        self.account = Some(account.into());
        self
    }

    /// A header for the provider (`Authorization`, cookies and hop-by-hop headers are dropped
    /// by the proxy).
    pub fn header(
        mut self,
        name: reqwest::header::HeaderName,
        value: reqwest::header::HeaderValue,
    ) -> Self {
        self.headers.append(name, value);
        self
    }

    /// The request body (streamed when it is a stream).
    pub fn body(mut self, body: impl Into<reqwest::Body>) -> Self {
        self.body = Some(body.into());
        self
    }
}

/// The header on errors answered by mcp-connect itself, rather than by the provider.
pub const OWN_ERROR: &str = "mcp-connect-error";

/// The header on a provider's 401 that could not be retried: the token was refreshed; send the
/// call again.
pub const TOKEN_REFRESHED: &str = "mcp-connect-token-refreshed";

impl Client {
    /// Sends `req` through the proxy. `Ok` is the provider's answer, whatever its status, its
    /// body still streaming; `Err` is mcp-connect's own refusal ([`Error::Api`]: `not_connected`,
    /// `forbidden`, `upstream_error`, ...), told apart by its `MCP-Connect-Error` header.
    ///
    /// A path with a `.` or `..` segment (also percent-encoded) is refused here, as
    /// `invalid_request`, without sending anything: URL parsers resolve such segments before a
    /// request leaves, so `../../connections` would otherwise reach another endpoint of
    /// mcp-connect with this client's API key instead of being refused by the proxy. A `#` is
    /// sent as `%23` (a fragment would be cut off).
    pub async fn proxy(&self, req: ProxyRequest) -> Result<reqwest::Response, Error> {
        let path = req.path.trim_start_matches('/');
        let (segments, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        if segments.split('/').any(is_dot_segment) {
            return Err(Error::Api {
                status: 400,
                body: Box::new(ApiError::with(
                    "invalid_request",
                    "the proxy path has a . or .. segment; it would leave the provider's API base"
                        .into(),
                )),
            });
        }
        let path = match query {
            Some(q) => format!("{segments}?{q}"),
            None => segments.to_owned(),
        };
        let url = format!(
            "{}/v1/proxy/{}/{}",
            self.base,
            req.provider,
            path.replace('#', "%23")
        );
        let mut b = self
            .http
            .request(req.method, url)
            .headers(req.headers)
            .bearer_auth(&self.api_key);
        b = match &req.who {
            Who::SubjectToken(t) => b.header("subject-token", t),
            Who::Subject(s) => b.header("connect-subject", s),
        };
        if let Some(a) = &req.account {
            b = b.header("connect-account", a);
        }
        if let Some(body) = req.body {
            b = b.body(body);
        }
        let resp = b.send().await?;
        if resp.headers().contains_key(OWN_ERROR) {
            let status = resp.status().as_u16();
            let text = resp.text().await?;
            let body = serde_json::from_str::<ApiError>(&text)
                .unwrap_or_else(|_| ApiError::unexpected(&text));
            return Err(Error::Api {
                status,
                body: Box::new(body),
            });
        }
        Ok(resp)
    }
}

/// `.` or `..`, as the URL standard counts them (`%2e` is a dot, in either case).
fn is_dot_segment(segment: &str) -> bool {
    let s = segment.to_ascii_lowercase().replace("%2e", ".");
    s == "." || s == ".."
}
