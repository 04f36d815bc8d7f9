//! Completing a connection once the provider sent the user back with a code: the code exchange,
//! what the provider tells about the account, and the grant stored — the sealed tokens, the apps
//! that may use them, the audit row, the elicitation completed and its event, in one transaction.
//!
//! The caller (the provider callback page) has already checked the state, the browser and the
//! user; `finish_provider_callback` checks the provider's answer, has the caller claim the
//! state, and completes (or declines, or fails) the elicitation.

use std::collections::BTreeMap;

use secrecy::{ExposeSecret, SecretString};

use crate::connect::Connect;
use crate::connect::identity::SignedInUser;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::Metadata;
use crate::db::connections::{
    AccountRef, AccountRefused, ConnectionStatus, Details, NewAccount, NewTokens, Stored,
    store_connected,
};
use crate::db::elicitations::{Elicitation, ElicitationStatus, Ending, Owner};
use crate::error::{Error, Refusal, Result};
use crate::i18n::Msg;
use crate::ids::ConnectionId;
use crate::providers::{Endpoints, Provider};
use crate::time::now;

/// The provider's answer on the redirect, as checked by the callback page.
pub struct CodeAnswer<'a> {
    pub code: &'a str,
    /// The PKCE verifier of this flow, opened from its sealed form.
    pub verifier: Option<&'a SecretString>,
    /// Values the provider put on the redirect beside the code (QuickBooks `realmId`).
    pub redirect_query: BTreeMap<String, String>,
}

/// How a completion ended.
pub enum Completion {
    /// The grant is stored and the elicitation completed.
    Connected,
    /// The provider refused the code; the elicitation is marked failed with `summary` (an
    /// OAuth error code and description, never a secret).
    ExchangeFailed { summary: String },
}

/// The values the provider put on the redirect beside the code, without the flow's own
/// (`code`, `state`, `iss`), bounded in count and length.
pub fn redirect_extras(raw_query: Option<&str>) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(raw_query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| !matches!(k.as_ref(), "code" | "state" | "iss"))
        .filter(|(_, v)| v.len() <= 500)
        .take(20)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// What the provider sent to the redirect URI (RFC 6749 §4.1.2, RFC 9207).
pub struct ProviderAnswer<'a> {
    pub code: Option<&'a str>,
    pub error: Option<&'a str>,
    pub iss: Option<&'a str>,
    /// The whole query, for values the provider put beside the code.
    pub raw_query: Option<&'a str>,
}

/// An OAuth error code as shown to the user: only its safe characters, bounded.
fn clean_code(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(64)
        .collect()
}

fn connect_failed(refusal: Refusal, title: &'static str, message: Msg) -> Error {
    Error::refused(refusal, Msg::new(title), message)
}

/// The most of a refusal's text kept in the elicitation's `failure` (it names URLs, never a
/// secret).
const MAX_FAILURE_CHARS: usize = 500;

/// What a completed flow stores ([`Connect::store_grant`]): the provider's id of the account
/// (empty where it names none), the credential, and what the provider told about the account
/// (`None` keeps what is stored).
pub struct Grant<'a> {
    pub account_id: &'a str,
    pub tokens: NewTokens<'a>,
    pub metadata: Option<&'a Metadata>,
}

