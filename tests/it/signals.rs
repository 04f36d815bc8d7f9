//! MCP integration signals: sealed `request_state` round trips and refusals, signed webhooks with
//! retries, and the `GET /v1/events` stream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode as AxStatus};
use mcp_connect_client::webhooks::{Verifier, WebhookError};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::*;
use crate::on_both_databases;

const WEBHOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Completes `e` in a fresh browser as `subject` (identity sign-in, consent, upstream Allow).
async fn complete(app: &TestApp, e: &Value, subject: &str) {
    let b = app.browser();
    let page = b
        .sign_in_to_consent(e["url"].as_str().unwrap(), subject)
        .await;
    let done = b.consent_and_allow(&page, subject).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
}

async fn decline(app: &TestApp, e: &Value, subject: &str) {
    let b = app.browser();
    let page = b
        .sign_in_to_consent(e["url"].as_str().unwrap(), subject)
        .await;
    let done = b
        .submit(&page, "form.actions", &[("action", "decline")])
        .await;
    assert!(done.status.is_success(), "{} {}", done.status, done.body);
}

fn invalid_state(s: StatusCode, v: &Value, reason: &str) {
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"], "invalid_request_state", "{v}");
    assert_eq!(v["reason"], reason, "{v}");
    assert!(v["message"].as_str().unwrap().len() > 20, "{v}");
}

on_both_databases!(
    request_state_round_trip_waits_for_completion_then_gives_the_token,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        // Not connected, elicit: the error carries the elicitation with its sealed state.
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "elicit": true}),
            )
            .await;
        assert_eq!(s, StatusCode::CONFLICT, "{v}");
        let e = v["elicitation"].clone();
        let state = e["request_state"].as_str().unwrap().to_owned();
        assert!(!state.contains("alice") && !state.contains(e["id"].as_str().unwrap()));
        // Both eras' payloads, ready to send.
        let p26 = &e["mcp"]["2026-07-28"];
        assert_eq!(p26["method"], "elicitation/create");
        assert_eq!(p26["params"]["mode"], "url");
        assert_eq!(p26["params"]["url"], e["url"]);
        assert!(p26["params"].get("elicitationId").is_none());
        assert!(p26["params"]["message"].as_str().unwrap().contains("Acme"));
        let p25 = &e["mcp"]["2025-11-25"];
        assert_eq!(p25["params"]["elicitationId"], e["id"]);
        assert_eq!(p25["error"]["code"], -32042);
        assert_eq!(p25["error"]["data"]["elicitations"][0], p25["params"]);

        // A waiting call with only the request state returns once the user has connected.
        let waiting = {
            let api = app.api.clone();
            let url = format!("{}/v1/tokens", app.url);
            let body = json!({"subject": "alice", "provider": "acme", "request_state": state, "wait_seconds": 30});
            tokio::spawn(async move {
                let r = api
                    .post(url)
                    .bearer_auth(API_KEY)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                (r.status(), r.json::<Value>().await.unwrap())
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiting.is_finished(),
            "the call waits while the elicitation is pending"
        );
        complete(&app, &e, "alice").await;
        let (s, t) = tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(s, StatusCode::OK, "{t}");
        let (who, me) = app.peers.whoami(t["access_token"].as_str().unwrap()).await;
        assert_eq!(who, StatusCode::OK);
        assert_eq!(me["sub"], "alice");

        // GET of the elicitation also carries a (fresh) state that works the same way.
        let (_, shown) = app
            .get(&format!("/v1/elicitations/{}", e["id"].as_str().unwrap()))
            .await;
        assert_eq!(shown["status"], "completed");
        let (s, _) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "request_state": shown["request_state"]}),
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        app.shutdown().await;
    }
);

