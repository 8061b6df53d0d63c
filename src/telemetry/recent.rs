//! The last hour of each tool's calls at `/mcp`, minute by minute, counted in the buckets of
//! `mcp.server.operation.duration`: what the console's Tools view draws
//! (`POST /datanotes/tool-stats`). Its p50 and p99 are estimated from those buckets the way
//! Prometheus' `histogram_quantile` does, so the console and a Prometheus query agree.
//!
//! Bounded like the metrics: the tool is its label value (a tool the namespace lists, at most
//! [`super::metrics::TOOLS_PER_APP`] per app, else `other`), and a series keeps 60 minutes.
//!
//! The console draws it in `ui/stats.js`.

use super::metrics::BUCKETS;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex};

/// The minutes a series keeps: an hour.
pub const MINUTES: u64 = 60;

/// The buckets of a minute: one per bound, and the last for what is above every bound.
type Buckets = [u32; BUCKETS.len() + 1];

/// One minute of a tool's calls.
#[derive(Clone)]
struct Minute {
    /// Minutes since the Unix epoch.
    at: u64,
    calls: u32,
    errors: u32,
    buckets: Buckets,
}

/// The calls of the last hour, by app (empty: the engine) and tool.
#[derive(Default)]
pub struct Recent {
    series: Mutex<HashMap<String, HashMap<String, VecDeque<Minute>>>>,
}

/// The process's recent calls.
pub fn recent() -> &'static Recent {
    static R: LazyLock<Recent> = LazyLock::new(Recent::default);
    &R
}

/// The current minute since the Unix epoch.
fn now_minute() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

impl Recent {
    /// A call of `tool` served by `app` took `secs`; `error`: it failed.
    pub fn observe(&self, app: &str, tool: &str, secs: f64, error: bool) {
        self.observe_at(now_minute(), app, tool, secs, error);
    }

    fn observe_at(&self, minute: u64, app: &str, tool: &str, secs: f64, error: bool) {
        let bucket = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        let mut series = self.series.lock().unwrap();
        let tools = match series.get_mut(app) {
            Some(t) => t,
            None => series.entry(app.to_string()).or_default(),
        };
        let minutes = match tools.get_mut(tool) {
            Some(m) => m,
            None => tools.entry(tool.to_string()).or_default(),
        };
        if minutes.back().is_none_or(|m| m.at != minute) {
            minutes.push_back(Minute {
                at: minute,
                calls: 0,
                errors: 0,
                buckets: [0; BUCKETS.len() + 1],
            });
        }
        while minutes.front().is_some_and(|m| m.at + MINUTES <= minute) {
            minutes.pop_front();
        }
        let m = minutes.back_mut().expect("pushed above");
        m.calls += 1;
        m.errors += u32::from(error);
        m.buckets[bucket] += 1;
    }

    /// The last hour, most called first: `{"since", "minutes", "tools": [{"tool", "app",
    /// "calls", "errors", "p50Ms", "p99Ms", "perMinute": [{"calls", "errors", "p99Ms"}, ...60,
    /// oldest first]}]}`. Series with no call in the hour are dropped.
    pub fn snapshot(&self) -> Value {
        self.snapshot_at(now_minute())
    }

    fn snapshot_at(&self, minute: u64) -> Value {
        let first = (minute + 1).saturating_sub(MINUTES);
        let mut out = vec![];
        let mut series = self.series.lock().unwrap();
        series.retain(|app, tools| {
            tools.retain(|tool, minutes| {
                minutes.retain(|m| m.at >= first && m.at <= minute);
                if minutes.is_empty() {
                    return false;
                }
                let mut total = Minute {
                    at: minute,
                    calls: 0,
                    errors: 0,
                    buckets: [0; BUCKETS.len() + 1],
                };
                let mut per_minute =
                    vec![json!({"calls": 0, "errors": 0, "p99Ms": null}); MINUTES as usize];
                for m in minutes.iter() {
                    total.calls += m.calls;
                    total.errors += m.errors;
                    for (t, b) in total.buckets.iter_mut().zip(m.buckets) {
                        *t += b;
                    }
                    per_minute[(m.at - first) as usize] = json!({
                        "calls": m.calls,
                        "errors": m.errors,
                        "p99Ms": ms(quantile(0.99, &m.buckets)),
                    });
                }
                out.push(json!({
                    "tool": tool,
                    "app": if app.is_empty() { "engine" } else { app.as_str() },
                    "calls": total.calls,
                    "errors": total.errors,
                    "p50Ms": ms(quantile(0.5, &total.buckets)),
                    "p99Ms": ms(quantile(0.99, &total.buckets)),
                    "perMinute": per_minute,
                }));
                true
            });
            !tools.is_empty()
        });
        drop(series);
        out.sort_by(|a, b| {
            b["calls"]
                .as_u64()
                .cmp(&a["calls"].as_u64())
                .then_with(|| a["tool"].as_str().cmp(&b["tool"].as_str()))
        });
        let since = chrono::DateTime::from_timestamp((first * 60) as i64, 0)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        json!({"since": since, "minutes": MINUTES, "tools": out})
    }
}

