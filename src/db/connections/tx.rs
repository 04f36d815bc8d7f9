//! What a transaction does to connection rows: store a new grant, save refreshed tokens and
//! details, record a failed refresh, mark a revocation. Each takes the transaction's connection,
//! so the change and its records commit together.

use super::*;

/// The connection `id`, read on `conn` (inside the caller's transaction or lock).
pub async fn get_connection(conn: &mut AnyConnection, id: &str) -> Result<Option<Connection>> {
    let row: Option<Row> = sqlx::query_as(&Connection::select("id = $1"))
        .bind(id)
        .fetch_optional(conn)
        .await?;
    row.map(TryInto::try_into).transpose()
}

/// What [`store_connected`] did.
#[derive(Debug)]
pub struct Stored {
    pub id: ConnectionId,
    /// The status of the row that was there before (a reconnect), `None` for a new connection.
    pub before: Option<ConnectionStatus>,
}

/// Why [`store_connected`] stored nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountRefused {
    /// The user holds `max` accounts at the provider already (none of them revoked).
    Limit { max: usize },
    /// A second account, while the schema still allows one per user and provider: the
    /// post-deploy migration ([`SEVERAL_ACCOUNTS_MIGRATION`]) has not run yet.
    PendingUpgrade,
}

/// The post-deploy migration that lets a user hold several accounts at one provider.
pub const SEVERAL_ACCOUNTS_MIGRATION: i64 = 23;

/// The account a connect flow connected: whose, at which provider, and the provider's stable
/// id for it (empty where the provider says nothing).
pub struct NewAccount<'a> {
    /// Accounts a user may hold at one provider (`max_accounts_per_provider`).
    pub max: usize,
    pub issuer: &'a str,
    /// '' for an organisation's connection.
    pub subject: &'a str,
    /// The owning organisation ('' for a user's own connection).
    pub organization: &'a str,
    /// The organisation whose own OAuth app issued the grant ('': the operator's).
    pub client_organization: &'a str,
    pub provider: &'a str,
    pub id: &'a str,
}

/// The connection's parameters and what the provider told about the account, stored with its
/// tokens.
pub struct Details<'a> {
    pub params: &'a ConnParams,
    pub metadata: &'a Metadata,
}

/// One of the user's accounts at a provider, as a connect flow sees it before storing.
#[derive(Debug, FromRow)]
struct Held {
    id: ConnectionId,
    status: String,
    account_id: String,
    account_label: Option<String>,
}

