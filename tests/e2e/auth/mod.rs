//! Who may do what: OAuth (the engine as authorization server), the reads a grant may make, and
//! one policy at every door (`cargo test --test e2e auth::`).

mod oauth;
mod oauth_reads;
mod policy;
