//! The JSON API for MCP servers under `/v1`: bearer API keys, JSON errors.

pub mod connections;
pub mod elicitations;
pub mod error;
pub mod events;
pub mod oauth;
pub mod openapi;
pub mod proxy;
pub mod tokens;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request};
use axum::handler::Handler as _;
use axum::http::header;
use axum::http::request::Parts;
use axum::routing::{any, delete, get, post};
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::api::error::ApiError;
use crate::config::ClientConfig;
use crate::crypto::sha256;
use crate::error::{Error, Refusal};
use crate::server::edge::Edge;

/// API request bodies are small; anything bigger is refused before parsing.
const MAX_BODY: usize = 16 * 1024;

/// The API's routes, each handler behind its own edge with its deadline: the request timeout,
/// the longest wait on top of it for the routes that may long-poll, none for the event stream
/// (it ends with the service). The edge goes on the handler (`Handler::layer`) rather than on
/// the router: the route then boxes one service and one future per request instead of two. A
/// method a route does not have is answered 405 by axum before any edge.
pub fn router(state: AppState) -> Router {
    let base = Duration::from_secs(state.config.limits.request_timeout_seconds);
    let long_poll = base + Duration::from_secs(elicitations::MAX_WAIT_SECONDS);
    let proxy_deadline = Duration::from_secs(state.config.limits.proxy_timeout_seconds) + base;
    let edge = |deadline: Option<Duration>| Edge::new(&state).deadline(deadline).for_handler();
    // The body limit goes in with the edge: one layer per handler, not two.
    let limited = |deadline: Option<Duration>| {
        tower::ServiceBuilder::new()
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .layer(edge(deadline))
    };
    let at = Some(base);
    Router::new()
        .route(
            "/v1/elicitations",
            post(elicitations::create.layer(limited(at))),
        )
        .route("/v1/connections", get(connections::list.layer(limited(at))))
        .route(
            "/v1/connections/{id}",
            delete(connections::revoke.layer(limited(at))),
        )
        .route("/openapi.json", get(openapi::document.layer(limited(at))))
        .route(
            "/oauth2/token",
            post(oauth::exchange::exchange.layer(limited(at))),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(oauth::metadata::document.layer(limited(at))),
        )
        .route(
            "/v1/elicitations/{id}",
            get(elicitations::show.layer(limited(Some(long_poll)))),
        )
        .route(
            "/v1/tokens",
            post(tokens::fetch.layer(limited(Some(long_poll)))),
        )
        // No body limit: the proxy streams bodies within its own (`[limits] proxy_*`). Its
        // deadline covers the provider's answer starting (a refresh first, perhaps); the body
        // streams after it, bounded by `proxy_timeout_seconds`.
        .route(
            "/v1/proxy/{provider}/{*path}",
            any(proxy::forward.layer(edge(Some(proxy_deadline)))),
        )
        .route("/v1/events", get(events::stream.layer(limited(None))))
        .with_state(state)
}

/// The authenticated API client (from `Authorization: Bearer <api key>`).
#[derive(Debug, Clone)]
pub struct ApiClient(pub Arc<ClientConfig>);

impl FromRequestParts<AppState> for ApiClient {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Self::admit(parts, state, Self::authenticate(parts, state))
    }
}

impl ApiClient {
    /// Applies the limits to an authentication's outcome, whichever scheme it used (a bearer
    /// key here, HTTP Basic at the token endpoint).
    pub(crate) fn admit(
        parts: &Parts,
        state: &AppState,
        client: Result<Self, Error>,
    ) -> Result<Self, ApiError> {
        match &client {
            // A valid key is never refused by the failed-authentication limit: others failing
            // from the same address (a NAT, an ingress, a node) must not lock its owner out.
            Ok(c) => state.limits.check_api(&c.0.id)?,
            // A wrong key is a guess: an address over the limit is refused (429, so it learns
            // nothing more about its guesses), and each one counts. A request without
            // credentials guesses nothing (and probes of the API's 401 must not lock out).
            Err(_) if parts.headers.contains_key(header::AUTHORIZATION) => {
                let ip = state.limits.client_ip(
                    crate::server::limits::peer_ip(&parts.extensions),
                    &parts.headers,
                );
                state.limits.check_auth_allowed(ip)?;
                state.limits.auth_failed(ip)
            }
            Err(_) => {}
        }
        Ok(client?)
    }

