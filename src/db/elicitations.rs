//! Elicitation rows.

use sqlx::{AnyConnection, FromRow};

use super::{Db, Error, Result, Table, now};
use crate::ids::{ConnectionId, ElicitationId};
use crate::names::named_enum;

named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub enum ElicitationStatus ("elicitation status") {
        Pending,
        Completed,
        Declined,
        Expired,
        Failed,
    }
}

/// How a pending elicitation ends, with exactly what each ending records (in place of a status
/// and two optional strings that could be passed the wrong way round).
#[derive(Debug, Clone, Copy)]
pub enum Ending<'a> {
    /// Connected: the connection it produced, and which account that is.
    Completed {
        connection_id: &'a ConnectionId,
        account: &'a super::connections::AccountRef,
    },
    /// The user said no, on the consent page (`reason: None`) or at the provider (its answer).
    Declined { reason: Option<&'a str> },
    /// The provider or the code exchange failed; `failure` says how (no secrets).
    Failed { failure: &'a str },
}

impl<'a> Ending<'a> {
    pub fn status(self) -> ElicitationStatus {
        match self {
            Self::Completed { .. } => ElicitationStatus::Completed,
            Self::Declined { .. } => ElicitationStatus::Declined,
            Self::Failed { .. } => ElicitationStatus::Failed,
        }
    }

    pub fn connection_id(self) -> Option<&'a ConnectionId> {
        match self {
            Self::Completed { connection_id, .. } => Some(connection_id),
            _ => None,
        }
    }

    /// The account connected, for `Completed`.
    pub fn account(self) -> Option<&'a super::connections::AccountRef> {
        match self {
            Self::Completed { account, .. } => Some(account),
            _ => None,
        }
    }

    /// What goes into the `failure` column (and the audit row's detail).
    pub fn failure(self) -> Option<&'a str> {
        match self {
            Self::Completed { .. } => None,
            Self::Declined { reason } => reason,
            Self::Failed { failure } => Some(failure),
        }
    }
}

/// Which account an elicitation is for: another one (`add`), or the reconnect of one named
/// connection (`reconnect`), or neither (the user's default account, or their first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountAsk {
    pub add: bool,
    pub reconnect: Option<ConnectionId>,
    /// Whose connection it makes: the user's own, or an organisation's.
    pub owner: Owner,
}

/// Who owns the connection an elicitation makes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Owner {
    /// The user it was made for.
    #[default]
    User,
    /// An organisation, which only its administrator connects: the one the request proved
    /// (`Some`), else (`None`) the administrator's own at sign-in.
    Organization(Option<String>),
}

impl Owner {
    const USER: &str = "user";
    const ORGANIZATION: &str = "organization";

    fn as_str(&self) -> &'static str {
        match self {
            Self::User => Self::USER,
            Self::Organization(_) => Self::ORGANIZATION,
        }
    }

    /// The organisation named, if any.
    pub fn organization(&self) -> Option<&str> {
        match self {
            Self::User => None,
            Self::Organization(o) => o.as_deref(),
        }
    }
}

#[derive(Debug, Clone, FromRow)]
#[cfg_attr(test, derive(Default))]
pub(super) struct Row {
    id: ElicitationId,
    client_id: String,
    issuer: String,
    subject: String,
    provider: String,
    scopes: String,
    status: String,
    connection_id: Option<ConnectionId>,
    failure: Option<String>,
    created_at: i64,
    expires_at: i64,
    params: Option<String>,
    add_account: i64,
    account_connection_id: Option<ConnectionId>,
    owner: String,
    organization: Option<String>,
    client_organization: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Elicitation {
    pub id: ElicitationId,
    pub client_id: String,
    pub issuer: String,
    pub subject: String,
    pub provider: String,
    pub scopes: Vec<String>,
    pub status: ElicitationStatus,
    pub connection_id: Option<ConnectionId>,
    pub failure: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    /// Per-connection parameters given so far (API caller, consent page).
    pub params: super::connections::ConnParams,
    /// Asks for another account at the provider, not a reconnect.
    pub add_account: bool,
    /// The connection (one account) this elicitation reconnects, when one was named.
    pub account_connection_id: Option<ConnectionId>,
    /// Whose connection it makes.
    pub owner: Owner,
    /// The organisation whose own OAuth app the flow uses, fixed when the flow starts.
    pub client_organization: Option<String>,
}

/// How the `failure` of an elicitation that ended for a security refusal begins (then `: ` and
/// what was refused); the API's `reason` for it, too.
pub const PROVIDER_MISCONFIGURED: &str = "provider_misconfigured";

/// Why a `failed` elicitation failed, as the API names it (`ElicitationView::reason`, the
/// `reason` of an `upstream_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// A security check refused what the provider publishes; an operator must fix it, a retry
    /// will not help.
    ProviderMisconfigured,
    /// The provider or the code exchange failed.
    ProviderError,
}

