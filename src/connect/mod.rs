//! The connect flow: an elicitation made for one user, that user signed in at the MCP
//! authorization server and proved to be the same person, consent, the provider's authorization
//! (or an API key), and the completion that stores the grant and tells the MCP server.

pub mod complete;
pub mod consent;
pub mod credential_submission;
pub mod credentials;
pub mod elicitations;
pub mod identity;
pub mod request_state;
pub mod scopes;
pub mod token_request;
