//! The domain's use cases called as functions, without an HTTP request: what a handler calls
//! once can be checked on its own (here against the real peers and database).

use serde_json::Value;

use mcp_connect::connect::complete::ProviderAnswer;
use mcp_connect::connect::consent::ConsentAsk;
use mcp_connect::connect::identity::SignedInUser;
use mcp_connect::connect::token_request::{Awaited, TokenAsk};
use mcp_connect::db::elicitations::Elicitation;
use mcp_connect::error::Error;
use mcp_connect::i18n::Lang;
use mcp_connect::ids::ProviderName;

use crate::harness::*;
use crate::on_both_databases;

fn ask<'a>(
    client: &'a mcp_connect::config::ClientConfig,
    provider: &'a ProviderName,
    elicit: bool,
    awaited: Option<Awaited>,
) -> TokenAsk<'a> {
    TokenAsk {
        whose: Default::default(),
        client,
        subject: Some("alice"),
        subject_token: None,
        provider,
        account: None,
        scopes: None,
        min_ttl_seconds: None,
        force_refresh: false,
        elicit,
        elicit_scopes: true,
        awaited,
        wait_seconds: None,
        request_id: None,
        lang: Lang::En,
        dpop: mcp_connect::connect::token_request::ProofFor::Unnamed,
    }
}

/// Waiting is never asked for here, so the long-poll slot is never taken.
fn no_wait() -> Result<(), Error> {
    Err(Error::invalid("no wait was asked for"))
}

/// Finishes a provider callback for `e` as alice, the way the callback page does; answers what
/// the use case returned and whether it claimed the state.
async fn callback(
    app: &TestApp,
    e: &Elicitation,
    answer: ProviderAnswer<'_>,
) -> (Result<(), Error>, bool) {
    let user = SignedInUser {
        issuer: e.issuer.clone(),
        subject: "alice".into(),
        display_name: None,
        claims: Default::default(),
    };
    let provider = app.state.providers.get("acme").unwrap().clone();
    let mut claimed = false;
    let r = app
        .state
        .connect
        .finish_provider_callback(
            &user,
            e,
            None,
            &provider,
            answer,
            async || {
                claimed = true;
                Ok(None)
            },
            None,
        )
        .await;
    (r, claimed)
}

on_both_databases!(
    a_declined_connection_runs_through_the_domain_alone,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let connect = app.state.connect.clone();
        let client = app.state.clients.get("demo-mcp").unwrap().clone();
        let acme = ProviderName::from("acme");

        // Not connected; asked to elicit, an elicitation for the MCP client to show.
        let r = connect
            .token_for(ask(&client, &acme, false, None), no_wait)
            .await
            .map(|_| ());
        assert!(matches!(r, Err(Error::NotConnected { .. })), "{r:?}");
        let offered: Value = match connect
            .token_for(ask(&client, &acme, true, None), no_wait)
            .await
            .map(|_| ())
        {
            Err(Error::AuthorizationRequired { elicitation, .. }) => *elicitation,
            other => panic!("expected an elicitation, got {other:?}"),
        };
        let id = offered["id"].as_str().unwrap().to_owned();
        let e = app.db().get_elicitation(&id).await.unwrap().unwrap();

        // What the consent page shows.
        match connect.consent_for(&e, &e.params, Lang::En).await.unwrap() {
            ConsentAsk::Consent(view) => {
                assert_eq!(view.client, "Demo MCP");
                assert_eq!(view.apps, ["Demo MCP"]);
                assert!(view.new_scopes.is_empty() && view.shared_with.is_empty());
            }
            ConsentAsk::Credential(_) => panic!("acme signs in with OAuth"),
        }

        // The provider answers access_denied: the state is claimed, the elicitation declined.
        let provider = app.state.providers.get("acme").unwrap().clone();
        let endpoints = provider.endpoints(&app.state.http).await.unwrap();
        let answer = ProviderAnswer {
            code: None,
            error: Some("access_denied"),
            iss: endpoints.issuer.as_deref(),
            raw_query: None,
        };
        let (r, claimed) = callback(&app, &e, answer).await;
        r.unwrap();
        assert!(claimed, "the state is spent before the answer is acted on");

        // The token request that waited for it learns that the user said no.
        let r = connect
            .token_for(
                ask(&client, &acme, true, Some(Awaited::Id(id.clone()))),
                no_wait,
            )
            .await
            .map(|_| ());
        match r {
            Err(Error::AuthorizationDeclined { elicitation_id, .. }) => {
                assert_eq!(elicitation_id, id)
            }
            other => panic!("expected authorization_declined, got {other:?}"),
        }
        app.shutdown().await;
    }
);

on_both_databases!(
    a_foreign_issuer_on_the_callback_is_refused_before_the_state_is_spent,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e = app.elicit("alice").await;
        let e = app
            .db()
            .get_elicitation(e["id"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        let answer = ProviderAnswer {
            code: Some("a-code"),
            error: None,
            iss: Some("https://elsewhere.example"),
            raw_query: None,
        };
        let (r, claimed) = callback(&app, &e, answer).await;
        assert!(matches!(r, Err(Error::Refused { .. })), "{r:?}");
        assert!(
            !claimed,
            "a refused answer leaves the owner's state working"
        );
        let still = app.db().get_elicitation(&e.id).await.unwrap().unwrap();
        assert_eq!(still.status.as_str(), "pending");
        app.shutdown().await;
    }
);