    fn authenticate(parts: &Parts, state: &AppState) -> Result<Self, Error> {
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .ok_or(Error::Unauthorized)?;
        let hash = sha256(presented.as_bytes());
        state
            .clients
            .by_key_sha256(&hash)
            .map(|c| ApiClient(c.clone()))
            .ok_or(Error::Unauthorized)
    }

    /// The provider, if this client may use it.
    pub fn provider<'a>(
        &self,
        state: &'a AppState,
        name: &str,
    ) -> Result<&'a Arc<crate::providers::Provider>, Error> {
        state.connect.provider_for_client(&self.0, name)
    }
}

/// JSON body whose rejections are our JSON errors (400 with a message, 413 for too large).
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Error> {
        // The usual request says `application/json` exactly and parses: checked by a byte
        // comparison and parsed without tracking the path, which only an error message needs.
        // Anything else goes through axum's extractor, whose rejections name what is wrong.
        let plain_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"application/json"));
        if !plain_json {
            return axum::Json::<T>::from_request(req, state)
                .await
                .map(|axum::Json(v)| Self(v))
                .map_err(json_rejection);
        }
        let bytes = small_body(req).await?;
        match serde_json::from_slice(&bytes) {
            Ok(v) => Ok(Self(v)),
            Err(_) => axum::Json::<T>::from_bytes(&bytes)
                .map(|axum::Json(v)| Self(v))
                .map_err(json_rejection),
        }
    }
}

/// The most headers an API answer carries: its content type, the five security headers,
/// `Strict-Transport-Security`, the request id and a refusal's `Connection: close`.
const ANSWER_HEADERS: usize = 9;

/// As an answer: the value as a JSON body (`Content-Type: application/json`). Written into one
/// buffer sized for a token answer, so the common answer grows it at most once (axum's `Json`
/// starts at 128 bytes and writes through a `BytesMut` writer).
impl<T: serde::Serialize> axum::response::IntoResponse for ApiJson<T> {
    fn into_response(self) -> axum::response::Response {
        let mut buf = Vec::with_capacity(512);
        match serde_json::to_writer(&mut buf, &self.0) {
            Ok(()) => {
                let mut resp = axum::response::Response::new(axum::body::Body::from(buf));
                // Room for the headers every answer gets on its way out (`Envelope::seal`),
                // so the map is allocated once rather than grown and rehashed there.
                *resp.headers_mut() = axum::http::HeaderMap::with_capacity(ANSWER_HEADERS);
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                );
                resp
            }
            Err(e) => ApiError::from(Error::internal(e)).into_response(),
        }
    }
}

/// A request body of at most `MAX_BODY` bytes, as sent. A body that comes in one piece (the
/// usual small request, read with its head) is handed on as that piece, without the collecting
/// buffers of axum's `Bytes` extractor; a declared or actual length over the limit is refused
/// as that extractor refuses it, before more is read.
async fn small_body(req: Request) -> Result<axum::body::Bytes, Error> {
    use http_body_util::BodyExt as _;
    let mut body = req.into_body();
    if http_body::Body::size_hint(&body).lower() > MAX_BODY as u64 {
        return Err(too_large());
    }
    let mut first = axum::body::Bytes::new();
    let mut rest = bytes::BytesMut::new();
    let mut read = 0;
    while !http_body::Body::is_end_stream(&body) {
        let Some(frame) = body.frame().await else {
            break;
        };
        let frame = frame.map_err(|e| {
            Error::invalid(format!(
                "invalid JSON body: Failed to buffer the request body: {e}"
            ))
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        read += data.len();
        if read > MAX_BODY {
            return Err(too_large());
        }
        if read == data.len() {
            first = data;
        } else {
            if rest.is_empty() {
                rest.extend_from_slice(&first);
            }
            rest.extend_from_slice(&data);
        }
    }
    Ok(if rest.is_empty() {
        first
    } else {
        rest.freeze()
    })
}

fn too_large() -> Error {
    Error::refused(
        Refusal::TooLarge,
        "Request too large",
        format!("the request body is larger than {MAX_BODY} bytes"),
    )
}

/// What a JSON body's rejection tells the caller.
fn json_rejection(e: JsonRejection) -> Error {
    match e {
        JsonRejection::BytesRejection(e)
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE =>
        {
            too_large()
        }
        JsonRejection::MissingJsonContentType(_) => {
            Error::invalid("send the body as JSON with Content-Type: application/json")
        }
        e => Error::invalid(format!("invalid JSON body: {}", e.body_text())),
    }
}

/// Query string whose rejections are our JSON errors.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Self(q.0))
            .map_err(|e: QueryRejection| {
                Error::invalid(format!("invalid query string: {}", e.body_text()))
            })
    }
}

