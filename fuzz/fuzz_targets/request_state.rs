//! The `request_state` opener: MCP clients echo it back, so it is attacker-controlled. Arbitrary
//! strings must be refused with `invalid_request_state`, never a panic. Since nobody can forge
//! AES-GCM, a second mode seals the fuzzer's bytes as the claims with the real key, so the claims
//! reader behind the authentication check is exercised too.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcp_connect::crypto::KeyRing;
use mcp_connect::error::Error;
use mcp_connect::ids::UserRef;
use mcp_connect::connect::request_state::{Expected, open};
use secrecy::SecretString;

fn keys() -> &'static KeyRing {
    static K: OnceLock<KeyRing> = OnceLock::new();
    K.get_or_init(|| {
        KeyRing::parse(&[SecretString::from(
            "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".to_owned(),
        )])
        .expect("a valid fixed key")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let want = Expected {
        client_id: "demo",
        user: UserRef::new("https://id.example", "alice"),
        provider: "acme",
        now: 1_000,
    };
    let sealed = if mode & 1 == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        keys()
            .seal(rest, "mcp-connect/v1/request-state/demo")
            .expect("sealing in memory")
    };
    match open(keys(), &sealed, &want) {
        Ok(rs) => assert!(rs.expires_at > want.now),
        Err(Error::InvalidRequestState(r)) => {
            assert!(matches!(r.reason(), "invalid" | "foreign" | "expired"))
        }
        Err(other) => panic!("unexpected error kind: {other:?}"),
    }
});
