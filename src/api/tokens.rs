//! `POST /v1/tokens`: a valid access token for a user's connection, or what to do instead.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

use super::elicitations::MAX_WAIT_SECONDS;
use super::{ApiClient, ApiJson, ApiLang};
use crate::AppState;
use crate::db::connections::ConnectionStatus;
use crate::db::elicitations::ElicitationStatus;
use crate::error::{Error, Result};
use crate::ids::{ProviderName, UserRef};
use crate::server::middleware::RequestId;
use crate::time::rfc3339;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// The `sub` of the user's validated MCP access token: 1 to 255 characters, not only
    /// whitespace, without control characters. Required unless `subject_token` is given (then
    /// it must be the token's `sub`).
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000-\u001f\u007f-\u009f]*$",
        value_type = String
    )]
    #[serde(default)]
    pub subject: Option<String>,
    /// Proof of subject: the MCP access token the user presented to this MCP server, checked at
    /// the identity issuer (JWT with this client's `subject_token_audience`, or introspection);
    /// its `sub` is the subject. Required when the client has `require_subject_token`.
    #[schema(max_length = 8192)]
    pub subject_token: Option<String>,
    /// Scopes this call needs. When the stored grant lacks any of them, the answer is
    /// `authorization_required` with an elicitation for the union of the stored and the asked
    /// scopes (the stored grant keeps working until the user approves). Same limits as on
    /// `/v1/elicitations`.
    #[schema(max_items = 50, value_type = Option<Vec<super::elicitations::Scope>>)]
    pub scopes: Option<Vec<String>>,
    /// A provider this API client may use (a configured provider name: letters, digits, - and _).
    #[schema(pattern = r"^[A-Za-z0-9_-]+$", value_type = String)]
    pub provider: ProviderName,
    /// Refresh first when the token expires within this many seconds (default 60, at most
    /// 86400).
    #[schema(minimum = 0, maximum = 86400)]
    #[serde(default, deserialize_with = "super::opt_i64")]
    pub min_ttl_seconds: Option<i64>,
    /// Refresh even if the token looks valid (e.g. the provider just refused it). Never answers
    /// with the token held before: when there is no refresh token, or the provider refuses the
    /// refresh, the answer is `reauthorization_required` (with `elicit`, carrying the
    /// elicitation); when the provider cannot be reached, `upstream_error`.
    #[serde(default)]
    pub force_refresh: bool,
    /// When not connected, answer `authorization_required` with a ready elicitation.
    #[serde(default)]
    pub elicit: bool,
    /// Wait for this elicitation to finish first (with `wait_seconds`).
    pub elicitation_id: Option<String>,
    /// Instead of `elicitation_id`: the `request_state` of an elicitation, exactly as handed out
    /// (and as echoed back by the MCP client in a 2026-07-28 retry). Refused with
    /// `invalid_request_state` when altered, expired, or issued to another client or subject.
    /// Not together with `elicitation_id`.
    #[schema(max_length = 4096)]
    pub request_state: Option<String>,
    /// With `elicitation_id` or `request_state`: hold the request up to this many seconds (at
    /// most 60) while the elicitation is pending. Refused without one of them.
    #[schema(maximum = 60)]
    #[serde(default, deserialize_with = "super::opt_u64")]
    pub wait_seconds: Option<u64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TokenResponse {
    /// The OAuth access token; for `api_key` and `basic` credentials, the key or
    /// `username:password` (use `header_name` and `header_value` to present it).
    pub access_token: String,
    pub token_type: String,
    /// RFC 3339; absent when the provider's token does not expire.
    pub expires_at: Option<String>,
    pub scopes: Vec<String>,
    pub connection_id: String,
    /// What was learned about the connection when it was made, by the names the provider's
    /// catalog entry gives them: Salesforce `instance_url`, QuickBooks `realm_id`, Slack
    /// `team_id`, Atlassian `cloud_id`, ... Empty for providers without any. Upstream MCP
    /// servers (`kind = "mcp"`): `authorization_server`, the one that issued the grant.
    #[schema(value_type = Object)]
    pub metadata: crate::db::connections::Metadata,
    /// The connection's per-connection parameters (`tenant`, `subdomain`, `shop`, `region`).
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub params: crate::db::connections::ConnParams,
    /// `oauth2`, or `api_key` / `basic` for providers whose users type a credential.
    pub credential_type: &'static str,
    /// `api_key` only: the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// `basic` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// `basic` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// `api_key` and `basic`: the header to send the credential in (e.g. `Authorization`,
    /// `X-API-Key`) and its whole value (e.g. `Bearer <key>`, `Basic <base64>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_value: Option<String>,
}

