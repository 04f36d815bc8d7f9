//! `connections import FILE`: grants from another token store, one JSON object a line. Every
//! line is checked against the configuration and the database before anything is written, and
//! a file with any problem writes nothing. The grants are then stored sealed, a batch per
//! transaction, each with the clients that may use it and its audit row. A grant whose account
//! the user holds already is never overwritten, so running the same file again changes nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, IsTerminal, Write};

use anyhow::Context;
use secrecy::SecretString;
use serde_json::{Value, json};

use super::Cli;

mod lines;
#[cfg(test)]
mod tests;

use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::{HeldAccount, ImportedGrant, NewTokens, insert_imported};
use crate::db::grants::grant_clients;
use crate::ids::Subject;
use lines::read_grants;

/// The longest line read. A longer one is a problem of its own, never read whole.
const MAX_LINE_BYTES: usize = 256 * 1024;
/// Problems printed; the rest are counted.
const MAX_REPORTED: usize = 100;
/// Without a terminal to draw a bar on, a progress line each time this many more are stored.
const PROGRESS_EVERY: usize = 1000;
/// Scopes one grant may carry, and the longest scope (the API's bound on requested scopes is
/// tighter; a provider may have granted more).
const MAX_SCOPES: usize = 200;
const MAX_SCOPE_CHARS: usize = 200;
/// Account ids and labels are bounded like the `account` of a token request.
const MAX_ACCOUNT_CHARS: usize = 255;
/// The last second of year 9999: a larger `expires_at` is a mistake (milliseconds, usually).
const MAX_UNIX_SECONDS: i64 = 253_402_300_799;

/// The fields a line may have.
const FIELDS: &[&str] = &[
    "issuer",
    "subject",
    "provider",
    "account",
    "access_token",
    "refresh_token",
    "token_type",
    "expires_at",
    "scopes",
    "clients",
];

/// How `connections import` runs.
#[derive(Debug, Clone, Copy)]
pub struct ImportOptions {
    /// Check everything and say what would happen; write nothing.
    pub dry_run: bool,
    /// Grants per transaction.
    pub batch_size: usize,
    /// The summary as one JSON object.
    pub json: bool,
}

/// What the configuration allows a line to name.
struct Rules {
    /// The identity issuer this service serves (the only one a grant may belong to).
    issuer: String,
    providers: BTreeSet<String>,
    clients: HashMap<String, ClientRule>,
}

struct ClientRule {
    /// The providers the client may use.
    providers: Vec<String>,
    /// Whom a grant to it goes to: its grant group's members, or itself.
    members: Vec<String>,
}

impl Rules {
    fn of(cli: &Cli) -> Self {
        let state = &cli.state;
        Self {
            issuer: state.config.identity.issuer.clone(),
            providers: state.config.providers.keys().cloned().collect(),
            clients: state
                .clients
                .iter()
                .map(|c| {
                    let rule = ClientRule {
                        providers: c.providers.clone(),
                        members: state.grants.grant_apps(&c.id),
                    };
                    (c.id.clone(), rule)
                })
                .collect(),
        }
    }
}

/// One valid line: a grant to store. Its tokens stay in `SecretString`s until sealed.
struct Grant {
    line: usize,
    issuer: String,
    subject: String,
    provider: String,
    /// The provider's account id; empty when the line names none.
    account_id: String,
    account_label: Option<String>,
    access_token: SecretString,
    refresh_token: Option<SecretString>,
    token_type: String,
    expires_at: Option<i64>,
    scopes: Vec<String>,
    /// The clients the line names and their grant groups' members, sorted, each once.
    clients: Vec<String>,
}

/// A problem with one line. The message names the field and never holds a token.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Problem {
    line: usize,
    message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// What happens to a valid grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Import,
    /// The user holds this account already: left as it is.
    Present,
}

/// Counts per provider (and, summed, in all).
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
struct Tally {
    imported: usize,
    already_present: usize,
}

