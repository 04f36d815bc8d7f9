use super::*;
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::json;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Key {
    kid: String,
    enc: EncodingKey,
    jwk: Value,
}

fn key(kid: &str) -> Key {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let p = pair.public_key().as_ref();
    Key {
        kid: kid.into(),
        enc: EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk: json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(&p[1..33]), "y": URL_SAFE_NO_PAD.encode(&p[33..65])}),
    }
}

/// A stub issuer: discovery, and a JWKS whose keys, `Cache-Control` and size the test sets.
#[derive(Default)]
struct Stub {
    issuer: Mutex<String>,
    keys: Mutex<Vec<Value>>,
    cache_control: Mutex<Option<String>>,
    padding: Mutex<usize>,
    fetches: AtomicUsize,
}

async fn discovery(State(s): State<Arc<Stub>>) -> Json<Value> {
    let iss = s.issuer.lock().unwrap().clone();
    Json(
        json!({"issuer": iss, "authorization_endpoint": format!("{iss}/authorize"),
        "token_endpoint": format!("{iss}/token"), "jwks_uri": format!("{iss}/jwks")}),
    )
}

async fn jwks(State(s): State<Arc<Stub>>) -> axum::response::Response {
    s.fetches.fetch_add(1, Ordering::SeqCst);
    let body = json!({"keys": s.keys.lock().unwrap().clone(),
        "padding": "x".repeat(*s.padding.lock().unwrap())});
    let mut r = Json(body).into_response();
    if let Some(cc) = s.cache_control.lock().unwrap().clone() {
        r.headers_mut()
            .insert(header::CACHE_CONTROL, cc.parse().unwrap());
    }
    r
}

async fn start() -> (Arc<Stub>, Identity) {
    let stub = Arc::new(Stub::default());
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(discovery),
        )
        .route("/jwks", axum::routing::get(jwks))
        .with_state(stub.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", l.local_addr().unwrap());
    *stub.issuer.lock().unwrap() = issuer.clone();
    tokio::spawn(async move { axum::serve(l, app).await });
    let id = Identity::new(
        IdentityConfig {
            issuer,
            client_id: "mcp-connect".into(),
            client_secret: None,
            scopes: vec!["openid".into()],
            access_token_typ: None,
            organization_claim: None,
            organization_admin_claim: None,
            organization_admin_values: vec![],
        },
        crate::outbound::http::build(crate::config::ssrf::Policy::new(vec![
            crate::config::IpNet::parse("127.0.0.0/8").unwrap(),
        ]))
        .unwrap(),
    );
    (stub, id)
}

fn id_token(id: &Identity, k: &Key) -> String {
    let mut h = Header::new(Algorithm::ES256);
    h.kid = Some(k.kid.clone());
    let now = crate::time::now();
    jsonwebtoken::encode(
        &h,
        &json!({"iss": id.issuer(), "aud": "mcp-connect", "sub": "alice", "nonce": "n",
            "iat": now, "exp": now + 300}),
        &k.enc,
    )
    .unwrap()
}

#[tokio::test]
async fn a_withdrawn_key_stops_validating_after_the_jwks_ttl() {
    let (stub, mut id) = start().await;
    id.jwks_ttl_bounds = (Duration::ZERO, JWKS_TTL_MAX);
    let (old, new) = (key("old"), key("new"));
    *stub.keys.lock().unwrap() = vec![old.jwk.clone()];
    *stub.cache_control.lock().unwrap() = Some("public, max-age=1".into());
    id.verify_id_token(&id_token(&id, &old), "n").await.unwrap();
    // The issuer withdraws the old key and publishes a new one.
    *stub.keys.lock().unwrap() = vec![new.jwk.clone()];
    id.verify_id_token(&id_token(&id, &old), "n")
        .await
        .expect("still cached within max-age");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let e = id
        .verify_id_token(&id_token(&id, &old), "n")
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("no key"), "{e:#}");
    id.verify_id_token(&id_token(&id, &new), "n").await.unwrap();
}

#[tokio::test]
async fn jwks_ttl_is_bounded_and_unknown_kids_refetch_at_most_once_per_interval() {
    let (stub, id) = start().await;
    let k = key("k");
    *stub.keys.lock().unwrap() = vec![k.jwk.clone()];
    // max-age=0 is raised to the minimum: no refetch per sign-in.
    *stub.cache_control.lock().unwrap() = Some("max-age=0".into());
    for _ in 0..3 {
        id.verify_id_token(&id_token(&id, &k), "n").await.unwrap();
    }
    assert_eq!(stub.fetches.load(Ordering::SeqCst), 1);
    // Forged tokens with unknown kids: no more than one refetch per interval.
    let forged = key("forged");
    for _ in 0..5 {
        assert!(
            id.verify_id_token(&id_token(&id, &forged), "n")
                .await
                .is_err()
        );
    }
    assert_eq!(stub.fetches.load(Ordering::SeqCst), 1);
    assert_eq!(
        crate::outbound::http::max_age(&{
            let mut h = reqwest::header::HeaderMap::new();
            h.insert("cache-control", "public, max-age=3600".parse().unwrap());
            h
        }),
        Some(Duration::from_secs(3600))
    );
}

