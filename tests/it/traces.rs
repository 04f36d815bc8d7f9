//! Traces over OTLP: the real binary (`serve`, `otlp_endpoint` set) exports to a small OTLP/HTTP
//! receiver here that decodes what it is sent. A request carrying a W3C `traceparent` joins the
//! caller's trace; the provider call it makes is a client span under it; nothing secret is in
//! any span; the last batch leaves when the process stops; the log filter hides no span from
//! the exporter and the exporter turns on no debug log.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message as _;
use reqwest::StatusCode;
use serde_json::json;

use crate::harness::*;
use crate::on_both_databases;

/// The caller's trace and span (what a `traceparent` names).
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";

/// What the receiver was sent: every export request, decoded, and the paths they came to.
#[derive(Default)]
struct Received {
    exports: Vec<ExportTraceServiceRequest>,
    paths: Vec<String>,
}

/// An OTLP/HTTP receiver (protobuf) on port 0: it decodes each export and answers as a
/// collector does. Returns its base URL (what `otlp_endpoint` takes).
async fn otlp_receiver() -> (String, Arc<Mutex<Received>>) {
    let got = Arc::new(Mutex::new(Received::default()));
    let state = got.clone();
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let state = state.clone();
            async move {
                assert_eq!(
                    headers.get("content-type").and_then(|v| v.to_str().ok()),
                    Some("application/x-protobuf"),
                );
                let export = ExportTraceServiceRequest::decode(body).unwrap();
                let mut s = state.lock().unwrap();
                s.exports.push(export);
                s.paths.push(uri.path().to_owned());
                (
                    [("content-type", "application/x-protobuf")],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
        },
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    (url, got)
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        }
    })
}

fn int_attr(attrs: &[KeyValue], key: &str) -> Option<i64> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref() {
            Some(AnyValue {
                value: Some(any_value::Value::IntValue(i)),
            }) => Some(*i),
            _ => None,
        })
}

