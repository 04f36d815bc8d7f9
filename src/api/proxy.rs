//! `ANY /v1/proxy/{provider}/{path}`: the caller's request, forwarded to the provider's API
//! with the user's token, and the provider's answer streamed back. The caller authenticates as
//! for `/v1/tokens` (API key; the user as `Subject-Token` or `Connect-Subject`; the account as
//! `Connect-Account`) and never sees the token.

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::{ApiClient, ApiLang};
use crate::AppState;
use crate::api::error::ApiError;
use crate::connect::proxy::{ProxyAsk, ProxyLimits, TOKEN_REFRESHED};
use crate::error::{Error, Refusal};
use crate::ids::ProviderName;
use crate::outbound::proxy::Upload;
use crate::server::middleware::RequestId;

/// A body up to this size is kept, so the call can be sent again after a refresh.
pub const REPLAYABLE_BODY: u64 = 64 * 1024;

const PREFIX: &str = "/v1/proxy/";

// Looked up as names, not text: a text name is parsed on every lookup.
const SUBJECT_TOKEN: HeaderName =
    HeaderName::from_static(crate::connect::subject::SUBJECT_TOKEN_HEADER);
const CONNECT_SUBJECT: HeaderName = HeaderName::from_static("connect-subject");
const CONNECT_ACCOUNT: HeaderName = HeaderName::from_static("connect-account");

/// On an error answered by mcp-connect itself (not passed on from the provider): its code.
pub const OWN_ERROR: &str = "mcp-connect-error";

#[utoipa::path(
    method(get, post, put, patch, delete),
    path = "/v1/proxy/{provider}/{path}",
    params(
        ("provider" = String, Path, description = "A provider this API client may use"),
        ("path" = String, Path, description = "The path below the provider's API base URL (`api_base_url`, or the catalog's), with any query. Refused with 400 `invalid_request` when it could leave the base: `.` or `..` segments, `//`, backslashes, percent-encoded `/`, `\\` or dot segments, double encoding, control characters, malformed escapes"),
        ("Subject-Token" = Option<String>, Header, description = "proof of subject: the user's MCP access token (as `subject_token` on `POST /v1/tokens`)"),
        ("Connect-Subject" = Option<String>, Header, description = "the user's `sub`, for clients allowed to name the subject"),
        ("Connect-Account" = Option<String>, Header, description = "which of the user's accounts at the provider (its id or label; default: the user's default account)"),
    ),
    responses(
        (status = 200, description = "The provider's answer, whatever its status (errors answered by mcp-connect itself carry `MCP-Connect-Error: <code>`), streamed: its headers without `Set-Cookie` and hop-by-hop ones. A redirect is returned, never followed. `MCP-Connect-Token-Refreshed: true` on a 401 means the provider refused the token, it was refreshed, and the call (whose body was too large to keep) may be sent again"),
        (status = 400, body = crate::api::error::ErrorBody, description = "`invalid_request`: a path that could leave the API base, a bad header"),
        (status = 403, body = crate::api::error::ErrorBody, description = "`forbidden_provider`; `forbidden`: a path or method the provider's or this client's allow-list does not name"),
        (status = 404, body = crate::api::error::ErrorBody, description = "`not_connected`; `not_found`: no such provider, or it has no API base URL"),
        (status = 409, body = crate::api::error::ErrorBody, description = "`reauthorization_required`: the provider refused the token and it cannot be refreshed; `account_selection_required`"),
        (status = 413, body = crate::api::error::ErrorBody, description = "`invalid_request`: the request body is larger than `[limits] proxy_request_body_bytes`"),
        (status = 502, body = crate::api::error::ErrorBody, description = "`upstream_error`: the provider could not be reached, its address is not allowed, or its answer is larger than `[limits] proxy_response_body_bytes` (nothing of it is passed on; an answer without a declared length is cut instead)"),
        (status = 504, body = crate::api::error::ErrorBody, description = "`upstream_error`: the provider did not answer within `[limits] proxy_timeout_seconds`"),
    ),
    security(("api_key" = [])))]
