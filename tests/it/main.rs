//! Integration tests: one binary, the real app against real databases and real OAuth peers.

mod harness;

mod admin;
mod api_input;
mod connect_flow;
mod invariants;
mod lifecycle;
mod operations;
mod provider_quirks;
mod rmcp_example;
mod signals;
