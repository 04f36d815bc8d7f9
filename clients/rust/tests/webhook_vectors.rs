//! The webhook vectors the Python and TypeScript clients verify (clients/testdata) are what the
//! service signs: its own signing function produces each signature, and this crate's Verifier
//! accepts it. A change to how the service signs fails here before it breaks a receiver.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mcp_connect_client::webhooks::Verifier;

#[test]
fn the_shared_vectors_are_signed_by_the_service_and_verify() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/webhook-vectors.json"
    ))
    .unwrap();
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let vectors = file["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 2);
    for v in vectors {
        let s = |k: &str| v[k].as_str().unwrap().to_owned();
        let key = STANDARD
            .decode(s("secret").strip_prefix("whsec_").unwrap())
            .unwrap();
        let ts: i64 = s("webhook_timestamp").parse().unwrap();
        assert_eq!(
            mcp_connect::signals::events::sign(&key, &s("webhook_id"), ts, &s("body")),
            s("signature"),
            "the service signs {} this way",
            s("webhook_id")
        );
        Verifier::new(&s("secret"))
            .unwrap()
            .verify_at(
                &s("webhook_id"),
                &s("webhook_timestamp"),
                &s("signature"),
                s("body").as_bytes(),
                ts,
            )
            .unwrap();
    }
    // The last is an event as the service sends it now: it names the account.
    let last = vectors.last().unwrap()["body"].as_str().unwrap();
    let event: mcp_connect_client::webhooks::Event = serde_json::from_str(last).unwrap();
    assert_eq!(event.event_type, "elicitation.completed");
    assert_eq!(
        event.data.account.map(|a| a.id),
        Some("alice-work".to_owned())
    );
}
