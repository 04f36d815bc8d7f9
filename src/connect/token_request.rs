//! The "give me a token" use case (`POST /v1/tokens`): prove the subject, wait for an
//! elicitation if asked, find the grant this client may use, and answer with a fresh token — or
//! with what the caller must do instead: show an elicitation (not connected, scopes the grant
//! lacks, a grant that no longer works), or learn that its user declined or that the provider is
//! misconfigured.

use std::sync::Arc;
use std::time::Duration;

use secrecy::ExposeSecret;

use crate::config::AccountSelection;
use crate::config::ClientConfig;
use crate::connect::Connect;
use crate::db::connections::{Connection, ConnectionStatus};
use crate::db::elicitations::{AccountAsk, Owner};
use crate::db::elicitations::{ElicitationStatus, FailureReason};
use crate::error::AccountChoice;
use crate::error::{Error, Result};
use crate::grants::tokens::FreshToken;
use crate::i18n::Lang;
use crate::ids::{ElicitationId, ProviderName, Subject, UserRef};
use crate::providers::Provider;
use crate::providers::mcp::{ProofError, ProofTarget};

/// The longest a request may wait for an elicitation to finish (a token request, a long poll of
/// `GET /v1/elicitations/{id}`), in seconds.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// The elicitation a token request waits for.
pub enum Awaited {
    /// By id, as `POST /v1/elicitations` answered it.
    Id(String),
    /// By the sealed `request_state` handed out with it (and echoed back by a 2026-07-28 MCP
    /// client's retry).
    RequestState(String),
}

/// A token request, as the API parsed it.
pub struct TokenAsk<'a> {
    pub client: &'a ClientConfig,
    pub subject: Option<&'a str>,
    pub subject_token: Option<&'a str>,
    pub provider: &'a ProviderName,
    /// Which of the user's accounts at the provider: its id or label (`None`: the default).
    pub account: Option<&'a str>,
    /// Whose connection: the user's own, their organisation's, or (`Any`) the user's own and
    /// else their organisation's.
    pub whose: Whose,
    pub scopes: Option<Vec<String>>,
    pub min_ttl_seconds: Option<i64>,
    pub force_refresh: bool,
    /// When not connected, answer with a ready elicitation.
    pub elicit: bool,
    /// With `elicit`, scopes the grant lacks are asked for too (an upgrade elicitation);
    /// without, they are `InsufficientScope`, so the caller learns which.
    pub elicit_scopes: bool,
    pub awaited: Option<Awaited>,
    pub wait_seconds: Option<u64>,
    pub request_id: Option<String>,
    /// The language of an offered elicitation's message.
    pub lang: Lang,
    /// What a DPoP-bound token comes with.
    pub dpop: ProofFor,
}

/// What a DPoP-bound token (RFC 9449) comes with.
pub enum ProofFor {
    /// Nothing named: such a token is refused, saying what to send.
    Unnamed,
    /// A proof for the request the caller will make with it (`/v1/tokens` `dpop`).
    Request(ProofTarget),
    /// No proof: the caller makes one for each call itself (the proxy).
    EachCall,
}

/// Whose connection a token request asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Whose {
    /// The user's own; when they have none at the provider, their organisation's — only when
    /// a `subject_token` proved the membership.
    #[default]
    Any,
    /// The user's own only.
    Own,
    /// The user's organisation's only (a `subject_token` must prove the membership).
    Organization,
}

/// How the awaited elicitation ended, where that decides the answer.
#[derive(Default)]
struct AwaitedEnd {
    /// The user declined it: its id.
    declined: Option<ElicitationId>,
    /// It failed because the provider is misconfigured: the error to answer with.
    failed: Option<Error>,
}

impl AwaitedEnd {
    /// The answer when the awaited elicitation's end decides it.
    fn refusal(&mut self, provider: &Provider) -> Option<Error> {
        if let Some(id) = self.declined.take() {
            return Some(Error::AuthorizationDeclined {
                provider: provider.name.clone(),
                elicitation_id: id,
            });
        }
        self.failed.take()
    }
}

