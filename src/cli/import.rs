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
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::{HeldAccount, ImportedGrant, NewTokens, insert_imported};
use crate::db::grants::grant_clients;
use crate::ids::Subject;

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

/// Reads every line of `input`: the valid grants, and the problems of the others (an in-file
/// duplicate among them). Only a failure to read is an error.
fn read_grants(
    mut input: impl BufRead,
    rules: &Rules,
) -> anyhow::Result<(Vec<Grant>, Vec<Problem>)> {
    let mut grants = Vec::new();
    let mut problems = Vec::new();
    // (issuer, subject, provider, account id) → the line that named it first.
    let mut seen: HashMap<(String, String, String, String), usize> = HashMap::new();
    let mut buf = Vec::new();
    let mut line = 0;
    loop {
        buf.clear();
        let n = std::io::Read::take(&mut input, MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .context("reading the input")?;
        if n == 0 {
            break;
        }
        line += 1;
        if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
            input.skip_until(b'\n').context("reading the input")?;
            problems.push(Problem {
                line,
                message: format!("is longer than {MAX_LINE_BYTES} bytes"),
            });
            continue;
        }
        let Ok(text) = std::str::from_utf8(&buf).map(|t| t.trim_end_matches(['\n', '\r'])) else {
            problems.push(Problem {
                line,
                message: "is not UTF-8".into(),
            });
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        match parse_line(line, text, rules) {
            Ok(g) => {
                let key = (
                    g.issuer.clone(),
                    g.subject.clone(),
                    g.provider.clone(),
                    g.account_id.clone(),
                );
                match seen.get(&key) {
                    Some(first) => problems.push(Problem {
                        line,
                        message: format!(
                            "duplicates line {first} (the same subject, provider and account)"
                        ),
                    }),
                    None => {
                        seen.insert(key, line);
                        grants.push(g);
                    }
                }
            }
            Err(messages) => problems.extend(
                messages
                    .into_iter()
                    .map(|message| Problem { line, message }),
            ),
        }
    }
    Ok((grants, problems))
}

/// A JSON object's members in the order written, duplicates kept (a `Map` would keep only the
/// last of two `access_token`s).
struct Members(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = m.next_entry::<String, Value>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// One line as a grant, or every problem it has. Messages name the field and hold no token:
/// a token field is only ever said to be missing, empty or not a string.
fn parse_line(line: usize, text: &str, rules: &Rules) -> Result<Grant, Vec<String>> {
    // Checked first so that serde never describes a value that is not an object (a bare
    // string would be quoted in its message).
    if !text.trim_start().starts_with('{') {
        return Err(vec!["is not a JSON object".into()]);
    }
    let members = match serde_json::from_str::<Members>(text) {
        Ok(Members(m)) => m,
        Err(e) => {
            // serde_json's syntax errors describe the position, never the text.
            let what = e.to_string();
            let what = what.split(" at line ").next().unwrap_or_default();
            return Err(vec![format!(
                "is not valid JSON: {what} (column {})",
                e.column()
            )]);
        }
    };
    let mut problems = Vec::new();
    let mut fields: HashMap<&'static str, Value> = HashMap::new();
    for (name, value) in members {
        match FIELDS.iter().find(|f| **f == name) {
            None => problems.push(format!("unknown field {name:?}")),
            Some(f) => {
                if fields.insert(f, value).is_some() {
                    problems.push(format!("{f} is given twice"));
                }
            }
        }
    }
    let mut take = |f: &str| fields.remove(f).filter(|v| !v.is_null());
    let issuer = take("issuer");
    let subject = take("subject");
    let provider = take("provider");
    let account = take("account");
    let access_token = take("access_token");
    let refresh_token = take("refresh_token");
    let token_type = take("token_type");
    let expires_at = take("expires_at");
    let scopes = take("scopes");
    let clients = take("clients");

    let issuer = keep(
        &mut problems,
        match issuer {
            None => Ok(rules.issuer.clone()),
            Some(Value::String(s)) if s == rules.issuer => Ok(s),
            Some(Value::String(_)) => Err(format!(
                "issuer is not this service's identity issuer ({}), the only one it serves",
                rules.issuer
            )),
            Some(_) => Err("issuer must be a string".into()),
        },
    );
    let subject = keep(
        &mut problems,
        match subject {
            None => Err("subject is required".into()),
            Some(Value::String(s)) => Subject::parse(&s).map(|_| s).map_err(|e| e.to_string()),
            Some(_) => Err("subject must be a string".into()),
        },
    );
    let provider = keep(
        &mut problems,
        match provider {
            None => Err("provider is required".into()),
            Some(Value::String(p)) if rules.providers.contains(&p) => Ok(p),
            Some(Value::String(p)) => Err(format!(
                "provider {p:?} is not configured (configured: {})",
                rules
                    .providers
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some(_) => Err("provider must be a string".into()),
        },
    );
    let account = keep(&mut problems, parse_account(account));
    let access_token = keep(
        &mut problems,
        match access_token {
            None => Err("access_token is required".into()),
            Some(v) => token(v, "access_token"),
        },
    );
    let refresh_token = keep(
        &mut problems,
        refresh_token.map(|v| token(v, "refresh_token")).transpose(),
    );
    let token_type = keep(
        &mut problems,
        match token_type {
            None => Ok("Bearer".to_owned()),
            Some(Value::String(t))
                if (1..=64).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Ok(t)
            }
            Some(_) => Err("token_type must be 1 to 64 visible ASCII characters".into()),
        },
    );
    let expires_at = keep(&mut problems, expires_at.map(parse_expiry).transpose());
    let scopes = keep(
        &mut problems,
        match scopes {
            None => Err(
                "scopes is required (an array, or one string separated by spaces; [] for none)"
                    .into(),
            ),
            Some(v) => parse_scopes(v),
        },
    );
    let clients = keep(
        &mut problems,
        match clients {
            None => {
                Err("clients is required: the configured clients that may use the grant".into())
            }
            Some(v) => parse_clients(v, provider.as_deref(), rules),
        },
    );
    match (
        issuer,
        subject,
        provider,
        account,
        access_token,
        refresh_token,
        token_type,
        expires_at,
        scopes,
        clients,
    ) {
        (
            Some(issuer),
            Some(subject),
            Some(provider),
            Some((account_id, account_label)),
            Some(access_token),
            Some(refresh_token),
            Some(token_type),
            Some(expires_at),
            Some(scopes),
            Some(clients),
        ) if problems.is_empty() => Ok(Grant {
            line,
            issuer,
            subject,
            provider,
            account_id,
            account_label,
            access_token,
            refresh_token,
            token_type,
            expires_at,
            scopes,
            clients,
        }),
        _ => Err(problems),
    }
}

/// `r`'s value, or `None` with its problem noted.
fn keep<T>(problems: &mut Vec<String>, r: Result<T, String>) -> Option<T> {
    r.map_err(|m| problems.push(m)).ok()
}

/// A token field: a non-empty string, kept secret from here on. Never quoted in a message.
fn token(v: Value, field: &str) -> Result<SecretString, String> {
    match v {
        Value::String(s) if s.is_empty() => Err(format!("{field} is empty")),
        Value::String(s) => Ok(SecretString::from(s)),
        _ => Err(format!("{field} must be a string")),
    }
}

/// `account`: absent (the provider names no account: id ''), or `{id, label?}`.
fn parse_account(v: Option<Value>) -> Result<(String, Option<String>), String> {
    let text = |v: Value, field: &str| match v {
        Value::String(s)
            if !s.is_empty()
                && s.chars().count() <= MAX_ACCOUNT_CHARS
                && !s.chars().any(char::is_control) =>
        {
            Ok(s)
        }
        _ => Err(format!(
            "{field} must be a string of 1 to {MAX_ACCOUNT_CHARS} characters without control characters"
        )),
    };
    match v {
        None => Ok((String::new(), None)),
        Some(Value::Object(mut m)) => {
            if let Some(other) = m.keys().find(|k| !matches!(k.as_str(), "id" | "label")) {
                return Err(format!(
                    "account has an unknown field {other:?} (it takes id and label)"
                ));
            }
            let id = match m.remove("id") {
                None | Some(Value::Null) => return Err(
                    "account.id is required (omit account for a provider that names no accounts)"
                        .into(),
                ),
                Some(id) => text(id, "account.id")?,
            };
            let label = match m.remove("label") {
                None | Some(Value::Null) => None,
                Some(l) => Some(text(l, "account.label")?),
            };
            Ok((id, label))
        }
        Some(_) => Err(
            "account must be an object such as {\"id\": \"12345\", \"label\": \"octocat\"}".into(),
        ),
    }
}

/// `expires_at`: RFC 3339, or Unix seconds.
fn parse_expiry(v: Value) -> Result<i64, String> {
    const WHAT: &str =
        "expires_at must be an RFC 3339 time (such as 2026-12-06T10:00:00Z) or Unix seconds";
    match v {
        Value::String(s) => {
            time::OffsetDateTime::parse(&s, &time::format_description::well_known::Rfc3339)
                .map(|t| t.unix_timestamp())
                .map_err(|_| WHAT.to_owned())
        }
        Value::Number(n) => match n.as_i64() {
            Some(s) if (0..=MAX_UNIX_SECONDS).contains(&s) => Ok(s),
            Some(s) if s > MAX_UNIX_SECONDS && s / 1000 <= MAX_UNIX_SECONDS => {
                Err(format!("{WHAT}; this looks like milliseconds"))
            }
            Some(_) => Err(format!("{WHAT} (out of range)")),
            None => Err(format!("{WHAT} (whole seconds)")),
        },
        _ => Err(WHAT.into()),
    }
}

/// `scopes`: an array of strings or one string separated by spaces; each scope once.
fn parse_scopes(v: Value) -> Result<Vec<String>, String> {
    let listed: Vec<String> = match v {
        Value::String(s) => s.split_whitespace().map(str::to_owned).collect(),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s),
                _ => Err(format!("scopes[{i}] must be a string")),
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(
                "scopes must be an array of strings or one string separated by spaces".into(),
            );
        }
    };
    let mut scopes: Vec<String> = Vec::with_capacity(listed.len());
    for s in listed {
        if s.is_empty()
            || s.chars().count() > MAX_SCOPE_CHARS
            || s.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(format!(
                "scopes must each be 1 to {MAX_SCOPE_CHARS} characters without spaces or control characters"
            ));
        }
        if !scopes.contains(&s) {
            scopes.push(s);
        }
    }
    if scopes.len() > MAX_SCOPES {
        return Err(format!("scopes holds more than {MAX_SCOPES}"));
    }
    Ok(scopes)
}

