//! Key rotation: re-seals every stored sealed value under the first key of the ring, while the
//! service keeps serving.
//!
//! Safe to interrupt and to run again: what still needs doing is read from the data itself (any
//! value whose key id is not the current one), batch by batch. Each value is replaced with a
//! conditional UPDATE that compares the old ciphertext, so a refresh that stored new tokens in
//! the meantime is never overwritten (its values are already sealed under the service's current
//! key; the row is simply looked at again on the next pass). `token_version` is deliberately not
//! bumped: re-sealing does not change the tokens, and bumping it would make a concurrent refresh
//! lose its fencing check.

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::Row;

use crate::crypto::{KeyRing, connection_aad, flow_verifier_aad};
use crate::db::Db;
use crate::db::audit::{AuditAction, AuditEvent};

/// What one rotation did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct RotationReport {
    /// The key everything is now sealed with.
    pub key_id: String,
    /// Rows whose values were re-sealed (connections and pending redirects).
    pub rows_rotated: u64,
    /// Individual sealed values re-sealed.
    pub values_rotated: u64,
    /// Rows that changed under us (a concurrent refresh) and were looked at again.
    pub conflicts: u64,
    /// Values that no key in the ring opens (ids only: never the value).
    pub unreadable: Vec<String>,
    /// Values still not under the current key when the run ended.
    pub remaining: u64,
}

/// The rows (connections, pending redirects) holding at least one value not sealed with the
/// current key.
pub async fn count_pending(db: &Db, keys: &KeyRing) -> anyhow::Result<u64> {
    let prefix = format!("{}.", keys.current_id());
    let (c,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM connections WHERE (access_token IS NOT NULL AND substr(access_token, 1, length($1)) <> $1) \
         OR (refresh_token IS NOT NULL AND substr(refresh_token, 1, length($1)) <> $1)",
    )
    .bind(&prefix)
    .fetch_one(&db.pool)
    .await?;
    let (f,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM auth_flows WHERE verifier IS NOT NULL AND substr(verifier, 1, length($1)) <> $1",
    )
    .bind(&prefix)
    .fetch_one(&db.pool)
    .await?;
    Ok((c + f) as u64)
}

/// A value re-sealed under the current key, or the same value if it already is.
enum Resealed {
    Same(Option<String>),
    New(String),
}

fn reseal(
    keys: &KeyRing,
    sealed: Option<&str>,
    aad: &str,
    what: &str,
    unreadable: &mut Vec<String>,
) -> Option<Resealed> {
    let Some(s) = sealed else {
        return Some(Resealed::Same(None));
    };
    if KeyRing::key_id_of(s) == Some(keys.current_id()) {
        return Some(Resealed::Same(Some(s.to_owned())));
    }
    match keys.open(s, aad) {
        Ok(plain) => {
            let plain = secrecy::SecretSlice::from(plain);
            match keys.seal(plain.expose_secret(), aad) {
                Ok(sealed) => Some(Resealed::New(sealed)),
                Err(e) => {
                    tracing::warn!(value = what, error = %e, "a value cannot be re-sealed; left as it is");
                    unreadable.push(what.to_owned());
                    None
                }
            }
        }
        Err(e) => {
            tracing::warn!(value = what, error = %e, "a stored value cannot be opened; left as it is");
            unreadable.push(what.to_owned());
            None
        }
    }
}

impl Resealed {
    fn value(&self) -> Option<&str> {
        match self {
            Self::Same(v) => v.as_deref(),
            Self::New(v) => Some(v),
        }
    }
    fn is_new(&self) -> bool {
        matches!(self, Self::New(_))
    }
}

/// Re-seals everything under `keys.current_id()`, `batch` rows per transaction. `progress` is
/// called with the number of rows handled so far. Records a `keys.rotated` audit event.
pub async fn rotate(
    db: &Db,
    keys: &KeyRing,
    batch: usize,
    actor: &str,
    progress: &(dyn Fn(u64) + Send + Sync),
) -> anyhow::Result<RotationReport> {
    let mut report = RotationReport {
        key_id: keys.current_id().to_owned(),
        ..Default::default()
    };
    let batch = batch.clamp(1, 10_000) as i64;
    let mut handled = 0u64;
    // Rows that changed under us are picked up by the next pass; a few passes settle it unless
    // the service still seals with another key (then nothing converges and we say so).
    for _pass in 0..5 {
        let before = report.rows_rotated;
        let conflicts_before = report.conflicts;
        rotate_connections(db, keys, batch, &mut report, &mut handled, progress).await?;
        rotate_flows(db, keys, batch, &mut report, &mut handled, progress).await?;
        if report.conflicts == conflicts_before || report.rows_rotated == before {
            break;
        }
    }
    report.remaining = count_pending(db, keys).await?;
    let detail = format!(
        "key={} rows={} values={} conflicts={} unreadable={} remaining={}",
        report.key_id,
        report.rows_rotated,
        report.values_rotated,
        report.conflicts,
        report.unreadable.len(),
        report.remaining
    );
    db.audit(AuditEvent {
        actor: Some(actor),
        detail: Some(&detail),
        ..AuditEvent::new(AuditAction::KeysRotated)
    })
    .await;
    Ok(report)
}