/// Stores the tokens of a completed connect flow for `account`: the user's existing connection
/// for that account replaced in place (same id), or a new connection — a second account when the
/// user holds others. A row stored before accounts existed (no account id) is taken as this
/// account when its label matches or either label is unknown: the user reconnected it. With
/// `details`, the connection's parameters and metadata are replaced (`None` keeps those stored).
/// A new account beyond `account.max` takes the place of the oldest revoked one, or is refused.
pub async fn store_connected(
    conn: &mut AnyConnection,
    keys: &KeyRing,
    account: &NewAccount<'_>,
    t: &NewTokens<'_>,
    details: Option<Details<'_>>,
) -> Result<std::result::Result<Stored, AccountRefused>> {
    let (issuer, subject, provider) = (account.issuer, account.subject, account.provider);
    let organization = account.organization;
    // Write first: on SQLite a transaction that reads and then writes cannot take the write
    // lock once another writer committed after its read (SQLITE_BUSY, not retried by the busy
    // timeout); a write statement, even one that changes nothing, takes the lock up front and
    // waits for it. A no-op on Postgres.
    sqlx::query("DELETE FROM connections WHERE 1 = 0")
        .execute(&mut *conn)
        .await?;
    // Postgres: two flows of one user at one provider (two new accounts) take turns here, so
    // the account bound holds; the lock ends with the transaction. (SQLite has one writer.)
    if conn.backend_name() == "PostgreSQL" {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!(
                "mcp-connect/accounts/{issuer}/{organization}/{subject}/{provider}"
            ))
            .execute(&mut *conn)
            .await?;
    }
    let held: Vec<Held> = sqlx::query_as(
        "SELECT id, status, account_id, account_label FROM connections \
         WHERE issuer = $1 AND subject = $2 AND provider = $3 AND organization = $4 ORDER BY created_at, id",
    )
    .bind(issuer)
    .bind(subject)
    .bind(provider)
    .bind(organization)
    .fetch_all(&mut *conn)
    .await?;
    let same = held
        .iter()
        .find(|h| h.account_id == account.id)
        .or_else(|| {
            (!account.id.is_empty())
                .then(|| {
                    held.iter().find(|h| {
                        h.account_id.is_empty()
                            && match (&h.account_label, t.account_label) {
                                (Some(a), Some(b)) => a == b,
                                _ => true,
                            }
                    })
                })
                .flatten()
        });
    if let Some(h) = same {
        let before: ConnectionStatus = h
            .status
            .parse()
            .map_err(|p| Error::undecodable(Connection::TABLE, &h.id, p))?;
        replace_tokens(conn, keys, &h.id, account, t, details).await?;
        return Ok(Ok(Stored {
            id: h.id.clone(),
            before: Some(before),
        }));
    }
    if held.len() >= account.max {
        let Some(oldest_revoked) = held.iter().find(|h| h.status == "revoked") else {
            return Ok(Err(AccountRefused::Limit { max: account.max }));
        };
        crate::db::grants::clear_clients(conn, &oldest_revoked.id).await?;
        sqlx::query("DELETE FROM connections WHERE id = $1")
            .bind(&oldest_revoked.id)
            .execute(&mut *conn)
            .await?;
    }
    let now = now();
    let id = ConnectionId::new(random_token(16));
    let (params, metadata) = match &details {
        Some(d) => (
            crate::db::elicitations::encode_params(d.params)?,
            encode_metadata(&id, d.metadata)?,
        ),
        None => (None, None),
    };
    // The user's first live account is their default (said explicitly: two accounts
    // connected within one second would otherwise tie on `created_at`).
    let default_at = held
        .iter()
        .all(|h| h.status == "revoked")
        .then(crate::time::now_ms);
    let insert = "INSERT INTO connections (id, issuer, subject, provider, status, scopes, token_type, access_token, refresh_token, \
         expires_at, account_label, created_at, updated_at, last_refresh_at, params, metadata, account_id, default_at, \
         organization, client_organization) \
         VALUES ($1, $2, $3, $4, 'active', $5, $6, $7, $8, $9, $10, $11, $11, $11, $12, $13, $14, $15, $16, $17) \
         ON CONFLICT (issuer, organization, subject, provider, account_id) DO NOTHING";
    let q = sqlx::query(insert)
        .bind(&id)
        .bind(issuer)
        .bind(subject)
        .bind(provider);
    let q = bind_tokens(q, keys, &id, t, now)?
        .bind(params)
        .bind(metadata)
        .bind(account.id)
        .bind(default_at)
        .bind(organization)
        .bind(account.client_organization);
    let inserted = match q.execute(&mut *conn).await.map_err(Error::from) {
        Ok(r) => r.rows_affected(),
        // Another account's row holds the old one-per-provider key (see `AccountRefused`).
        Err(Error::UniqueViolation(_)) if !held.is_empty() => {
            return Ok(Err(AccountRefused::PendingUpgrade));
        }
        Err(e) => return Err(e),
    };
    if inserted == 1 {
        return Ok(Ok(Stored { id, before: None }));
    }
    // The same account was stored by a concurrent flow since the read above: replace it.
    let (id, before): (ConnectionId, String) = sqlx::query_as(
        "SELECT id, status FROM connections \
         WHERE issuer = $1 AND subject = $2 AND provider = $3 AND account_id = $4 AND organization = $5",
    )
    .bind(issuer)
    .bind(subject)
    .bind(provider)
    .bind(account.id)
    .bind(organization)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::RowNotFound)?;
    let before: ConnectionStatus = before
        .parse()
        .map_err(|p| Error::undecodable(Connection::TABLE, &id, p))?;
    replace_tokens(conn, keys, &id, account, t, details).await?;
    Ok(Ok(Stored {
        id,
        before: Some(before),
    }))
}

