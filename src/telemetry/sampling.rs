//! Which spans are recorded: the sampler of `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`,
//! read as the OpenTelemetry SDK reads them and deciding as its samplers decide (a ratio keeps a
//! trace when the low 63 bits of its ID fall under it, so every service that samples by ratio
//! keeps the same traces). The default, as the specification's: `parentbased_always_on`.
//!
//! The engine records its spans itself ([`super::trace`]), so that a span costs a request no
//! more than its record; the decision is all it takes from a sampler, with no context built for
//! it.

use opentelemetry::trace::{SpanContext, TraceId};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Sampler {
    AlwaysOn,
    AlwaysOff,
    /// Keeps this share of traces, by their ID.
    Ratio(f64),
    /// A child of a span follows it (sampled or not); a root is decided by the inner sampler.
    ParentBased(Box<Sampler>),
}

impl Sampler {
    /// The sampler the environment names; an unknown one, or a ratio that is none, is said in
    /// the log and the default is used.
    pub(super) fn from_env() -> Sampler {
        let name = super::otlp::env("OTEL_TRACES_SAMPLER");
        let arg = super::otlp::env("OTEL_TRACES_SAMPLER_ARG");
        Sampler::parse(name.as_deref(), arg.as_deref()).unwrap_or_else(|e| {
            tracing::warn!("{e}; traces are sampled by parentbased_always_on");
            Sampler::ParentBased(Box::new(Sampler::AlwaysOn))
        })
    }

    fn parse(name: Option<&str>, arg: Option<&str>) -> Result<Sampler, String> {
        let ratio = || {
            arg.and_then(|a| a.trim().parse::<f64>().ok())
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| {
                    format!(
                        "OTEL_TRACES_SAMPLER_ARG {arg:?} is not a ratio: give a number from 0 to 1"
                    )
                })
        };
        let parent_based = |s| Sampler::ParentBased(Box::new(s));
        Ok(match name.map(str::trim) {
            None | Some("parentbased_always_on") => parent_based(Sampler::AlwaysOn),
            Some("always_on") => Sampler::AlwaysOn,
            Some("always_off") => Sampler::AlwaysOff,
            Some("traceidratio") => Sampler::Ratio(ratio()?),
            Some("parentbased_always_off") => parent_based(Sampler::AlwaysOff),
            Some("parentbased_traceidratio") => parent_based(Sampler::Ratio(ratio()?)),
            Some(other) => {
                return Err(format!(
                    "OTEL_TRACES_SAMPLER {other:?} is not known (use always_on, always_off, \
                     traceidratio, parentbased_always_on, parentbased_always_off or \
                     parentbased_traceidratio)"
                ));
            }
        })
    }

    /// Whether a span of `trace_id` under `parent` (a valid one, or none: a root) is recorded.
    pub(super) fn samples(&self, parent: Option<&SpanContext>, trace_id: TraceId) -> bool {
        match self {
            Sampler::AlwaysOn => true,
            Sampler::AlwaysOff => false,
            Sampler::Ratio(r) if *r >= 1.0 => true,
            Sampler::Ratio(r) => {
                let bound = (r.max(0.0) * (1u64 << 63) as f64) as u64;
                let low = u64::from_be_bytes(trace_id.to_bytes()[8..].try_into().unwrap());
                (low >> 1) < bound
            }
            Sampler::ParentBased(root) => match parent {
                Some(p) => p.is_sampled(),
                None => root.samples(None, trace_id),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceState};

    fn parent(sampled: bool) -> SpanContext {
        SpanContext::new(
            TraceId::from(7),
            SpanId::from(9),
            TraceFlags::default().with_sampled(sampled),
            true,
            TraceState::default(),
        )
    }

    #[test]
    fn the_environment_names_the_sampler() {
        let pb = |s| Sampler::ParentBased(Box::new(s));
        assert_eq!(Sampler::parse(None, None), Ok(pb(Sampler::AlwaysOn)));
        assert_eq!(
            Sampler::parse(Some("always_off"), None),
            Ok(Sampler::AlwaysOff)
        );
        assert_eq!(
            Sampler::parse(Some("parentbased_traceidratio"), Some("0.25")),
            Ok(pb(Sampler::Ratio(0.25)))
        );
        let e = Sampler::parse(Some("traceidratio"), Some("half")).unwrap_err();
        assert!(
            e.contains("OTEL_TRACES_SAMPLER_ARG") && e.contains("0 to 1"),
            "{e}"
        );
        let e = Sampler::parse(Some("sometimes"), None).unwrap_err();
        assert!(
            e.contains("\"sometimes\"") && e.contains("always_on"),
            "{e}"
        );
    }

    #[test]
    fn parents_decide_for_their_children_and_ratios_by_the_trace_id() {
        let pb = Sampler::ParentBased(Box::new(Sampler::AlwaysOff));
        assert!(pb.samples(Some(&parent(true)), TraceId::from(1)));
        assert!(!pb.samples(None, TraceId::from(1)));
        let pb = Sampler::ParentBased(Box::new(Sampler::AlwaysOn));
        assert!(!pb.samples(Some(&parent(false)), TraceId::from(1)));
        assert!(Sampler::AlwaysOn.samples(Some(&parent(false)), TraceId::from(1)));
        // The low 63 bits against the ratio, as the SDK's sampler compares them.
        let half = Sampler::Ratio(0.5);
        assert!(half.samples(None, TraceId::from(u64::MAX as u128 >> 2)));
        assert!(!half.samples(None, TraceId::from(u64::MAX as u128)));
        assert!(!Sampler::Ratio(0.0).samples(None, TraceId::from(2)));
        let kept = (0..10_000u128)
            .filter(|i| {
                Sampler::Ratio(0.1).samples(
                    None,
                    TraceId::from(i.wrapping_mul(0x9e3779b97f4a7c15_f39cc0605cedc835)),
                )
            })
            .count();
        assert!((800..1200).contains(&kept), "{kept} of 10,000 kept at 0.1");
    }
}
