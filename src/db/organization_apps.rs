//! `organization_apps`: an organisation's own OAuth app at a provider, set by one of its
//! administrators (an app in the configuration takes precedence). The client secret is stored
//! sealed by the caller ([`crate::crypto::organization_app_aad`]).

use super::{Db, Result};

/// A stored app: its client id and sealed secret.
#[derive(Debug, Clone)]
pub struct StoredApp {
    pub provider: String,
    pub client_id: String,
    pub sealed_secret: Option<String>,
    pub updated_at: i64,
    pub updated_by: String,
}

/// Where an app belongs: the identity issuer, the organisation, the provider.
#[derive(Debug, Clone, Copy)]
pub struct AppKey<'a> {
    pub issuer: &'a str,
    pub organization: &'a str,
    pub provider: &'a str,
}

impl Db {
    /// Sets (or replaces) the organisation's app at the provider.
    pub async fn set_organization_app(
        &self,
        key: AppKey<'_>,
        client_id: &str,
        sealed_secret: Option<&str>,
        updated_by: &str,
    ) -> Result<()> {
        let now = super::now();
        sqlx::query(
            "INSERT INTO organization_apps (issuer, organization, provider, client_id, client_secret, created_at, updated_at, updated_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $6, $7) \
             ON CONFLICT (issuer, organization, provider) DO UPDATE SET client_id = $4, client_secret = $5, updated_at = $6, updated_by = $7",
        )
        .bind(key.issuer)
        .bind(key.organization)
        .bind(key.provider)
        .bind(client_id)
        .bind(sealed_secret)
        .bind(now)
        .bind(updated_by)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The organisation's app at the provider, if one was set.
    pub async fn organization_app(&self, key: AppKey<'_>) -> Result<Option<StoredApp>> {
        Ok(self
            .organization_apps_where(
                "issuer = $1 AND organization = $2 AND provider = $3",
                &[key.issuer, key.organization, key.provider],
            )
            .await?
            .pop())
    }

    /// Every app the organisation set, by provider.
    pub async fn organization_apps(
        &self,
        issuer: &str,
        organization: &str,
    ) -> Result<Vec<StoredApp>> {
        self.organization_apps_where(
            "issuer = $1 AND organization = $2 ORDER BY provider",
            &[issuer, organization],
        )
        .await
    }

    async fn organization_apps_where(
        &self,
        filter: &str,
        binds: &[&str],
    ) -> Result<Vec<StoredApp>> {
        let sql = format!(
            "SELECT provider, client_id, client_secret, updated_at, updated_by FROM organization_apps WHERE {filter}"
        );
        let mut q = sqlx::query_as::<_, (String, String, Option<String>, i64, String)>(&sql);
        for b in binds {
            q = q.bind(*b);
        }
        Ok(q.fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(
                |(provider, client_id, sealed_secret, updated_at, updated_by)| StoredApp {
                    provider,
                    client_id,
                    sealed_secret,
                    updated_at,
                    updated_by,
                },
            )
            .collect())
    }

    /// Deletes the organisation's app at the provider; whether there was one.
    pub async fn delete_organization_app(&self, key: AppKey<'_>) -> Result<bool> {
        Ok(sqlx::query(
            "DELETE FROM organization_apps WHERE issuer = $1 AND organization = $2 AND provider = $3",
        )
        .bind(key.issuer)
        .bind(key.organization)
        .bind(key.provider)
        .execute(&self.pool)
        .await?
        .rows_affected()
            == 1)
    }

    /// The live connections organisation `organization`'s app at `provider` issued (its
    /// members' and its own), to revoke when the app goes.
    pub async fn connections_of_app(
        &self,
        issuer: &str,
        organization: &str,
        provider: &str,
    ) -> Result<Vec<crate::db::connections::Connection>> {
        use crate::db::Table;
        self.fetch_rows(
            sqlx::query_as(&crate::db::connections::Connection::select(
                "issuer = $1 AND client_organization = $2 AND provider = $3 AND status <> 'revoked' ORDER BY id",
            ))
            .bind(issuer)
            .bind(organization)
            .bind(provider),
        )
        .await
    }

    /// Every stored app's sealed secret.
    pub async fn sealed_organization_app_secrets(&self) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT client_secret FROM organization_apps WHERE client_secret IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(v,)| v).collect())
    }
}