/// A grant from another token store (`connections import`), to store as a new connection.
pub struct ImportedGrant<'a> {
    pub issuer: &'a str,
    pub subject: &'a str,
    pub provider: &'a str,
    /// The provider's stable account id; empty where the export names none.
    pub account_id: &'a str,
    pub tokens: NewTokens<'a>,
}

/// Grants per multi-row `INSERT` in [`insert_imported`]: 1,500 bound values, far below both
/// engines' limits.
const IMPORTED_PER_STATEMENT: usize = 100;
/// Values [`insert_imported`] binds per grant.
const IMPORTED_COLUMNS: usize = 15;

/// Stores `grants` as new active connections, each sealed for a new id of its own, a hundred
/// per statement. A grant whose account is stored already (by a connect flow since the caller
/// looked) is left out: an import never overwrites. Returns, for each grant in order, the id it
/// was stored under, or `None` when it was left out.
pub async fn insert_imported(
    conn: &mut AnyConnection,
    keys: &KeyRing,
    grants: &[ImportedGrant<'_>],
) -> Result<Vec<Option<ConnectionId>>> {
    use sqlx::Row as _;
    let now = now();
    let mut stored = Vec::with_capacity(grants.len());
    for chunk in grants.chunks(IMPORTED_PER_STATEMENT) {
        let ids: Vec<ConnectionId> = chunk
            .iter()
            .map(|_| ConnectionId::new(random_token(16)))
            .collect();
        let sql = format!(
            "INSERT INTO connections (id, issuer, subject, provider, account_id, status, scopes, token_type, \
             access_token, refresh_token, expires_at, account_label, created_at, updated_at, last_refresh_at) \
             VALUES {} ON CONFLICT (issuer, organization, subject, provider, account_id) DO NOTHING RETURNING id",
            crate::db::change::placeholders(1, IMPORTED_COLUMNS, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for (g, id) in chunk.iter().zip(&ids) {
            q = q
                .bind(id)
                .bind(g.issuer)
                .bind(g.subject)
                .bind(g.provider)
                .bind(g.account_id)
                .bind(ConnectionStatus::Active.as_str());
            q = bind_tokens(q, keys, id, &g.tokens, now)?
                .bind(now)
                .bind(now);
        }
        let inserted = q
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get::<String, _>(0))
            .collect::<std::result::Result<std::collections::HashSet<String>, _>>()?;
        stored.extend(
            ids.into_iter()
                .map(|id| inserted.contains(id.as_str()).then_some(id)),
        );
    }
    Ok(stored)
}

/// A reconnect: replaces the tokens of connection `id` (now known as `account_id`). A provider
/// that issues no new refresh token on re-consent usually keeps the old one valid, so it is kept
/// (a dead one only leads back to `needs_reauth`).
async fn replace_tokens(
    conn: &mut AnyConnection,
    keys: &KeyRing,
    id: &ConnectionId,
    account: &NewAccount<'_>,
    t: &NewTokens<'_>,
    details: Option<Details<'_>>,
) -> Result<()> {
    let update = sqlx::query(
        "UPDATE connections SET status = 'active', scopes = $2, token_type = $3, access_token = $4, refresh_token = COALESCE($5, refresh_token), \
         expires_at = $6, account_label = COALESCE($7, account_label), updated_at = $8, last_refresh_at = $8, \
         last_error = NULL, refresh_failures = 0, token_version = token_version + 1, account_id = $9, \
         client_organization = $10 WHERE id = $1",
    )
    .bind(id);
    bind_tokens(update, keys, id, t, now())?
        .bind(account.id)
        .bind(account.client_organization)
        .execute(&mut *conn)
        .await?;
    if let Some(d) = details {
        set_connection_details(conn, id, d.params, d.metadata).await?;
    }
    Ok(())
}

/// Binds what a connect flow (or an import) stores of `t`, sealed for connection `id`, and
/// `now`: seven parameters in the order the statements of [`store_connected`] and
/// [`insert_imported`] number them (scopes, token type, access token, refresh token, expiry,
/// account label, time).
fn bind_tokens<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    keys: &KeyRing,
    id: &str,
    t: &NewTokens<'q>,
    now: i64,
) -> Result<sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>> {
    Ok(q.bind(t.scopes.join(" "))
        .bind(t.token_type)
        .bind(seal(keys, id, "access_token", t.access_token)?)
        .bind(seal_optional(keys, id, "refresh_token", t.refresh_token)?)
        .bind(t.expires_at)
        .bind(t.account_label)
        .bind(now))
}

/// `metadata` as stored: JSON, or NULL when empty. A value that does not encode is an error,
/// never stored as an empty one.
pub(super) fn encode_metadata(id: &str, metadata: &Metadata) -> Result<Option<String>> {
    (!metadata.is_empty())
        .then(|| serde_json::to_string(metadata))
        .transpose()
        .map_err(|e| Error::encode(format!("the metadata of connection {id}"), e))
}

/// Stores refreshed tokens, only if nobody else stored newer ones since `expected_version`
/// was read (a fencing check). Returns false when the row had moved on.
pub async fn save_refreshed_tokens(
    conn: &mut AnyConnection,
    keys: &KeyRing,
    id: &str,
    expected_version: i64,
    t: &NewTokens<'_>,
) -> Result<bool> {
    let now = now();
    let refresh = seal_optional(keys, id, "refresh_token", t.refresh_token)?;
    let r = sqlx::query(
        "UPDATE connections SET status = 'active', scopes = $3, token_type = $4, access_token = $5, \
         refresh_token = COALESCE($6, refresh_token), expires_at = $7, updated_at = $8, last_refresh_at = $8, \
         last_error = NULL, refresh_failures = 0, token_version = token_version + 1 \
         WHERE id = $1 AND token_version = $2",
    )
    .bind(id)
    .bind(expected_version)
    .bind(t.scopes.join(" "))
    .bind(t.token_type)
    .bind(seal(keys, id, "access_token", t.access_token)?)
    .bind(refresh)
    .bind(t.expires_at)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Records a connection's parameters and what was learned at its callback, in the transaction
/// that stored its tokens (a reconnect replaces both).
pub async fn set_connection_details(
    conn: &mut AnyConnection,
    id: &str,
    params: &ConnParams,
    metadata: &Metadata,
) -> Result<()> {
    let metadata = encode_metadata(id, metadata)?;
    sqlx::query("UPDATE connections SET params = $2, metadata = $3 WHERE id = $1")
        .bind(id)
        .bind(crate::db::elicitations::encode_params(params)?)
        .bind(metadata)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Records a failed refresh. `needs_reauth` marks the grant dead; the identity is kept.
pub async fn record_refresh_failure(
    conn: &mut AnyConnection,
    id: &str,
    error: &str,
    needs_reauth: bool,
) -> Result<()> {
    sqlx::query(
        "UPDATE connections SET last_error = $2, refresh_failures = refresh_failures + 1, updated_at = $3, \
         status = CASE WHEN $4 = 1 THEN 'needs_reauth' ELSE status END WHERE id = $1",
    )
    .bind(id)
    .bind(error)
    .bind(now())
    .bind(i64::from(needs_reauth))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Removes the tokens and marks the connection revoked (the row stays for its history, listed
/// to the apps that held it; a later connect replaces them with the apps it names).
pub async fn mark_revoked(conn: &mut AnyConnection, id: &str, note: Option<&str>) -> Result<bool> {
    let r = sqlx::query(
        "UPDATE connections SET status = 'revoked', access_token = NULL, refresh_token = NULL, expires_at = NULL, \
         updated_at = $2, last_error = $3, token_version = token_version + 1 WHERE id = $1",
    )
    .bind(id)
    .bind(now())
    .bind(note)
    .execute(&mut *conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Makes connection `id` its user's default account at its provider (see `DEFAULT_FIRST`).
pub async fn make_default(conn: &mut AnyConnection, id: &str) -> Result<()> {
    sqlx::query("UPDATE connections SET default_at = $2 WHERE id = $1")
        .bind(id)
        .bind(crate::time::now_ms())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Sets (or, with `None`, clears) the user's own name for connection `id`.
pub async fn set_nickname(
    conn: &mut AnyConnection,
    id: &str,
    nickname: Option<&str>,
) -> Result<()> {
    sqlx::query("UPDATE connections SET nickname = $2 WHERE id = $1")
        .bind(id)
        .bind(nickname)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
