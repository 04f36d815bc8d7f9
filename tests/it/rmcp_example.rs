//! The rmcp example server (clients/rust/examples/rmcp_server.rs) against an rmcp client, in both
//! protocol eras, with the real service, peers and a form-walking browser: the 2026-07-28
//! `InputRequiredResult` round trip, 2025-11-25 `elicitation/create` with the completion
//! notification, decline, and forged or foreign `requestState` refused by mcp-connect itself (rmcp
//! passes `requestState` through verbatim, so here mcp-connect's check is the one that matters);
//! and `whoami_via_proxy`, the provider called through mcp-connect's proxy after the same rounds.

use std::sync::{Arc, Mutex};

use mcp_connect_client::Client;
use reqwest::StatusCode;
use rmcp::handler::client::ClientHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    CustomNotification, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, Implementation, ProtocolVersion, UrlElicitationCapability,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::harness::*;

#[path = "../../clients/rust/examples/rmcp_server.rs"]
#[allow(dead_code)]
mod example;

/// An MCP client that answers URL elicitations with `action` and, on accept, has the user
/// complete the connect flow in a browser.
#[derive(Clone)]
struct User {
    subject: &'static str,
    action: ElicitationAction,
    version: ProtocolVersion,
    asked: Arc<Mutex<Vec<Value>>>,
    completed: Arc<Mutex<Vec<String>>>,
}

impl User {
    fn new(subject: &'static str, action: ElicitationAction, version: ProtocolVersion) -> Self {
        Self {
            subject,
            action,
            version,
            asked: Arc::default(),
            completed: Arc::default(),
        }
    }
}

impl ClientHandler for User {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let v = serde_json::to_value(&request).unwrap();
        self.asked.lock().unwrap().push(v.clone());
        if self.action == ElicitationAction::Accept {
            // `accept` = the user agreed to open the URL; the flow finishes afterwards.
            let (url, subject) = (v["url"].as_str().unwrap().to_owned(), self.subject);
            tokio::spawn(async move {
                let b = Browser::new();
                let page = b.sign_in_to_consent(&url, subject).await;
                let done = b.consent_and_allow(&page, subject).await;
                assert_eq!(done.status, StatusCode::OK, "{}", done.body);
            });
        }
        Ok(ElicitResult::new(self.action.clone()))
    }

    async fn on_custom_notification(
        &self,
        n: CustomNotification,
        _: NotificationContext<RoleClient>,
    ) {
        if n.method == "notifications/elicitation/complete" {
            let id = n.params.unwrap_or_default()["elicitationId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            self.completed.lock().unwrap().push(id);
        }
    }

    fn get_info(&self) -> ClientConfig {
        let caps = ClientCapabilities::builder()
            .enable_elicitation_with(
                ElicitationCapability::new().with_url(UrlElicitationCapability::new()),
            )
            .build();
        ClientConfig::new(caps, Implementation::new("it", "0"))
            .with_protocol_version(self.version.clone())
    }
}

/// Starts the example server for `subject` on one end of an in-memory pipe and connects `user`
/// on the other, in `user`'s protocol era.
async fn connect(
    app: &TestApp,
    subject: &str,
    user: User,
) -> rmcp::service::RunningService<RoleClient, User> {
    let server = example::Whoami {
        connect: Client::new(&app.url, API_KEY),
        provider: "acme".into(),
        provider_api: format!("{}/api/whoami", app.peers.upstream),
        proxy_path: "whoami".into(),
        subject: subject.into(),
        subject_token: None,
        http: reqwest::Client::new(),
    };
    let (a, b) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(a).await {
            let _ = running.waiting().await;
        }
    });
    if user.version >= ProtocolVersion::V_2026_07_28 {
        user.serve_with_lifecycle(
            b,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap()
    } else {
        user.serve(b).await.unwrap()
    }
}

fn whoami() -> CallToolRequestParams {
    CallToolRequestParams::new("whoami")
}

fn via_proxy() -> CallToolRequestParams {
    CallToolRequestParams::new("whoami_via_proxy")
}

/// The `sub` that the upstream's whoami answered through the proxy, from the tool's text.
fn proxied_sub(r: &CallToolResult) -> String {
    let t = text(r);
    let body = t
        .strip_prefix("acme says (through mcp-connect's proxy): ")
        .unwrap_or_else(|| panic!("not an answer through the proxy: {t}"));
    let me: Value = serde_json::from_str(body).unwrap();
    me["sub"].as_str().unwrap_or_default().to_owned()
}

