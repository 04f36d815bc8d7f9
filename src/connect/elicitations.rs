//! Elicitations as the API hands them out: creation (or reuse of a pending one), the view with
//! ready-to-send MCP payloads for both protocol eras, and completion.

use serde::Serialize;
use serde_json::{Value, json};

use crate::config::ClientConfig;
use crate::connect::Connect;
use crate::crypto::random_token;
use crate::db;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::ConnParams;
use crate::db::elicitations::{AccountAsk, Elicitation, ElicitationStatus, Ending, FailureReason};
use crate::error::{Error, Result};
use crate::i18n::{Lang, tr};
use crate::ids::{ConnectionId, ElicitationId};
use crate::providers::Provider;
use crate::time::now;

/// Bytes of randomness in an elicitation id (144 bits).
const ID_BYTES: usize = 18;
/// A reused elicitation must have at least this long left to live.
const REUSE_MIN_REMAINING: i64 = 120;
/// The JSON-RPC error code of URLElicitationRequiredError (2025-11-25).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// Checks the shape of an id from a URL or body before it reaches the database.
pub fn is_valid_id(id: &str) -> bool {
    crate::ids::ElicitationId::parse(id).is_ok()
}

/// Kept so code written against `elicitations::rfc3339` still builds; see `crate::time`.
pub use crate::time::rfc3339;

/// The elicitation as the API returns it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ElicitationView {
    #[schema(value_type = String)]
    pub id: ElicitationId,
    /// The connect URL to hand to the MCP client. Carries no personal data.
    pub url: String,
    /// What the MCP client shows the user, in the language the API request's `Accept-Language`
    /// asks for (`en` or `zh-CN`; English otherwise): the provider's configured `message`, or the
    /// built-in one.
    pub message: String,
    pub status: ElicitationStatus,
    pub subject: String,
    pub provider: String,
    pub scopes: Vec<String>,
    /// RFC 3339.
    pub expires_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub connection_id: Option<ConnectionId>,
    /// `failed` only: why. `provider_misconfigured`: what the provider publishes failed a
    /// security check (an upstream MCP server's metadata names another resource or issuer);
    /// an operator must fix the provider, and a new elicitation will fail the same way.
    /// `provider_error`: the provider refused or failed the authorization; a new elicitation
    /// may succeed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// Per-connection parameters given so far (`tenant`, `subdomain`, ...); the consent page
    /// asks the user for the ones the provider needs and nobody gave.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub params: ConnParams,
    /// Ready-to-send payloads, keyed by MCP protocol version: `2026-07-28` is the
    /// `{method, params}` to put into `InputRequiredResult.inputRequests`; `2025-11-25` has the
    /// `elicitation/create` params and the complete `-32042` error.
    #[schema(value_type = Object)]
    pub mcp: Value,
    /// Sealed state bound to this API client, the subject, the provider and this elicitation,
    /// valid until `expires_at`. Put it verbatim into `InputRequiredResult.requestState`; hand it
    /// back to `POST /v1/tokens` as `request_state`.
    pub request_state: String,
}

/// What an elicitation asks the user for beyond who and which provider: scopes (`None`: the
/// provider's configured ones), per-connection parameters given up front (each already checked
/// with `params::check_given`; the consent page asks for the rest), and which account.
pub struct ElicitationAsk {
    pub scopes: Option<Vec<String>>,
    pub params: ConnParams,
    pub account: AccountAsk,
}

impl Connect {
    /// The configured API client `id`, if it still is.
    pub fn client(&self, id: &str) -> Option<&ClientConfig> {
        self.clients.get(id).map(|c| &**c)
    }

    /// What to call API client `id` on a page: its configured name, else the id itself.
    pub fn client_name<'a>(&'a self, id: &'a str) -> &'a str {
        self.client(id).map_or(id, |c| c.name.as_str())
    }

    pub fn connect_url(&self, id: &str) -> String {
        self.config.url(&format!("/connect/{id}"))
    }

    /// What the MCP client shows its user, in `lang`: the operator's `message` for that
    /// language, else the built-in one.
    pub fn elicitation_message(
        &self,
        client: &ClientConfig,
        provider: &Provider,
        lang: Lang,
    ) -> String {
        match provider.message.as_ref().and_then(|m| m.get(lang)) {
            Some(template) => template
                .replace("{client}", &client.name)
                .replace("{provider}", &provider.display_name),
            None => tr(
                lang,
                "elicitation-message",
                &[
                    ("client", client.name.clone()),
                    ("provider", provider.display_name.clone()),
                ],
            ),
        }
    }

