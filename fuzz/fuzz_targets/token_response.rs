//! The provider token-response parser: whatever a token endpoint answers (status, body, content
//! type) becomes a grant or an error, never a panic; a grant always has a non-empty access token
//! and a positive lifetime if any.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_connect::providers::tokens::{parse_token_set, read_token_response};
use secrecy::ExposeSecret;

fuzz_target!(|data: &[u8]| {
    let Some((&head, body)) = data.split_first() else {
        return;
    };
    // One byte picks the status class and the content type.
    let status = [200, 201, 204, 302, 400, 401, 404, 429, 500, 503][usize::from(head % 10)];
    let is_form = head & 0x80 != 0;
    if let Ok(t) = read_token_response(status, body, is_form) {
        assert!((200..300).contains(&status));
        assert!(!t.access_token.expose_secret().is_empty());
        assert!(t.expires_in.is_none_or(|s| s > 0));
    }
    // The JSON reader directly, for bodies that are JSON.
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Ok(t) = parse_token_set(&v) {
            assert!(!t.access_token.expose_secret().is_empty());
        }
    }
});
