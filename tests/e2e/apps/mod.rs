//! Apps: remote apps and WASM apps installed, scoped, signed, upgraded and reached through the
//! engine (`cargo test --test e2e apps::`).

mod oauth;
mod prefix;
mod python_app;
mod rebinding;
mod registry;
mod scopes;
mod sign;
mod sign_in;
mod tools;
mod upgrade_crash;
