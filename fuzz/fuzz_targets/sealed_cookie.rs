//! Cookie and sealed-value decoding: the browser session cookie (its header, parsed by the
//! `cookie` crate, and the session id that tower-sessions reads from it) and `KeyRing::open`,
//! which opens every sealed value the service hands out or stores (sealed cookies, tokens,
//! PKCE verifiers). Arbitrary input is refused, never a panic; what is sealed opens back.
#![no_main]

use std::str::FromStr;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcp_connect::crypto::KeyRing;
use secrecy::{ExposeSecret, SecretString};
use tower_sessions::cookie::Cookie;
use tower_sessions::session::Id;

fn keys() -> &'static KeyRing {
    static K: OnceLock<KeyRing> = OnceLock::new();
    K.get_or_init(|| {
        KeyRing::parse(&[
            SecretString::from("new:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".to_owned()),
            SecretString::from("old:HxwdHhsaGRgXFhUUExIREA8ODQwLCgkIBwYFBAMCAQA=".to_owned()),
        ])
        .expect("valid fixed keys")
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // A Cookie header as a browser (or an attacker) sends it.
    for c in Cookie::split_parse(text.as_ref()).flatten() {
        let _ = Id::from_str(c.value());
        let _ = keys().open(c.value(), "mcp-connect/v1/cookie");
    }
    let _ = Id::from_str(&text);
    // A sealed value, split at the first NUL into value and associated data.
    let (sealed, aad) = text.split_once('\0').unwrap_or((text.as_ref(), "aad"));
    let _ = KeyRing::key_id_of(sealed);
    let _ = keys().open(sealed, aad);
    let _ = keys().open_string(sealed, aad);
    // Sealing then opening gives the same bytes back, only with the same associated data.
    let s = keys().seal(data, aad).expect("sealing in memory");
    assert_eq!(keys().open(&s, aad).ok().as_deref(), Some(data));
    assert!(keys().open(&s, &format!("{aad}x")).is_err());
    if let Ok(v) = keys().open_string(&s, aad) {
        assert_eq!(v.expose_secret().as_bytes(), data);
    }
});
