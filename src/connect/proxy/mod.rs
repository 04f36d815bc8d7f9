//! The proxy use case (`/v1/proxy/{provider}/{path}`): the caller names a user and a provider
//! as for a token, and gets the provider's answer to its call instead of the token, which never
//! leaves the service. The path is confined below the provider's API base URL and held to the
//! allow-lists; the token comes from the same use case as `/v1/tokens` (`token_request`); a 401
//! from the provider earns one forced refresh and, when the request can be sent again, one
//! retry. Forwarding itself (headers that may cross, bodies streamed and bounded, the SSRF
//! guard) is `outbound::proxy`.

pub mod target;
pub mod usage;

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderMap, Method, StatusCode};
use secrecy::ExposeSecret;

use crate::config::{AuthKind, ClientConfig};
use crate::connect::Connect;
use crate::connect::token_request::{ProofFor, TokenAsk, Whose, dpop_proof};
use crate::error::{Error, GatewayFailure, Refusal, Result};
use crate::grants::tokens::FreshToken;
use crate::i18n::Lang;
use crate::ids::ProviderName;
use crate::outbound::proxy::{self as forward, Download, ForwardError, Upload};
use crate::providers::Provider;
use crate::providers::mcp::ProofTarget;

/// The response header saying the provider refused the token, the token was refreshed, and
/// the call (whose body could not be sent twice) may be retried.
pub const TOKEN_REFRESHED: &str = "mcp-connect-token-refreshed";

/// The bounds of one proxied call (`[limits] proxy_*`).
#[derive(Debug, Clone, Copy)]
pub struct ProxyLimits {
    pub request_body_bytes: u64,
    pub response_body_bytes: u64,
    pub timeout: Duration,
}

/// A proxied call, as the API parsed it.
pub struct ProxyAsk<'a> {
    pub client: &'a ClientConfig,
    pub subject: Option<&'a str>,
    pub subject_token: Option<&'a str>,
    /// Which of the user's accounts (its id or label; `None`: the default).
    pub account: Option<&'a str>,
    pub provider: &'a ProviderName,
    pub method: Method,
    /// The path below the provider's API base, as sent (still percent-encoded).
    pub path: &'a str,
    /// The query, as sent.
    pub query: Option<&'a str>,
    /// The caller's headers (cleaned before they go on).
    pub headers: &'a HeaderMap,
    pub body: Upload,
    pub request_id: Option<String>,
    pub lang: Lang,
    pub limits: ProxyLimits,
}

/// The provider's answer, on its way to the caller.
pub struct Proxied {
    pub status: StatusCode,
    /// Cleaned: no cookies, no hop-by-hop headers.
    pub headers: HeaderMap,
    pub body: Download,
    /// The provider refused the token; it was refreshed, but the call could not be replayed.
    pub token_refreshed: bool,
}

