//! Completing a connection once the provider sent the user back with a code: the code exchange,
//! what the provider tells about the account, and the grant stored — the sealed tokens, the apps
//! that may use them, the audit row, the elicitation completed and its event, in one transaction.
//!
//! The caller (the provider callback page) has already checked the state, the browser, the user
//! and the `iss`, and claimed the state; it renders what this returns.

use std::collections::BTreeMap;

use secrecy::{ExposeSecret, SecretString};

use crate::AppState;
use crate::connect::identity::SignedInUser;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::Metadata;
use crate::db::connections::{ConnectionStatus, Details, NewTokens, Stored, store_connected};
use crate::db::elicitations::{Elicitation, ElicitationStatus, Ending};
use crate::error::Result;
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

impl AppState {
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
        let (account_label, metadata) = provider
            .learn(&self.http, endpoints, &tokens, &answer.redirect_query)
            .await;

        self.store_grant(
            user,
            e,
            &NewTokens {
                access_token: &tokens.access_token,
                refresh_token: tokens.refresh_token.as_ref(),
                token_type: &tokens.token_type,
                expires_at: tokens.expires_in.map(|s| now() + s),
                scopes: &scopes,
                account_label: account_label.as_deref(),
            },
            Some(&metadata),
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
        tokens: &NewTokens<'_>,
        metadata: Option<&Metadata>,
        detail: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut change = Change::begin(&self.db).await?;
        let Stored {
            id: connection_id,
            before,
        } = store_connected(
            change.conn(),
            &self.config.keys,
            &e.issuer,
            &e.subject,
            &e.provider,
            tokens,
            metadata.map(|metadata| Details {
                params: &e.params,
                metadata,
            }),
        )
        .await?;
        let reconnected = before.is_some();
        let was_revoked = before == Some(ConnectionStatus::Revoked);
        self.grant_to_approved_apps(&mut change, e, &connection_id, was_revoked)
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
            })
            .await?;
        let completed = self
            .finish_elicitation_in(
                &mut change,
                e,
                Ending::Completed {
                    connection_id: &ConnectionId::from(connection_id.as_str()),
                },
                request_id,
            )
            .await?;
        self.commit(change).await?;
        if completed {
            self.metrics
                .elicitation(ElicitationStatus::Completed.as_str());
        }
        Ok(())
    }
}