on_both_databases!(
    tampered_expired_and_foreign_request_states_are_refused,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        app.connect("alice").await;
        let e = app.elicit("bob").await;
        let state = e["request_state"].as_str().unwrap().to_owned();
        let body = |subject: &str, rs: &str| json!({"subject": subject, "provider": "acme", "request_state": rs});

        // Tampered: one character changed.
        let mut t = state.clone().into_bytes();
        let i = t.len() - 5;
        t[i] = if t[i] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(t).unwrap();
        let (s, v) = app.post("/v1/tokens", body("bob", &tampered)).await;
        invalid_state(s, &v, "invalid");
        let (s, v) = app.post("/v1/tokens", body("bob", "forged.state")).await;
        invalid_state(s, &v, "invalid");

        // Foreign subject: bob's state presented for alice (who is connected) is refused, and
        // no token leaks.
        let (s, v) = app.post("/v1/tokens", body("alice", &state)).await;
        invalid_state(s, &v, "foreign");
        assert!(v.get("access_token").is_none());

        // Foreign client: another API client cannot use demo-mcp's state.
        let r = app
            .api
            .post(format!("{}/v1/tokens", app.url))
            .bearer_auth(OTHER_API_KEY)
            .json(&body("bob", &state))
            .send()
            .await
            .unwrap();
        let s = r.status();
        invalid_state(s, &r.json().await.unwrap(), "invalid");

        // Expired: a state sealed by this service's own keys for an elicitation that has expired.
        let mut row = app
            .db()
            .get_elicitation(e["id"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        row.expires_at = mcp_connect::time::now() - 1;
        let expired =
            mcp_connect::connect::request_state::seal(&app.state.config.keys, &row).unwrap();
        let (s, v) = app.post("/v1/tokens", body("bob", &expired)).await;
        invalid_state(s, &v, "expired");

        // Both ways of naming the elicitation at once is a plain invalid_request.
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "bob", "provider": "acme", "request_state": state, "elicitation_id": e["id"]}),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert_eq!(v["error"], "invalid_request");

        // The genuine state still works: bob is simply not connected yet.
        let (s, v) = app.post("/v1/tokens", body("bob", &state)).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
        assert_eq!(v["error"], "not_connected");
        let doc = app.get("/openapi.json").await.1;
        assert!(doc.to_string().contains("invalid_request_state"));
        app.shutdown().await;
    }
);

on_both_databases!(
    declined_elicitation_ends_a_request_state_wait_with_authorization_declined,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e = app.elicit("alice").await;
        decline(&app, &e, "alice").await;
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "elicit": true,
                       "request_state": e["request_state"], "wait_seconds": 5}),
            )
            .await;
        assert_eq!(s, StatusCode::CONFLICT, "{v}");
        assert_eq!(v["error"], "authorization_declined", "{v}");
        assert_eq!(v["elicitation_id"], e["id"]);
        app.shutdown().await;
    }
);

/// What the local webhook receiver saw.
#[derive(Default)]
struct Received {
    requests: Vec<(HeaderMap, Bytes)>,
    /// Answer 500 to this many requests first.
    fail_first: usize,
}

