//! Every catalog entry, pointed at a stub of itself through the operator's override keys
//! (`authorization_url`, `token_url`, `userinfo_url`, `revocation_url`, `issuer`): the
//! authorization redirect (parameters, PKCE, scopes and their separator), the code exchange
//! (client authentication, body encoding, extra parameters, where the token sits, expiry policy,
//! metadata), what is learned after it (label, metadata), a refresh per the entry's refresh
//! behaviour, and revocation per its method. No database: the provider code against HTTP.

use mcp_connect::config::catalog::TokenAuth;
use mcp_connect::config::catalog::{
    self, BodyFormat, Entry, RefreshBehaviour, RevocationAuth, RevocationMethod, WhenMissing,
};
use mcp_connect::providers::Provider;
use secrecy::ExposeSecret;

use crate::catalog_stub::{self, CODE, meta_value};

const REDIRECT: &str = "https://connect.example.test/oauth/p/callback";

async fn exercise(entry: &'static Entry) -> Result<(), String> {
    let stub = catalog_stub::start(entry).await;
    let base = stub.lock().unwrap().base.clone();
    let toml = format!(
        "kind = \"{}\"\nclient_id = \"client id/{}\"\nclient_secret = \"s3cret:{}\"\n{}",
        entry.name,
        entry.name,
        entry.name,
        catalog_stub::override_toml(entry, &base)
    );
    let pc: mcp_connect::config::ProviderConfig =
        toml::from_str(&toml).map_err(|e| format!("{e}\n{toml}"))?;
    let p = Provider::from_config("p", &pc);
    let http = mcp_connect::outbound::http::build(mcp_connect::config::ssrf::Policy::new(vec![
        mcp_connect::config::IpNet::parse("127.0.0.0/8").unwrap(),
    ]))
    .unwrap();
    let fail = |m: String| Err::<(), String>(format!("{}: {m}", entry.name));

    // Per-connection parameters: an example (or default, or first choice) for each.
    let given: mcp_connect::db::connections::ConnParams = p
        .asked_params
        .iter()
        .map(|s| {
            let v = s
                .example
                .clone()
                .or_else(|| s.default.clone())
                .or_else(|| s.choices.as_ref().and_then(|c| c.keys().next().cloned()))
                .unwrap();
            (s.name.clone(), v)
        })
        .collect();
    let params = p.resolve_params(&given).map_err(|e| e.to_string())?;
    let ep = p
        .endpoints(&http)
        .await
        .and_then(|e| e.for_connection(&p, &params))
        .map_err(|e| format!("{}: endpoints: {e:#}", entry.name))?;

    // The authorization redirect.
    let url = p
        .authorize_url(&ep, REDIRECT, "st", Some("challenge"), &p.scopes, false)
        .map_err(|e| e.to_string())?;
    let url = url::Url::parse(&url).unwrap();
    let q: std::collections::BTreeMap<String, String> = url.query_pairs().into_owned().collect();
    if !url.as_str().starts_with(&format!("{base}/authorize")) {
        return fail(format!("authorize URL {url}"));
    }
    let want_rt = !entry.authorize.omit.iter().any(|o| o == "response_type");
    if (q.get("response_type").map(String::as_str) == Some("code")) != want_rt
        || q.get("client_id").map(String::as_str) != Some(p.client_id.as_str())
        || q.get("redirect_uri").map(String::as_str) != Some(REDIRECT)
        || q.get("state").map(String::as_str) != Some("st")
    {
        return fail(format!("standard authorize parameters: {q:?}"));
    }
    let scopes = entry.scopes.default.join(&entry.scopes.separator);
    if !scopes.is_empty() && q.get(&entry.authorize.scope_param) != Some(&scopes) {
        return fail(format!("scopes in {}: {q:?}", entry.authorize.scope_param));
    }
    for (k, v) in &entry.authorize.params {
        if q.get(k) != Some(v) {
            return fail(format!("authorize parameter {k}: {q:?}"));
        }
    }
    // Adding another account: the catalog's account picker, in place of same-named parameters.
    let add = p
        .authorize_url(&ep, REDIRECT, "st", Some("challenge"), &p.scopes, true)
        .map_err(|e| e.to_string())?;
    let added: Vec<(String, String)> = url::Url::parse(&add)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    for (k, v) in &entry.account.select_params {
        let sent: Vec<&String> = added
            .iter()
            .filter(|(x, _)| x == k)
            .map(|(_, v)| v)
            .collect();
        if sent != [v] {
            return fail(format!("account picker {k}: {added:?}"));
        }
    }
    // PKCE is the caller's choice (flow.rs sends a challenge only when `pkce`); the redirect
    // carries what it is given.
    if q.get("code_challenge").map(String::as_str) != Some("challenge") {
        return fail("code_challenge".into());
    }

    // The code exchange.
    let verifier = entry.authorize.pkce.then_some("verifier");
    let t = p
        .exchange_code(&http, &ep, CODE, REDIRECT, verifier)
        .await
        .map_err(|e| format!("{}: exchange: {}", entry.name, e.summary()))?;
    let seen = stub.lock().unwrap().seen.last().cloned().unwrap();
    if !t.access_token.expose_secret().starts_with("at-") {
        return fail("access token not parsed".into());
    }
    check_client_auth(entry, &p, &seen)?;
    if seen.fields.get("grant_type").map(String::as_str) != Some("authorization_code")
        || seen.fields.get("code").map(String::as_str) != Some(CODE)
        || seen.fields.get("redirect_uri").map(String::as_str) != Some(REDIRECT)
        || seen.fields.get("code_verifier").map(String::as_str) != verifier
    {
        return fail(format!("code exchange fields: {:?}", seen.fields.keys()));
    }
    for (k, v) in &entry.token.params {
        if seen.fields.get(k) != Some(v) {
            return fail(format!("token parameter {k}"));
        }
    }
    if seen.json_body != (entry.token.body == BodyFormat::Json) {
        return fail("token request body encoding".into());
    }
    let want_expiry = match entry.token.expiry.when_missing {
        WhenMissing::Assume => entry.token.expiry.assume_seconds,
        WhenMissing::Never if entry.refresh.behaviour == RefreshBehaviour::None => None,
        WhenMissing::Never => Some(3600),
    };
    if t.expires_in != want_expiry {
        return fail(format!("expires_in {:?}", t.expires_in));
    }
    if t.refresh_token.is_some() != (entry.refresh.behaviour != RefreshBehaviour::None) {
        return fail("refresh token presence".into());
    }

    // What is learned after the grant.
    let redirect_query = entry
        .metadata
        .from_redirect
        .iter()
        .map(|(name, param)| (param.clone(), meta_value(name)))
        .collect();
    let mcp_connect::providers::tokens::Learned {
        label,
        metadata,
        account_id,
    } = p.learn(&http, &ep, &t, &redirect_query).await;
    let mut want: Vec<&String> = entry.metadata.from_token.keys().collect();
    want.extend(entry.metadata.from_redirect.keys());
    if ep.userinfo_url.is_some() {
        want.extend(entry.metadata.from_userinfo.keys());
    }
    for (f, u) in entry.metadata.fetch.iter().zip(&ep.metadata_urls) {
        if u.is_some() {
            want.extend(f.fields.keys());
        }
    }
    for name in want {
        if metadata.get(name).and_then(|v| v.as_str()) != Some(meta_value(name).as_str()) {
            return fail(format!("metadata {name}: {metadata:?}"));
        }
    }
    let labelled = (ep.userinfo_url.is_some() && !entry.account.label_fields.is_empty())
        || entry.account.label_from_token.is_some();
    let want_label = entry
        .metadata
        .from_token
        .iter()
        .find(|(_, p)| Some(*p) == entry.account.label_from_token.as_ref())
        .filter(|_| ep.userinfo_url.is_none() || entry.account.label_fields.is_empty())
        .map(|(name, _)| meta_value(name))
        .unwrap_or_else(|| meta_value("label"));
    if labelled && label.as_deref() != Some(want_label.as_str()) {
        return fail(format!("account label {label:?}"));
    }
    // The account id, where the entry names one: the stub answers it (or, on a path another
    // field also fills, that field's value).
    let a = &entry.account;
    let want_id = match (a.id_fields.first(), &a.id_from_token) {
        (Some(f), _) if ep.userinfo_url.is_some() => Some(
            entry
                .metadata
                .from_userinfo
                .iter()
                .find(|(_, path)| *path == f)
                .map(|(name, _)| meta_value(name))
                .or_else(|| (a.label_fields.first() == Some(f)).then(|| meta_value("label")))
                .unwrap_or_else(|| meta_value("account_id")),
        ),
        (_, Some(path)) => Some(
            entry
                .metadata
                .from_token
                .iter()
                .find(|(_, p)| *p == path)
                .map(|(name, _)| meta_value(name))
                .unwrap_or_else(|| meta_value("account_id")),
        ),
        _ => None,
    };
    if account_id != want_id || p.names_accounts(&ep) != want_id.is_some() {
        return fail(format!("account id {account_id:?}, want {want_id:?}"));
    }

    // A refresh, per the entry's behaviour.
    let mut rt = t.refresh_token;
    if let Some(old) = &rt {
        let r = p
            .refresh(&http, &ep, old)
            .await
            .map_err(|e| format!("{}: refresh: {}", entry.name, e.summary()))?;
        let seen = stub.lock().unwrap().seen.last().cloned().unwrap();
        check_client_auth(entry, &p, &seen)?;
        let want_path =
            catalog_stub::path_of(&entry.endpoints.refresh_url).unwrap_or_else(|| "/token".into());
        if seen.path != want_path
            || seen.fields.get("grant_type").map(String::as_str) != Some("refresh_token")
            || seen.fields.get("refresh_token").map(String::as_str) != Some(old.expose_secret())
        {
            return fail(format!(
                "refresh request {} {:?}",
                seen.path,
                seen.fields.keys()
            ));
        }
        for (k, v) in &entry.token.refresh_params {
            if seen.fields.get(k) != Some(v) {
                return fail(format!("refresh parameter {k}"));
            }
        }
        let rotated = r.refresh_token.is_some();
        if rotated != (entry.refresh.behaviour == RefreshBehaviour::Rotating) {
            return fail(format!("rotation: new refresh token {rotated}"));
        }
        if rotated {
            rt = r.refresh_token;
        }
    }

    // Revocation, per method.
    let before = stub.lock().unwrap().seen.len();
    let out = p
        .revoke_grant(&http, &ep, rt.as_ref(), Some(&t.access_token), &metadata)
        .await;
    let calls: Vec<catalog_stub::Seen> = stub.lock().unwrap().seen[before..].to_vec();
    let r = &entry.revocation;
    match (r.method, &ep.revocation_url) {
        (RevocationMethod::Unsupported, _) => {
            if !calls.is_empty() || out.access_token != "not_supported" {
                return fail(format!("unsupported revocation sent {} calls", calls.len()));
            }
        }
        (_, None) => return fail("revocation endpoint lost".into()),
        (RevocationMethod::Rfc7009, Some(_)) => {
            let want = usize::from(rt.is_some()) + 1;
            if calls.len() != want || out.access_token != "revoked" {
                return fail(format!("rfc7009: {} calls, {out:?}", calls.len()));
            }
            for c in &calls {
                check_client_auth(entry, &p, c)?;
                if c.method != axum::http::Method::POST || !c.fields.contains_key("token") {
                    return fail("rfc7009 request".into());
                }
            }
            if rt.is_some()
                && calls[0].fields.get("token_type_hint").map(String::as_str)
                    != Some("refresh_token")
            {
                return fail("rfc7009: the refresh token goes first".into());
            }
        }
        (RevocationMethod::Custom, Some(_)) => {
            let [c] = calls.as_slice() else {
                return fail(format!("custom revocation: {} calls", calls.len()));
            };
            if out.access_token != "revoked" || !out.problems.is_empty() {
                return fail(format!("custom revocation outcome {out:?}"));
            }
            let want_method = r.http_method.unwrap_or_default().as_str();
            if c.method.as_str() != want_method {
                return fail(format!("custom revocation method {}", c.method));
            }
            let want_path = catalog_stub::path_of(&r.url)
                .unwrap()
                .replace("{client_id}", &url_enc(&p.client_id));
            if c.path != want_path {
                return fail(format!(
                    "custom revocation path {} (want {want_path})",
                    c.path
                ));
            }
            let token = match r.token {
                Some(catalog::WhichToken::RefreshToken) => {
                    rt.as_ref().unwrap().expose_secret().to_owned()
                }
                _ => t.access_token.expose_secret().to_owned(),
            };
            match r.auth {
                Some(RevocationAuth::Bearer) if c.bearer().as_deref() != Some(token.as_str()) => {
                    return fail("custom revocation bearer".into());
                }
                Some(RevocationAuth::ClientBasic)
                    if c.basic_auth()
                        != Some((
                            url_enc(&p.client_id),
                            url_enc(&format!("s3cret:{}", entry.name)),
                        )) =>
                {
                    return fail(format!("custom revocation basic auth {:?}", c.basic_auth()));
                }
                Some(RevocationAuth::ClientPost)
                    if c.fields.get("client_id") != Some(&p.client_id) =>
                {
                    return fail("custom revocation client_id".into());
                }
                _ => {}
            }
            if let Some(tp) = &r.token_param {
                if c.fields.get(tp) != Some(&token) {
                    return fail(format!("custom revocation {tp}"));
                }
            }
            if c.json_body != (r.body == Some(BodyFormat::Json)) {
                return fail("custom revocation body encoding".into());
            }
            for (k, v) in &r.extra {
                let want = v.replace("{client_id}", &p.client_id);
                let want = entry.metadata.from_token.keys().fold(want, |w, m| {
                    w.replace(&format!("{{metadata.{m}}}"), &meta_value(m))
                });
                if c.fields.get(k) != Some(&want) {
                    return fail(format!("custom revocation field {k}"));
                }
            }
        }
    }
    Ok(())
}