async fn rotate_connections(
    db: &Db,
    keys: &KeyRing,
    batch: i64,
    report: &mut RotationReport,
    handled: &mut u64,
    progress: &(dyn Fn(u64) + Send + Sync),
) -> anyhow::Result<()> {
    let prefix = format!("{}.", keys.current_id());
    let mut after = String::new();
    loop {
        let rows = sqlx::query(
            "SELECT id, access_token, refresh_token FROM connections WHERE id > $2 AND \
             ((access_token IS NOT NULL AND substr(access_token, 1, length($1)) <> $1) \
             OR (refresh_token IS NOT NULL AND substr(refresh_token, 1, length($1)) <> $1)) \
             ORDER BY id LIMIT $3",
        )
        .bind(&prefix)
        .bind(&after)
        .bind(batch)
        .fetch_all(&db.pool)
        .await
        .context("reading connections to rotate")?;
        if rows.is_empty() {
            return Ok(());
        }
        let mut updates = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: String = row.try_get("id")?;
            let at: Option<String> = row.try_get("access_token")?;
            let rt: Option<String> = row.try_get("refresh_token")?;
            after.clone_from(&id);
            *handled += 1;
            let new_at = reseal(
                keys,
                at.as_deref(),
                &connection_aad(&id, "access_token"),
                &format!("connections/{id}/access_token"),
                &mut report.unreadable,
            );
            let new_rt = reseal(
                keys,
                rt.as_deref(),
                &connection_aad(&id, "refresh_token"),
                &format!("connections/{id}/refresh_token"),
                &mut report.unreadable,
            );
            let (Some(new_at), Some(new_rt)) = (new_at, new_rt) else {
                continue;
            };
            let values = u64::from(new_at.is_new()) + u64::from(new_rt.is_new());
            if values > 0 {
                updates.push(Update {
                    id,
                    new_at,
                    new_rt,
                    old_at: at.unwrap_or_default(),
                    old_rt: rt.unwrap_or_default(),
                    values,
                });
            }
        }
        for chunk in updates.chunks(UPDATE_CHUNK) {
            let done = update_chunk(db, chunk).await?;
            for u in chunk {
                if done.contains(&u.id) {
                    report.rows_rotated += 1;
                    report.values_rotated += u.values;
                } else {
                    report.conflicts += 1;
                }
            }
        }
        progress(*handled);
    }
}

/// Rows per UPDATE statement (5 parameters each, well under every engine's limit).
const UPDATE_CHUNK: usize = 100;

struct Update {
    id: String,
    new_at: Resealed,
    new_rt: Resealed,
    old_at: String,
    old_rt: String,
    values: u64,
}

/// Writes many re-sealed rows in one statement, each only if its ciphertexts are still the ones
/// read (a refresh in between wins). Returns the ids that were written.
async fn update_chunk(
    db: &Db,
    chunk: &[Update],
) -> anyhow::Result<std::collections::HashSet<String>> {
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
            .bind(&u.id)
            .bind(u.new_at.value())
            .bind(u.new_rt.value())
            .bind(&u.old_at)
            .bind(&u.old_rt);
    }
    let done = q
        .fetch_all(&db.pool)
        .await
        .context("writing a rotation batch")?;
    Ok(done.into_iter().map(|(id,)| id).collect())
}

async fn rotate_flows(
    db: &Db,
    keys: &KeyRing,
    batch: i64,
    report: &mut RotationReport,
    handled: &mut u64,
    progress: &(dyn Fn(u64) + Send + Sync),
) -> anyhow::Result<()> {
    let prefix = format!("{}.", keys.current_id());
    let mut after = String::new();
    loop {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT state_hash, verifier FROM auth_flows WHERE state_hash > $2 AND verifier IS NOT NULL \
             AND substr(verifier, 1, length($1)) <> $1 ORDER BY state_hash LIMIT $3",
        )
        .bind(&prefix)
        .bind(&after)
        .bind(batch)
        .fetch_all(&db.pool)
        .await
        .context("reading pending redirects to rotate")?;
        if rows.is_empty() {
            return Ok(());
        }
        let mut tx = db.pool.begin().await?;
        for (state_hash, verifier) in &rows {
            after.clone_from(state_hash);
            *handled += 1;
            let Some(Resealed::New(new)) = reseal(
                keys,
                Some(verifier),
                &flow_verifier_aad(state_hash),
                "auth_flows/verifier",
                &mut report.unreadable,
            ) else {
                continue;
            };
            let r = sqlx::query(
                "UPDATE auth_flows SET verifier = $2 WHERE state_hash = $1 AND verifier = $3",
            )
            .bind(state_hash)
            .bind(&new)
            .bind(verifier)
            .execute(&mut *tx)
            .await?;
            if r.rows_affected() == 1 {
                report.rows_rotated += 1;
                report.values_rotated += 1;
            } else {
                report.conflicts += 1;
            }
        }
        tx.commit().await.context("committing a rotation batch")?;
        progress(*handled);
    }
}

/// How many stored values each key id seals (for `keys status` and the end of a rotation).
pub async fn key_usage(db: &Db) -> anyhow::Result<Vec<(String, u64)>> {
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    let mut after = String::new();
    loop {
        let rows: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT id, access_token, refresh_token FROM connections WHERE id > $1 ORDER BY id LIMIT 1000",
        )
        .bind(&after)
        .fetch_all(&db.pool)
        .await?;
        let Some(last) = rows.last() else { break };
        after.clone_from(&last.0);
        for (_, at, rt) in &rows {
            for v in [at, rt].into_iter().flatten() {
                let id = KeyRing::key_id_of(v).unwrap_or("(malformed)");
                *counts.entry(id.to_owned()).or_default() += 1;
            }
        }
    }
    let flows: Vec<(String,)> =
        sqlx::query_as("SELECT verifier FROM auth_flows WHERE verifier IS NOT NULL")
            .fetch_all(&db.pool)
            .await?;
    for (v,) in &flows {
        let id = KeyRing::key_id_of(v).unwrap_or("(malformed)");
        *counts.entry(id.to_owned()).or_default() += 1;
    }
    Ok(counts.into_iter().collect())
}
