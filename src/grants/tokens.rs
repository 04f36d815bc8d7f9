//! Handing out fresh access tokens: refresh when close to expiry, with at most one redemption
//! of a refresh token at a time across every replica, `invalid_grant` handled without losing a
//! good token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use secrecy::SecretString;

use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::{
    Connection, ConnectionStatus, NewTokens, record_refresh_failure, save_refreshed_tokens,
};
use crate::db::refresh_lock::RefreshLock;
use crate::error::{Error, Result};
use crate::grants::Grants;
use crate::providers::{Provider, TokenError};
use crate::signals::events::EventType;
use crate::time::now;

/// How long a request waits for another redemption of the same refresh token to finish.
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// Attempts at a refresh that fails transiently (timeouts, 5xx), with backoff between.
const REFRESH_ATTEMPTS: u32 = 3;

/// A token ready to hand to an MCP server.
pub struct FreshToken {
    pub access_token: SecretString,
    /// The connection the token is for, as stored with this token: its type, expiry, scopes,
    /// account, parameters and metadata. Shared with the token cache rather than copied, so a
    /// fetch from the cache copies nothing but the token it opens.
    pub connection: Arc<Connection>,
    /// For a DPoP-bound token: the proof to present it with, for the request the caller named.
    pub dpop_proof: Option<String>,
}

/// Serialises refreshes of one connection inside this process, so only one request per
/// replica queues on the database lock, and bounds the redemptions running at once.
pub struct RefreshCoordinator {
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Redemptions in progress hold a database connection (the lock's) for as long as the
    /// provider takes; at most this many run at once, well below the pool size, so a burst of
    /// refreshes never takes the connections that token reads, sign-ins and `/readyz` need.
    /// The others wait for a permit holding no connection at all.
    permits: tokio::sync::Semaphore,
}

impl RefreshCoordinator {
    /// A coordinator for a pool of `pool_size` connections.
    pub fn new(pool_size: u32) -> Self {
        Self {
            inflight: Mutex::default(),
            permits: tokio::sync::Semaphore::new((pool_size as usize / 2).max(1)),
        }
    }

    fn slot(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, v| Arc::strong_count(v) > 1);
        m.entry(id.to_owned()).or_default().clone()
    }
}

/// A token obtained this recently is as fresh as the provider will make it: refreshing again
/// would only burn a redemption (and, for lifetimes shorter than `min_ttl_seconds`, every request
/// would refresh).
const JUST_REFRESHED_SECONDS: i64 = 30;

/// Whether the token should be refreshed to satisfy `min_ttl` seconds of validity.
fn expires_within(c: &Connection, seconds: i64) -> bool {
    let now = now();
    let just_refreshed = c
        .last_refresh_at
        .is_some_and(|t| now - t < JUST_REFRESHED_SECONDS)
        && !expired_at(c, now);
    !just_refreshed && c.expires_at.is_some_and(|e| e - now <= seconds)
}

/// Whether `c`, read after waiting for other refreshes, can be handed out as it is. Someone else
/// redeemed the refresh token while we waited (`token_version` moved on from `seen_version`):
/// theirs is the newest token the provider will give, so take it rather than redeem again.
fn no_refresh_needed(c: &Connection, seen_version: i64, min_ttl: i64, force: bool) -> bool {
    let someone_refreshed = c.token_version != seen_version;
    (someone_refreshed && !is_expired(c)) || (!force && !expires_within(c, min_ttl))
}

fn is_expired(c: &Connection) -> bool {
    expired_at(c, now())
}

fn expired_at(c: &Connection, now: i64) -> bool {
    c.expires_at.is_some_and(|e| e <= now)
}

