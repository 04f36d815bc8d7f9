//! The OpenAPI document of the `/v1` API (`GET /openapi.json`, and `docs/openapi.json`, the
//! published contract the tests keep equal to it).

use axum::Json;
use serde_json::json;
use utoipa::OpenApi;

use crate::api;

/// `GET /openapi.json`.
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "client_basic",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Basic)
                    .description(Some(
                        "The token endpoint: a [[clients]] id as the user name, its API key as the password",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API key from [[clients]]"))
                    .build(),
            ),
        );
    }
}

/// Statuses every `/v1` operation can answer, whatever it does: a missing or wrong API key,
/// throttling, and server-side failures. Added here so no route can forget them.
struct CommonResponses;

impl utoipa::Modify for CommonResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::response::ResponseBuilder;
        use utoipa::openapi::{ContentBuilder, HeaderBuilder, Ref, RefOr, Type};
        let error = |description: &str| {
            ResponseBuilder::new().description(description).content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
        };
        let retry_after = HeaderBuilder::new()
            .schema(utoipa::openapi::ObjectBuilder::new().schema_type(Type::Integer))
            .description(Some("Seconds to wait before trying again"))
            .build();
        let common = [
            ("401", error("`unauthorized`: missing or invalid API key").build()),
            (
                "429",
                error("`rate_limited`: too many requests from this API client (or open long polls and streams), or too many failed authentications from this address; retry after `Retry-After` seconds")
                    .header("Retry-After", retry_after)
                    .build(),
            ),
            ("500", error("`internal`: something went wrong on the service's side").build()),
            (
                "503",
                error("`unavailable`: the service cannot reach its database right now; try again shortly").build(),
            ),
        ];
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            let ops = [
                &mut item.get,
                &mut item.post,
                &mut item.delete,
                &mut item.put,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                for (status, response) in &common {
                    op.responses
                        .responses
                        .entry((*status).to_owned())
                        .or_insert_with(|| RefOr::T(response.clone()));
                }
            }
        }
    }
}

/// The rules of `TokenRequest` that span fields, in JSON Schema (`allOf` of `anyOf` and
/// `dependentSchemas`):
/// `wait_seconds` needs `elicitation_id` or `request_state`, and those two exclude each other.
struct TokenRequestRules;

impl utoipa::Modify for TokenRequestRules {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::Schema;
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        // `subject` or `subject_token` (or both), not null: one of them names the user. (One extension
        // key per schema: extensions are serialised in no fixed order.)
        let named = json!([
            {"required": ["subject"], "properties": {"subject": {"type": "string"}}},
            {"required": ["subject_token"], "properties": {"subject_token": {"type": "string", "minLength": 1}}}
        ]);
        if let Some(RefOr::T(Schema::Object(o))) = components.schemas.get_mut("CreateElicitation") {
            o.extensions
                .get_or_insert_with(Default::default)
                .insert("anyOf".to_owned(), named.clone());
        }
        let Some(RefOr::T(Schema::Object(o))) = components.schemas.get_mut("TokenRequest") else {
            return;
        };
        let given = |f: &str| json!({"required": [f], "properties": {f: {"type": "string"}}});
        let rules = json!({
            "wait_seconds": {"anyOf": [
                {"properties": {"wait_seconds": {"type": "null"}}},
                given("elicitation_id"),
                given("request_state"),
            ]},
            "elicitation_id": {"anyOf": [
                {"properties": {"elicitation_id": {"type": "null"}}},
                {"not": given("request_state")},
            ]},
        });
        o.extensions.get_or_insert_with(Default::default).insert(
            "allOf".to_owned(),
            json!([{"anyOf": named}, {"dependentSchemas": rules}]),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "mcp-connect", description = "Third-party OAuth for MCP servers through URL-mode elicitation. Errors are `{\"error\": code, \"message\": text}` (schema `ErrorBody`). Completion signals: `GET /v1/events` (server-sent events) and, for clients with a `webhook_url`, webhooks signed per Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of \"id.timestamp.body\">`) whose body is `EventBody`."),
    paths(api::elicitations::create, api::elicitations::show, api::tokens::fetch, api::connections::list, api::connections::revoke, api::events::stream, api::oauth::exchange::exchange, api::oauth::metadata::document, api::proxy::forward),
    components(schemas(
        api::elicitations::CreateElicitation,
        crate::connect::elicitations::ElicitationView,
        crate::db::elicitations::ElicitationStatus,
        api::tokens::TokenRequest,
        api::tokens::DpopRequest,
        api::tokens::TokenResponse,
        api::connections::ConnectionView,
        api::connections::ConnectionList,
        crate::db::connections::ConnectionStatus,
        crate::grants::revoke::RevocationReport,
        crate::api::error::ErrorBody,
        crate::signals::events::EventBody,
        crate::signals::events::EventData,
        crate::signals::events::EventType,
        api::oauth::exchange::ExchangeForm,
        api::oauth::exchange::ExchangeResponse,
        api::oauth::OAuthErrorBody,
        api::oauth::metadata::ServerMetadata,
    )),
    modifiers(&BearerAuth, &CommonResponses, &TokenRequestRules)
)]
pub struct ApiDoc;

