//! An MCP server on `rmcp` (stdio) whose tool needs the user's token at a provider, and gets it
//! from mcp-connect — in both protocol eras:
//!
//! * 2026-07-28: answer `InputRequiredResult` with mcp-connect's ready `inputRequests` entry and
//!   its sealed `request_state`; on the client's retry, hand the echoed state back to mcp-connect
//!   (which waits briefly for the user to finish) and decide from the token store, never from
//!   the client's `accept`.
//! * 2025-11-25: send `elicitation/create` (URL mode) and wait for the connection, then send
//!   `notifications/elicitation/complete`; a client without URL elicitation gets the `-32042`
//!   error instead.
//!
//! Two tools: `whoami` fetches the token and calls `PROVIDER_API` itself; `whoami_via_proxy` never
//! holds the token: mcp-connect's proxy (`/v1/proxy/PROVIDER/PROXY_PATH`, default `whoami`) makes
//! the call with it. Its "not connected" is asked in the same two ways through the API alone
//! (`POST /v1/elicitations`, `GET /v1/elicitations/{id}?wait=`), as a `token_access = "proxy"`
//! client must: it may not use `/v1/tokens`.
//!
//! ```sh
//! MCP_CONNECT_URL=http://127.0.0.1:8080 MCP_CONNECT_API_KEY=... PROVIDER=acme \
//! PROVIDER_API=https://api.acme.test/whoami MCP_SUBJECT=alice \
//!   cargo run -p mcp-connect-client --example rmcp_server
//! ```
//!
//! Over stdio the server runs as one local user, given as `MCP_SUBJECT`. An HTTP server takes the
//! subject from the `sub` of the user's validated MCP access token instead — never from input.

use std::time::Duration;

use mcp_connect_client::{Client, Elicitation, ProxyRequest, TokenRequest};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomNotification,
    ElicitationAction, ErrorCode, InputRequest, InputRequests, InputRequiredResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    ServerNotification, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// The key of our one input request in `inputRequests` / `inputResponses`.
const KEY: &str = "connect";

pub struct Whoami {
    pub connect: Client,
    pub provider: String,
    pub provider_api: String,
    /// `whoami_via_proxy`'s path below the provider's API base URL.
    pub proxy_path: String,
    pub subject: String,
    /// The user's MCP access token, forwarded as proof of subject (`subject_token`).
    pub subject_token: Option<String>,
    pub http: reqwest::Client,
}

fn text(s: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(s.into())]).into()
}

impl Whoami {
    /// A token request for this user, with the proof of subject when there is one.
    fn ask(&self) -> TokenRequest {
        let ask = TokenRequest::new(&self.subject, &self.provider);
        match &self.subject_token {
            Some(t) => ask.subject_token(t),
            None => ask,
        }
    }

    /// What the tool is for: call the provider's API with the user's token.
    async fn call_provider(&self, token: &str) -> Result<CallToolResponse, McpError> {
        let r = self
            .http
            .get(&self.provider_api)
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| McpError::internal_error(format!("provider unreachable: {e}"), None))?;
        let body = r.text().await.unwrap_or_default();
        Ok(text(format!("{} says: {body}", self.provider)))
    }

    async fn call(
        &self,
        req: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        // A 2026-07-28 retry: the user's answer to the URL request, and our echoed state.
        let answer = req
            .input_responses
            .as_ref()
            .and_then(|r| r.get(KEY))
            .and_then(|v| v["action"].as_str());
        if matches!(answer, Some("decline" | "cancel")) {
            return Ok(text(format!(
                "Not connected to {}: you chose not to.",
                self.provider
            )));
        }
        let mut ask = self.ask().elicit();
        if let Some(state) = &req.request_state {
            ask = ask.request_state(state).wait(Duration::from_secs(20));
        }
        match self.connect.token(&ask).await {
            Ok(t) => self.call_provider(&t.access_token).await,
            Err(e) if e.is_declined() => Ok(text(format!(
                "Not connected to {}: you declined.",
                self.provider
            ))),
            // A requestState that mcp-connect did not issue for this user (forged, altered,
            // replayed by someone else, or expired): say so; the caller can start over.
            Err(e) if e.is_invalid_request_state() => {
                Ok(CallToolResult::error(vec![ContentBlock::text(e.to_string())]).into())
            }
            Err(e) => match e.elicitation().cloned() {
                Some(el) if modern => input_required(&el),
                Some(el) => self.elicit_2025(&el, &ctx).await,
                None => Err(McpError::internal_error(e.to_string(), None)),
            },
        }
    }

    /// 2025-11-25: ask over `elicitation/create`, wait, and say when it is done.
    async fn elicit_2025(
        &self,
        el: &Elicitation,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let url: url::Url = el
            .url
            .parse()
            .map_err(|_| McpError::internal_error("bad connect URL", None))?;
        let action = match ctx.peer.elicit_url(&el.message, url, &el.id).await {
            Ok(a) => a,
            // No URL elicitation on this client: the -32042 error carries the same URL.
            Err(_) => {
                let err = el.url_elicitation_required_error();
                return Err(McpError::new(
                    ErrorCode(-32042),
                    err["message"].as_str().unwrap_or_default().to_owned(),
                    Some(err["data"].clone()),
                ));
            }
        };
        if action != ElicitationAction::Accept {
            return Ok(text(format!(
                "Not connected to {}: you chose not to.",
                self.provider
            )));
        }
        // `accept` only means the user opened the URL: wait for mcp-connect to say it is done.
        for _ in 0..5 {
            let ask = self
                .ask()
                .elicitation_id(&el.id)
                .wait(Duration::from_secs(60));
            match self.connect.token(&ask).await {
                Ok(t) => {
                    let done = CustomNotification::new(
                        "notifications/elicitation/complete",
                        Some(json!({ "elicitationId": el.id })),
                    );
                    let _ = ctx
                        .peer
                        .send_notification(ServerNotification::CustomNotification(done))
                        .await;
                    return self.call_provider(&t.access_token).await;
                }
                Err(e) if e.is_declined() => break,
                Err(e) if e.code() == Some("not_connected") => continue,
                Err(e) => return Err(McpError::internal_error(e.to_string(), None)),
            }
        }
        Ok(text(format!("Not connected to {}.", self.provider)))
    }
}