fn url_enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn check_client_auth(entry: &Entry, p: &Provider, seen: &catalog_stub::Seen) -> Result<(), String> {
    let secret = format!("s3cret:{}", entry.name);
    match p.token_auth {
        TokenAuth::Basic => {
            if seen.basic_auth() != Some((url_enc(&p.client_id), url_enc(&secret)))
                || seen.fields.contains_key("client_secret")
            {
                return Err(format!(
                    "{}: expected HTTP Basic client authentication at {}",
                    entry.name, seen.path
                ));
            }
        }
        TokenAuth::Post => {
            if seen.fields.get("client_secret") != Some(&secret)
                || seen.fields.get("client_id") != Some(&p.client_id)
                || seen.headers.contains_key("authorization")
            {
                return Err(format!(
                    "{}: expected client credentials in the body at {}",
                    entry.name, seen.path
                ));
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_catalog_entry_works_against_a_stub_of_itself_through_the_override_keys() {
    let entries = catalog::all();
    assert!(entries.len() >= 40);
    let results = futures_util::future::join_all(entries.iter().map(exercise)).await;
    let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(
        failures.is_empty(),
        "{} entries failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn an_overridden_provider_never_calls_catalog_hosts_that_were_not_moved() {
    // Xero's /connections lives on api.xero.com: moving only the identity endpoints must not
    // send the new access token there.
    let pc: mcp_connect::config::ProviderConfig = toml::from_str(
        "kind = \"xero\"\nclient_id = \"c\"\nauthorization_url = \"http://127.0.0.1:9/a\"\ntoken_url = \"http://127.0.0.1:9/t\"\nuserinfo_url = \"http://127.0.0.1:9/u\"",
    )
    .unwrap();
    let p = Provider::from_config("xero", &pc);
    let http = mcp_connect::outbound::http::build(mcp_connect::config::ssrf::Policy::new(vec![
        mcp_connect::config::IpNet::parse("127.0.0.0/8").unwrap(),
    ]))
    .unwrap();
    let ep = p.endpoints(&http).await.unwrap();
    assert_eq!(ep.metadata_urls, vec![None]);
    // The revocation endpoint shared the token endpoint's host: it moved with it.
    assert_eq!(
        ep.revocation_url.as_deref(),
        Some("http://127.0.0.1:9/connect/revocation")
    );
    // Without overrides, the catalog's hosts are used.
    let pc: mcp_connect::config::ProviderConfig =
        toml::from_str("kind = \"xero\"\nclient_id = \"c\"").unwrap();
    let ep = Provider::from_config("xero", &pc)
        .endpoints(&http)
        .await
        .unwrap();
    assert_eq!(
        ep.metadata_urls,
        vec![Some("https://api.xero.com/connections".to_owned())]
    );
    assert_eq!(ep.token_url, "https://identity.xero.com/connect/token");
}
