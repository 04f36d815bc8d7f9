//! The reads and conditional writes of key rotation (`grants::rotation`): stored sealed values
//! not yet sealed under the current key (a sealed value starts with `<key id>.`), replaced only if
//! they are still the ones read.

use std::collections::HashSet;

use sqlx::Row;

use super::{Db, Result};

/// The tables that hold a few sealed values each, rotated one row at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FewSealed {
    /// Upstream MCP client secrets (`mcp_clients`).
    McpClientSecrets,
    /// DPoP keys for upstream MCP authorization servers (`dpop_keys`).
    DpopKeys,
    /// Organisations' own OAuth app secrets (`organization_apps`).
    OrganizationAppSecrets,
}

impl FewSealed {
    pub const ALL: [Self; 3] = [
        Self::McpClientSecrets,
        Self::DpopKeys,
        Self::OrganizationAppSecrets,
    ];

    /// The table's name.
    pub fn table(self) -> &'static str {
        self.columns().0
    }

    /// The table, the columns that name a row (in `FewSealedRow::key`'s order), the sealed
    /// column.
    fn columns(self) -> (&'static str, &'static [&'static str], &'static str) {
        match self {
            Self::McpClientSecrets => (
                "mcp_clients",
                &["provider", "issuer", "redirect_uri"],
                "client_secret",
            ),
            Self::DpopKeys => ("dpop_keys", &["provider", "issuer"], "private_key"),
            Self::OrganizationAppSecrets => (
                "organization_apps",
                &["issuer", "organization", "provider"],
                "client_secret",
            ),
        }
    }
}

/// A row of a `FewSealed` table as read: its key columns' values and its sealed value.
pub struct FewSealedRow {
    pub key: Vec<String>,
    pub sealed: String,
}

/// A connection's sealed values as read for re-sealing.
pub struct SealedRow {
    pub id: String,
    pub access_token: Option<String>,
    pub refresh_token: Option<String>,
}

/// One connection's re-sealed values and the ones they replace (empty for NULL).
pub struct ResealedRow<'a> {
    pub id: &'a str,
    pub access_token: Option<&'a str>,
    pub refresh_token: Option<&'a str>,
    pub old_access_token: &'a str,
    pub old_refresh_token: &'a str,
}

/// A pending redirect's PKCE verifier re-sealed, and the one it replaces.
pub struct ResealedVerifier<'a> {
    pub state_hash: &'a str,
    pub verifier: &'a str,
    pub old_verifier: &'a str,
}

/// Rows per UPDATE statement (5 parameters each, well under every engine's limit).
pub const RESEAL_CHUNK: usize = 100;

impl Db {
    /// Connections and pending redirects holding at least one value not sealed under the key
    /// whose values start with `prefix`.
    pub async fn count_not_sealed_with(&self, prefix: &str) -> Result<(u64, u64)> {
        let (c,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM connections WHERE (access_token IS NOT NULL AND substr(access_token, 1, length($1)) <> $1) \
             OR (refresh_token IS NOT NULL AND substr(refresh_token, 1, length($1)) <> $1)",
        )
        .bind(prefix)
        .fetch_one(&self.pool)
        .await?;
        let (f,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM auth_flows WHERE verifier IS NOT NULL AND substr(verifier, 1, length($1)) <> $1",
        )
        .bind(prefix)
        .fetch_one(&self.pool)
        .await?;
        Ok((c.max(0) as u64, f.max(0) as u64))
    }