impl Connect {
    /// A fresh token for `ask`, or the error that tells the caller what to do instead.
    /// `long_poll_slot` is taken only while waiting for an elicitation (the surface bounds how
    /// many requests of one client wait at once); its guard is held for the wait, and its
    /// refusal (`Ok(Err(_))`) is the surface's own answer, passed back untouched.
    /// A client with `token_access = "proxy"` is refused (`ProxyOnly`): it never holds a
    /// provider token.
    pub async fn token_for<G, R>(
        &self,
        ask: TokenAsk<'_>,
        long_poll_slot: impl FnOnce() -> std::result::Result<G, R>,
    ) -> Result<std::result::Result<(FreshToken, Arc<Provider>), R>> {
        if ask.client.token_access == crate::config::TokenAccess::Proxy {
            return Err(Error::ProxyOnly);
        }
        self.fresh_token_for(ask, long_poll_slot).await
    }

    /// `token_for` for any client: the proxy's way to a token, which never leaves the service.
    pub(crate) async fn fresh_token_for<G, R>(
        &self,
        ask: TokenAsk<'_>,
        long_poll_slot: impl FnOnce() -> std::result::Result<G, R>,
    ) -> Result<std::result::Result<(FreshToken, Arc<Provider>), R>> {
        let rid = ask.request_id.as_deref();
        let principal = self
            .resolve_principal(ask.client, ask.subject, ask.subject_token, rid)
            .await?;
        let organization = match (ask.whose, &principal.membership) {
            (Whose::Own, _) => None,
            (_, Some(m)) => Some(m.organization.clone()),
            (Whose::Organization, None) => {
                return Err(Error::NoOrganization(
                    "owner \"organization\" needs a subject_token whose claims name the user's organisation".into(),
                ));
            }
            (Whose::Any, None) => None,
        };
        let subject = principal.subject;
        let provider = self.provider_for_client(ask.client, ask.provider)?.clone();
        let min_ttl = ask.min_ttl_seconds.unwrap_or(60);
        if !(0..=86_400).contains(&min_ttl) {
            return Err(Error::invalid(
                "min_ttl_seconds must be between 0 and 86400",
            ));
        }
        // The cold paths' futures are boxed (the wait, the offers, the DPoP proof): the hot
        // path's future is then small, and moving it costs less on every request.
        let mut end = if ask.awaited.is_none() && ask.wait_seconds.is_none() {
            AwaitedEnd::default()
        } else {
            match Box::pin(self.await_elicitation(&ask, &subject, &provider, long_poll_slot))
                .await?
            {
                Ok(end) => end,
                Err(refused) => return Ok(Err(refused)),
            }
        };

        let own = match ask.whose {
            Whose::Organization => None,
            Whose::Any | Whose::Own => {
                let accounts = self
                    .grants
                    .accounts_for_token(&subject, ask.provider)
                    .await?;
                self.usable_connection(ask.client, &subject, ask.provider, ask.account, &accounts)
                    .await?
            }
        };
        let found = match (own, &organization) {
            (Some(c), _) => Some(c),
            (None, Some(org)) => {
                let accounts = self
                    .grants
                    .organization_accounts_for_token(org, ask.provider)
                    .await?;
                self.usable_connection(ask.client, &subject, ask.provider, ask.account, &accounts)
                    .await?
            }
            (None, None) => None,
        };
        let Some(connection) = found else {
            // The user said no to this very request, or the provider is misconfigured: say so,
            // rather than hand out a new elicitation the caller would show again.
            if let Some(refusal) = end.refusal(&provider) {
                return Err(refusal);
            }
            // A named account that is not connected (for this client) is another account.
            let account = AccountAsk {
                add: ask.account.is_some(),
                reconnect: None,
                owner: match ask.whose {
                    Whose::Organization => Owner::Organization(organization),
                    Whose::Any | Whose::Own => Owner::User,
                },
            };
            if ask.elicit {
                return Err(Error::AuthorizationRequired {
                    provider: provider.name.clone(),
                    elicitation: Box::new(
                        self.offer(&ask, &subject, &provider, ask.scopes.clone(), account)
                            .await?,
                    ),
                });
            }
            if let Some(a) = ask.account {
                return Err(Error::NotConnected {
                    subject: subject.into_string(),
                    provider: format!("{} account {a:?}", ask.provider),
                });
            }
            return Err(Error::NotConnected {
                subject: subject.into_string(),
                provider: ask.provider.to_string(),
            });
        };
        let this_account = AccountAsk {
            add: false,
            reconnect: Some(connection.id.clone()),
            owner: if connection.organization.is_empty() {
                Owner::User
            } else {
                Owner::Organization(Some(connection.organization.clone()))
            },
        };
        // Scopes the call needs that the grant lacks: with `elicit`, incremental authorization
        // (the user approves the union; the stored grant keeps serving requests within its
        // scopes meanwhile); without, the caller learns which.
        if let Some(asked) = &ask.scopes {
            let missing: Vec<String> = asked
                .iter()
                .filter(|s| !connection.scopes.contains(s))
                .cloned()
                .collect();
            if !missing.is_empty() {
                if let Some(refusal) = end.refusal(&provider) {
                    return Err(refusal);
                }
                if !(ask.elicit && ask.elicit_scopes) {
                    return Err(Error::InsufficientScope {
                        provider: provider.name.clone(),
                        missing_scopes: missing,
                    });
                }
                // What this client asks for by default, what is granted, and what is new.
                let mut union = provider.scopes.clone();
                union.extend(asked.iter().cloned());
                return Err(Error::AuthorizationRequired {
                    provider: provider.name.clone(),
                    elicitation: Box::new(
                        self.offer(&ask, &subject, &provider, Some(union), this_account)
                            .await?,
                    ),
                });
            }
        }
        let answer = match self
            .grants
            .fresh_token(
                connection,
                provider.clone(),
                min_ttl,
                ask.force_refresh,
                ask.request_id.clone(),
            )
            .await
        {
            Ok(t) => {
                let t = with_dpop_proof(t, &provider, &ask.dpop).await?;
                Ok((t, provider))
            }
            Err(Error::ReauthorizationRequired {
                provider: p,
                elicitation,
            }) => {
                if let Some(refusal) = end.refusal(&provider) {
                    return Err(refusal);
                }
                if !ask.elicit {
                    return Err(Error::ReauthorizationRequired {
                        provider: p,
                        elicitation,
                    });
                }
                let view = self
                    .offer(&ask, &subject, &provider, ask.scopes.clone(), this_account)
                    .await?;
                Err(Error::ReauthorizationRequired {
                    provider: p,
                    elicitation: Some(Box::new(view)),
                })
            }
            Err(e) => Err(e),
        };
        answer.map(Ok)
    }