on_both_databases!(
    spans_join_the_callers_trace_and_hold_no_secret,
    |kind| async move {
        // Upstream tokens live 120 s: asking for 300 s makes the replica refresh at the provider.
        let opts = Options {
            access_token_ttl: 120,
            ..Options::default()
        };
        let app = TestApp::spawn_with(kind, opts.clone()).await;
        app.connect("alice").await;
        let (_, before) = app.token("alice").await;
        let (receiver, got) = otlp_receiver().await;

        // The real binary, its log on a file of its own.
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        let toml = config_toml(
            &url,
            &app.db_url,
            &app.peers,
            &Options {
                key: app.key.clone(),
                ..opts
            },
        );
        std::fs::write(&config, testkit::process::listening_on(&toml, port)).unwrap();
        let log_path = dir.path().join("stderr.log");
        let mut child =
            testkit::process::serve(env!("CARGO_BIN_EXE_mcp-connect").as_ref(), &config)
                .env("MCP_CONNECT_OTLP_ENDPOINT", &receiver)
                // The logs want warnings only: the exporter must still get the info-level request
                // spans and the debug-level outbound ones.
                .env("MCP_CONNECT_LOG", "warn")
                // No batch leaves on a timer during the test: what arrives was flushed at shutdown.
                .env("OTEL_BSP_SCHEDULE_DELAY", "600000")
                .stderr(std::fs::File::create(&log_path).unwrap())
                .spawn()
                .unwrap();
        assert!(
            testkit::process::wait_ready(&url, 200, Duration::from_millis(50)).await,
            "the process did not become ready: {}",
            testkit::process::log_tail(&log_path, 20)
        );

        // Past the "just refreshed" window, so the replica asks the provider.
        app.age("alice").await;
        let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01");
        let (s, t) = reply(
            app.api
                .post(format!("{url}/v1/tokens"))
                .bearer_auth(API_KEY)
                .header("traceparent", &traceparent)
                // Only the trace context is taken from the caller.
                .header("tracestate", "vendor=caller-state")
                .header("baggage", "user=caller-baggage")
                .json(&json!({"subject": "alice", "provider": "acme", "min_ttl_seconds": 300})),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_ne!(
            t["access_token"], before["access_token"],
            "no refresh happened"
        );
        // A request without a trace of its own, whose query must not be recorded.
        let r = app
            .api
            .get(format!("{url}/readyz?code=query-code-secret"))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        assert!(
            got.lock().unwrap().exports.is_empty(),
            "exported before shutdown although the batch timer is off"
        );

        // A graceful stop: the guard exports the waiting batch.
        let pid = child.id().unwrap().to_string();
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(killed.success());
        let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .expect("the process did not stop after SIGTERM")
            .unwrap();
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert!(exit.success(), "{exit:?}\n{log}");
        // The exporter wants debug-level spans; the logs still say only what `warn` lets through.
        for level in ["DEBUG", "INFO", "TRACE"] {
            assert!(
                !log.lines().any(|l| l.contains(&format!(" {level} "))),
                "{level} in a log filtered to warnings:\n{log}"
            );
        }

        let got = std::mem::take(&mut *got.lock().unwrap());
        assert!(
            got.paths.iter().all(|p| p == "/v1/traces"),
            "{:?}",
            got.paths
        );
        let spans: Vec<&Span> = got
            .exports
            .iter()
            .flat_map(|e| &e.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .collect();
        assert!(
            got.exports
                .iter()
                .flat_map(|e| &e.resource_spans)
                .all(
                    |r| attr(&r.resource.as_ref().unwrap().attributes, "service.name")
                        == Some("mcp-connect")
                ),
        );

        // The request's span is a server span in the caller's trace, the caller's span its
        // parent.
        let server = spans
            .iter()
            .find(|s| {
                s.kind == SpanKind::Server as i32
                    && attr(&s.attributes, "path") == Some("/v1/tokens")
            })
            .unwrap_or_else(|| panic!("no server span for /v1/tokens in {spans:#?}"));
        assert_eq!(hex::encode(&server.trace_id), TRACE_ID);
        assert_eq!(hex::encode(&server.parent_span_id), PARENT_SPAN_ID);
        assert_eq!(attr(&server.attributes, "method"), Some("POST"));
        assert_eq!(int_attr(&server.attributes, "status"), Some(200));
        assert!(server.trace_state.is_empty(), "{:?}", server.trace_state);

        // The refresh at the provider is a client span, the request's child (beside, perhaps,
        // the discovery of the provider's endpoints).
        let under: Vec<&&Span> = spans
            .iter()
            .filter(|s| s.kind == SpanKind::Client as i32 && s.parent_span_id == server.span_id)
            .collect();
        let client = under
            .iter()
            .find(|s| attr(&s.attributes, "method") == Some("POST"))
            .unwrap_or_else(|| panic!("no client span POSTing under the request in {spans:#?}"));
        assert_eq!(client.trace_id, server.trace_id);
        assert_eq!(client.name, "outbound");
        assert_eq!(attr(&client.attributes, "host"), Some("127.0.0.1"));
        let client_path = attr(&client.attributes, "path").unwrap();
        assert!(client_path.ends_with("token"), "{client_path}");
        for s in &under {
            let p = attr(&s.attributes, "path").unwrap();
            assert!(p.starts_with('/') && !p.contains('?'), "{p}");
        }
        assert_eq!(
            int_attr(&client.attributes, "status"),
            Some(200),
            "{client:#?}"
        );
        assert!(client.start_time_unix_nano >= server.start_time_unix_nano);
        assert!(client.end_time_unix_nano <= server.end_time_unix_nano);

        // A request without `traceparent` starts a trace of its own.
        let ready = spans
            .iter()
            .find(|s| attr(&s.attributes, "path") == Some("/readyz"))
            .unwrap_or_else(|| panic!("no span for /readyz in {spans:#?}"));
        assert_ne!(hex::encode(&ready.trace_id), TRACE_ID);
        assert!(ready.parent_span_id.is_empty());

        // Nothing secret anywhere in what was exported: names, attributes, events, resource.
        let everything = format!("{:?}", got.exports);
        let mut secrets: Vec<String> = vec![
            API_KEY.into(),
            OTHER_API_KEY.into(),
            UPSTREAM_SECRET.into(),
            IDENTITY_SECRET.into(),
            app.key.clone(),
            "query-code-secret".into(),
            "caller-state".into(),
            "caller-baggage".into(),
        ];
        for v in [&before, &t] {
            for k in ["access_token", "refresh_token"] {
                if let Some(s) = v[k].as_str() {
                    secrets.push(s.to_owned());
                }
            }
        }
        for secret in &secrets {
            assert!(
                !everything.contains(secret.as_str()),
                "a secret was exported"
            );
        }
        app.shutdown().await;
    }
);
