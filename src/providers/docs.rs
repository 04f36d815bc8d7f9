//! What operators read about a provider, from its catalog entry: the facts shown by
//! `mcp-connect providers show`, the admin providers page, and the generated
//! `docs/providers/NAME.md` (kept current by a test; `UPDATE_DOCS=1` rewrites them).

use std::fmt::Write;

use crate::config::catalog::{
    AuthKind, BodyFormat, Entry, RevocationAuth, RevocationMethod, TokenAuth, WhenMissing,
    WhichToken,
};

/// One fact: a label and its value, in words.
pub struct Fact {
    pub label: &'static str,
    pub value: String,
}

fn fact(label: &'static str, value: impl Into<String>) -> Fact {
    Fact {
        label,
        value: value.into(),
    }
}

pub fn client_auth_text(e: &Entry) -> String {
    let auth = match e.token.client_auth {
        TokenAuth::Basic => "HTTP Basic (client_secret_basic)",
        TokenAuth::Post => "in the body (client_secret_post)",
    };
    let body = match e.token.body {
        BodyFormat::Json => "JSON body",
        _ => "form body",
    };
    format!("{auth}, {body}")
}

pub fn expiry_text(e: &Entry) -> String {
    match (e.token.expiry.when_missing, e.token.expiry.assume_seconds) {
        (WhenMissing::Assume, Some(s)) => {
            format!("expires_in when given; when missing, assumed {s} s")
        }
        _ => "expires_in when given; when missing, the token does not expire".into(),
    }
}

pub fn refresh_text(e: &Entry) -> String {
    let mut s = match e.refresh.behaviour {
        crate::config::catalog::RefreshBehaviour::None => {
            "none: no refresh token; the user reconnects when the token dies".to_owned()
        }
        crate::config::catalog::RefreshBehaviour::Stable => {
            "stable: the refresh token is reused; an answer without a new one keeps it".to_owned()
        }
        crate::config::catalog::RefreshBehaviour::Rotating => "rotating: each refresh returns a new, single-use refresh token, stored before anything else and never redeemed twice".to_owned(),
    };
    if let Some(u) = &e.endpoints.refresh_url {
        let _ = write!(s, "; refreshes go to {u}");
    }
    if let Some(r) = &e.refresh.requires {
        let _ = write!(s, ". Requires: {r}");
    }
    s
}

pub fn revocation_text(e: &Entry) -> String {
    let r = &e.revocation;
    let mut s = match r.method {
        RevocationMethod::Rfc7009 => match &r.url {
            Some(u) => format!("RFC 7009 at {u} (refresh token, then access token)"),
            None => "RFC 7009 at the configured revocation_url (or the one discovery gives); none: not supported".into(),
        },
        RevocationMethod::Custom => {
            let auth = match r.auth {
                Some(RevocationAuth::ClientBasic) => "HTTP Basic with the client credentials",
                Some(RevocationAuth::ClientPost) => "client credentials in the body",
                Some(RevocationAuth::Bearer) => "the token as bearer",
                _ => "no client authentication",
            };
            let token = match r.token {
                Some(WhichToken::RefreshToken) => "refresh token",
                _ => "access token",
            };
            let body = match (r.body.unwrap_or_default(), &r.token_param) {
                (BodyFormat::None, _) => "no body".to_owned(),
                (BodyFormat::Json, Some(p)) => format!("JSON body with {p}"),
                (BodyFormat::Form, Some(p)) => format!("form body with {p}"),
                (BodyFormat::Json, None) => "JSON body".to_owned(),
                (BodyFormat::Form, None) => "form body".to_owned(),
            };
            let mut s = format!(
                "{} {} with the {token}, {auth}, {body}",
                r.http_method.unwrap_or_default().as_str(),
                r.url.as_deref().unwrap_or_default()
            );
            for (k, v) in &r.extra {
                let _ = write!(s, ", {k}={v}");
            }
            s
        }
        RevocationMethod::Unsupported => {
            "not supported: disconnecting deletes the tokens here only".into()
        }
    };
    if let Some(n) = &r.note {
        let _ = write!(s, ". {n}");
    }
    if let Some(u) = &r.manual_url {
        let _ = write!(s, " Users can remove access at {u}.");
    }
    s
}