    /// The view with the message in English.
    pub fn elicitation_view(&self, e: &Elicitation) -> Result<ElicitationView> {
        self.elicitation_view_in(e, Lang::En)
    }

    /// The view with the message in `lang` (the API caller's `Accept-Language`).
    pub fn elicitation_view_in(&self, e: &Elicitation, lang: Lang) -> Result<ElicitationView> {
        let url = self.connect_url(&e.id);
        let message = match (self.client(&e.client_id), self.providers.get(&e.provider)) {
            (Some(c), Some(p)) => self.elicitation_message(c, p, lang),
            _ => tr(
                lang,
                "elicitation-message-unknown",
                &[("provider", e.provider.clone())],
            ),
        };
        let params_2025 =
            json!({ "mode": "url", "elicitationId": e.id, "url": url, "message": message });
        let mcp = json!({
            "2026-07-28": {
                "method": "elicitation/create",
                "params": { "mode": "url", "message": message, "url": url }
            },
            "2025-11-25": {
                "params": params_2025,
                "error": {
                    "code": URL_ELICITATION_REQUIRED,
                    "message": message,
                    "data": { "elicitations": [params_2025] }
                }
            }
        });
        Ok(ElicitationView {
            id: e.id.clone(),
            url,
            message,
            status: e.effective_status(now()),
            subject: e.subject.clone(),
            provider: e.provider.clone(),
            scopes: e.scopes.clone(),
            expires_at: rfc3339(e.expires_at),
            connection_id: e.connection_id.clone(),
            reason: e.failure_reason().map(FailureReason::as_str),
            params: e.params.clone(),
            mcp,
            request_state: crate::connect::request_state::seal(&self.config.keys, e)?,
        })
    }

    /// Creates an elicitation, or hands out the still-pending one for the same request.
    pub async fn create_or_reuse_elicitation(
        &self,
        client: &ClientConfig,
        subject: &str,
        provider: &Provider,
        scopes: Option<Vec<String>>,
        account: AccountAsk,
        request_id: Option<&str>,
    ) -> Result<Elicitation> {
        self.create_or_reuse_elicitation_with(
            client,
            subject,
            provider,
            ElicitationAsk {
                scopes,
                params: ConnParams::new(),
                account,
            },
            request_id,
        )
        .await
    }

    /// `create_or_reuse_elicitation` with per-connection parameters given up front (each one
    /// already checked with `params::check_given`; the consent page asks for the rest).
    pub async fn create_or_reuse_elicitation_with(
        &self,
        client: &ClientConfig,
        subject: &str,
        provider: &Provider,
        ask: ElicitationAsk,
        request_id: Option<&str>,
    ) -> Result<Elicitation> {
        let ElicitationAsk {
            scopes,
            params,
            account,
        } = ask;
        let mut scopes = scopes.unwrap_or_else(|| provider.scopes.clone());
        let issuer = self.identity.issuer();
        // The user's grant for one account at this provider is one (shared by the apps they
        // approved): asking again for it asks for the union, so no app loses a scope it was
        // granted. Another account starts from what is asked.
        if !account.add {
            let accounts = match &account.owner {
                db::elicitations::Owner::User => {
                    self.db
                        .find_accounts(issuer, subject, &provider.name)
                        .await?
                }
                db::elicitations::Owner::Organization(Some(org)) => self
                    .db
                    .find_organization_accounts_with_clients(issuer, org, &provider.name)
                    .await?
                    .into_iter()
                    .map(|(c, _)| c)
                    .collect(),
                db::elicitations::Owner::Organization(None) => Vec::new(),
            };
            let target = match &account.reconnect {
                Some(id) => accounts.into_iter().find(|c| &c.id == id),
                None => accounts.into_iter().next(),
            };
            if let Some(c) =
                target.filter(|c| c.status != crate::db::connections::ConnectionStatus::Revoked)
            {
                scopes.extend(c.scopes);
            }
        }
        scopes.sort();
        scopes.dedup();
        if let Some(e) = self
            .db
            .find_reusable_elicitation(
                &client.id,
                issuer,
                subject,
                &provider.name,
                &scopes,
                &params,
                &account,
                REUSE_MIN_REMAINING,
            )
            .await?
        {
            return Ok(e);
        }
        let now = now();
        let e = Elicitation {
            id: ElicitationId::new(random_token(ID_BYTES)),
            client_id: client.id.clone(),
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
            provider: provider.name.clone(),
            scopes,
            status: ElicitationStatus::Pending,
            connection_id: None,
            failure: None,
            created_at: now,
            expires_at: now + self.config.elicitation_ttl_seconds as i64,
            params,
            add_account: account.add,
            account_connection_id: account.reconnect,
            owner: account.owner,
            client_organization: None,
        };
        let mut change = Change::begin(&self.db).await?;
        db::elicitations::insert_elicitation(change.conn(), &e).await?;
        change
            .audit(AuditEvent {
                actor: Some(&client.id),
                issuer: Some(issuer),
                subject: Some(subject),
                provider: Some(&provider.name),
                client_id: Some(&client.id),
                elicitation_id: Some(&e.id),
                request_id,
                ..AuditEvent::new(AuditAction::ElicitationCreated)
            })
            .await?;
        self.signals.commit(change).await?;
        self.metrics.elicitation("created");
        Ok(e)
    }

