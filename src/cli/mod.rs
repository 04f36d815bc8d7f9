//! The operator commands behind `mcp-connect connections|audit|keys ...`: they open the same
//! database with the same configuration as the service and run beside it (never instead of it).
//! Output goes to stdout (tables, or JSON with `--json`); progress and problems to stderr.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use tokio::sync::watch;

use crate::AppState;
use crate::api::connections::ConnectionView;
use crate::config::Config;
use crate::connect::elicitations::is_valid_id;
use crate::db::Db;
use crate::db::audit::{AuditAction, AuditEvent, AuditFilter, AuditRow};
use crate::db::connections::ConnectionFilter;
use crate::grants::rotation;
use crate::time::{readable, rfc3339};

mod import;
mod providers;

pub use import::{ImportOptions, connections_import};
pub use providers::{providers_list, providers_show};

/// The state the commands work with, and the sender that keeps its background parts alive.
pub struct Cli {
    pub state: AppState,
    _shutdown: watch::Sender<bool>,
}

impl Cli {
    /// Connects to the configured database (applying migrations, as the service would).
    pub async fn open(config: Config) -> anyhow::Result<Self> {
        let db = Db::connect(&config.database_url).await?;
        db.migrate(crate::db::Migrations::Deploy).await?;
        let (tx, rx) = watch::channel(false);
        Ok(Self {
            state: AppState::new(config, db, rx)?,
            _shutdown: tx,
        })
    }
}

/// Who the audit log names for a command run from a shell.
pub fn cli_actor() -> String {
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "operator".into());
    let user: String = user
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(64)
        .collect();
    format!("cli:{user}")
}

fn ts(t: Option<String>) -> String {
    t.map(|s| s.replace('T', " ").replace('Z', ""))
        .unwrap_or_else(|| "-".into())
}

pub async fn connections_list(
    cli: &Cli,
    filter: ConnectionFilter,
    limit: i64,
    as_json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let (rows, total) = cli
        .state
        .db
        .search_connections(&filter, limit.clamp(1, 10_000), 0)
        .await?;
    if as_json {
        let list: Vec<ConnectionView> = rows.iter().map(ConnectionView::from).collect();
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({"total": total, "connections": list}))?
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<24} {:<24} {:<12} {:<13} {:<20} SCOPES",
        "ID", "SUBJECT", "PROVIDER", "STATUS", "EXPIRES (UTC)"
    )?;
    for c in &rows {
        writeln!(
            out,
            "{:<24} {:<24} {:<12} {:<13} {:<20} {}",
            c.id,
            c.subject,
            c.provider,
            c.status.as_str(),
            ts(c.expires_at.map(rfc3339)),
            c.scopes.join(" ")
        )?;
    }
    writeln!(out, "({} of {total} shown)", rows.len())?;
    Ok(())
}

pub async fn connections_show(
    cli: &Cli,
    id: &str,
    as_json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let c = find(cli, id).await?;
    let history = cli.state.db.connection_history(&c.id).await?;
    if as_json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "connection": ConnectionView::from(&c),
                "sealed_with": c.key_ids(),
                "history": history,
            }))?
        )?;
        return Ok(());
    }
    let v = ConnectionView::from(&c);
    for (k, val) in [
        ("id", v.id.to_string()),
        ("subject", format!("{} (issuer {})", v.subject, c.issuer)),
        ("provider", v.provider.clone()),
        ("status", c.status.as_str().to_owned()),
        ("scopes", v.scopes.join(" ")),
        (
            "account",
            v.account_label.clone().unwrap_or_else(|| "-".into()),
        ),
        ("expires", ts(v.expires_at.clone())),
        (
            "refresh token",
            if v.has_refresh_token {
                "stored"
            } else {
                "none"
            }
            .into(),
        ),
        ("created", ts(Some(v.created_at.clone()))),
        ("last refresh", ts(v.last_refresh_at.clone())),
        (
            "last error",
            v.last_error.clone().unwrap_or_else(|| "-".into()),
        ),
        ("sealed with", c.key_ids().join(", ")),
    ] {
        writeln!(out, "{k:>14}: {val}")?;
    }
    writeln!(out, "\nhistory:")?;
    for r in history.iter().rev() {
        writeln!(out, "  {}", audit_line(r))?;
    }
    Ok(())
}