/// `connections import`: reads `input` (JSON Lines), checks every line, and unless
/// `opts.dry_run` stores the new grants. The summary goes to `out`; progress and problems to
/// stderr. A file with problems writes nothing and is an error.
pub async fn connections_import(
    cli: &Cli,
    input: impl BufRead,
    source: &str,
    opts: ImportOptions,
    actor: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let rules = Rules::of(cli);
    let (grants, mut problems) = read_grants(input, &rules)?;
    let subjects: BTreeSet<&str> = grants.iter().map(|g| g.subject.as_str()).collect();
    let subjects: Vec<&str> = subjects.into_iter().collect();
    let db = &cli.state.db;
    let held = db
        .held_accounts(&rules.issuer, &subjects)
        .await
        .context("reading the accounts users hold")?;
    let several = db.several_accounts_allowed().await?;
    let (fates, limits) = plan(
        &grants,
        &held,
        cli.state.config.max_accounts_per_provider,
        several,
    );
    problems.extend(limits);
    if !problems.is_empty() {
        problems.sort_by_key(|p| p.line);
        let mut err = std::io::stderr().lock();
        for p in problems.iter().take(MAX_REPORTED) {
            writeln!(err, "{p}")?;
        }
        if problems.len() > MAX_REPORTED {
            writeln!(
                err,
                "... and {} more problem(s)",
                problems.len() - MAX_REPORTED
            )?;
        }
        anyhow::bail!(
            "{} problem(s) in {source}; nothing was imported",
            problems.len()
        );
    }

    let mut tally: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut new = Vec::new();
    for (g, fate) in grants.iter().zip(&fates) {
        match fate {
            Fate::Import => new.push(g),
            Fate::Present => tally.entry(&g.provider).or_default().already_present += 1,
        }
    }
    let present = grants.len() - new.len();
    eprintln!(
        "{source}: {} grant(s) checked: {} to import, {present} already present",
        grants.len(),
        new.len()
    );
    if opts.dry_run {
        for g in &new {
            tally.entry(&g.provider).or_default().imported += 1;
        }
    } else {
        store(cli, &new, opts.batch_size.max(1), actor, &mut tally).await?;
    }
    summary(&tally, grants.len(), opts, out)
}

/// What happens to each grant given the accounts its users hold (`held`, of the rules' issuer):
/// a stored account is left as it is; a new one must fit in `max` per user and provider, and,
/// before the post-deploy migration (`several`), be the user's only one there.
fn plan(
    grants: &[Grant],
    held: &[HeldAccount],
    max: usize,
    several: bool,
) -> (Vec<Fate>, Vec<Problem>) {
    let mut by_user: HashMap<(&str, &str), Vec<&HeldAccount>> = HashMap::new();
    for h in held {
        by_user
            .entry((h.subject.as_str(), h.provider.as_str()))
            .or_default()
            .push(h);
    }
    let mut added: HashMap<(&str, &str), usize> = HashMap::new();
    let mut fates = Vec::with_capacity(grants.len());
    let mut problems = Vec::new();
    for g in grants {
        let user = (g.subject.as_str(), g.provider.as_str());
        let holds = by_user.get(&user).map(Vec::as_slice).unwrap_or_default();
        if holds.iter().any(|h| same_account(h, g)) {
            fates.push(Fate::Present);
            continue;
        }
        let n = added.entry(user).or_default();
        *n += 1;
        let total = holds.len() + *n;
        if total > 1 && !several {
            problems.push(Problem {
                line: g.line,
                message: format!(
                    "subject {:?} would hold a second account at {:?}, which needs `mcp-connect migrate --post-deploy` first (once every replica runs this release)",
                    g.subject, g.provider
                ),
            });
        } else if total > max {
            problems.push(Problem {
                line: g.line,
                message: format!(
                    "subject {:?} would hold {total} accounts at {:?}, more than max_accounts_per_provider ({max}); {} of them stored already (revoked ones count)",
                    g.subject,
                    g.provider,
                    holds.len()
                ),
            });
        }
        fates.push(Fate::Import);
    }
    (fates, problems)
}

/// Whether stored account `h` is the account of grant `g`: the same id, or a row stored before
/// accounts had ids whose label does not say otherwise (the rule a reconnect follows,
/// `store_connected`).
fn same_account(h: &HeldAccount, g: &Grant) -> bool {
    h.account_id == g.account_id
        || (!g.account_id.is_empty()
            && h.account_id.is_empty()
            && match (&h.account_label, &g.account_label) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            })
}

