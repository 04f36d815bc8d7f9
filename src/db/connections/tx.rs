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

/// The connection's parameters and what the provider told about the account, stored with its
/// tokens.
pub struct Details<'a> {
    pub params: &'a ConnParams,
    pub metadata: &'a Metadata,
}

/// Stores the tokens of a completed connect flow: a new connection, or the existing one for
/// `(issuer, subject, provider)` replaced in place (same id), with the connection's `details`
/// when given (`None` keeps those stored). A new connection is one statement: the `INSERT`
/// carries everything; a reconnect reads the row's id and status, then replaces it.
pub async fn store_connected(
    conn: &mut AnyConnection,
    keys: &KeyRing,
    issuer: &str,
    subject: &str,
    provider: &str,
    t: &NewTokens<'_>,
    details: Option<Details<'_>>,
) -> Result<Stored> {
    let now = now();
    let id = ConnectionId::new(random_token(16));
    let (params, metadata) = match &details {
        Some(d) => (
            crate::db::elicitations::encode_params(d.params)?,
            encode_metadata(&id, d.metadata)?,
        ),
        None => (None, None),
    };
    // Without details the statement names only the columns every schema since 0001 has.
    let (detail_columns, detail_values) = match details {
        Some(_) => (", params, metadata", ", $12, $13"),
        None => ("", ""),
    };
    let insert = format!(
        "INSERT INTO connections (id, issuer, subject, provider, status, scopes, token_type, access_token, refresh_token, \
         expires_at, account_label, created_at, updated_at, last_refresh_at{detail_columns}) \
         VALUES ($1, $2, $3, $4, 'active', $5, $6, $7, $8, $9, $10, $11, $11, $11{detail_values}) \
         ON CONFLICT (issuer, subject, provider) DO NOTHING"
    );
    let q = sqlx::query(&insert)
        .bind(&id)
        .bind(issuer)
        .bind(subject)
        .bind(provider);
    let q = bind_tokens(q, keys, &id, t, now)?;
    let q = match details {
        Some(_) => q.bind(params).bind(metadata),
        None => q,
    };
    let inserted = q.execute(&mut *conn).await?.rows_affected();
    if inserted == 1 {
        return Ok(Stored { id, before: None });
    }
    let Some((id, before)) =
        crate::db::grants::existing_status(conn, issuer, subject, provider).await?
    else {
        // Not inserted, yet not there: deleted between the two statements.
        return Err(Error::RowNotFound);
    };
    // A reconnect replaces the tokens. A provider that issues no new refresh token on
    // re-consent usually keeps the old one valid, so it is kept (a dead one only leads back
    // to `needs_reauth`).
    let update = sqlx::query(
        "UPDATE connections SET status = 'active', scopes = $2, token_type = $3, access_token = $4, refresh_token = COALESCE($5, refresh_token), \
         expires_at = $6, account_label = COALESCE($7, account_label), updated_at = $8, last_refresh_at = $8, \
         last_error = NULL, refresh_failures = 0, token_version = token_version + 1 WHERE id = $1",
    )
    .bind(&id);
    bind_tokens(update, keys, &id, t, now)?
        .execute(&mut *conn)
        .await?;
    if let Some(d) = details {
        set_connection_details(conn, &id, d.params, d.metadata).await?;
    }
    Ok(Stored {
        id,
        before: Some(before),
    })
}

/// Binds what a connect flow stores of `t`, sealed for connection `id`, and `now`: the seven
/// parameters after the ones naming the row, in the order both statements of
/// [`store_connected`] number them (scopes, token type, access token, refresh token, expiry,
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