async fn find(cli: &Cli, id: &str) -> anyhow::Result<crate::db::connections::Connection> {
    if !is_valid_id(id) {
        bail!("{id:?} is not a connection id");
    }
    cli.state
        .db
        .get_connection(id)
        .await?
        .with_context(|| format!("no connection {id}"))
}

/// `mcp-connect connections revoke-organization`: every live connection organisation `org`
/// owns (at `provider`, when given), revoked one by one as `connections revoke` does.
pub async fn connections_revoke_organization(
    cli: &Cli,
    org: &str,
    provider: Option<&str>,
    actor: &str,
    reason: Option<&str>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let owned = cli
        .state
        .db
        .list_organization_connections(cli.state.identity.issuer(), org)
        .await?;
    let live: Vec<_> = owned
        .into_iter()
        .filter(|c| c.status != crate::db::connections::ConnectionStatus::Revoked)
        .filter(|c| provider.is_none_or(|p| c.provider == p))
        .collect();
    if live.is_empty() {
        writeln!(
            out,
            "organisation {org:?} owns no live connection{}; nothing changed",
            provider.map(|p| format!(" at {p}")).unwrap_or_default()
        )?;
        return Ok(());
    }
    for c in &live {
        writeln!(out, "{} ({}):", c.id, c.provider)?;
        connections_revoke(cli, &c.id, actor, reason, out).await?;
    }
    writeln!(
        out,
        "revoked {} connection(s) of organisation {org:?}",
        live.len()
    )?;
    Ok(())
}

pub async fn connections_revoke(
    cli: &Cli,
    id: &str,
    actor: &str,
    reason: Option<&str>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let c = find(cli, id).await?;
    if c.status == crate::db::connections::ConnectionStatus::Revoked {
        writeln!(out, "connection {id} was revoked already; nothing changed")?;
        return Ok(());
    }
    let report = cli
        .state
        .grants
        .revoke_connection(&c, actor, None)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    let detail = format!(
        "refresh_token={} access_token={}{}",
        report.refresh_token,
        report.access_token,
        reason.map(|r| format!(" reason={r}")).unwrap_or_default()
    );
    cli.state
        .db
        .audit(AuditEvent {
            actor: Some(actor),
            detail: Some(&detail),
            ..AuditEvent::connection(AuditAction::AdminConnectionRevoked, &c)
        })
        .await;
    writeln!(out, "{}", report.message)?;
    writeln!(
        out,
        "refresh token: {}, access token: {}",
        report.refresh_token, report.access_token
    )?;
    Ok(())
}

pub fn audit_line(r: &AuditRow) -> String {
    let mut s = format!("{} {:<38}", readable(r.at), r.event);
    for (k, v) in [
        ("actor", &r.actor),
        ("subject", &r.subject),
        ("provider", &r.provider),
        ("client", &r.client_id),
        ("connection", &r.connection_id),
        ("elicitation", &r.elicitation_id),
        ("request", &r.request_id),
        ("detail", &r.detail),
    ] {
        if let Some(v) = v {
            s.push_str(&format!(" {k}={v}"));
        }
    }
    s
}