impl TokenResponse {
    fn new(t: crate::grants::tokens::FreshToken, provider: &crate::providers::Provider) -> Self {
        let secret = t.access_token.expose_secret().to_owned();
        let mut r = TokenResponse {
            access_token: secret.clone(),
            token_type: t.token_type.clone(),
            expires_at: t.expires_at.map(rfc3339),
            scopes: t.scopes,
            connection_id: t.connection_id,
            metadata: t.metadata,
            params: t.params,
            credential_type: "oauth2",
            api_key: None,
            username: None,
            password: None,
            header_name: None,
            header_value: None,
        };
        let settings = provider
            .credential
            .as_ref()
            .filter(|_| crate::connect::credentials::is_credential_type(&t.token_type));
        if let Some(s) = settings {
            let (name, value) = s.header_for(&secret);
            r.header_name = Some(name);
            r.header_value = Some(value);
            if t.token_type == "basic" {
                r.credential_type = "basic";
                let (u, p) = secret.split_once(':').unwrap_or((&secret, ""));
                r.username = Some(u.to_owned());
                r.password = Some(p.to_owned());
            } else {
                r.credential_type = "api_key";
                r.api_key = Some(secret);
            }
        }
        r
    }
}

#[utoipa::path(post, path = "/v1/tokens", request_body = TokenRequest,
    responses((status = 200, body = TokenResponse),
        (status = 400, body = crate::api::error::ErrorBody, description = "`invalid_request`, or `invalid_request_state` (with `reason`: `invalid`, `foreign` or `expired`)"),
        (status = 401, body = crate::api::error::ErrorBody, description = "`unauthorized` (API key), or `invalid_subject_token`: the subject_token is expired, for another audience, not signed by the identity issuer, or for another subject; or missing where this client must send one"),
        (status = 403, body = crate::api::error::ErrorBody, description = "`forbidden_provider`: this API client may not use the provider"),
        (status = 404, body = crate::api::error::ErrorBody, description = "`not_connected`; `not_found` when no such provider is configured or the awaited elicitation does not exist"),
        (status = 409, body = crate::api::error::ErrorBody, description = "`authorization_required` or `reauthorization_required`, with `elicitation` when `elicit` was set (always when `scopes` asks for more than the grant holds: an elicitation for the union); `authorization_declined` (with `elicitation_id`) when the awaited elicitation was declined and nothing is connected"),
        (status = 413, body = crate::api::error::ErrorBody, description = "`invalid_request`: the body is larger than 16 KiB"),
        (status = 502, body = crate::api::error::ErrorBody, description = "`upstream_error`: the provider failed while refreshing; try again. With `reason` `provider_misconfigured` and `elicitation_id`: the awaited elicitation failed because the provider is misconfigured, and nothing is connected; an operator must fix it (a new elicitation would fail the same way)")),
    security(("api_key" = [])))]
