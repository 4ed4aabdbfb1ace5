//! Tree-structured Parzen Estimator (Bergstra et al., 2011): a model-based search that splits the
//! finished trials into a good group (the best `gamma` fraction) and the rest, fits a kernel density
//! to each (l for the good, g for the rest), and proposes the candidate, drawn from l, that
//! maximizes l(x) / g(x).
//!
//! Details:
//! - Numeric parameters get truncated Gaussian kernels on their range, in log space for the log
//!   distributions; integer and quantized ones are modelled on the range widened by half a step and
//!   scored by the probability mass of the value's cell. Every density also holds a wide prior kernel
//!   (the range's centre, the range as bandwidth) weighted by `prior_weight`.
//! - Bandwidths: each kernel's starts from the larger distance to its neighbours among the group's
//!   observations (Optuna's rule), times `bandwidth_factor` (0.5), clipped to [floor, range].
//!   Optuna's floor is range / min(100, n_group + 2): the good group holds a tenth of the history
//!   and at most 25, so its kernels stay coarse and late trials cannot home in. Here the floor is
//!   range / min(100, √((n_group + 2)(n_history + 2))), shrinking with the whole history. On the
//!   benchmark (`bench/sweep/bench_tpe.py`) these two changes are what beat Optuna's sampler.
//! - Categorical parameters get one distribution per observation, smoothed toward uniform.
//! - Multivariate (the default): a kernel is the product over parameters around one observation, so
//!   candidates keep the combinations that worked; univariate treats every parameter on its own.
//! - Old observations of a group beyond its 25 most recent weigh less (a ramp from 1/n to 1).
//!
//! Observations without a loss, with a NaN loss, or whose parameters do not fit the space (missing,
//! outside the bounds, or not among the listed values) are left out of the model.

use crate::random::{bounded, float_value, sample as random_sample, QGrid};
use crate::rng::Rng;
use crate::space::{Distribution, Observation, Params, Space};
use serde_json::Value;

/// How TPE splits the history and picks the next point.
#[derive(Debug, Clone, PartialEq)]
pub struct TpeSettings {
    /// Trials drawn at random (as the random strategy would) before the model is used: the model
    /// starts once this many observations have a loss.
    pub n_startup: usize,
    /// Candidates drawn from the good density, among which the best ratio l / g is chosen.
    pub n_candidates: usize,
    /// The fraction of the observations in the good group (rounded up).
    pub gamma: f64,
    /// The most observations the good group holds.
    pub max_good: usize,
    /// The weight of the prior kernel of each density, relative to an observation's weight of 1.
    pub prior_weight: f64,
    /// One joint density over all parameters (true) or one density per parameter (false).
    pub multivariate: bool,
    /// Multiplies each kernel's neighbour-gap bandwidth before clipping.
    pub bandwidth_factor: f64,
    /// Whether the smallest bandwidth shrinks with the whole history (true) or with the group's
    /// size only (false). See the module documentation.
    pub floor_from_history: bool,
}

impl Default for TpeSettings {
    fn default() -> Self {
        Self {
            n_startup: 10,
            n_candidates: 24,
            gamma: 0.1,
            max_good: 25,
            prior_weight: 1.0,
            multivariate: true,
            bandwidth_factor: 0.5,
            floor_from_history: true,
        }
    }
}

impl TpeSettings {
    /// The settings of Optuna's `TPESampler` (version 5: multivariate, neighbour-gap bandwidths,
    /// floor from the group's size), for comparison.
    pub fn optuna() -> Self {
        Self { bandwidth_factor: 1.0, floor_from_history: false, ..Self::default() }
    }
}