async fn receiver(fail_first: usize) -> (String, Arc<Mutex<Received>>) {
    let seen = Arc::new(Mutex::new(Received {
        fail_first,
        ..Default::default()
    }));
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let s = s.clone();
            async move {
                let mut r = s.lock().unwrap();
                r.requests.push((headers, body));
                if r.requests.len() <= r.fail_first {
                    AxStatus::INTERNAL_SERVER_ERROR
                } else {
                    AxStatus::NO_CONTENT
                }
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (url, seen)
}

async fn wait_for_requests(seen: &Arc<Mutex<Received>>, n: usize) -> Vec<(HeaderMap, Bytes)> {
    for _ in 0..200 {
        {
            let r = seen.lock().unwrap();
            if r.requests.len() >= n {
                return r.requests.clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "expected {n} webhook requests, got {}",
        seen.lock().unwrap().requests.len()
    );
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name).unwrap().to_str().unwrap()
}

on_both_databases!(
    webhooks_are_signed_retried_after_a_failure_and_carry_the_elicitation,
    |kind| async move {
        let (hook, seen) = receiver(1).await;
        let app = TestApp::spawn_with(
            kind,
            Options {
                demo_client_extra: format!(
                    "webhook_url = \"{hook}\"\nwebhook_secret = \"{WEBHOOK_SECRET}\""
                ),
                ..Options::default()
            },
        )
        .await;
        let e = app.elicit("alice").await;
        complete(&app, &e, "alice").await;

        // The first attempt got a 500; the retry (after about a second) succeeded.
        let reqs = wait_for_requests(&seen, 2).await;
        let (h1, b1) = &reqs[0];
        let (h2, b2) = &reqs[1];
        assert_eq!(
            header(h1, "webhook-id"),
            header(h2, "webhook-id"),
            "a retry keeps its id"
        );
        assert_eq!(b1, b2);
        assert!(header(h2, "webhook-signature").starts_with("v1,"));
        let verifier = Verifier::new(WEBHOOK_SECRET).unwrap();
        let ev = verifier.verify(h2, b2).expect("a valid signature");
        assert_eq!(ev.event_type, "elicitation.completed");
        assert_eq!(ev.data.subject, "alice");
        assert_eq!(ev.data.provider, "acme");
        assert_eq!(ev.data.client_id, "demo-mcp");
        assert_eq!(ev.data.elicitation_id.as_deref(), e["id"].as_str());
        let (_, shown) = app
            .get(&format!("/v1/elicitations/{}", e["id"].as_str().unwrap()))
            .await;
        assert_eq!(
            ev.data.connection_id.as_deref(),
            shown["connection_id"].as_str()
        );

        // A tampered body, a wrong secret or a stale timestamp does not verify.
        let mut forged = b2.to_vec();
        let at = forged.len() - 3;
        forged[at] ^= 1;
        assert_eq!(
            verifier.verify(h2, &forged).unwrap_err(),
            WebhookError::BadSignature
        );
        let wrong = Verifier::new("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").unwrap();
        assert_eq!(
            wrong.verify(h2, b2).unwrap_err(),
            WebhookError::BadSignature
        );
        let ts: i64 = header(h2, "webhook-timestamp").parse().unwrap();
        assert_eq!(
            verifier
                .verify_at(
                    header(h2, "webhook-id"),
                    &ts.to_string(),
                    header(h2, "webhook-signature"),
                    b2,
                    ts + 3600
                )
                .unwrap_err(),
            WebhookError::Stale
        );

        // The outbox recorded both attempts and the delivery (once the sender has read the
        // receiver's answer, which may be after the receiver saw the request).
        let mut recorded = (0, false);
        for _ in 0..100 {
            let (attempts, delivered, _) = app
                .db()
                .event_delivery(header(h2, "webhook-id"))
                .await
                .unwrap()
                .unwrap();
            recorded = (attempts, delivered);
            if delivered {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(recorded, (2, true));

        // Revoking the connection signals connection.revoked to this client too.
        let cid = shown["connection_id"].as_str().unwrap();
        let (s, _) = app.delete(&format!("/v1/connections/{cid}")).await;
        assert_eq!(s, StatusCode::OK);
        let reqs = wait_for_requests(&seen, 3).await;
        let ev = verifier.verify(&reqs[2].0, &reqs[2].1).unwrap();
        assert_eq!(ev.event_type, "connection.revoked");
        assert_eq!(ev.data.connection_id.as_deref(), Some(cid));
        assert_eq!(ev.data.subject, "alice");
        assert!(ev.data.elicitation_id.is_none());
        app.shutdown().await;
    }
);

on_both_databases!(undelivered_webhooks_survive_a_restart, |kind| async move {
    // The receiver is down (always 500) while the first app runs...
    let (hook, seen) = receiver(usize::MAX).await;
    let opts = Options {
        demo_client_extra: format!(
            "webhook_url = \"{hook}\"\nwebhook_secret = \"{WEBHOOK_SECRET}\""
        ),
        ..Options::default()
    };
    let app = TestApp::spawn_with(kind, opts.clone()).await;
    let e = app.elicit("alice").await;
    decline(&app, &e, "alice").await;
    let (h, _) = wait_for_requests(&seen, 1).await.remove(0);
    let id = header(&h, "webhook-id").to_owned();
    // Stop once the failed attempt is on record (the retry is then a second away).
    for _ in 0..50 {
        if app.db().event_delivery(&id).await.unwrap().unwrap().0 >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (db_url, peers, key) = app.stop_keeping_peers().await;
    let attempts_before = seen.lock().unwrap().requests.len();
    seen.lock().unwrap().fail_first = 0;
    // ...then a new process on the same database delivers what is still due.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app2 = TestApp::spawn_on(listener, peers, db_url, &Options { key, ..opts }).await;
    let reqs = wait_for_requests(&seen, attempts_before + 1).await;
    let (h, b) = reqs.last().unwrap();
    let ev = Verifier::new(WEBHOOK_SECRET).unwrap().verify(h, b).unwrap();
    assert_eq!(ev.event_type, "elicitation.declined");
    assert_eq!(ev.data.elicitation_id.as_deref(), e["id"].as_str());
    app2.shutdown().await;
});

/// Reads server-sent events until `want` has arrived; returns every (event, data) seen.
pub(crate) async fn read_events(
    mut resp: reqwest::Response,
    want: &str,
) -> (Vec<(String, Value, String)>, bool) {
    let mut buf = String::new();
    let mut got = Vec::new();
    let mut saw_comment = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, resp.chunk()).await {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut ev, mut data, mut id) = (String::new(), String::new(), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    ev = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim());
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().to_owned();
                } else if line.starts_with(':') {
                    saw_comment = true;
                }
            }
            if !ev.is_empty() {
                let done = ev == want;
                got.push((ev, serde_json::from_str(&data).unwrap(), id));
                if done {
                    return (got, saw_comment);
                }
            }
        }
    }
    panic!("no {want} event within 20 s; got {got:?}");
}