pub async fn fetch(
    State(state): State<AppState>,
    client: ApiClient,
    rid: RequestId,
    ApiLang(lang): ApiLang,
    ApiJson(req): ApiJson<TokenRequest>,
) -> Result<Json<TokenResponse>> {
    super::elicitations::validate_scopes(&req.scopes)?;
    let subject = state
        .resolve_subject(
            &client.0,
            req.subject.as_deref(),
            req.subject_token.as_deref(),
            rid.as_deref(),
        )
        .await?;
    let provider = client.provider(&state, &req.provider)?.clone();
    let min_ttl = req.min_ttl_seconds.unwrap_or(60);
    if !(0..=86_400).contains(&min_ttl) {
        return Err(Error::invalid(
            "min_ttl_seconds must be between 0 and 86400",
        ));
    }

    let awaited = match (&req.elicitation_id, &req.request_state) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(
                "give elicitation_id or request_state, not both",
            ));
        }
        (Some(eid), None) => Some(eid.clone()),
        (None, Some(sealed)) => {
            let rs = crate::connect::request_state::open(
                &state.config.keys,
                sealed,
                &crate::connect::request_state::Expected {
                    client_id: &client.0.id,
                    user: UserRef::new(state.identity.issuer(), subject.clone()),
                    provider: &req.provider,
                    now: crate::time::now(),
                },
            )?;
            Some(rs.elicitation_id)
        }
        (None, None) => None,
    };
    // The awaited elicitation, if the user declined it, or if it failed (and why).
    let mut declined = None;
    let mut failed = None;
    if let Some(eid) = &awaited {
        let mut e = state.client_elicitation(&client.0, eid).await?;
        if e.user_ref() != UserRef::new(state.identity.issuer(), subject.clone())
            || e.provider != req.provider
        {
            return Err(Error::invalid(
                "the elicitation was made for another subject or provider",
            ));
        }
        match req.wait_seconds {
            Some(w) if w > MAX_WAIT_SECONDS => {
                return Err(Error::invalid(format!(
                    "wait_seconds must be at most {MAX_WAIT_SECONDS}"
                )));
            }
            Some(w) if w > 0 => {
                let _slot = state.limits.long_poll(&client.0.id)?;
                if let Some(done) = state
                    .waiters
                    .wait(&state.db, &e.id, Duration::from_secs(w))
                    .await?
                {
                    e = done;
                }
            }
            _ => {}
        }
        match e.effective_status(crate::time::now()) {
            ElicitationStatus::Declined => declined = Some(e.id.clone()),
            // Only a misconfigured provider is answered with the failure: a new elicitation
            // would fail the same way. After any other failure the caller gets what SPEC says
            // for "not connected" (with `elicit`, a new elicitation the user may retry).
            ElicitationStatus::Failed => {
                failed = e
                    .failure_reason()
                    .filter(|r| *r == crate::db::elicitations::PROVIDER_MISCONFIGURED)
                    .map(|r| Error::AuthorizationFailed {
                        provider: provider.name.clone(),
                        elicitation_id: e.id.clone(),
                        reason: r,
                    })
            }
            _ => {}
        }
    } else if req.wait_seconds.is_some() {
        return Err(Error::invalid(
            "wait_seconds needs elicitation_id or request_state",
        ));
    }

    let mut connection = state
        .connection_for_token(&subject, &req.provider)
        .await?
        .filter(|g| g.row.status != ConnectionStatus::Revoked);
    // Another app's grant is, for this client, no grant at all (and says nothing about it).
    if let Some(g) = &connection {
        if !state.may_use_granted(&client.0, g).await? {
            connection = None;
        }
    }
    let connection = connection.map(|g| g.row);
    // A new elicitation (or the pending one) for the caller to show its user.
    let offer = |scopes: Option<Vec<String>>| {
        offer_elicitation(
            &state,
            &client,
            &subject,
            &provider,
            scopes,
            rid.as_deref(),
            lang,
        )
    };
    let Some(connection) = connection else {
        // The user said no to this very request: tell the caller, rather than hand out a new
        // elicitation it would show again.
        if let Some(id) = declined {
            return Err(Error::AuthorizationDeclined {
                provider: provider.name.clone(),
                elicitation_id: id,
            });
        }
        // Nor a new one when the awaited one failed: say why instead.
        if let Some(f) = failed {
            return Err(f);
        }
        if req.elicit {
            let view = offer(req.scopes.clone()).await?;
            return Err(Error::AuthorizationRequired {
                provider: provider.name.clone(),
                elicitation: Box::new(view),
            });
        }
        return Err(Error::NotConnected {
            subject: subject.clone(),
            provider: req.provider.to_string(),
        });
    };
    // Incremental authorization: scopes the grant lacks need the user's approval of the union.
    // The stored grant keeps serving requests within its scopes meanwhile.
    if let Some(asked) = &req.scopes {
        if asked.iter().any(|s| !connection.scopes.contains(s)) {
            if let Some(id) = declined {
                return Err(Error::AuthorizationDeclined {
                    provider: provider.name.clone(),
                    elicitation_id: id,
                });
            }
            if let Some(f) = failed {
                return Err(f);
            }
            // What this client asks for by default, what is granted, and what is new.
            let mut union = provider.scopes.clone();
            union.extend(asked.iter().cloned());
            let view = offer(Some(union)).await?;
            return Err(Error::AuthorizationRequired {
                provider: provider.name.clone(),
                elicitation: Box::new(view),
            });
        }
    }
    match state
        .fresh_token(
            connection,
            provider.clone(),
            min_ttl,
            req.force_refresh,
            rid.0.clone(),
        )
        .await
    {
        Ok(t) => Ok(Json(TokenResponse::new(t, &provider))),
        Err(Error::ReauthorizationRequired { .. }) if declined.is_some() => {
            Err(Error::AuthorizationDeclined {
                provider: provider.name.clone(),
                elicitation_id: declined.unwrap_or_default(),
            })
        }
        Err(Error::ReauthorizationRequired { provider: p, .. })
            if req.elicit || failed.is_some() =>
        {
            if let Some(f) = failed {
                return Err(f);
            }
            let view = offer(req.scopes.clone()).await?;
            Err(Error::ReauthorizationRequired {
                provider: p,
                elicitation: Some(Box::new(view)),
            })
        }
        Err(e) => Err(e),
    }
}

/// A ready elicitation (new, or the pending one) for the caller to hand to its MCP client.
async fn offer_elicitation(
    state: &AppState,
    client: &ApiClient,
    subject: &str,
    provider: &crate::providers::Provider,
    scopes: Option<Vec<String>>,
    request_id: Option<&str>,
    lang: crate::i18n::Lang,
) -> Result<serde_json::Value> {
    let e = state
        .create_or_reuse_elicitation(&client.0, subject, provider, scopes, request_id)
        .await?;
    serde_json::to_value(state.elicitation_view_in(&e, lang)?).map_err(Error::internal)
}