/// A token of `id`'s issuer signed with `k`, with `claims` over the usual ones and `header`
/// members added to the protected header.
fn signed(id: &Identity, k: &Key, claims: Value, header: Value) -> String {
    let now = crate::time::now();
    let mut body = json!({"iss": id.issuer(), "sub": "alice", "iat": now, "exp": now + 300});
    for (name, v) in claims.as_object().unwrap() {
        body[name] = v.clone();
    }
    let mut h = json!({"alg": "ES256", "kid": k.kid});
    for (name, v) in header.as_object().unwrap() {
        h[name] = v.clone();
    }
    // The JWT library's header has no `crit`: sign by hand what it would sign.
    let head = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&h).unwrap());
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&body).unwrap());
    let input = format!("{head}.{payload}");
    let sig = jsonwebtoken::crypto::sign(input.as_bytes(), &k.enc, Algorithm::ES256).unwrap();
    format!("{input}.{sig}")
}

#[tokio::test]
async fn tokens_not_yet_valid_or_with_critical_extensions_are_refused() {
    let (stub, id) = start().await;
    let k = key("k");
    *stub.keys.lock().unwrap() = vec![k.jwk.clone()];
    let tomorrow = crate::time::now() + 86_400;
    let id_claims = |extra: Value| {
        let mut c = json!({"aud": "mcp-connect", "nonce": "n"});
        for (name, v) in extra.as_object().unwrap() {
            c[name] = v.clone();
        }
        c
    };
    // The baseline passes, so each refusal below is for the one thing changed.
    let ok = signed(&id, &k, id_claims(json!({})), json!({}));
    id.verify_id_token(&ok, "n").await.unwrap();
    let at = signed(
        &id,
        &k,
        json!({"aud": "https://mcp"}),
        json!({"typ": "at+jwt"}),
    );
    assert_eq!(
        id.verify_access_token(&at, "https://mcp")
            .await
            .unwrap()
            .subject,
        "alice"
    );

    let later = signed(
        &id,
        &k,
        id_claims(json!({"nbf": tomorrow, "exp": tomorrow + 300})),
        json!({}),
    );
    assert!(id.verify_id_token(&later, "n").await.is_err());
    let later = signed(
        &id,
        &k,
        json!({"aud": "https://mcp", "nbf": tomorrow, "exp": tomorrow + 300}),
        json!({}),
    );
    assert!(matches!(
        id.verify_access_token(&later, "https://mcp").await,
        Err(SubjectTokenError::Refused(
            SubjectTokenRefusal::NotYetValid,
            _
        ))
    ));

    let crit = json!({"crit": ["exp-unknown"], "exp-unknown": true});
    let e = id
        .verify_id_token(&signed(&id, &k, id_claims(json!({})), crit.clone()), "n")
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("crit"), "{e:#}");
    assert!(matches!(
        id.verify_access_token(
            &signed(&id, &k, json!({"aud": "https://mcp"}), crit),
            "https://mcp"
        )
        .await,
        Err(SubjectTokenError::Refused(
            SubjectTokenRefusal::Malformed,
            _
        ))
    ));

    // An access token is never taken for an ID token.
    let e = id
        .verify_id_token(
            &signed(&id, &k, id_claims(json!({})), json!({"typ": "at+jwt"})),
            "n",
        )
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("at+jwt"), "{e:#}");
}

#[tokio::test]
async fn the_access_token_typ_is_required_where_the_issuer_sets_it() {
    let (stub, mut id) = start().await;
    let k = key("k");
    *stub.keys.lock().unwrap() = vec![k.jwk.clone()];
    let token = |typ: Option<&str>| {
        let h = typ.map_or(json!({}), |t| json!({ "typ": t }));
        signed(&id, &k, json!({"aud": "https://mcp"}), h)
    };
    let (plain, jwt, at, long) = (
        token(None),
        token(Some("JWT")),
        token(Some("at+jwt")),
        token(Some("application/AT+JWT")),
    );
    // Not configured: typ is not looked at.
    for t in [&plain, &jwt, &at] {
        id.verify_access_token(t, "https://mcp").await.unwrap();
    }
    id.config.access_token_typ = Some("at+jwt".into());
    for t in [&plain, &jwt] {
        assert!(matches!(
            id.verify_access_token(t, "https://mcp").await,
            Err(SubjectTokenError::Refused(SubjectTokenRefusal::Type, _))
        ));
    }
    for t in [&at, &long] {
        id.verify_access_token(t, "https://mcp").await.unwrap();
    }
    assert!(typ_is("application/at+jwt", "at+jwt"));
    assert!(!typ_is("jwt", "at+jwt"));
}

#[tokio::test]
async fn an_oversized_jwks_is_refused() {
    let (stub, id) = start().await;
    let k = key("k");
    *stub.keys.lock().unwrap() = vec![k.jwk.clone()];
    *stub.padding.lock().unwrap() = crate::outbound::http::MAX_RESPONSE_BYTES;
    let e = id
        .verify_id_token(&id_token(&id, &k), "n")
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("larger than"), "{e:#}");
    *stub.padding.lock().unwrap() = 0;
    id.verify_id_token(&id_token(&id, &k), "n").await.unwrap();
}

/// The reasons are what audit rows and the security log say: each keeps its name.
#[test]
fn subject_token_refusals_keep_their_audit_names() {
    let names: Vec<_> = SubjectTokenRefusal::ALL
        .iter()
        .map(|r| r.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "missing",
            "malformed",
            "algorithm",
            "type",
            "signature",
            "expired",
            "audience",
            "issuer",
            "not_yet_valid",
            "claims",
            "inactive",
            "other_subject",
        ]
    );
}