impl Connect {
    /// Finishes a provider callback whose state, browser and user were checked: the provider's
    /// endpoints (an upstream MCP server that moved to another authorization server during the
    /// redirect is refused), RFC 9207's `iss`, then `claim` — from here on the state is spent,
    /// whatever the provider answered — then the answer: `access_denied` declines the
    /// elicitation, another error fails it, a code is exchanged and the grant stored. `Ok` when
    /// the elicitation ended (connected or declined); the outcome is on its `/done` page.
    #[allow(clippy::too_many_arguments)]
    pub async fn finish_provider_callback(
        &self,
        user: &SignedInUser,
        e: &Elicitation,
        flow_authorization_server: Option<&str>,
        provider: &Provider,
        answer: ProviderAnswer<'_>,
        claim: impl AsyncFnOnce() -> Result<Option<SecretString>>,
        request_id: Option<&str>,
    ) -> Result<()> {
        let pname = &provider.display_name;
        let endpoints = match provider
            .endpoints(&self.http)
            .await
            .and_then(|ep| ep.for_connection(provider, &e.params))
        {
            Ok(ep) => self.flow_endpoints(e, provider, ep).await?,
            Err(err) => {
                return Err(self
                    .discovery_failed(
                        e,
                        provider,
                        &err,
                        request_id,
                        "provider-unavailable-from-app-lead",
                    )
                    .await);
            }
        };
        // An upstream MCP server that moved to another authorization server since this redirect
        // started: the code (and the PKCE verifier) belong to the old one, never sent to the new.
        if let Some(went_to) = flow_authorization_server {
            if endpoints.authorization_server() != Some(went_to) {
                tracing::warn!(target: "security", provider = %provider.name, "the authorization server changed during the redirect; code not sent");
                return Err(connect_failed(
                    Refusal::ConnectConflict,
                    "provider-moved-title",
                    Msg::new("provider-moved-lead").arg("provider", pname),
                ));
            }
        }
        // RFC 9207: a provider that sends `iss` must send its own.
        match (answer.iss, &endpoints.issuer) {
            (Some(iss), Some(expected)) if iss != expected => {
                tracing::warn!(target: "security", provider = %provider.name, "authorization response with a foreign iss; refused");
                return Err(connect_failed(
                    Refusal::ConnectFailed,
                    "answer-wrong-service-title",
                    Msg::new("answer-wrong-service-lead"),
                ));
            }
            (None, _) if endpoints.iss_required => {
                return Err(connect_failed(
                    Refusal::ConnectFailed,
                    "answer-incomplete-title",
                    Msg::new("answer-no-issuer-lead"),
                ));
            }
            _ => {}
        }

        let verifier = claim().await?;
        if let Some(err) = answer.error {
            let code = clean_code(err);
            if code == "access_denied" {
                let declined = Ending::Declined {
                    reason: Some("access_denied"),
                };
                self.finish_elicitation(e, declined, request_id).await?;
                return Ok(());
            }
            let failure = format!("provider answered {code}");
            self.finish_elicitation(e, Ending::Failed { failure: &failure }, request_id)
                .await?;
            return Err(connect_failed(
                Refusal::ConnectUpstreamFailed,
                "connect-failed-title",
                Msg::new("connect-failed-error-lead")
                    .arg("provider", pname)
                    .arg("code", code),
            ));
        }
        let code = answer
            .code
            .filter(|c| !c.is_empty() && c.len() <= 4096)
            .ok_or_else(|| {
                connect_failed(
                    Refusal::ConnectFailed,
                    "answer-incomplete-title",
                    Msg::new("answer-no-code-lead"),
                )
            })?;
        let answer = CodeAnswer {
            code,
            verifier: verifier.as_ref(),
            redirect_query: redirect_extras(answer.raw_query),
        };
        match self
            .complete_connection(user, e, provider, &endpoints, answer, request_id)
            .await?
        {
            Completion::Connected => Ok(()),
            Completion::ExchangeFailed { summary } => Err(connect_failed(
                Refusal::ConnectUpstreamFailed,
                "connect-failed-title",
                Msg::new("connect-failed-exchange-lead")
                    .arg("provider", pname)
                    .arg("summary", summary),
            )),
        }
    }

    /// The refusal for a provider whose endpoints could not be found. A security refusal (see
    /// `providers::mcp::Misconfigured`) ends the elicitation `failed` (`provider_misconfigured`:
    /// the MCP server waiting for it learns at once) and says the provider is misconfigured; an
    /// outage leaves it pending and asks to try again (`unavailable_lead`).
    pub async fn discovery_failed(
        &self,
        e: &Elicitation,
        provider: &Provider,
        err: &anyhow::Error,
        request_id: Option<&str>,
        unavailable_lead: &'static str,
    ) -> Error {
        let name = &provider.display_name;
        if !crate::providers::mcp::is_misconfigured(err) {
            tracing::warn!(provider = %provider.name, error = format!("{err:#}"), "provider discovery failed");
            return Error::refused(
                Refusal::ProviderUnavailable,
                Msg::new("provider-unavailable-title"),
                Msg::new(unavailable_lead).arg("provider", name),
            );
        }
        tracing::warn!(target: "security", provider = %provider.name, error = format!("{err:#}"), "provider discovery refused; the elicitation fails");
        let detail: String = format!("{err:#}").chars().take(MAX_FAILURE_CHARS).collect();
        let failure = format!(
            "{}: {detail}",
            crate::db::elicitations::PROVIDER_MISCONFIGURED
        );
        if let Err(x) = self
            .finish_elicitation(e, Ending::Failed { failure: &failure }, request_id)
            .await
        {
            return x;
        }
        Error::refused(
            Refusal::ProviderMisconfigured,
            Msg::new("provider-misconfigured-title"),
            Msg::new("provider-misconfigured-lead").arg("provider", name),
        )
    }