/// Seconds as milliseconds, rounded to a microsecond (`null` when there is no estimate).
fn ms(secs: Option<f64>) -> Value {
    match secs {
        Some(s) => json!((s * 1e6).round() / 1e3),
        None => Value::Null,
    }
}

/// The `q` quantile of calls counted in `buckets`, as Prometheus' `histogram_quantile`
/// estimates it: the bucket holding the rank, linearly within its bounds (the first bucket
/// from 0; above the last bound: the last bound).
fn quantile(q: f64, buckets: &Buckets) -> Option<f64> {
    let total: u64 = buckets.iter().map(|b| u64::from(*b)).sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut seen = 0u64;
    for (i, count) in buckets.iter().enumerate() {
        let count = u64::from(*count);
        if count > 0 && (seen + count) as f64 >= rank {
            if i == BUCKETS.len() {
                return Some(BUCKETS[BUCKETS.len() - 1]);
            }
            let lower = if i == 0 { 0.0 } else { BUCKETS[i - 1] };
            let upper = BUCKETS[i];
            let within = (rank - seen as f64) / count as f64;
            return Some(lower + (upper - lower) * within.clamp(0.0, 1.0));
        }
        seen += count;
    }
    Some(BUCKETS[BUCKETS.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_of_calls_by_minute_with_quantiles_from_the_buckets() {
        let r = Recent::default();
        let t0 = 1_000_000;
        // Minute t0: 49 fast calls (1 to 2.5 ms) and one slow error (2 to 5 s).
        for _ in 0..49 {
            r.observe_at(t0, "", "select_rows", 0.002, false);
        }
        r.observe_at(t0, "", "select_rows", 4.0, true);
        // Half an hour later, one more.
        r.observe_at(t0 + 30, "", "select_rows", 0.002, false);
        r.observe_at(t0 + 30, "planning", "planning_add_task", 0.0004, false);
        let v = r.snapshot_at(t0 + 30);
        let tools = v["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 2);
        let s = &tools[0];
        assert_eq!(
            (s["tool"].as_str(), s["app"].as_str()),
            (Some("select_rows"), Some("engine"))
        );
        assert_eq!(
            (s["calls"].as_u64(), s["errors"].as_u64()),
            (Some(51), Some(1))
        );
        // p50: the 25.5th of 51 calls, in (1 ms, 2.5 ms].
        let p50 = s["p50Ms"].as_f64().unwrap();
        assert!((1.0..=2.5).contains(&p50), "{p50}");
        // p99: the 50.49th of 51 calls is past the 50 fast ones: the slow one's bucket, (2 s, 5 s].
        let p99 = s["p99Ms"].as_f64().unwrap();
        assert!((2000.0..=5000.0).contains(&p99), "{p99}");
        let per = s["perMinute"].as_array().unwrap();
        assert_eq!(per.len(), 60);
        // The hour ends at t0 + 30: t0 is its 30th minute, the last one its 60th.
        assert_eq!(per[29]["calls"], 50);
        assert_eq!(per[29]["errors"], 1);
        assert!(per[29]["p99Ms"].as_f64().unwrap() >= 2000.0);
        assert_eq!(per[59]["calls"], 1);
        assert_eq!(per[0]["calls"], 0);
        assert!(per[0]["p99Ms"].is_null());
        assert_eq!(tools[1]["app"], "planning");
        assert!(tools[1]["p50Ms"].as_f64().unwrap() <= 0.5);

        // An hour after t0 the first minute is gone; after another hour everything is.
        let v = r.snapshot_at(t0 + 60);
        assert_eq!(v["tools"][0]["calls"], 1);
        let v = r.snapshot_at(t0 + 91);
        assert_eq!(v["tools"], json!([]));
        assert!(r.series.lock().unwrap().is_empty());
    }

    #[test]
    fn a_quantile_above_every_bound_is_the_last_bound() {
        let mut b = [0; BUCKETS.len() + 1];
        b[BUCKETS.len()] = 3;
        assert_eq!(quantile(0.5, &b), Some(300.0));
        assert_eq!(quantile(0.5, &[0; BUCKETS.len() + 1]), None);
    }
}