impl Connect {
    /// Forwards `ask` to the provider's API with the connection's token.
    pub async fn proxy(&self, mut ask: ProxyAsk<'_>) -> Result<Proxied> {
        let path = target::confine(ask.path).map_err(Error::invalid)?;
        let provider = self.provider_for_client(ask.client, ask.provider)?.clone();
        let template = provider.api_base_url().ok_or_else(|| {
            Error::not_found(format!(
                "provider {:?} has no API base URL for the proxy (its catalog entry names none; the operator sets api_base_url)",
                provider.name
            ))
        })?;
        allowed(ask.client, &provider, &ask.method, &path.decoded)?;
        let mut token = self.proxy_token(&ask, false).await?;
        let per_connection;
        let base = match self.proxy_bases.get(&provider.name) {
            Some(fixed) => fixed
                .as_ref()
                .map_err(|m| Error::Gateway(GatewayFailure::NoBase(m.clone())))?,
            None => {
                per_connection = target::api_base(
                    template,
                    provider.entry,
                    &token.connection.params,
                    &token.connection.metadata,
                    &provider.client_id,
                )
                .map_err(|m| Error::Gateway(GatewayFailure::NoBase(m)))?;
                &per_connection
            }
        };
        let url = target::join(base, &path, ask.query).map_err(Error::invalid)?;
        let headers = forward::request_headers(ask.headers);
        let call = Call {
            provider: &provider,
            method: &ask.method,
            url: &url,
            headers: &headers,
            limits: ask.limits,
        };
        let mut resp = self.forward(&call, &token, &mut ask.body, None).await?;
        // RFC 9449 §9: a resource server may ask for its nonce in the proof; once.
        if let Some(nonce) = dpop_nonce_asked(&token, resp.status(), resp.headers())
            && ask.body.replayable()
        {
            resp = self
                .forward(&call, &token, &mut ask.body, Some(&nonce))
                .await?;
        }
        let mut token_refreshed = false;
        if resp.status() == StatusCode::UNAUTHORIZED
            && !AuthKind::is_credential_type(&token.connection.token_type)
        {
            match self.proxy_token(&ask, true).await {
                Ok(t) => {
                    token = t;
                    if ask.body.replayable() {
                        resp = self.forward(&call, &token, &mut ask.body, None).await?;
                    } else {
                        token_refreshed = true;
                    }
                }
                // The grant is dead: say so, rather than pass on a 401 a retry cannot fix.
                Err(e @ Error::ReauthorizationRequired { .. }) => return Err(e),
                Err(e) => {
                    tracing::warn!(provider = %provider.name, error = %e, "refresh after the provider's 401 failed; passing the 401 on")
                }
            }
        }
        let limit = ask.limits.response_body_bytes;
        if ask.method != Method::HEAD && declared_length(resp.headers()).is_some_and(|n| n > limit)
        {
            return Err(Error::Gateway(GatewayFailure::ResponseTooLarge { limit }));
        }
        self.proxy_usage
            .note(
                &self.db,
                usage::Use {
                    client_id: &ask.client.id,
                    connection_id: token.connection.id.as_str(),
                    provider: &provider.name,
                },
                ask.request_id.as_deref(),
            )
            .await;
        let mut headers = std::mem::take(resp.headers_mut());
        forward::keep_response_headers(&mut headers);
        Ok(Proxied {
            status: resp.status(),
            headers,
            body: Download::new(resp, limit),
            token_refreshed,
        })
    }

    /// A fresh token for the call (forced: the provider just refused the one held).
    /// (`ask` is read before the future starts: its body cannot be shared between threads.)
    fn proxy_token<'a>(
        &'a self,
        ask: &ProxyAsk<'a>,
        force_refresh: bool,
    ) -> impl Future<Output = Result<FreshToken>> + Send + use<'a> {
        let t = TokenAsk {
            client: ask.client,
            subject: ask.subject,
            subject_token: ask.subject_token,
            provider: ask.provider,
            account: ask.account,
            whose: Whose::Any,
            scopes: None,
            min_ttl_seconds: None,
            force_refresh,
            elicit: false,
            elicit_scopes: false,
            awaited: None,
            wait_seconds: None,
            request_id: ask.request_id.clone(),
            lang: ask.lang,
            dpop: ProofFor::EachCall,
        };
        async move {
            // Nothing is awaited, so no long-poll slot is ever asked for.
            match self
                .fresh_token_for(t, || Ok::<(), std::convert::Infallible>(()))
                .await?
            {
                Ok((token, _)) => Ok(token),
                Err(never) => match never {},
            }
        }
    }

    /// One attempt: the credential added (with a DPoP proof for this request when the token
    /// is DPoP-bound, carrying the resource server's `nonce` when it asked for one), timed and
    /// counted per provider and status class.
    async fn forward(
        &self,
        call: &Call<'_>,
        token: &FreshToken,
        body: &mut Upload,
        nonce: Option<&str>,
    ) -> Result<forward::Answer> {
        let mut headers = call.headers.clone();
        let (name, value) = credential(call.provider, token)?;
        headers.insert(name, value);
        if crate::providers::mcp::is_dpop_bound(&token.connection.token_type) {
            let target = ProofTarget::parse(call.method.as_str(), call.url.as_str(), nonce)
                .map_err(Error::invalid)?;
            let proof = dpop_proof(token, call.provider, &target).await?;
            let (name, value) = forward::credential("dpop", &proof).ok_or_else(|| {
                Error::internal(anyhow::anyhow!("a DPoP proof that is not a header value"))
            })?;
            headers.insert(name, value);
        }
        let started = Instant::now();
        let sent = forward::send(
            &self.proxy_pool,
            call.method.clone(),
            call.url,
            headers,
            body,
            call.limits.timeout,
        )
        .await;
        self.metrics.proxied(
            &call.provider.name,
            sent.as_ref().ok().map(|r| r.status().as_u16()),
            started.elapsed().as_secs_f64(),
        );
        sent.map_err(|e| match e {
            ForwardError::Refused => Error::Gateway(GatewayFailure::Refused),
            ForwardError::Timeout => Error::Gateway(GatewayFailure::Timeout {
                seconds: call.limits.timeout.as_secs(),
            }),
            ForwardError::RequestTooLarge => Error::refused(
                Refusal::TooLarge,
                "Request too large",
                format!(
                    "the request body is larger than the proxy's limit of {} bytes",
                    call.limits.request_body_bytes
                ),
            ),
            ForwardError::Unreachable(why) => {
                tracing::warn!(provider = %call.provider.name, error = %why, "proxied call failed");
                Error::Gateway(GatewayFailure::Unreachable)
            }
        })
    }
}

