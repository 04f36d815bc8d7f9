//! Revoking a grant: at the provider where it can (refresh token first, then access token), and
//! here always — the tokens deleted, the audit row and the event in one transaction, and every
//! replica's token cache past the row before the call returns.

use secrecy::SecretString;
use serde::Serialize;

use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::{Connection, mark_revoked};
use crate::error::Result;
use crate::grants::Grants;
use crate::ids::ConnectionId;
use crate::signals::events::EventType;

impl Grants {
    /// Revokes a connection upstream (refresh token first, then access token) and removes its
    /// tokens here even when the provider cannot be reached.
    pub async fn revoke_connection(
        &self,
        c: &Connection,
        actor: &str,
        request_id: Option<&str>,
    ) -> Result<RevocationReport> {
        let provider = self.providers.get(&c.provider);
        let mut report = RevocationReport {
            connection_id: c.id.clone(),
            refresh_token: "none",
            access_token: "none",
            tokens_deleted: true,
            message: String::new(),
        };
        let mut problems = Vec::new();
        let credential = crate::config::AuthKind::is_credential_type(&c.token_type);
        if credential {
            // A typed key has no revocation call: it is deleted here (the message says so).
            report.access_token = "not_supported";
        } else if let Some(provider) = provider {
            let open = |t: std::result::Result<
                Option<SecretString>,
                crate::crypto::CryptoError,
            >| match t {
                Ok(t) => (t, false),
                Err(e) => {
                    tracing::warn!(connection_id = %c.id, error = %e, "cannot open a stored token to revoke it");
                    (None, true)
                }
            };
            let (rt, rt_broken) = open(c.refresh_token(&self.config.keys));
            let (at, at_broken) = open(c.access_token(&self.config.keys));
            let resolved = match provider
                .endpoints(&self.http)
                .await
                .and_then(|e| e.for_connection(provider, &c.params))
            {
                Ok(e) => self
                    .app_endpoints(provider, e, &c.client_organization)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}")),
                Err(e) => Err(e),
            };
            match resolved {
                Err(e) => {
                    if rt.is_some() || at.is_some() {
                        problems.push(format!("provider unreachable: {e:#}"));
                    }
                    report.refresh_token = if rt.is_some() { "failed" } else { "none" };
                    report.access_token = if at.is_some() { "failed" } else { "none" };
                }
                Ok(ep) if crate::providers::mcp::issued_elsewhere(&c.metadata, &ep) => {
                    // Never hand the old authorization server's tokens to the new one.
                    if rt.is_some() || at.is_some() {
                        problems.push("the MCP server moved to another authorization server; the tokens were not sent to it".to_owned());
                    }
                    report.refresh_token = if rt.is_some() { "failed" } else { "none" };
                    report.access_token = if at.is_some() { "failed" } else { "none" };
                }
                Ok(ep) => {
                    let outcome = self
                        .metrics
                        .upstream(&provider.name, "revoke", async {
                            Ok::<_, std::convert::Infallible>(
                                provider
                                    .revoke_grant(
                                        &self.http,
                                        &ep,
                                        rt.as_ref(),
                                        at.as_ref(),
                                        &c.metadata,
                                    )
                                    .await,
                            )
                        })
                        .await;
                    let Ok(o) = outcome;
                    report.refresh_token = o.refresh_token;
                    report.access_token = o.access_token;
                    problems.extend(o.problems);
                }
            }
            if rt_broken {
                report.refresh_token = "failed";
            }
            if at_broken {
                report.access_token = "failed";
            }
        }
        report.message = if credential {
            "The stored credential was deleted here. Revoke it in the provider's settings to cut access there too.".into()
        } else if problems.is_empty() {
            match (report.refresh_token, report.access_token) {
                ("not_supported", _) | (_, "not_supported") => {
                    let manual = provider
                        .and_then(|p| p.entry.revocation.manual_url.as_deref())
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default();
                    format!(
                        "The provider offers no revocation endpoint; the tokens were deleted here. Revoke the grant in the provider's settings{manual} to cut it there too."
                    )
                }
                _ => "The grant was revoked at the provider and the tokens were deleted.".into(),
            }
        } else {
            format!(
                "The tokens were deleted here, but revocation at the provider failed ({}).",
                problems.join("; ")
            )
        };
        let detail = format!(
            "refresh_token={} access_token={}",
            report.refresh_token, report.access_token
        );
        let apps = self.connection_apps(c).await?;
        let mut change = Change::begin(&self.db).await?;
        mark_revoked(change.conn(), &c.id, problems.first().map(String::as_str)).await?;
        change.connection_changed(&c.id);
        change
            .audit(AuditEvent {
                actor: Some(actor),
                request_id,
                detail: Some(&detail),
                ..AuditEvent::connection(AuditAction::ConnectionRevoked, c)
            })
            .await?;
        change
            .events(
                self.signals
                    .connection_event_rows(EventType::ConnectionRevoked, c, &apps)?,
            )
            .await?;
        self.signals.commit(change).await?;
        // Every replica's token cache has dropped the row once this returns (`token_cache`).
        self.token_cache.wait_for_replicas().await;
        Ok(report)
    }
}

/// What `DELETE /v1/connections/{id}` did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RevocationReport {
    #[schema(value_type = String)]
    pub connection_id: ConnectionId,
    /// `revoked`, `not_supported` (no revocation endpoint), `failed`, `none` (nothing stored),
    /// or `kept` (other apps the user approved still use the grant).
    pub refresh_token: &'static str,
    pub access_token: &'static str,
    /// True when the grant was revoked: local tokens are removed even when the provider is
    /// down. False only when other apps still use it (`kept`).
    pub tokens_deleted: bool,
    pub message: String,
}
