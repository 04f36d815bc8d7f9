//! Pending provider authorizations (a signed-in user went to a provider from the consent page).
//! Keyed by the hash of the `state`; claimed exactly once, and only after every check passed.
//! Sign-ins at the identity issuer are not stored here: before sign-in nothing is written (their
//! state lives in the sealed pre-sign-in cookie, `web::presignin`).

use sqlx::FromRow;

use super::{Db, Result, now};
use crate::names::named_enum;

named_enum! {
    /// The `kind` column: only `provider` rows are written (rows of kind `login` were written by
    /// earlier versions; they are never read and expire like the others).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum FlowKind ("auth flow kind") {
        /// A signed-in user sent to a provider from the consent page.
        Provider,
        /// A sign-in at the identity issuer (earlier versions only).
        Login,
    }
}

const PROVIDER: &str = FlowKind::Provider.as_str();

#[derive(Debug, Clone, FromRow)]
pub struct Flow {
    pub state_hash: String,
    #[sqlx(try_from = "String")]
    pub kind: FlowKind,
    pub binding_hash: String,
    pub elicitation_id: Option<String>,
    pub provider: Option<String>,
    pub return_to: Option<String>,
    pub nonce: Option<String>,
    /// Sealed PKCE verifier.
    pub verifier: Option<String>,
    pub expires_at: i64,
    /// Upstream MCP servers: the authorization server the redirect went to.
    pub authorization_server: Option<String>,
}

impl TryFrom<String> for FlowKind {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

#[derive(FromRow)]
struct FlowRow {
    #[sqlx(flatten)]
    flow: Flow,
    used_at: Option<i64>,
}

/// Pending provider redirects kept per browser session: starting one more removes the oldest
/// unused one beyond this (its tab's callback then finds no state), so posting the consent form
/// over and over cannot grow the table. Sessions are bounded per user too
/// (`sessions::MAX_SESSIONS_PER_USER`).
pub const MAX_PENDING_FLOWS_PER_BROWSER: i64 = 10;

pub struct NewFlow<'a> {
    pub state_hash: &'a str,
    pub binding_hash: &'a str,
    pub elicitation_id: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub verifier: Option<&'a str>,
    pub ttl_seconds: i64,
    /// Upstream MCP servers: the authorization server the browser is sent to.
    pub authorization_server: Option<&'a str>,
}

impl Db {
    /// Stores a pending provider redirect and, when the user changed the connection's
    /// parameters on the consent page, the elicitation's new parameters with it: one short-lived
    /// commit (one statement with `Db::no_flush_from`, or with new parameters a transaction from
    /// `Db::begin_ephemeral`), so the hop that sends the browser to the provider commits once.
    pub async fn insert_flow(
        &self,
        f: &NewFlow<'_>,
        new_params: Option<&super::connections::ConnParams>,
    ) -> Result<()> {
        const INSERT: &str = "INSERT INTO auth_flows (state_hash, kind, binding_hash, elicitation_id, provider, return_to, nonce, verifier, created_at, expires_at, authorization_server)";
        const VALUES: &str = "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11";
        let now = now();
        let params = new_params.zip(f.elicitation_id);
        // The usual case, nothing else to write: one statement, not waiting for the disk.
        let sql = match (params, self.no_flush_from()) {
            (None, Some(from)) => format!("{INSERT} SELECT {VALUES} FROM {from}"),
            _ => format!("{INSERT} VALUES ({VALUES})"),
        };
        let insert = sqlx::query(&sql)
            .bind(f.state_hash)
            .bind(PROVIDER)
            .bind(f.binding_hash)
            .bind(f.elicitation_id)
            .bind(f.provider)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(f.verifier)
            .bind(now)
            .bind(now + f.ttl_seconds)
            .bind(f.authorization_server);
        match params {
            None => {
                insert.execute(&self.pool).await?;
            }
            Some((params, id)) => {
                let mut tx = self.begin_ephemeral().await?;
                super::elicitations::set_elicitation_params(&mut tx, id, params).await?;
                insert.execute(&mut *tx).await?;
                tx.commit().await?;
            }
        }
        self.keep_newest_flows(f.binding_hash, f.state_hash).await
    }

    /// Deletes the unused redirects of one browser binding beyond the newest
    /// `MAX_PENDING_FLOWS_PER_BROWSER`, never `just_made` (times are whole seconds: a tie must
    /// not remove the redirect the browser is being sent on); on Postgres without waiting for
    /// the disk (losing it in a crash leaves rows that expire anyway).
    async fn keep_newest_flows(&self, binding_hash: &str, just_made: &str) -> Result<()> {
        let using = self
            .no_flush_from()
            .map(|f| format!(" USING {f}"))
            .unwrap_or_default();
        let sql = format!(
            "DELETE FROM auth_flows{using} WHERE binding_hash = $1 AND used_at IS NULL AND state_hash <> $2 \
             AND state_hash NOT IN (SELECT state_hash FROM auth_flows WHERE binding_hash = $1 \
             AND used_at IS NULL AND state_hash <> $2 ORDER BY created_at DESC, state_hash LIMIT $3)"
        );
        sqlx::query(&sql)
            .bind(binding_hash)
            .bind(just_made)
            .bind(MAX_PENDING_FLOWS_PER_BROWSER - 1)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The flow a state names, and whether it was used already. Reads only: presenting a state
    /// changes nothing until `claim_flow`.
    pub async fn find_flow(&self, state_hash: &str) -> Result<Option<(Flow, bool)>> {
        let row: Option<FlowRow> = sqlx::query_as(
            "SELECT state_hash, kind, binding_hash, elicitation_id, provider, return_to, nonce, verifier, expires_at, authorization_server, used_at \
             FROM auth_flows WHERE state_hash = $1 AND kind = $2",
        )
        .bind(state_hash)
        .bind(PROVIDER)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|FlowRow { flow, used_at }| (flow, used_at.is_some())))
    }

    /// Marks the flow used and wipes its verifier, in one conditional UPDATE: of two concurrent
    /// callbacks with the same state, exactly one gets `true`.
    ///
    /// This is the one write of the provider callback that commits on its own, before the code
    /// exchange: every replica must see the state spent before the code is redeemed, because a
    /// code presented twice makes the provider refuse the second and, often, revoke the tokens
    /// the first one got (RFC 6749 §4.1.2). It is short-lived data (`Db::no_flush_from`): the
    /// grant's own synchronous commit makes it durable too.
    pub async fn claim_flow(&self, state_hash: &str) -> Result<bool> {
        let from = self
            .no_flush_from()
            .map(|f| format!("FROM {f} "))
            .unwrap_or_default();
        let sql = format!(
            "UPDATE auth_flows SET used_at = $3, verifier = NULL {from}\
             WHERE state_hash = $1 AND kind = $2 AND used_at IS NULL"
        );
        Ok(sqlx::query(&sql)
            .bind(state_hash)
            .bind(PROVIDER)
            .bind(now())
            .execute(&self.pool)
            .await?
            .rows_affected()
            == 1)
    }
}