    /// Moves an elicitation to its final status, records it and wakes its waiters. Returns
    /// false (and changes nothing) if it was no longer pending.
    pub async fn finish_elicitation(
        &self,
        e: &Elicitation,
        end: Ending<'_>,
        request_id: Option<&str>,
    ) -> Result<bool> {
        let mut change = Change::begin(&self.db).await?;
        let changed = self
            .finish_elicitation_in(&mut change, e, end, request_id)
            .await?;
        if changed {
            self.signals.commit(change).await?;
            self.metrics.elicitation(end.status().as_str());
        }
        Ok(changed)
    }

    /// `finish_elicitation` as part of a larger change: the status, its audit row, its event
    /// and the waiters' wake-up all go with `change`.
    pub async fn finish_elicitation_in(
        &self,
        change: &mut Change,
        e: &Elicitation,
        end: Ending<'_>,
        request_id: Option<&str>,
    ) -> Result<bool> {
        let changed = db::elicitations::finish_elicitation(change.conn(), &e.id, end).await?;
        let (status, connection_id, failure) = (end.status(), end.connection_id(), end.failure());
        if !changed {
            return Ok(false);
        }
        change
            .audit(AuditEvent {
                event: AuditAction::elicitation(status),
                actor: Some(&e.subject),
                issuer: Some(&e.issuer),
                subject: Some(&e.subject),
                provider: Some(&e.provider),
                client_id: Some(&e.client_id),
                connection_id: connection_id.map(|c| c.as_str()),
                elicitation_id: Some(&e.id),
                request_id,
                detail: failure,
                organization: e.owner.organization(),
            })
            .await?;
        let finished = Elicitation {
            status,
            connection_id: connection_id.cloned(),
            failure: failure.map(str::to_owned),
            ..e.clone()
        };
        change
            .events(
                self.signals
                    .elicitation_event_rows(&finished, status, end.account())?,
            )
            .await?;
        change.elicitation_changed(&e.id).await?;
        Ok(true)
    }

    /// Moves pending elicitations past their expiry to `expired`, recording an
    /// `elicitation.expired` event for each and waking their waiters, in one transaction.
    pub async fn expire_elicitations(&self) -> Result<usize> {
        let mut change = Change::begin(&self.db).await?;
        let expired = db::elicitations::expire_pending_elicitations(change.conn()).await?;
        for e in &expired {
            change
                .audit(AuditEvent {
                    actor: Some("system"),
                    issuer: Some(&e.issuer),
                    subject: Some(&e.subject),
                    provider: Some(&e.provider),
                    client_id: Some(&e.client_id),
                    elicitation_id: Some(&e.id),
                    ..AuditEvent::new(AuditAction::ElicitationExpired)
                })
                .await?;
            change.elicitation_changed(&e.id).await?;
        }
        self.signals.commit(change).await?;
        for _ in &expired {
            self.metrics.elicitation("expired");
        }
        Ok(expired.len())
    }

    /// The elicitation if it exists and belongs to `client`; otherwise `not_found` (never
    /// revealing that another client's elicitation exists).
    pub async fn client_elicitation(&self, client: &ClientConfig, id: &str) -> Result<Elicitation> {
        let not_found = || Error::not_found("no such elicitation");
        if !is_valid_id(id) {
            return Err(not_found());
        }
        match self.db.get_elicitation(id).await? {
            Some(e) if e.client_id == client.id => Ok(e),
            _ => Err(not_found()),
        }
    }
}