pub(crate) async fn open_stream(
    app: &TestApp,
    key: &str,
    last_event_id: Option<&str>,
) -> reqwest::Response {
    let mut req = app
        .api
        .get(format!("{}/v1/events", app.url))
        .bearer_auth(key);
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    let mut resp = req.send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    // Wait for the opening comment, so the stream is live before anything happens.
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).starts_with(':'));
    resp
}

on_both_databases!(
    event_stream_delivers_own_completions_only_and_resumes,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let r = app
            .api
            .get(format!("{}/v1/events", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

        let mine = open_stream(&app, API_KEY, None).await;
        let theirs = open_stream(&app, OTHER_API_KEY, None).await;
        let e = app.elicit("alice").await;
        complete(&app, &e, "alice").await;
        let (got, _) = read_events(mine, "elicitation.completed").await;
        let (_, data, id) = got.last().unwrap();
        assert_eq!(data["type"], "elicitation.completed");
        assert_eq!(data["data"]["elicitation_id"], e["id"]);
        assert_eq!(data["data"]["subject"], "alice");
        assert_eq!(data["data"]["provider"], "acme");
        assert!(data["data"]["connection_id"].is_string());

        // The other client hears nothing of demo-mcp's elicitation, nor of its grant's
        // revocation: the user approved demo-mcp only (issue 12), so other-mcp must not learn
        // that the grant exists.
        let cid = data["data"]["connection_id"].as_str().unwrap().to_owned();
        let (s, _) = app.delete(&format!("/v1/connections/{cid}")).await;
        assert_eq!(s, StatusCode::OK);
        drop(theirs);
        let (theirs_stored,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM events WHERE client_id = 'other-mcp'")
                .fetch_one(&app.db().pool)
                .await
                .unwrap();
        assert_eq!(theirs_stored, 0);

        // Resuming from before the completion replays it, then the revocation.
        let before: i64 = id.parse::<i64>().unwrap() - 1;
        let again = open_stream(&app, API_KEY, Some(&before.to_string())).await;
        let (replayed, _) = read_events(again, "connection.revoked").await;
        let kinds: Vec<&str> = replayed.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(kinds, ["elicitation.completed", "connection.revoked"]);

        // The client crate reads the same stream, typed.
        let connect = mcp_connect_client::Client::new(&app.url, API_KEY);
        let mut typed = connect.events(Some(before)).await.unwrap();
        let first = typed.next().await.unwrap().unwrap();
        assert_eq!(first.event.event_type, "elicitation.completed");
        assert_eq!(first.event.data.elicitation_id.as_deref(), e["id"].as_str());
        assert_eq!(first.id, before + 1);
        let second = typed.next().await.unwrap().unwrap();
        assert_eq!(second.event.event_type, "connection.revoked");
        assert_eq!(
            second.event.data.connection_id.as_deref(),
            Some(cid.as_str())
        );

        // Shutting down ends open streams instead of hanging on them.
        let open = open_stream(&app, API_KEY, None).await;
        tokio::time::timeout(Duration::from_secs(10), app.shutdown())
            .await
            .expect("shutdown is not held up by an open event stream");
        drop(open);
    }
);

on_both_databases!(
    operators_override_the_end_user_message_per_provider,
    |kind| async move {
        let opts = Options {
            other_provider: "display_name = \"Other Cloud\"\nauthorization_url = \"http://127.0.0.1:9/authorize\"\ntoken_url = \"http://127.0.0.1:9/token\"\nclient_id = \"x\"\nmessage = \"Connect your {provider} account so {client} can read your files.\"".into(),
            ..Options::default()
        };
        let app = TestApp::spawn_with(kind, opts).await;
        // The default message names the client and the provider.
        let e = app.elicit("alice").await;
        assert_eq!(
            e["message"],
            "Demo MCP needs access to your Acme account. Open the link to sign in and connect it."
        );
        // The operator's message, with its placeholders filled in, in every payload.
        let r = app
            .api
            .post(format!("{}/v1/elicitations", app.url))
            .bearer_auth(OTHER_API_KEY)
            .json(&json!({"subject": "alice", "provider": "other"}))
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        let want = "Connect your Other Cloud account so other-mcp can read your files.";
        assert_eq!(v["message"], want, "{v}");
        assert_eq!(v["mcp"]["2026-07-28"]["params"]["message"], want);
        assert_eq!(v["mcp"]["2025-11-25"]["params"]["message"], want);
        assert_eq!(
            v["mcp"]["2025-11-25"]["error"]["data"]["elicitations"][0]["message"],
            want
        );
        app.shutdown().await;
    }
);

/// Fails every insert into `table` (a database fault injected under the service).
async fn refuse_inserts(app: &TestApp, kind: DbKind, table: &str, on: bool) {
    let stmts: Vec<String> = match (kind, on) {
        (DbKind::Postgres, true) => vec![
            "CREATE OR REPLACE FUNCTION refuse_insert() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$ LANGUAGE plpgsql".into(),
            format!("CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION refuse_insert()"),
        ],
        (DbKind::Postgres, false) => vec![format!("DROP TRIGGER refuse_{table} ON {table}")],
        (DbKind::Sqlite, true) => vec![format!(
            "CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
        )],
        (DbKind::Sqlite, false) => vec![format!("DROP TRIGGER refuse_{table}")],
    };
    for s in stmts {
        sqlx::query(&s).execute(&app.db().pool).await.unwrap();
    }
}

on_both_databases!(
    a_change_its_audit_row_and_its_event_commit_together_or_not_at_all,
    |kind| async move {
        let (hook, seen) = receiver(0).await;
        let opts = Options {
            demo_client_extra: format!(
                "webhook_url = \"{hook}\"\nwebhook_secret = \"{WEBHOOK_SECRET}\""
            ),
            ..Options::default()
        };
        let app = TestApp::spawn_with(kind, opts).await;
        let id = app.connect("alice").await;
        let revoked_rows = || async {
            let (n,): (i64,) = sqlx::query_as(
                "SELECT COUNT(*) FROM audit_events WHERE event = 'connection.revoked' AND connection_id = $1",
            )
            .bind(&id)
            .fetch_one(&app.db().pool)
            .await
            .unwrap();
            n
        };
        for table in ["events", "audit_events"] {
            // The event (or the audit row) cannot be written: the revocation is not recorded
            // either, so the tokens are still there and nothing claims otherwise.
            refuse_inserts(&app, kind, table, true).await;
            let (s, v) = app.delete(&format!("/v1/connections/{id}")).await;
            assert!(s.is_server_error(), "{table}: {s} {v}");
            let c = app.db().get_connection(&id).await.unwrap().unwrap();
            assert_eq!(c.status.as_str(), "active", "{table}");
            assert!(
                app.db()
                    .raw_connection_secrets(&id)
                    .await
                    .unwrap()
                    .0
                    .is_some()
            );
            assert_eq!(revoked_rows().await, 0, "{table}");
            refuse_inserts(&app, kind, table, false).await;
        }
        let before = seen.lock().unwrap().requests.len();
        let (s, v) = app.delete(&format!("/v1/connections/{id}")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(revoked_rows().await, 1);
        let reqs = wait_for_requests(&seen, before + 1).await;
        let (h, b) = reqs.last().unwrap();
        let ev = Verifier::new(WEBHOOK_SECRET).unwrap().verify(h, b).unwrap();
        assert_eq!(ev.event_type, "connection.revoked");
        app.shutdown().await;
    }
);

/// A replica is killed (SIGKILL) right after a revocation committed, before its webhook could
/// be delivered (the receiver was down): the event was stored with the change, so a process
/// started afterwards on the same database delivers it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_committed_before_a_kill_is_delivered_after_it() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let hook = format!("http://127.0.0.1:{port}/hook");
    let opts = Options {
        demo_client_extra: format!(
            "webhook_url = \"{hook}\"\nwebhook_secret = \"{WEBHOOK_SECRET}\""
        ),
        ..Options::default()
    };
    let app = TestApp::spawn_with(DbKind::Postgres, opts.clone()).await;
    let id = app.connect("alice").await;
    let (replica, mut child) = app.spawn_replica_process(&opts).await;
    let (db_url, peers, key) = app.stop_keeping_peers().await;

    let r = reqwest::Client::new()
        .delete(format!("{replica}/v1/connections/{id}"))
        .bearer_auth(API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    child.kill().await.unwrap();

    // The receiver comes up; a new process on the same database delivers what is due.
    let seen: Arc<Mutex<Vec<(HeaderMap, Bytes)>>> = Arc::default();
    let s = seen.clone();
    let hook_app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push((headers, body));
                AxStatus::NO_CONTENT
            }
        }),
    );
    let l = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(l, hook_app).await.unwrap() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app2 = TestApp::spawn_on(listener, peers, db_url, &Options { key, ..opts }).await;
    let mut revoked = Vec::new();
    for _ in 0..900 {
        revoked = seen
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(h, b)| Verifier::new(WEBHOOK_SECRET).unwrap().verify(h, b).ok())
            .filter(|ev| ev.event_type == "connection.revoked")
            .map(|ev| ev.data.connection_id.clone())
            .collect::<Vec<_>>();
        if !revoked.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(revoked, vec![Some(id.clone())]);
    // Once: a second look a moment later finds no duplicate.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ids: std::collections::HashSet<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(h, _)| header(h, "webhook-id").to_owned())
        .collect();
    assert_eq!(
        ids.len(),
        seen.lock().unwrap().len(),
        "no event delivered twice"
    );
    app2.shutdown().await;
}
