//! `dpop_keys`: the DPoP key pair (RFC 9449) mcp-connect uses with one upstream MCP
//! authorization server, one per provider and authorization server, shared by every replica.
//! The private key is stored sealed by the caller.

use super::{Db, Result};

impl Db {
    /// Stores a key unless another replica stored one first (the first one wins: tokens are
    /// bound to it).
    pub async fn insert_dpop_key(&self, provider: &str, issuer: &str, sealed: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO dpop_keys (provider, issuer, private_key, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (provider, issuer) DO NOTHING",
        )
        .bind(provider)
        .bind(issuer)
        .bind(sealed)
        .bind(super::now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The sealed private key for `provider` at `issuer`, if one was made.
    pub async fn dpop_key(&self, provider: &str, issuer: &str) -> Result<Option<String>> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT private_key FROM dpop_keys WHERE provider = $1 AND issuer = $2")
                .bind(provider)
                .bind(issuer)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(k,)| k))
    }
}
