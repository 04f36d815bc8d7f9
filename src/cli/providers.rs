//! `mcp-connect providers list|show`: the catalog and the configured providers as an operator
//! sees them.

use super::*;

/// `providers show` for a provider whose users type a key (or a username and password): what
/// matters there is the header and the validation call, not OAuth endpoints.
pub(super) fn credential_provider_show(
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
        for (org, client_id) in p.organization_apps() {
            facts.push(docs::Fact {
                label: "Organisation app",
                value: format!(
                    "{org:?}: client_id {client_id}; register the same redirect URI ({redirect}) in that organisation's app"
                ),
            });
        }
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
