//! Connection rows: one user's grant at one provider. Token columns are sealed with associated
//! data naming the connection and the field, so a value copied to another row does not open.

use secrecy::{ExposeSecret, SecretString};
use sqlx::{AnyConnection, FromRow};

use super::{Db, Error, Result, Table, now};
use crate::crypto::{CryptoError, KeyRing, Sealed, connection_aad, random_token};
use crate::ids::ConnectionId;
use crate::names::named_enum;

named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub enum ConnectionStatus ("connection status") {
        Active,
        NeedsReauth,
        Revoked,
    }
}

mod accounts;
mod tx;

pub use tx::*;

/// `Row` with the clients that may use it, as a JSON array (`find_connection_with_clients`).
#[derive(Debug, FromRow)]
struct RowWithClients {
    #[sqlx(flatten)]
    row: Row,
    clients: Option<String>,
}

#[derive(Debug, Clone, FromRow)]
#[cfg_attr(test, derive(Default))]
pub(super) struct Row {
    id: ConnectionId,
    issuer: String,
    subject: String,
    provider: String,
    status: String,
    scopes: String,
    token_type: String,
    access_token: Option<String>,
    refresh_token: Option<String>,
    expires_at: Option<i64>,
    account_label: Option<String>,
    created_at: i64,
    updated_at: i64,
    last_refresh_at: Option<i64>,
    last_error: Option<String>,
    token_version: i64,
    params: Option<String>,
    metadata: Option<String>,
    account_id: String,
    nickname: Option<String>,
    default_at: Option<i64>,
    organization: String,
    client_organization: String,
}

/// Parameter values of one connection, by name.
pub type ConnParams = std::collections::BTreeMap<String, String>;

/// Values learned about a connection (Salesforce `instance_url`, QuickBooks `realmId`, Slack
/// team, Atlassian `cloud_id`), by the names the catalog gives them. Never a token.
pub type Metadata = std::collections::BTreeMap<String, serde_json::Value>;

/// A connection as stored: token fields are still sealed, and stay so. No field holds a token
/// in clear (`access_token`/`refresh_token` open one into a `SecretString` for the caller), so
/// a `Connection` may be kept and shared (`token_cache`) without keeping a token in clear.
#[derive(Debug, Clone)]
pub struct Connection {
    pub id: ConnectionId,
    pub issuer: String,
    pub subject: String,
    pub provider: String,
    pub status: ConnectionStatus,
    pub scopes: Vec<String>,
    pub token_type: String,
    sealed_access_token: Option<Sealed>,
    sealed_refresh_token: Option<Sealed>,
    pub expires_at: Option<i64>,
    pub account_label: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_refresh_at: Option<i64>,
    pub last_error: Option<String>,
    pub token_version: i64,
    /// Per-connection parameters (tenant, subdomain, shop, region).
    pub params: ConnParams,
    /// Values learned at the callback (instance_url, realmId, team). Never a token.
    pub metadata: Metadata,
    /// The provider's stable identifier of the account; empty where the provider says nothing
    /// (one account per user there) and for rows stored before accounts, until reconnected.
    pub account_id: String,
    /// The user's own name for the account.
    pub nickname: Option<String>,
    /// When the user made this account their default for the provider (see [`DEFAULT_FIRST`]).
    pub default_at: Option<i64>,
    /// The organisation that owns this connection ('' for a user's own; its `subject` is then
    /// '' too, so no user's lookup reaches it).
    pub organization: String,
    /// The organisation whose own OAuth app issued the grant ('': the operator's); its
    /// refreshes and revocation use that app.
    pub client_organization: String,
}

/// A row whose status does not decode is an error naming the row, never a default.
impl TryFrom<Row> for Connection {
    type Error = Error;

    fn try_from(r: Row) -> Result<Self> {
        let bad = |problem: String| Error::undecodable(Self::TABLE, &r.id, problem);
        let status: ConnectionStatus = r.status.parse().map_err(bad)?;
        let params = crate::db::elicitations::decode_params(r.params.as_deref())
            .map_err(|e| bad(format!("params: {e}")))?;
        let metadata = match r.metadata.as_deref() {
            None => Default::default(),
            Some(m) => serde_json::from_str(m)
                .map_err(|e| bad(format!("metadata is not an object: {e}")))?,
        };
        Ok(Self {
            id: r.id,
            issuer: r.issuer,
            subject: r.subject,
            provider: r.provider,
            status,
            scopes: crate::db::elicitations::split_scopes(&r.scopes),
            token_type: r.token_type,
            sealed_access_token: r.access_token.as_deref().map(Sealed::parse),
            sealed_refresh_token: r.refresh_token.as_deref().map(Sealed::parse),
            expires_at: r.expires_at,
            account_label: r.account_label,
            created_at: r.created_at,
            updated_at: r.updated_at,
            last_refresh_at: r.last_refresh_at,
            last_error: r.last_error,
            token_version: r.token_version,
            params,
            metadata,
            account_id: r.account_id,
            nickname: r.nickname,
            default_at: r.default_at,
            organization: r.organization,
            client_organization: r.client_organization,
        })
    }
}