/// Prints the last `lines` events matching `filter`, then (with `follow`) new ones as they come,
/// until `stop` resolves.
pub async fn audit_tail(
    cli: &Cli,
    mut filter: AuditFilter,
    lines: i64,
    follow: bool,
    as_json: bool,
    out: &mut (impl Write + Send),
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let print = |r: &AuditRow, out: &mut (dyn Write + Send)| -> anyhow::Result<()> {
        if as_json {
            writeln!(out, "{}", serde_json::to_string(r)?)?;
        } else {
            writeln!(out, "{}", audit_line(r))?;
        }
        Ok(())
    };
    let mut rows = cli
        .state
        .db
        .search_audit(&filter, lines.clamp(1, 10_000), 0)
        .await?;
    rows.reverse();
    let mut last = rows.last().map(|r| r.id);
    for r in &rows {
        print(r, out)?;
    }
    out.flush()?;
    if !follow {
        return Ok(());
    }
    if last.is_none() {
        // Start after whatever exists now, even if it did not match.
        last = cli
            .state
            .db
            .search_audit(&AuditFilter::default(), 1, 0)
            .await?
            .first()
            .map(|r| r.id);
    }
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        filter.after_id = last.or(Some(0));
        let mut new = cli.state.db.search_audit(&filter, 1000, 0).await?;
        new.reverse();
        for r in &new {
            print(r, out)?;
            last = Some(r.id);
        }
        out.flush()?;
    }
}

/// `keys rotate`: re-seals everything under the first key, with a progress bar on a terminal.
pub async fn keys_rotate(
    cli: &Cli,
    batch: usize,
    actor: &str,
    out: &mut impl Write,
) -> anyhow::Result<rotation::RotationReport> {
    let keys = &cli.state.config.keys;
    let db = &cli.state.db;
    let pending = rotation::count_pending(db, keys).await?;
    writeln!(
        out,
        "sealing under key {:?}: {pending} row(s) hold values sealed with other keys",
        keys.current_id()
    )?;
    let bar = indicatif::ProgressBar::new(pending);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} rows ({per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let progress = {
        let bar = bar.clone();
        move |n: u64| {
            if n > bar.length().unwrap_or(0) {
                bar.set_length(n);
            }
            bar.set_position(n)
        }
    };
    let report = rotation::rotate(db, keys, batch, actor, &progress).await?;
    bar.finish_and_clear();
    writeln!(
        out,
        "re-sealed {} value(s) in {} row(s) under key {:?}; {} row(s) changed meanwhile and were redone",
        report.values_rotated, report.rows_rotated, report.key_id, report.conflicts
    )?;
    for u in &report.unreadable {
        writeln!(out, "cannot open (left as it is): {u}")?;
    }
    let usage = rotation::key_usage(db).await?;
    for (id, n) in &usage {
        writeln!(out, "key {id:?} seals {n} stored value(s)")?;
    }
    if report.remaining == 0 && report.unreadable.is_empty() {
        let others: Vec<&str> = usage
            .iter()
            .map(|(id, _)| id.as_str())
            .filter(|id| *id != report.key_id)
            .collect();
        if others.is_empty() {
            writeln!(
                out,
                "done: every stored value is sealed with {:?}; keys other than it can now be removed from encryption_keys",
                report.key_id
            )?;
        }
    } else {
        writeln!(
            out,
            "{} value(s) are still sealed with other keys. If the service seals with another key, put {:?} first in its encryption_keys, restart it, and run this again.",
            report.remaining, report.key_id
        )?;
    }
    Ok(report)
}

/// `keys status`: which key seals how many stored values.
pub async fn keys_status(cli: &Cli, out: &mut impl Write) -> anyhow::Result<()> {
    let keys = &cli.state.config.keys;
    writeln!(
        out,
        "current key (seals new values): {:?}",
        keys.current_id()
    )?;
    for (id, n) in rotation::key_usage(&cli.state.db).await? {
        writeln!(out, "key {id:?} seals {n} stored value(s)")?;
    }
    let missing = rotation::missing_keys(&cli.state.db, keys).await?;
    for (id, n) in &missing {
        writeln!(
            out,
            "MISSING key {id:?}: {n} stored value(s) are sealed with it and encryption_keys lacks it; they cannot be read"
        )?;
    }
    if !missing.is_empty() {
        anyhow::bail!(
            "encryption_keys lacks {} key(s) the database needs",
            missing.len()
        );
    }
    Ok(())
}