    /// The provider `name`, if `client` may use it.
    pub fn provider_for_client(&self, client: &ClientConfig, name: &str) -> Result<&Arc<Provider>> {
        let p = self
            .providers
            .get(name)
            .ok_or_else(|| Error::not_found(format!("no provider named {name:?} is configured")))?;
        if !client.providers.iter().any(|x| x == name) {
            return Err(Error::ForbiddenProvider(format!(
                "this API client may not use provider {name:?}"
            )));
        }
        Ok(p)
    }

    /// Checks the awaited elicitation (if any) belongs to this request, waits for it if asked,
    /// and tells how it ended where that decides the answer.
    async fn await_elicitation<G, R>(
        &self,
        ask: &TokenAsk<'_>,
        subject: &Subject,
        provider: &Provider,
        long_poll_slot: impl FnOnce() -> std::result::Result<G, R>,
    ) -> Result<std::result::Result<AwaitedEnd, R>> {
        let user = || UserRef::new(self.identity.issuer(), subject.clone());
        let eid = match &ask.awaited {
            None if ask.wait_seconds.is_some() => {
                return Err(Error::invalid(
                    "wait_seconds needs elicitation_id or request_state",
                ));
            }
            None => return Ok(Ok(AwaitedEnd::default())),
            Some(Awaited::Id(id)) => id.clone(),
            Some(Awaited::RequestState(sealed)) => {
                crate::connect::request_state::open(
                    &self.config.keys,
                    sealed,
                    &crate::connect::request_state::Expected {
                        client_id: &ask.client.id,
                        user: user(),
                        provider: ask.provider,
                        now: crate::time::now(),
                    },
                )?
                .elicitation_id
            }
        };
        let mut e = self.client_elicitation(ask.client, &eid).await?;
        if e.user_ref() != user() || e.provider != *ask.provider {
            return Err(Error::invalid(
                "the elicitation was made for another subject or provider",
            ));
        }
        match ask.wait_seconds {
            Some(w) if w > MAX_WAIT_SECONDS => {
                return Err(Error::invalid(format!(
                    "wait_seconds must be at most {MAX_WAIT_SECONDS}"
                )));
            }
            Some(w) if w > 0 => {
                let _slot = match long_poll_slot() {
                    Ok(slot) => slot,
                    Err(refused) => return Ok(Err(refused)),
                };
                if let Some(done) = self
                    .waiters
                    .wait(&self.db, &e.id, Duration::from_secs(w))
                    .await?
                {
                    e = done;
                }
            }
            _ => {}
        }
        let mut end = AwaitedEnd::default();
        match e.effective_status(crate::time::now()) {
            ElicitationStatus::Declined => end.declined = Some(e.id.clone()),
            // Only a misconfigured provider is answered with the failure: a new elicitation
            // would fail the same way. After any other failure the caller gets what SPEC says
            // for "not connected" (with `elicit`, a new elicitation the user may retry).
            ElicitationStatus::Failed => {
                end.failed = e
                    .failure_reason()
                    .filter(|r| *r == FailureReason::ProviderMisconfigured)
                    .map(|r| Error::AuthorizationFailed {
                        provider: provider.name.clone(),
                        elicitation_id: e.id.clone(),
                        reason: r,
                    })
            }
            _ => {}
        }
        Ok(Ok(end))
    }

