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

use crate::crypto::{
    KeyRing, connection_aad, dpop_key_aad, flow_verifier_aad, mcp_client_secret_aad,
};
use crate::db::Db;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::rotation::{FewSealed, RESEAL_CHUNK, ResealedRow, ResealedVerifier};

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

/// The rows (connections, pending redirects, upstream MCP clients, DPoP keys) holding at least
/// one value not sealed with the current key.
pub async fn count_pending(db: &Db, keys: &KeyRing) -> anyhow::Result<u64> {
    let prefix = format!("{}.", keys.current_id());
    let (c, f) = db.count_not_sealed_with(&prefix).await?;
    let mut few = 0;
    for t in FewSealed::ALL {
        few += db.few_sealed_to_reseal(t, &prefix).await?.len() as u64;
    }
    Ok(c + f + few)
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
    let mut run = Run {
        db,
        keys,
        batch: batch.clamp(1, 10_000) as i64,
        prefix: format!("{}.", keys.current_id()),
        report: &mut report,
        handled: 0,
        progress,
    };
    // Rows that changed under us are picked up by the next pass; a few passes settle it unless
    // the service still seals with another key (then nothing converges and we say so).
    for _pass in 0..5 {
        let before = run.report.rows_rotated;
        let conflicts_before = run.report.conflicts;
        run.connections().await?;
        run.flows().await?;
        for t in FewSealed::ALL {
            run.few_sealed(t).await?;
        }
        if run.report.conflicts == conflicts_before || run.report.rows_rotated == before {
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

/// One rotation: what its walks over the connections and the pending redirects share.
struct Run<'a> {
    db: &'a Db,
    keys: &'a KeyRing,
    batch: i64,
    /// What a value sealed with the current key starts with.
    prefix: String,
    report: &'a mut RotationReport,
    /// Rows looked at so far, for `progress`.
    handled: u64,
    progress: &'a (dyn Fn(u64) + Send + Sync),
}

impl Run<'_> {
    /// Counts one conditional write of a row holding `values` re-sealed values: rotated when it
    /// landed, a conflict when the row changed since it was read.
    fn count_write(&mut self, written: bool, values: u64) {
        if written {
            self.report.rows_rotated += 1;
            self.report.values_rotated += values;
        } else {
            self.report.conflicts += 1;
        }
    }

    async fn connections(&mut self) -> anyhow::Result<()> {
        let (db, keys) = (self.db, self.keys);
        let mut after = String::new();
        loop {
            let rows = db
                .connections_to_reseal(&self.prefix, &after, self.batch)
                .await
                .context("reading connections to rotate")?;
            if rows.is_empty() {
                return Ok(());
            }
            let mut updates = Vec::with_capacity(rows.len());
            for row in rows {
                let (id, at, rt) = (row.id, row.access_token, row.refresh_token);
                after.clone_from(&id);
                self.handled += 1;
                let new_at = reseal(
                    keys,
                    at.as_deref(),
                    &connection_aad(&id, "access_token"),
                    &format!("connections/{id}/access_token"),
                    &mut self.report.unreadable,
                );
                let new_rt = reseal(
                    keys,
                    rt.as_deref(),
                    &connection_aad(&id, "refresh_token"),
                    &format!("connections/{id}/refresh_token"),
                    &mut self.report.unreadable,
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
            for chunk in updates.chunks(RESEAL_CHUNK) {
                let done = update_chunk(db, chunk).await?;
                for u in chunk {
                    self.count_write(done.contains(&u.id), u.values);
                }
            }
            (self.progress)(self.handled);
        }
    }

    async fn flows(&mut self) -> anyhow::Result<()> {
        let (db, keys) = (self.db, self.keys);
        let mut after = String::new();
        loop {
            let rows = db
                .flows_to_reseal(&self.prefix, &after, self.batch)
                .await
                .context("reading pending redirects to rotate")?;
            if rows.is_empty() {
                return Ok(());
            }
            let mut resealed = Vec::new();
            for (state_hash, verifier) in &rows {
                after.clone_from(state_hash);
                self.handled += 1;
                if let Some(Resealed::New(new)) = reseal(
                    keys,
                    Some(verifier),
                    &flow_verifier_aad(state_hash),
                    "auth_flows/verifier",
                    &mut self.report.unreadable,
                ) {
                    resealed.push((state_hash, new, verifier));
                }
            }
            let writes: Vec<ResealedVerifier<'_>> = resealed
                .iter()
                .map(|(state_hash, new, old)| ResealedVerifier {
                    state_hash,
                    verifier: new,
                    old_verifier: old,
                })
                .collect();
            let written = db
                .reseal_flows(&writes)
                .await
                .context("committing a rotation batch")?;
            for w in written {
                self.count_write(w, 1);
            }
            (self.progress)(self.handled);
        }
    }
}

impl Run<'_> {
    /// A table of a few sealed values (upstream MCP client secrets, DPoP keys, organisations'
    /// app secrets): one read, then one conditional write a row.
    async fn few_sealed(&mut self, t: FewSealed) -> anyhow::Result<()> {
        let (db, keys) = (self.db, self.keys);
        let rows = db
            .few_sealed_to_reseal(t, &self.prefix)
            .await
            .with_context(|| format!("reading {} to rotate", t.table()))?;
        for row in rows {
            self.handled += 1;
            let (aad, what) = few_sealed_names(t, &row.key);
            if let Some(Resealed::New(new)) = reseal(
                keys,
                Some(&row.sealed),
                &aad,
                &what,
                &mut self.report.unreadable,
            ) {
                let written = db
                    .reseal_few_sealed(t, &row, &new)
                    .await
                    .context("committing a rotation batch")?;
                self.count_write(written, 1);
            }
        }
        (self.progress)(self.handled);
        Ok(())
    }
}

/// A `FewSealed` row's associated data (what its value was sealed with) and its name in
/// reports and logs (never its value), from its key columns in `FewSealedRow::key`'s order.
fn few_sealed_names(t: FewSealed, key: &[String]) -> (String, String) {
    let k = |i: usize| key.get(i).map_or("", String::as_str);
    match t {
        FewSealed::McpClientSecrets => (
            mcp_client_secret_aad(k(0), k(1)),
            format!("mcp_clients/{}/client_secret", k(0)),
        ),
        FewSealed::DpopKeys => (
            dpop_key_aad(k(0), k(1)),
            format!("dpop_keys/{}/private_key", k(0)),
        ),
        FewSealed::OrganizationAppSecrets => (
            crate::crypto::organization_app_aad(k(0), k(1), k(2)),
            format!("organization_apps/{}/{}/client_secret", k(1), k(2)),
        ),
    }
}

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
    let rows: Vec<ResealedRow<'_>> = chunk
        .iter()
        .map(|u| ResealedRow {
            id: &u.id,
            access_token: u.new_at.value(),
            refresh_token: u.new_rt.value(),
            old_access_token: &u.old_at,
            old_refresh_token: &u.old_rt,
        })
        .collect();
    db.reseal_connections(&rows)
        .await
        .context("writing a rotation batch")
}

/// Stored values sealed with keys the ring lacks, by key id. Empty is the only healthy answer:
/// the service refuses to start otherwise (`check_key_ring`), and `keys status` lists them.
pub async fn missing_keys(
    db: &Db,
    keys: &KeyRing,
) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    let known: Vec<&str> = keys.ids().collect();
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    for id in db.sealed_with_unknown_keys(&known).await? {
        *counts.entry(id).or_default() += 1;
    }
    Ok(counts)
}

