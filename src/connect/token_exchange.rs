//! The token request asked the standard way (RFC 8693 token exchange at `POST /oauth2/token`):
//! the same use case as `POST /v1/tokens` (`token_request`), with the subject always proven by
//! the MCP access token, the provider named as an audience or a resource, and "not connected"
//! always answered with a ready elicitation, so the caller can show it without a second call.

use std::sync::Arc;

use crate::config::ClientConfig;
use crate::connect::Connect;
use crate::connect::token_request::TokenAsk;
use crate::error::{Error, Result};
use crate::grants::tokens::FreshToken;
use crate::i18n::Lang;
use crate::ids::ProviderName;
use crate::providers::Provider;

/// What the token is for: RFC 8693 `audience` (a provider's name) and RFC 8707 `resource` (a
/// URL the provider serves). When both are given they must name the same provider.
pub struct Target<'a> {
    pub audience: Option<&'a str>,
    pub resource: Option<&'a str>,
}

/// A token exchange, as the API parsed it.
pub struct ExchangeAsk<'a> {
    pub client: &'a ClientConfig,
    /// The user's MCP access token (RFC 8693 `subject_token`).
    pub subject_token: &'a str,
    pub target: Target<'a>,
    pub scopes: Option<Vec<String>>,
    pub account: Option<&'a str>,
    pub request_id: Option<String>,
    pub lang: Lang,
}

impl Connect {
    /// A fresh token for the exchange, or the error that says why not. Unknown targets, and
    /// providers this client may not use, are `NotFound` / `ForbiddenProvider`, as for
    /// `/v1/tokens`.
    pub async fn exchange_token(
        &self,
        ask: ExchangeAsk<'_>,
    ) -> Result<(FreshToken, Arc<Provider>)> {
        let provider = self.exchange_target(ask.client, &ask.target)?;
        let ask = TokenAsk {
            client: ask.client,
            subject: None,
            subject_token: Some(ask.subject_token),
            provider: &provider,
            account: ask.account,
            // The subject_token proves membership: the user's own, else their organisation's.
            whose: crate::connect::token_request::Whose::Any,
            scopes: ask.scopes,
            min_ttl_seconds: None,
            force_refresh: false,
            elicit: true,
            // RFC 8693 has a code for "more than the grant holds": the caller learns which.
            elicit_scopes: false,
            awaited: None,
            wait_seconds: None,
            request_id: ask.request_id,
            lang: ask.lang,
            dpop: crate::connect::token_request::ProofFor::Unnamed,
        };
        // Nothing is awaited, so no long-poll slot is ever asked for.
        match self
            .token_for(ask, || Ok::<(), std::convert::Infallible>(()))
            .await?
        {
            Ok(answer) => Ok(answer),
            Err(never) => match never {},
        }
    }

    /// The provider the exchange names.
    fn exchange_target(&self, client: &ClientConfig, target: &Target<'_>) -> Result<ProviderName> {
        let by_resource = target
            .resource
            .map(|r| {
                resource_provider(
                    self.providers
                        .iter()
                        .filter(|p| client.providers.iter().any(|c| *c == p.name))
                        .map(|p| p.as_ref()),
                    r,
                )
            })
            .transpose()?;
        let name = match (target.audience, by_resource) {
            (Some(a), Some(r)) if a != r => {
                return Err(Error::not_found(
                    "audience and resource name different providers",
                ));
            }
            (Some(a), _) => a.to_owned(),
            (None, Some(r)) => r,
            (None, None) => {
                return Err(Error::invalid(
                    "name the provider with audience (its name) or resource",
                ));
            }
        };
        let name = ProviderName::new(name);
        self.provider_for_client(client, &name)?;
        Ok(name)
    }
}

/// The one provider among `providers` that serves `resource`: an upstream MCP server whose
/// resource URL it is (compared as parsed URLs, so `HTTPS://Host` and `https://host/` are the
/// same), or a provider whose API base URL (`api_base_url`, else the catalog's) it names, at
/// the base or below it (`connect::proxy::target::serves`). None, or several, is `NotFound`:
/// the caller then names the provider by `audience`.
fn resource_provider<'p>(
    providers: impl Iterator<Item = &'p Provider>,
    resource: &str,
) -> Result<String> {
    let unknown = || Error::not_found("no provider this client may use serves that resource");
    let wanted = url::Url::parse(resource).map_err(|_| unknown())?;
    if wanted.fragment().is_some() {
        return Err(unknown());
    }
    let mut found = providers.filter(|p| match &p.mcp {
        Some(m) => m.resource == wanted,
        None => p
            .api_base_url()
            .is_some_and(|base| crate::connect::proxy::target::serves(base, &wanted)),
    });
    match (found.next(), found.next()) {
        (Some(p), None) => Ok(p.name.clone()),
        _ => Err(unknown()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(name: &str, toml: &str) -> Provider {
        let c: crate::config::ProviderConfig = toml::from_str(toml).unwrap();
        Provider::from_config(name, &c)
    }

    #[test]
    fn a_resource_names_the_one_mcp_server_or_api_at_that_url() {
        let mcp = |name, url: &str| {
            provider(
                name,
                &format!("kind = \"mcp\"\nresource = \"{url}\"\nclient_id = \"c\""),
            )
        };
        let github = provider(
            "github",
            "kind = \"github\"\nclient_id = \"c\"\nclient_secret = \"s\"",
        );
        let a = mcp("tools", "https://mcp.example.com/mcp");
        let twin = mcp("tools-twin", "https://twin.example.com/mcp");
        let all = [&github, &a, &twin];
        let pick = |r: &str| resource_provider(all.iter().copied(), r).map_err(|e| e.to_string());
        assert_eq!(pick("https://mcp.example.com/mcp").unwrap(), "tools");
        assert_eq!(pick("HTTPS://MCP.example.com:443/mcp").unwrap(), "tools");
        // A provider's API base URL (the catalog's), at the base or below.
        assert_eq!(pick("https://api.github.com").unwrap(), "github");
        assert_eq!(pick("https://api.github.com/user").unwrap(), "github");
        for unknown in [
            "https://api.github.com.evil.test",
            "https://mcp.example.com/mcp/",
            "https://mcp.example.com/mcp#x",
            "not a url",
            "",
        ] {
            assert!(pick(unknown).is_err(), "{unknown}");
        }
        // Two providers at one URL: ambiguous, so neither.
        let same = mcp("tools-again", "https://mcp.example.com/mcp");
        let both = [&a, &same];
        assert!(resource_provider(both.iter().copied(), "https://mcp.example.com/mcp").is_err());
    }
}