    /// The next `batch` connections after `after` (by id) with a value not sealed under
    /// `prefix`.
    pub async fn connections_to_reseal(
        &self,
        prefix: &str,
        after: &str,
        batch: i64,
    ) -> Result<Vec<SealedRow>> {
        let rows = sqlx::query(
            "SELECT id, access_token, refresh_token FROM connections WHERE id > $2 AND \
             ((access_token IS NOT NULL AND substr(access_token, 1, length($1)) <> $1) \
             OR (refresh_token IS NOT NULL AND substr(refresh_token, 1, length($1)) <> $1)) \
             ORDER BY id LIMIT $3",
        )
        .bind(prefix)
        .bind(after)
        .bind(batch)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(SealedRow {
                    id: row.try_get("id")?,
                    access_token: row.try_get("access_token")?,
                    refresh_token: row.try_get("refresh_token")?,
                })
            })
            .collect()
    }

    /// Writes up to [`RESEAL_CHUNK`] re-sealed rows in one statement, each only if its
    /// ciphertexts are still the ones read (a refresh in between wins). Returns the ids written.
    pub async fn reseal_connections(&self, chunk: &[ResealedRow<'_>]) -> Result<HashSet<String>> {
        let rows: Vec<String> = (0..chunk.len())
            .map(|i| {
                let b = i * 5;
                format!(
                    "(${}, ${}, ${}, ${}, ${})",
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4,
                    b + 5
                )
            })
            .collect();
        // VALUES columns are column1..column5 on both engines.
        let sql = format!(
            "UPDATE connections SET access_token = v.column2, refresh_token = v.column3 \
             FROM (VALUES {}) AS v WHERE connections.id = v.column1 \
             AND COALESCE(connections.access_token, '') = v.column4 \
             AND COALESCE(connections.refresh_token, '') = v.column5 RETURNING connections.id",
            rows.join(", ")
        );
        let mut q = sqlx::query_as::<_, (String,)>(&sql);
        for u in chunk {
            q = q
                .bind(u.id)
                .bind(u.access_token)
                .bind(u.refresh_token)
                .bind(u.old_access_token)
                .bind(u.old_refresh_token);
        }
        let done = q.fetch_all(&self.pool).await?;
        Ok(done.into_iter().map(|(id,)| id).collect())
    }

    /// The next `batch` pending redirects after `after` whose verifier is not sealed under
    /// `prefix`: `(state_hash, verifier)`.
    pub async fn flows_to_reseal(
        &self,
        prefix: &str,
        after: &str,
        batch: i64,
    ) -> Result<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "SELECT state_hash, verifier FROM auth_flows WHERE state_hash > $2 AND verifier IS NOT NULL \
             AND substr(verifier, 1, length($1)) <> $1 ORDER BY state_hash LIMIT $3",
        )
        .bind(prefix)
        .bind(after)
        .bind(batch)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Replaces each verifier still equal to the one read, in one transaction; for each, whether
    /// it was written.
    pub async fn reseal_flows(&self, rows: &[ResealedVerifier<'_>]) -> Result<Vec<bool>> {
        let mut tx = self.pool.begin().await?;
        let mut written = Vec::with_capacity(rows.len());
        for r in rows {
            let done = sqlx::query(
                "UPDATE auth_flows SET verifier = $2 WHERE state_hash = $1 AND verifier = $3",
            )
            .bind(r.state_hash)
            .bind(r.verifier)
            .bind(r.old_verifier)
            .execute(&mut *tx)
            .await?;
            written.push(done.rows_affected() == 1);
        }
        tx.commit().await?;
        Ok(written)
    }

    /// Every stored sealed value's text, a page of connections at a time (after `after`, by
    /// id): `(id, access_token, refresh_token)`.
    pub async fn sealed_connection_values(
        &self,
        after: &str,
    ) -> Result<Vec<(String, Option<String>, Option<String>)>> {
        Ok(sqlx::query_as(
            "SELECT id, access_token, refresh_token FROM connections WHERE id > $1 ORDER BY id LIMIT 1000",
        )
        .bind(after)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Every pending redirect's sealed verifier.
    pub async fn sealed_flow_verifiers(&self) -> Result<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT verifier FROM auth_flows WHERE verifier IS NOT NULL")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(|(v,)| v).collect())
    }

    /// Every stored sealed value whose key id is not among `known`, as the key id it names
    /// (the text before the first `.`, at most 64 characters) — connections' tokens, pending
    /// redirects' verifiers, upstream MCP client secrets and DPoP keys. Empty when the key ring opens
    /// everything: one scan per table, no value returned.
    pub async fn sealed_with_unknown_keys(&self, known: &[&str]) -> Result<Vec<String>> {
        let mut found = Vec::new();
        for (table, column) in [
            ("connections", "access_token"),
            ("connections", "refresh_token"),
            ("auth_flows", "verifier"),
            ("mcp_clients", "client_secret"),
            ("dpop_keys", "private_key"),
            ("organization_apps", "client_secret"),
        ] {
            let known_prefix: Vec<String> = (1..=known.len())
                .map(|i| format!("substr({column}, 1, length(${i})) = ${i}"))
                .collect();
            let unknown = if known_prefix.is_empty() {
                String::new()
            } else {
                format!(" AND NOT ({})", known_prefix.join(" OR "))
            };
            let sql = format!(
                "SELECT substr({column}, 1, 65) FROM {table} WHERE {column} IS NOT NULL{unknown}"
            );
            let mut q = sqlx::query_as::<_, (String,)>(&sql);
            for id in known {
                q = q.bind(format!("{id}."));
            }
            for (head,) in q.fetch_all(&self.pool).await? {
                let id = head.split_once('.').map_or("(malformed)", |(id, _)| id);
                found.push(id.chars().take(64).collect());
            }
        }
        Ok(found)
    }

    /// The rows of `t` whose value is not sealed under `prefix`. A handful of rows (one per
    /// provider and authorization server, or per organisation app).
    pub async fn few_sealed_to_reseal(
        &self,
        t: FewSealed,
        prefix: &str,
    ) -> Result<Vec<FewSealedRow>> {
        let (table, key, column) = t.columns();
        let sql = format!(
            "SELECT {}, {column} FROM {table} \
             WHERE {column} IS NOT NULL AND substr({column}, 1, length($1)) <> $1",
            key.join(", ")
        );
        let rows = sqlx::query(&sql).bind(prefix).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                Ok(FewSealedRow {
                    key: (0..key.len())
                        .map(|i| row.try_get::<String, _>(i))
                        .collect::<std::result::Result<_, _>>()?,
                    sealed: row.try_get(key.len())?,
                })
            })
            .collect()
    }

    /// Replaces one row's sealed value with `new` if it still holds the one read.
    pub async fn reseal_few_sealed(
        &self,
        t: FewSealed,
        row: &FewSealedRow,
        new: &str,
    ) -> Result<bool> {
        let (table, key, column) = t.columns();
        let names: Vec<String> = key
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{k} = ${}", i + 1))
            .collect();
        let sql = format!(
            "UPDATE {table} SET {column} = ${} WHERE {} AND {column} = ${}",
            key.len() + 1,
            names.join(" AND "),
            key.len() + 2
        );
        let values: Vec<&str> = row.key.iter().map(String::as_str).collect();
        self.replace_sealed(&sql, &values, (new, &row.sealed)).await
    }

    /// Every upstream MCP client's sealed secret.
    pub async fn sealed_mcp_client_secrets(&self) -> Result<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT client_secret FROM mcp_clients WHERE client_secret IS NOT NULL")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(|(v,)| v).collect())
    }

    /// Runs a compare-and-swap `UPDATE` whose placeholders are the row's key columns in order,
    /// then the newly sealed value, then the value read: whether the row still held what was
    /// read (a value that changed meanwhile is never overwritten).
    async fn replace_sealed(
        &self,
        sql: &str,
        key: &[&str],
        (new, old): (&str, &str),
    ) -> Result<bool> {
        let mut query = sqlx::query(sql);
        for k in key {
            query = query.bind(*k);
        }
        Ok(query
            .bind(new)
            .bind(old)
            .execute(&self.pool)
            .await?
            .rows_affected()
            == 1)
    }

    /// Every sealed DPoP key.
    pub async fn sealed_dpop_keys(&self) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = sqlx::query_as("SELECT private_key FROM dpop_keys")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|(v,)| v).collect())
    }
}
