//! A small typed client for [mcp-connect](../../docs/mcp-integration.md): the service that gives
//! an MCP server third-party OAuth through URL-mode elicitation.
//!
//! ```no_run
//! # async fn run() -> Result<(), mcp_connect_client::Error> {
//! use mcp_connect_client::{Client, TokenRequest};
//! let connect = Client::new("https://connect.example.com", "api-key");
//! match connect.token(&TokenRequest::new("user-sub", "github").elicit()).await {
//!     Ok(token) => println!("call GitHub with {}", token.access_token.len()),
//!     Err(e) => match e.elicitation() {
//!         // Hand the ready payload to the MCP client (see `Elicitation::mcp`).
//!         Some(el) => println!("ask the user to open {}", el.url),
//!         None => return Err(e),
//!     },
//! }
//! # Ok(()) }
//! ```
//!
//! Completion signals: [`Client::events`] reads `GET /v1/events`; webhook signatures (Standard
//! Webhooks) are checked by [`webhooks::Verifier`].

pub mod exchange;
pub mod proxy;
pub mod webhooks;

pub use exchange::{ExchangeRequest, ExchangedToken};
pub use proxy::ProxyRequest;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The two MCP protocol versions whose payloads every elicitation carries.
pub const MCP_2025_11_25: &str = "2025-11-25";
pub const MCP_2026_07_28: &str = "2026-07-28";

/// The longest the service holds a waiting request.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The service answered with an error body.
    #[error("mcp-connect answered {status}: {} ({})", .body.message, .body.error)]
    Api { status: u16, body: Box<ApiError> },
    #[error("could not reach mcp-connect: {0}")]
    Http(#[from] reqwest::Error),
}

impl Error {
    /// The stable error code (`not_connected`, `authorization_required`, …), if the service sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { body, .. } => Some(&body.error),
            Self::Http(_) => None,
        }
    }

    /// The ready elicitation that came with `authorization_required` /
    /// `reauthorization_required` (when the request set `elicit`).
    pub fn elicitation(&self) -> Option<&Elicitation> {
        match self {
            Self::Api { body, .. } => body.elicitation.as_ref(),
            Self::Http(_) => None,
        }
    }

    /// The user declined the awaited elicitation and nothing is connected.
    pub fn is_declined(&self) -> bool {
        self.code() == Some("authorization_declined")
    }

    /// The `request_state` was refused (`invalid`, `foreign` or `expired`).
    pub fn is_invalid_request_state(&self) -> bool {
        self.code() == Some("invalid_request_state")
    }

    /// `account_selection_required`: the user holds several accounts at the provider and this
    /// client must name one ([`TokenRequest::account`], e.g. the `id` of one of
    /// [`Self::accounts`]).
    pub fn needs_account_selection(&self) -> bool {
        self.code() == Some("account_selection_required")
    }

    /// `insufficient_scope`: the grant lacks [`Self::missing_scopes`] (asked without `elicit`;
    /// with it, the answer is `authorization_required` with an elicitation for the upgrade).
    pub fn is_insufficient_scope(&self) -> bool {
        self.code() == Some("insufficient_scope")
    }

    /// `insufficient_scope`: the scopes the call needs that the grant does not hold (else empty).
    pub fn missing_scopes(&self) -> &[String] {
        match self {
            Self::Api { body, .. } => &body.missing_scopes,
            Self::Http(_) => &[],
        }
    }

    /// `account_selection_required`: the user's accounts at the provider, one of which to name
    /// (else empty).
    pub fn accounts(&self) -> &[AccountChoice] {
        match self {
            Self::Api { body, .. } => &body.accounts,
            Self::Http(_) => &[],
        }
    }
}