/// `clients`: configured clients that may use `provider` (when it is known), and their grant
/// groups' members, as a grant a user approves for one of them would go to all of them.
fn parse_clients(v: Value, provider: Option<&str>, rules: &Rules) -> Result<Vec<String>, String> {
    let Value::Array(items) = v else {
        return Err("clients must be an array of client ids".into());
    };
    if items.is_empty() {
        return Err("clients is empty: name the configured clients that may use the grant".into());
    }
    let mut problems = Vec::new();
    let mut clients = BTreeSet::new();
    for (i, item) in items.into_iter().enumerate() {
        let Value::String(id) = item else {
            problems.push(format!("clients[{i}] must be a string"));
            continue;
        };
        match rules.clients.get(&id) {
            None => problems.push(format!("client {id:?} is not configured")),
            Some(c) => match provider {
                Some(p) if !c.providers.iter().any(|cp| cp == p) => problems.push(format!(
                    "client {id:?} may not use provider {p:?} (not in its providers)"
                )),
                _ => clients.extend(c.members.iter().cloned()),
            },
        }
    }
    if problems.is_empty() {
        Ok(clients.into_iter().collect())
    } else {
        Err(problems.join("; "))
    }
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

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    const ISSUER: &str = "https://id.example.com";

    fn rules() -> Rules {
        let client = |providers: &[&str], members: &[&str]| ClientRule {
            providers: providers.iter().map(|p| p.to_string()).collect(),
            members: members.iter().map(|m| m.to_string()).collect(),
        };
        Rules {
            issuer: ISSUER.into(),
            providers: ["github", "google"].map(String::from).into(),
            clients: [
                ("a".to_owned(), client(&["github"], &["a"])),
                ("b".to_owned(), client(&["github", "google"], &["b", "c"])),
                ("c".to_owned(), client(&["google"], &["b", "c"])),
            ]
            .into(),
        }
    }

    fn read(text: &str) -> (Vec<Grant>, Vec<String>) {
        let (grants, problems) = read_grants(text.as_bytes(), &rules()).unwrap();
        (grants, problems.iter().map(ToString::to_string).collect())
    }

    const OK: &str = r#"{"subject":"alice","provider":"github","access_token":"gho_secret1","scopes":"repo read:user","clients":["a"]}"#;

    #[test]
    fn a_minimal_line_takes_the_defaults() {
        let (grants, problems) = read(OK);
        assert_eq!(problems, Vec::<String>::new());
        let g = &grants[0];
        assert_eq!(
            (g.line, g.issuer.as_str(), g.subject.as_str()),
            (1, ISSUER, "alice")
        );
        assert_eq!((g.account_id.as_str(), &g.account_label), ("", &None));
        assert_eq!(g.access_token.expose_secret(), "gho_secret1");
        assert!(g.refresh_token.is_none() && g.expires_at.is_none());
        assert_eq!(g.token_type, "Bearer");
        assert_eq!(g.scopes, ["repo", "read:user"]);
        assert_eq!(g.clients, ["a"]);
    }

    #[test]
    fn every_field_is_read_and_a_grant_group_shares_the_grant() {
        let line = format!(
            r#"{{"issuer":"{ISSUER}","subject":"bob","provider":"google","account":{{"id":"108","label":"bob@example.com"}},"access_token":"ya29.x","refresh_token":"1//r","token_type":"bearer","expires_at":"2030-01-01T00:00:00+01:00","scopes":["openid","email","openid"],"clients":["c"]}}"#
        );
        let (grants, problems) = read(&format!("\n\n{line}\n"));
        assert!(problems.is_empty(), "{problems:?}");
        let g = &grants[0];
        assert_eq!(g.line, 3, "blank lines count");
        assert_eq!(
            (g.account_id.as_str(), g.account_label.as_deref()),
            ("108", Some("bob@example.com"))
        );
        assert_eq!(
            g.refresh_token.as_ref().map(|r| r.expose_secret()),
            Some("1//r")
        );
        assert_eq!(g.expires_at, Some(1_893_452_400));
        assert_eq!(g.scopes, ["openid", "email"]);
        assert_eq!(g.clients, ["b", "c"]);
        let (grants, _) = read(
            r#"{"subject":"bob","provider":"github","access_token":"t","expires_at":1893456000,"scopes":[],"clients":["a"]}"#,
        );
        assert_eq!(grants[0].expires_at, Some(1_893_456_000));
        assert!(grants[0].scopes.is_empty());
        // As Nango writes it: milliseconds after the point, a null refresh token.
        let (grants, _) = read(
            r#"{"subject":"bob","provider":"github","access_token":"t","refresh_token":null,"expires_at":"2030-01-01T00:00:00.000Z","scopes":"","clients":["a"]}"#,
        );
        assert_eq!(grants[0].expires_at, Some(1_893_456_000));
        assert!(grants[0].refresh_token.is_none());
    }

    #[test]
    fn each_problem_names_its_line_and_field_and_never_a_token() {
        let text = [
            OK,
            r#"{"subject":"","provider":"gitlab","access_token":"SECRET-A","scopes":[],"clients":["zz"]}"#,
            r#"{"provider":"github","access_token":7,"refresh_token":"","scopes":"x","clients":["c"],"expires_at":"tomorrow"}"#,
            r#"{"subject":"x","provider":"github","access_token":"SECRET-B","scopes":[],"clients":["a"],"expires_at":1893456000000,"extra":"SECRET-C"}"#,
            r#""SECRET-D""#,
            r#"{"subject":"x","access_token":"SECRET-E""#,
            r#"{"subject":"x","subject":"y","provider":"github","access_token":"SECRET-F","scopes":[],"clients":["a"],"issuer":"https://other"}"#,
            r#"{"subject":"x","provider":"github","account":{"id":""},"access_token":"SECRET-G","scopes":[""],"clients":[]}"#,
        ]
        .join("\n");
        let (grants, problems) = read(&text);
        assert_eq!(grants.len(), 1);
        let all = problems.join("\n");
        for secret in ["SECRET", "tomorrow", "gho_secret1"] {
            assert!(!all.contains(secret), "{all}");
        }
        for expected in [
            "line 2: subject must be 1 to 255 characters",
            "line 2: provider \"gitlab\" is not configured (configured: github, google)",
            "line 2: client \"zz\" is not configured",
            "line 3: subject is required",
            "line 3: access_token must be a string",
            "line 3: refresh_token is empty",
            "line 3: client \"c\" may not use provider \"github\"",
            "line 3: expires_at must be an RFC 3339 time (such as 2026-12-06T10:00:00Z) or Unix seconds",
            "line 4: unknown field \"extra\"",
            "line 4: expires_at must be an RFC 3339 time (such as 2026-12-06T10:00:00Z) or Unix seconds; this looks like milliseconds",
            "line 5: is not a JSON object",
            "line 6: is not valid JSON: EOF while parsing an object (column 40)",
            "line 7: subject is given twice",
            "line 7: issuer is not this service's identity issuer (https://id.example.com)",
            "line 8: account.id must be a string of 1 to 255 characters",
            "line 8: scopes must each be 1 to 200 characters",
            "line 8: clients is empty",
        ] {
            assert!(all.contains(expected), "missing {expected:?} in\n{all}");
        }
        assert_eq!(problems.len(), 17, "{all}");
    }

    #[test]
    fn a_duplicate_names_both_lines_and_another_account_is_no_duplicate() {
        let with = |id: &str| {
            OK.replace(
                r#""scopes""#,
                &format!(r#""account":{{"id":"{id}"}},"scopes""#),
            )
        };
        let text = [OK, &with("1"), &with("2"), OK, &with("1")].join("\n");
        let (grants, problems) = read(&text);
        assert_eq!(grants.len(), 3);
        assert_eq!(
            problems,
            [
                "line 4: duplicates line 1 (the same subject, provider and account)",
                "line 5: duplicates line 2 (the same subject, provider and account)",
            ]
        );
    }

    #[test]
    fn a_line_too_long_or_not_utf8_is_a_problem_and_reading_goes_on() {
        let long = format!("{{\"subject\":\"{}\"}}", "x".repeat(MAX_LINE_BYTES));
        let mut text = format!("{long}\n").into_bytes();
        text.extend_from_slice(b"\xff\xfe\n");
        text.extend_from_slice(OK.as_bytes());
        let (grants, problems) = read_grants(&text[..], &rules()).unwrap();
        assert_eq!(grants.len(), 1);
        assert_eq!(grants[0].line, 3);
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                format!("line 1: is longer than {MAX_LINE_BYTES} bytes"),
                "line 2: is not UTF-8".to_owned(),
            ]
        );
    }

    fn held(subject: &str, provider: &str, id: &str, label: Option<&str>) -> HeldAccount {
        HeldAccount {
            subject: subject.into(),
            provider: provider.into(),
            account_id: id.into(),
            account_label: label.map(Into::into),
        }
    }

    fn grants(lines: &[(&str, &str)]) -> Vec<Grant> {
        let text: Vec<String> = lines
            .iter()
            .map(|(subject, account)| {
                OK.replace("alice", subject)
                    .replace(r#""scopes""#, &format!(r#""account":{account},"scopes""#))
            })
            .collect();
        let (grants, problems) = read(&text.join("\n"));
        assert!(problems.is_empty(), "{problems:?}");
        grants
    }

    #[test]
    fn a_stored_account_is_left_as_it_is_and_new_ones_count_against_the_limit() {
        let g = grants(&[
            ("alice", r#"{"id":"1"}"#),
            ("alice", r#"{"id":"2"}"#),
            ("alice", r#"{"id":"3"}"#),
            ("bob", r#"{"id":"9","label":"bob"}"#),
            ("carol", r#"{"id":"7","label":"c2"}"#),
        ]);
        let stored = [
            held("alice", "github", "1", None),
            held("alice", "google", "5", None),
            // Stored before accounts had ids: taken as the account unless its label differs.
            held("bob", "github", "", None),
            held("carol", "github", "", Some("c1")),
        ];
        let (fates, problems) = plan(&g, &stored, 2, true);
        use Fate::*;
        assert_eq!(fates, [Present, Import, Import, Present, Import]);
        assert_eq!(
            problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "line 3: subject \"alice\" would hold 3 accounts at \"github\", more than max_accounts_per_provider (2); 1 of them stored already (revoked ones count)"
            ]
        );
        let (_, problems) = plan(&g, &stored, 5, false);
        let lines: Vec<usize> = problems.iter().map(|p| p.line).collect();
        assert_eq!(lines, [2, 3, 5], "{problems:?}");
        assert!(problems[0].message.contains("migrate --post-deploy"));
    }
}