impl Grants {
    /// The connection's access token, refreshed first if it expires within `min_ttl` seconds
    /// (or regardless, with `force`).
    pub async fn fresh_token(
        &self,
        c: Arc<Connection>,
        provider: Arc<Provider>,
        min_ttl: i64,
        force: bool,
        request_id: Option<String>,
    ) -> Result<FreshToken> {
        match c.status {
            ConnectionStatus::Active => {}
            ConnectionStatus::NeedsReauth => return Err(reauth(&provider)),
            ConnectionStatus::Revoked => {
                return Err(Error::NotConnected {
                    subject: c.subject.clone(),
                    provider: c.provider.clone(),
                });
            }
        }
        // An API key or password is handed back as stored: there is nothing to refresh.
        if (!force && !expires_within(&c, min_ttl))
            || crate::config::AuthKind::is_credential_type(&c.token_type)
        {
            return self.token_of(c);
        }
        // An upstream MCP server refused the token: it may have moved to another authorization
        // server behind the same metadata URL, which only its discovery says. Read it again
        // now, before any lock is taken (a network call holds no database connection); the
        // refresh below then refuses a grant issued elsewhere. A failure leaves the previous
        // result in place, and the refresh decides with it.
        if force && provider.mcp.is_some() {
            if let Err(e) = Box::pin(provider.endpoints_read_again(&self.http)).await {
                tracing::warn!(provider = %provider.name, error = format!("{e:#}"), "MCP discovery before a forced refresh failed");
            }
        }
        // The refresh runs in its own task: if the caller goes away mid-redemption, the rotated
        // refresh token must still be stored, or the grant would be lost.
        let state = self.clone();
        let work = async move {
            let slot = state.refresh.slot(&c.id);
            // Another request in this process is refreshing this connection: wait for it, then
            // look at the row without the database lock. Its new token is usually what we
            // need, and then a storm of requests costs one read each instead of queueing one
            // by one for the lock.
            if slot.try_lock().is_err() {
                drop(
                    tokio::time::timeout(LOCK_WAIT, slot.lock())
                        .await
                        .map_err(|_| {
                            Error::Unavailable(anyhow::anyhow!(
                                "timed out waiting for a refresh in this process"
                            ))
                        })?,
                );
                if let Some(latest) = state.db.get_connection(&c.id).await? {
                    if latest.status == ConnectionStatus::Active
                        && no_refresh_needed(&latest, c.token_version, min_ttl, force)
                    {
                        return state.token_of(Arc::new(latest));
                    }
                }
            }
            let _local = tokio::time::timeout(LOCK_WAIT, slot.lock())
                .await
                .map_err(|_| {
                    Error::Unavailable(anyhow::anyhow!(
                        "timed out waiting for a refresh in this process"
                    ))
                })?;
            // Wait for a redemption permit holding no database connection. A caller whose
            // token still works gets it rather than an error when the queue is too long.
            let Ok(Ok(_permit)) =
                tokio::time::timeout(LOCK_WAIT, state.refresh.permits.acquire()).await
            else {
                if !force && !is_expired(&c) {
                    return state.token_of(c);
                }
                return Err(Error::Unavailable(anyhow::anyhow!(
                    "too many refreshes at once; try again shortly"
                )));
            };
            let mut lock = crate::db::refresh_lock::acquire(&state.db, &c.id, LOCK_WAIT).await?;
            let result = state
                .refresh_locked(
                    &mut lock,
                    &c.id,
                    &provider,
                    min_ttl,
                    force,
                    c.token_version,
                    request_id.as_deref(),
                )
                .await;
            lock.release().await;
            result
        };
        // In the request's span: the refresh's calls to the provider belong to its trace.
        let task = tokio::spawn(tracing::Instrument::in_current_span(work));
        task.await
            .map_err(|e| Error::internal(anyhow::anyhow!("refresh task failed: {e}")))?
    }

