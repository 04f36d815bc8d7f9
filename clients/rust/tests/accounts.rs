//! Accounts (several per provider) in the client, against a stub HTTP server: what the requests
//! carry and how the answers, errors and events are read. Needs no running service.

// The stub server below is test code too (clippy allows these in `#[test]` functions only).
#![allow(clippy::unwrap_used)]

use mcp_connect_client::webhooks::Event;
use mcp_connect_client::{
    Account, AccountChoice, ApiError, Client, ElicitationRequest, Error, TokenRequest,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A server that answers each request with the next of `answers` (status, JSON body), one
/// connection each; the JSON bodies it received come out of the channel (`null` for none).
async fn stub(answers: Vec<(u16, Value)>) -> (Client, mpsc::UnboundedReceiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        for (status, answer) in answers {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let head_end = loop {
                let n = sock.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the request ended before its headers");
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < head_end + len {
                let n = sock.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the request ended before its body");
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = &buf[head_end..head_end + len];
            // A test that does not read what was sent has dropped the receiver.
            let _ = tx.send(serde_json::from_slice(body).unwrap_or(Value::Null));
            let text = answer.to_string();
            let resp = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            sock.write_all(resp.as_bytes()).await.unwrap();
        }
    });
    (Client::new(url, "k"), rx)
}

fn token() -> Value {
    json!({
        "access_token": "t", "token_type": "Bearer", "expires_at": null, "scopes": ["api"],
        "connection_id": "c2",
        "account": {"id": "1234", "label": "kate@work.example", "nickname": "Work"},
        "metadata": {}, "params": {}, "credential_type": "oauth2",
    })
}

fn work() -> Account {
    Account {
        id: "1234".into(),
        label: Some("kate@work.example".into()),
        nickname: Some("Work".into()),
    }
}

#[tokio::test]
async fn a_token_request_names_the_account_only_when_given_and_reads_the_answers_account() {
    let (c, mut sent) = stub(vec![
        (200, token()),
        (
            200,
            json!({"access_token": "t", "token_type": "Bearer", "connection_id": "c"}),
        ),
    ])
    .await;
    let t = c
        .token(&TokenRequest::new("kate", "sandbox").account("Work"))
        .await
        .unwrap();
    assert_eq!(
        sent.recv().await.unwrap(),
        json!({"subject": "kate", "provider": "sandbox", "account": "Work"})
    );
    assert_eq!(t.account, Some(work()));
    assert!(format!("{t:?}").contains("kate@work.example"));

    // Without `account` nothing is sent; a service before accounts answers without one.
    let old = c
        .token(&TokenRequest::new("kate", "sandbox"))
        .await
        .unwrap();
    assert_eq!(
        sent.recv().await.unwrap(),
        json!({"subject": "kate", "provider": "sandbox"})
    );
    assert_eq!(old.account, None);
}

#[tokio::test]
async fn an_elicitation_asks_for_another_account_only_when_told() {
    let el = json!({
        "id": "e", "url": "http://connect.test/connect/e", "message": "m", "status": "pending",
        "subject": "kate", "provider": "sandbox", "expires_at": "x", "mcp": {},
    });
    let (c, mut sent) = stub(vec![(201, el.clone()), (201, el)]).await;
    c.create_elicitation_with(
        &ElicitationRequest::new("kate", "sandbox")
            .scopes(["api"])
            .add_account(),
    )
    .await
    .unwrap();
    assert_eq!(
        sent.recv().await.unwrap(),
        json!({"subject": "kate", "provider": "sandbox", "scopes": ["api"], "add_account": true})
    );
    c.create_elicitation("kate", "sandbox", None).await.unwrap();
    assert_eq!(
        sent.recv().await.unwrap(),
        json!({"subject": "kate", "provider": "sandbox"})
    );
}

#[tokio::test]
async fn connections_carry_their_account_and_which_is_the_default() {
    let row = json!({
        "id": "c1", "subject": "kate", "provider": "sandbox", "status": "active",
        "scopes": ["api"], "account_label": "kate", "expires_at": null,
        "has_refresh_token": true, "created_at": "x", "updated_at": "x",
    });
    let mut one = row.clone();
    one["account"] = json!({"id": "1", "label": "kate"});
    one["default"] = json!(true);
    let (c, _) = stub(vec![(200, json!({"connections": [one, row]}))]).await;
    let list = c.connections("kate").await.unwrap();
    let account = Account {
        id: "1".into(),
        label: Some("kate".into()),
        nickname: None,
    };
    assert_eq!(list[0].account, Some(account));
    assert!(list[0].default);
    // A service before accounts.
    assert_eq!((list[1].account.clone(), list[1].default), (None, false));
}

#[tokio::test]
async fn insufficient_scope_carries_the_missing_scopes() {
    let (c, _) = stub(vec![(
        403,
        json!({"error": "insufficient_scope", "message": "m", "missing_scopes": ["admin", "write"]}),
    )])
    .await;
    let e = c
        .token(&TokenRequest::new("kate", "sandbox").scopes(["admin", "write"]))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Api { status: 403, .. }));
    assert!(e.is_insufficient_scope());
    assert_eq!(e.missing_scopes(), ["admin", "write"]);
    assert!(!e.needs_account_selection());
    assert!(e.accounts().is_empty());
}

#[tokio::test]
async fn account_selection_required_lists_the_accounts_to_choose_from() {
    let (c, _) = stub(vec![(
        409,
        json!({
            "error": "account_selection_required", "message": "m",
            "accounts": [
                {"id": "1", "label": "kate", "nickname": null, "connection_id": "c1", "default": true},
                {"id": "1234", "label": "kate@work.example", "nickname": "Work", "connection_id": "c2", "default": false},
            ],
        }),
    )])
    .await;
    let e = c
        .token(&TokenRequest::new("kate", "sandbox"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Api { status: 409, .. }));
    assert!(e.needs_account_selection());
    assert!(!e.is_insufficient_scope() && e.elicitation().is_none());
    assert_eq!(
        e.accounts(),
        [
            AccountChoice {
                id: "1".into(),
                label: Some("kate".into()),
                nickname: None,
                connection_id: "c1".into(),
                default: true,
            },
            AccountChoice {
                id: "1234".into(),
                label: Some("kate@work.example".into()),
                nickname: Some("Work".into()),
                connection_id: "c2".into(),
                default: false,
            },
        ]
    );
    assert!(e.missing_scopes().is_empty());
}

#[test]
fn error_bodies_without_the_new_fields_or_with_null_still_read() {
    for body in [
        json!({"error": "not_connected", "message": "m"}),
        json!({"error": "insufficient_scope", "message": "m", "missing_scopes": null, "accounts": null}),
    ] {
        let e: ApiError = serde_json::from_value(body).unwrap();
        assert!(e.missing_scopes.is_empty() && e.accounts.is_empty());
    }
}

#[test]
fn connection_and_completion_events_carry_the_account() {
    let event: Event = serde_json::from_value(json!({
        "type": "connection.revoked", "timestamp": "t",
        "data": {
            "client_id": "demo-mcp", "subject": "kate", "provider": "sandbox",
            "connection_id": "c2", "account": {"id": "1234", "label": null, "nickname": "Work"},
        },
    }))
    .unwrap();
    let account = Account {
        label: None,
        ..work()
    };
    assert_eq!(event.data.account, Some(account));
    let declined: Event = serde_json::from_value(json!({
        "type": "elicitation.declined", "timestamp": "t",
        "data": {"client_id": "demo-mcp", "subject": "kate", "provider": "sandbox", "status": "declined"},
    }))
    .unwrap();
    assert_eq!(declined.data.account, None);
}
