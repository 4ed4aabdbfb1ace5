//! Random search: each trial's parameters drawn independently from the space, reproducible from
//! (seed, trial index).

use crate::rng::Rng;
use crate::space::{Distribution, Params, Space};
use serde_json::Value;

/// The parameters of the `index`-th trial of a random sweep seeded with `seed`. Each index gets its
/// own random stream, so a trial's parameters do not depend on how many trials came before.
pub fn sample(space: &Space, seed: u64, index: u64) -> Params {
    let mut rng = Rng::for_stream(seed, index);
    space
        .params
        .iter()
        .map(|(name, distribution)| (name.clone(), sample_distribution(distribution, &mut rng)))
        .collect()
}

/// One value of `distribution`, as the JSON number type that fits it: integers for `IntUniform`
/// and for quantized distributions with an integral `q`, floats otherwise.
pub(crate) fn sample_distribution(distribution: &Distribution, rng: &mut Rng) -> Value {
    match *distribution {
        Distribution::Constant(ref value) => value.clone(),
        Distribution::Categorical(ref values) => {
            values.get(rng.below(values.len() as u64) as usize).cloned().unwrap_or(Value::Null)
        }
        Distribution::Uniform { min, max } => float_value(bounded(rng.uniform(min, max), min, max)),
        Distribution::LogUniform { min, max } => float_value(bounded(rng.uniform(min.ln(), max.ln()).exp(), min, max)),
        Distribution::QUniform { min, max, q } => quantize(rng.uniform(min, max), min, max, q),
        Distribution::QLogUniform { min, max, q } => quantize(rng.uniform(min.ln(), max.ln()).exp(), min, max, q),
        Distribution::IntUniform { min, max } => Value::from(uniform_int(rng, min, max)),
    }
}

/// An integer uniform in [min, max], both included.
pub(crate) fn uniform_int(rng: &mut Rng, min: i64, max: i64) -> i64 {
    if max <= min {
        return min;
    }
    let span = (i128::from(max) - i128::from(min) + 1) as u128;
    let offset = if span > u128::from(u64::MAX) { rng.next_u64() } else { rng.below(span as u64) };
    (i128::from(min) + i128::from(offset)) as i64
}

/// `round(x / q) * q`, kept on the multiples of q inside [min, max]. When no multiple of q lies
/// in [min, max] the plain rounding is returned, which is then the multiple nearest to the range.
fn quantize(x: f64, min: f64, max: f64, q: f64) -> Value {
    match QGrid::new(min, max, q) {
        Some(grid) => grid.value(grid.nearest(x)),
        None => float_value((x / q).round() * q),
    }
}

/// `x` limited to [low, high]; unlike `f64::clamp` it never panics (on NaN or reversed bounds).
pub(crate) fn bounded(x: f64, low: f64, high: f64) -> f64 {
    x.max(low).min(high)
}

/// A finite float as JSON (non-finite values cannot be spelled in JSON and become null).
pub(crate) fn float_value(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// The values a quantized distribution takes: the multiples `k * q` lying in [min, max], for k in
/// `first..=last`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QGrid {
    pub q: f64,
    pub first: i64,
    pub last: i64,
    /// `q` as an integer when it is one: the values are then spelled as JSON integers.
    integral_q: Option<i64>,
    /// `q` as `units / 10^decimals` when it has a short decimal form, so that `3 × 0.1` is
    /// spelled `0.3` rather than `0.30000000000000004`.
    decimal_q: Option<(i64, f64)>,
}

/// Largest magnitude of k for which `k * q` is computed exactly enough to be meaningful.
const MAX_GRID_INDEX: f64 = 9_007_199_254_740_992.0; // 2^53

impl QGrid {
    /// The grid of `q`-multiples in [min, max], or None when there is none (or when the multiples
    /// cannot be counted with 53-bit integers).
    pub fn new(min: f64, max: f64, q: f64) -> Option<Self> {
        if !(q > 0.0 && q.is_finite() && min.is_finite() && max.is_finite() && min <= max) {
            return None;
        }
        // A little tolerance so that 0.3 / 0.1 = 2.9999999999999996 still counts 0.3 as a multiple.
        let tolerance = |ratio: f64| 1e-9 * ratio.abs().max(1.0);
        let low_ratio = min / q;
        let high_ratio = max / q;
        let first = (low_ratio - tolerance(low_ratio)).ceil();
        let last = (high_ratio + tolerance(high_ratio)).floor();
        if !(first.abs() <= MAX_GRID_INDEX && last.abs() <= MAX_GRID_INDEX) || first > last {
            return None;
        }
        let integral_q = (q.fract() == 0.0 && q <= MAX_GRID_INDEX).then_some(q as i64);
        let decimal_q = (0..=12).find_map(|decimals: i32| {
            let scale = 10f64.powi(decimals);
            let units = (q * scale).round();
            ((q * scale - units).abs() <= 1e-9 * units.max(1.0) && units <= MAX_GRID_INDEX)
                .then_some((units as i64, scale))
        });
        Some(Self { q, first: first as i64, last: last as i64, integral_q, decimal_q })
    }

    /// How many values the grid has.
    pub fn len(&self) -> u64 {
        (i128::from(self.last) - i128::from(self.first) + 1) as u64
    }

    /// The multiple index nearest to `x`, clamped onto the grid.
    pub fn nearest(&self, x: f64) -> i64 {
        let k = (x / self.q).round();
        if k.is_nan() {
            return self.first;
        }
        (bounded(k, self.first as f64, self.last as f64) as i64).max(self.first).min(self.last)
    }