/// At start-up: stops with an error naming the key ids when stored values are sealed with keys
/// that `encryption_keys` lacks (a restore with the wrong key file, a key removed too soon), so
/// the service never runs serving errors, or worse, for every user whose grant it cannot open.
pub async fn check_key_ring(db: &Db, keys: &KeyRing) -> anyhow::Result<()> {
    let missing = missing_keys(db, keys)
        .await
        .context("checking the key ring")?;
    if missing.is_empty() {
        return Ok(());
    }
    let total: u64 = missing.values().sum();
    let ids: Vec<String> = missing.keys().map(|id| format!("{id:?}")).collect();
    anyhow::bail!(
        "{total} stored value(s) are sealed with key id(s) {} that encryption_keys lacks; \
         add the missing key(s) to encryption_keys (from the key backup that goes with this \
         database) and start again. `mcp-connect keys status` lists them.",
        ids.join(", ")
    )
}

/// How many stored values each key id seals (for `keys status` and the end of a rotation).
pub async fn key_usage(db: &Db) -> anyhow::Result<Vec<(String, u64)>> {
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    let mut after = String::new();
    loop {
        let rows = db.sealed_connection_values(&after).await?;
        let Some(last) = rows.last() else { break };
        after.clone_from(&last.0);
        for (_, at, rt) in &rows {
            for v in [at, rt].into_iter().flatten() {
                let id = KeyRing::key_id_of(v).unwrap_or("(malformed)");
                *counts.entry(id.to_owned()).or_default() += 1;
            }
        }
    }
    for v in db.sealed_flow_verifiers().await? {
        let id = KeyRing::key_id_of(&v).unwrap_or("(malformed)");
        *counts.entry(id.to_owned()).or_default() += 1;
    }
    for v in db.sealed_mcp_client_secrets().await? {
        let id = KeyRing::key_id_of(&v).unwrap_or("(malformed)");
        *counts.entry(id.to_owned()).or_default() += 1;
    }
    for v in db
        .sealed_dpop_keys()
        .await?
        .into_iter()
        .chain(db.sealed_organization_app_secrets().await?)
    {
        let id = KeyRing::key_id_of(&v).unwrap_or("(malformed)");
        *counts.entry(id.to_owned()).or_default() += 1;
    }
    Ok(counts.into_iter().collect())
}
