//! `mcp_clients`: our registrations at upstream MCP authorization servers (RFC 7591), one per
//! provider, authorization server and redirect URI. The client secret, when one was issued, is
//! stored sealed by the caller.

use super::{Db, Result};

/// A stored registration: the client id and the sealed secret.
pub struct StoredRegistration {
    pub client_id: String,
    pub sealed_secret: Option<String>,
}

impl Db {
    /// Stores a registration unless another replica stored one first (the first one wins).
    pub async fn insert_mcp_client(
        &self,
        provider: &str,
        issuer: &str,
        redirect_uri: &str,
        client_id: &str,
        sealed_secret: Option<&str>,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO mcp_clients (provider, issuer, redirect_uri, client_id, client_secret, registered_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (provider, issuer, redirect_uri) DO NOTHING",
        )
        .bind(provider)
        .bind(issuer)
        .bind(redirect_uri)
        .bind(client_id)
        .bind(sealed_secret)
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
        let row: Option<(String, Option<String>)> = sqlx::query_as(
            "SELECT client_id, client_secret FROM mcp_clients WHERE provider = $1 AND issuer = $2 AND redirect_uri = $3",
        )
        .bind(provider)
        .bind(issuer)
        .bind(redirect_uri)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(client_id, sealed_secret)| StoredRegistration {
            client_id,
            sealed_secret,
        }))
    }
}