/// The language of the API's messages: the caller's `Accept-Language` (the MCP server passes
/// on its user's), else English. Read without
/// keeping the request's headers. A long poll holds its extractors for up to a minute, and a
/// copy of the headers (the `HeaderMap` extractor) points into the connection's read buffer,
/// keeping that buffer alive next to the one hyper allocates for its next read.
#[derive(Debug, Clone, Copy)]
pub struct ApiLang(pub crate::i18n::Lang);

impl<S: Send + Sync> FromRequestParts<S> for ApiLang {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .headers
                .get(header::ACCEPT_LANGUAGE)
                .and_then(|v| v.to_str().ok())
                .and_then(crate::i18n::Lang::from_accept_language)
                .unwrap_or(crate::i18n::Lang::En),
        ))
    }
}

/// An optional whole number, also written with a zero fraction (`26.0`), as JSON Schema's
/// `integer` allows. Anything else is a deserialisation error (so a 400).
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i128>, D::Error> {
    use serde::Deserialize;
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    if let Some(i) = n.as_i64() {
        return Ok(Some(i.into()));
    }
    if let Some(u) = n.as_u64() {
        return Ok(Some(u.into()));
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e18 => Ok(Some(f as i128)),
        _ => Err(serde::de::Error::custom(format!(
            "invalid number `{n}`, expected a whole number"
        ))),
    }
}

/// `#[serde(deserialize_with)]` for `Option<u64>` fields that may arrive as `26.0`.
pub fn opt_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    whole_number(d)?
        .map(|n| {
            u64::try_from(n).map_err(|_| {
                serde::de::Error::custom(format!("invalid number `{n}`, expected 0 or more"))
            })
        })
        .transpose()
}

/// `#[serde(deserialize_with)]` for `Option<i64>` fields that may arrive as `26.0`.
pub fn opt_i64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    whole_number(d)?
        .map(|n| {
            i64::try_from(n)
                .map_err(|_| serde::de::Error::custom(format!("number `{n}` is out of range")))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_may_carry_a_zero_fraction() {
        #[derive(serde::Deserialize)]
        struct T {
            #[serde(default, deserialize_with = "opt_u64")]
            u: Option<u64>,
            #[serde(default, deserialize_with = "opt_i64")]
            i: Option<i64>,
        }
        let t: T = serde_json::from_str(r#"{"u": 26.0, "i": -3.0}"#).unwrap();
        assert_eq!((t.u, t.i), (Some(26), Some(-3)));
        let t: T = serde_json::from_str(r#"{"u": null}"#).unwrap();
        assert_eq!((t.u, t.i), (None, None));
        for bad in [
            r#"{"u": 1.5}"#,
            r#"{"u": -1}"#,
            r#"{"u": "1"}"#,
            r#"{"i": 1e300}"#,
        ] {
            assert!(serde_json::from_str::<T>(bad).is_err(), "{bad}");
        }
    }

    fn streamed(chunks: Vec<&'static [u8]>) -> Request {
        let stream = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(axum::body::Bytes::from_static(c))),
        );
        Request::new(axum::body::Body::from_stream(stream))
    }

    /// The body in one piece, in several, empty; over the limit as declared and as sent.
    #[tokio::test]
    async fn a_small_body_is_read_whole_and_a_large_one_refused() {
        let one = Request::new(axum::body::Body::from(r#"{"a":1}"#));
        assert_eq!(&small_body(one).await.unwrap()[..], br#"{"a":1}"#);
        let pieces = streamed(vec![b"", br#"{"a""#, b"", br#":1}"#]);
        assert_eq!(&small_body(pieces).await.unwrap()[..], br#"{"a":1}"#);
        let empty = Request::new(axum::body::Body::empty());
        assert!(small_body(empty).await.unwrap().is_empty());

        let at_limit = Box::leak(vec![b' '; MAX_BODY].into_boxed_slice());
        let whole = streamed(vec![&at_limit[..10], &at_limit[10..]]);
        assert_eq!(small_body(whole).await.unwrap().len(), MAX_BODY);

        let declared = Request::new(axum::body::Body::from(vec![b' '; MAX_BODY + 1]));
        let sent = streamed(vec![&at_limit[..], b" "]);
        for over in [declared, sent] {
            let e = small_body(over).await.unwrap_err();
            assert!(e.to_string().contains("larger than 16384 bytes"), "{e}");
        }
    }
}
