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

/// The state the commands work with, and the sender that keeps its background parts alive.
pub struct Cli {
    pub state: AppState,
    _shutdown: watch::Sender<bool>,
}

impl Cli {
    /// Connects to the configured database (applying migrations, as the service would).
    pub async fn open(config: Config) -> anyhow::Result<Self> {
        let db = Db::connect(&config.database_url).await?;
        db.migrate().await?;
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
        ("id", v.id.clone()),
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

/// `providers show` for a provider whose users type a key (or a username and password): what
/// matters there is the header and the validation call, not OAuth endpoints.
fn credential_provider_show(
    name: &str,
    c: &crate::providers::credential::CredentialSettings,
    as_json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use crate::config::AuthKind;
    let presented = match c.kind {
        AuthKind::Basic => "Authorization: Basic <username:password>".to_owned(),
        _ => format!("{}: {}<key>", c.header, c.prefix),
    };
    let validation = c.validation_url.as_ref().map_or_else(
        || "none: the credential is stored as typed".to_owned(),
        |u| format!("GET {u} with it before storing (2xx accepts, 401/403 refuses)"),
    );
    let facts = [
        (
            "Configured as",
            format!("[providers.{name}], auth = {:?}", c.kind.as_str()),
        ),
        (
            "Connect",
            "the user types it on the connect page; no redirect URI, no OAuth app".to_owned(),
        ),
        ("Sent to the API as", presented),
        ("Validation", validation),
        (
            "Hint shown under the input",
            c.hint.clone().unwrap_or_else(|| "-".to_owned()),
        ),
    ];
    if as_json {
        let obj: serde_json::Map<String, serde_json::Value> = facts
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&obj)?)?;
        return Ok(());
    }
    writeln!(out, "{name}")?;
    for (k, v) in &facts {
        writeln!(out, "  {:<32} {v}", format!("{k}:"))?;
    }
    Ok(())
}

/// `mcp-connect providers list`: the catalog, and the configured providers with the redirect URI
/// each must register. Needs no database; without a config, the redirect URIs are templates.
pub fn providers_list(
    config: Option<&Config>,
    as_json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use crate::config::catalog;
    let public = config.map(|c| c.public_url.as_str().to_owned());
    // (name, kind, redirect URI to register: none for providers whose users type a key).
    let configured: Vec<(String, String, Option<String>)> = config
        .map(|c| {
            c.providers
                .iter()
                .map(|(name, p)| {
                    let typed = p.auth.unwrap_or_default() != crate::config::AuthKind::Oauth2;
                    let kind = match (&p.kind, typed) {
                        (_, true) => format!("{} (typed)", p.auth.unwrap_or_default().as_str()),
                        (Some(k), false) => k.as_str().to_owned(),
                        (None, false) => "-".to_owned(),
                    };
                    let redirect = (!typed).then(|| c.url(&format!("/oauth/{name}/callback")));
                    (name.clone(), kind, redirect)
                })
                .collect()
        })
        .unwrap_or_default();
    if as_json {
        let entries: Vec<_> = catalog::all()
            .iter()
            .map(|e| {
                json!({
                    "kind": e.name,
                    "display_name": e.display_name,
                    "refresh": e.refresh.behaviour.as_str(),
                    "revocation": crate::providers::docs::revocation_text(e),
                    "params": e.params.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
                    "last_checked": e.last_checked,
                })
            })
            .collect();
        let configured: Vec<_> = configured
            .iter()
            .map(|(n, k, r)| json!({"name": n, "kind": k, "redirect_uri": r}))
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({"configured": configured, "catalog": entries}))?
        )?;
        return Ok(());
    }
    if config.is_some() {
        writeln!(out, "Configured providers:")?;
        writeln!(
            out,
            "{:<20} {:<20} REDIRECT URI TO REGISTER",
            "NAME", "KIND"
        )?;
        for (n, k, r) in &configured {
            let r = r
                .as_deref()
                .unwrap_or("- (none: the user types a key on the connect page)");
            writeln!(out, "{n:<20} {k:<20} {r}")?;
        }
        writeln!(out)?;
    }
    writeln!(out, "Catalog ({} providers):", catalog::all().len())?;
    writeln!(
        out,
        "{:<20} {:<30} {:<9} {:<14} {:<12} LAST CHECKED",
        "KIND", "PROVIDER", "REFRESH", "REVOCATION", "PARAMS"
    )?;
    for e in catalog::all() {
        let rev = match e.revocation.method {
            catalog::RevocationMethod::Rfc7009 => "rfc7009",
            catalog::RevocationMethod::Custom => "custom",
            catalog::RevocationMethod::Unsupported => "unsupported",
        };
        let params: Vec<&str> = e.params.iter().map(|p| p.name.as_str()).collect();
        writeln!(
            out,
            "{:<20} {:<30} {:<9} {:<14} {:<12} {}",
            e.name,
            e.display_name,
            e.refresh.behaviour.as_str(),
            rev,
            if params.is_empty() {
                "-".to_owned()
            } else {
                params.join(",")
            },
            e.last_checked
        )?;
    }
    if public.is_none() {
        writeln!(
            out,
            "\n(no --config: redirect URIs are <public_url>/oauth/<name>/callback; `providers show NAME` explains one)"
        )?;
    }
    Ok(())
}

