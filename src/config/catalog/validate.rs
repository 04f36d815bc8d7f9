//! What serde cannot check in a catalog entry: URLs, patterns, and that its parts agree.

use super::*;

/// Checks what the types cannot: URLs, dates, patterns, consistency. `Err((key, message))`.
pub fn validate(e: &Entry) -> Result<(), (String, String)> {
    let fail = |k: &str, m: String| Err((k.to_owned(), m));
    if e.name.is_empty()
        || !e
            .name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return fail("name", "only lower-case letters, digits and -".into());
    }
    if e.display_name.trim().is_empty() {
        return fail("display_name", "must not be empty".into());
    }
    if time::Date::parse(
        &e.last_checked,
        time::macros::format_description!("[year]-[month]-[day]"),
    )
    .is_err()
    {
        return fail(
            "last_checked",
            format!("{:?} is not a YYYY-MM-DD date", e.last_checked),
        );
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, p) in e.params.iter().enumerate() {
        let key = format!("params[{i}]");
        if !is_placeholder_name(&p.name) || p.name == "client_id" {
            return fail(
                &format!("{key}.name"),
                format!("{:?}: lower-case letters, digits and _", p.name),
            );
        }
        if names.contains(&p.name.as_str()) {
            return fail(&format!("{key}.name"), format!("{:?} twice", p.name));
        }
        names.push(&p.name);
        match (&p.pattern, &p.choices) {
            (Some(pat), None) => {
                if !pat.starts_with('^') || !pat.ends_with('$') {
                    return fail(&format!("{key}.pattern"), "must be anchored (^...$)".into());
                }
                let re = regex::Regex::new(pat)
                    .map_err(|err| (format!("{key}.pattern"), err.to_string()))?;
                for (k, v) in [("example", &p.example), ("default", &p.default)] {
                    if let Some(v) = v {
                        if !re.is_match(v) {
                            return fail(
                                &format!("{key}.{k}"),
                                format!("{v:?} does not match the pattern"),
                            );
                        }
                    }
                }
            }
            (None, Some(choices)) => {
                if choices.is_empty() {
                    return fail(&format!("{key}.choices"), "must not be empty".into());
                }
                if let Some(d) = &p.default {
                    if !choices.contains_key(d) {
                        return fail(&format!("{key}.default"), format!("{d:?} is no choice"));
                    }
                }
            }
            _ => {
                return fail(&key, "give exactly one of `pattern` and `choices`".into());
            }
        }
    }
    let check_template = |key: &str, url: &str, extra: &[&str]| -> Result<(), (String, String)> {
        for ph in placeholders(url) {
            if !names.contains(&ph) && !extra.contains(&ph) {
                return Err((
                    key.to_owned(),
                    format!("{{{ph}}} is not a declared parameter"),
                ));
            }
        }
        // With every placeholder filled by a plain label, the URL must be a https URL.
        let mut filled = url.to_owned();
        for ph in placeholders(url) {
            filled = filled.replace(&format!("{{{ph}}}"), "x");
        }
        match url::Url::parse(&filled) {
            Ok(u) if u.scheme() == "https" && u.host_str().is_some() => Ok(()),
            _ => Err((key.to_owned(), format!("{url:?} is not an https URL"))),
        }
    };
    let ep = &e.endpoints;
    for (k, u) in [
        ("endpoints.authorization_url", &ep.authorization_url),
        ("endpoints.token_url", &ep.token_url),
        ("endpoints.refresh_url", &ep.refresh_url),
        ("endpoints.userinfo_url", &ep.userinfo_url),
        ("endpoints.issuer", &ep.issuer),
    ] {
        if let Some(u) = u {
            check_template(k, u, &[])?;
        }
    }
    if let Some(base) = &e.api.base_url {
        let meta: Vec<&str> = e.metadata_names().collect();
        // A metadata value at the very start is a whole origin (`{instance_url}`).
        let checked = match placeholders(base).first() {
            Some(first) if base.starts_with(&format!("{{{first}}}")) && meta.contains(first) => {
                base.replacen(&format!("{{{first}}}"), "https://x", 1)
            }
            _ => base.clone(),
        };
        check_template("api.base_url", &checked, &meta)?;
        if checked.contains('?') || checked.contains('#') {
            return fail("api.base_url", "no query or fragment".into());
        }
    }
    if ep.authorization_url.is_some() != ep.token_url.is_some() {
        return fail(
            "endpoints",
            "give both authorization_url and token_url, or neither (a generic entry)".into(),
        );
    }
    if e.auth == AuthKind::Oidc && !e.is_generic() {
        return fail(
            "auth",
            "an oidc entry takes its endpoints from discovery".into(),
        );
    }
    for p in &e.params {
        let used = [
            &ep.authorization_url,
            &ep.token_url,
            &ep.refresh_url,
            &ep.userinfo_url,
            &e.revocation.url,
        ]
        .iter()
        .filter_map(|u| u.as_deref())
        .any(|u| placeholders(u).contains(&p.name.as_str()));
        if !used {
            return fail("params", format!("{:?} is used by no endpoint", p.name));
        }
    }
    if e.scopes.separator.is_empty() || e.scopes.separator.len() > 1 {
        return fail("scopes.separator", "one character".into());
    }
    for s in &e.scopes.default {
        if s.is_empty() || s.chars().any(char::is_whitespace) {
            return fail("scopes.default", format!("{s:?} is no scope"));
        }
    }
    for k in e.authorize.params.keys() {
        if matches!(
            k.as_str(),
            "client_id" | "redirect_uri" | "state" | "code_challenge" | "code_challenge_method"
        ) || k == &e.authorize.scope_param
        {
            return fail(
                &format!("authorize.params.{k}"),
                "is set by mcp-connect itself".into(),
            );
        }
    }
    for o in &e.authorize.omit {
        if !matches!(o.as_str(), "response_type") {
            return fail("authorize.omit", format!("{o:?}: only response_type"));
        }
    }
    if e.authorize.scope_param.is_empty() {
        return fail("authorize.scope_param", "must not be empty".into());
    }
    match (e.token.expiry.when_missing, e.token.expiry.assume_seconds) {
        (WhenMissing::Assume, Some(s)) if s > 0 => {}
        (WhenMissing::Assume, _) => {
            return fail(
                "token.expiry.assume_seconds",
                "a positive number of seconds is required with when_missing = \"assume\"".into(),
            );
        }
        (WhenMissing::Never, Some(_)) => {
            return fail(
                "token.expiry.assume_seconds",
                "only with when_missing = \"assume\"".into(),
            );
        }
        (WhenMissing::Never, None) => {}
    }
    if e.token.body == BodyFormat::None {
        return fail("token.body", "form or json".into());
    }
    if let Some(p) = &e.token.path {
        if p.is_empty() {
            return fail("token.path", "must not be empty".into());
        }
    }
    let r = &e.revocation;
    match r.method {
        RevocationMethod::Rfc7009 => {
            if let Some(u) = &r.url {
                check_template("revocation.url", u, &["client_id"])?;
            } else if !e.is_generic() {
                return fail(
                    "revocation.url",
                    "required with method = \"rfc7009\"".into(),
                );
            }
            if r.auth.is_some()
                || r.token.is_some()
                || r.body.is_some()
                || r.token_param.is_some()
                || r.http_method.is_some()
                || !r.extra.is_empty()
            {
                return fail(
                    "revocation",
                    "rfc7009 takes only url, manual_url and note".into(),
                );
            }
        }
        RevocationMethod::Custom => {
            let Some(u) = &r.url else {
                return fail("revocation.url", "required with method = \"custom\"".into());
            };
            check_template("revocation.url", u, &["client_id"])?;
            if r.auth.is_none() {
                return fail(
                    "revocation.auth",
                    "required with method = \"custom\"".into(),
                );
            }
            if r.token.is_none() {
                return fail(
                    "revocation.token",
                    "required with method = \"custom\"".into(),
                );
            }
            let body = r.body.unwrap_or_default();
            if body == BodyFormat::None && (r.token_param.is_some() || !r.extra.is_empty()) {
                return fail("revocation.body", "\"none\" carries no fields".into());
            }
            if r.token_param.is_none()
                && r.auth != Some(RevocationAuth::Bearer)
                && r.extra.is_empty()
            {
                return fail(
                    "revocation.token_param",
                    "required unless the token goes as a bearer token or `extra` names the grant"
                        .into(),
                );
            }
            for (k, v) in &r.extra {
                let ok = placeholders(v).iter().all(|p| {
                    *p == "client_id"
                        || p.strip_prefix("metadata.").is_some_and(|m| {
                            e.metadata.from_token.contains_key(m)
                                || e.metadata.from_redirect.contains_key(m)
                                || e.metadata.from_userinfo.contains_key(m)
                        })
                });
                if !ok {
                    return fail(
                        &format!("revocation.extra.{k}"),
                        "only {client_id} and {metadata.NAME} of a declared metadata field".into(),
                    );
                }
            }
        }
        RevocationMethod::Unsupported => {
            if r.url.is_some() || r.auth.is_some() || r.token.is_some() {
                return fail(
                    "revocation",
                    "unsupported takes only manual_url and note".into(),
                );
            }
        }
    }
    if let Some(u) = &r.manual_url {
        check_template("revocation.manual_url", u, &[])?;
    }
    for (i, f) in e.metadata.fetch.iter().enumerate() {
        check_template(&format!("metadata.fetch[{i}].url"), &f.url, &[])?;
        if f.fields.is_empty() {
            return fail(
                &format!("metadata.fetch[{i}].fields"),
                "must not be empty".into(),
            );
        }
    }
    for (i, d) in e.docs.iter().enumerate() {
        check_template(&format!("docs[{i}].url"), &d.url, &[])?;
    }
    if let Some(u) = &e.setup.console_url {
        check_template("setup.console_url", u, &[])?;
    }
    Ok(())
}