/// The JSON error body: `{error, message}` plus what some codes carry.
#[derive(Debug, Clone, Deserialize)]
pub struct ApiError {
    pub error: String,
    /// The token endpoint's `error_description`.
    #[serde(alias = "error_description")]
    pub message: String,
    /// `invalid_request_state`: `invalid`, `foreign` or `expired`.
    pub reason: Option<String>,
    pub elicitation: Option<Elicitation>,
    /// `authorization_declined`: the declined elicitation.
    pub elicitation_id: Option<String>,
    /// `insufficient_scope`: the scopes the call needs that the grant does not hold.
    #[serde(default, deserialize_with = "null_as_default")]
    pub missing_scopes: Vec<String>,
    /// `account_selection_required`: the accounts to choose from.
    #[serde(default, deserialize_with = "null_as_default")]
    pub accounts: Vec<AccountChoice>,
}

impl ApiError {
    /// What a body that is not mcp-connect's JSON error (a proxy's page, say) becomes.
    fn unexpected(text: &str) -> Self {
        Self::with("unexpected_response", text.chars().take(200).collect())
    }

    /// An error with `code` and `message` and nothing else.
    fn with(code: &str, message: String) -> Self {
        Self {
            error: code.into(),
            message,
            reason: None,
            elicitation: None,
            elicitation_id: None,
            missing_scopes: Vec::new(),
            accounts: Vec::new(),
        }
    }
}

/// A field the service may send as `null` or leave out, read as its default (an empty list).
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Which of the user's accounts at a provider (`AccountRef`): on a [`Token`], a [`Connection`]
/// and connection events. Never a token. Name it with [`TokenRequest::account`] (its `id`, or its
/// label or nickname when no other account of the user's shares it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Account {
    /// The provider's stable id of the account; empty where the provider names none.
    #[serde(default)]
    pub id: String,
    /// A label people recognise (login, email, workspace name), when the provider gave one.
    pub label: Option<String>,
    /// The user's own name for it, when they gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nickname: Option<String>,
}

/// One account the caller may name, as `account_selection_required` lists them
/// ([`Error::accounts`]). Never a token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct AccountChoice {
    #[serde(default)]
    pub id: String,
    pub label: Option<String>,
    pub nickname: Option<String>,
    #[serde(default)]
    pub connection_id: String,
    /// Whether it is the user's default account at the provider.
    #[serde(default)]
    pub default: bool,
}

/// An elicitation as the service hands it out.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Elicitation {
    pub id: String,
    /// The connect URL for the user. Carries no personal data.
    pub url: String,
    /// What the MCP client shows the user; names the provider.
    pub message: String,
    /// `pending`, `completed`, `declined`, `expired` or `failed`.
    pub status: String,
    pub subject: String,
    pub provider: String,
    #[serde(default)]
    pub scopes: Vec<String>,
    pub expires_at: String,
    pub connection_id: Option<String>,
    /// Ready-to-send payloads keyed by protocol version (see the helpers below).
    pub mcp: Value,
    /// Sealed state to put verbatim into `InputRequiredResult.requestState` (2026-07-28) and to
    /// hand back as [`TokenRequest::request_state`].
    pub request_state: Option<String>,
}

impl Elicitation {
    pub fn is_pending(&self) -> bool {
        self.status == "pending"
    }

    /// 2026-07-28: the `{method: "elicitation/create", params: {mode: "url", message, url}}`
    /// object for `InputRequiredResult.inputRequests`.
    pub fn input_request(&self) -> &Value {
        &self.mcp[MCP_2026_07_28]
    }

    /// 2026-07-28: a complete `InputRequiredResult` asking for this elicitation under `key`.
    pub fn input_required_result(&self, key: &str) -> Value {
        let mut r = serde_json::json!({
            "resultType": "input_required",
            "inputRequests": { key: self.input_request() },
        });
        if let Some(s) = &self.request_state {
            r["requestState"] = Value::String(s.clone());
        }
        r
    }

    /// 2025-11-25: the `elicitation/create` params (`mode`, `elicitationId`, `url`, `message`).
    pub fn create_params(&self) -> &Value {
        &self.mcp[MCP_2025_11_25]["params"]
    }

