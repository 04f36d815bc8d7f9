//! Reading an import file: every line parsed and checked against the configuration (clients,
//! providers, the issuer, the bounds of each field), with problems that name the line and the
//! field and never quote a token.

use super::*;

/// Reads every line of `input`: the valid grants, and the problems of the others (an in-file
/// duplicate among them). Only a failure to read is an error.
pub(super) fn read_grants(
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
pub(super) fn parse_line(line: usize, text: &str, rules: &Rules) -> Result<Grant, Vec<String>> {
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
    // Every field is `Some` when nothing was noted, and the line is refused otherwise.
    let grant = (|| {
        let (account_id, account_label) = account?;
        Some(Grant {
            line,
            issuer: issuer?,
            subject: subject?,
            provider: provider?,
            account_id,
            account_label,
            access_token: access_token?,
            refresh_token: refresh_token?,
            token_type: token_type?,
            expires_at: expires_at?,
            scopes: scopes?,
            clients: clients?,
        })
    })();
    match grant {
        Some(grant) if problems.is_empty() => Ok(grant),
        _ => Err(problems),
    }
}

/// `r`'s value, or `None` with its problem noted.
pub(super) fn keep<T>(problems: &mut Vec<String>, r: Result<T, String>) -> Option<T> {
    r.map_err(|m| problems.push(m)).ok()
}

/// A token field: a non-empty string, kept secret from here on. Never quoted in a message.
pub(super) fn token(v: Value, field: &str) -> Result<SecretString, String> {
    match v {
        Value::String(s) if s.is_empty() => Err(format!("{field} is empty")),
        Value::String(s) => Ok(SecretString::from(s)),
        _ => Err(format!("{field} must be a string")),
    }
}

/// `account`: absent (the provider names no account: id ''), or `{id, label?}`.
pub(super) fn parse_account(v: Option<Value>) -> Result<(String, Option<String>), String> {
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
pub(super) fn parse_expiry(v: Value) -> Result<i64, String> {
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
pub(super) fn parse_scopes(v: Value) -> Result<Vec<String>, String> {
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
pub(super) fn parse_clients(
    v: Value,
    provider: Option<&str>,
    rules: &Rules,
) -> Result<Vec<String>, String> {
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