/// `whoami_via_proxy`: the waits for the user (2025-11-25: this many of 60 s).
const PROXY_WAITS: usize = 5;

impl Whoami {
    /// `whoami_via_proxy`'s call, for this user (with the proof of subject when there is one).
    fn proxied(&self) -> ProxyRequest {
        let (method, provider, path) = (reqwest::Method::GET, &self.provider, &self.proxy_path);
        match &self.subject_token {
            Some(t) => ProxyRequest::new(method, provider, path, t),
            None => ProxyRequest::for_subject(method, provider, path, &self.subject),
        }
    }

    /// Through the proxy: the provider's answer, or `None` when the user must connect first.
    async fn via_proxy(&self) -> Result<Option<CallToolResponse>, McpError> {
        match self.connect.proxy(self.proxied()).await {
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                let said = format!(
                    "{} says (through mcp-connect's proxy): {body}",
                    self.provider
                );
                Ok(Some(if status.is_success() {
                    text(said)
                } else {
                    CallToolResult::error(vec![ContentBlock::text(format!("{status}: {said}"))])
                        .into()
                }))
            }
            // mcp-connect's own answer (the provider's 404 would be an `Ok`).
            Err(e) if matches!(e.code(), Some("not_connected" | "reauthorization_required")) => {
                Ok(None)
            }
            Err(e) => Err(McpError::internal_error(e.to_string(), None)),
        }
    }

    async fn call_via_proxy(
        &self,
        req: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let answer = req
            .input_responses
            .as_ref()
            .and_then(|r| r.get(KEY))
            .and_then(|v| v["action"].as_str());
        if matches!(answer, Some("decline" | "cancel")) {
            return Ok(text(format!(
                "Not connected to {}: you chose not to.",
                self.provider
            )));
        }
        if let Some(done) = self.via_proxy().await? {
            return Ok(done);
        }
        let internal = |e: mcp_connect_client::Error| McpError::internal_error(e.to_string(), None);
        // A 2026-07-28 retry: our state is the elicitation's id. mcp-connect holds it for this
        // API client only, and whose it is decides: another user's (or no such one) is refused.
        if let (true, Some(id)) = (modern, &req.request_state) {
            let refused = || -> Result<CallToolResponse, McpError> {
                Ok(CallToolResult::error(vec![ContentBlock::text(
                    "invalid_request_state: not a connect request of yours",
                )])
                .into())
            };
            let el = match self
                .connect
                .wait_elicitation(id, Duration::from_secs(20))
                .await
            {
                Ok(el) if el.subject == self.subject && el.provider == self.provider => el,
                Ok(_) => return refused(),
                Err(e) if matches!(e.code(), Some("not_found" | "invalid_request")) => {
                    return refused();
                }
                Err(e) => return Err(internal(e)),
            };
            match el.status.as_str() {
                "completed" => {
                    if let Some(done) = self.via_proxy().await? {
                        return Ok(done);
                    }
                }
                "declined" => {
                    return Ok(text(format!(
                        "Not connected to {}: you declined.",
                        self.provider
                    )));
                }
                "pending" => return proxy_input_required(&el),
                // Expired or failed: a new one, below.
                _ => {}
            }
        }
        // The connect URL (a still-pending one for this user is handed out again).
        let el = self
            .connect
            .create_elicitation(&self.subject, &self.provider, None)
            .await
            .map_err(internal)?;
        if modern {
            return proxy_input_required(&el);
        }
        let url: url::Url = el
            .url
            .parse()
            .map_err(|_| McpError::internal_error("bad connect URL", None))?;
        let action = match ctx.peer.elicit_url(&el.message, url, &el.id).await {
            Ok(a) => a,
            Err(_) => {
                let err = el.url_elicitation_required_error();
                return Err(McpError::new(
                    ErrorCode(-32042),
                    err["message"].as_str().unwrap_or_default().to_owned(),
                    Some(err["data"].clone()),
                ));
            }
        };
        if action != ElicitationAction::Accept {
            return Ok(text(format!(
                "Not connected to {}: you chose not to.",
                self.provider
            )));
        }
        // `accept` only means the user opened the URL: mcp-connect says when the flow is done.
        for _ in 0..PROXY_WAITS {
            let now = self
                .connect
                .wait_elicitation(&el.id, Duration::from_secs(60))
                .await
                .map_err(internal)?;
            match now.status.as_str() {
                "pending" => continue,
                "completed" => {
                    let done = CustomNotification::new(
                        "notifications/elicitation/complete",
                        Some(json!({ "elicitationId": el.id })),
                    );
                    let _ = ctx
                        .peer
                        .send_notification(ServerNotification::CustomNotification(done))
                        .await;
                    if let Some(done) = self.via_proxy().await? {
                        return Ok(done);
                    }
                    break;
                }
                "declined" => {
                    return Ok(text(format!(
                        "Not connected to {}: you declined.",
                        self.provider
                    )));
                }
                _ => break,
            }
        }
        Ok(text(format!("Not connected to {}.", self.provider)))
    }
}

