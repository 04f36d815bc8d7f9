//! Integration tests: one binary, the real app against real databases and real OAuth peers.

// A test that cannot go on fails loudly: the lint table's ban is for the service's code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;

mod admin;
mod api_input;
#[cfg(feature = "demo")]
mod conformance;
mod connect_flow;
#[cfg(feature = "demo")]
mod demo;
mod edges;
mod invariants;
mod lifecycle;
mod operations;
mod provider_quirks;
mod refresh_burst;
mod rmcp_example;
mod rotating_provider;
mod signals;
mod signin_hardening;
mod topology;
