//! The environment variables that tune the engine's limits and timeouts (`DATANOTES_*`, listed
//! in the manual, docs/), read in one way: a whole number, or the default when the
//! variable is unset or not a number. What a value of 0 means is each caller's to say.

use std::time::Duration;

/// A whole number from the environment, or `default`.
pub(crate) fn num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A duration in milliseconds from the environment, or `default` ms.
pub(crate) fn ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(num(name, default))
}