pub async fn forward(
    State(state): State<AppState>,
    client: Result<ApiClient, ApiError>,
    rid: RequestId,
    ApiLang(lang): ApiLang,
    req: Request,
) -> Response {
    match answer(state, client, rid, lang, req).await {
        Ok(r) => r,
        // The provider's own answers may be errors too: ours say they are ours.
        Err(e) => {
            let code = match &e {
                ApiError::Domain(d) => d.code().as_str(),
                ApiError::Limited(_) => crate::error::ErrorCode::RateLimited.as_str(),
            };
            let mut r = e.into_response();
            r.headers_mut()
                .insert(OWN_ERROR, HeaderValue::from_static(code));
            r
        }
    }
}

async fn answer(
    state: AppState,
    client: Result<ApiClient, ApiError>,
    rid: RequestId,
    lang: crate::i18n::Lang,
    req: Request,
) -> Result<Response, ApiError> {
    let client = client?;
    state.limits.check_proxy(&client.0.id)?;
    let (parts, body) = req.into_parts();
    let (provider, path) = split(parts.uri.path())?;
    let subject_token = header(&parts.headers, &SUBJECT_TOKEN)?;
    let subject = header(&parts.headers, &CONNECT_SUBJECT)?;
    let account = header(&parts.headers, &CONNECT_ACCOUNT)?;
    super::tokens::validate_account(account)?;
    let l = &state.config.limits;
    let limits = ProxyLimits {
        request_body_bytes: l.proxy_request_body_bytes,
        response_body_bytes: l.proxy_response_body_bytes,
        timeout: std::time::Duration::from_secs(l.proxy_timeout_seconds),
    };
    let upload = upload(body, &parts.headers, limits.request_body_bytes).await?;
    let provider = ProviderName::new(provider.to_owned());
    let answer = state
        .connect
        .proxy(ProxyAsk {
            client: &client.0,
            subject,
            subject_token,
            account,
            provider: &provider,
            method: parts.method.clone(),
            path,
            query: parts.uri.query(),
            headers: &parts.headers,
            body: upload,
            request_id: rid.0.clone(),
            lang,
            limits,
        })
        .await?;
    let mut resp = Response::new(Body::from_stream(answer.body));
    *resp.status_mut() = answer.status;
    *resp.headers_mut() = answer.headers;
    if answer.token_refreshed {
        resp.headers_mut()
            .insert(TOKEN_REFRESHED, HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// The provider's name and the rest of the path, as sent.
fn split(path: &str) -> Result<(&str, &str), Error> {
    let rest = path
        .strip_prefix(PREFIX)
        .ok_or_else(|| Error::invalid("not a proxy path"))?;
    let (provider, rest) = rest.split_once('/').unwrap_or((rest, ""));
    if provider.is_empty()
        || !provider
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(Error::invalid(
            "the provider name may only use letters, digits, - and _",
        ));
    }
    Ok((provider, rest))
}

/// A header as text, if sent; one that is not visible ASCII is a 400 naming it.
fn header<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<Option<&'h str>, Error> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map_err(|_| Error::invalid(format!("the {name} header must be ASCII")))
        })
        .transpose()
}

/// The request body: none, kept (small enough to replay), or streamed within `limit`.
async fn upload(body: Body, headers: &HeaderMap, limit: u64) -> Result<Upload, Error> {
    let too_large = || {
        Error::refused(
            Refusal::TooLarge,
            "Request too large",
            format!("the request body is larger than the proxy's limit of {limit} bytes"),
        )
    };
    let declared = match headers.get(axum::http::header::CONTENT_LENGTH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| Error::invalid("Content-Length is not a number"))?,
        ),
    };
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    if body.size_hint().exact() == Some(0) {
        return Ok(Upload::Empty);
    }
    match declared {
        Some(n) if n <= REPLAYABLE_BODY => {
            let bytes = axum::body::to_bytes(body, REPLAYABLE_BODY as usize)
                .await
                .map_err(|_| Error::invalid("the request body could not be read"))?;
            Ok(Upload::Buffered(bytes))
        }
        _ => Ok(Upload::streaming(body.into_data_stream(), limit)),
    }
}