/// What every attempt of one call shares.
struct Call<'a> {
    provider: &'a Arc<Provider>,
    method: &'a Method,
    url: &'a url::Url,
    headers: &'a HeaderMap,
    limits: ProxyLimits,
}

/// The header presenting `token`: the provider's own for typed credentials (`X-API-Key`,
/// Basic), else `Authorization: Bearer`.
fn credential(
    provider: &Provider,
    token: &FreshToken,
) -> Result<(http::HeaderName, http::HeaderValue)> {
    let secret = token.access_token.expose_secret();
    let (name, value) = match provider
        .credential
        .as_ref()
        .filter(|_| AuthKind::is_credential_type(&token.connection.token_type))
    {
        Some(s) => s.header_for(secret),
        // The proof goes beside it (`forward`).
        None if crate::providers::mcp::is_dpop_bound(&token.connection.token_type) => {
            ("authorization".to_owned(), format!("DPoP {secret}"))
        }
        None => ("authorization".to_owned(), format!("Bearer {secret}")),
    };
    forward::credential(&name, &value).ok_or_else(|| {
        Error::internal(anyhow::anyhow!(
            "the credential of provider {} does not fit in an HTTP header",
            provider.name
        ))
    })
}

/// The nonce a resource server asks a DPoP proof to carry (RFC 9449 §9: a 401 with
/// `WWW-Authenticate: DPoP error="use_dpop_nonce"` and `DPoP-Nonce`), for a DPoP-bound token.
fn dpop_nonce_asked(token: &FreshToken, status: StatusCode, headers: &HeaderMap) -> Option<String> {
    if status != StatusCode::UNAUTHORIZED
        || !crate::providers::mcp::is_dpop_bound(&token.connection.token_type)
    {
        return None;
    }
    let asked = headers
        .get_all(http::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("use_dpop_nonce"));
    let nonce = headers.get("dpop-nonce")?.to_str().ok()?;
    (asked && !nonce.is_empty()).then(|| nonce.to_owned())
}

/// Refuses what the provider's or the client's allow-list does not name.
fn allowed(client: &ClientConfig, provider: &Provider, method: &Method, path: &str) -> Result<()> {
    let rules = [
        Some(provider.proxy_rules()),
        client.proxy.get(&provider.name),
    ];
    for r in rules.into_iter().flatten() {
        if !r.allows_method(method.as_str()) {
            return Err(Error::Forbidden(format!(
                "the proxy does not let {method} through to provider {:?} for this client",
                provider.name
            )));
        }
        if !r.allows_path(path) {
            return Err(Error::Forbidden(format!(
                "the proxy does not let this path through to provider {:?} for this client",
                provider.name
            )));
        }
    }
    Ok(())
}

/// The `Content-Length` the provider declared, if one.
fn declared_length(h: &HeaderMap) -> Option<u64> {
    h.get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}