/// The parameters of the `index`-th trial, given the trials seen so far (in the order they were
/// created). Pure: the same arguments give the same parameters. A space that fails validation
/// (built by hand rather than with `Space::new`) is sampled at random.
pub fn suggest(space: &Space, history: &[Observation], seed: u64, index: u64, settings: &TpeSettings) -> Params {
    if space.params.iter().any(|(name, distribution)| distribution.validate(name).is_err()) {
        return random_sample(space, seed, index);
    }
    let dimensions: Vec<Dimension> = space.params.iter().map(|(_, d)| Dimension::new(d)).collect();
    let modelled: Vec<usize> =
        (0..dimensions.len()).filter(|&i| !matches!(dimensions[i], Dimension::Fixed(_))).collect();
    let usable: Vec<(f64, Vec<Coordinate>)> = history
        .iter()
        .filter_map(|observation| {
            let loss = observation.loss.filter(|loss| !loss.is_nan())?;
            let coordinates = modelled
                .iter()
                .map(|&i| dimensions[i].decode(observation.params.get(&space.params[i].0)?))
                .collect::<Option<Vec<_>>>()?;
            Some((loss, coordinates))
        })
        .collect();
    if usable.len() < settings.n_startup.max(1) || modelled.is_empty() {
        return random_sample(space, seed, index);
    }

    let n_good = ((settings.gamma * usable.len() as f64).ceil().max(1.0) as usize)
        .min(settings.max_good.max(1))
        .min(usable.len());
    let mut by_loss: Vec<usize> = (0..usable.len()).collect();
    by_loss.sort_by(|&a, &b| usable[a].0.total_cmp(&usable[b].0).then(a.cmp(&b)));
    // Each group in history order, so that recency weights apply.
    let mut good: Vec<usize> = by_loss[..n_good].to_vec();
    let mut bad: Vec<usize> = by_loss[n_good..].to_vec();
    good.sort_unstable();
    bad.sort_unstable();

    let dims: Vec<&Dimension> = modelled.iter().map(|&i| &dimensions[i]).collect();
    let points = |group: &[usize]| group.iter().map(|&i| usable[i].1.as_slice()).collect::<Vec<_>>();
    let good_density = Parzen::fit(&dims, &points(&good), settings, usable.len());
    let bad_density = Parzen::fit(&dims, &points(&bad), settings, usable.len());

    let mut rng = Rng::for_stream(seed, index);
    let chosen: Vec<Coordinate> = if settings.multivariate {
        let all: Vec<usize> = (0..dims.len()).collect();
        best_candidate(&good_density, &bad_density, &all, settings.n_candidates, &mut rng)
    } else {
        (0..dims.len())
            .flat_map(|d| best_candidate(&good_density, &bad_density, &[d], settings.n_candidates, &mut rng))
            .collect()
    };

    let mut params = Params::new();
    let mut chosen = chosen.into_iter();
    for ((name, _), dimension) in space.params.iter().zip(&dimensions) {
        let value = match dimension {
            Dimension::Fixed(value) => value.clone(),
            _ => chosen.next().map_or(Value::Null, |c| dimension.encode(c)),
        };
        params.insert(name.clone(), value);
    }
    params
}

/// Draws candidates from `good` over the dimensions `subset` and returns the one with the best
/// log l(x) - log g(x) (the first one on ties).
fn best_candidate(
    good: &Parzen,
    bad: &Parzen,
    subset: &[usize],
    n_candidates: usize,
    rng: &mut Rng,
) -> Vec<Coordinate> {
    let mut best: Option<(f64, Vec<Coordinate>)> = None;
    for _ in 0..n_candidates.max(1) {
        let candidate = good.sample(subset, rng);
        let score = good.log_density(subset, &candidate) - bad.log_density(subset, &candidate);
        let score = if score.is_nan() { f64::NEG_INFINITY } else { score };
        if best.as_ref().is_none_or(|(best_score, _)| score > *best_score) {
            best = Some((score, candidate));
        }
    }
    best.map(|(_, candidate)| candidate).unwrap_or_default()
}

/// A parameter's value in model space.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Coordinate {
    /// A position on a continuous axis (the logarithm for log distributions).
    Continuous(f64),
    /// The k-th value of a discrete axis: the integer itself, or the multiple k·q.
    Discrete(i64),
    /// The index of a categorical value.
    Choice(usize),
}

/// How a numeric parameter maps to model space.
#[derive(Debug, Clone)]
enum Scale {
    Linear { min: f64, max: f64 },
    Log { min: f64, max: f64 },
    Integer { min: i64, max: i64 },
    Multiples(QGrid),
    LogMultiples(QGrid),
}

/// One parameter, as the model sees it.
#[derive(Debug, Clone)]
enum Dimension<'a> {
    /// A parameter with a single possible value: not modelled.
    Fixed(Value),
    Categorical(&'a [Value]),
    /// A numeric parameter with its model-space bounds.
    Numeric {
        scale: Scale,
        low: f64,
        high: f64,
    },
}

