//! Checking a `subject_token` (the user's MCP access token, presented by an API client as proof
//! of the subject) at the identity issuer: as a JWT against its JWKS, or by introspection.

use super::*;

impl Identity {
    /// Checks a `subject_token` (the user's MCP access token as a JWT) against the issuer's
    /// JWKS: signature, `iss`, `exp` and that `aud` names `audience`. Returns its `sub` and the
    /// organisation its claims name.
    pub async fn verify_access_token(
        &self,
        token: &str,
        audience: &str,
    ) -> Result<Proven, SubjectTokenError> {
        use jsonwebtoken::errors::ErrorKind;
        let refused = SubjectTokenError::Refused;
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            refused(
                SubjectTokenRefusal::Malformed,
                "the subject_token is not a JWT",
            )
        })?;
        if !ALLOWED_ALGS.contains(&header.alg) {
            return Err(SubjectTokenRefusal::Algorithm.into());
        }
        if has_critical_extensions(token) {
            return Err(refused(
                SubjectTokenRefusal::Malformed,
                "the subject_token names critical header extensions (crit) that are not understood",
            ));
        }
        if let Some(want) = &self.config.access_token_typ {
            if !header.typ.as_deref().is_some_and(|t| typ_is(t, want)) {
                return Err(SubjectTokenRefusal::Type.into());
            }
        }
        let key = match self.decoding_key(header.kid.as_deref()).await {
            Ok(k) => k,
            Err(e) if format!("{e:#}").contains("no key") => {
                return Err(SubjectTokenRefusal::Signature.into());
            }
            Err(e) => return Err(SubjectTokenError::Unavailable(e)),
        };
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = 5;
        validation.validate_nbf = true;
        let data =
            jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation).map_err(|e| {
                let reason = match e.kind() {
                    ErrorKind::ExpiredSignature => SubjectTokenRefusal::Expired,
                    ErrorKind::InvalidAudience => SubjectTokenRefusal::Audience,
                    ErrorKind::InvalidIssuer => SubjectTokenRefusal::Issuer,
                    ErrorKind::InvalidSignature => SubjectTokenRefusal::Signature,
                    ErrorKind::ImmatureSignature => SubjectTokenRefusal::NotYetValid,
                    ErrorKind::MissingRequiredClaim(_) => SubjectTokenRefusal::Claims,
                    _ => SubjectTokenRefusal::Malformed,
                };
                SubjectTokenError::from(reason)
            })?;
        self.proven(&data.claims)
    }

    /// Checks a `subject_token` by RFC 7662 introspection at the identity issuer, authenticated
    /// with this service's identity client credentials. It must be active, from this issuer (when
    /// the answer names one), unexpired and, with `audience`, for that audience. Returns its `sub`.
    pub async fn introspect_access_token(
        &self,
        token: &str,
        audience: Option<&str>,
    ) -> Result<Proven, SubjectTokenError> {
        let m = self
            .metadata()
            .await
            .map_err(SubjectTokenError::Unavailable)?;
        let endpoint = m.introspection_endpoint.as_deref().ok_or_else(|| {
            SubjectTokenError::Unavailable(anyhow!(
                "the identity issuer publishes no introspection_endpoint"
            ))
        })?;
        let mut body =
            serde_urlencoded::to_string([("token", token), ("token_type_hint", "access_token")])
                .map_err(|e| SubjectTokenError::Unavailable(e.into()))?;
        let mut req = self
            .http
            .post(endpoint)
            .header(reqwest::header::ACCEPT, "application/json")
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            );
        let id: String =
            url::form_urlencoded::byte_serialize(self.config.client_id.as_bytes()).collect();
        match &self.config.client_secret {
            Some(secret) => {
                let sec: String =
                    url::form_urlencoded::byte_serialize(secret.expose_secret().as_bytes())
                        .collect();
                req = req.basic_auth(id, Some(sec));
            }
            None => body.push_str(&format!("&client_id={id}")),
        }
        let resp = req
            .body(body)
            .send()
            .await
            .context("calling the identity introspection endpoint")
            .map_err(SubjectTokenError::Unavailable)?;
        let status = resp.status();
        let bytes = read_limited(resp, MAX_RESPONSE_BYTES)
            .await
            .context("reading the introspection response")
            .map_err(SubjectTokenError::Unavailable)?;
        if !status.is_success() {
            return Err(SubjectTokenError::Unavailable(anyhow!(
                "identity introspection endpoint answered HTTP {status}"
            )));
        }
        let v: Map<String, Value> = serde_json::from_slice(&bytes)
            .context("the introspection response is not a JSON object")
            .map_err(SubjectTokenError::Unavailable)?;
        if v.get("active") != Some(&Value::Bool(true)) {
            return Err(SubjectTokenRefusal::Inactive.into());
        }
        if let Some(iss) = v.get("iss").and_then(Value::as_str) {
            if iss != self.config.issuer {
                return Err(SubjectTokenRefusal::Issuer.into());
            }
        }
        if let Some(exp) = v.get("exp").and_then(Value::as_i64) {
            if exp < crate::time::now() {
                return Err(SubjectTokenRefusal::Expired.into());
            }
        }
        if let Some(want) = audience {
            let ok = match v.get("aud") {
                Some(Value::String(a)) => a == want,
                Some(Value::Array(a)) => a.iter().any(|x| x.as_str() == Some(want)),
                _ => false,
            };
            if !ok {
                return Err(SubjectTokenRefusal::Audience.into());
            }
        }
        self.proven(&v)
    }

    /// What a checked token's claims (a JWT's or an introspection answer's) prove: its `sub`,
    /// and the organisation its claims put the user in.
    fn proven(&self, claims: &Map<String, Value>) -> Result<Proven, SubjectTokenError> {
        Ok(Proven {
            subject: subject_of(claims)?,
            membership: self.config.membership(claims),
        })
    }
}

/// What a checked `subject_token` proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proven {
    pub subject: String,
    /// The user's organisation, from the token's claims (`[identity] organization_claim`).
    pub membership: Option<crate::config::Membership>,
}

/// The `sub` of a checked token's claims (a JWT's or an introspection answer's).
fn subject_of(claims: &Map<String, Value>) -> Result<String, SubjectTokenError> {
    claims
        .get("sub")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or(SubjectTokenError::Refused(
            SubjectTokenRefusal::Claims,
            "the subject_token has no sub",
        ))
}
