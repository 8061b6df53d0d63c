//! Where and how OTLP goes, for traces and metrics alike, configured the standard way: the
//! `serve` flags, else `OTEL_EXPORTER_OTLP_{SIGNAL}_ENDPOINT` (used as given) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` or `/v1/metrics` added); the protocol of
//! `OTEL_EXPORTER_OTLP_({SIGNAL}_)PROTOCOL` (`http/protobuf`, the default, or `http/json`); the
//! timeout of `OTEL_EXPORTER_OTLP_({SIGNAL}_)TIMEOUT`; the resource of `OTEL_SERVICE_NAME` and
//! `OTEL_RESOURCE_ATTRIBUTES`. `OTEL_SDK_DISABLED=true` or `OTEL_{SIGNAL}_EXPORTER=none` turns a
//! signal off.

use opentelemetry::KeyValue;
use opentelemetry_otlp::Protocol;
use std::time::Duration;

/// How the owner configured the export (flags of `serve`; the environment fills the rest).
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The collector's base URL (`/v1/traces` and `/v1/metrics` are added), as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: Option<String>,
    /// `http/protobuf` or `http/json`.
    pub protocol: Option<String>,
    /// Record tool arguments and results on spans (off: never).
    pub record_content: bool,
}

/// A signal of OTLP.
#[derive(Clone, Copy)]
pub(super) enum Signal {
    Traces,
    Metrics,
}

impl Signal {
    /// As the variables spell it: `TRACES`, `METRICS`.
    fn upper(self) -> &'static str {
        match self {
            Signal::Traces => "TRACES",
            Signal::Metrics => "METRICS",
        }
    }
    /// As the path spells it: `traces`, `metrics`.
    fn lower(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
        }
    }
}

/// Where a signal is exported, and how.
pub(super) struct Target {
    pub endpoint: String,
    pub protocol: Protocol,
    pub timeout: Duration,
}

pub(super) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Where `signal` goes, or `Ok(None)` when it is off. A bad setting is an error that says which
/// and how to fix it.
pub(super) fn target(config: &Config, signal: Signal) -> anyhow::Result<Option<Target>> {
    let (upper, lower) = (signal.upper(), signal.lower());
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || env(&format!("OTEL_{upper}_EXPORTER")).is_some_and(|v| v == "none")
    {
        return Ok(None);
    }
    let base = config.endpoint.clone();
    let specific = env(&format!("OTEL_EXPORTER_OTLP_{upper}_ENDPOINT"));
    let endpoint = match (&base, &specific) {
        (Some(b), _) => format!("{}/v1/{lower}", b.trim_end_matches('/')),
        (None, Some(s)) => s.clone(),
        (None, None) => match env("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Some(b) => format!("{}/v1/{lower}", b.trim_end_matches('/')),
            None => return Ok(None),
        },
    };
    let url = url::Url::parse(&endpoint).map_err(|e| {
        anyhow::anyhow!("the OTLP endpoint {endpoint:?} is not a URL ({e}): give http://host:port")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        anyhow::bail!("the OTLP endpoint {endpoint:?} must be http:// or https://");
    }
    let protocol = config
        .protocol
        .clone()
        .or_else(|| env(&format!("OTEL_EXPORTER_OTLP_{upper}_PROTOCOL")))
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    let protocol = match protocol.as_str() {
        "http/protobuf" => Protocol::HttpBinary,
        "http/json" => Protocol::HttpJson,
        "grpc" => anyhow::bail!(
            "the OTLP protocol grpc is not built in: use http/protobuf (the default) or http/json, \
             and the collector's HTTP port (4318)"
        ),
        other => anyhow::bail!(
            "the OTLP protocol {other:?} is not known: use http/protobuf (the default) or http/json"
        ),
    };
    let timeout = env(&format!("OTEL_EXPORTER_OTLP_{upper}_TIMEOUT"))
        .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(10));
    Ok(Some(Target {
        endpoint,
        protocol,
        timeout,
    }))
}

/// The resource every signal is exported with: `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES` (the SDK reads them), `service.name` `datanotes` unless they name
/// one, and `service.version`.
pub(super) fn resource() -> opentelemetry_sdk::Resource {
    let mut resource = opentelemetry_sdk::Resource::builder();
    let named = env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    if !named {
        resource = resource.with_service_name("datanotes");
    }
    resource
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}