impl<'a> Dimension<'a> {
    fn new(distribution: &'a Distribution) -> Self {
        let numeric = |scale: Scale| {
            let (low, high) = match scale {
                Scale::Linear { min, max } => (min, max),
                Scale::Log { min, max } => (min.ln(), max.ln()),
                Scale::Integer { min, max } => (min as f64 - 0.5, max as f64 + 0.5),
                Scale::Multiples(ref grid) => {
                    (grid.number(grid.first) - grid.q / 2.0, grid.number(grid.last) + grid.q / 2.0)
                }
                Scale::LogMultiples(ref grid) => {
                    ((grid.number(grid.first) - grid.q / 2.0).ln(), (grid.number(grid.last) + grid.q / 2.0).ln())
                }
            };
            Dimension::Numeric { scale, low, high }
        };
        let quantized = |min: f64, max: f64, q: f64, log: bool| match QGrid::new(min, max, q) {
            Some(grid) if grid.len() > 1 => {
                numeric(if log { Scale::LogMultiples(grid) } else { Scale::Multiples(grid) })
            }
            Some(grid) => Dimension::Fixed(grid.value(grid.first)),
            // No multiple of q in [min, max]: the one nearest to the range is the only value.
            None => Dimension::Fixed(float_value(((min + max) / 2.0 / q).round() * q)),
        };
        match *distribution {
            Distribution::Constant(ref value) => Dimension::Fixed(value.clone()),
            Distribution::Categorical(ref values) if values.len() == 1 => Dimension::Fixed(values[0].clone()),
            Distribution::Categorical(ref values) => Dimension::Categorical(values),
            Distribution::Uniform { min, max } => numeric(Scale::Linear { min, max }),
            Distribution::LogUniform { min, max } => numeric(Scale::Log { min, max }),
            Distribution::IntUniform { min, max } => numeric(Scale::Integer { min, max }),
            Distribution::QUniform { min, max, q } => quantized(min, max, q, false),
            Distribution::QLogUniform { min, max, q } => quantized(min, max, q, true),
        }
    }

    /// An observed value in model space; None when it does not belong to this parameter's space.
    fn decode(&self, value: &Value) -> Option<Coordinate> {
        match self {
            Dimension::Fixed(_) => None,
            Dimension::Categorical(values) => values.iter().position(|v| same_value(v, value)).map(Coordinate::Choice),
            Dimension::Numeric { scale, .. } => {
                let x = value.as_f64().filter(|x| x.is_finite())?;
                let within = |min: f64, max: f64| {
                    let slack = 1e-9 * (max - min).abs().max(f64::MIN_POSITIVE);
                    (min - slack..=max + slack).contains(&x)
                };
                match *scale {
                    Scale::Linear { min, max } => {
                        within(min, max).then(|| Coordinate::Continuous(bounded(x, min, max)))
                    }
                    Scale::Log { min, max } => {
                        within(min, max).then(|| Coordinate::Continuous(bounded(x, min, max).ln()))
                    }
                    Scale::Integer { min, max } => within(min as f64, max as f64)
                        .then(|| Coordinate::Discrete((x.round() as i64).max(min).min(max))),
                    Scale::Multiples(ref grid) | Scale::LogMultiples(ref grid) => {
                        let k = (x / grid.q).round();
                        (k >= grid.first as f64 && k <= grid.last as f64).then(|| Coordinate::Discrete(grid.nearest(x)))
                    }
                }
            }
        }
    }

    /// A model-space value back to the parameter's JSON value.
    fn encode(&self, coordinate: Coordinate) -> Value {
        match (self, coordinate) {
            (Dimension::Fixed(value), _) => value.clone(),
            (Dimension::Categorical(values), Coordinate::Choice(i)) => values.get(i).cloned().unwrap_or(Value::Null),
            (Dimension::Numeric { scale, .. }, Coordinate::Continuous(x)) => match *scale {
                Scale::Linear { min, max } => float_value(bounded(x, min, max)),
                Scale::Log { min, max } => float_value(bounded(x.exp(), min, max)),
                _ => Value::Null,
            },
            (Dimension::Numeric { scale, .. }, Coordinate::Discrete(k)) => match *scale {
                Scale::Integer { min, max } => Value::from(k.max(min).min(max)),
                Scale::Multiples(ref grid) | Scale::LogMultiples(ref grid) => {
                    grid.value(k.max(grid.first).min(grid.last))
                }
                _ => Value::Null,
            },
            _ => Value::Null,
        }
    }
}

/// JSON equality that also matches numbers spelled differently (1 and 1.0).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64().is_some_and(|x| y.as_f64() == Some(x)),
        _ => a == b,
    }
}

impl Scale {
    /// The discrete value nearest to a model-space position, for integer and quantized scales.
    fn snap(&self, x: f64) -> Option<i64> {
        match *self {
            Scale::Linear { .. } | Scale::Log { .. } => None,
            Scale::Integer { min, max } => Some(if x.is_nan() {
                min
            } else {
                (bounded(x.round(), min as f64, max as f64) as i64).max(min).min(max)
            }),
            Scale::Multiples(ref grid) => Some(grid.nearest(x)),
            Scale::LogMultiples(ref grid) => Some(grid.nearest(x.exp())),
        }
    }