    /// `k * q` as a float.
    pub fn number(&self, k: i64) -> f64 {
        match self.decimal_q {
            Some((units, scale)) => match k.checked_mul(units) {
                Some(scaled) if (scaled.unsigned_abs() as f64) <= MAX_GRID_INDEX => scaled as f64 / scale,
                _ => k as f64 * self.q,
            },
            None => k as f64 * self.q,
        }
    }

    /// `k * q` as JSON: an integer when q is integral, a float otherwise.
    pub fn value(&self, k: i64) -> Value {
        match self.integral_q.and_then(|q| q.checked_mul(k)) {
            Some(integer) => Value::from(integer),
            None => float_value(self.number(k)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn space(params: Vec<(&str, Distribution)>) -> Space {
        Space::new(params.into_iter().map(|(n, d)| (n.to_owned(), d))).unwrap()
    }

    #[test]
    fn reproducible_and_different_across_indexes() {
        let space = space(vec![
            ("lr", Distribution::LogUniform { min: 1e-5, max: 1e-1 }),
            ("layers", Distribution::IntUniform { min: 1, max: 1000 }),
        ]);
        assert_eq!(sample(&space, 5, 3), sample(&space, 5, 3));
        let lrs: BTreeSet<String> = (0..100).map(|i| sample(&space, 5, i)["lr"].to_string()).collect();
        assert_eq!(lrs.len(), 100);
        assert_ne!(sample(&space, 5, 0), sample(&space, 6, 0));
    }

    #[test]
    fn respects_every_distribution() {
        let space = space(vec![
            ("const", Distribution::Constant(Value::from("adam"))),
            ("cat", Distribution::Categorical(vec![Value::from(1), Value::from("b"), Value::Null])),
            ("uni", Distribution::Uniform { min: -2.0, max: 3.0 }),
            ("log", Distribution::LogUniform { min: 1e-4, max: 1.0 }),
            ("q", Distribution::QUniform { min: 1.0, max: 10.0, q: 4.0 }),
            ("qf", Distribution::QUniform { min: 0.0, max: 1.0, q: 0.1 }),
            ("qlog", Distribution::QLogUniform { min: 1.0, max: 1000.0, q: 8.0 }),
            ("qlogf", Distribution::QLogUniform { min: 0.01, max: 1.0, q: 0.05 }),
            ("int", Distribution::IntUniform { min: -3, max: 3 }),
        ]);
        let mut ints = BTreeSet::new();
        let mut cats = BTreeSet::new();
        let mut qs = BTreeSet::new();
        let mut log_below_1e2 = 0;
        let n = 4000;
        for i in 0..n {
            let p = sample(&space, 11, i);
            assert_eq!(p.len(), 9);
            assert_eq!(p["const"], "adam");
            cats.insert(p["cat"].to_string());
            let uni = p["uni"].as_f64().unwrap();
            assert!(p["uni"].is_f64() && (-2.0..=3.0).contains(&uni));
            let log = p["log"].as_f64().unwrap();
            assert!((1e-4..=1.0).contains(&log));
            if log < 1e-2 {
                log_below_1e2 += 1;
            }
            // Multiples of 4 in [1, 10]: 4 and 8, as integers.
            let q = p["q"].as_i64().unwrap();
            assert!(q == 4 || q == 8, "{q}");
            qs.insert(q);
            let qf = p["qf"].as_f64().unwrap();
            assert!(p["qf"].is_f64() && (0.0..=1.0).contains(&qf));
            assert!(((qf * 10.0).round() - qf * 10.0).abs() < 1e-12);
            assert!(qf.to_string().len() <= 3, "{qf} has a tidy decimal form");
            let qlog = p["qlog"].as_i64().unwrap();
            assert!((8..=1000).contains(&qlog) && qlog % 8 == 0, "{qlog}");
            let qlogf = p["qlogf"].as_f64().unwrap();
            assert!((0.05..=1.0).contains(&qlogf), "{qlogf}");
            let int = p["int"].as_i64().unwrap();
            assert!((-3..=3).contains(&int));
            ints.insert(int);
        }
        assert_eq!(ints, (-3..=3).collect());
        assert_eq!(cats, ["1", "\"b\"", "null"].iter().map(|s| s.to_string()).collect());
        assert_eq!(qs, [4, 8].into());
        // Log-uniform on [1e-4, 1]: half of the mass lies below 1e-2.
        let fraction = log_below_1e2 as f64 / n as f64;
        assert!((0.45..0.55).contains(&fraction), "{fraction}");
    }

    #[test]
    fn quantized_edges_clamp_back_into_range() {
        // round(x / 4) * 4 for x in [0, 10] would reach 12 for x >= 10; it is clamped to 8.
        let grid = QGrid::new(0.0, 10.0, 4.0).unwrap();
        assert_eq!((grid.first, grid.last, grid.len()), (0, 2, 3));
        assert_eq!(grid.value(grid.nearest(9.9)), Value::from(8));
        assert_eq!(grid.value(grid.nearest(-3.0)), Value::from(0));
        let tenths = QGrid::new(0.3, 0.7, 0.1).unwrap();
        assert_eq!((tenths.first, tenths.last), (3, 7));
        assert_eq!(tenths.value(3), Value::from(0.3));
        assert_eq!(tenths.value(7), Value::from(0.7));
        assert_eq!(QGrid::new(0.1, 0.2, 1.0), None);
        assert_eq!(uniform_int(&mut Rng::new(0), 5, 5), 5);
        let full = uniform_int(&mut Rng::new(0), i64::MIN, i64::MAX);
        assert!((i64::MIN..=i64::MAX).contains(&full));
        // No multiple of 1 in [0.1, 0.2]: the rounding is kept.
        let p = sample(&space(vec![("x", Distribution::QUniform { min: 0.1, max: 0.2, q: 1.0 })]), 0, 0);
        assert_eq!(p["x"], Value::from(0.0));
    }
}