/// Which account a connection is, as callers see it (never a token).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct AccountRef {
    /// The provider's stable id of the account; empty where the provider names none.
    pub id: String,
    /// A label people recognise (login, email, workspace name), when the provider gave one.
    pub label: Option<String>,
    /// The user's own name for it, when they gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nickname: Option<String>,
}

impl Connection {
    /// This connection as it stands once a refresh that returned `token_type`, `expires_at` and
    /// `scopes` is stored. Its sealed token columns are left empty rather than stale: whoever
    /// holds the refreshed connection holds the new token itself.
    /// (`save_refreshed_tokens` writes the same columns.)
    pub fn refreshed(
        self,
        token_type: String,
        expires_at: Option<i64>,
        scopes: Vec<String>,
    ) -> Self {
        let now = now();
        Self {
            status: ConnectionStatus::Active,
            token_type,
            expires_at,
            scopes,
            sealed_access_token: None,
            sealed_refresh_token: None,
            updated_at: now,
            last_refresh_at: Some(now),
            last_error: None,
            token_version: self.token_version + 1,
            ..self
        }
    }

    /// Which account this is.
    pub fn account(&self) -> AccountRef {
        AccountRef {
            id: self.account_id.clone(),
            label: self.account_label.clone(),
            nickname: self.nickname.clone(),
        }
    }

    /// The user whose grant this is.
    pub fn user_ref(&self) -> crate::ids::UserRef {
        crate::ids::UserRef::new(self.issuer.as_str(), self.subject.as_str())
    }

    pub fn access_token(
        &self,
        keys: &KeyRing,
    ) -> std::result::Result<Option<SecretString>, CryptoError> {
        self.open(keys, self.sealed_access_token.as_ref(), "access_token")
    }

    pub fn refresh_token(
        &self,
        keys: &KeyRing,
    ) -> std::result::Result<Option<SecretString>, CryptoError> {
        self.open(keys, self.sealed_refresh_token.as_ref(), "refresh_token")
    }

    /// Opens the sealed column `field` of this row (its associated data names both).
    fn open(
        &self,
        keys: &KeyRing,
        sealed: Option<&Sealed>,
        field: &str,
    ) -> std::result::Result<Option<SecretString>, CryptoError> {
        sealed
            .map(|s| keys.open_sealed_string(s, &connection_aad(&self.id, field)))
            .transpose()
    }

    pub fn has_refresh_token(&self) -> bool {
        self.sealed_refresh_token.is_some()
    }

    pub fn has_access_token(&self) -> bool {
        self.sealed_access_token.is_some()
    }

    /// Bytes of the sealed token fields (for the cache's size bound).
    pub fn sealed_len(&self) -> usize {
        self.sealed_access_token
            .as_ref()
            .map_or(0, Sealed::held_bytes)
            + self
                .sealed_refresh_token
                .as_ref()
                .map_or(0, Sealed::held_bytes)
    }

    /// The ids of the keys that sealed this row's values.
    pub fn key_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = [&self.sealed_access_token, &self.sealed_refresh_token]
            .into_iter()
            .flatten()
            .filter_map(Sealed::key_id)
            .collect();
        ids.dedup();
        ids
    }
}

/// Tokens to store, in clear until sealed here.
pub struct NewTokens<'a> {
    pub access_token: &'a SecretString,
    /// `None` keeps the refresh token already stored (providers that do not rotate).
    pub refresh_token: Option<&'a SecretString>,
    pub token_type: &'a str,
    pub expires_at: Option<i64>,
    pub scopes: &'a [String],
    pub account_label: Option<&'a str>,
}

/// The order of one user's accounts at one provider: the default first — the one the user made
/// their default most recently, else the first connected — and revoked ones last.
pub const DEFAULT_FIRST: &str = "CASE WHEN status = 'revoked' THEN 1 ELSE 0 END, \
                                 COALESCE(default_at, 0) DESC, created_at, id";