    /// The model-space centre and cell [left, right] of the k-th discrete value.
    fn cell(&self, k: i64) -> (f64, f64, f64) {
        match *self {
            Scale::Linear { .. } | Scale::Log { .. } | Scale::Integer { .. } => {
                (k as f64, k as f64 - 0.5, k as f64 + 0.5)
            }
            Scale::Multiples(ref grid) => {
                let x = grid.number(k);
                (x, x - grid.q / 2.0, x + grid.q / 2.0)
            }
            Scale::LogMultiples(ref grid) => {
                let x = grid.number(k);
                (x.ln(), (x - grid.q / 2.0).ln(), (x + grid.q / 2.0).ln())
            }
        }
    }
}

/// One parameter's kernels, one per observation and a last one for the prior.
#[derive(Debug, Clone)]
enum Kernels {
    Numeric {
        scale: Scale,
        low: f64,
        high: f64,
        mus: Vec<f64>,
        sigmas: Vec<f64>,
        /// log of each kernel's Gaussian mass inside [low, high] (its truncation constant).
        log_masses: Vec<f64>,
    },
    /// Each kernel's log-probabilities over the choices.
    Categorical { log_probabilities: Vec<Vec<f64>>, probabilities: Vec<Vec<f64>> },
}

/// A weighted mixture of product kernels over the modelled parameters.
#[derive(Debug, Clone)]
struct Parzen {
    weights: Vec<f64>,
    log_weights: Vec<f64>,
    dims: Vec<Kernels>,
}

/// The weight of the i-th of n observations of a group (in history order): older ones beyond the 25
/// most recent ramp down linearly toward 1/n.
fn recency_weight(i: usize, n: usize) -> f64 {
    const FLAT: usize = 25;
    let ramp = n.saturating_sub(FLAT);
    if i >= ramp {
        return 1.0;
    }
    let first = 1.0 / n as f64;
    if ramp == 1 {
        first
    } else {
        first + (1.0 - first) * i as f64 / (ramp - 1) as f64
    }
}

impl Parzen {
    fn fit(dims: &[&Dimension], points: &[&[Coordinate]], settings: &TpeSettings, n_history: usize) -> Self {
        let n = points.len();
        let prior_weight = if n == 0 { 1.0 } else { settings.prior_weight.max(0.0) };
        let mut weights: Vec<f64> = (0..n).map(|i| recency_weight(i, n)).chain([prior_weight]).collect();
        let total: f64 = weights.iter().sum();
        if total > 0.0 && total.is_finite() {
            weights.iter_mut().for_each(|w| *w /= total);
        } else {
            weights = vec![1.0 / (n + 1) as f64; n + 1];
        }
        let log_weights = weights.iter().map(|w| w.ln()).collect();
        let dims = dims
            .iter()
            .enumerate()
            .map(|(d, dimension)| Self::fit_dimension(dimension, points, d, settings, n_history))
            .collect();
        Self { weights, log_weights, dims }
    }

    fn fit_dimension(
        dimension: &Dimension,
        points: &[&[Coordinate]],
        d: usize,
        settings: &TpeSettings,
        n_history: usize,
    ) -> Kernels {
        let n = points.len();
        match dimension {
            Dimension::Categorical(values) => {
                let choices = values.len().max(1);
                let smoothing = if n == 0 { 1.0 } else { settings.prior_weight.max(0.0) / (n + 1) as f64 };
                let mut probabilities: Vec<Vec<f64>> = points
                    .iter()
                    .map(|point| {
                        let mut row = vec![smoothing; choices];
                        if let Some(Coordinate::Choice(c)) = point.get(d) {
                            if let Some(p) = row.get_mut(*c) {
                                *p += 1.0;
                            }
                        }
                        row
                    })
                    .chain([vec![1.0; choices]])
                    .collect();
                for row in &mut probabilities {
                    let total: f64 = row.iter().sum();
                    row.iter_mut().for_each(|p| *p /= total);
                }
                let log_probabilities = probabilities.iter().map(|row| row.iter().map(|p| p.ln()).collect()).collect();
                Kernels::Categorical { log_probabilities, probabilities }
            }
            Dimension::Numeric { scale, low, high } => {
                let (low, high) = (*low, *high);
                let mus: Vec<f64> = points
                    .iter()
                    .map(|point| match point.get(d) {
                        Some(Coordinate::Continuous(x)) => *x,
                        Some(Coordinate::Discrete(k)) => scale.cell(*k).0,
                        _ => (low + high) / 2.0,
                    })
                    .collect();
                let range = high - low;
                let mut sigmas = neighbour_bandwidths(&mus, low, high);
                let floor_divisor = if settings.floor_from_history {
                    ((n as f64 + 2.0) * (n_history as f64 + 2.0)).sqrt()
                } else {
                    n as f64 + 2.0
                };
                let min_sigma = range / floor_divisor.min(100.0);
                sigmas.iter_mut().for_each(|s| *s = bounded(*s * settings.bandwidth_factor, min_sigma, range));
                let mut mus = mus;
                mus.push((low + high) / 2.0);
                sigmas.push(range);
                let log_masses = mus
                    .iter()
                    .zip(&sigmas)
                    .map(|(mu, sigma)| log_gauss_mass((low - mu) / sigma, (high - mu) / sigma))
                    .collect();
                Kernels::Numeric { scale: scale.clone(), low, high, mus, sigmas, log_masses }
            }
            Dimension::Fixed(_) => Kernels::Categorical {
                log_probabilities: vec![vec![0.0]; n + 1],
                probabilities: vec![vec![1.0]; n + 1],
            },
        }
    }