    /// The user's live connection at `provider` for `account` (its id, label or nickname;
    /// `None`: the default account), if `client` may use it. Another app's grant is, for this
    /// client, no grant at all (and says nothing about it). Without `account`, a client that
    /// must choose (`account_selection = "explicit"`) learns the accounts it may use when there
    /// are several.
    async fn usable_connection(
        &self,
        client: &ClientConfig,
        subject: &Subject,
        provider: &ProviderName,
        account: Option<&str>,
        accounts: &crate::db::token_cache::Accounts,
    ) -> Result<Option<Arc<Connection>>> {
        let mut usable = Vec::with_capacity(accounts.len());
        for g in accounts.iter() {
            if g.row.status != ConnectionStatus::Revoked
                && self.grants.may_use_granted(client, g).await?
            {
                usable.push(&g.row);
            }
        }
        let Some(a) = account else {
            if usable.len() > 1 && client.account_selection == AccountSelection::Explicit {
                return Err(Error::AccountSelectionRequired {
                    subject: subject.to_string(),
                    provider: provider.to_string(),
                    accounts: usable
                        .iter()
                        .enumerate()
                        .map(|(i, c)| account_choice(c, i == 0))
                        .collect(),
                });
            }
            return Ok(usable.first().map(|c| Arc::clone(c)));
        };
        Ok(select_account(&usable, a).map(Arc::clone))
    }