impl FailureReason {
    /// The name API bodies carry.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ProviderMisconfigured => PROVIDER_MISCONFIGURED,
            Self::ProviderError => "provider_error",
        }
    }
}

impl Elicitation {
    /// The user the elicitation was made for.
    pub fn user_ref(&self) -> crate::ids::UserRef {
        crate::ids::UserRef::new(self.issuer.as_str(), self.subject.as_str())
    }

    /// Why a `failed` elicitation failed: misconfigured when its `failure` begins with
    /// `provider_misconfigured:`, else a provider error.
    pub fn failure_reason(&self) -> Option<FailureReason> {
        if self.status != ElicitationStatus::Failed {
            return None;
        }
        let misconfigured = self
            .failure
            .as_deref()
            .and_then(|f| f.strip_prefix(PROVIDER_MISCONFIGURED))
            .is_some_and(|rest| rest.starts_with(':'));
        Some(if misconfigured {
            FailureReason::ProviderMisconfigured
        } else {
            FailureReason::ProviderError
        })
    }

    /// The status as callers should see it: a pending elicitation past its expiry is expired.
    pub fn effective_status(&self, now: i64) -> ElicitationStatus {
        if self.status == ElicitationStatus::Pending && now >= self.expires_at {
            ElicitationStatus::Expired
        } else {
            self.status
        }
    }
}

/// A row whose status does not decode is an error naming the row, never a default.
impl TryFrom<Row> for Elicitation {
    type Error = Error;

    fn try_from(r: Row) -> Result<Self> {
        let bad = |problem: String| Error::undecodable(Self::TABLE, &r.id, problem);
        let status: ElicitationStatus = r.status.parse().map_err(bad)?;
        let params = decode_params(r.params.as_deref()).map_err(|e| bad(format!("params: {e}")))?;
        let owner = match r.owner.as_str() {
            Owner::USER => Owner::User,
            Owner::ORGANIZATION => Owner::Organization(r.organization.clone()),
            other => return Err(bad(format!("unknown owner {other:?}"))),
        };
        Ok(Self {
            id: r.id,
            client_id: r.client_id,
            issuer: r.issuer,
            subject: r.subject,
            provider: r.provider,
            scopes: split_scopes(&r.scopes),
            status,
            connection_id: r.connection_id,
            failure: r.failure,
            created_at: r.created_at,
            expires_at: r.expires_at,
            params,
            add_account: r.add_account != 0,
            account_connection_id: r.account_connection_id,
            owner,
            client_organization: r.client_organization,
        })
    }
}

/// A stored parameter object: absent, or a JSON object of strings; anything else is an error.
pub fn decode_params(
    s: Option<&str>,
) -> std::result::Result<super::connections::ConnParams, String> {
    match s {
        None => Ok(Default::default()),
        Some(s) => serde_json::from_str(s).map_err(|e| format!("not an object of strings: {e}")),
    }
}

/// The stored form of parameters: `NULL` when there are none. One that does not encode is an
/// error, never stored as an empty value.
pub fn encode_params(p: &super::connections::ConnParams) -> Result<Option<String>> {
    (!p.is_empty())
        .then(|| serde_json::to_string(p))
        .transpose()
        .map_err(|e| Error::encode("connection parameters", e))
}

impl Table for Elicitation {
    type Row = Row;
    const TABLE: &'static str = "elicitations";
    const COLUMNS: &'static str = COLUMNS;
}

pub fn split_scopes(s: &str) -> Vec<String> {
    s.split(' ')
        .filter(|x| !x.is_empty())
        .map(str::to_owned)
        .collect()
}

const COLUMNS: &str = "id, client_id, issuer, subject, provider, scopes, status, connection_id, failure, created_at, expires_at, params, \
                       add_account, account_connection_id, owner, organization, client_organization";