    /// One candidate over the dimensions `subset`, all drawn around the same kernel.
    fn sample(&self, subset: &[usize], rng: &mut Rng) -> Vec<Coordinate> {
        let component = rng.weighted_index(&self.weights);
        subset
            .iter()
            .map(|&d| match &self.dims[d] {
                Kernels::Categorical { probabilities, .. } => {
                    Coordinate::Choice(probabilities.get(component).map_or(0, |row| rng.weighted_index(row)))
                }
                Kernels::Numeric { scale, low, high, mus, sigmas, .. } => {
                    let x = truncated_normal(rng, mus[component], sigmas[component], *low, *high);
                    scale.snap(x).map_or(Coordinate::Continuous(x), Coordinate::Discrete)
                }
            })
            .collect()
    }

    /// log of the mixture's density (mass, for discrete values) at `point` over `subset`.
    fn log_density(&self, subset: &[usize], point: &[Coordinate]) -> f64 {
        let mut terms = self.log_weights.clone();
        for (&d, coordinate) in subset.iter().zip(point) {
            match (&self.dims[d], *coordinate) {
                (Kernels::Categorical { log_probabilities, .. }, Coordinate::Choice(c)) => {
                    for (term, row) in terms.iter_mut().zip(log_probabilities) {
                        *term += row.get(c).copied().unwrap_or(f64::NEG_INFINITY);
                    }
                }
                (Kernels::Numeric { mus, sigmas, log_masses, .. }, Coordinate::Continuous(x)) => {
                    for (k, term) in terms.iter_mut().enumerate() {
                        let z = (x - mus[k]) / sigmas[k];
                        *term += -0.5 * z * z - sigmas[k].ln() - HALF_LN_TAU - log_masses[k];
                    }
                }
                (Kernels::Numeric { scale, mus, sigmas, log_masses, .. }, Coordinate::Discrete(value)) => {
                    let (_, left, right) = scale.cell(value);
                    for (k, term) in terms.iter_mut().enumerate() {
                        *term +=
                            log_gauss_mass((left - mus[k]) / sigmas[k], (right - mus[k]) / sigmas[k]) - log_masses[k];
                    }
                }
                _ => return f64::NEG_INFINITY,
            }
        }
        log_sum_exp(&terms)
    }
}

/// Each point's bandwidth: the larger gap to its neighbours (the range's ends count as neighbours),
/// except that the lowest and highest points use their inner gap only.
fn neighbour_bandwidths(mus: &[f64], low: f64, high: f64) -> Vec<f64> {
    let n = mus.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| mus[a].total_cmp(&mus[b]));
    let sorted: Vec<f64> = std::iter::once(low).chain(order.iter().map(|&i| mus[i])).chain([high]).collect();
    let mut sigmas = vec![0.0; n];
    for (rank, &i) in order.iter().enumerate() {
        let position = rank + 1;
        let left = sorted[position] - sorted[position - 1];
        let right = sorted[position + 1] - sorted[position];
        sigmas[i] = if n >= 2 && rank == 0 {
            right
        } else if n >= 2 && rank == n - 1 {
            left
        } else {
            left.max(right)
        };
    }
    sigmas
}

const HALF_LN_TAU: f64 = 0.918_938_533_204_672_8; // ln(2π) / 2

/// A draw from N(mu, sigma²) restricted to [low, high].
fn truncated_normal(rng: &mut Rng, mu: f64, sigma: f64, low: f64, high: f64) -> f64 {
    let proper = sigma > 0.0 && high > low;
    if !proper {
        return bounded(mu, low, high);
    }
    // Every kernel is centred inside the range, so at least a third of its mass lies inside and
    // rejection is quick; the fallback only guards against pathological inputs.
    for _ in 0..256 {
        let x = mu + sigma * rng.normal();
        if (low..=high).contains(&x) {
            return x;
        }
    }
    rng.uniform(low, high)
}

