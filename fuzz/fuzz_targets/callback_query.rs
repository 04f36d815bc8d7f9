//! The callback query parser of `/auth/callback` and `/oauth/{provider}/callback`: the query
//! string is whatever the browser brings back (the issuer's or provider's redirect, or anything a
//! stranger types). It is read by axum's `Query` extractor into `CallbackQuery`; arbitrary
//! strings give a value or a rejection (a 400 page), never a panic.
#![no_main]

use axum::extract::Query;
use axum::http::Uri;
use libfuzzer_sys::fuzz_target;
use mcp_connect::web::flow::CallbackQuery;

fuzz_target!(|data: &[u8]| {
    let q = String::from_utf8_lossy(data);
    for path in ["/auth/callback", "/oauth/sandbox/callback"] {
        let Ok(uri) = format!("{path}?{q}").parse::<Uri>() else {
            continue;
        };
        if let Ok(Query(c)) = Query::<CallbackQuery>::try_from_uri(&uri) {
            // What the handlers read from it.
            let _ = (c.code.as_deref(), c.iss.as_deref(), c.error.as_deref());
            if let Some(s) = c.state.as_deref() {
                let _ = mcp_connect::crypto::sha256_b64(s.as_bytes());
            }
        }
    }
});