fn text(r: &CallToolResult) -> String {
    serde_json::to_value(&r.content).unwrap()[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_2026_input_required_round_trip_returns_upstream_data() {
    let app = TestApp::spawn(DbKind::Sqlite).await;
    let user = User::new(
        "alice",
        ElicitationAction::Accept,
        ProtocolVersion::V_2026_07_28,
    );
    let client = connect(&app, "alice", user.clone()).await;
    let r = client.call_tool(whoami()).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let t = text(&r);
    assert!(t.starts_with("acme says: "), "{t}");
    let me: Value = serde_json::from_str(t.trim_start_matches("acme says: ")).unwrap();
    assert_eq!(me["sub"], "alice");
    let asked = user.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["mode"], "url");
    // 2026-07-28 dropped elicitationId; rmcp 3.11 models it as a required string and fills in
    // "" when it is absent, so that is what a 2026 client sees here.
    assert!(
        asked[0].get("elicitationId").is_none_or(|v| v == ""),
        "{asked:?}"
    );
    assert!(user.completed.lock().unwrap().is_empty());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_2025_elicitation_create_then_completion_notification() {
    let app = TestApp::spawn(DbKind::Sqlite).await;
    let user = User::new(
        "bob",
        ElicitationAction::Accept,
        ProtocolVersion::V_2025_11_25,
    );
    let client = connect(&app, "bob", user.clone()).await;
    let r = client.call_tool(whoami()).await.unwrap();
    assert!(text(&r).contains("\"sub\":\"bob\""), "{r:?}");
    let asked = user.asked.lock().unwrap().clone();
    let id = asked[0]["elicitationId"].as_str().unwrap().to_owned();
    for _ in 0..50 {
        if !user.completed.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(*user.completed.lock().unwrap(), vec![id]);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_decline_ends_the_call_and_forged_or_foreign_state_is_refused() {
    let app = TestApp::spawn(DbKind::Sqlite).await;
    for version in [ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25] {
        let user = User::new("carol", ElicitationAction::Decline, version);
        let client = connect(&app, "carol", user).await;
        let r = client.call_tool(whoami()).await.unwrap();
        assert_eq!(text(&r), "Not connected to acme: you chose not to.");
    }

    // A genuine state for carol, taken from a first round...
    let user = User::new(
        "carol",
        ElicitationAction::Cancel,
        ProtocolVersion::V_2026_07_28,
    );
    let carol = connect(&app, "carol", user).await;
    let CallToolResponse::InputRequired(first) = carol.call_tool_once(whoami()).await.unwrap()
    else {
        panic!("expected InputRequiredResult");
    };
    let genuine = first.request_state.clone().unwrap();
    let accept: rmcp::model::InputResponses =
        [("connect".to_owned(), json!({"action": "accept"}))].into();
    let retry = |state: &str| {
        let mut p = whoami();
        p.input_responses = Some(accept.clone());
        p.request_state = Some(state.to_owned());
        p
    };
    // ...forged by the client, or presented on dave's session: mcp-connect refuses both.
    let dave_user = User::new(
        "dave",
        ElicitationAction::Cancel,
        ProtocolVersion::V_2026_07_28,
    );
    let dave = connect(&app, "dave", dave_user).await;
    for (client, state, reason) in [
        (&carol, "k1.forged-by-the-client", "altered"),
        (&dave, genuine.as_str(), "another subject"),
    ] {
        let CallToolResponse::Complete(r) = client.call_tool_once(retry(state)).await.unwrap()
        else {
            panic!("a refused state must not start another round");
        };
        assert_eq!(r.is_error, Some(true), "{r:?}");
        assert!(
            text(&r).contains("invalid_request_state"),
            "{reason}: {}",
            text(&r)
        );
    }
    for subject in ["carol", "dave"] {
        let (_, v) = app.get(&format!("/v1/connections?subject={subject}")).await;
        assert_eq!(v["connections"], json!([]));
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_whoami_via_proxy_in_both_eras() {
    let app = TestApp::spawn(DbKind::Sqlite).await;
    // 2025-11-25: elicitation/create, the browser connects, the completion notification, then
    // the upstream's answer through the proxy; the second call is answered at once.
    let user = User::new(
        "erin",
        ElicitationAction::Accept,
        ProtocolVersion::V_2025_11_25,
    );
    let client = connect(&app, "erin", user.clone()).await;
    let r = client.call_tool(via_proxy()).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(proxied_sub(&r), "erin");
    let asked = user.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let id = asked[0]["elicitationId"].as_str().unwrap().to_owned();
    for _ in 0..50 {
        if !user.completed.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(*user.completed.lock().unwrap(), vec![id]);
    let again = client.call_tool(via_proxy()).await.unwrap();
    assert_eq!(proxied_sub(&again), "erin");
    assert_eq!(
        user.asked.lock().unwrap().len(),
        1,
        "connected: not asked again"
    );

    // 2026-07-28: InputRequiredResult, the retry waits for the flow, then the answer.
    let user = User::new(
        "frank",
        ElicitationAction::Accept,
        ProtocolVersion::V_2026_07_28,
    );
    let client = connect(&app, "frank", user.clone()).await;
    let r = client.call_tool(via_proxy()).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(proxied_sub(&r), "frank");
    assert_eq!(user.asked.lock().unwrap().len(), 1);

    // The state of a round is an elicitation of the user's own: gina's, presented on hank's
    // session, or a made-up one, is refused and starts no round.
    let gina = connect(
        &app,
        "gina",
        User::new(
            "gina",
            ElicitationAction::Cancel,
            ProtocolVersion::V_2026_07_28,
        ),
    )
    .await;
    let CallToolResponse::InputRequired(first) = gina.call_tool_once(via_proxy()).await.unwrap()
    else {
        panic!("expected InputRequiredResult");
    };
    let ginas = first.request_state.clone().unwrap();
    let hank = connect(
        &app,
        "hank",
        User::new(
            "hank",
            ElicitationAction::Cancel,
            ProtocolVersion::V_2026_07_28,
        ),
    )
    .await;
    let accept: rmcp::model::InputResponses =
        [("connect".to_owned(), json!({"action": "accept"}))].into();
    for state in [ginas.as_str(), "no-such-elicitation"] {
        let mut p = via_proxy();
        p.input_responses = Some(accept.clone());
        p.request_state = Some(state.to_owned());
        let CallToolResponse::Complete(r) = hank.call_tool_once(p).await.unwrap() else {
            panic!("a refused state must not start another round");
        };
        assert_eq!(r.is_error, Some(true), "{r:?}");
        assert!(
            text(&r).contains("invalid_request_state"),
            "{state}: {}",
            text(&r)
        );
    }
    for subject in ["gina", "hank"] {
        let (_, v) = app.get(&format!("/v1/connections?subject={subject}")).await;
        assert_eq!(v["connections"], json!([]));
    }
    app.shutdown().await;
}