/// `mcp-connect providers show NAME`: a configured provider (its effective endpoints after
/// overrides, its quirks, the exact redirect URI to register), or a catalog entry.
pub async fn providers_show(
    config: Option<&Config>,
    name: &str,
    as_json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use crate::config::catalog;
    use crate::providers::{Provider, docs};
    let configured = config.and_then(|c| c.providers.get(name).map(|p| (c, p)));
    let (entry, redirect, provider) = match configured {
        Some((c, pc)) => {
            let p = Provider::from_config(name, pc);
            (p.entry, c.url(&format!("/oauth/{name}/callback")), Some(p))
        }
        None => {
            let Some(e) = catalog::lookup(name) else {
                bail!(
                    "no configured provider and no catalog kind named {name:?}; `mcp-connect providers list` shows them"
                );
            };
            let base = config
                .map(|c| c.public_url.as_str().to_owned())
                .unwrap_or_else(|| "<public_url>".into());
            (e, docs::redirect_uri(&base, name), None)
        }
    };
    if let Some(c) = provider.as_ref().and_then(|p| p.credential.as_ref()) {
        return credential_provider_show(name, c, as_json, out);
    }
    let mut facts = docs::facts(entry, &redirect);
    if let Some(p) = &provider {
        let policy = config
            .map(|c| c.outbound.clone())
            .unwrap_or_else(|| crate::config::ssrf::Policy::new(Vec::new()));
        match p.endpoints(&crate::outbound::http::build(policy)?).await {
            Ok(ep) => {
                let overridden = if p.is_overridden() {
                    " (overridden)"
                } else {
                    ""
                };
                facts.retain(|f| {
                    !matches!(
                        f.label,
                        "Authorization endpoint"
                            | "Token endpoint"
                            | "Refresh endpoint"
                            | "Userinfo endpoint"
                    )
                });
                let mut at = 2;
                for (label, v) in [
                    ("Authorization endpoint", Some(ep.authorization_url.clone())),
                    ("Token endpoint", Some(ep.token_url.clone())),
                    ("Refresh endpoint", ep.refresh_url.clone()),
                    ("Revocation endpoint", ep.revocation_url.clone()),
                    ("Userinfo endpoint", ep.userinfo_url.clone()),
                ] {
                    if let Some(v) = v {
                        facts.insert(
                            at,
                            docs::Fact {
                                label,
                                value: format!("{v}{overridden}"),
                            },
                        );
                        at += 1;
                    }
                }
                // Facts name the catalog's URLs: say the ones actually used.
                for (cat, now) in [
                    (&entry.revocation.url, &ep.revocation_url),
                    (&entry.endpoints.refresh_url, &ep.refresh_url),
                ] {
                    if let Some(cat) = cat {
                        let used = now.clone().unwrap_or_else(|| "(not called)".into());
                        for f in facts.iter_mut() {
                            f.value = f.value.replace(cat.as_str(), &used);
                        }
                    }
                }
                for (f, u) in entry.metadata.fetch.iter().zip(&ep.metadata_urls) {
                    if u.is_none() {
                        facts.push(docs::Fact {
                            label: "Not called",
                            value: format!(
                                "{} (its host was not overridden; give userinfo_url or revocation_url on that host to keep it)",
                                f.url
                            ),
                        });
                    }
                }
            }
            Err(e) => facts.push(docs::Fact {
                label: "Endpoints",
                value: format!("could not be resolved: {e:#}"),
            }),
        }
        facts.insert(
            0,
            docs::Fact {
                label: "Configured as",
                value: format!(
                    "[providers.{name}], client_id {}, scopes {}",
                    p.client_id,
                    p.scopes.join(&p.scope_separator)
                ),
            },
        );
        if !p.fixed_params.is_empty() {
            facts.push(docs::Fact {
                label: "Fixed parameters",
                value: p
                    .fixed_params
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    if as_json {
        let obj: serde_json::Map<String, serde_json::Value> = facts
            .iter()
            .map(|f| (f.label.to_owned(), json!(f.value)))
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&obj)?)?;
        return Ok(());
    }
    writeln!(out, "{} ({})", entry.display_name, name)?;
    for f in &facts {
        writeln!(out, "  {:<32} {}", format!("{}:", f.label), f.value)?;
    }
    if let Some(p) = &entry.policy_note {
        writeln!(out, "\n  POLICY: {p}")?;
    }
    for n in &entry.notes {
        writeln!(out, "  - {n}")?;
    }
    for u in &entry.unverified {
        writeln!(out, "  - unverified: {u}")?;
    }
    Ok(())
}