    /// A ready elicitation (new, or the pending one) for the caller to hand to its MCP client.
    async fn offer(
        &self,
        ask: &TokenAsk<'_>,
        subject: &Subject,
        provider: &Provider,
        scopes: Option<Vec<String>>,
        account: AccountAsk,
    ) -> Result<serde_json::Value> {
        // Boxed: an offer is the cold path, and its writes' futures are large.
        let e = Box::pin(self.create_or_reuse_elicitation(
            ask.client,
            subject,
            provider,
            scopes,
            account,
            ask.request_id.as_deref(),
        ))
        .await?;
        serde_json::to_value(self.elicitation_view_in(&e, ask.lang)?).map_err(Error::internal)
    }
}

/// The account `named` (its provider id, else its label, else its nickname) among `accounts`.
/// A label or nickname two accounts share names neither: the caller must use the id.
pub fn select_account<'c>(
    accounts: &[&'c Arc<Connection>],
    named: &str,
) -> Option<&'c Arc<Connection>> {
    if let Some(c) = accounts
        .iter()
        .find(|c| !c.account_id.is_empty() && c.account_id == named)
    {
        return Some(c);
    }
    let unique = |f: &dyn Fn(&Connection) -> Option<&str>| {
        let mut found = accounts.iter().filter(|c| f(c) == Some(named));
        match (found.next(), found.next()) {
            (Some(c), None) => Some(*c),
            _ => None,
        }
    };
    unique(&|c| c.account_label.as_deref()).or_else(|| unique(&|c| c.nickname.as_deref()))
}

/// How an account is listed to a caller that must choose.
pub fn account_choice(c: &Connection, default: bool) -> AccountChoice {
    AccountChoice {
        id: c.account_id.clone(),
        label: c.account_label.clone(),
        nickname: c.nickname.clone(),
        connection_id: c.id.to_string(),
        default,
    }
}

/// A DPoP-bound token (RFC 9449) is of no use without a proof for each request, made with a key
/// that never leaves mcp-connect: the caller names the request (`dpop`), and gets the proof
/// with the token. Other tokens pass as they are (a `dpop` is then ignored).
async fn with_dpop_proof(
    mut t: FreshToken,
    provider: &Provider,
    target: &ProofFor,
) -> Result<FreshToken> {
    if !crate::providers::mcp::is_dpop_bound(&t.connection.token_type) {
        return Ok(t);
    }
    let target = match target {
        ProofFor::Request(target) => target,
        ProofFor::EachCall => return Ok(t),
        ProofFor::Unnamed => {
            return Err(Error::invalid(
                "this token is DPoP-bound (token_type DPoP): send dpop: {htm, htu} naming the HTTP method and URL of the request you will make to the MCP server (and nonce, when it answered with a DPoP-Nonce header), then present the token as Authorization: DPoP <access_token> with the returned dpop_proof in the DPoP header",
            ));
        }
    };
    t.dpop_proof = Some(Box::pin(dpop_proof(&t, provider, target)).await?);
    Ok(t)
}

/// A proof for presenting the DPoP-bound token `t` in the request `target` names, made with the
/// key the token is bound to (kept sealed, never handed out).
pub(in crate::connect) async fn dpop_proof(
    t: &FreshToken,
    provider: &Provider,
    target: &ProofTarget,
) -> Result<String> {
    let issuer = t
        .connection
        .metadata
        .get(crate::providers::mcp::AUTHORIZATION_SERVER)
        .and_then(serde_json::Value::as_str);
    let (Some(upstream), Some(issuer)) = (&provider.mcp, issuer) else {
        return Err(Error::internal(anyhow::anyhow!(
            "a DPoP-bound token of provider {} without the authorization server that issued it",
            provider.name
        )));
    };
    match upstream
        .resource_proof(
            &provider.name,
            issuer,
            target,
            t.access_token.expose_secret(),
        )
        .await
    {
        Ok(proof) => Ok(proof),
        Err(ProofError::Refused(why)) => Err(Error::invalid(why)),
        Err(ProofError::Internal(e)) => Err(Error::internal(e)),
    }
}
