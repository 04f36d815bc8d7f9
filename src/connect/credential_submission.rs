//! Submitting a typed credential (`auth = "api_key"` / `"basic"` providers): the form's values
//! checked, the provider's `validation_url` asked (audited when it refuses or cannot be
//! reached), and the credential stored sealed with its audit row, the elicitation's completion
//! and its event — exactly as tokens from an OAuth callback.

use secrecy::SecretString;

use crate::config::AuthKind;
use crate::connect::Connect;
use crate::connect::complete::Grant;
use crate::connect::credentials::{Validation, secret_from_form, validate};
use crate::connect::identity::SignedInUser;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::connections::NewTokens;
use crate::db::elicitations::Elicitation;
use crate::error::{Error, Refusal, Result};
use crate::i18n::{Msg, Text};
use crate::providers::Provider;

/// The values the user typed. Secrets: never logged or echoed back.
pub struct TypedCredential<'a> {
    pub api_key: Option<&'a SecretString>,
    pub username: Option<&'a str>,
    pub password: Option<&'a SecretString>,
}

/// Why a typed credential was not stored; the form is shown again with `message`.
pub struct NotStored {
    pub message: Text,
    /// The provider could not be asked (a 502), rather than the credential being wrong (a 400).
    pub provider_unavailable: bool,
}

impl Connect {
    /// Checks and stores `typed` as the user's credential for elicitation `e` of `provider`.
    /// `Ok(Err(_))`: not stored, the user may try again.
    pub async fn submit_credential(
        &self,
        user: &SignedInUser,
        e: &Elicitation,
        provider: &Provider,
        typed: TypedCredential<'_>,
        request_id: Option<&str>,
    ) -> Result<std::result::Result<(), NotStored>> {
        let Some(settings) = &provider.credential else {
            return Err(Error::refused(
                Refusal::InvalidRequest,
                "This provider signs in with OAuth",
                "Go back to the connect page and choose Continue.",
            ));
        };
        let secret =
            match secret_from_form(settings.kind, typed.api_key, typed.username, typed.password) {
                Ok(secret) => secret,
                Err(m) => {
                    return Ok(Err(NotStored {
                        message: Text::Raw(m),
                        provider_unavailable: false,
                    }));
                }
            };
        match validate(&self.http, settings, &secret).await {
            Ok(()) => {}
            Err(Validation::Rejected(status)) => {
                let detail = format!("validation_url answered HTTP {status}");
                self.audit_credential(
                    user,
                    e,
                    AuditAction::CredentialValidationRefused,
                    &detail,
                    request_id,
                )
                .await;
                let key = if settings.kind == AuthKind::Basic {
                    "credential-refused-basic"
                } else {
                    "credential-refused-key"
                };
                return Ok(Err(NotStored {
                    message: Msg::new(key).arg("provider", &provider.display_name).into(),
                    provider_unavailable: false,
                }));
            }
            Err(Validation::Unavailable(why)) => {
                tracing::warn!(provider = %provider.name, elicitation_id = %e.id, error = %why, "credential validation call failed");
                self.audit_credential(
                    user,
                    e,
                    AuditAction::CredentialValidationUnavailable,
                    &why,
                    request_id,
                )
                .await;
                return Ok(Err(NotStored {
                    message: Msg::new("credential-unavailable")
                        .arg("provider", &provider.display_name)
                        .into(),
                    provider_unavailable: true,
                }));
            }
        }
        // An API key names no account at the provider: one per user, as before accounts.
        self.store_grant(
            user,
            e,
            &Grant {
                account_id: "",
                tokens: NewTokens {
                    access_token: &secret,
                    refresh_token: None,
                    token_type: settings.kind.as_str(),
                    expires_at: None,
                    scopes: &e.scopes,
                    account_label: None,
                },
                metadata: None,
            },
            Some(settings.kind.as_str()),
            request_id,
        )
        .await?;
        Ok(Ok(()))
    }

    async fn audit_credential(
        &self,
        user: &SignedInUser,
        e: &Elicitation,
        event: AuditAction,
        detail: &str,
        request_id: Option<&str>,
    ) {
        self.db
            .audit(AuditEvent {
                event,
                actor: Some(&user.subject),
                issuer: Some(&e.issuer),
                subject: Some(&e.subject),
                provider: Some(&e.provider),
                client_id: Some(&e.client_id),
                connection_id: None,
                elicitation_id: Some(&e.id),
                request_id,
                detail: Some(detail),
                organization: None,
            })
            .await;
    }
}