impl Db {
    /// A still-pending, unexpired elicitation for the same request, to hand out again.
    #[allow(clippy::too_many_arguments)]
    pub async fn find_reusable_elicitation(
        &self,
        client_id: &str,
        issuer: &str,
        subject: &str,
        provider: &str,
        scopes: &[String],
        params: &super::connections::ConnParams,
        account: &AccountAsk,
        min_remaining: i64,
    ) -> Result<Option<Elicitation>> {
        let row: Option<Row> = sqlx::query_as(&Elicitation::select(
            "client_id = $1 AND issuer = $2 AND subject = $3 \
             AND provider = $4 AND scopes = $5 AND status = 'pending' AND expires_at > $6 \
             AND COALESCE(params, '') = $7 AND add_account = $8 AND COALESCE(account_connection_id, '') = $9 \
             AND owner = $10 AND COALESCE(organization, '') = $11 \
             ORDER BY created_at DESC LIMIT 1",
        ))
        .bind(client_id)
        .bind(issuer)
        .bind(subject)
        .bind(provider)
        .bind(scopes.join(" "))
        .bind(now() + min_remaining)
        .bind(encode_params(params)?.unwrap_or_default())
        .bind(i64::from(account.add))
        .bind(account.reconnect.as_ref().map_or("", |c| c.as_str()))
        .bind(account.owner.as_str())
        .bind(account.owner.organization().unwrap_or_default())
        .fetch_optional(&self.pool)
        .await?;
        row.map(TryInto::try_into).transpose()
    }