/// The facts of a catalog entry, for `redirect_uri` (the exact one to register).
pub fn facts(e: &Entry, redirect_uri: &str) -> Vec<Fact> {
    let ep = &e.endpoints;
    let mut out = vec![
        fact("Kind", format!("kind = \"{}\"", e.name)),
        fact("Redirect URI to register", redirect_uri),
    ];
    if e.auth == AuthKind::Oidc {
        out.push(fact(
            "Endpoints",
            "from the configured issuer's discovery document",
        ));
    } else if e.is_generic() {
        out.push(fact(
            "Endpoints",
            "configured: authorization_url and token_url (or issuer)",
        ));
    }
    for (label, v) in [
        ("Authorization endpoint", &ep.authorization_url),
        ("Token endpoint", &ep.token_url),
        ("Refresh endpoint", &ep.refresh_url),
        ("Userinfo endpoint", &ep.userinfo_url),
    ] {
        if let Some(v) = v {
            out.push(fact(label, v.clone()));
        }
    }
    out.push(fact(
        "API base URL (proxy)",
        e.api
            .base_url
            .clone()
            .unwrap_or_else(|| "none: set api_base_url to use the proxy".into()),
    ));
    for p in &e.params {
        let rule = match (&p.pattern, &p.choices) {
            (Some(pat), _) => format!("matching {pat}"),
            (_, Some(c)) => format!(
                "one of {}",
                c.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
            _ => String::new(),
        };
        let default = p
            .default
            .as_deref()
            .map(|d| format!(", default {d}"))
            .unwrap_or_default();
        out.push(fact(
            "Per-connection parameter",
            format!("{{{}}}: {} ({rule}{default})", p.name, p.label),
        ));
    }
    out.push(fact(
        "Default scopes",
        if e.scopes.default.is_empty() {
            "none".to_owned()
        } else {
            e.scopes.default.join(&e.scopes.separator)
        },
    ));
    if e.scopes.separator != " " {
        out.push(fact(
            "Scope separator",
            format!("\"{}\"", e.scopes.separator),
        ));
    }
    if e.authorize.scope_param != "scope" {
        out.push(fact("Scope parameter", e.authorize.scope_param.clone()));
    }
    out.push(fact(
        "PKCE",
        if e.authorize.pkce { "S256" } else { "not sent" },
    ));
    if !e.authorize.params.is_empty() {
        out.push(fact(
            "Extra authorization parameters",
            join_map(&e.authorize.params),
        ));
    }
    if !e.authorize.omit.is_empty() {
        out.push(fact("Omitted parameters", e.authorize.omit.join(", ")));
    }
    out.push(fact("Client authentication", client_auth_text(e)));
    if !e.token.params.is_empty() {
        out.push(fact("Extra token parameters", join_map(&e.token.params)));
    }
    if !e.token.refresh_params.is_empty() {
        out.push(fact(
            "Extra refresh parameters",
            join_map(&e.token.refresh_params),
        ));
    }
    if let Some(p) = &e.token.path {
        out.push(fact("Token in the answer at", p.clone()));
    }
    out.push(fact("Expiry", expiry_text(e)));
    out.push(fact("Refresh", refresh_text(e)));
    out.push(fact("Revocation", revocation_text(e)));
    let m = &e.metadata;
    let mut kept: Vec<String> = Vec::new();
    kept.extend(
        m.from_token
            .iter()
            .map(|(k, p)| format!("{k} (token answer {p})")),
    );
    kept.extend(
        m.from_redirect
            .iter()
            .map(|(k, p)| format!("{k} (redirect {p})")),
    );
    kept.extend(
        m.from_userinfo
            .iter()
            .map(|(k, p)| format!("{k} (userinfo {p})")),
    );
    for f in &m.fetch {
        kept.extend(f.fields.iter().map(|(k, p)| format!("{k} ({} {p})", f.url)));
    }
    if !kept.is_empty() {
        out.push(fact("Metadata kept", kept.join("; ")));
    }
    if !e.account.label_fields.is_empty() || e.account.label_from_token.is_some() {
        let mut l = e.account.label_fields.join(", ");
        if let Some(t) = &e.account.label_from_token {
            if !l.is_empty() {
                l.push_str("; ");
            }
            let _ = write!(l, "token answer {t}");
        }
        out.push(fact("Account label from", l));
    }
    let a = &e.account;
    let accounts = match (&a.id_from_token, a.id_fields.is_empty()) {
        (Some(t), _) => format!("several per user, told apart by the token answer's {t}"),
        (None, false) => format!(
            "several per user, told apart by userinfo {}",
            a.id_fields.join(", ")
        ),
        (None, true) => "one per user (the provider names no account id)".to_owned(),
    };
    out.push(fact("Accounts", accounts));
    if !a.select_params.is_empty() {
        out.push(fact(
            "Adding another account sends",
            join_map(&a.select_params),
        ));
    }
    out.push(fact("Last checked", e.last_checked.clone()));
    out
}

fn join_map(m: &std::collections::BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The redirect URI a provider named `name` uses, for a service at `public_url`.
pub fn redirect_uri(public_url: &str, name: &str) -> String {
    format!("{}/oauth/{name}/callback", public_url.trim_end_matches('/'))
}

/// `docs/providers/NAME.md`: how to set the provider up, and how it behaves.
pub fn markdown(e: &Entry) -> String {
    let redirect = redirect_uri("https://connect.example.com", &e.name);
    let mut s = String::new();
    let _ = writeln!(s, "# {}\n", e.display_name);
    let _ = writeln!(
        s,
        "<!-- Generated from providers/{}.toml by `UPDATE_DOCS=1 cargo nextest run -E 'test(/provider_docs/)'`; do not edit. -->\n",
        e.name
    );
    if let Some(p) = &e.policy_note {
        let _ = writeln!(s, "> **Policy:** {p}\n");
    }
    let _ = writeln!(s, "## Set up\n");
    let mut n = 1;
    if let Some(c) = &e.setup.console_url {
        let _ = writeln!(s, "{n}. Open {c}.");
        n += 1;
    }
    for step in &e.setup.steps {
        let _ = writeln!(s, "{n}. {step}");
        n += 1;
    }
    let _ = writeln!(
        s,
        "{n}. Register the redirect URI `{redirect}`, where `https://connect.example.com` is your `public_url` and `{}` the name of the provider in your config (`[providers.{}]`); `mcp-connect providers show {}` prints the exact one.",
        e.name, e.name, e.name
    );
    n += 1;
    let _ = writeln!(s, "{n}. Configure it:\n");
    let _ = writeln!(s, "```toml\n[providers.{}]\nkind = \"{}\"", e.name, e.name);
    if e.auth == AuthKind::Oidc {
        let _ = writeln!(s, "issuer = \"https://id.example.com\"");
    } else if e.is_generic() {
        let _ = writeln!(
            s,
            "authorization_url = \"https://auth.example.com/authorize\"\ntoken_url = \"https://auth.example.com/token\""
        );
    }
    let _ = writeln!(
        s,
        "client_id = \"...\"\nclient_secret = \"...\"  # or MCP_CONNECT_PROVIDERS__{}__CLIENT_SECRET",
        e.name.to_uppercase().replace('-', "_")
    );
    if let Some(p) = e.params.first() {
        let _ = writeln!(
            s,
            "# params = {{ {} = \"{}\" }}  # fix it for everyone instead of asking each user",
            p.name,
            p.example
                .clone()
                .or_else(|| p.default.clone())
                .unwrap_or_default()
        );
    }
    let _ = writeln!(s, "```\n");
    let _ = writeln!(s, "## Behaviour\n\n| | |\n|---|---|");
    for f in facts(e, &redirect) {
        let _ = writeln!(s, "| {} | {} |", f.label, f.value.replace('|', "\\|"));
    }
    let _ = writeln!(s);
    if !e.params.is_empty() {
        let _ = writeln!(s, "## Per-connection parameters\n");
        let _ = writeln!(
            s,
            "Asked on the consent page (validated), or passed by the API caller as `POST /v1/elicitations {{\"params\": {{...}}}}`; stored with the connection and used for its refreshes and revocation.\n"
        );
        for p in &e.params {
            let _ = writeln!(s, "- `{}`: {}. {}", p.name, p.label, p.description);
        }
        let _ = writeln!(s);
    }
    if !e.scopes.descriptions.is_empty() {
        let _ = writeln!(s, "## Scopes\n");
        for (k, v) in &e.scopes.descriptions {
            let _ = writeln!(s, "- `{k}`: {v}");
        }
        let _ = writeln!(s);
    }
    if !e.notes.is_empty() {
        let _ = writeln!(s, "## Notes\n");
        for note in &e.notes {
            let _ = writeln!(s, "- {note}");
        }
        let _ = writeln!(s);
    }
    if !e.unverified.is_empty() {
        let _ = writeln!(
            s,
            "## Not verified\n\nNo primary source confirmed these; treat them as hypotheses and tell us what you find.\n"
        );
        for u in &e.unverified {
            let _ = writeln!(s, "- {u}");
        }
        let _ = writeln!(s);
    }
    if !e.docs.is_empty() {
        let _ = writeln!(s, "## Provider documentation\n");
        for d in &e.docs {
            let _ = writeln!(s, "- [{}]({})", d.title, d.url);
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "Entry last checked: {}.", e.last_checked);
    s
}

/// `docs/providers/README.md`: the index.
pub fn index(entries: &[Entry]) -> String {
    let mut s = String::from(
        "# Providers\n\n<!-- Generated from providers/*.toml; do not edit. -->\n\nEvery provider of the built-in catalog (`kind = \"...\"`). Any endpoint key given beside `kind` (`authorization_url`, `token_url`, `revocation_url`, `userinfo_url`, `issuer`) replaces the catalog's and keeps every quirk.\n\n| Kind | Provider | Refresh | Revocation | Per-connection parameters | Last checked |\n|---|---|---|---|---|---|\n",
    );
    for e in entries {
        let rev = match e.revocation.method {
            RevocationMethod::Rfc7009 => "RFC 7009",
            RevocationMethod::Custom => "custom",
            RevocationMethod::Unsupported => "not supported",
        };
        let params: Vec<&str> = e.params.iter().map(|p| p.name.as_str()).collect();
        let _ = writeln!(
            s,
            "| [`{}`]({}.md) | {} | {} | {} | {} | {} |",
            e.name,
            e.name,
            e.display_name,
            e.refresh.behaviour.as_str(),
            rev,
            if params.is_empty() {
                "—".into()
            } else {
                params.join(", ")
            },
            e.last_checked
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/providers/` is generated from the catalog; this fails when it is stale.
    /// `UPDATE_DOCS=1` rewrites it.
    #[test]
    fn provider_docs_are_current() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/providers");
        let entries = crate::config::catalog::all();
        let mut want: Vec<(String, String)> = entries
            .iter()
            .map(|e| (format!("{}.md", e.name), markdown(e)))
            .collect();
        want.push(("README.md".into(), index(entries)));
        if std::env::var_os("UPDATE_DOCS").is_some() {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).unwrap();
            for (f, text) in &want {
                std::fs::write(format!("{dir}/{f}"), text).unwrap();
            }
        }
        let mut stale = Vec::new();
        for (f, text) in &want {
            if std::fs::read_to_string(format!("{dir}/{f}"))
                .ok()
                .as_deref()
                != Some(text)
            {
                stale.push(f.clone());
            }
        }
        let on_disk = std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
        assert!(
            stale.is_empty() && on_disk == want.len(),
            "docs/providers is stale ({stale:?}, {on_disk} files for {}): run UPDATE_DOCS=1 cargo nextest run -E 'test(/provider_docs/)'",
            want.len()
        );
    }
}
