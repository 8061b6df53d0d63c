//! Figures (a named value with its unit and target) and latency percentiles.

use super::*;

#[derive(Clone, Copy)]
pub(crate) enum Target {
    AtMost(f64),
    AtLeast(f64),
}

pub(crate) struct Figure {
    pub(crate) section: &'static str,
    pub(crate) name: String,
    pub(crate) value: f64,
    pub(crate) unit: &'static str,
    pub(crate) target: Option<Target>,
    /// A figure about correctness (failed calls, lost events): its verdict is given in every
    /// build, and a miss fails the run.
    pub(crate) correctness: bool,
}

impl Figure {
    pub(crate) fn new(
        section: &'static str,
        name: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) -> Self {
        Figure {
            section,
            name: name.into(),
            value,
            unit,
            target: None,
            correctness: false,
        }
    }
    /// A figure about correctness, with its target (see [`Figure::correctness`]).
    pub(crate) fn correct(mut self, t: Target) -> Self {
        self.target = Some(t);
        self.correctness = true;
        self
    }
    pub(crate) fn target(mut self, t: Target) -> Self {
        self.target = Some(t);
        self
    }
    pub(crate) fn met(&self) -> Option<bool> {
        self.target.map(|t| match t {
            Target::AtMost(x) => self.value <= x,
            Target::AtLeast(x) => self.value >= x,
        })
    }
}

/// What sections could not run, and why: any fails the run (every section must run).
static SKIPPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Records that (part of) a section could not run, and says why.
pub(crate) fn skip(why: impl Into<String>) {
    let why = why.into();
    progress(format!("skipped: {why}"));
    SKIPPED.lock().unwrap().push(why);
}

/// What [`skip`] recorded.
pub(crate) fn skipped() -> Vec<String> {
    SKIPPED.lock().unwrap().clone()
}

/// Latency percentiles of a set of samples.
pub(crate) struct Latency {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) mean: f64,
    pub(crate) max: f64,
    pub(crate) n: usize,
}

impl Latency {
    /// Nearest-rank percentiles, in milliseconds.
    pub(crate) fn of(samples: &[Duration]) -> Latency {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let pct = |p: f64| -> f64 {
            if ms.is_empty() {
                return f64::NAN;
            }
            let rank = ((p / 100.0) * ms.len() as f64).ceil() as usize;
            ms[rank.clamp(1, ms.len()) - 1]
        };
        Latency {
            p50: pct(50.0),
            p99: pct(99.0),
            mean: ms.iter().sum::<f64>() / ms.len().max(1) as f64,
            max: ms.last().copied().unwrap_or(f64::NAN),
            n: ms.len(),
        }
    }
    /// `<prefix>_p50_ms`, `_p99_ms`, `_mean_ms`, `_max_ms`; the target applies to p50 and p99.
    pub(crate) fn figures(
        &self,
        section: &'static str,
        prefix: &str,
        target: Option<Target>,
    ) -> Vec<Figure> {
        let mut out = vec![];
        for (name, v, t) in [
            ("p50", self.p50, target),
            ("p99", self.p99, target),
            ("mean", self.mean, None),
            ("max", self.max, None),
        ] {
            let mut f = Figure::new(section, format!("{prefix}_{name}_ms"), v, "ms");
            f.target = t;
            out.push(f);
        }
        out
    }
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[(v.len() - 1) / 2]
}
