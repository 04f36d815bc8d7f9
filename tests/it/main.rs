//! Integration tests: one binary, the real app against real databases and real OAuth peers.

// A test that cannot go on fails loudly: the lint table's ban is for the service's code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;

mod accounts;
mod admin;
mod api_input;
mod api_key;
mod catalog_cli;
mod catalog_flows;
mod catalog_stub;
mod catalog_table;
#[cfg(feature = "demo")]
mod conformance;
mod connect_flow;
#[cfg(feature = "demo")]
mod demo;
mod docs_quotes;
mod edges;
mod failover;
mod grants;
mod import;
mod invariants;
mod layering;
mod lifecycle;
mod mcp_upstream;
mod operations;
mod organizations;
mod pages_i18n;
mod pool;
mod private_postgres;
mod provider_quirks;
mod proxy;
mod recovery;
mod refresh_burst;
mod rmcp_example;
mod rotating_provider;
mod signals;
mod signin_hardening;
mod soak;
mod ssrf;
mod token_cache;
mod token_exchange;
mod topology;
mod traces;
mod upgrade;
mod use_cases;
