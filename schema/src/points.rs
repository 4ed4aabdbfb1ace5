//! Metric points, run statuses, reserved key prefixes and the JSON form of non-finite floats.

use crate::{Error, MetricKey, Result};
use serde_json::Value;
use std::fmt;
use std::str::FromStr;

/// Prefix of system metrics sampled by the clients (`sys/cpu.percent`, `sys/gpu.0.util`, ...).
pub const SYSTEM_PREFIX: &str = "sys/";
/// Prefix of cost series (`cost/usd`).
pub const COST_PREFIX: &str = "cost/";

/// One metric point. `(run, key, step)` identifies it; a later write of the same identity wins.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricPoint {
    pub key: MetricKey,
    pub step: i64,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    pub value: f64,
}

/// The lifecycle state of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    Running,
    Finished,
    Failed,
    Killed,
    Preempted,
    /// Every process of its job stopped sending heartbeats: the server ended it (W&B's "crashed").
    Lost,
    /// A sweep trial its sweep stopped early (pruned): neither a failure nor lost work.
    Pruned,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] =
        [Self::Running, Self::Finished, Self::Failed, Self::Killed, Self::Preempted, Self::Lost, Self::Pruned];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Failed => "failed",
            Self::Killed => "killed",
            Self::Preempted => "preempted",
            Self::Lost => "lost",
            Self::Pruned => "pruned",
        }
    }

    pub fn is_terminal(self) -> bool {
        self != Self::Running
    }

    pub fn parse(field: &str, s: &str) -> Result<Self> {
        s.parse().map_err(|_| {
            Error::new(
                field,
                format!(
                    "unknown status {s:?}; expected one of running, finished, failed, killed, preempted, lost, pruned"
                ),
            )
        })
    }
}

impl FromStr for RunStatus {
    type Err = ();
    fn from_str(s: &str) -> std::result::Result<Self, ()> {
        Self::ALL.into_iter().find(|st| st.as_str() == s).ok_or(())
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A float as JSON: finite values as numbers; NaN and ±Inf as the strings
/// `"NaN"`, `"Infinity"` and `"-Infinity"`, which the API also accepts on input.
pub fn json_f64(v: f64) -> Value {
    if v.is_finite() {
        serde_json::Number::from_f64(v).map(Value::Number).unwrap_or(Value::Null)
    } else if v.is_nan() {
        Value::String("NaN".into())
    } else if v > 0.0 {
        Value::String("Infinity".into())
    } else {
        Value::String("-Infinity".into())
    }
}

/// Parses the string spellings of non-finite floats accepted on input.
pub fn parse_non_finite(s: &str) -> Option<f64> {
    match s {
        "NaN" | "nan" => Some(f64::NAN),
        "Infinity" | "inf" | "+inf" | "+Infinity" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_floats_round_trip_through_json_strings() {
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let Value::String(s) = json_f64(v) else { panic!("expected a string") };
            let back = parse_non_finite(&s).unwrap();
            assert!(back.is_nan() == v.is_nan() && (v.is_nan() || back == v));
        }
        assert_eq!(json_f64(1.5), serde_json::json!(1.5));
    }

    #[test]
    fn summary_mean_skips_nan_values() {
        let mut s = MetricSummary::first(0, 0, f64::NAN);
        assert_eq!(s.mean(), None);
        s.push_newer(1, 0, 1.0);
        s.push_newer(2, 0, f64::NAN);
        s.push_newer(3, 0, 3.0);
        assert_eq!((s.count, s.sum_count, s.mean()), (4, 2, Some(2.0)));
        let of = MetricSummary::of_sorted(&[0, 1, 2, 3], &[0; 4], &[f64::NAN, 1.0, f64::NAN, 3.0]).unwrap();
        assert_eq!((of.sum, of.sum_count), (4.0, 2));
    }

    #[test]
    fn absorbing_summaries_adds_counts_widens_bounds_and_keeps_the_last_by_step_then_time() {
        let mut a = MetricSummary::of_sorted(&[0, 1], &[10, 20], &[3.0, f64::NAN]).unwrap();
        let mut b = MetricSummary::of_sorted(&[2, 3], &[5, 6], &[1.0, 4.0]).unwrap();
        let whole = MetricSummary::of_sorted(&[0, 1, 2, 3], &[10, 20, 5, 6], &[3.0, f64::NAN, 1.0, 4.0]).unwrap();
        let mut ab = a;
        ab.absorb(&b);
        b.absorb(&a);
        assert_eq!(ab, whole);
        assert_eq!(b, whole, "the order of absorbing does not matter");
        // A rewrite of the last step with a later timestamp takes the last value, adds no count.
        ab.absorb(&MetricSummary::bound(3, 7, -2.0));
        assert_eq!((ab.last, ab.min, ab.count, ab.sum), (-2.0, -2.0, 4, 8.0));
        ab.absorb(&MetricSummary::bound(3, 1, 9.0));
        assert_eq!((ab.last, ab.max), (-2.0, 9.0), "an older timestamp at the last step is not the last");
        a.absorb(&MetricSummary::EMPTY);
        assert_eq!(a.count, 2);
        let mut empty = MetricSummary::EMPTY;
        empty.absorb(&a);
        assert_eq!((empty.last_step, empty.count, empty.sum), (a.last_step, a.count, a.sum));
    }

    #[test]
    fn statuses_parse_and_refuse_unknown() {
        assert_eq!(RunStatus::parse("status", "preempted").unwrap(), RunStatus::Preempted);
        assert_eq!(RunStatus::parse("status", "done").unwrap_err().field, "status");
    }
}

/// Summary of one metric series of a run: the value at the highest step, and min, max and sum
/// over the non-NaN values (min and max are NaN when every value is NaN).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricSummary {
    pub last: f64,
    pub last_step: i64,
    pub last_ms: i64,
    pub min: f64,
    pub max: f64,
    pub count: u64,
    /// Sum of the non-NaN values, and how many there are.
    pub sum: f64,
    pub sum_count: u64,
}

impl MetricSummary {
    /// The summary of no points.
    pub const EMPTY: Self = Self {
        last: f64::NAN,
        last_step: i64::MIN,
        last_ms: 0,
        min: f64::NAN,
        max: f64::NAN,
        count: 0,
        sum: 0.0,
        sum_count: 0,
    };

