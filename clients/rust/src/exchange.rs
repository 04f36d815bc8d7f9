//! RFC 8693 token exchange (`POST /oauth2/token`): what [`Client::token`] asks with a
//! `subject_token`, asked the standard way. The API key is the client's secret, sent with its
//! `[[clients]] id` as HTTP Basic credentials.

use serde::Deserialize;

use crate::{Client, Error};

pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// The user's MCP access token, to exchange for their token at `provider`.
#[derive(Clone, Default)]
pub struct ExchangeRequest {
    subject_token: String,
    provider: String,
    scopes: Vec<String>,
    account: Option<String>,
}

impl std::fmt::Debug for ExchangeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeRequest")
            .field("subject_token", &"[redacted]")
            .field("provider", &self.provider)
            .field("scopes", &self.scopes)
            .field("account", &self.account)
            .finish()
    }
}

impl ExchangeRequest {
    pub fn new(subject_token: impl Into<String>, provider: impl Into<String>) -> Self {
        Self {
            subject_token: subject_token.into(),
            provider: provider.into(),
            ..Self::default()
        }
    }

    /// Scopes the token must carry: the grant lacking any is `invalid_scope`
    /// ([`Error::missing_scopes`]).
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Which of the user's accounts at the provider, as [`crate::TokenRequest::account`].
    pub fn account(mut self, account: impl Into<String>) -> Self {
        self.account = Some(account.into());
        self
    }
}

/// The answer of a token exchange (RFC 8693 §2.2.1).
#[derive(Clone, Deserialize)]
pub struct ExchangedToken {
    pub access_token: String,
    pub issued_token_type: String,
    /// `Bearer`, or `N_A` for a typed credential (present it with `header_name` /
    /// `header_value`).
    pub token_type: String,
    pub expires_in: Option<u64>,
    /// Space-separated.
    pub scope: Option<String>,
    pub header_name: Option<String>,
    pub header_value: Option<String>,
}

impl std::fmt::Debug for ExchangedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangedToken")
            .field("access_token", &"[redacted]")
            .field("token_type", &self.token_type)
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// `POST /oauth2/token` as the client `client_id` (its `[[clients]] id`; the API key this
    /// client was made with is its secret). Refusals are [`Error::Api`] with OAuth's code:
    /// `interaction_required` carries [`Error::elicitation`] to hand to the MCP client,
    /// `invalid_scope` [`Error::missing_scopes`], `invalid_grant` means the MCP access token
    /// proves nothing.
    pub async fn exchange(
        &self,
        client_id: &str,
        req: &ExchangeRequest,
    ) -> Result<ExchangedToken, Error> {
        let scope = req.scopes.join(" ");
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", &req.subject_token),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("audience", &req.provider),
        ];
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        if let Some(a) = &req.account {
            form.push(("account", a));
        }
        // Sent as is: RFC 6749 form-encodes both first, and the service takes either.
        let resp = self
            .http
            .post(format!("{}/oauth2/token", self.base))
            .basic_auth(client_id, Some(&self.api_key))
            .form(&form)
            .send()
            .await?;
        Self::answer(resp).await
    }
}