#[cfg(test)]
mod tests {
    use super::*;

    /// The document states the limits the handlers enforce, and every `/v1` operation lists the
    /// statuses any of them can answer.
    #[test]
    fn openapi_document_states_limits_and_common_statuses() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let schemas = &doc["components"]["schemas"];
        for s in ["CreateElicitation", "TokenRequest"] {
            let subject = &schemas[s]["properties"]["subject"];
            assert_eq!(subject["pattern"], crate::ids::SUBJECT_PATTERN, "{s}");
            assert_eq!(subject["maxLength"], crate::ids::MAX_SUBJECT_CHARS, "{s}");
            assert_eq!(subject["minLength"], 1, "{s}");
        }
        let list = &doc["paths"]["/v1/connections"]["get"]["parameters"][1];
        assert_eq!(list["name"], "subject");
        assert_eq!(
            list["required"], true,
            "documented as required: a client that names the user always works (the Subject-Token header alone is accepted too)"
        );
        assert_eq!(list["schema"]["pattern"], crate::ids::SUBJECT_PATTERN);
        let named = json!([
            {"required": ["subject"], "properties": {"subject": {"type": "string"}}},
            {"required": ["subject_token"], "properties": {"subject_token": {"type": "string", "minLength": 1}}}
        ]);
        assert_eq!(schemas["CreateElicitation"]["anyOf"], named);
        assert_eq!(schemas["TokenRequest"]["allOf"][0]["anyOf"], named);
        assert!(
            schemas["TokenRequest"]["allOf"][1]["dependentSchemas"]["wait_seconds"].is_object()
        );
        assert_eq!(
            schemas["TokenRequest"]["properties"]["wait_seconds"]["maximum"],
            crate::api::elicitations::MAX_WAIT_SECONDS
        );
        let mut operations = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                operations += 1;
                // The metadata is public, and answers only from memory.
                if path == "/.well-known/oauth-authorization-server" {
                    continue;
                }
                for status in ["401", "429", "500", "503"] {
                    assert!(
                        op["responses"][status].is_object(),
                        "{method} {path} lacks {status}"
                    );
                }
                assert!(
                    op["responses"]["429"]["headers"]["Retry-After"].is_object(),
                    "{method} {path}"
                );
            }
        }
        // Eight, and the proxy under five methods.
        assert_eq!(operations, 13);
    }

    /// docs/openapi.json is the published contract; it must match the code. Regenerate with
    /// `UPDATE_OPENAPI=1 cargo test openapi`.
    #[test]
    fn openapi_document_in_docs_matches_the_code() {
        let generated = ApiDoc::openapi().to_pretty_json().unwrap() + "\n";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");
        if std::env::var_os("UPDATE_OPENAPI").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/openapi.json is stale: run `UPDATE_OPENAPI=1 cargo test openapi`"
        );
    }
}