    pub async fn get_elicitation(&self, id: &str) -> Result<Option<Elicitation>> {
        let row: Option<Row> = sqlx::query_as(&Elicitation::select("id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(TryInto::try_into).transpose()
    }

    /// Which of `ids` are no longer pending (one query, for the long-poll sweep).
    pub async fn finished_among(&self, ids: &[String]) -> Result<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (1..=ids.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT id FROM elicitations WHERE status <> 'pending' AND id IN ({})",
            placeholders.join(", ")
        );
        // Not prepared: the number of ids varies from sweep to sweep.
        let mut q = sqlx::query_as::<_, (String,)>(&sql).persistent(false);
        for id in ids {
            q = q.bind(id);
        }
        Ok(q.fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(|(id,)| id)
            .collect())
    }
}

impl Db {
    /// Pending (unexpired) elicitations, newest first.
    pub async fn pending_elicitations(
        &self,
        subject: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Elicitation>> {
        const PENDING: &str = "status = 'pending' AND expires_at > $1 \
             AND ($2 IS NULL OR subject = $2) ORDER BY created_at DESC, id LIMIT $3";
        self.fetch_rows(
            sqlx::query_as(&Elicitation::select(PENDING))
                .bind(now())
                .bind(subject)
                .bind(limit),
        )
        .await
    }

    /// Elicitations that have an outcome (or ran out of time), newest first, one page.
    pub async fn finished_elicitations(
        &self,
        subject: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<Elicitation>> {
        const FINISHED: &str = "(status <> 'pending' OR expires_at <= $1) \
             AND ($2 IS NULL OR subject = $2) ORDER BY created_at DESC, id LIMIT $3 OFFSET $4";
        self.fetch_rows(
            sqlx::query_as(&Elicitation::select(FINISHED))
                .bind(now())
                .bind(subject)
                .bind(limit)
                .bind(offset),
        )
        .await
    }

    /// Elicitations that ended in a connection, newest first (who asked for it, and how).
    pub async fn elicitations_of_connection(
        &self,
        connection_id: &str,
    ) -> Result<Vec<Elicitation>> {
        self.fetch_rows(
            sqlx::query_as(&Elicitation::select(
                "connection_id = $1 ORDER BY created_at DESC LIMIT 20",
            ))
            .bind(connection_id),
        )
        .await
    }
}

pub async fn insert_elicitation(conn: &mut AnyConnection, e: &Elicitation) -> Result<()> {
    sqlx::query(
        "INSERT INTO elicitations (id, client_id, issuer, subject, provider, scopes, status, created_at, expires_at, params, \
         add_account, account_connection_id, owner, organization) \
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(&e.id)
    .bind(&e.client_id)
    .bind(&e.issuer)
    .bind(&e.subject)
    .bind(&e.provider)
    .bind(e.scopes.join(" "))
    .bind(e.created_at)
    .bind(e.expires_at)
    .bind(encode_params(&e.params)?)
    .bind(i64::from(e.add_account))
    .bind(&e.account_connection_id)
    .bind(e.owner.as_str())
    .bind(e.owner.organization())
    .execute(conn)
    .await?;
    Ok(())
}

/// Fixes, when the flow of pending elicitation `id` starts, the organisation it is for (an
/// organisation's connection whose request named none: the administrator's own) and whose own
/// OAuth app it uses (`None`: the operator's). A flow started again replaces both.
pub async fn set_elicitation_organizations(
    conn: &mut AnyConnection,
    id: &str,
    organization: Option<&str>,
    client_organization: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "UPDATE elicitations SET organization = CASE WHEN owner = 'organization' THEN COALESCE(organization, $2) ELSE organization END, \
         client_organization = $3 WHERE id = $1 AND status = 'pending'",
    )
    .bind(id)
    .bind(organization)
    .bind(client_organization)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records the parameters the user confirmed on the consent page (only while pending).
pub async fn set_elicitation_params(
    conn: &mut AnyConnection,
    id: &str,
    params: &super::connections::ConnParams,
) -> Result<()> {
    sqlx::query("UPDATE elicitations SET params = $2 WHERE id = $1 AND status = 'pending'")
        .bind(id)
        .bind(encode_params(params)?)
        .execute(conn)
        .await?;
    Ok(())
}

/// Moves every pending elicitation past its expiry to `expired`, returning those it moved (one
/// conditional UPDATE: a concurrent completion wins or loses cleanly).
pub async fn expire_pending_elicitations(conn: &mut AnyConnection) -> Result<Vec<Elicitation>> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "UPDATE elicitations SET status = 'expired', finished_at = $1 \
         WHERE status = 'pending' AND expires_at <= $1 RETURNING {COLUMNS}"
    ))
    .bind(now())
    .fetch_all(conn)
    .await?;
    Elicitation::decode_all(rows)
}

/// Moves a pending elicitation to a final status. Returns false if it was no longer pending.
pub async fn finish_elicitation(
    conn: &mut AnyConnection,
    id: &str,
    end: Ending<'_>,
) -> Result<bool> {
    let r = sqlx::query(
        "UPDATE elicitations SET status = $2, connection_id = $3, failure = $4, finished_at = $5 \
         WHERE id = $1 AND status = 'pending'",
    )
    .bind(id)
    .bind(end.status().as_str())
    .bind(end.connection_id())
    .bind(end.failure())
    .bind(now())
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

impl Db {
    /// Retention: deletes elicitations that finished (or expired) before `cutoff` (Unix
    /// seconds). Pending ones are never deleted here; they expire first.
    pub async fn delete_finished_elicitations_before(&self, cutoff: i64) -> Result<u64> {
        Ok(sqlx::query(
            "DELETE FROM elicitations WHERE status <> 'pending' AND COALESCE(finished_at, expires_at) < $1",
        )
        .bind(cutoff)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_with_an_unknown_status_is_an_error_naming_the_row() {
        let row = |status: &str| Row {
            id: "e1".into(),
            status: status.into(),
            owner: "user".into(),
            ..Row::default()
        };
        assert!(Elicitation::try_from(row("declined")).is_ok());
        let e = Elicitation::try_from(row("cancelled"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "elicitations row e1: unknown elicitation status \"cancelled\""
        );
    }

    #[test]
    fn parameters_round_trip_and_a_stored_non_object_is_an_error() {
        let p: crate::db::connections::ConnParams =
            [("tenant".to_owned(), "acme".to_owned())].into();
        let stored = encode_params(&p).unwrap();
        assert_eq!(decode_params(stored.as_deref()), Ok(p));
        assert_eq!(encode_params(&Default::default()).unwrap(), None);
        assert!(decode_params(Some("[1]")).is_err());
    }

    /// The reasons are API values: each stays the string it is documented as.
    #[test]
    fn a_failed_elicitation_names_its_reason_as_the_api_does() {
        let failed = |failure: Option<&str>| {
            Elicitation::try_from(Row {
                id: "e1".into(),
                status: "failed".into(),
                failure: failure.map(str::to_owned),
                owner: "user".into(),
                ..Row::default()
            })
            .unwrap()
            .failure_reason()
            .map(FailureReason::as_str)
        };
        assert_eq!(
            failed(Some("provider_misconfigured: the issuer differs")),
            Some("provider_misconfigured")
        );
        assert_eq!(
            failed(Some("provider_misconfigured")),
            Some("provider_error")
        );
        assert_eq!(
            failed(Some("token exchange failed")),
            Some("provider_error")
        );
        assert_eq!(failed(None), Some("provider_error"));
    }
}