    /// Exchanges `answer.code` at `provider` and stores the grant for the user `e` was made for.
    pub async fn complete_connection(
        &self,
        user: &SignedInUser,
        e: &Elicitation,
        provider: &Provider,
        endpoints: &Endpoints,
        answer: CodeAnswer<'_>,
        request_id: Option<&str>,
    ) -> Result<Completion> {
        let redirect_uri = self
            .config
            .url(&format!("/oauth/{}/callback", provider.name));
        let exchanged = self
            .metrics
            .upstream(
                &provider.name,
                "code_exchange",
                provider.exchange_code(
                    &self.http,
                    endpoints,
                    answer.code,
                    &redirect_uri,
                    answer.verifier.map(|v| v.expose_secret()),
                ),
            )
            .await;
        let tokens = match exchanged {
            Ok(t) => t,
            Err(err) => {
                let summary = err.summary();
                tracing::warn!(provider = %provider.name, elicitation_id = %e.id, error = %summary, "code exchange failed");
                self.finish_elicitation(e, Ending::Failed { failure: &summary }, request_id)
                    .await?;
                return Ok(Completion::ExchangeFailed { summary });
            }
        };
        let scopes = tokens.scopes.clone().unwrap_or_else(|| e.scopes.clone());
        let learned = provider
            .learn(&self.http, endpoints, &tokens, &answer.redirect_query)
            .await;
        // A provider that names its accounts must name this one: stored under no id, it could
        // replace or duplicate another account of the user's.
        let account_id = match learned.account_id {
            Some(id) => id,
            None if provider.names_accounts(endpoints) => {
                let summary = "the provider did not say which account was connected".to_owned();
                tracing::warn!(provider = %provider.name, elicitation_id = %e.id, "{summary}");
                return Ok(Completion::ExchangeFailed { summary });
            }
            None => String::new(),
        };

        self.store_grant(
            user,
            e,
            &Grant {
                account_id: &account_id,
                tokens: NewTokens {
                    access_token: &tokens.access_token,
                    refresh_token: tokens.refresh_token.as_ref(),
                    token_type: &tokens.token_type,
                    expires_at: tokens.expires_in.map(|s| now() + s),
                    scopes: &scopes,
                    account_label: learned.label.as_deref(),
                },
                metadata: Some(&learned.metadata),
            },
            None,
            request_id,
        )
        .await?;
        Ok(Completion::Connected)
    }

    /// Stores the grant the user gave for `e`: the credential sealed (`tokens`), the connection's
    /// parameters and what the provider told about the account (`metadata`; `None` keeps what
    /// is stored), the apps that may use it, its audit row (`detail`: the credential type for
    /// API keys), the elicitation completed and its event — one transaction, one commit that
    /// waits for the disk. Used by the OAuth callback and the API-key page alike.
    pub async fn store_grant(
        &self,
        user: &SignedInUser,
        e: &Elicitation,
        grant: &Grant<'_>,
        detail: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<()> {
        let (account_id, tokens, metadata) = (grant.account_id, &grant.tokens, grant.metadata);
        self.check_owner(user, e)?;
        let organization = self.owning_organization(user, e)?;
        let mut change = Change::begin(&self.db).await?;
        let stored = store_connected(
            change.conn(),
            &self.config.keys,
            &NewAccount {
                issuer: &e.issuer,
                // An organisation's connection is no user's: its subject is ''.
                subject: match &e.owner {
                    Owner::User => &e.subject,
                    Owner::Organization(_) => "",
                },
                organization: &organization,
                client_organization: e.client_organization.as_deref().unwrap_or_default(),
                provider: &e.provider,
                id: account_id,
                max: self.config.max_accounts_per_provider,
            },
            tokens,
            metadata.map(|metadata| Details {
                params: &e.params,
                metadata,
            }),
        )
        .await?;
        let Stored {
            id: connection_id,
            before,
        } = match stored {
            Ok(s) => s,
            Err(refused) => {
                // Nothing of this flow is kept; the elicitation stays pending for another try.
                drop(change);
                let provider = self
                    .providers
                    .get(&e.provider)
                    .map_or_else(|| e.provider.to_string(), |p| p.display_name.clone());
                return Err(match refused {
                    AccountRefused::Limit { max } => Error::refused(
                        Refusal::ConnectFailed,
                        Msg::new("account-limit-title"),
                        Msg::new("account-limit-lead")
                            .arg("provider", &provider)
                            .arg("max", max.to_string()),
                    ),
                    AccountRefused::PendingUpgrade => Error::refused(
                        Refusal::ConnectFailed,
                        Msg::new("account-pending-upgrade-title"),
                        Msg::new("account-pending-upgrade-lead").arg("provider", &provider),
                    ),
                });
            }
        };
        // A new account: this process's cached list of the user's accounts goes at once (other
        // processes learn it from the row's trigger).
        change.connection_changed(&crate::db::token_cache::user_key(&e.provider, &e.subject));
        let reconnected = before.is_some();
        let was_revoked = before == Some(ConnectionStatus::Revoked);
        self.grants
            .grant_to_approved_apps(&mut change, e, &connection_id, was_revoked)
            .await?;
        change
            .audit(AuditEvent {
                event: if reconnected {
                    AuditAction::ConnectionReconnected
                } else {
                    AuditAction::ConnectionCreated
                },
                actor: Some(&user.subject),
                issuer: Some(&e.issuer),
                subject: Some(&e.subject),
                provider: Some(&e.provider),
                client_id: Some(&e.client_id),
                connection_id: Some(&connection_id),
                elicitation_id: Some(&e.id),
                request_id,
                detail,
                organization: (!organization.is_empty())
                    .then_some(organization.as_str())
                    .or(e.client_organization.as_deref()),
            })
            .await?;
        let completed = self
            .finish_elicitation_in(
                &mut change,
                e,
                Ending::Completed {
                    connection_id: &ConnectionId::from(connection_id.as_str()),
                    account: &AccountRef {
                        id: account_id.to_owned(),
                        label: tokens.account_label.map(str::to_owned),
                        nickname: None,
                    },
                },
                request_id,
            )
            .await?;
        self.signals.commit(change).await?;
        if completed {
            self.metrics
                .elicitation(ElicitationStatus::Completed.as_str());
        }
        Ok(())
    }
}