/// Stores `grants`, `batch` per transaction, counting into `tally`; a progress bar on a
/// terminal, else a line every [`PROGRESS_EVERY`].
async fn store<'g>(
    cli: &Cli,
    grants: &[&'g Grant],
    batch: usize,
    actor: &str,
    tally: &mut BTreeMap<&'g str, Tally>,
) -> anyhow::Result<()> {
    let total = grants.len();
    let terminal = std::io::stderr().is_terminal();
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} grants ({per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut done = 0;
    for chunk in grants.chunks(batch) {
        let first = chunk.first().map_or(0, |g| g.line);
        store_batch(cli, chunk, actor, tally).await.with_context(|| {
            format!(
                "storing the grants from line {first} on (nothing of this batch was written; the {done} before it are stored, and running the same file again imports the rest)"
            )
        })?;
        let before = done;
        done += chunk.len();
        bar.set_position(done as u64);
        if !terminal && (done / PROGRESS_EVERY > before / PROGRESS_EVERY || done == total) {
            eprintln!("stored {done} of {total} grant(s)");
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// One transaction: the grants' rows, the clients that may use them, an audit row each.
async fn store_batch<'g>(
    cli: &Cli,
    grants: &[&'g Grant],
    actor: &str,
    tally: &mut BTreeMap<&'g str, Tally>,
) -> anyhow::Result<()> {
    let rows: Vec<ImportedGrant<'_>> = grants
        .iter()
        .map(|g| ImportedGrant {
            issuer: &g.issuer,
            subject: &g.subject,
            provider: &g.provider,
            account_id: &g.account_id,
            tokens: NewTokens {
                access_token: &g.access_token,
                refresh_token: g.refresh_token.as_ref(),
                token_type: &g.token_type,
                expires_at: g.expires_at,
                scopes: &g.scopes,
                account_label: g.account_label.as_deref(),
            },
        })
        .collect();
    let state = &cli.state;
    let mut change = Change::begin(&state.db).await?;
    let ids = insert_imported(change.conn(), &state.config.keys, &rows).await?;
    let mut counts: Vec<(&'g str, bool)> = Vec::with_capacity(grants.len());
    for (g, id) in grants.iter().zip(ids) {
        let Some(id) = id else {
            // Stored meanwhile (a connect flow since the file was checked): left as it is.
            counts.push((&g.provider, false));
            continue;
        };
        grant_clients(change.conn(), &id, &g.clients, None).await?;
        let mut detail = format!("line={}", g.line);
        if !g.account_id.is_empty() {
            detail.push_str(&format!(" account={}", g.account_id));
        }
        detail.push_str(&format!(" clients={}", g.clients.join(",")));
        change
            .audit(AuditEvent {
                event: AuditAction::ConnectionImported,
                actor: Some(actor),
                issuer: Some(&g.issuer),
                subject: Some(&g.subject),
                provider: Some(&g.provider),
                client_id: None,
                connection_id: Some(id.as_str()),
                elicitation_id: None,
                request_id: None,
                detail: Some(&detail),
                organization: None,
            })
            .await?;
        change.connection_changed(&id);
        counts.push((&g.provider, true));
    }
    state.signals.commit(change).await?;
    // Counted once committed: a batch that failed counts nothing.
    for (provider, imported) in counts {
        let t = tally.entry(provider).or_default();
        if imported {
            t.imported += 1;
        } else {
            t.already_present += 1;
        }
    }
    Ok(())
}

/// The summary on `out`: in all and per provider.
fn summary(
    tally: &BTreeMap<&str, Tally>,
    lines: usize,
    opts: ImportOptions,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let all = tally.values().fold(Tally::default(), |a, t| Tally {
        imported: a.imported + t.imported,
        already_present: a.already_present + t.already_present,
    });
    if opts.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "dry_run": opts.dry_run,
                "grants": lines,
                "imported": all.imported,
                "already_present": all.already_present,
                "providers": tally,
            }))?
        )?;
        return Ok(());
    }
    if opts.dry_run {
        writeln!(
            out,
            "dry run: {} grant(s) would be imported, {} already present (left as they are); nothing was written",
            all.imported, all.already_present
        )?;
    } else {
        writeln!(
            out,
            "imported {} grant(s), {} already present (left as they are)",
            all.imported, all.already_present
        )?;
    }
    for (provider, t) in tally {
        writeln!(
            out,
            "  {provider}: {} {}, {} already present",
            t.imported,
            if opts.dry_run {
                "to import"
            } else {
                "imported"
            },
            t.already_present
        )?;
    }
    Ok(())
}