    /// 2025-11-25: the URLElicitationRequiredError (`code: -32042`, `message`, `data`).
    pub fn url_elicitation_required_error(&self) -> &Value {
        &self.mcp[MCP_2025_11_25]["error"]
    }
}

/// A token to call the provider with.
#[derive(Clone, Deserialize)]
pub struct Token {
    pub access_token: String,
    pub token_type: String,
    pub expires_at: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    pub connection_id: String,
    /// Which of the user's accounts at the provider this token is for (`None` from a service
    /// older than accounts).
    #[serde(default)]
    pub account: Option<Account>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("access_token", &"[redacted]")
            .field("token_type", &self.token_type)
            .field("expires_at", &self.expires_at)
            .field("connection_id", &self.connection_id)
            .field("account", &self.account)
            .finish()
    }
}

/// `POST /v1/tokens`.
#[derive(Clone, Default, Serialize)]
pub struct TokenRequest {
    pub subject: String,
    /// Proof of subject: the MCP access token the user presented to this MCP server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject_token: Option<String>,
    pub provider: String,
    /// Which of the user's accounts at the provider (see [`Self::account`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Scopes this call needs (more than the grant holds: `insufficient_scope`, or with
    /// `elicit` `authorization_required`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ttl_seconds: Option<i64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub force_refresh: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub elicit: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elicitation_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_seconds: Option<u64>,
}

impl std::fmt::Debug for TokenRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRequest")
            .field("subject", &self.subject)
            .field(
                "subject_token",
                &self.subject_token.as_ref().map(|_| "[redacted]"),
            )
            .field("provider", &self.provider)
            .field("account", &self.account)
            .field("scopes", &self.scopes)
            .field("elicit", &self.elicit)
            .field("elicitation_id", &self.elicitation_id)
            .field("wait_seconds", &self.wait_seconds)
            .finish_non_exhaustive()
    }
}

impl TokenRequest {
    pub fn new(subject: impl Into<String>, provider: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            provider: provider.into(),
            ..Self::default()
        }
    }

    /// Proves the subject with the user's MCP access token (checked by mcp-connect at the
    /// identity issuer; required for clients with `require_subject_token`).
    pub fn subject_token(mut self, token: impl Into<String>) -> Self {
        self.subject_token = Some(token.into());
        self
    }

    /// Which of the user's accounts at the provider: its [`Account::id`], or its label or
    /// nickname when no other account shares it. Without it: the user's default account, or
    /// `account_selection_required` ([`Error::accounts`]) for a client that must name one. One
    /// that is not connected is `not_connected` (with [`Self::elicit`], an elicitation to add
    /// it).
    pub fn account(mut self, account: impl Into<String>) -> Self {
        self.account = Some(account.into());
        self
    }

    /// The scopes this call needs. More than the grant holds: `insufficient_scope`
    /// ([`Error::missing_scopes`]); with [`Self::elicit`], the user is asked for the union.
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// When not connected, answer `authorization_required` with a ready elicitation.
    pub fn elicit(mut self) -> Self {
        self.elicit = true;
        self
    }

    /// Wait for this elicitation first (with [`Self::wait`]).
    pub fn elicitation_id(mut self, id: impl Into<String>) -> Self {
        self.elicitation_id = Some(id.into());
        self
    }

    /// Wait for the elicitation sealed in this `request_state` first (with [`Self::wait`]).
    pub fn request_state(mut self, state: impl Into<String>) -> Self {
        self.request_state = Some(state.into());
        self
    }

    /// Hold the request while the awaited elicitation is pending (at most 60 s).
    pub fn wait(mut self, d: Duration) -> Self {
        self.wait_seconds = Some(d.min(MAX_WAIT).as_secs());
        self
    }

    pub fn min_ttl(mut self, d: Duration) -> Self {
        self.min_ttl_seconds = Some(d.as_secs() as i64);
        self
    }
}

