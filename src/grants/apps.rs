//! Organisations' own OAuth apps: which client a grant's calls at the provider are made with —
//! the organisation's app (from the configuration, else set by one of its administrators on
//! `/account`, its secret sealed) or the operator's.

use secrecy::{ExposeSecret, SecretString};

use crate::crypto::organization_app_aad;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::organization_apps::{AppKey, StoredApp};
use crate::error::{Error, Result};
use crate::grants::Grants;
use crate::providers::mcp::RegisteredClient;
use crate::providers::{Endpoints, Provider};

/// The longest client id or secret an administrator may set.
pub const MAX_APP_FIELD: usize = 512;

/// Where an organisation's app at a provider comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppSource {
    /// `[providers.NAME.organizations."ORG"]`: only the operator changes it.
    Configured,
    /// Set by an administrator of the organisation.
    SetByAdmin,
}

/// An organisation's app at one provider, as its administrators see it (never the secret).
#[derive(Debug, Clone)]
pub struct AppView {
    pub provider: String,
    pub client_id: String,
    pub source: AppSource,
    pub updated_by: Option<String>,
}

impl Grants {
    /// Organisation `org`'s own app at `provider` ('' or none: `None`): the configured one,
    /// else the one its administrator set.
    pub async fn organization_client(
        &self,
        provider: &Provider,
        org: &str,
    ) -> Result<Option<RegisteredClient>> {
        if org.is_empty() {
            return Ok(None);
        }
        if let Some(c) = provider.configured_organization_client(org) {
            return Ok(Some(c));
        }
        let Some(app) = self
            .db
            .organization_app(self.app_key(org, &provider.name))
            .await?
        else {
            return Ok(None);
        };
        let client_secret = app
            .sealed_secret
            .as_deref()
            .map(|s| {
                self.config
                    .keys
                    .open_string(s, &organization_app_aad(&self.issuer, org, &provider.name))
            })
            .transpose()
            .map_err(|e| {
                Error::Internal(anyhow::anyhow!(
                    "opening organisation {org:?}'s app secret: {e}"
                ))
            })?;
        Ok(Some(RegisteredClient {
            client_id: app.client_id,
            client_secret,
            auth: None,
        }))
    }

    /// `endpoints` with the client that issued (or will issue) a grant: organisation `org`'s
    /// own app, or ('') the operator's. An app that no longer exists is an error: a grant is
    /// never sent with another client.
    pub async fn app_endpoints(
        &self,
        provider: &Provider,
        mut endpoints: Endpoints,
        org: &str,
    ) -> Result<Endpoints> {
        if org.is_empty() {
            return Ok(endpoints);
        }
        match self.organization_client(provider, org).await? {
            Some(c) => {
                endpoints.client = Some(c);
                Ok(endpoints)
            }
            None => Err(Error::Upstream(anyhow::anyhow!(
                "organisation {org:?} has no OAuth app at {} any more",
                provider.name
            ))),
        }
    }

    /// The apps organisation `org` has, by provider: the configured ones and those its
    /// administrators set (a configured one hides a set one at the same provider).
    pub async fn organization_app_views(&self, org: &str) -> Result<Vec<AppView>> {
        let mut views: Vec<AppView> = self
            .providers
            .iter()
            .filter_map(|p| {
                p.configured_organization_client(org).map(|c| AppView {
                    provider: p.name.clone(),
                    client_id: c.client_id,
                    source: AppSource::Configured,
                    updated_by: None,
                })
            })
            .collect();
        for StoredApp {
            provider,
            client_id,
            updated_by,
            ..
        } in self.db.organization_apps(&self.issuer, org).await?
        {
            if !views.iter().any(|v| v.provider == provider) {
                views.push(AppView {
                    provider,
                    client_id,
                    source: AppSource::SetByAdmin,
                    updated_by: Some(updated_by),
                });
            }
        }
        views.sort_by(|a, b| a.provider.cmp(&b.provider));
        Ok(views)
    }

