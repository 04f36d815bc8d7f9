//! Integration tests: one binary, the real app against real databases and real OAuth peers.

mod harness;

mod admin;
mod api_input;
mod conformance;
mod connect_flow;
mod demo;
mod edges;
mod invariants;
mod lifecycle;
mod operations;
mod provider_quirks;
mod rmcp_example;
mod signals;