/// A connection's metadata (never its tokens).
#[derive(Debug, Clone, Deserialize)]
pub struct Connection {
    pub id: String,
    pub subject: String,
    pub provider: String,
    /// `active`, `needs_reauth` or `revoked`.
    pub status: String,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The account's label (also `account.label`; kept for callers written before accounts).
    pub account_label: Option<String>,
    pub expires_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Which account at the provider this connection is (`None` from a service older than
    /// accounts).
    #[serde(default)]
    pub account: Option<Account>,
    /// Whether it is the user's default account at the provider: what a token request without
    /// [`TokenRequest::account`] gets.
    #[serde(default)]
    pub default: bool,
}

/// `POST /v1/elicitations`, for [`Client::create_elicitation_with`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct ElicitationRequest {
    pub subject: String,
    pub provider: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub add_account: bool,
}

impl ElicitationRequest {
    pub fn new(subject: impl Into<String>, provider: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            provider: provider.into(),
            ..Self::default()
        }
    }

    /// The scopes to ask for (default: the provider's configured ones, plus what the user
    /// already granted for the account being reconnected).
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// Ask the user to connect another account at the provider rather than reconnect the one
    /// they have (which account it becomes is the provider's answer: one already connected is
    /// reconnected).
    pub fn add_account(mut self) -> Self {
        self.add_account = true;
        self
    }
}

/// What revoking a connection did.
#[derive(Debug, Clone, Deserialize)]
pub struct Revocation {
    pub connection_id: String,
    pub refresh_token: String,
    pub access_token: String,
    pub tokens_deleted: bool,
    pub message: String,
}

/// The API client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    api_key: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// `base_url` is mcp-connect's `public_url`; `api_key` one from its `[[clients]]`.
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            // Long enough for the longest wait the service holds.
            .timeout(MAX_WAIT + Duration::from_secs(15))
            .build()
            .unwrap_or_default();
        Self::with_http(http, base_url, api_key)
    }

    pub fn with_http(
        http: reqwest::Client,
        base_url: impl Into<String>,
        api_key: impl Into<String>,
    ) -> Self {
        Self {
            http,
            base: base_url.into().trim_end_matches('/').to_owned(),
            api_key: api_key.into(),
        }
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, Error> {
        Self::answer(req.bearer_auth(&self.api_key).send().await?).await
    }

    /// The JSON answer, or the error body as [`Error::Api`].
    async fn answer<T: serde::de::DeserializeOwned>(resp: reqwest::Response) -> Result<T, Error> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp.json().await?);
        }
        let text = resp.text().await?;
        let body =
            serde_json::from_str::<ApiError>(&text).unwrap_or_else(|_| ApiError::unexpected(&text));
        Err(Error::Api {
            status: status.as_u16(),
            body: Box::new(body),
        })
    }

    /// `POST /v1/elicitations`: a connect URL for `subject` at `provider` (a still-pending one
    /// for the same request is handed out again).
    pub async fn create_elicitation(
        &self,
        subject: &str,
        provider: &str,
        scopes: Option<&[String]>,
    ) -> Result<Elicitation, Error> {
        self.create_elicitation_with(&ElicitationRequest {
            scopes: scopes.map(<[String]>::to_vec),
            ..ElicitationRequest::new(subject, provider)
        })
        .await
    }

    /// `POST /v1/elicitations` with every option, e.g.
    /// `ElicitationRequest::new(sub, provider).add_account()` to connect another account.
    pub async fn create_elicitation_with(
        &self,
        req: &ElicitationRequest,
    ) -> Result<Elicitation, Error> {
        self.call(
            self.http
                .post(format!("{}/v1/elicitations", self.base))
                .json(req),
        )
        .await
    }

    /// `GET /v1/elicitations/{id}`.
    pub async fn elicitation(&self, id: &str) -> Result<Elicitation, Error> {
        self.wait_elicitation(id, Duration::ZERO).await
    }

    /// `GET /v1/elicitations/{id}?wait=`: returns once it is no longer pending, or when `wait`
    /// (at most 60 s) has passed.
    pub async fn wait_elicitation(&self, id: &str, wait: Duration) -> Result<Elicitation, Error> {
        let secs = wait.min(MAX_WAIT).as_secs();
        let mut url = format!("{}/v1/elicitations/{}", self.base, encode(id));
        if secs > 0 {
            url.push_str(&format!("?wait={secs}"));
        }
        self.call(self.http.get(url)).await
    }

    /// `POST /v1/tokens`.
    pub async fn token(&self, req: &TokenRequest) -> Result<Token, Error> {
        self.call(self.http.post(format!("{}/v1/tokens", self.base)).json(req))
            .await
    }

    /// `GET /v1/connections?subject=`.
    pub async fn connections(&self, subject: &str) -> Result<Vec<Connection>, Error> {
        #[derive(Deserialize)]
        struct List {
            connections: Vec<Connection>,
        }
        let l: List = self
            .call(
                self.http
                    .get(format!("{}/v1/connections", self.base))
                    .query(&[("subject", subject)]),
            )
            .await?;
        Ok(l.connections)
    }

    /// `DELETE /v1/connections/{id}`: revokes at the provider and deletes the tokens.
    pub async fn revoke(&self, connection_id: &str) -> Result<Revocation, Error> {
        self.call(self.http.delete(format!(
            "{}/v1/connections/{}",
            self.base,
            encode(connection_id)
        )))
        .await
    }
}

