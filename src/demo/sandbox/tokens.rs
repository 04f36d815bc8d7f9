//! The sandbox's token endpoint (code redemption and refresh, with rotation and reuse
//! detection) and its revocation endpoint.

use super::*;

#[derive(Deserialize)]
pub(super) struct TokenForm {
    pub(super) grant_type: Option<String>,
    pub(super) code: Option<String>,
    pub(super) redirect_uri: Option<String>,
    pub(super) code_verifier: Option<String>,
    pub(super) refresh_token: Option<String>,
    pub(super) scope: Option<String>,
}

pub(super) async fn token(
    State(s): State<Arc<Sandbox>>,
    headers: HeaderMap,
    form: Result<Form<ClientRequest<TokenForm>>, FormRejection>,
) -> Result<Response, OAuthError> {
    let f = s.server.client.authenticated(&headers, form)?;
    match f.grant_type.as_deref() {
        Some("authorization_code") => redeem_code(&s, &f),
        Some("refresh_token") => refresh(&s, &f),
        _ => Err(OAuthError::new(
            OAuthErrorCode::UnsupportedGrantType,
            "use authorization_code or refresh_token",
        )),
    }
}

pub(super) fn token_answer(access: String, refresh: String, scope: &str, ttl: i64) -> Response {
    token_json(json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": ttl,
        "refresh_token": refresh,
        "scope": scope,
    }))
}

pub(super) fn redeem_code(s: &Sandbox, f: &TokenForm) -> Result<Response, OAuthError> {
    let code = f
        .code
        .as_deref()
        .ok_or_else(|| OAuthError::new(OAuthErrorCode::InvalidRequest, "code is required"))?;
    let now = now();
    let code_hash = sha256_b64(code.as_bytes());
    let mut st = s.state();
    st.used_codes.retain(|_, u| u.expires_at > now);
    let Some(issued) = st.codes.take(code, now) else {
        // A second redemption: revoke what the first one produced.
        if let Some(UsedCode { grant: Some(g), .. }) = st.used_codes.remove(&code_hash) {
            st.tokens.revoke_grant(&g);
            s.save(&mut st.tokens);
        }
        return Err(OAuthError::new(
            OAuthErrorCode::InvalidGrant,
            "unknown, used or expired code",
        ));
    };
    // One attempt per code, whatever happens next.
    st.used_codes.insert(
        code_hash.clone(),
        UsedCode {
            grant: None,
            expires_at: now + CODE_TTL,
        },
    );
    issued
        .request
        .check_redemption(f.redirect_uri.as_deref(), f.code_verifier.as_deref())?;
    let scope = issued.request.scopes.join(" ");
    let grant = random_token(12);
    st.tokens.grants.insert(
        grant.clone(),
        Grant {
            subject: issued.subject,
            client_id: s.server.client.client_id.clone(),
            scope: scope.clone(),
        },
    );
    if let Some(u) = st.used_codes.get_mut(&code_hash) {
        u.grant = Some(grant.clone());
    }
    let (access, refresh) = st.tokens.issue(&grant, &scope, s.access_ttl, now);
    s.save(&mut st.tokens);
    Ok(token_answer(access, refresh, &scope, s.access_ttl))
}

pub(super) fn refresh(s: &Sandbox, f: &TokenForm) -> Result<Response, OAuthError> {
    let presented = f.refresh_token.as_deref().ok_or_else(|| {
        OAuthError::new(OAuthErrorCode::InvalidRequest, "refresh_token is required")
    })?;
    let now = now();
    let hash = sha256_b64(presented.as_bytes());
    let mut st = s.state();
    let Some(rt) = st.tokens.refresh.get(&hash).cloned() else {
        return Err(OAuthError::new(
            OAuthErrorCode::InvalidGrant,
            "unknown, revoked or expired refresh token",
        ));
    };
    if rt.expires_at <= now {
        return Err(OAuthError::new(
            OAuthErrorCode::InvalidGrant,
            "refresh token expired",
        ));
    }
    if rt.used {
        // Reuse of a rotated refresh token: someone holds a copy. End the whole grant.
        st.tokens.revoke_grant(&rt.grant);
        s.save(&mut st.tokens);
        return Err(OAuthError::new(
            OAuthErrorCode::InvalidGrant,
            "refresh token was already used (rotated); the grant is revoked",
        ));
    }
    let Some(grant) = st.tokens.grants.get(&rt.grant).cloned() else {
        return Err(OAuthError::new(
            OAuthErrorCode::InvalidGrant,
            "the grant is revoked",
        ));
    };
    if grant.client_id != s.server.client.client_id {
        return Err(OAuthError::new(
            OAuthErrorCode::InvalidGrant,
            "refresh token was issued to another client",
        ));
    }
    let scope = match f.scope.as_deref().map(str::trim).filter(|x| !x.is_empty()) {
        None => grant.scope.clone(),
        Some(asked) => {
            let granted: Vec<&str> = grant.scope.split(' ').collect();
            if asked
                .split(' ')
                .any(|x| !x.is_empty() && !granted.contains(&x))
            {
                return Err(OAuthError::new(
                    OAuthErrorCode::InvalidScope,
                    "a refresh cannot widen the granted scope",
                ));
            }
            asked.to_owned()
        }
    };
    if let Some(old) = st.tokens.refresh.get_mut(&hash) {
        old.used = true;
    }
    let (access, refresh) = st.tokens.issue(&rt.grant, &scope, s.access_ttl, now);
    s.save(&mut st.tokens);
    Ok(token_answer(access, refresh, &scope, s.access_ttl))
}

#[derive(Deserialize)]
pub(super) struct RevokeForm {
    pub(super) token: Option<String>,
}

/// RFC 7009. Revoking a refresh token ends its grant (and so every access token from it);
/// revoking an access token ends that token. Unknown tokens are answered 200 as the RFC says.
pub(super) async fn revoke(
    State(s): State<Arc<Sandbox>>,
    headers: HeaderMap,
    form: Result<Form<ClientRequest<RevokeForm>>, FormRejection>,
) -> Result<Response, OAuthError> {
    let f = s.server.client.authenticated(&headers, form)?;
    let token = f
        .token
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| OAuthError::new(OAuthErrorCode::InvalidRequest, "token is required"))?;
    let hash = sha256_b64(token.as_bytes());
    let mut st = s.state();
    let grant_of =
        |g: &str, st: &SandboxState| st.tokens.grants.get(g).map(|x| x.client_id.clone());
    if let Some(rt) = st.tokens.refresh.get(&hash).cloned() {
        if grant_of(&rt.grant, &st).is_some_and(|c| c != s.server.client.client_id) {
            return Err(OAuthError::new(
                OAuthErrorCode::InvalidRequest,
                "the token was issued to another client",
            ));
        }
        st.tokens.revoke_grant(&rt.grant);
        s.save(&mut st.tokens);
    } else if let Some(at) = st.tokens.access.get(&hash).cloned() {
        if grant_of(&at.grant, &st).is_some_and(|c| c != s.server.client.client_id) {
            return Err(OAuthError::new(
                OAuthErrorCode::InvalidRequest,
                "the token was issued to another client",
            ));
        }
        st.tokens.access.remove(&hash);
        s.save(&mut st.tokens);
    }
    Ok(token_json(json!({})))
}