    /// The refresh proper, under the connection's lock. Every read and write goes through
    /// `lock`: on Postgres they run on the lock's own connection, so a refresh never asks the
    /// pool for a second connection while it holds one.
    #[allow(clippy::too_many_arguments)]
    async fn refresh_locked(
        &self,
        lock: &mut RefreshLock,
        id: &str,
        provider: &Provider,
        min_ttl: i64,
        force: bool,
        seen_version: i64,
        request_id: Option<&str>,
    ) -> Result<FreshToken> {
        // Re-read under the lock: another request or replica may have refreshed already.
        let c = lock
            .read(&self.db, id)
            .await?
            .ok_or_else(|| Error::not_found("the connection was removed"))?;
        match c.status {
            ConnectionStatus::Active => {}
            ConnectionStatus::NeedsReauth => return Err(reauth(provider)),
            ConnectionStatus::Revoked => {
                return Err(Error::NotConnected {
                    subject: c.subject,
                    provider: c.provider,
                });
            }
        }
        if no_refresh_needed(&c, seen_version, min_ttl, force) {
            return self.token_of(Arc::new(c));
        }
        if force && provider.mcp.is_some() {
            // Before anything else, with or without a refresh token: the caller was refused
            // the token, and a grant from the authorization server the MCP server left cannot
            // be made to work again, at the old server or the new one.
            let endpoints = provider
                .endpoints(&self.http)
                .await
                .map_err(Error::Upstream)?;
            if crate::providers::mcp::issued_elsewhere(&c.metadata, &endpoints) {
                return self.moved(lock, &c, provider, request_id).await;
            }
        }
        let Some(refresh_token) = c.refresh_token(&self.config.keys)? else {
            if is_expired(&c) {
                self.mark_needs_reauth(
                    lock,
                    &c,
                    "the access token expired and the provider issued no refresh token",
                    "expired without refresh token",
                    request_id,
                )
                .await?;
                return Err(reauth(provider));
            }
            if force {
                // The caller says the provider refused this token: handing it back would only
                // be refused again, and nothing here can get another without the user.
                return Err(reauth(provider));
            }
            return self.token_of(Arc::new(c));
        };
        let endpoints = provider
            .endpoints(&self.http)
            .await
            .and_then(|e| e.for_connection(provider, &c.params))
            .map_err(Error::Upstream)?;
        let endpoints = self
            .app_endpoints(provider, endpoints, &c.client_organization)
            .await?;
        if crate::providers::mcp::issued_elsewhere(&c.metadata, &endpoints) {
            return self.moved(lock, &c, provider, request_id).await;
        }
        let mut attempt = 0;
        let outcome = loop {
            attempt += 1;
            match self
                .metrics
                .upstream(
                    &provider.name,
                    "refresh",
                    provider.refresh(&self.http, &endpoints, &refresh_token),
                )
                .await
            {
                Err(TokenError::Transient(e)) if attempt < REFRESH_ATTEMPTS => {
                    tracing::info!(connection_id = %c.id, attempt, error = format!("{e:#}"), "transient refresh failure; retrying");
                    tokio::time::sleep(Duration::from_millis(250 * 4u64.pow(attempt - 1))).await;
                }
                other => break other,
            }
        };
        self.metrics.refresh(
            &provider.name,
            match &outcome {
                Ok(_) => "success",
                Err(e) if e.is_invalid_grant() => "invalid_grant",
                Err(_) => "error",
            },
        );
        match outcome {
            Ok(t) => {
                let scopes = t.scopes.clone().unwrap_or_else(|| c.scopes.clone());
                let expires_at = t.expires_in.map(|s| now() + s);
                let tokens = NewTokens {
                    access_token: &t.access_token,
                    refresh_token: t.refresh_token.as_ref(),
                    token_type: &t.token_type,
                    expires_at,
                    scopes: &scopes,
                    account_label: None,
                };
                if !self.store_redeemed(lock, &c, &tokens, request_id).await {
                    // Someone stored a newer grant while our lock was lost (the database
                    // went away mid-refresh): theirs is the current one.
                    tracing::warn!(connection_id = %c.id, "refreshed tokens lost a fencing check; using the stored ones");
                    let latest = self
                        .db
                        .get_connection(&c.id)
                        .await?
                        .ok_or_else(|| Error::not_found("the connection was removed"))?;
                    return self.token_of(Arc::new(latest));
                }
                Ok(FreshToken {
                    access_token: t.access_token,
                    connection: Arc::new(c.refreshed(t.token_type, expires_at, scopes)),
                    dpop_proof: None,
                })
            }
            Err(e) if e.is_invalid_grant() => {
                let latest = lock
                    .read(&self.db, &c.id)
                    .await?
                    .ok_or_else(|| Error::not_found("the connection was removed"))?;
                if latest.token_version != c.token_version
                    && latest.status == ConnectionStatus::Active
                {
                    return self.token_of(Arc::new(latest));
                }
                let summary = e.summary();
                self.mark_needs_reauth(lock, &c, &summary, &summary, request_id)
                    .await?;
                Err(reauth(provider))
            }
            Err(e) => {
                let summary = e.summary();
                tracing::warn!(connection_id = %c.id, provider = %c.provider, error = %summary, "refresh failed");
                let mut change = lock.change(&self.db).await?;
                record_refresh_failure(change.conn(), &c.id, &summary, false).await?;
                change.connection_changed(&c.id);
                self.signals.commit(change).await?;
                if force {
                    // Not the token the caller was just refused: a refusal needs the user, a
                    // failure is worth another try.
                    return Err(match e {
                        TokenError::OAuth { .. } => reauth(provider),
                        _ => Error::Upstream(anyhow::anyhow!(summary)),
                    });
                }
                if !is_expired(&c) {
                    // The current token still works; hand it out rather than fail.
                    return self.token_of(Arc::new(c));
                }
                Err(Error::Upstream(anyhow::anyhow!(summary)))
            }
        }
    }