fn log_sum_exp(terms: &[f64]) -> f64 {
    let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY || max.is_nan() {
        return max;
    }
    max + terms.iter().map(|t| (t - max).exp()).sum::<f64>().ln()
}

/// log erfc(x), accurate to about 1e-7 relative and free of underflow in the upper tail
/// (Numerical Recipes' Chebyshev fit, kept in log form).
fn log_erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let log_upper = t.ln() - z * z + poly;
    if x >= 0.0 {
        log_upper
    } else {
        (2.0 - log_upper.exp()).ln()
    }
}

/// log P(Z > z) for a standard normal Z.
fn log_upper_tail(z: f64) -> f64 {
    -std::f64::consts::LN_2 + log_erfc(z / std::f64::consts::SQRT_2)
}

/// log(1 - e^x) for x <= 0.
fn log_one_minus_exp(x: f64) -> f64 {
    if x > -std::f64::consts::LN_2 {
        (-x.exp_m1()).ln()
    } else {
        (-x.exp()).ln_1p()
    }
}

/// log P(a <= Z <= b) for a standard normal Z.
fn log_gauss_mass(a: f64, b: f64) -> f64 {
    let ordered = b > a;
    if !ordered {
        return f64::NEG_INFINITY;
    }
    let midpoint = || (b - a).ln() - 0.5 * (0.5 * (a + b)).powi(2) - HALF_LN_TAU;
    if b - a < 1e-2 {
        return midpoint();
    }
    let mass = if a >= 0.0 {
        let upper_a = log_upper_tail(a);
        upper_a + log_one_minus_exp(log_upper_tail(b) - upper_a)
    } else if b <= 0.0 {
        let upper_b = log_upper_tail(-b);
        upper_b + log_one_minus_exp(log_upper_tail(-a) - upper_b)
    } else {
        (1.0 - log_upper_tail(-a).exp() - log_upper_tail(b).exp()).ln()
    };
    if mass.is_finite() {
        mass
    } else {
        midpoint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random;

    fn space(params: Vec<(&str, Distribution)>) -> Space {
        Space::new(params.into_iter().map(|(n, d)| (n.to_owned(), d))).unwrap()
    }

    /// Runs `trials` sequential suggestions against `loss` and returns the history.
    fn run(
        space: &Space,
        seed: u64,
        trials: u64,
        settings: &TpeSettings,
        loss: impl Fn(&Params) -> f64,
    ) -> Vec<Observation> {
        let mut history = Vec::new();
        for index in 0..trials {
            let params = suggest(space, &history, seed, index, settings);
            let value = loss(&params);
            history.push(Observation { params, loss: Some(value) });
        }
        history
    }

    fn best(history: &[Observation]) -> f64 {
        history.iter().filter_map(|o| o.loss).fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn startup_is_random_sampling_and_losses_without_value_do_not_count() {
        let space = space(vec![("x", Distribution::Uniform { min: 0.0, max: 1.0 })]);
        let settings = TpeSettings::default();
        let mut history: Vec<Observation> =
            (0..9).map(|i| Observation { params: random::sample(&space, 1, i), loss: Some(i as f64) }).collect();
        // Running trials (no loss), NaN losses and parameters outside the space are not observations.
        history.extend((0..20).map(|i| Observation { params: random::sample(&space, 2, i), loss: None }));
        history.push(Observation { params: random::sample(&space, 3, 0), loss: Some(f64::NAN) });
        history.push(Observation { params: [("x".to_owned(), Value::from(7.0))].into(), loss: Some(-1.0) });
        history.push(Observation { params: [("y".to_owned(), Value::from(0.5))].into(), loss: Some(-1.0) });
        for index in 0..5 {
            assert_eq!(suggest(&space, &history, 4, index, &settings), random::sample(&space, 4, index));
        }
        history.push(Observation { params: random::sample(&space, 1, 9), loss: Some(9.0) });
        assert_ne!(
            suggest(&space, &history, 4, 0, &settings),
            random::sample(&space, 4, 0),
            "10 losses start the model"
        );
    }

    #[test]
    fn a_space_built_without_validation_does_not_panic() {
        let space = Space {
            params: vec![
                ("a".to_owned(), Distribution::Uniform { min: 1.0, max: 0.0 }),
                ("b".to_owned(), Distribution::LogUniform { min: -1.0, max: 1.0 }),
                ("c".to_owned(), Distribution::IntUniform { min: 3, max: -3 }),
                ("d".to_owned(), Distribution::Categorical(vec![])),
            ],
        };
        let history: Vec<Observation> =
            (0..20).map(|i| Observation { params: random::sample(&space, 0, i), loss: Some(i as f64) }).collect();
        let params = suggest(&space, &history, 0, 20, &TpeSettings::default());
        assert_eq!(params.len(), 4);
        assert_eq!(params["d"], Value::Null);
    }

    #[test]
    fn deterministic_and_index_dependent() {
        let space = space(vec![
            ("a", Distribution::Uniform { min: -1.0, max: 1.0 }),
            ("b", Distribution::IntUniform { min: 0, max: 100 }),
        ]);
        let history = run(&space, 9, 30, &TpeSettings::default(), |p| p["a"].as_f64().unwrap().abs());
        let settings = TpeSettings::default();
        assert_eq!(suggest(&space, &history, 9, 30, &settings), suggest(&space, &history, 9, 30, &settings));
        let distinct: std::collections::BTreeSet<String> =
            (30..40).map(|i| serde_json::to_string(&suggest(&space, &history, 9, i, &settings)).unwrap()).collect();
        assert_eq!(distinct.len(), 10);
        assert_eq!(run(&space, 9, 30, &settings, |p| p["a"].as_f64().unwrap().abs()), history);
    }

    #[test]
    fn respects_every_distribution_in_both_modes() {
        let space = space(vec![
            ("const", Distribution::Constant(Value::from("adam"))),
            ("single", Distribution::Categorical(vec![Value::from(5)])),
            ("cat", Distribution::Categorical(vec![Value::from("relu"), Value::from("gelu"), Value::from(1.5)])),
            ("uni", Distribution::Uniform { min: -2.0, max: 3.0 }),
            ("log", Distribution::LogUniform { min: 1e-5, max: 1e-1 }),
            ("q", Distribution::QUniform { min: 16.0, max: 256.0, q: 16.0 }),
            ("qf", Distribution::QUniform { min: 0.0, max: 0.5, q: 0.05 }),
            ("qlog", Distribution::QLogUniform { min: 1.0, max: 1024.0, q: 4.0 }),
            ("int", Distribution::IntUniform { min: -3, max: 3 }),
        ]);
        let loss = |p: &Params| {
            let cat = if p["cat"] == "gelu" { 0.0 } else { 1.0 };
            cat + (p["uni"].as_f64().unwrap() - 1.0).powi(2)
                + (p["log"].as_f64().unwrap().log10() + 3.0).powi(2)
                + ((p["q"].as_f64().unwrap() - 64.0) / 64.0).powi(2)
                + (p["int"].as_f64().unwrap() - 2.0).abs()
        };
        for multivariate in [true, false] {
            let settings = TpeSettings { multivariate, ..TpeSettings::default() };
            let history = run(&space, 3, 80, &settings, loss);
            for observation in &history[10..] {
                let p = &observation.params;
                assert_eq!(p.len(), 9);
                assert_eq!(p["const"], "adam");
                assert_eq!(p["single"], 5);
                assert!(["\"relu\"", "\"gelu\"", "1.5"].contains(&p["cat"].to_string().as_str()), "{}", p["cat"]);
                assert!(p["uni"].is_f64() && (-2.0..=3.0).contains(&p["uni"].as_f64().unwrap()));
                assert!((1e-5..=1e-1).contains(&p["log"].as_f64().unwrap()));
                let q = p["q"].as_i64().expect("integral q gives integers");
                assert!((16..=256).contains(&q) && q % 16 == 0, "{q}");
                let qf = p["qf"].as_f64().unwrap();
                assert!((0.0..=0.5).contains(&qf) && ((qf / 0.05).round() * 0.05 - qf).abs() < 1e-12, "{qf}");
                let qlog = p["qlog"].as_i64().unwrap();
                assert!((4..=1024).contains(&qlog) && qlog % 4 == 0, "{qlog}");
                assert!((-3..=3).contains(&p["int"].as_i64().unwrap()));
            }
            // The model learns the categorical, integer and log-scale optima.
            let late = &history[50..];
            let count = |f: &dyn Fn(&Params) -> bool| late.iter().filter(|o| f(&o.params)).count();
            assert!(count(&|p| p["cat"] == "gelu") >= 20, "multivariate {multivariate}");
            assert!(count(&|p| p["int"] == 2) >= 15, "multivariate {multivariate}");
            assert!(
                count(&|p| (1e-4..1e-2).contains(&p["log"].as_f64().unwrap())) >= 20,
                "multivariate {multivariate}"
            );
            assert!(best(&history) < 0.3, "multivariate {multivariate}: {}", best(&history));
        }
    }

    #[test]
    fn beats_random_search_on_a_quadratic() {
        let space = space(vec![
            ("x", Distribution::Uniform { min: -10.0, max: 10.0 }),
            ("y", Distribution::Uniform { min: -10.0, max: 10.0 }),
        ]);
        let loss = |p: &Params| (p["x"].as_f64().unwrap() - 3.0).powi(2) + (p["y"].as_f64().unwrap() + 1.0).powi(2);
        for seed in 0..5 {
            let tpe = best(&run(&space, seed, 100, &TpeSettings::default(), loss));
            let random = (0..100).map(|i| loss(&random::sample(&space, seed, i))).fold(f64::INFINITY, f64::min);
            assert!(tpe < 0.01 && tpe < random / 10.0, "seed {seed}: tpe {tpe}, random {random}");
        }
    }

    #[test]
    fn parzen_density_matches_optuna() {
        // Reference values from optuna 5.0's _ParzenEstimator (default parameters) on the same
        // observations in [0, 1]^2.
        let uniform = Distribution::Uniform { min: 0.0, max: 1.0 };
        let dimension = Dimension::new(&uniform);
        let dims = [&dimension, &dimension];
        let to_points = |xs: &[[f64; 2]]| -> Vec<Vec<Coordinate>> {
            xs.iter().map(|p| p.iter().map(|&x| Coordinate::Continuous(x)).collect()).collect()
        };
        let good = to_points(&[[0.1, 0.2], [0.5, 0.9], [0.3, 0.3]]);
        let bad = to_points(&[[0.7, 0.2], [0.9, 0.95], [0.05, 0.6], [0.45, 0.5], [0.8, 0.7]]);
        let settings = TpeSettings::optuna();
        let good: Vec<&[Coordinate]> = good.iter().map(Vec::as_slice).collect();
        let bad: Vec<&[Coordinate]> = bad.iter().map(Vec::as_slice).collect();
        let l = Parzen::fit(&dims, &good, &settings, 8);
        let g = Parzen::fit(&dims, &bad, &settings, 8);
        for (x, expected_l, expected_g) in [
            ([0.25, 0.3], 0.78302981, -0.55060982),
            ([0.9, 0.1], -1.28844775, -0.44941226),
            ([0.5, 0.5], 0.21729105, 0.15248863),
        ] {
            let point: Vec<Coordinate> = x.iter().map(|&v| Coordinate::Continuous(v)).collect();
            assert!((l.log_density(&[0, 1], &point) - expected_l).abs() < 1e-6, "{x:?}");
            assert!((g.log_density(&[0, 1], &point) - expected_g).abs() < 1e-6, "{x:?}");
        }
    }

    #[test]
    fn gaussian_mass_is_accurate_in_the_body_and_tails() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b.abs().max(1.0);
        assert!(close(log_gauss_mass(-1.0, 1.0), 0.682_689_492_137_086_f64.ln()));
        assert!(close(log_gauss_mass(0.0, f64::INFINITY), 0.5f64.ln()));
        assert!(close(log_gauss_mass(5.0, 6.0), (2.866_515_718_791_939e-7_f64 - 9.865_876_450_377e-10).ln()));
        assert!(close(log_gauss_mass(-6.0, -5.0), log_gauss_mass(5.0, 6.0)));
        // Far tail: P(30 <= Z <= 31) ≈ φ(30) / 30, about e^-454.3; no underflow to -inf.
        let far = log_gauss_mass(30.0, 31.0);
        assert!((far - (-0.5 * 900.0 - HALF_LN_TAU - 30f64.ln())).abs() < 0.01, "{far}");
        // A narrow cell: mass ≈ width × density.
        assert!(close(
            log_gauss_mass(0.999, 1.001),
            (0.002 * (-0.5f64).exp() / (2.0 * std::f64::consts::PI).sqrt()).ln()
        ));
        assert_eq!(log_gauss_mass(1.0, 1.0), f64::NEG_INFINITY);
    }

    #[test]
    fn bandwidths_follow_the_neighbour_rule() {
        // Sorted 0.2, 0.3, 0.7 in [0, 1]: the ends use their inner gap, the middle the larger gap.
        let sigmas = neighbour_bandwidths(&[0.7, 0.2, 0.3], 0.0, 1.0);
        let expected = [0.4, 0.1, 0.4];
        assert!(sigmas.iter().zip(expected).all(|(s, e)| (s - e).abs() < 1e-12), "{sigmas:?}");
        // One observation: the larger distance to the range's ends.
        assert_eq!(neighbour_bandwidths(&[0.2], 0.0, 1.0), vec![0.8]);
        assert_eq!(recency_weight(0, 10), 1.0);
        assert!((recency_weight(0, 30) - 1.0 / 30.0).abs() < 1e-12);
        assert_eq!(recency_weight(4, 30), 1.0);
        assert_eq!(recency_weight(29, 30), 1.0);
    }
}