impl Client {
    /// `GET /v1/events`: this client's events as they happen (completion signals for servers
    /// that prefer listening to receiving webhooks). Pass the last [`StreamedEvent::id`] seen to
    /// replay what was missed while disconnected. The stream ends when the service shuts down;
    /// reconnect then.
    pub async fn events(&self, last_event_id: Option<i64>) -> Result<EventStream, Error> {
        let mut req = self
            .http
            .get(format!("{}/v1/events", self.base))
            .bearer_auth(&self.api_key)
            .header("accept", "text/event-stream")
            // A stream stays open; only connecting is bounded.
            .timeout(Duration::from_secs(365 * 86_400));
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id.to_string());
        }
        let resp = req.send().await?;
        if !resp.status().is_success() {
            let status = resp.status().as_u16();
            let text = resp.text().await?;
            let body = serde_json::from_str::<ApiError>(&text)
                .unwrap_or_else(|_| ApiError::unexpected(&text));
            return Err(Error::Api {
                status,
                body: Box::new(body),
            });
        }
        Ok(EventStream {
            resp,
            buf: Vec::new(),
        })
    }
}

/// One message of `GET /v1/events`.
#[derive(Debug, Clone)]
pub struct StreamedEvent {
    /// The sequence number to resume after.
    pub id: i64,
    pub event: webhooks::Event,
}

/// An open `GET /v1/events` stream.
pub struct EventStream {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl EventStream {
    /// The next event; `None` when the stream ended. Keep-alive comments are skipped.
    pub async fn next(&mut self) -> Option<Result<StreamedEvent, Error>> {
        loop {
            while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let raw: Vec<u8> = self.buf.drain(..end + 2).collect();
                let block = String::from_utf8_lossy(&raw);
                let (mut id, mut data) = (None, String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if let (Some(id), Ok(event)) = (id, serde_json::from_str(&data)) {
                    return Some(Ok(StreamedEvent { id, event }));
                }
            }
            match self.resp.chunk().await {
                Ok(Some(c)) => self.buf.extend_from_slice(&c),
                Ok(None) => return None,
                Err(e) => return Some(Err(e.into())),
            }
        }
    }
}

/// Ids are URL-safe by construction; anything else is percent-encoded rather than trusted.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