    /// The MCP server moved to another authorization server: the old one's refresh token is
    /// not sent to the new one, and the grant needs the user, who authorizes there instead.
    async fn moved(
        &self,
        lock: &mut RefreshLock,
        c: &Connection,
        provider: &Provider,
        request_id: Option<&str>,
    ) -> Result<FreshToken> {
        self.mark_needs_reauth(
            lock,
            c,
            "the MCP server moved to another authorization server; connect again",
            "authorization server changed",
            request_id,
        )
        .await?;
        Err(reauth(provider))
    }

    /// Stores a redeemed grant with its audit row. The provider has already consumed the old
    /// refresh token, so this must not fail: if the database is unreachable, it retries
    /// (re-taking the lock, with the same fencing check) until the grant is stored or the
    /// process exits. Returns false only when the fencing check finds a newer grant.
    async fn store_redeemed(
        &self,
        lock: &mut RefreshLock,
        c: &Connection,
        tokens: &NewTokens<'_>,
        request_id: Option<&str>,
    ) -> bool {
        let first = async {
            let change = lock.change(&self.db).await?;
            self.save_refreshed(change, c, tokens, request_id).await
        };
        let first: Result<bool> = first.await;
        let error = match first {
            Ok(stored) => return stored,
            Err(e) => e,
        };
        let mut pause = Duration::from_millis(100);
        let mut last_error = error;
        loop {
            tracing::error!(connection_id = %c.id, error = %last_error,
                "could not store a refreshed grant; retrying until it is stored");
            self.metrics.refresh(&c.provider, "store_retry");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
            let again = async {
                let mut lock = crate::db::refresh_lock::acquire(&self.db, &c.id, LOCK_WAIT).await?;
                let change = lock.change(&self.db).await?;
                let stored = self.save_refreshed(change, c, tokens, request_id).await;
                lock.release().await;
                stored
            };
            let again: Result<bool> = again.await;
            match again {
                Ok(stored) => {
                    tracing::info!(connection_id = %c.id, stored, "refreshed grant stored after retrying");
                    return stored;
                }
                Err(e) => last_error = e,
            }
        }
    }

    /// Saves refreshed tokens (fenced by the version read before redeeming) with their audit
    /// row, in `change`, and commits it.
    async fn save_refreshed(
        &self,
        mut change: Change,
        c: &Connection,
        tokens: &NewTokens<'_>,
        request_id: Option<&str>,
    ) -> Result<bool> {
        let stored = save_refreshed_tokens(
            change.conn(),
            &self.config.keys,
            &c.id,
            c.token_version,
            tokens,
        )
        .await?;
        if stored {
            change.connection_changed(&c.id);
            change
                .audit(conn_audit(
                    AuditAction::ConnectionRefreshed,
                    c,
                    request_id,
                    None,
                ))
                .await?;
        }
        self.signals.commit(change).await?;
        Ok(stored)
    }

    /// Marks the grant dead, with its audit row and the `connection.needs_reauth` event, in one
    /// transaction.
    async fn mark_needs_reauth(
        &self,
        lock: &mut RefreshLock,
        c: &Connection,
        error: &str,
        detail: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        let apps = self.connection_apps(c).await?;
        let mut change = lock.change(&self.db).await?;
        record_refresh_failure(change.conn(), &c.id, error, true).await?;
        change.connection_changed(&c.id);
        change
            .audit(conn_audit(
                AuditAction::ConnectionNeedsReauth,
                c,
                request_id,
                Some(detail),
            ))
            .await?;
        change
            .events(self.signals.connection_event_rows(
                EventType::ConnectionNeedsReauth,
                c,
                &apps,
            )?)
            .await?;
        self.signals.commit(change).await?;
        Ok(())
    }

    fn token_of(&self, c: Arc<Connection>) -> Result<FreshToken> {
        let access_token =
            c.access_token(&self.config.keys)?
                .ok_or_else(|| Error::NotConnected {
                    subject: c.subject.clone(),
                    provider: c.provider.clone(),
                })?;
        if is_expired(&c) {
            return Err(Error::ReauthorizationRequired {
                provider: c.provider.clone(),
                elicitation: None,
            });
        }
        Ok(FreshToken {
            access_token,
            connection: c,
            dpop_proof: None,
        })
    }
}

fn conn_audit<'a>(
    event: AuditAction,
    c: &'a Connection,
    request_id: Option<&'a str>,
    detail: Option<&'a str>,
) -> AuditEvent<'a> {
    AuditEvent {
        request_id,
        detail,
        ..AuditEvent::connection(event, c)
    }
}

fn reauth(provider: &Provider) -> Error {
    Error::ReauthorizationRequired {
        provider: provider.name.clone(),
        elicitation: None,
    }
}