const COLUMNS: &str = "id, issuer, subject, provider, status, scopes, token_type, access_token, refresh_token, expires_at, \
                       account_label, created_at, updated_at, last_refresh_at, last_error, token_version, params, metadata, \
                       account_id, nickname, default_at, organization, client_organization";

impl Table for Connection {
    type Row = Row;
    const TABLE: &'static str = "connections";
    const COLUMNS: &'static str = COLUMNS;
}

/// Seals a token for its row and field; a value that cannot be sealed is never stored.
fn seal(keys: &KeyRing, id: &str, field: &str, value: &SecretString) -> Result<String> {
    keys.seal(value.expose_secret().as_bytes(), &connection_aad(id, field))
        .map_err(|e| Error::encode(format!("the {field} of connection {id}"), e))
}

fn seal_optional(
    keys: &KeyRing,
    id: &str,
    field: &str,
    value: Option<&SecretString>,
) -> Result<Option<String>> {
    value.map(|v| seal(keys, id, field, v)).transpose()
}

impl Db {
    pub async fn get_connection(&self, id: &str) -> Result<Option<Connection>> {
        let mut conn = self.pool.acquire().await?;
        let r = get_connection(&mut conn, id).await;
        conn.finished(&r);
        r
    }

    /// The user's connections: by provider, each provider's default account first.
    pub async fn list_connections(&self, issuer: &str, subject: &str) -> Result<Vec<Connection>> {
        self.fetch_rows(
            sqlx::query_as(&Connection::select(&format!(
                "issuer = $1 AND organization = '' AND subject = $2 ORDER BY provider, {DEFAULT_FIRST}"
            )))
            .bind(issuer)
            .bind(subject),
        )
        .await
    }

    /// Every connection organisation `organization` owns, by provider.
    pub async fn list_organization_connections(
        &self,
        issuer: &str,
        organization: &str,
    ) -> Result<Vec<Connection>> {
        self.fetch_rows(
            sqlx::query_as(&Connection::select(&format!(
                "issuer = $1 AND organization = $2 AND subject = '' ORDER BY provider, {DEFAULT_FIRST}"
            )))
            .bind(issuer)
            .bind(organization),
        )
        .await
    }

    /// Active, refreshable connections whose token expires before `expiring_before`, or that
    /// were last refreshed before `idle_before`; skipping ones that failed since `failed_since`.
    pub async fn due_for_refresh(
        &self,
        expiring_before: i64,
        idle_before: i64,
        failed_since: i64,
        limit: i64,
    ) -> Result<Vec<Connection>> {
        const DUE: &str = "status = 'active' AND refresh_token IS NOT NULL \
             AND ((expires_at IS NOT NULL AND expires_at < $1) OR last_refresh_at IS NULL OR last_refresh_at < $2) \
             AND (last_error IS NULL OR updated_at < $3) ORDER BY expires_at LIMIT $4";
        self.fetch_rows(
            sqlx::query_as(&Connection::select(DUE))
                .bind(expiring_before)
                .bind(idle_before)
                .bind(failed_since)
                .bind(limit),
        )
        .await
    }

    /// Test and operator helper: the raw sealed columns of a row.
    pub async fn raw_connection_secrets(
        &self,
        id: &str,
    ) -> Result<(Option<String>, Option<String>)> {
        Ok(
            sqlx::query_as("SELECT access_token, refresh_token FROM connections WHERE id = $1")
                .bind(id)
                .fetch_one(&self.pool)
                .await?,
        )
    }
}

/// One account a user holds at a provider, as an import compares it with the grants it brings
/// (no token).
#[derive(Debug, Clone, FromRow)]
pub struct HeldAccount {
    pub subject: String,
    pub provider: String,
    pub account_id: String,
    pub account_label: Option<String>,
}

/// Subjects per statement in [`Db::held_accounts`] (well below both engines' limits on bound
/// values).
const SUBJECTS_PER_READ: usize = 500;

