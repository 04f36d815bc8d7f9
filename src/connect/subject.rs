//! The subject an API request is about, and its proof: a `subject_token` (the MCP access token
//! the user presented to the MCP server), checked at the identity issuer.

use crate::config::ClientConfig;
use crate::connect::Connect;
use crate::connect::identity::{SubjectTokenError, SubjectTokenRefusal};
use crate::db::audit::{AuditAction, AuditEvent};
use crate::error::{Error, Result};
use crate::ids::Subject;

/// The longest `subject_token` accepted, in bytes.
pub const MAX_SUBJECT_TOKEN_BYTES: usize = 8192;

/// The header that carries a `subject_token` where there is no JSON body (`GET` and `DELETE
/// /v1/connections`).
pub const SUBJECT_TOKEN_HEADER: &str = "subject-token";

/// Who an API request is about: the subject, and — only when a `subject_token` proved it —
/// the organisation the identity issuer puts them in. A bare `subject` never names one.
#[derive(Debug, Clone)]
pub struct Principal {
    pub subject: Subject,
    pub membership: Option<crate::config::Membership>,
}

impl Connect {
    /// As [`Self::resolve_principal`], for callers that need only the subject.
    pub async fn resolve_subject(
        &self,
        client: &ClientConfig,
        subject: Option<&str>,
        token: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<Subject> {
        Ok(self
            .resolve_principal(client, subject, token, request_id)
            .await?
            .subject)
    }

    /// The subject an API request is about. With a `subject_token`, the token proves it (its
    /// `sub`, checked at the identity issuer) and an asserted `subject` must be the same; without
    /// one, the asserted `subject` is taken as is, unless the client must send a token. Every
    /// refusal is a 401 `invalid_subject_token` with an audit row.
    pub async fn resolve_principal(
        &self,
        client: &ClientConfig,
        subject: Option<&str>,
        token: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<Principal> {
        let Some(token) = token else {
            if client.require_subject_token {
                return Err(self
                    .refuse_subject_token(
                        client,
                        subject,
                        SubjectTokenRefusal::Missing,
                        SubjectTokenRefusal::Missing.message(),
                        request_id,
                    )
                    .await);
            }
            let subject = subject.ok_or_else(|| Error::invalid("give subject or subject_token"))?;
            return Ok(Principal {
                subject: Subject::parse(subject).map_err(|e| Error::invalid(e.to_string()))?,
                membership: None,
            });
        };
        if let Some(s) = subject {
            Subject::parse(s).map_err(|e| Error::invalid(e.to_string()))?;
        }
        if token.is_empty() || token.len() > MAX_SUBJECT_TOKEN_BYTES || !token.is_ascii() {
            return Err(self
                .refuse_subject_token(
                    client,
                    subject,
                    SubjectTokenRefusal::Malformed,
                    "the subject_token must be 1 to 8192 ASCII characters",
                    request_id,
                )
                .await);
        }
        let looks_like_jwt = token.split('.').count() == 3;
        let checked = match (
            &client.subject_token_audience,
            client.subject_token_introspection,
        ) {
            // Boxed: a key set fetch or an introspection call makes these futures large, and
            // a request with a bare `subject` would otherwise carry their size too.
            (Some(aud), false) => Box::pin(self.identity.verify_access_token(token, aud)).await,
            (Some(aud), true) if looks_like_jwt => {
                Box::pin(self.identity.verify_access_token(token, aud)).await
            }
            (aud, true) => {
                Box::pin(self.identity.introspect_access_token(token, aud.as_deref())).await
            }
            (None, false) => {
                return Err(Error::invalid(
                    "this API client accepts no subject_token: its operator sets subject_token_audience or subject_token_introspection",
                ));
            }
        };
        let (proven, membership) = match checked {
            Ok(p) => (p.subject, p.membership),
            Err(SubjectTokenError::Refused(reason, message)) => {
                return Err(self
                    .refuse_subject_token(client, subject, reason, message, request_id)
                    .await);
            }
            Err(SubjectTokenError::Unavailable(e)) => {
                tracing::warn!(error = format!("{e:#}"), "cannot check a subject_token");
                return Err(Error::Unavailable(e));
            }
        };
        let proven = Subject::parse(&proven).map_err(|_| {
            Error::InvalidSubjectToken("the subject_token's sub is not a usable subject".into())
        })?;
        if let Some(s) = subject {
            if proven != s {
                return Err(self
                    .refuse_subject_token(
                        client,
                        subject,
                        SubjectTokenRefusal::OtherSubject,
                        SubjectTokenRefusal::OtherSubject.message(),
                        request_id,
                    )
                    .await);
            }
        }
        Ok(Principal {
            subject: proven,
            membership,
        })
    }

    async fn refuse_subject_token(
        &self,
        client: &ClientConfig,
        subject: Option<&str>,
        reason: SubjectTokenRefusal,
        message: &str,
        request_id: Option<&str>,
    ) -> Error {
        tracing::warn!(target: "security", client_id = %client.id, reason = reason.as_str(), "subject_token refused");
        // Boxed: a refusal is the cold path, and a write's future is large.
        Box::pin(self.db.audit(AuditEvent {
            actor: Some(&client.id),
            issuer: Some(self.identity.issuer()),
            subject,
            client_id: Some(&client.id),
            request_id,
            detail: Some(reason.as_str()),
            ..AuditEvent::new(AuditAction::SubjectTokenRefused)
        }))
        .await;
        Error::InvalidSubjectToken(message.to_owned())
    }
}
