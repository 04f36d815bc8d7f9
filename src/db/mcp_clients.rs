//! `mcp_clients`: our registrations at upstream MCP authorization servers (RFC 7591), one per
//! provider, authorization server and redirect URI. The client secret, when one was issued, is
//! stored sealed by the caller.

use super::{Db, Result};

/// A stored registration: the client id, the sealed secret and the token-endpoint
/// authentication method (`None` on rows stored before migration 0019).
pub struct StoredRegistration {
    pub client_id: String,
    pub sealed_secret: Option<String>,
    pub auth_method: Option<String>,
}

/// A registration to store.
pub struct NewRegistration<'a> {
    pub provider: &'a str,
    pub issuer: &'a str,
    pub redirect_uri: &'a str,
    pub client_id: &'a str,
    pub sealed_secret: Option<&'a str>,
    pub auth_method: &'a str,
}

impl Db {
    /// Stores a registration unless another replica stored one first (the first one wins).
    pub async fn insert_mcp_client(&self, r: &NewRegistration<'_>) -> Result<()> {
        sqlx::query(
            "INSERT INTO mcp_clients (provider, issuer, redirect_uri, client_id, client_secret, token_endpoint_auth_method, registered_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (provider, issuer, redirect_uri) DO NOTHING",
        )
        .bind(r.provider)
        .bind(r.issuer)
        .bind(r.redirect_uri)
        .bind(r.client_id)
        .bind(r.sealed_secret)
        .bind(r.auth_method)
        .bind(super::now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn mcp_client(
        &self,
        provider: &str,
        issuer: &str,
        redirect_uri: &str,
    ) -> Result<Option<StoredRegistration>> {
        let row: Option<(String, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT client_id, client_secret, token_endpoint_auth_method FROM mcp_clients \
             WHERE provider = $1 AND issuer = $2 AND redirect_uri = $3",
        )
        .bind(provider)
        .bind(issuer)
        .bind(redirect_uri)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(
            |(client_id, sealed_secret, auth_method)| StoredRegistration {
                client_id,
                sealed_secret,
                auth_method,
            },
        ))
    }
}