/// 2026-07-28 for `whoami_via_proxy`: mcp-connect's ready request, with the elicitation's id as
/// our state (its sealed `request_state` is for `/v1/tokens`, which this tool does not use).
fn proxy_input_required(el: &Elicitation) -> Result<CallToolResponse, McpError> {
    let request: InputRequest = serde_json::from_value(el.input_request().clone())
        .map_err(|e| McpError::internal_error(format!("bad elicitation payload: {e}"), None))?;
    let requests: InputRequests = [(KEY.to_owned(), request)].into();
    Ok(InputRequiredResult::new(Some(requests), Some(el.id.clone())).into())
}

/// 2026-07-28: mcp-connect's ready request and sealed state, verbatim.
fn input_required(el: &Elicitation) -> Result<CallToolResponse, McpError> {
    let request: InputRequest = serde_json::from_value(el.input_request().clone())
        .map_err(|e| McpError::internal_error(format!("bad elicitation payload: {e}"), None))?;
    let requests: InputRequests = [(KEY.to_owned(), request)].into();
    Ok(InputRequiredResult::new(Some(requests), el.request_state.clone()).into())
}

impl ServerHandler for Whoami {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let schema = json!({"type": "object", "properties": {}});
        let Value::Object(schema) = schema else {
            return Err(McpError::internal_error("schema", None));
        };
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "whoami",
                "Who you are at the provider (connects your account first if needed)",
                schema.clone(),
            ),
            Tool::new(
                "whoami_via_proxy",
                "Who you are at the provider, asked through mcp-connect's proxy (connects your account first if needed)",
                schema,
            ),
        ]))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        match req.name.as_ref() {
            "whoami" => self.call(req, ctx).await,
            "whoami_via_proxy" => self.call_via_proxy(req, ctx).await,
            other => Err(McpError::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let env = |k: &str| std::env::var(k).map_err(|_| anyhow::anyhow!("set {k}"));
    let server = Whoami {
        connect: Client::new(env("MCP_CONNECT_URL")?, env("MCP_CONNECT_API_KEY")?),
        provider: env("PROVIDER")?,
        provider_api: env("PROVIDER_API")?,
        proxy_path: std::env::var("PROXY_PATH").unwrap_or_else(|_| "whoami".into()),
        subject: env("MCP_SUBJECT")?,
        // Over stdio the MCP client hands over the user's access token out of band.
        subject_token: std::env::var("MCP_SUBJECT_TOKEN").ok(),
        http: reqwest::Client::new(),
    };
    let running = server.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