    pub fn is_empty(&self) -> bool {
        self.count == 0 && self.last_step == i64::MIN
    }

    /// A point that replaces an earlier one at its step: it widens min and max and may be the
    /// last value, but adds to no count.
    pub fn bound(step: i64, timestamp_ms: i64, value: f64) -> Self {
        Self { count: 0, sum: 0.0, sum_count: 0, ..Self::first(step, timestamp_ms, value) }
    }

    /// Folds in the summary of other points (later ones, or another server's): counts and sums
    /// add, min and max widen, and the last value is the one at the higher step (at the same
    /// step, the later timestamp; at the same timestamp, `other`'s). The metadata store merges
    /// summaries written by several servers with the same rule.
    pub fn absorb(&mut self, other: &Self) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            *self = *other;
            return;
        }
        if other.last_step > self.last_step || (other.last_step == self.last_step && other.last_ms >= self.last_ms) {
            self.last = other.last;
            self.last_step = other.last_step;
            self.last_ms = other.last_ms;
        }
        self.min = nan_min(self.min, other.min);
        self.max = nan_max(self.max, other.max);
        self.count += other.count;
        self.sum += other.sum;
        self.sum_count += other.sum_count;
    }

    pub fn first(step: i64, timestamp_ms: i64, value: f64) -> Self {
        let counted = !value.is_nan();
        Self {
            last: value,
            last_step: step,
            last_ms: timestamp_ms,
            min: value,
            max: value,
            count: 1,
            sum: if counted { value } else { 0.0 },
            sum_count: counted as u64,
        }
    }

    /// The mean of the non-NaN values; None when there are none.
    pub fn mean(&self) -> Option<f64> {
        (self.sum_count > 0).then(|| self.sum / self.sum_count as f64)
    }

    /// Folds in a point whose step is above `last_step`, so it cannot replace an earlier one.
    pub fn push_newer(&mut self, step: i64, timestamp_ms: i64, value: f64) {
        debug_assert!(step > self.last_step);
        self.last = value;
        self.last_step = step;
        self.last_ms = timestamp_ms;
        self.count += 1;
        if !value.is_nan() {
            self.min = if self.min.is_nan() { value } else { self.min.min(value) };
            self.max = if self.max.is_nan() { value } else { self.max.max(value) };
            self.sum += value;
            self.sum_count += 1;
        }
    }

    /// Summarises a series sorted by step with unique steps; None when it is empty.
    pub fn of_sorted(steps: &[i64], timestamps: &[i64], values: &[f64]) -> Option<Self> {
        let n = steps.len();
        if n == 0 {
            return None;
        }
        let mut min = f64::NAN;
        let mut max = f64::NAN;
        let mut sum = 0.0;
        let mut sum_count = 0;
        for &v in values {
            if !v.is_nan() {
                min = if min.is_nan() { v } else { min.min(v) };
                max = if max.is_nan() { v } else { max.max(v) };
                sum += v;
                sum_count += 1;
            }
        }
        Some(Self {
            last: values[n - 1],
            last_step: steps[n - 1],
            last_ms: timestamps[n - 1],
            min,
            max,
            count: n as u64,
            sum,
            sum_count,
        })
    }
}

/// The smaller of two values, NaN only when both are.
fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b < a {
        b
    } else {
        a
    }
}

/// The larger of two values, NaN only when both are.
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b > a {
        b
    } else {
        a
    }
}

/// A batch of points for one run, with its keys listed once; `BatchPoint::key` indexes `keys`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PointBatch {
    pub keys: Vec<MetricKey>,
    pub points: Vec<BatchPoint>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchPoint {
    pub key: u32,
    pub step: i64,
    pub timestamp_ms: i64,
    pub value: f64,
}
