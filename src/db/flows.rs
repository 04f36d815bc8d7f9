//! Pending browser redirects: a sign-in at the identity issuer or an authorization at a
//! provider. Keyed by the hash of the `state`; consumed exactly once.

use sqlx::FromRow;

use super::{Db, now};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowKind {
    Login,
    Provider,
}

impl FlowKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Login => "login",
            Self::Provider => "provider",
        }
    }
}

#[derive(Debug, Clone, FromRow)]
pub struct Flow {
    pub state_hash: String,
    pub kind: String,
    pub binding_hash: String,
    pub elicitation_id: Option<String>,
    pub provider: Option<String>,
    pub return_to: Option<String>,
    pub nonce: Option<String>,
    /// Sealed PKCE verifier.
    pub verifier: Option<String>,
    pub expires_at: i64,
}

#[derive(FromRow)]
struct FlowRow {
    #[sqlx(flatten)]
    flow: Flow,
    used_at: Option<i64>,
}

pub struct NewFlow<'a> {
    pub state_hash: &'a str,
    pub kind: FlowKind,
    pub binding_hash: &'a str,
    pub elicitation_id: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub return_to: Option<&'a str>,
    pub nonce: Option<&'a str>,
    pub verifier: Option<&'a str>,
    pub ttl_seconds: i64,
}

/// The outcome of presenting a state.
pub enum Consumed {
    Fresh(Flow),
    /// The state was valid once and has been used already.
    Replayed(Flow),
    Unknown,
}

impl Db {
    pub async fn insert_flow(&self, f: &NewFlow<'_>) -> Result<(), sqlx::Error> {
        let now = now();
        sqlx::query(
            "INSERT INTO auth_flows (state_hash, kind, binding_hash, elicitation_id, provider, return_to, nonce, verifier, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(f.state_hash)
        .bind(f.kind.as_str())
        .bind(f.binding_hash)
        .bind(f.elicitation_id)
        .bind(f.provider)
        .bind(f.return_to)
        .bind(f.nonce)
        .bind(f.verifier)
        .bind(now)
        .bind(now + f.ttl_seconds)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Marks the flow used and returns it. The claim is one conditional UPDATE that also wipes
    /// the verifier: of two concurrent callbacks with the same state, exactly one claims it. The
    /// row is read first, so a consume is one write (one commit, on Postgres one disk flush)
    /// rather than a claim and a separate wipe.
    pub async fn consume_flow(
        &self,
        state_hash: &str,
        kind: FlowKind,
    ) -> Result<Consumed, sqlx::Error> {
        let row: Option<FlowRow> = sqlx::query_as(
            "SELECT state_hash, kind, binding_hash, elicitation_id, provider, return_to, nonce, verifier, expires_at, used_at \
             FROM auth_flows WHERE state_hash = $1 AND kind = $2",
        )
        .bind(state_hash)
        .bind(kind.as_str())
        .fetch_optional(&self.pool)
        .await?;
        let Some(FlowRow { mut flow, used_at }) = row else {
            return Ok(Consumed::Unknown);
        };
        let claimed = used_at.is_none()
            && sqlx::query(
                "UPDATE auth_flows SET used_at = $3, verifier = NULL \
                 WHERE state_hash = $1 AND kind = $2 AND used_at IS NULL",
            )
            .bind(state_hash)
            .bind(kind.as_str())
            .bind(now())
            .execute(&self.pool)
            .await?
            .rows_affected()
                == 1;
        if claimed {
            Ok(Consumed::Fresh(flow))
        } else {
            flow.verifier = None;
            Ok(Consumed::Replayed(flow))
        }
    }
}