    /// Sets organisation `org`'s own app at `provider`, as administrator `by`. Grants made with
    /// an earlier app of the organisation are refreshed with the new one from now on: a new
    /// secret for the same client keeps them working; another client id does not (the
    /// provider refuses, and their users reconnect).
    pub async fn set_organization_app(
        &self,
        org: &str,
        provider: &Provider,
        client_id: &str,
        client_secret: Option<&SecretString>,
        by: &str,
    ) -> Result<()> {
        let client_id = client_id.trim();
        if client_id.is_empty()
            || client_id.chars().count() > MAX_APP_FIELD
            || client_id.chars().any(char::is_control)
            || client_secret.is_some_and(|s| {
                let s = s.expose_secret();
                s.chars().count() > MAX_APP_FIELD || s.chars().any(char::is_control)
            })
        {
            return Err(Error::invalid(
                "the client id is 1 to 512 characters and the secret at most 512, without control characters",
            ));
        }
        if provider.credential.is_some() || provider.mcp.is_some() {
            return Err(Error::invalid(
                "only OAuth providers take an organisation's own app",
            ));
        }
        if provider.configured_organization_client(org).is_some() {
            return Err(Error::invalid(
                "this organisation's app at this provider is set by the operator's configuration",
            ));
        }
        let sealed = client_secret
            .filter(|s| !s.expose_secret().is_empty())
            .map(|s| {
                self.config.keys.seal(
                    s.expose_secret().as_bytes(),
                    &organization_app_aad(&self.issuer, org, &provider.name),
                )
            })
            .transpose()
            .map_err(|e| Error::Internal(anyhow::anyhow!("sealing an app secret: {e}")))?;
        self.db
            .set_organization_app(
                self.app_key(org, &provider.name),
                client_id,
                sealed.as_deref(),
                by,
            )
            .await?;
        self.audit_app(
            AuditAction::OrganizationAppSet,
            org,
            &provider.name,
            by,
            None,
        )
        .await;
        Ok(())
    }

    /// Deletes organisation `org`'s own app at `provider`, as administrator `by`: every live
    /// connection it issued is revoked first (at the provider, with that app), as nothing else
    /// may refresh it. Returns how many connections were revoked.
    pub async fn delete_organization_app(
        &self,
        org: &str,
        provider: &Provider,
        by: &str,
    ) -> Result<usize> {
        if provider.configured_organization_client(org).is_some() {
            return Err(Error::invalid(
                "this organisation's app at this provider is set by the operator's configuration",
            ));
        }
        let key = self.app_key(org, &provider.name);
        if self.db.organization_app(key).await?.is_none() {
            return Err(Error::not_found(
                "this organisation has no app at this provider",
            ));
        }
        let connections = self
            .db
            .connections_of_app(&self.issuer, org, &provider.name)
            .await?;
        let revoked = connections.len();
        for c in connections {
            self.revoke_connection(&c, by, None).await?;
        }
        self.db.delete_organization_app(key).await?;
        let detail = format!("revoked {revoked} connections");
        self.audit_app(
            AuditAction::OrganizationAppDeleted,
            org,
            &provider.name,
            by,
            Some(&detail),
        )
        .await;
        Ok(revoked)
    }

    /// The audit row of a change to organisation `org`'s app at `provider`, by `by`.
    async fn audit_app(
        &self,
        action: AuditAction,
        org: &str,
        provider: &str,
        by: &str,
        detail: Option<&str>,
    ) {
        self.db
            .audit(AuditEvent {
                actor: Some(by),
                issuer: Some(&self.issuer),
                provider: Some(provider),
                organization: Some(org),
                detail,
                ..AuditEvent::new(action)
            })
            .await;
    }

    fn app_key<'a>(&'a self, org: &'a str, provider: &'a str) -> AppKey<'a> {
        AppKey {
            issuer: &self.issuer,
            organization: org,
            provider,
        }
    }
}