impl Db {
    /// Every account the users `subjects` of `issuer` hold, at any provider and in any status.
    pub async fn held_accounts(&self, issuer: &str, subjects: &[&str]) -> Result<Vec<HeldAccount>> {
        let mut held = Vec::new();
        for chunk in subjects.chunks(SUBJECTS_PER_READ) {
            let list: Vec<String> = (2..chunk.len() + 2).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT subject, provider, account_id, account_label FROM connections \
                 WHERE issuer = $1 AND subject IN ({})",
                list.join(", ")
            );
            let q = chunk
                .iter()
                .fold(sqlx::query_as(&sql).bind(issuer), |q, s| q.bind(*s));
            held.extend(q.fetch_all(&self.pool).await?);
        }
        Ok(held)
    }

    /// Whether a user may hold several accounts at one provider: the post-deploy migration
    /// dropped the one-per-provider constraint (see [`AccountRefused::PendingUpgrade`]).
    pub async fn several_accounts_allowed(&self) -> Result<bool> {
        self.has_applied(SEVERAL_ACCOUNTS_MIGRATION).await
    }
}

/// Filters for the operator's connection list. Empty means "any".
#[derive(Debug, Default, Clone)]
pub struct ConnectionFilter {
    /// A case-insensitive substring of the subject.
    pub subject: Option<String>,
    pub provider: Option<String>,
    pub status: Option<String>,
    /// Connections the organisation owns, or that its own app issued (its members').
    pub organization: Option<String>,
}

/// `s` for a LIKE pattern, with `\`, `%` and `_` taken literally (used with `ESCAPE '\'`).
pub fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Db {
    /// One page of connections matching `f` (most recently changed first) and the total count.
    pub async fn search_connections(
        &self,
        f: &ConnectionFilter,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<Connection>, i64)> {
        let pattern = f
            .subject
            .as_deref()
            .map(|s| format!("%{}%", like_escape(&s.to_lowercase())));
        const WHERE: &str = "($1 IS NULL OR lower(subject) LIKE $1 ESCAPE '\\') AND ($2 IS NULL OR provider = $2) \
                             AND ($3 IS NULL OR status = $3) \
                             AND ($4 IS NULL OR organization = $4 OR client_organization = $4)";
        let page = self
            .fetch_rows(
                sqlx::query_as(&Connection::select(&format!(
                    "{WHERE} ORDER BY updated_at DESC, id LIMIT $5 OFFSET $6"
                )))
                .bind(pattern.as_deref())
                .bind(f.provider.as_deref())
                .bind(f.status.as_deref())
                .bind(f.organization.as_deref())
                .bind(limit)
                .bind(offset),
            )
            .await?;
        let (total,): (i64,) =
            sqlx::query_as(&format!("SELECT COUNT(*) FROM connections WHERE {WHERE}"))
                .bind(pattern.as_deref())
                .bind(f.provider.as_deref())
                .bind(f.status.as_deref())
                .bind(f.organization.as_deref())
                .fetch_one(&self.pool)
                .await?;
        Ok((page, total))
    }

    /// Connections per status, for the operator overview.
    pub async fn count_connections_by_status(&self) -> Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT status, COUNT(*) FROM connections GROUP BY status ORDER BY status",
        )
        .fetch_all(&self.pool)
        .await?)
    }
}

#[cfg(test)]
impl Connection {
    /// An active row with a sealed-looking access token, for unit tests.
    pub(crate) fn for_tests(id: &str, subject: &str, provider: &str, sealed: &str) -> Self {
        Self {
            id: id.into(),
            issuer: "https://issuer.test".into(),
            subject: subject.into(),
            provider: provider.into(),
            status: ConnectionStatus::Active,
            scopes: vec!["read".into()],
            token_type: "Bearer".into(),
            sealed_access_token: Some(Sealed::parse(sealed)),
            sealed_refresh_token: None,
            expires_at: Some(now() + 3600),
            account_label: None,
            created_at: now(),
            updated_at: now(),
            last_refresh_at: None,
            last_error: None,
            token_version: 0,
            params: Default::default(),
            metadata: Default::default(),
            account_id: String::new(),
            nickname: None,
            default_at: None,
            organization: String::new(),
            client_organization: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: &str) -> Row {
        Row {
            id: "c1".into(),
            status: status.into(),
            ..Row::default()
        }
    }

    #[test]
    fn a_row_with_an_unknown_status_or_bad_params_is_an_error_naming_the_row() {
        assert!(Connection::try_from(row("needs_reauth")).is_ok());
        let e = Connection::try_from(row("paused")).unwrap_err().to_string();
        assert_eq!(
            e,
            "connections row c1: unknown connection status \"paused\""
        );
        let e = Connection::try_from(Row {
            params: Some("[1]".into()),
            ..row("active")
        })
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("connections row c1: params: "), "{e}");
    }
}
